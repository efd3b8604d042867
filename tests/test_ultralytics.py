"""Ultralytics YOLO ``weights/`` folders, written the way its trainer writes them, resumed the way it resumes.

Ultralytics 8.4.190 installs but cannot train here (the torchvision on disk is a CUDA build), so
``frameworks.YoloTrainer`` does what ``BaseTrainer.save_model``, ``save_metrics`` and
``final_eval``/``strip_optimizer`` do (``ultralytics/engine/trainer.py``,
``ultralytics/utils/torch_utils.py``), and ``yolo_resume`` what ``check_resume`` and
``resume_training`` do with ``torch_load`` (``ultralytics/utils/patches.py``, ``weights_only=False``).
The ``ema`` is a pickled ``nn.Module`` of torch's classes where Ultralytics pickles its own
``DetectionModel``: arbitrary objects either way, and loadable without Ultralytics.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from frameworks import yolo_load, yolo_resume, yolo_run
from test_repair_frameworks import age

from ckptdoctor.pipelines.scan import inspect

torch = pytest.importorskip("torch")


def only(report: dict, code: str) -> dict:
    (finding,) = [f for f in report["findings"] if f["code"] == code]
    return finding


def scanned(folder: Path):
    _, found = inspect([str(folder)])
    (run,) = found.runs
    return run


def test_a_run_is_indexed_by_the_epoch_each_file_records_and_resumes_there(tmp_path, inspect_json):
    weights = yolo_run(tmp_path / "runs" / "detect" / "train", [0.1, 0.3, 0.2], save_period=1)
    report = inspect_json(tmp_path / "runs").json
    assert report["findings"] == []
    (run,) = report["runs"]
    assert (run["layout"], run["unit"], [c["index"] for c in run["checkpoints"]]) == ("ultralytics", "epoch", [0, 1, 2])
    found = scanned(weights)
    assert found.resume.index == 2 and "yolo train resume model=" in found.resume_how
    assert yolo_resume(Path(found.resume_path)) == 3  # Ultralytics goes on at the next epoch


def test_the_default_run_of_last_and_best_alone_is_recognised(tmp_path, inspect_json):
    weights = yolo_run(tmp_path / "train", [0.1, 0.3, 0.2])
    (run,) = inspect_json(weights).json["runs"]
    assert run["layout"] == "ultralytics" and [c["index"] for c in run["checkpoints"]] == [1, 2]  # best.pt, last.pt
    assert yolo_resume(Path(scanned(weights).resume_path)) == 3


def test_the_pickled_model_fails_closed_and_says_ultralytics_loader_needs_it(tmp_path, cli):
    weights = yolo_run(tmp_path / "train", [0.1, 0.3])
    result = cli("verify", "--json", weights)
    assert result.exit_code != 0
    unsafe = [f for f in result.json["findings"] if f["code"] == "CKD401"]
    assert {Path(f["path"]).name for f in unsafe} == {"last.pt", "best.pt"}
    assert all("weights_only=False" in f["message"] and "Ultralytics" in f["message"] for f in unsafe)
    with pytest.raises(Exception, match="weights_only"):
        torch.load(weights / "last.pt", weights_only=True)  # what torch's default says: it is not plain weights


def test_a_finished_run_is_finished_not_damaged(tmp_path, inspect_json):
    weights = yolo_run(tmp_path / "train", [0.1, 0.3, 0.2], finished=True)
    report = inspect_json(weights).json
    assert [(f["code"], f["severity"]) for f in report["findings"]] == [("CKD107", "info")]
    assert "training finished" in report["findings"][0]["message"]
    found = scanned(weights)
    assert found.resume is not None and "nothing to resume" in found.resume_how
    assert yolo_load(weights / "last.pt")["epoch"] == -1
    with pytest.raises(AssertionError, match="nothing to resume"):
        yolo_resume(weights / "last.pt")  # what Ultralytics says


def test_a_kill_while_last_pt_was_written_resumes_from_best_pt(tmp_path, inspect_json):
    weights = yolo_run(tmp_path / "train", [0.1, 0.3, 0.2, 0.25])
    last = weights / "last.pt"
    last.write_bytes(last.read_bytes()[:2000])  # save_model writes the bytes in place
    report = inspect_json(weights).json
    assert only(report, "CKD203")["path"].endswith("last.pt")
    found = scanned(weights)
    assert found.resume.index == 1 and found.resume_path.endswith("best.pt")
    assert yolo_resume(Path(found.resume_path)) == 2


def test_a_save_without_optimizer_state_is_incomplete(tmp_path, inspect_json):
    weights = yolo_run(tmp_path / "train", [0.1, 0.3, 0.2], save_period=1)
    saved = yolo_load(weights / "epoch2.pt")
    saved["optimizer"] = None
    for name in ("epoch2.pt", "last.pt"):
        torch.save(saved, weights / name)
    report = inspect_json(weights).json
    assert only(report, "CKD101")["index"] == 2
    assert report["runs"][0]["resume"]["index"] == 1


def test_keep_best_reads_results_csv(tmp_path, cli):
    weights = yolo_run(tmp_path / "train", [0.5, 0.1, 0.3, 0.2], save_period=1)
    age(weights)
    plan = cli("prune", "--keep-best", "1", "--metric", "metrics/mAP50-95(B)", "--mode", "max", "--dry-run", "--json", weights).json["plan"]
    kept = {item["index"] for item in plan if item["action"] == "keep"}
    assert kept == {0, 3}  # the best epoch by results.csv (row 1), and the resume point


def test_a_loops_last_and_epoch_files_are_not_ultralytics(tmp_path, inspect_json):
    loop = tmp_path / "ckpts"
    loop.mkdir()
    for epoch in (1, 2):
        torch.save({"model": {}, "optimizer": {}}, loop / f"epoch{epoch}.pt")
    torch.save({"model": {}, "optimizer": {}}, loop / "last.pt")
    assert inspect_json(loop).json["runs"][0]["layout"] == "torch"
    assert inspect_json(yolo_run(tmp_path / "train", [0.1, 0.2], save_period=1)).json["runs"][0]["layout"] == "ultralytics"
