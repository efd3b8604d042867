"""Orbax CheckpointManager folders, built by hand with Orbax's names and markers."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
from frameworks import DcpApp, copy_run, orbax_train


def orbax_run(folder: Path, steps: tuple[int, ...] = (100, 200), commit_files: bool = True) -> Path:
    for step in steps:
        step_folder = folder / str(step)
        (step_folder / "default").mkdir(parents=True)
        (step_folder / "default" / "_METADATA").write_text("{}")
        (step_folder / "_CHECKPOINT_METADATA").write_text(
            json.dumps({"item_handlers": {"default": "PyTreeCheckpointHandler"}, "commit_timestamp_nsecs": step})
        )
        if commit_files:
            (step_folder / "commit_success.txt").write_text(f"Checkpoint commit was successful to {step_folder}")
    return folder


def test_a_healthy_orbax_run_is_quiet(tmp_path, inspect_json):
    report = inspect_json(orbax_run(tmp_path / "ckpt")).json
    assert report["findings"] == []
    (run,) = report["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("orbax", "step", 200)


def test_older_orbax_without_commit_files_is_complete(tmp_path, inspect_json):
    report = inspect_json(orbax_run(tmp_path / "ckpt", commit_files=False)).json
    assert report["findings"] == [] and report["runs"][0]["resume"]["index"] == 200


def test_a_leftover_tmp_folder_is_an_abandoned_save(tmp_path, inspect_json):
    folder = orbax_run(tmp_path / "ckpt")
    shutil.copytree(folder / "200", folder / "300.orbax-checkpoint-tmp-0")
    report = inspect_json(folder).json
    (staged,) = [f for f in report["findings"] if f["code"] == "CKD202"]
    assert staged["path"].endswith("300.orbax-checkpoint-tmp-0")
    assert report["runs"][0]["resume"]["index"] == 200
    assert len(report["runs"]) == 1


def test_a_step_without_its_commit_marker_is_a_ckd106_warning_and_stays_the_resume_point(tmp_path, inspect_json):
    # on a local disk the rename of the temporary folder commits a save: Orbax restores it without
    # the marker (tests/test_orbax_real.py asks Orbax itself)
    folder = orbax_run(tmp_path / "ckpt")
    (folder / "200" / "commit_success.txt").unlink()
    report = inspect_json(folder).json
    (marker,) = [f for f in report["findings"] if f["code"] == "CKD106"]
    assert marker["index"] == 200 and "commit_success.txt" in marker["message"]
    assert marker["severity"] == "warning" and "local disk" in marker["message"]
    assert report["runs"][0]["resume"]["index"] == 200


def test_numbered_folders_without_orbax_markers_are_not_orbax(tmp_path, inspect_json):
    (tmp_path / "data" / "2024").mkdir(parents=True)
    (tmp_path / "data" / "2024" / "notes.txt").write_text("hello")
    assert inspect_json(tmp_path / "data").json["runs"] == []


# --- real runs: every folder Orbax's own step listing counts is a step of the run ------------------
#
# orbax-checkpoint's CheckpointManager lists as a step every folder named as its steps are
# (``_StandardNameFormat``: ``<step_prefix>_``, then the step without a leading zero), that is no
# ``*.orbax-checkpoint-tmp*`` folder: on a local disk it reads neither ``_CHECKPOINT_METADATA`` nor
# ``commit_success.txt`` to list one, and ``latest_step()`` is the highest. Orbax itself is the
# oracle of each test below: its ``latest_step()`` and its ``restore``.


def _real_steps() -> tuple[Any, Any]:
    return (
        pytest.importorskip("orbax.checkpoint", reason="real Orbax checkpoints need the orbax extra: pip install -e '.[orbax]'"),
        pytest.importorskip("numpy"),
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _real_steps()
    run = tmp_path_factory.mktemp("orbax-trained") / "run"
    orbax_train(run, 3)
    return run


@pytest.fixture(scope="module")
def trained_with_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _real_steps()
    run = tmp_path_factory.mktemp("orbax-prefixed") / "run"
    orbax_train(run, 3, step_prefix="step")
    return run


def _manager(run: Path, step_prefix: str | None) -> Any:
    ocp, _ = _real_steps()
    return ocp.CheckpointManager(run.resolve(), options=ocp.CheckpointManagerOptions(read_only=True, step_prefix=step_prefix))


def latest_step(run: Path, step_prefix: str | None = None) -> int | None:
    """Orbax's own pick: ``CheckpointManager.latest_step()``."""
    with _manager(run, step_prefix) as manager:
        return manager.latest_step()


def restored(run: Path, step: int, step_prefix: str | None = None) -> list[Any] | None:
    """Every array Orbax's ``restore(step, args=StandardRestore())`` gives back, None where it fails."""
    ocp, np = _real_steps()
    try:
        with warnings.catch_warnings(), _manager(run, step_prefix) as manager:
            warnings.simplefilter("ignore")
            tree = manager.restore(step, args=ocp.args.StandardRestore())
    except Exception:  # Orbax and TensorStore raise many unrelated types on damaged steps
        return None
    import jax

    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


def _unmarked_copy(run: Path, source: str, target: str) -> Path:
    """``source`` copied to ``target`` without the step's markers: a copy or a save that never got them."""
    copy = run / target
    shutil.copytree(run / source, copy)
    for marker in ("_CHECKPOINT_METADATA", "commit_success.txt", "default/commit_success.txt"):
        (copy / marker).unlink(missing_ok=True)
    return copy


def _cut_biggest(step: Path) -> None:
    biggest = max((p for p in step.glob("default/**/d/*") if p.is_file()), key=lambda p: p.stat().st_size)
    os.truncate(biggest, biggest.stat().st_size // 2)


def _step(report: dict, index: int) -> dict | None:
    return next((c for c in report["runs"][0]["checkpoints"] if c["index"] == index), None)


def _errors(report: dict) -> list[tuple[str, int | None]]:
    return sorted((f["code"], f["index"]) for f in report["findings"] if f["severity"] == "error")


@pytest.mark.parametrize("damage", ["cut", "empty"])
def test_an_unmarked_step_orbax_picks_but_cannot_restore_is_ckd114_and_repair_moves_it_aside(trained, tmp_path, cli, damage):
    run = copy_run(trained, tmp_path / "run")
    if damage == "cut":  # the tester's repro: the newest step copied on without its markers, its data cut
        _cut_biggest(_unmarked_copy(run, "3", "4"))
    else:  # an empty step folder: Orbax lists it all the same
        (run / "4").mkdir()
    assert latest_step(run) == 4 and restored(run, 4) is None and restored(run, 3) is not None
    report = cli("inspect", "--json", run).json
    step = _step(report, 4)
    assert step is not None and step["status"] != "complete"
    assert ("CKD114", 4) in _errors(report) and report["runs"][0]["resume"]["index"] == 3
    assert cli("verify", "--json", run).exit_code != 0
    repaired = cli("repair", "--yes", "--min-age", "0s", run)
    assert repaired.exit_code == 0, repaired.stdout + repaired.stderr
    assert not (run / "4").exists()
    assert latest_step(run) == 3 and restored(run, 3) is not None
    assert _errors(cli("inspect", "--json", run).json) == []


def test_an_unmarked_whole_step_is_the_resume_point_orbax_restores(trained, tmp_path, cli):
    run = copy_run(trained, tmp_path / "run")
    _unmarked_copy(run, "3", "4")
    arrays = restored(run, 4)
    assert latest_step(run) == 4 and arrays is not None
    assert all((a == b).all() for a, b in zip(arrays, restored(run, 3) or [], strict=True))
    report = cli("inspect", "--json", run).json
    step = _step(report, 4)
    assert step is not None and step["status"] == "complete"
    assert report["runs"][0]["resume"]["index"] == 4 and _errors(report) == []
    # the markers Orbax restores without are warnings (the README's CKD106), on step 4 alone
    assert {(f["code"], f["index"]) for f in report["findings"]} == {("CKD106", 4)}
    repaired = cli("repair", "--yes", "--min-age", "0s", run)
    assert repaired.exit_code == 0 and (run / "4").is_dir() and latest_step(run) == 4


@pytest.mark.parametrize("name", ["04", "step_4", "4.orbax-checkpoint-tmp"])
def test_a_folder_orbax_does_not_list_is_no_step(trained, tmp_path, cli, name):
    run = copy_run(trained, tmp_path / "run")
    (run / name).mkdir()
    assert latest_step(run) == 3
    report = cli("inspect", "--json", run).json
    assert [c["index"] for c in report["runs"][0]["checkpoints"]] == [1, 2, 3]
    assert report["runs"][0]["resume"]["index"] == 3 and _errors(report) == []


def test_with_a_step_prefix_orbax_lists_its_prefixed_folders_alone(trained_with_prefix, tmp_path, cli):
    run = copy_run(trained_with_prefix, tmp_path / "run")
    (run / "step_4").mkdir()
    (run / "5").mkdir()
    assert latest_step(run, "step") == 4 and restored(run, 4, "step") is None
    report = cli("inspect", "--json", run).json
    (found,) = [r for r in report["runs"] if r["layout"] == "orbax"]
    assert [c["index"] for c in found["checkpoints"]] == [1, 2, 3, 4]
    assert ("CKD114", 4) in _errors(report) and found["resume"]["index"] == 3


def test_a_numbered_folder_beside_another_frameworks_steps_is_not_orbax(tmp_path, inspect_json):
    """``dcp.save`` into numbered folders, and an empty ``6/`` beside them: no Orbax marker
    anywhere, so no Orbax step listing applies, and the DCP run stays DCP's."""
    pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    folder = tmp_path / "ckpt"
    for step in (2, 4):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "torch.distributed is disabled": one process is the point
            dcp.save({"app": DcpApp(), "step": step}, checkpoint_id=str(folder / str(step)))
    (folder / "6").mkdir()
    report = inspect_json(folder).json
    assert [(run["layout"], [c["index"] for c in run["checkpoints"]]) for run in report["runs"]] == [("dcp", [2, 4])]
