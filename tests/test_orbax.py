"""Orbax CheckpointManager folders, built by hand with Orbax's names and markers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


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


def codes(report: dict) -> list[str]:
    return [f["code"] for f in report["findings"]]


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
