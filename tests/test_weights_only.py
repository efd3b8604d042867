"""Roles from content and weights-only runs (issue 14, items 3 and 4).

`inspect` confirms a bundled file's roles from the top-level keys of its pickle (skimmed, never
loaded); a run that saves weights alone by design is one CKD107 note and a resume point flagged
weights only, and each framework resumes the way the fix says."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path

import pytest
from frameworks import copy_run, hf_trainer, lightning_fit, tiny_module
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptdoctor.readers import _skim, torchzip

torch = pytest.importorskip("torch")


def hf_train(output: Path, save_only_model: bool, steps: int, resume: Path | None = None) -> int:
    """A real HF Trainer run of ``steps`` steps saving every 2 (resumed from ``resume``); the step it ended at."""
    trainer = hf_trainer(output, steps, save_only_model=save_only_model)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    return int(trainer.state.global_step)


def saved(obj: object, protocol: int = 2) -> tuple[bytes, object]:
    """The ``data.pkl`` of ``torch.save(obj)``, and what ``torch.load`` reads back from the archive."""
    buffer = io.BytesIO()
    torch.save(obj, buffer, pickle_protocol=protocol)
    with zipfile.ZipFile(buffer) as archive:
        data = archive.read(archive.namelist()[0])
    buffer.seek(0)
    return data, torch.load(buffer, weights_only=False)  # the test's own objects


def tiny(inputs: int = 3, outputs: int = 2) -> tuple[object, object]:
    """A linear model and its AdamW state after one step (the state is there to save)."""
    model = torch.nn.Linear(inputs, outputs)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, inputs)).sum().backward()
    optimizer.step()
    return model, optimizer


# --- the skim: the keys a real unpickler sees, or nothing -------------------------------------


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_the_skim_reads_the_keys_torch_load_sees(protocol):
    model, optimizer = tiny()
    cases = [
        {
            "state_dict": model.state_dict(),
            "optimizer_states": [optimizer.state_dict()],
            "epoch": 3,
            "callbacks": {"x": {"kth_value": torch.tensor(float("inf"))}},
        },
        model.state_dict(),
        optimizer.state_dict(),
        {"model": model.state_dict(), "args": {"lr": 0.1}, 7: "int key"},
        {"a": 1, "a2": [1, 2, {"b": torch.ones(2)}], "c": torch.zeros(1)},
    ]
    for case in cases:
        data, loaded = saved(case, protocol)
        skimmed = _skim.top_level(data)
        if any(not isinstance(key, str) for key in loaded):
            assert skimmed is None  # a non-string key: the skim does not guess
            continue
        assert skimmed is not None and list(skimmed.keys) == list(loaded)
        assert skimmed.tensor_values == sum(isinstance(v, torch.Tensor) for v in loaded.values())


def test_the_skim_gives_up_on_what_torch_never_writes():
    import collections

    assert _skim.top_level(pickle.dumps({"a": 1}, protocol=4)) == _skim.Skimmed(("a",), 0, (("a", 1),))
    assert _skim.top_level(pickle.dumps({"a": collections.OrderedDict()}, protocol=4)) == _skim.Skimmed(("a",), 0)
    assert _skim.top_level(pickle.dumps({"a": 1}, protocol=0)) is None  # text opcodes
    assert _skim.top_level(b"") is None
    assert _skim.top_level(saved([1, 2])[0]) == _skim.Skimmed((), 0)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_the_skim_never_raises_on_garbage(data):
    result = _skim.top_level(b"\x80\x02}q\x00(" + data)
    assert result is None or isinstance(result, _skim.Skimmed)


# --- inspect confirms roles; unread roles are not a bare "complete" -----------------------------


def bundle_run(folder: Path, parts_by_epoch: dict[int, tuple[str, ...]], **save: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model, optimizer = tiny()
    for epoch, parts in parts_by_epoch.items():
        state = {"epoch": epoch}
        if "model" in parts:
            state["model"] = model.state_dict()
        if "optimizer" in parts:
            state["optimizer"] = optimizer.state_dict()
        torch.save(state, folder / f"checkpoint_{epoch}.pt", **save)
    return folder


def test_inspect_reads_a_bundles_roles_and_agrees_with_verify(tmp_path, cli):
    run = bundle_run(tmp_path / "run", {1: ("model", "optimizer"), 2: ("model", "optimizer"), 3: ("model",)})
    for command in ("inspect", "verify"):
        report = cli(command, "--json", run).json
        statuses = {c["index"]: c["status"] for c in report["runs"][0]["checkpoints"]}
        assert statuses == {1: "complete", 2: "complete", 3: "incomplete"}, command
        assert report["runs"][0]["resume"]["index"] == 2
        assert ("CKD101", 3) in {(f["code"], f["index"]) for f in report["findings"]}
        assert report["runs"][0]["weights_only"] is None


def test_roles_inspect_cannot_read_are_not_a_bare_complete(tmp_path, cli, monkeypatch):
    run = bundle_run(tmp_path / "run", {1: ("model", "optimizer"), 2: ("model", "optimizer")}, _use_new_zipfile_serialization=False)
    report = cli("inspect", "--json", run).json
    assert [c["status"] for c in report["runs"][0]["checkpoints"]] == ["complete-roles-unread"] * 2
    assert report["runs"][0]["resume"]["index"] == 2  # still the place to resume from, as far as names tell
    human = cli("inspect", run).stdout
    assert "complete (roles not read: run verify)" in human
    verified = cli("verify", "--json", run).json
    assert [c["status"] for c in verified["runs"][0]["checkpoints"]] == ["complete"] * 2

    # a data.pkl longer than inspect skims is not read either
    zipped = bundle_run(tmp_path / "zipped", {1: ("model", "optimizer")})
    monkeypatch.setattr(torchzip, "SKIM_LIMIT", 64)
    report = cli("inspect", "--json", zipped).json
    assert report["runs"][0]["checkpoints"][0]["status"] == "complete-roles-unread"


# --- weights-only runs: one note, the newest weights, and the framework's way forward -----------


def test_bundles_with_no_optimizer_anywhere_are_a_weights_only_run(tmp_path, cli):
    run = bundle_run(tmp_path / "run", {1: ("model",), 2: ("model",)})
    result = cli("inspect", "--json", run)
    assert result.exit_code == 0
    report = result.json
    assert [(f["code"], f["severity"]) for f in report["findings"]] == [("CKD107", "info")]
    assert report["runs"][0]["resume"] == {**report["runs"][0]["resume"], "index": 2, "weights_only": True}
    # what the fix says for a plain torch run: the weights load, into a fresh optimizer
    model = torch.nn.Linear(3, 2)
    model.load_state_dict(torch.load(run / "checkpoint_2.pt", weights_only=True)["model"])


def test_lightning_save_weights_only_resumes_as_the_fix_says(tmp_path, cli):
    lightning_fit(tmp_path, 2, save_weights_only=True, save_top_k=-1)
    folder = tmp_path / "checkpoints"
    for command in ("inspect", "verify"):
        result = cli(command, "--json", folder)
        assert result.exit_code == 0, command
        report = result.json
        assert [f["code"] for f in report["findings"]] == ["CKD107"], command
        resume = report["runs"][0]["resume"]
        assert (resume["index"], resume["weights_only"]) == (8, True)
    fix = report["runs"][0]["resume"]["how"]
    assert "load_from_checkpoint" in fix and "ckpt_path" in fix
    named = Path(resume["paths"][0])

    # Lightning itself: fit(ckpt_path=...) refuses it, as the fix warns ...
    with pytest.raises(KeyError, match="contains only the model"):
        lightning_fit(tmp_path / "refused", 3, ckpt_path=str(named), save_top_k=0)
    # ... and the weights load into a new fit, as the fix says
    restored = type(tiny_module()).load_from_checkpoint(named)
    saved = torch.load(named, weights_only=True)["state_dict"]
    assert torch.equal(restored.layer.weight, saved["layer.weight"])


@pytest.mark.slow
def test_hf_save_only_model_is_not_damage_and_hf_resumes_from_the_named_folder(tmp_path, cli):
    output = tmp_path / "out"
    hf_train(output, save_only_model=True, steps=4)
    assert not (output / "checkpoint-4" / "optimizer.pt").exists()
    result = cli("inspect", "--json", output)
    assert result.exit_code == 0
    report = result.json
    assert [f["code"] for f in report["findings"]] == ["CKD107"]
    assert "save_only_model=True" in report["findings"][0]["message"]
    resume = report["runs"][0]["resume"]
    assert (resume["index"], resume["weights_only"]) == (4, True)
    # verify also notes (CKD402) the transformers classes training_args.bin pickles, as it always has
    assert [f["code"] for f in cli("verify", "--json", output).json["findings"] if f["code"] != "CKD402"] == ["CKD107"]
    # HF resumes from it as usual, with a fresh optimizer
    assert hf_train(output, save_only_model=True, steps=6, resume=output / "checkpoint-4") == 6


def test_a_missing_optimizer_without_the_flag_is_still_damage(hf_trained, tmp_path, cli):
    output = copy_run(hf_trained, tmp_path / "out")
    (output / "checkpoint-6" / "optimizer.pt").unlink()
    report = cli("inspect", "--json", output).json
    assert "CKD107" not in [f["code"] for f in report["findings"]]
    assert ("CKD101", 6) in {(f["code"], f["index"]) for f in report["findings"]}
    assert report["runs"][0]["resume"]["index"] == 4
    assert os.path.exists(output / "checkpoint-4" / "optimizer.pt")


# --- other trainers' keys (item 10): each bundle written with the keys its framework's saving code uses ---

TRAINERS = {
    # fairseq/trainer.py Trainer.state_dict (facebookresearch/fairseq@3d262bb)
    "fairseq": lambda model, optimizer: {
        "args": None, "cfg": {"lr": [0.1]}, "model": model.state_dict(), "criterion": None,
        "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "AdamW",
                               "lr_scheduler_state": {"best": 1.0}, "num_updates": 3}],
        "task_state": {}, "extra_state": {"metrics": {}, "previous_training_time": 1.0},
        "last_optimizer_state": optimizer.state_dict(),
    },
    # composer/core/state.py State.state_dict + utils/checkpoint.py _save_checkpoint (mosaicml/composer@6405188)
    "composer": lambda model, optimizer: {
        "state": {"model": model.state_dict(), "optimizers": {"AdamW": optimizer.state_dict()},
                  "schedulers": {"LambdaLR": {"last_epoch": 3}}, "run_name": "run", "rank_zero_seed": 17},
        "rng": [{"python": 1}],
    },
    # mmengine/runner/runner.py Runner.save_checkpoint (open-mmlab/mmengine@2543429)
    "mmengine": lambda model, optimizer: {
        "meta": {"epoch": 3, "iter": 30}, "state_dict": model.state_dict(), "message_hub": {"log_scalars": {}},
        "optimizer": optimizer.state_dict(), "param_schedulers": [{"last_step": 3}],
    },
    # deepspeed/runtime/engine.py _common_checkpoint_state under ZeRO (deepspeedai/DeepSpeed@edaa722)
    "deepspeed-zero": lambda model, optimizer: {
        "module": model.state_dict(), "optimizer": None, "lr_scheduler": None, "global_steps": 3,
    },
}  # fmt: skip
EXPECTED_ROLES = {
    "fairseq": ["model", "optimizer", "scheduler"],
    "composer": ["model", "optimizer", "scheduler"],
    "mmengine": ["model", "optimizer", "scheduler"],
    "deepspeed-zero": ["model"],  # optimizer=None holds nothing: the state is in the ZeRO files
}


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_other_trainers_bundles_are_read_as_their_roles(tmp_path, cli, trainer):
    model, optimizer = tiny()
    run = tmp_path / trainer
    run.mkdir()
    torch.save(TRAINERS[trainer](model, optimizer), run / "checkpoint_3.pt")
    for command in ("inspect", "verify"):
        (checkpoint,) = cli(command, "--json", run).json["runs"][0]["checkpoints"]
        (file,) = checkpoint["files"]
        assert sorted(file["roles"]) == EXPECTED_ROLES[trainer], command


def test_the_skim_and_the_full_walk_agree_on_keys(tmp_path, cli):
    model, optimizer = tiny()
    for trainer, build in TRAINERS.items():
        path = tmp_path / f"{trainer}.pt"
        torch.save(build(model, optimizer), path)
        data, _ = saved(build(model, optimizer))
        skimmed = _skim.top_level(data)
        (checkpoint,) = cli("verify", "--json", path).json["runs"][0]["checkpoints"]
        assert skimmed is not None and sorted(skimmed.keys) == sorted(checkpoint["files"][0]["keys"]), trainer


def test_a_protocol_4_save_is_ckd402_because_torch_weights_only_refuses_it(tmp_path, cli):
    """torch.save(..., pickle_protocol=4) writes FRAME and MEMOIZE, which torch.load's default
    weights_only unpickler refuses: not damage, not unsafe, but not loadable as torch defaults."""
    run = bundle_run(tmp_path / "run", {1: ("model", "optimizer"), 2: ("model", "optimizer")}, pickle_protocol=4)
    with pytest.raises(Exception, match="Unsupported operand"):
        torch.load(run / "checkpoint_2.pt", weights_only=True)
    inspected = cli("inspect", "--json", run).json
    assert [c["status"] for c in inspected["runs"][0]["checkpoints"]] == ["complete", "complete"]  # roles read
    for args in (("verify",), ("verify", "--load")):
        report = cli(*args, "--json", run).json
        assert {(f["code"], f["severity"]) for f in report["findings"]} == {("CKD402", "warning")}, args
        assert all("weights_only=True" in f["message"] and "FRAME" in f["message"] for f in report["findings"])
    assert torch.load(run / "checkpoint_2.pt", weights_only=False)["optimizer"]["param_groups"]  # as the fix says


def test_a_lightning_run_stripped_of_its_optimizer_is_damage_not_design(tmp_path, cli):
    """save_weights_only writes neither optimizer_states nor lr_schedulers: a checkpoint that keeps
    its schedulers but lost its optimizer state was stripped, and Lightning cannot resume it."""
    lightning_fit(tmp_path, 2, save_top_k=-1)
    folder = tmp_path / "checkpoints"
    for path in folder.glob("*.ckpt"):
        state = torch.load(path, weights_only=False)  # the test's own file
        del state["optimizer_states"]
        torch.save(state, path)
    report = cli("inspect", "--json", folder).json
    assert "CKD107" not in [f["code"] for f in report["findings"]]
    assert {f["code"] for f in report["findings"]} >= {"CKD101", "CKD110"}
    with pytest.raises(KeyError, match="optimizer"):
        lightning_fit(tmp_path / "again", 3, ckpt_path=str(sorted(folder.glob("*.ckpt"))[-1]), save_top_k=0)


@pytest.mark.parametrize("protocol", [2, 4])
def test_an_empty_or_overwritten_optimizer_state_is_none(tmp_path, cli, protocol):
    """`optimizer_states=[]` makes Lightning resume with a fresh optimizer, silently; a key set a
    second time holds its last value. inspect's skim and verify's walk agree with the dict."""
    model, optimizer = tiny()
    run = tmp_path / "run"
    run.mkdir()
    torch.save(
        {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], "lr_schedulers": []},
        run / "epoch=1.ckpt",
        pickle_protocol=protocol,
    )
    torch.save(
        {"state_dict": model.state_dict(), "optimizer_states": [], "lr_schedulers": []}, run / "epoch=2.ckpt", pickle_protocol=protocol
    )
    for command in ("inspect", "verify"):
        report = cli(command, "--json", run).json
        assert ("CKD101", 2) in {(f["code"], f["index"]) for f in report["findings"]}, command
        assert report["runs"][0]["resume"]["index"] == 1, command

    data, _ = saved({"optimizer_states": [{"state": {}}]})
    # the same key set again to None before STOP, as a second SETITEM does: the last value counts
    patched = data[:-1] + b"X\x10\x00\x00\x00optimizer_statesNs."
    assert _skim.top_level(patched) == _skim.Skimmed((), 0)
    assert pickle.loads(patched) == {"optimizer_states": None}  # plain types only: the real reading


@pytest.mark.slow
def test_a_run_resumed_with_save_only_model_resumes_from_its_newest_weights(tmp_path, cli):
    """Steps 2 and 4 saved whole, then the run resumed from step 4 with save_only_model=True: HF
    resumes from step 6 (weights only), whatever order the folders list in."""
    output = tmp_path / "out"
    hf_train(output, save_only_model=False, steps=4)
    hf_train(output, save_only_model=True, steps=6, resume=output / "checkpoint-4")
    assert not (output / "checkpoint-6" / "optimizer.pt").exists() and (output / "checkpoint-4" / "optimizer.pt").exists()
    report = cli("inspect", "--json", output).json
    assert [f["code"] for f in report["findings"]] == ["CKD107"]
    assert (report["runs"][0]["resume"]["index"], report["runs"][0]["resume"]["weights_only"]) == (6, True)
    assert hf_train(output, save_only_model=True, steps=8, resume=output / "checkpoint-6") == 8
