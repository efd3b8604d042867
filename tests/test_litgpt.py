"""LitGPT ``out_dir`` folders made by litgpt 0.5.13 itself (a tiny ``GPT`` on a CPU Fabric), resumed
with its own ``find_resume_path`` and ``fabric.load``.

``frameworks.LitGptTraining`` saves with LitGPT's code (``pretrain.save_checkpoint``, the
``fabric.save`` of ``finetune/full.py``, ``finetune.lora.save_lora_checkpoint``, with
``save_config``, ``save_hyperparameters`` and ``save_prompt_style``), so the trees are LitGPT's to
the byte. LitGPT is not in the ``test`` extra (it pins ``huggingface-hub<1.4``, which holds
transformers back to 5.3.0): these tests skip where it is missing; in a venv of their own,
``pip install torch==2.13.0 -e '.[test,litgpt]'`` brings it. LitGPT writes no pointer file and no staging file in its folders, so those breaks have
no LitGPT form: its "latest" is ``find_resume_path``, which the tests hold to ckptdoctor's word.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from frameworks import LitGptTraining
from reports import codes

from ckptdoctor.pipelines.scan import scan

pytest.importorskip("litgpt", reason="litgpt is not installed (pip install torch==2.13.0 -e '.[litgpt]')")
torch = pytest.importorskip("torch")
find_resume_path = pytest.importorskip("litgpt.utils").find_resume_path


def run_of(report: dict, folder: Path) -> dict:
    (run,) = [r for r in report["runs"] if r["path"] == str(folder)]
    return run


def test_a_full_finetune_resumes_where_ckptdoctor_and_find_resume_path_agree(tmp_path, cli):
    training = LitGptTraining(tmp_path / "out" / "finetune" / "full").train(6)
    training.save(final=True)
    result = cli("verify", "--deep", "--json", training.out_dir)
    assert result.exit_code == 0, result.json["findings"]
    run = run_of(result.json, training.out_dir)
    assert (run["layout"], run["unit"], [c["index"] for c in run["checkpoints"]]) == ("litgpt", "step", [2, 4, 6])
    path = cli("inspect", "--resume-path", training.out_dir).stdout.strip().splitlines()[0]
    assert path == str(training.out_dir / "step-000006" / "lit_model.pth")
    resumed = training.resume("auto")
    assert resumed["path"] == Path(path) and resumed["step_count"] == 6
    assert resumed["scheduler"].last_epoch == 6
    (scanned,) = [r for r in scan([str(training.out_dir)]).runs if r.path == str(training.out_dir)]
    assert "`--resume auto`" in scanned.resume_how
    # final/ holds the model alone: a run of its own, weights only, not what --resume loads
    final = run_of(result.json, training.out_dir / "final")
    assert final["weights_only"] and final["resume"]["index"] == 0
    with pytest.raises(KeyError):
        training.resume(training.out_dir / "final" / "lit_model.pth")


def test_pretraining_folders_are_padded_to_eight_digits_and_final_resumes(tmp_path, cli):
    training = LitGptTraining(tmp_path / "out" / "pretrain", "pretrain").train(4)
    training.save(final=True)
    report = cli("verify", "--json", training.out_dir).json
    assert report["findings"] == []
    run = run_of(report, training.out_dir)
    assert [Path(c["files"][0]["path"]).parent.name for c in run["checkpoints"]] == ["step-00000002", "step-00000004"]
    assert run["resume"]["index"] == 4 and not run["weights_only"]
    assert training.resume("auto")["path"] == training.out_dir / "step-00000004" / "lit_model.pth"
    assert training.resume(training.out_dir / "final" / "lit_model.pth")["step_count"] == 4


def test_a_cut_newest_save_is_what_resume_auto_would_pick_and_repair_moves_it(tmp_path, cli):
    training = LitGptTraining(tmp_path / "out").train(6)
    newest = training.out_dir / "step-000006" / "lit_model.pth"
    newest.write_bytes(newest.read_bytes()[:5000])  # the move from $TMPDIR across filesystems, killed
    report = cli("inspect", "--json", training.out_dir).json
    run = run_of(report, training.out_dir)
    assert run["resume"]["index"] == 4
    assert {"CKD114", "CKD203"} <= set(codes(report))
    assert find_resume_path("auto", training.out_dir) == newest  # LitGPT itself picks the cut file...
    with pytest.raises(Exception):  # noqa: B017 - ... and fails on it
        training.resume("auto")
    done = cli("repair", "--yes", "--min-age", "0s", training.out_dir)
    assert done.exit_code == 0, done.stdout + done.stderr
    assert not (training.out_dir / "step-000006").exists()
    resumed = training.resume("auto")
    assert resumed["path"] == training.out_dir / "step-000004" / "lit_model.pth" and resumed["step_count"] == 4
    assert "CKD114" not in codes(cli("inspect", "--json", training.out_dir).json)


def test_a_cut_newest_pretraining_save_leaves_the_older_steps_resumable(tmp_path, cli):
    # pretrain.save_checkpoint saves no scheduler: the cut file's unread keys must not ask it of the others
    training = LitGptTraining(tmp_path / "out", "pretrain").train(6)
    newest = training.out_dir / "step-00000006" / "lit_model.pth"
    newest.write_bytes(newest.read_bytes()[:5000])
    report = cli("inspect", "--json", training.out_dir).json
    run = run_of(report, training.out_dir)
    assert [c["status"] for c in run["checkpoints"]] == ["complete", "complete", "partial"]
    assert run["resume"]["index"] == 4
    # one cause, the cut save of step 6 (CKD117), standing for what it left: a file cut short
    # (CKD114) and a pickle that ends early (CKD203)
    assert set(codes(report)) == {"CKD117", "CKD114", "CKD203"}
    (cause,) = [f for f in report["findings"] if f["code"] == "CKD117"]
    parts = {f["code"] for f in report["findings"] if f.get("part_of") == {"code": "CKD117", "index": cause["index"]}}
    assert cause["index"] == 6 and parts == {"CKD114", "CKD203"}, report["findings"]
    path = cli("inspect", "--resume-path", training.out_dir).stdout.strip()
    assert path == str(training.out_dir / "step-00000004" / "lit_model.pth")
    resumed = training.resume(path)  # `litgpt pretrain --resume PATH`: fabric.load, strict
    assert resumed["step_count"] == 4 and resumed["iter_num"] == 4 and "scheduler" not in resumed


def test_an_fsdp_pretraining_save_is_one_file_with_the_optimizer_keyed_by_parameter_names(tmp_path, cli):
    # litgpt/pretrain.py (setup): FSDPStrategy(state_dict_type="full") on more than one device; Fabric's
    # FSDPStrategy.save_checkpoint then has rank 0 torch.save one file: the full model state dict and
    # FSDP.optim_state_dict, keyed by parameter names (FSDP needs a GPU: torch's own get_optimizer_state_dict
    # makes that form here). LitGPT writes no DCP folder: every script of 0.5.13 passes "full".
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    training = LitGptTraining(tmp_path / "out", "pretrain").train(4)
    model, optimizer = training.state["model"], training.state["optimizer"]
    for path in training.out_dir.glob("step-*/lit_model.pth"):
        state = torch.load(path)
        state["optimizer"] = get_optimizer_state_dict(model, optimizer)
        assert all(isinstance(key, str) for key in state["optimizer"]["state"])
        torch.save(state, path)
    report = cli("verify", "--deep", "--json", training.out_dir).json
    assert report["findings"] == [] and run_of(report, training.out_dir)["resume"]["index"] == 4
    resumed = training.resume(cli("inspect", "--resume-path", training.out_dir).stdout.strip())
    assert resumed["step_count"] == 4 and resumed["optimizer"].state_dict()["state"]


def test_a_step_folder_killed_before_its_file_arrived_is_skipped_by_both(tmp_path, cli):
    training = LitGptTraining(tmp_path / "out").train(4)
    (training.out_dir / "step-000006").mkdir()  # mkdir(parents=True) ran, fabric.save did not finish
    report = cli("inspect", "--json", training.out_dir).json
    run = run_of(report, training.out_dir)
    assert run["checkpoints"][-1]["status"] == "incomplete" and run["resume"]["index"] == 4
    assert "CKD114" not in codes(report)
    assert training.resume("auto")["path"] == training.out_dir / "step-000004" / "lit_model.pth"


def test_a_save_without_its_optimizer_is_ckd101_and_fabric_load_refuses_it(tmp_path, cli):
    training = LitGptTraining(tmp_path / "out").train(4)
    path = training.out_dir / "step-000004" / "lit_model.pth"
    state = torch.load(path)
    del state["optimizer"]
    torch.save(state, path)
    report = cli("inspect", "--json", training.out_dir).json
    assert "CKD101" in codes(report) and "CKD114" in codes(report)
    assert run_of(report, training.out_dir)["resume"]["index"] == 2
    with pytest.raises(KeyError):
        training.resume("auto")
    assert training.resume(cli("inspect", "--resume-path", training.out_dir).stdout.strip())["step_count"] == 2


def test_lora_saves_are_weights_only_and_nothing_resumes_them(tmp_path, cli):
    training = LitGptTraining(tmp_path / "out", "lora").train(4)
    report = cli("verify", "--json", training.out_dir).json
    assert codes(report) == ["CKD107"]
    run = run_of(report, training.out_dir)
    assert run["resume"]["index"] == 4 and run["weights_only"]
    assert training.resume("auto")["path"] is None  # find_resume_path globs *.pth only


def test_prune_keeps_the_newest_steps(tmp_path, cli):
    training = LitGptTraining(tmp_path / "out").train(8)
    result = cli("prune", "--keep-last", "2", "--yes", "--min-age", "0s", training.out_dir)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert sorted(p.name for p in training.out_dir.glob("step-*")) == ["step-000006", "step-000008"]
    assert training.resume("auto")["step_count"] == 8


def test_a_converted_base_model_is_no_run_and_a_torch_loop_is_not_litgpt(tmp_path, inspect_json):
    training = LitGptTraining(tmp_path / "out").train(2)
    base = tmp_path / "checkpoints" / "tiny"
    base.mkdir(parents=True)
    shutil.copy(training.out_dir / "step-000002" / "lit_model.pth", base)
    shutil.copy(training.out_dir / "step-000002" / "model_config.yaml", base)
    assert inspect_json(base).json["runs"] == []
    loop = tmp_path / "loop"
    loop.mkdir()
    for step in (100, 200):
        torch.save({"model": {}, "optimizer": {}}, loop / f"step-{step:06d}.pt")
    assert [r["layout"] for r in inspect_json(loop).json["runs"]] == ["torch"]
