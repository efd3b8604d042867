"""nanoGPT ``out_dir`` folders, saved and resumed as its ``train.py`` does.

nanoGPT is a script, not a package: ``frameworks.nanogpt_train`` is ``train.py``'s loop and save
(karpathy/nanoGPT 3adf61e154c3fe3fca428ad6bc3818b27a3b8291: one ``torch.save`` of ``model``,
``optimizer``, ``model_args``, ``iter_num``, ``best_val_loss`` and ``config`` straight over
``out_dir/ckpt.pt`` at every evaluation) around a module shaped as its ``GPT`` (the tied
``wte``/``lm_head`` included), and ``frameworks.nanogpt_resume`` is its ``--init_from=resume``.
(The same files made with ``model.py``'s own ``GPT`` class were checked by hand: the same verdicts.)
nanoGPT writes no pointer and no staging file, so those breaks have no nanoGPT form.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from frameworks import nanogpt_resume, nanogpt_train
from reports import codes

from ckptdoctor.pipelines.scan import scan

torch = pytest.importorskip("torch")


def test_a_healthy_out_dir_is_one_checkpoint_at_its_iteration(tmp_path, cli):
    out = tmp_path / "out-shakespeare-char"
    model, _, _ = nanogpt_train(out, 6)
    result = cli("verify", "--deep", "--json", out)
    assert result.exit_code == 0 and result.json["findings"] == []
    (run,) = result.json["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("nanogpt", "iteration", 6)
    (scanned,) = scan([str(out)]).runs
    assert f"--init_from=resume --out_dir={out}`" in scanned.resume_how
    path = cli("inspect", "--resume-path", out).stdout.strip()
    assert path == str(out)
    resumed, iter_num = nanogpt_resume(path)
    assert iter_num == 6 and torch.equal(resumed.lm_head.weight, model.lm_head.weight)


def test_a_save_killed_over_the_only_ckpt_leaves_nothing_to_resume_from(tmp_path, cli):
    out = tmp_path / "out"
    nanogpt_train(out, 4)
    data = (out / "ckpt.pt").read_bytes()
    (out / "ckpt.pt").write_bytes(data[: len(data) // 3])  # torch.save over the file, killed
    report = cli("inspect", "--json", out).json
    (run,) = report["runs"]
    assert run["layout"] == "nanogpt" and run["resume"] is None
    assert {"CKD110", "CKD203"} <= set(codes(report))
    with pytest.raises(Exception):  # noqa: B017 - what torch.load raises on a cut archive
        nanogpt_resume(out)
    refused = cli("repair", "--yes", "--min-age", "0s", out)
    assert refused.exit_code != 0 and (out / "ckpt.pt").read_bytes() == data[: len(data) // 3]


def test_a_ckpt_without_its_optimizer_is_ckd101_and_nanogpt_cannot_resume_it(tmp_path, inspect_json):
    out = tmp_path / "out"
    nanogpt_train(out, 4)
    state = torch.load(out / "ckpt.pt")
    del state["optimizer"]
    torch.save(state, out / "ckpt.pt")
    report = inspect_json(out).json
    assert "CKD101" in codes(report) and report["runs"][0]["resume"] is None
    with pytest.raises(KeyError):
        nanogpt_resume(out)


def test_a_compiled_models_prefixed_keys_are_still_its_weights(tmp_path, cli):
    out = tmp_path / "out"
    nanogpt_train(out, 2)
    state = torch.load(out / "ckpt.pt")
    state["model"] = {f"_orig_mod.{k}": v for k, v in state["model"].items()}  # saved from torch.compile's module
    torch.save(state, out / "ckpt.pt")
    result = cli("verify", "--json", out)
    # said, as info: nanoGPT's resume strips the prefix itself
    assert result.exit_code == 0 and [(f["code"], f["severity"]) for f in result.json["findings"]] == [("CKD306", "info")]
    assert result.json["runs"][0]["resume"]["index"] == 2
    assert nanogpt_resume(out)[1] == 2


def test_prune_and_repair_leave_the_one_checkpoint(tmp_path, cli):
    out = tmp_path / "out"
    nanogpt_train(out, 4)
    before = (out / "ckpt.pt").read_bytes()
    assert cli("prune", "--keep-last", "1", "--yes", "--min-age", "0s", out).exit_code == 0
    assert cli("repair", "--yes", "--min-age", "0s", out).exit_code == 0
    assert (out / "ckpt.pt").read_bytes() == before
    assert nanogpt_resume(out)[1] == 4


# --- recognition -------------------------------------------------------------------------------


def test_another_programs_ckpt_pt_is_not_nanogpt(tmp_path, inspect_json):
    folder = tmp_path / "loop"
    folder.mkdir()
    torch.save({"model": {"w": torch.zeros(2)}, "optimizer": {"state": {}, "param_groups": []}}, folder / "ckpt.pt")
    report = inspect_json(folder).json
    assert report["runs"] == [] and report["unrecognised"] == [str(folder / "ckpt.pt")]


def test_a_ckpt_pt_beside_numbered_saves_is_a_torch_run(tmp_path, inspect_json):
    folder = tmp_path / "loop"
    nanogpt_train(folder, 2)
    for step in (100, 200):
        torch.save({"model": {}, "optimizer": {}}, folder / f"ckpt_{step}.pt")
    (run,) = inspect_json(folder).json["runs"]
    assert run["layout"] == "torch"


@pytest.mark.slow
def test_out_dirs_side_by_side_are_runs_of_their_own(tmp_path, inspect_json):
    for name, iters in (("ckpt_1", 2), ("ckpt_2", 4), ("out", 6)):
        nanogpt_train(tmp_path / "sweep" / name, iters)
    runs = inspect_json(tmp_path / "sweep").json["runs"]
    assert sorted((Path(r["path"]).name, r["layout"], r["resume"]["index"]) for r in runs) == [
        ("ckpt_1", "nanogpt", 2), ("ckpt_2", "nanogpt", 4), ("out", "nanogpt", 6),
    ]  # fmt: skip
