"""Lightning runs: a real `Trainer.fit` with `ModelCheckpoint`, then broken as real saves break."""

from __future__ import annotations

import io
import os
import shutil
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from frameworks import copy_run, lightning_fit, tiny_module

from ckptdoctor import api
from ckptdoctor.readers.sample import HEAD, TAIL


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> Path:
    """`lightning_logs/version_0/checkpoints` after 4 epochs: save_top_k=2 and save_last."""
    pytest.importorskip("lightning")
    from lightning.pytorch.loggers import CSVLogger

    root = tmp_path_factory.mktemp("pl")
    for _ in range(2):  # two fits: version_0 and version_1, as a re-run leaves them
        lightning_fit(root, 4, logger=CSVLogger(root), dirpath=None, save_top_k=2, monitor="train_loss", save_last=True)
    return root


@pytest.fixture
def root(fitted: Path, tmp_path: Path) -> Path:
    return copy_run(fitted, tmp_path / "pl")


@pytest.fixture
def every_2_steps(lightning_every_2_steps: Path, tmp_path: Path) -> Path:
    """A copy of the shared fit that saved every 2 steps (steps 2, 4, 6 and 8), at ``tmp_path/checkpoints``."""
    return copy_run(lightning_every_2_steps, tmp_path / "checkpoints")


def checkpoints(root: Path, version: int = 0) -> Path:
    return root / "lightning_logs" / f"version_{version}" / "checkpoints"


def newest(folder: Path) -> Path:
    return max((p for p in folder.glob("epoch=*.ckpt")), key=lambda p: int(p.name.split("=")[1].split("-")[0]))


def test_a_healthy_fit_is_quiet_with_one_run_per_version(root, inspect_json):
    result = inspect_json(root)
    report = result.json
    assert result.exit_code == 0 and report["findings"] == []
    assert [Path(run["path"]).parent.name for run in report["runs"]] == ["version_0", "version_1"]
    for run in report["runs"]:
        # the default template `{epoch}-{step}` names a step: one checkpoint per step (issue 14, item 2)
        assert (run["layout"], run["unit"]) == ("lightning", "step")
        assert [c["index"] for c in run["checkpoints"]] == [12, 16]
        assert run["resume"]["index"] == 16
        assert [Path(f["path"]).name for f in run["loose_files"]] == ["last.ckpt"]


def test_a_truncated_last_ckpt_is_ckd203_and_the_resume_point_stays(root, inspect_json):
    last = checkpoints(root) / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])
    report = inspect_json(checkpoints(root)).json
    (cut,) = [f for f in report["findings"] if f["code"] == "CKD203"]
    assert cut["path"].endswith("last.ckpt")
    assert report["runs"][0]["resume"]["index"] == 16


def test_a_truncated_newest_checkpoint_moves_the_resume_point(root, inspect_json):
    target = newest(checkpoints(root))
    target.write_bytes(target.read_bytes()[:-50])
    report = inspect_json(checkpoints(root)).json
    (cut,) = [f for f in report["findings"] if f["code"] == "CKD203"]
    assert cut["index"] == 16
    # last.ckpt, a whole copy of step 16 (save_last=True), stands for it: ckpt_path="last" resumes there
    assert (report["runs"][0]["resume"]["index"], Path(report["runs"][0]["resume"]["path"]).name) == (16, "last.ckpt")
    last = checkpoints(root) / "last.ckpt"
    last.write_bytes(last.read_bytes()[:-50])
    report = inspect_json(checkpoints(root)).json
    assert report["runs"][0]["resume"]["index"] == 12
    how = report["runs"][0]["resume"]["how"]
    assert 'ckpt_path="' in how and "epoch=2" in how


def test_a_dangling_last_ckpt_symlink_is_ckd113(root, inspect_json):
    folder = checkpoints(root)
    (folder / "last.ckpt").unlink()
    os.symlink("epoch=9-step=99.ckpt", folder / "last.ckpt")
    report = inspect_json(folder).json
    (stale,) = [f for f in report["findings"] if f["code"] == "CKD113"]
    assert stale["path"].endswith("last.ckpt")
    assert report["runs"][0]["resume"]["index"] == 16


def test_a_step_template_is_indexed_by_step(tmp_path, inspect_json):
    torch = pytest.importorskip("torch")
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for step in (100, 200):
        torch.save({"state_dict": {}, "pytorch-lightning_version": "2.6.0"}, folder / f"step={step}.ckpt")
    run = inspect_json(folder).json["runs"][0]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("lightning", "step", 200)


def test_versioned_names_join_their_checkpoint(tmp_path, inspect_json):
    torch = pytest.importorskip("torch")
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for name, step in (("epoch=0-step=10.ckpt", 10), ("epoch=0-step=10-v1.ckpt", 10), ("epoch=1-val_loss=0.21.ckpt", 20)):
        torch.save({"epoch": int(name[6]), "global_step": step, "state_dict": {}}, folder / name)
    run = inspect_json(folder).json["runs"][0]
    # the name without a step is placed by the global_step its file records
    assert [(c["index"], len(c["files"])) for c in run["checkpoints"]] == [(10, 2), (20, 1)]


def test_a_last_ckpt_symlink_to_a_cut_checkpoint_is_ckd113(root, inspect_json):
    folder = checkpoints(root)
    target = newest(folder)
    (folder / "last.ckpt").unlink()
    os.symlink(target.name, folder / "last.ckpt")
    assert [f["code"] for f in inspect_json(folder).json["findings"]] == []
    target.write_bytes(target.read_bytes()[:-10])
    report = inspect_json(folder).json
    (stale,) = [f for f in report["findings"] if f["code"] == "CKD113"]
    assert stale["path"].endswith("last.ckpt") and target.name in stale["message"]


def test_checkpoints_saved_every_n_steps_are_one_per_step_and_lightning_resumes_from_the_one_named(
    every_2_steps, tmp_path, cli, inspect_json
):
    """Issue 14, item 2: `epoch=0-step=2.ckpt`, `epoch=0-step=4.ckpt`, … were merged into one epoch."""
    folder = every_2_steps  # 4 steps an epoch: two saves in each
    assert sorted(p.name for p in folder.iterdir()) == [
        "epoch=0-step=2.ckpt",
        "epoch=0-step=4.ckpt",
        "epoch=1-step=6.ckpt",
        "epoch=1-step=8.ckpt",
    ]
    newest = folder / "epoch=1-step=8.ckpt"
    newest.write_bytes(newest.read_bytes()[:-100])  # killed mid-save
    old = time.time() - 86400
    for path in folder.iterdir():
        os.utime(path, (old, old))
    run = inspect_json(folder).json["runs"][0]
    assert (run["unit"], [c["index"] for c in run["checkpoints"]], run["resume"]["index"]) == ("step", [2, 4, 6, 8], 6)
    plan = cli("repair", "--dry-run", "--json", folder).json["plan"]
    assert [(item["index"], item["action"]) for item in plan if item["action"] != "keep"] == [(8, "quarantine")]
    # what the fix names, done with Lightning: it resumes at step 6 and trains on
    resumed = lightning_fit(tmp_path / "again", 2, ckpt_path=str(folder / "epoch=1-step=6.ckpt"), save_top_k=0)
    assert resumed.global_step == 8


def test_deep_verify_of_a_default_fit_ignores_the_callbacks_inf_and_lightning_resumes(tmp_path, cli):
    """Issue 14, item 1: ModelCheckpoint with monitor=None stores `kth_value = tensor(inf)` in every
    checkpoint; NaN and Inf matter in model and optimizer tensors only."""
    torch = pytest.importorskip("torch")
    lightning_fit(tmp_path, 2, save_last="link")
    folder = tmp_path / "checkpoints"
    saved = torch.load(folder / "last.ckpt", weights_only=False)
    callback = next(iter(saved["callbacks"].values()))
    assert torch.isinf(callback["kth_value"])  # what the rule must not call damage
    report = cli("verify", "--deep", "--json", folder).json
    assert "CKD304" not in [f["code"] for f in report["findings"]]
    assert "CKD113" not in [f["code"] for f in report["findings"]]
    resume = report["runs"][0]["resume"]
    assert resume is not None
    (named,) = [Path(p).name for p in resume["paths"] if not p.endswith("last.ckpt")]
    resumed = lightning_fit(tmp_path / "again", 3, ckpt_path=str(folder / named), save_top_k=0)
    assert resumed.current_epoch == 3 and resumed.global_step == 12

    # a NaN in the weights is still damage
    saved["state_dict"]["layer.weight"][0, 0] = float("nan")
    torch.save(saved, folder / named)
    report = cli("verify", "--deep", "--json", folder).json
    nonfinite = {f["path"].rsplit("/", 1)[-1] for f in report["findings"] if f["code"] == "CKD304"}
    assert nonfinite == {named, "last.ckpt"}  # last.ckpt links to it


# --- issue 14, item 7: names Lightning writes besides its `key=value` template ---------------------


def test_the_template_without_metric_names_is_indexed_by_step_and_lightning_resumes_from_the_one_named(tmp_path, inspect_json):
    """`filename="{epoch}-{step}", auto_insert_metric_name=False`: `0-2.ckpt`, `0-4.ckpt`, …"""
    lightning_fit(tmp_path, 2, every_n_train_steps=2, save_top_k=-1, filename="{epoch}-{step}", auto_insert_metric_name=False)
    folder = tmp_path / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["0-2.ckpt", "0-4.ckpt", "1-6.ckpt", "1-8.ckpt"]
    assert inspect_json(folder).json["findings"] == []
    newest = folder / "1-8.ckpt"
    newest.write_bytes(newest.read_bytes()[:-100])
    report = inspect_json(folder).json
    (run,) = report["runs"]
    assert (run["layout"], run["unit"], [c["index"] for c in run["checkpoints"]]) == ("lightning", "step", [2, 4, 6, 8])
    assert run["resume"]["index"] == 6
    fix = report["runs"][0]["resume"]["how"]
    assert f'ckpt_path="{folder}/1-6.ckpt"' in fix
    resumed = lightning_fit(tmp_path / "again", 2, ckpt_path=str(folder / "1-6.ckpt"), save_top_k=0)
    assert resumed.global_step == 8


def test_slurm_requeue_saves_and_the_resume_lightning_picks_by_itself(tmp_path, cli, inspect_json):
    """`hpc_ckpt_N.ckpt` in default_root_dir: `ckpt_path="hpc"` loads the highest N. A cut newest
    one is what that resume would pick (CKD114); after `repair`, it picks the whole one."""
    from test_repair_frameworks import age

    trainer = lightning_fit(tmp_path, 1, save_top_k=0)
    for _ in range(2):
        trainer.save_checkpoint(trainer._checkpoint_connector.hpc_save_path(tmp_path))
    assert sorted(p.name for p in tmp_path.glob("hpc_ckpt_*")) == ["hpc_ckpt_1.ckpt", "hpc_ckpt_2.ckpt"]
    newest = tmp_path / "hpc_ckpt_2.ckpt"
    newest.write_bytes(newest.read_bytes()[:-100])
    report = inspect_json(tmp_path).json
    (run,) = report["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("lightning", "save", 1)
    auto = next(f for f in report["findings"] if f["code"] == "CKD114")
    assert auto["index"] == 2
    age(tmp_path)
    assert cli("repair", "--yes", tmp_path).exit_code == 0
    resumed = lightning_fit(tmp_path, 2, ckpt_path="hpc", save_top_k=0)
    assert resumed.ckpt_path == str(tmp_path / "hpc_ckpt_1.ckpt") and resumed.global_step == 8


def test_deep_verify_sees_nan_in_weights_a_callback_keeps_and_in_every_float_type(tmp_path, cli):
    """Only the monitored metric a Lightning callback keeps may be inf; an EMA or SWA copy of the
    weights is weights. NaN is damage in float8 and complex tensors too."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    healthy = {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], "lr_schedulers": []}
    nan = torch.tensor([1.0, float("nan")])
    cases = {
        "ema-callback": {"callbacks": {"EMA": {"ema_state_dict": {"layer.weight": nan}}}},
        "float8": {"state_dict": {"w": nan.to(torch.float8_e5m2), **model.state_dict()}},
        "float8-e4m3": {"state_dict": {"w": nan.to(torch.float8_e4m3fn), **model.state_dict()}},
        "complex": {"state_dict": {"w": torch.complex(nan, torch.zeros(2)), **model.state_dict()}},
        "metric-only": {
            "callbacks": {
                "ModelCheckpoint{'monitor': None}": {
                    "kth_value": torch.tensor(float("inf")),
                    "best_model_score": torch.tensor(float("nan")),
                }
            }
        },
    }
    for name, change in cases.items():
        run = tmp_path / name
        run.mkdir()
        torch.save(healthy, run / "epoch=1-step=2.ckpt")
        torch.save({**healthy, **change}, run / "epoch=2-step=4.ckpt")
        # torch's own reading: the changed part holds a NaN or Inf
        readable = (t.to(torch.float32) if t.dtype.is_floating_point else t for part in change.values() for t in _tensors(part))
        assert any(not torch.isfinite(tensor).all() for tensor in readable), name
        codes = {(f["code"], f["index"]) for f in cli("verify", "--deep", "--json", run).json["findings"]}
        assert (("CKD304", 4) in codes) == (name != "metric-only"), (name, codes)


def _tensors(value: object):
    torch = pytest.importorskip("torch")
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def test_a_second_templates_saves_are_indexed_by_the_step_they_record(every_2_steps, tmp_path, inspect_json):
    """`epoch=0-step=2.ckpt`, `epoch=0-step=4.ckpt` and a second ModelCheckpoint's `epoch=0.ckpt`
    (saved at the end of epoch 0, step 4): each is a whole checkpoint. With steps 2 and 6 cut
    and step 8 gone, Lightning resumes from step 4, which is where ckptdoctor points."""
    torch = pytest.importorskip("torch")
    folder = every_2_steps
    shutil.copyfile(folder / "epoch=0-step=4.ckpt", folder / "epoch=0.ckpt")  # what filename="{epoch}" saves then
    assert torch.load(folder / "epoch=0.ckpt", weights_only=False)["global_step"] == 4
    for name in ("epoch=0-step=2.ckpt", "epoch=1-step=6.ckpt"):
        (folder / name).write_bytes((folder / name).read_bytes()[:-100])
    (folder / "epoch=1-step=8.ckpt").unlink()
    (run,) = inspect_json(folder).json["runs"]
    assert (run["unit"], [c["index"] for c in run["checkpoints"]]) == ("step", [2, 4, 6])
    assert {Path(p).name for p in run["resume"]["paths"]} == {"epoch=0-step=4.ckpt", "epoch=0.ckpt"}
    for named in run["resume"]["paths"]:
        resumed = lightning_fit(tmp_path / Path(named).stem, 2, ckpt_path=named, save_top_k=0)
        assert resumed.global_step == 8


def test_saves_of_one_step_under_several_templates_are_one_checkpoint_whose_best_copy_counts(every_2_steps, tmp_path, cli):
    """Three ModelCheckpoints in one folder: `epoch=E-step=S.ckpt` every 2 steps, `epoch=E.ckpt`
    at each epoch's end and a weights-only `epoch=E-best.ckpt`. A cut copy of a step must not cost
    that step when a whole copy is beside it, the resume must name a copy Lightning resumes from,
    and inspect and verify must agree."""
    torch = pytest.importorskip("torch")
    folder = every_2_steps
    for epoch, step in ((0, 4), (1, 8)):
        shutil.copyfile(folder / f"epoch={epoch}-step={step}.ckpt", folder / f"epoch={epoch}.ckpt")
    best = torch.load(folder / "epoch=1-step=8.ckpt", weights_only=False)  # the test's own file
    for key in ("optimizer_states", "lr_schedulers", "callbacks"):
        del best[key]  # what save_weights_only=True writes
    torch.save(best, folder / "epoch=1-best.ckpt")
    (folder / "epoch=1-step=8.ckpt").write_bytes((folder / "epoch=1-step=8.ckpt").read_bytes()[:-100])
    old = time.time() - 86400
    for path in folder.iterdir():
        os.utime(path, (old, old))

    for command in ("inspect", "verify"):
        (run,) = cli(command, "--json", folder).json["runs"]
        assert (run["unit"], [c["index"] for c in run["checkpoints"]]) == ("step", [2, 4, 6, 8]), command
        assert run["resume"]["index"] == 8, command
        assert Path(run["resume"]["paths"][0]).name == "epoch=1.ckpt", command  # the whole copy with its optimizer
    plan = cli("repair", "--dry-run", "--json", folder).json["plan"]
    moved = {Path(path).name for item in plan if item["action"] == "quarantine" for path in item["paths"]}
    assert not moved & {"epoch=1.ckpt", "epoch=1-best.ckpt", "epoch=0.ckpt", "epoch=0-step=4.ckpt"}
    resumed = lightning_fit(tmp_path / "again", 3, ckpt_path=str(folder / "epoch=1.ckpt"), save_top_k=0)
    assert resumed.global_step == 12

    # a copy of another template that cannot be read stands beside the run: it does not send the
    # whole folder back to epochs
    (folder / "epoch=0.ckpt").write_bytes((folder / "epoch=0.ckpt").read_bytes()[:3000])
    (run,) = cli("inspect", "--json", folder).json["runs"]
    assert (run["unit"], run["resume"]["index"]) == ("step", 8)


# --- issue 30, item 3: `filename` templates with text before `{epoch}` ----------------------------


@pytest.fixture(scope="module")
def templated(tmp_path_factory) -> dict[str, Path]:
    """Real fits of 3 epochs (4 steps each) whose ModelCheckpoint ``filename`` puts text before
    ``{epoch}``: ``model`` (``model-{epoch:02d}-{train_loss:.2f}``, top-k on train_loss, a copied
    ``last.ckpt``), ``periodic`` (``periodic-{epoch}-{step}``, ``last.ckpt`` a link) and ``both``
    (the two callbacks into one folder, the periodic one keeping a copied ``last.ckpt``); each the
    ``checkpoints`` folder."""
    pytest.importorskip("lightning")
    from lightning.pytorch.callbacks import ModelCheckpoint

    base = tmp_path_factory.mktemp("templated")
    model = {"filename": "model-{epoch:02d}-{train_loss:.2f}", "monitor": "train_loss"}
    lightning_fit(base / "model", 3, save_top_k=-1, save_last=True, **model)
    lightning_fit(base / "periodic", 3, save_top_k=-1, save_last="link", filename="periodic-{epoch}-{step}")
    second = ModelCheckpoint(dirpath=base / "both" / "checkpoints", save_top_k=2, **model)
    lightning_fit(base / "both", 3, save_top_k=-1, save_last=True, filename="periodic-{epoch}-{step}", callbacks=[second])
    return {name: base / name / "checkpoints" for name in ("model", "periodic", "both")}


def test_templates_with_text_before_the_epoch_are_lightning_runs_and_lightning_resumes_from_the_one_named(templated, tmp_path, cli):
    """They were plain torch runs, told `torch.load` + `load_state_dict`."""
    assert sorted(p.name for p in templated["periodic"].iterdir()) == [
        "last.ckpt",
        "periodic-epoch=0-step=4.ckpt",
        "periodic-epoch=1-step=8.ckpt",
        "periodic-epoch=2-step=12.ckpt",
    ]
    expected = {"model": ("epoch", 2), "periodic": ("step", 12), "both": ("step", 12)}
    for name, folder in templated.items():
        result = cli("inspect", "--json", folder)
        assert result.exit_code == 0 and result.json["findings"] == [], name
        (run,) = result.json["runs"]
        assert (run["layout"], run["unit"], run["resume"]["index"]) == ("lightning", *expected[name]), name
        assert [Path(f["path"]).name for f in run["loose_files"]] == ["last.ckpt"], name
        path = run["resume"]["path"]
        assert run["resume"]["how"] == f'pass `ckpt_path="{path}"` to `trainer.fit()`', name
        resumed = lightning_fit(tmp_path / name, 4, ckpt_path=path, save_top_k=0)
        assert (resumed.ckpt_path, resumed.global_step) == (path, 16), name
    # the two callbacks' saves of one step are one checkpoint: `model-epoch=02-…` records step 12
    (run,) = cli("inspect", "--json", templated["both"]).json["runs"]
    assert [(c["index"], sorted(Path(f["path"]).name.split("-")[0] for f in c["files"])) for c in run["checkpoints"]] == [
        (4, ["periodic"]),
        (8, ["model", "periodic"]),
        (12, ["model", "periodic"]),
    ]


def test_a_dangling_last_ckpt_of_a_templated_run_is_ckd113_where_lightning_trains_from_scratch(templated, tmp_path, inspect_json):
    folder = copy_run(templated["periodic"], tmp_path / "checkpoints")
    (folder / "periodic-epoch=2-step=12.ckpt").unlink()  # a cleanup took what the link names
    report = inspect_json(folder).json
    (stale,) = [f for f in report["findings"] if f["code"] == "CKD113"]
    assert stale["path"] == str(folder / "last.ckpt")
    (run,) = report["runs"]
    assert run["resume"]["index"] == 8
    # Lightning: no last checkpoint there, a warning, and a fit from step 0
    fresh = lightning_fit(tmp_path / "again", 1, ckpt_path="last", dirpath=folder, save_top_k=0)
    assert (fresh.ckpt_path, fresh.global_step) == (None, 4)
    resumed = lightning_fit(tmp_path / "named", 3, ckpt_path=run["resume"]["path"], save_top_k=0)
    assert resumed.global_step == 12


def test_a_cut_copy_of_last_ckpt_is_what_ckpt_path_last_loads_ckd114_until_repair_rewrites_it(templated, tmp_path, cli, inspect_json):
    """A copied `last.ckpt` cut short: `ckpt_path="last"` loads it and fails (CKD114 beside its
    CKD203); the file ckptdoctor names resumes, and after `repair` so does `"last"`."""
    from test_repair_frameworks import age

    folder = copy_run(templated["model"], tmp_path / "checkpoints")
    last = folder / "last.ckpt"
    last.write_bytes(last.read_bytes()[:2000])
    report = inspect_json(folder).json
    findings = {(f["code"], f["path"]) for f in report["findings"]}
    assert findings == {("CKD203", str(last)), ("CKD114", str(last))}
    (auto,) = [f for f in report["findings"] if f["code"] == "CKD114"]
    assert auto["index"] is None and auto["severity"] == "error"
    with pytest.raises(RuntimeError, match="central directory"):
        lightning_fit(tmp_path / "last", 4, ckpt_path="last", dirpath=folder, save_top_k=0)
    named = report["runs"][0]["resume"]["path"]
    assert lightning_fit(tmp_path / "named", 4, ckpt_path=named, save_top_k=0).global_step == 16

    age(folder)
    assert cli("repair", "--yes", folder).exit_code == 0
    assert inspect_json(folder).json["findings"] == []
    resumed = lightning_fit(tmp_path / "repaired", 4, ckpt_path="last", dirpath=folder, save_top_k=0)
    assert (resumed.ckpt_path, resumed.global_step) == (str(last), 16)


def test_a_whole_last_ckpt_copy_or_link_is_no_unsafe_auto_resume(templated, inspect_json):
    for name in ("model", "periodic"):
        assert "CKD114" not in [f["code"] for f in inspect_json(templated[name]).json["findings"]]


# --- issue 30, item 8: a fit started again from scratch into the same folder (`-vN` saves) ---------


@pytest.fixture(scope="module")
def restarted(tmp_path_factory) -> Path:
    """Three real fits into one ``checkpoints`` folder, each from scratch (``ckpt_path=None``), with
    ``save_top_k=-1, save_last=True``: 3 epochs, then 2, then 1. Lightning versions each name that
    is taken: ``epoch=0-step=4.ckpt``, ``-v1``, ``-v2``; ``last.ckpt``, ``last-v1.ckpt``, ``last-v2.ckpt``."""
    torch = pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("restarted")
    for epochs in (3, 2, 1):
        torch.manual_seed(epochs)  # each fit starts from weights of its own
        lightning_fit(root, epochs, module=tiny_module(), save_top_k=-1, save_last=True)
    return root / "checkpoints"


@pytest.mark.slow
def test_saves_of_a_restart_are_named_and_the_newest_of_each_step_is_what_lightnings_last_loads(restarted, tmp_path, cli):
    torch = pytest.importorskip("torch")
    assert sorted(p.name for p in restarted.iterdir()) == [
        "epoch=0-step=4-v1.ckpt",
        "epoch=0-step=4-v2.ckpt",
        "epoch=0-step=4.ckpt",
        "epoch=1-step=8-v1.ckpt",
        "epoch=1-step=8.ckpt",
        "epoch=2-step=12.ckpt",
        "last-v1.ckpt",
        "last-v2.ckpt",
        "last.ckpt",
    ]
    report = cli("inspect", "--json", restarted).json
    (run,) = report["runs"]
    taken = {c["index"]: Path(c["files"][0]["path"]).name for c in run["checkpoints"]}
    assert taken == {4: "epoch=0-step=4-v2.ckpt", 8: "epoch=1-step=8-v1.ckpt", 12: "epoch=2-step=12.ckpt"}
    (twice,) = [f for f in report["findings"] if f["code"] == "CKD115"]
    assert twice["severity"] == "warning" and twice["index"] is None
    message = twice["message"]
    assert "epoch=0-step=4.ckpt and epoch=0-step=4-v1.ckpt and epoch=0-step=4-v2.ckpt (step 4)" in message
    assert "epoch=1-step=8.ckpt and epoch=1-step=8-v1.ckpt (step 8)" in message
    assert "(epoch=0-step=4-v2.ckpt, epoch=1-step=8-v1.ckpt)" in message
    assert "the resume point, step 12, was saved before epoch=0-step=4-v2.ckpt" in message
    assert "the newest save is step 4 (epoch=0-step=4-v2.ckpt)" in message
    assert any('ckpt_path="last"' in fix for fix in twice["fixes"])

    # Lightning's own `ckpt_path="last"` takes the newest last*.ckpt by time: the third fit's, whose
    # state is the save ckptdoctor takes for step 4
    resumed = lightning_fit(tmp_path / "last", 2, ckpt_path="last", dirpath=restarted, save_top_k=0)
    assert (resumed.ckpt_path, resumed.global_step) == (str(restarted / "last-v2.ckpt"), 8)
    loads = torch.load(restarted / "last-v2.ckpt", weights_only=False)
    for name, tensor in torch.load(restarted / taken[4], weights_only=False)["state_dict"].items():
        assert torch.equal(tensor, loads["state_dict"][name])
    first = torch.load(restarted / "epoch=0-step=4.ckpt", weights_only=False)["state_dict"]
    assert not torch.equal(loads["state_dict"]["layer.weight"], first["layer.weight"])
    # the resume point ckptdoctor names goes on where the first fit stopped
    named = lightning_fit(tmp_path / "named", 4, ckpt_path=run["resume"]["path"], save_top_k=0)
    assert (Path(run["resume"]["path"]).name, named.global_step) == ("epoch=2-step=12.ckpt", 16)
    for command in (("verify",), ("repair", "--dry-run"), ("prune", "--keep-last", "1", "--dry-run")):
        assert cli(*command, restarted).exit_code in (0, 1), command


def test_a_cut_newest_save_of_a_step_leaves_the_older_whole_one_as_its_checkpoint(restarted, tmp_path, inspect_json):
    folder = copy_run(restarted, tmp_path / "checkpoints")
    cut = folder / "epoch=1-step=8-v1.ckpt"
    cut.write_bytes(cut.read_bytes()[:-100])
    report = inspect_json(folder).json
    (run,) = report["runs"]
    eight = next(c for c in run["checkpoints"] if c["index"] == 8)
    assert (eight["status"], Path(eight["files"][0]["path"]).name) == ("complete", "epoch=1-step=8.ckpt")
    (twice,) = [f for f in report["findings"] if f["code"] == "CKD115"]
    assert "(epoch=0-step=4-v2.ckpt, epoch=1-step=8.ckpt)" in twice["message"]


# --- issue 30, item 6: a last.ckpt torn by an in-place copy cut off -------------------------------


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A real fit of 3 epochs with ``save_last=True`` (a copy) of a module whose saves (55 KB) are
    longer than what inspect reads of a file, and the bytes ``last.ckpt`` held before the last
    epoch: what a backup copied of it the time before."""
    lightning = pytest.importorskip("lightning")
    root = tmp_path_factory.mktemp("synced")
    before: dict[str, bytes] = {}

    class Previous(lightning.Callback):  # type: ignore[misc]
        def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
            last = root / "checkpoints" / "last.ckpt"
            if last.exists():
                before["last"] = last.read_bytes()

    lightning_fit(root, 3, module=tiny_module(64, 64), save_top_k=-1, save_last=True, callbacks=[Previous()])
    return root, before["last"]


def _flat(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flat(item, f"{path}/{key}").items()}
    if isinstance(value, (list, tuple)):
        return {k: v for index, item in enumerate(value) for k, v in _flat(item, f"{path}/{index}").items()}
    return {path: value}


def _same(a: Any, b: Any) -> bool:
    torch = pytest.importorskip("torch")
    left, right = _flat(a), _flat(b)
    return left.keys() == right.keys() and all(
        torch.equal(value, right[key]) if isinstance(value, torch.Tensor) else value == right[key] for key, value in left.items()
    )


def test_a_last_ckpt_torn_by_an_in_place_copy_cut_off_is_damaged_where_torch_or_zipfile_says_so(synced, tmp_path, inspect_json):
    """``rsync --inplace`` writes the new file over the old one from its start: cut off, it leaves
    the new save's start before the old save's end, at the old length (the same here: the saves
    differ in their contents, not in their layout). torch reads the start through the old end's
    central directory and never checks a CRC: it fails, or silently loads one save's pickle with
    the other's tensors; Python's zipfile checks the CRCs."""
    torch = pytest.importorskip("torch")
    root, previous = synced
    new = (root / "checkpoints" / "last.ckpt").read_bytes()
    assert len(new) == len(previous) > HEAD + TAIL
    with zipfile.ZipFile(io.BytesIO(new)) as archive:
        second, directory = archive.infolist()[1].header_offset, archive.start_dir
    cuts = {
        "nothing written yet": 10,
        "inside data.pkl": 1000,
        "just after data.pkl": second + 10,
        "inside the tensors, past inspect's head": HEAD + 1000,
        "inside the tensors, before inspect's tail": len(new) - TAIL - 100,
        "inside the central directory": directory + 100,
        "inside the directory's last entry": new.rfind(b"PK\x01\x02") + 10,
        "all but the end record": len(new) - 22,
    }
    saves = {
        "the new save": torch.load(io.BytesIO(new), weights_only=False),
        "the old save": torch.load(io.BytesIO(previous), weights_only=False),
    }
    seen: set[tuple[str, str]] = set()
    for what, cut in cuts.items():
        torn = new[:cut] + previous[cut:]
        try:
            loaded = torch.load(io.BytesIO(torn), weights_only=False)  # bytes this test's own fit wrote
            torch_says = next((name for name, save in saves.items() if _same(loaded, save)), "a mix of both saves")
        except Exception as error:
            torch_says = f"fails: {type(error).__name__}"
        try:
            with zipfile.ZipFile(io.BytesIO(torn)) as archive:
                zipfile_says = archive.testzip()  # the first member whose bytes do not match their CRC-32
        except (zipfile.BadZipFile, OSError) as error:
            zipfile_says = str(error)
        folder = copy_run(root / "checkpoints", tmp_path / what.replace(" ", "-") / "checkpoints")
        (folder / "last.ckpt").write_bytes(torn)
        report = inspect_json(folder).json
        found = {f["code"] for f in report["findings"] if f["path"].endswith("last.ckpt")}
        (run,) = report["runs"]
        assert run["resume"]["index"] == 12 and not any(p.endswith("last.ckpt") for p in run["resume"]["paths"]), what
        if torn in (new, previous):
            assert torch_says in ("the new save", "the old save") and zipfile_says is None, what
            assert found == (set() if torn == new else {"CKD116"}), what  # the old bytes: a whole copy of the save before
            continue
        # damaged: torch fails on it or reads a mix, or zipfile finds a member that is not as recorded
        assert torch_says.startswith(("fails", "a mix")) or zipfile_says is not None, what
        assert "CKD114" in found, (what, report["findings"])  # `ckpt_path="last"` loads the newest last*.ckpt: this one
        found.remove("CKD114")
        assert found in ({"CKD207"}, {"CKD206"}), (what, report["findings"])
        if found == {"CKD207"}:  # the directory places or sizes a member otherwise: torch cannot read it
            assert torch_says.startswith("fails"), what
        seen.add((found.pop(), torch_says.split(":")[0]))
    assert {("CKD207", "fails"), ("CKD206", "a mix of both saves"), ("CKD206", "the new save")} <= seen, seen


def test_lightning_fails_on_a_torn_last_ckpt_and_resumes_once_repair_copied_the_resume_point_over_it(synced, tmp_path, cli):
    root, previous = synced
    folder = copy_run(root / "checkpoints", tmp_path / "run" / "checkpoints")
    last = folder / "last.ckpt"
    new = last.read_bytes()
    last.write_bytes(new[: HEAD + 1000] + previous[HEAD + 1000 :])  # the copy cut off past what inspect reads of its start

    def fit() -> Any:
        return lightning_fit(folder.parent, 3, module=tiny_module(64, 64), ckpt_path="last", save_top_k=0, save_last=False)

    with pytest.raises(Exception, match="failed reading"):
        fit()
    assert cli("repair", "--yes", "--min-age", "0", folder).exit_code == 0
    assert last.read_bytes() == (folder / "epoch=2-step=12.ckpt").read_bytes()  # a copy, as save_last=True makes
    trainer = fit()
    assert (trainer.ckpt_path, trainer.global_step) == (str(last), 12)


# --- issue 30: pointers and whole copies -------------------------------------------------------------


@pytest.fixture(scope="module")
def copied_last(tmp_path_factory) -> Path:
    """A real fit of 3 epochs (4 steps each), every save kept, ``last.ckpt`` a whole copy of the
    newest (``save_last=True``): ``epoch=0-step=4.ckpt`` … ``epoch=2-step=12.ckpt``."""
    pytest.importorskip("lightning")
    base = tmp_path_factory.mktemp("copied-last")
    lightning_fit(base, 3, save_top_k=-1, save_last=True)
    return base / "checkpoints"


def test_a_cut_newest_save_whose_last_ckpt_copy_is_whole_resumes_from_the_copy(copied_last, tmp_path, cli):
    """``ckpt_path="last"`` resumes step 12 from the copy: so does the resume point, by the copy's
    path (the pickle its archive records is step 12's, whose own first bytes still hold it)."""
    folder = copy_run(copied_last, tmp_path / "checkpoints")
    newest = folder / "epoch=2-step=12.ckpt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    for command in ("inspect", "verify"):
        (run,) = cli(command, "--json", folder).json["runs"]
        assert (run["resume"]["index"], Path(run["resume"]["path"]).name) == (12, "last.ckpt"), command
    printed = cli("inspect", "--resume-path", folder).stdout.strip()
    assert printed == str(folder / "last.ckpt")
    assert lightning_fit(tmp_path / "named", 4, ckpt_path=printed, save_top_k=0).global_step == 16
    probe = copy_run(folder, tmp_path / "probe")
    resumed = lightning_fit(tmp_path / "last", 4, ckpt_path="last", dirpath=probe, save_top_k=0)
    assert (resumed.ckpt_path, resumed.global_step) == (str(probe / "last.ckpt"), 16)  # Lightning's own pick agrees


def test_a_last_ckpt_copy_of_an_older_save_is_ckd116_and_repair_copies_the_newest(copied_last, tmp_path, cli, inspect_json):
    """A copy of step 8 put back over ``last.ckpt`` (a restored backup): ``ckpt_path="last"``
    resumes from step 8 and trains 8-12 again, without an error (CKD116, a warning)."""
    torch = pytest.importorskip("torch")
    folder = copy_run(copied_last, tmp_path / "checkpoints")
    last = folder / "last.ckpt"
    shutil.copyfile(folder / "epoch=1-step=8.ckpt", last)
    report = inspect_json(folder).json
    assert report["runs"][0]["resume"]["index"] == 12
    (behind,) = [f for f in report["findings"] if f["severity"] != "info"]
    assert (behind["code"], behind["severity"], behind["path"]) == ("CKD116", "warning", str(last))
    assert "epoch=1-step=8.ckpt" in behind["message"]
    probe = copy_run(folder, tmp_path / "probe")  # a fit in the folder would save over last.ckpt
    picked = lightning_fit(tmp_path / "picked", 3, ckpt_path="last", dirpath=probe, save_top_k=0).ckpt_path
    assert picked == str(probe / "last.ckpt") and torch.load(picked, weights_only=False)["global_step"] == 8
    done = cli("repair", "--yes", "--min-age", "0s", folder)
    assert done.exit_code == 0, done.stdout
    assert last.read_bytes() == (folder / "epoch=2-step=12.ckpt").read_bytes()
    assert inspect_json(folder).json["findings"] == []


def test_a_last_ckpt_dated_in_the_future_is_left_by_repair_until_min_age_0(copied_last, tmp_path, cli, inspect_json):
    """A copy of step 4 as `last-v1.ckpt`, dated a day ahead (another machine's clock): `ckpt_path="last"`
    loads the newest `last*.ckpt` by time, this one (CKD116). Its time tells nothing of whether it is
    being written: `repair` leaves it and says why; with `--min-age 0` it copies the resume point over it."""
    torch = pytest.importorskip("torch")
    folder = copy_run(copied_last, tmp_path / "checkpoints")
    ahead = folder / "last-v1.ckpt"
    shutil.copyfile(folder / "epoch=0-step=4.ckpt", ahead)
    tomorrow = time.time() + 86400
    os.utime(ahead, (tomorrow, tomorrow))

    def picked() -> Any:
        probe = copy_run(folder, tmp_path / f"probe-{time.monotonic_ns()}")
        return torch.load(lightning_fit(tmp_path / "fit", 3, ckpt_path="last", dirpath=probe, save_top_k=0).ckpt_path, weights_only=False)

    assert picked()["global_step"] == 4
    behind, skewed = [f for f in inspect_json(folder).json["findings"] if f["severity"] != "info"]
    assert (behind["code"], behind["path"]) == ("CKD116", str(ahead))
    assert (skewed["code"], skewed["path"]) == ("CKD214", str(ahead))
    left = cli("repair", "--yes", folder)
    assert left.exit_code == 0 and "in the future" in left.stdout and ahead.read_bytes() != (folder / "epoch=2-step=12.ckpt").read_bytes()
    assert cli("repair", "--yes", "--min-age", "0", folder).exit_code == 0
    assert picked()["global_step"] == 12 and inspect_json(folder).json["findings"] == []


def test_a_last_ckpt_linked_to_a_file_outside_the_run_is_a_warning_not_a_dangling_link(copied_last, tmp_path, cli):
    """`last.ckpt` as an absolute symlink to a whole save kept elsewhere: Lightning loads it; it is
    there, only none of this run's, so ckptdoctor warns that it did not judge it (never "not there")."""
    folder = copy_run(copied_last, tmp_path / "checkpoints")
    shared = tmp_path / "shared" / "last.ckpt"
    shared.parent.mkdir()
    (folder / "last.ckpt").rename(shared)
    (folder / "last.ckpt").symlink_to(shared)
    probe = copy_run(folder, tmp_path / "probe")
    assert lightning_fit(tmp_path / "fit", 4, ckpt_path="last", dirpath=probe, save_top_k=0).global_step == 16
    result = cli("inspect", "--json", folder)
    (told,) = [f for f in result.json["findings"] if f["code"] == "CKD113"]
    assert told["severity"] == "warning" and "outside this run" in told["message"] and "not there" not in told["message"]
    assert result.exit_code == 0
    shared.unlink()  # now it dangles: an error, as before
    (dangling,) = [f for f in cli("inspect", "--json", folder).json["findings"] if f["code"] == "CKD113"]
    assert dangling["severity"] == "error"


def test_a_deleted_last_ckpt_is_ckd113_where_the_checkpoints_record_it(copied_last, tmp_path, cli):
    """``ckpt_path="last"`` without ``last.ckpt`` trains from the start with only a warning. Every
    ``.ckpt`` records ``ModelCheckpoint``'s ``last_model_path``: ``verify`` reads it and says the
    file is missing; ``inspect`` does not read that deep."""
    folder = copy_run(copied_last, tmp_path / "checkpoints")
    (folder / "last.ckpt").unlink()
    probe = copy_run(folder, tmp_path / "probe")
    assert lightning_fit(tmp_path / "scratch", 1, ckpt_path="last", dirpath=probe, save_top_k=0).ckpt_path is None
    (missing,) = [f for f in cli("verify", "--json", folder).json["findings"] if f["code"] == "CKD113"]
    assert "last.ckpt" in missing["message"] and missing["severity"] == "error"
    assert "CKD113" not in {f["code"] for f in cli("inspect", "--json", folder).json["findings"]}
    # the fix verify gives: `repair --verify` reads what verify read, and writes last.ckpt again as a copy
    assert "`ckptdoctor repair --verify " in missing["fixes"][0]
    assert cli("repair", "--verify", "--yes", "--min-age", "0", folder).exit_code == 0
    assert (folder / "last.ckpt").read_bytes() == (folder / "epoch=2-step=12.ckpt").read_bytes()
    probe = copy_run(folder, tmp_path / "probe-repaired")
    assert lightning_fit(tmp_path / "resumed", 4, ckpt_path="last", dirpath=probe, save_top_k=0).global_step == 16


def test_a_run_that_keeps_no_last_ckpt_misses_none(tmp_path, cli):
    """Without ``save_last`` the checkpoints record ``last_model_path`` as '': nothing is missing."""
    lightning_fit(tmp_path, 2, save_top_k=-1)
    report = cli("verify", "--json", tmp_path / "checkpoints").json
    assert "CKD113" not in {f["code"] for f in report["findings"]}


def _omegaconf_module() -> Any:
    """A LightningModule whose hyper-parameters are an OmegaConf ``DictConfig`` (as Hydra hands
    them over): ``save_hyperparameters()`` pickles the config into every checkpoint."""
    torch = pytest.importorskip("torch")
    lightning = pytest.importorskip("lightning")
    omegaconf = pytest.importorskip("omegaconf")

    class Configured(lightning.LightningModule):  # type: ignore[misc]
        def __init__(self, cfg: Any) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch: Any, index: int) -> Any:
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=self.hparams.cfg.optim.lr)

    return Configured(omegaconf.OmegaConf.create({"optim": {"lr": 1e-3, "betas": [0.9, 0.99]}, "name": "run"}))


def test_omegaconf_hyper_parameters_are_lightnings_own_and_resume_as_the_finding_says(tmp_path, cli):
    """Issue 31 item 8: a Hydra-configured module's checkpoints are no "corrupt" run. Lightning's own
    resume refuses them under torch's default ``weights_only=True`` (the CKD402 warning says so) and
    resumes with ``weights_only=False``; torch loads them within ``safe_globals`` of the names said."""
    import importlib

    import torch

    lightning_fit(tmp_path, 2, module=_omegaconf_module(), save_last=True)
    result = cli("verify", "--json", tmp_path / "checkpoints")
    assert result.exit_code == 0, result.stdout
    (run,) = result.json["runs"]
    assert run["layout"] == "lightning" and {c["status"] for c in run["checkpoints"]} == {"complete"}
    assert not [f for f in result.json["findings"] if f["severity"] == "error"]
    said = [f for f in result.json["findings"] if "omegaconf.dictconfig.DictConfig" in f["message"]]
    assert said and all(f["code"] == "CKD402" and f["severity"] == "warning" for f in said)
    assert all("weights_only=False" in f["message"] and "typing.Any" in f["message"] for f in said)
    resume = Path(api.inspect(tmp_path / "checkpoints").runs[0].resume_path)
    with pytest.raises(Exception, match="Weights only load failed"):
        lightning_fit(tmp_path / "refused", 3, str(resume), module=_omegaconf_module())
    resumed = _fit_unrestricted(tmp_path / "resumed", resume)
    assert resumed.current_epoch == 3 and resumed.global_step == 12  # went on after the 8 steps of 2 epochs
    # the names the findings give, allowed as torch's safe_globals allows them
    needed = dict.fromkeys(name for f in result.json["findings"] for name in _named_globals(f["message"]))
    allowed = [getattr(importlib.import_module(name.rpartition(".")[0]), name.rpartition(".")[2]) for name in needed]
    with torch.serialization.safe_globals(allowed):
        assert torch.load(resume, weights_only=True)["hyper_parameters"]["cfg"]["optim"]["lr"] == 1e-3


def _fit_unrestricted(root: Path, ckpt_path: Path) -> Any:
    """``trainer.fit(ckpt_path=..., weights_only=False)`` to epoch 3, what the CKD402 fix says."""
    import lightning
    import torch

    trainer = lightning.Trainer(default_root_dir=root, max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(_omegaconf_module(), torch.utils.data.DataLoader(torch.randn(16, 4), batch_size=4), ckpt_path=ckpt_path, weights_only=False)
    return trainer


def _named_globals(message: str) -> list[str]:
    """The globals inside a finding's ``safe_globals([...])``."""
    inside = message.rpartition("safe_globals([")[2].partition("])")[0]
    return [name.strip() for name in inside.split(",") if name.strip()]
