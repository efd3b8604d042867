"""Ultralytics YOLO ``weights/`` folders: real runs of its own trainer, judged by what Ultralytics
itself does with them.

Ultralytics cannot run here (its torchvision is a CUDA build), so its runs are committed
(``tests/data/ultralytics/``, made by ``make_run.py`` with ultralytics 8.4.190: a scaled-down
YOLO26 stopped after three of ten epochs with ``save_period=1``, and YOLO11 and YOLOv8 runs trained
to the end; one scaled-down YOLO11 run of each other task, segment, classify, pose and obb), with
Ultralytics' own answer about each file and each way ``matrix.py`` breaks them
(``oracle.json``, recorded by ``record_oracle.py``): what ``YOLO(path).train(resume=True)``
restores, found by the file's content (``frameworks.yolo_restored``).
"""

from __future__ import annotations

import csv
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from frameworks import YOLO_DATA, YOLO_TASKS, yolo_edited, yolo_oracle, yolo_restored, yolo_run
from sample_set import GADGETS, _add_setitem, _call, _call0, _g, _u
from test_repair_frameworks import age

from ckptdoctor.layouts.registry import layout_named
from ckptdoctor.pipelines.scan import inspect
from ckptdoctor.readers.pickle_safety import judge
from ckptdoctor.readers.unpickler import walk

SAVES = ("epoch2.pt", "last.pt", "best.pt")
"""The run's newest save: one serialized dict written to three names (``save_model``)."""


def only(report: dict, code: str) -> dict:
    (finding,) = [f for f in report["findings"] if f["code"] == code]
    return finding


def scanned(folder: Path):
    _, found = inspect([str(folder)])
    (run,) = found.runs
    return run


def without_epochs(weights: Path) -> Path:
    """The run as the default ``save_period=-1`` leaves it: ``last.pt`` and ``best.pt`` alone."""
    for path in weights.glob("epoch*.pt"):
        path.unlink()
    return weights


def test_a_real_run_verifies_clean_and_resumes_where_ultralytics_resumes(tmp_path, cli):
    weights = yolo_run(tmp_path / "runs" / "detect")
    result = cli("verify", "--deep", "--json", "--fail-on", "warning", tmp_path / "runs")
    assert result.exit_code == 0, result.stdout
    (run,) = result.json["runs"]
    assert run["layout"] == "ultralytics" and run["unit"] == "epoch"
    assert [(c["index"], c["status"]) for c in run["checkpoints"]] == [(0, "complete"), (1, "complete"), (2, "complete")]
    # every save pickles Ultralytics' model and arguments: said, as info, with the loader that reads them
    findings = result.json["findings"]
    assert {Path(f["path"]).name for f in findings} == {"epoch0.pt", "epoch1.pt", *SAVES}
    assert {(f["code"], f["severity"]) for f in findings} == {("CKD402", "info")}
    assert all("DetectionModel" in f["message"] and "IterableSimpleNamespace" in f["message"] for f in findings)
    assert all("torch_load" in f["message"] and "weights_only=False" in f["message"] for f in findings)
    assert all(any("ULTRALYTICS_SAFE_LOAD=1" in fix for fix in f["fixes"]) for f in findings)
    # what Ultralytics resumes from the path ckptdoctor names: epoch 2's state, going on at epoch 3
    found = scanned(weights)
    assert found.resume.index == 2 and "yolo train resume model=" in found.resume_how
    resumed = yolo_restored(Path(found.resume_path))
    assert resumed["resumes_at"] == 3 and resumed["digest"] == yolo_restored(weights / "epoch2.pt")["digest"]


def test_the_default_run_of_last_and_best_alone_is_recognised(tmp_path, inspect_json):
    weights = without_epochs(yolo_run(tmp_path))
    (run,) = inspect_json(weights).json["runs"]
    assert run["layout"] == "ultralytics" and [c["index"] for c in run["checkpoints"]] == [2]  # both whole saves of epoch 2
    assert yolo_restored(Path(scanned(weights).resume_path))["resumes_at"] == 3


@pytest.mark.parametrize("family", ["yolo11", "yolov8"])
def test_a_finished_run_of_each_model_family_is_vouched_for_and_finished(family, tmp_path, cli):
    weights = yolo_run(tmp_path, family)
    result = cli("verify", "--deep", "--json", "--fail-on", "warning", weights)
    assert result.exit_code == 0, result.stdout
    assert sorted((f["code"], f["severity"]) for f in result.json["findings"]) == [("CKD107", "info"), ("CKD402", "info")]
    assert "training finished" in only(result.json, "CKD107")["message"]
    assert "DetectionModel" in only(result.json, "CKD402")["message"]
    found = scanned(weights)
    assert found.resume is not None and "nothing to resume" in found.resume_how
    # what Ultralytics says of strip_optimizer's file: no resume, a new training from its weights
    assert "not a resumable training checkpoint" in yolo_restored(weights / "last.pt")["error"]


def _rebuilt(path: Path):
    with zipfile.ZipFile(path) as archive:
        (pickled,) = [name for name in archive.namelist() if name.endswith("/data.pkl")]
        (issue,) = judge(walk(archive.read(pickled)), "data.pkl")
    assert issue.rebuilt is not None, issue.detail
    return issue.rebuilt


@pytest.mark.slow
def test_the_classes_vouched_for_are_those_ultralytics_own_restricted_loader_admits_and_rebuilds_plain():
    """The layout vouches for exactly the classes ``make_run.py classes`` listed from the installed
    ultralytics and torch (``classes.json``: what ``_SafeLoad`` admits, less those whose unpickling
    runs more than ``__new__`` and ``nn.Module.__setstate__``), and they cover every class a real
    save of each task and model family pickles; the ones left out are none of them."""
    listed = json.loads((YOLO_DATA / "classes.json").read_text())
    own = layout_named("ultralytics").own_objects
    assert own.classes == set(listed["vouched"])
    assert not own.classes & set(listed["excluded"])
    rebuilt = [_rebuilt(path) for path in sorted(YOLO_DATA.rglob("*.pt"))]
    assert set().union(*(r.instances for r in rebuilt)) <= own.classes
    assert set().union(*(r.called for r in rebuilt)) == own.called_empty
    assert set().union(*(r.values for r in rebuilt)) == own.enums  # the classifier's InterpolationMode
    assert not any(r.methods or r.other for r in rebuilt)
    # each task's own head and model class, from its real run
    for task, head in (("segment", "Segment"), ("classify", "Classify"), ("pose", "Pose"), ("obb", "OBB")):
        (saved,) = [_rebuilt(YOLO_DATA / task / "train" / "weights" / "last.pt")]
        assert f"ultralytics.nn.modules.head.{head}" in saved.instances


@pytest.mark.parametrize("task", YOLO_TASKS)
def test_a_real_run_of_each_task_verifies_clean_and_resumes_where_ultralytics_resumes(task, tmp_path, cli):
    """Segmentation, classification, pose and OBB saves pickle their own heads, ``Proto``,
    ``ConvTranspose2d``, a classifier's torchvision transforms and ``InterpolationMode``: what
    Ultralytics writes itself, so CKD402 as the detection saves are, never "corrupt"."""
    weights = yolo_run(tmp_path / "runs" / task, task)
    result = cli("verify", "--deep", "--json", "--fail-on", "warning", tmp_path / "runs")
    assert result.exit_code == 0, result.stdout
    (run,) = result.json["runs"]
    assert run["layout"] == "ultralytics"
    assert [(c["index"], c["status"]) for c in run["checkpoints"]] == [(0, "complete")]
    assert [(f["code"], f["severity"]) for f in result.json["findings"]] == [("CKD402", "info")]
    found = scanned(weights)
    assert found.resume.index == 0 and "yolo train resume model=" in found.resume_how
    assert yolo_restored(Path(found.resume_path))["resumes_at"] == 1  # Ultralytics' own resume goes on at epoch 1
    # verify --resume-path judges what it reads as the run's findings do: Ultralytics' own classes are no payload
    checked = cli("verify", "--resume-path", tmp_path / "runs")
    assert checked.exit_code == 0 and checked.stdout.strip() == found.resume_path


@pytest.mark.parametrize("task", YOLO_TASKS)
def test_a_payload_in_a_save_of_each_task_is_still_unsafe(task, tmp_path, cli):
    weights = yolo_run(tmp_path, task)
    payload = GADGETS["os.system"]("/nonexistent/ckptdoctor-canary")
    (weights / "last.pt").write_bytes(yolo_edited(weights / "last.pt", lambda pickled: _add_setitem(pickled, "extra", payload)))
    result = cli("verify", "--json", weights)
    assert result.exit_code == 1
    (unsafe,) = [f for f in result.json["findings"] if f["code"] == "CKD401"]
    assert unsafe["severity"] == "error" and "os.system" in unsafe["message"]
    refused = cli("verify", "--resume-path", weights)
    assert refused.exit_code == 1 and refused.stdout == ""


def test_ultralytics_own_restricted_loader_resumes_its_saves_alike():
    """What the CKD402 fix says: with ``ULTRALYTICS_SAFE_LOAD=1`` (``weights_only=True`` and
    Ultralytics' allowlist) ``yolo train resume`` restores each save exactly as its default load does."""
    weights = YOLO_DATA / "run" / "train" / "weights"
    safe_load = yolo_oracle()["safe_load"]
    assert sorted(safe_load) == sorted(path.name for path in weights.glob("*.pt"))
    for name, restored in safe_load.items():
        assert {key: restored[key] for key in ("resumes_at", "digest")} == {
            key: yolo_restored(weights / name)[key] for key in ("resumes_at", "digest")
        }


def test_the_same_files_outside_an_ultralytics_run_are_unsafe(tmp_path, cli):
    loop = tmp_path / "ckpts"
    loop.mkdir()
    for epoch in (0, 1):  # a hand-made loop's files: copies of real Ultralytics saves
        shutil.copy(YOLO_DATA / "run" / "train" / "weights" / f"epoch{epoch}.pt", loop / f"epoch{epoch}.pt")
    result = cli("verify", "--json", loop)
    assert result.json["runs"][0]["layout"] != "ultralytics"
    assert result.exit_code == 1
    unsafe = [f for f in result.json["findings"] if f["code"] == "CKD401"]
    assert {Path(f["path"]).name for f in unsafe} == {"epoch0.pt", "epoch1.pt"}
    assert not any("torch_load" in f["message"] for f in unsafe)


def _int(value: int) -> bytes:
    """BININT1, as torch's protocol 2 writes a small int."""
    return b"K" + bytes([value])


_CONV, _DETECT = _g("ultralytics.nn.modules.conv", "Conv"), _g("ultralytics.nn.modules.head", "Detect")
_CONV2D, _SEQUENTIAL = _g("torch.nn.modules.conv", "Conv2d"), _g("torch.nn.modules.container", "Sequential")
_MODULE_LIST, _ARGS = _g("torch.nn.modules.container", "ModuleList"), _g("ultralytics.utils", "IterableSimpleNamespace")
_PLAIN = b")\x81"
"""``EMPTY_TUPLE NEWOBJ``: ``cls.__new__(cls)``, how pickle starts a plain object."""
BEYOND = {
    # the vouched-for classes used as no Ultralytics save uses them
    "block-called-with-arguments": _call(_CONV, _int(3), _int(8)),
    "block-called-empty": _call0(_CONV),
    "torch-module-called-with-arguments": _call(_CONV2D, _int(3), _int(8), _int(1)),
    "torch-module-called-empty": _call0(_SEQUENTIAL),
    "block-class-given-fields": _CONV + b"}(" + _u("forward") + _int(0) + b"ub",
    "block-instance-called": _call(_CONV + _PLAIN, _u("payload")),
    "module-list-given-an-item": _MODULE_LIST + _PLAIN + _int(1) + b"a",
    "sequential-given-an-item": _SEQUENTIAL + _PLAIN + _int(0) + _int(1) + b"s",
    "block-class-as-a-value": _CONV,
    "arguments-called-with-a-value": _call(_ARGS, _u("payload")),
    "arguments-built-plain": _ARGS + _PLAIN + b"}b",
    "arguments-class-given-fields": _ARGS + b"}(" + _u("get") + _int(0) + b"ub",
    "arguments-instance-called": _call(_call0(_ARGS), _u("payload")),
    "method-looked-up": _call(_g("builtins", "getattr"), _DETECT, _u("forward")),
    # classes no real save holds: Ultralytics' own AAttn (its __setstate__ computes), another framework's
    "unvouched-block": _g("ultralytics.nn.modules.block", "AAttn") + _PLAIN + b"}b",
    "another-frameworks-class": _g("deepspeed.runtime.fp16.loss_scaler", "LossScaler") + _PLAIN + b"}b",
    # anything else beside them
    "os.system": GADGETS["os.system"]("/nonexistent/ckptdoctor-canary"),
}


def _edited(into: Path, value: bytes) -> Path:
    """A copy of the run whose newest save (``epoch2.pt``, ``last.pt``, ``best.pt``: one content)
    gets one more top-level item."""
    weights = yolo_run(into)
    edited = yolo_edited(weights / "epoch2.pt", lambda pickled: _add_setitem(pickled, "extra", value))
    for name in SAVES:
        (weights / name).write_bytes(edited)
    return weights


@pytest.mark.slow
@pytest.mark.parametrize("payload", sorted(BEYOND))
def test_ultralytics_classes_used_any_other_way_are_unsafe_in_its_own_run(payload, tmp_path, cli):
    weights = _edited(tmp_path, BEYOND[payload])
    result = cli("verify", "--json", weights)
    assert result.exit_code == 1
    unsafe = [f for f in result.json["findings"] if f["code"] == "CKD401"]
    assert {Path(f["path"]).name for f in unsafe} == set(SAVES)
    assert all("torch_load" in f["message"] for f in unsafe)  # Ultralytics' loader would run it: weights_only=False
    (run,) = result.json["runs"]
    assert run["checkpoints"][-1]["status"] == "corrupt" and run["resume"]["index"] == 1
    assert yolo_restored(weights / "epoch1.pt")["resumes_at"] == 2  # where Ultralytics' own resume of it goes on


@pytest.mark.slow
def test_the_same_edit_with_nothing_unsafe_stays_vouched_for(tmp_path, cli):
    """The control of the payloads above: the rewritten zip and one more plain item are no finding."""
    result = cli("verify", "--json", "--fail-on", "warning", _edited(tmp_path, _int(7)))
    assert result.exit_code == 0 and {f["code"] for f in result.json["findings"]} == {"CKD402"}
    assert result.json["runs"][0]["resume"]["index"] == 2


def test_a_kill_while_last_pt_was_written_resumes_from_best_pt(tmp_path, inspect_json):
    weights = without_epochs(yolo_run(tmp_path))
    last = weights / "last.pt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])  # save_model writes the bytes in place
    report = inspect_json(weights).json
    assert only(report, "CKD203")["path"].endswith("last.pt")
    found = scanned(weights)
    assert found.resume.index == 2 and found.resume_path.endswith("best.pt")
    assert "not a loadable checkpoint" in yolo_restored(last)["error"]
    assert yolo_restored(Path(found.resume_path))["resumes_at"] == 3


@pytest.mark.parametrize("lost", ["stale", "deleted"])
def test_a_stale_or_deleted_last_pt_is_told_and_repair_copies_the_resume_point_over_it(lost, tmp_path, cli):
    """`yolo train resume` loads `last.pt`: a copy of epoch 0 put back over it goes back to epoch 0
    (CKD116), and without it the resume finds nothing (CKD113). `repair` writes it as the trainer
    does, the resume point's bytes, from which Ultralytics goes on at epoch 3."""
    weights = yolo_run(tmp_path / "runs" / "detect")
    last = weights / "last.pt"
    if lost == "stale":
        shutil.copyfile(weights / "epoch0.pt", last)
        assert yolo_restored(last)["resumes_at"] == 1  # what Ultralytics does with it
    else:
        last.unlink()
    report = cli("inspect", "--json", weights).json
    (told,) = [f for f in report["findings"] if f["severity"] != "info"]
    assert (told["code"], told["severity"]) == (("CKD116", "warning") if lost == "stale" else ("CKD113", "error"))
    assert "ckptdoctor repair" in told["fixes"][0]
    assert cli("repair", "--yes", "--min-age", "0", weights).exit_code == 0
    assert (
        yolo_restored(last)["resumes_at"] == 3
        and [f for f in cli("inspect", "--json", weights).json["findings"] if f["severity"] != "info"] == []
    )


def test_the_weights_folder_named_as_dot_is_still_ultralytics(tmp_path, monkeypatch, inspect_json):
    """`cd runs/detect/train/weights && ckptdoctor inspect .`: the folder's own name is taken from
    where it is, not from the path as typed."""
    weights = yolo_run(tmp_path)
    monkeypatch.chdir(weights)
    (run,) = inspect_json(Path(".")).json["runs"]
    assert (run["layout"], run["resume"]["index"]) == ("ultralytics", 2)


def test_a_save_without_optimizer_state_is_incomplete(tmp_path, inspect_json):
    weights = yolo_run(tmp_path)
    edited = yolo_edited(weights / "epoch2.pt", lambda pickled: _add_setitem(pickled, "optimizer", b"N"))
    for name in SAVES:
        (weights / name).write_bytes(edited)
    report = inspect_json(weights).json
    assert only(report, "CKD101")["index"] == 2
    assert report["runs"][0]["resume"]["index"] == 1
    # Ultralytics does not resume it: it starts a new training, the run's progress lost
    assert "not a resumable training checkpoint" in yolo_restored(weights / "epoch2.pt")["error"]


def test_keep_best_reads_results_csv(tmp_path, cli):
    weights = yolo_run(tmp_path)
    age(weights)
    with open(weights.parent / "results.csv") as rows:
        losses = {int(row["epoch"]) - 1: float(row["train/box_loss"]) for row in csv.DictReader(rows)}
    plan = cli("prune", "--keep-best", "1", "--metric", "train/box_loss", "--mode", "min", "--dry-run", "--json", weights).json["plan"]
    kept = {item["index"] for item in plan if item["action"] == "keep"}
    assert kept == {min(losses, key=losses.__getitem__), 2}  # the best epoch by Ultralytics' results.csv, and the resume point


def test_a_loops_last_and_epoch_files_are_not_ultralytics(tmp_path, inspect_json):
    torch = pytest.importorskip("torch")
    loop = tmp_path / "ckpts"
    loop.mkdir()
    for epoch in (1, 2):
        torch.save({"model": {}, "optimizer": {}}, loop / f"epoch{epoch}.pt")
    torch.save({"model": {}, "optimizer": {}}, loop / "last.pt")
    assert inspect_json(loop).json["runs"][0]["layout"] == "torch"
    assert inspect_json(yolo_run(tmp_path / "yolo")).json["runs"][0]["layout"] == "ultralytics"
