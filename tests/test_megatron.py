"""Megatron-LM save folders, built by hand with Megatron's names (Megatron is too heavy here)."""

from __future__ import annotations

import shutil

from frameworks import megatron_run


def only(report: dict, code: str) -> dict:
    (finding,) = [f for f in report["findings"] if f["code"] == code]
    return finding


def test_a_healthy_save_folder_is_quiet(tmp_path, inspect_json):
    report = inspect_json(megatron_run(tmp_path / "save")).json
    assert report["findings"] == []
    (run,) = report["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("megatron", "iteration", 200)
    assert len(run["checkpoints"][0]["files"]) == 2
    assert len(report["runs"]) == 1  # rank folders are not runs of their own


def test_an_iteration_newer_than_the_tracker_never_finished(tmp_path, inspect_json):
    folder = megatron_run(tmp_path / "save", (100, 200, 300), tracker=200)
    report = inspect_json(folder).json
    uncommitted = only(report, "CKD106")
    assert uncommitted["index"] == 300 and "latest_checkpointed_iteration.txt" in uncommitted["message"]
    assert report["runs"][0]["checkpoints"][-1]["status"] == "incomplete"
    assert report["runs"][0]["resume"]["index"] == 200


def test_a_missing_rank_folder_is_ckd105_and_the_tracker_points_at_it(tmp_path, inspect_json):
    folder = megatron_run(tmp_path / "save")
    shutil.rmtree(folder / "iter_0000200" / "mp_rank_01")
    report = inspect_json(folder).json
    assert "mp_rank_01/model_optim_rng.pt" in only(report, "CKD105")["message"]
    assert only(report, "CKD114")["index"] == 200
    assert report["runs"][0]["resume"]["index"] == 100


def test_a_tracker_naming_a_missing_iteration_is_ckd113(tmp_path, inspect_json):
    folder = megatron_run(tmp_path / "save", tracker=400)
    assert "not there" in only(inspect_json(folder).json, "CKD113")["message"]
