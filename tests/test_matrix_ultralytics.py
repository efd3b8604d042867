"""The fresh-run matrix (``matrix.py``) for Ultralytics YOLO's trainer with ``save_period=1``.

Ultralytics cannot run here (its torchvision is a CUDA build; docs/framework-sources.md), so the
run and the framework's answers are committed (``tests/data/ultralytics/``): ``make_run.py`` trained
a scaled-down YOLO26 with ultralytics 8.4.190's own trainer, three epochs of ten, stopped after the
third save (``weights/last.pt``, ``best.pt``, ``epoch0.pt`` .. ``epoch2.pt``), and resumed it once
for the writes of its next save (``resumed/``); ``record_oracle.py`` broke copies of the run with
this module's breakages and asked Ultralytics itself about every file: what
``YOLO(path).train(resume=True)`` restores (``check_resume``, ``resume_training``,
``_load_checkpoint_state``) or the error it stops with, and which file ``get_latest_run`` picks.
The oracle here is that record, looked up by each file's content (``frameworks.yolo_restored``).
A killed save is the resumed save's own writes replayed under ``killer`` (``yolo_resumed_save``);
``record_oracle.py`` killed Ultralytics' real resume at each kill point and found the same files.

The automatic resume, ``yolo train resume`` without a model, takes ``get_latest_run``
(``ultralytics/utils/files.py``: the newest ``last*.pt`` below the folder by ctime) and fails
("Resume checkpoint not found") where there is none. ``last.pt`` is a whole copy of the newest
epoch, resumed in its place.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from frameworks import YOLO_DATA, yolo_restored, yolo_run
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

VERSION = "8.4.190-" + hashlib.sha256(b"".join(p.read_bytes() for p in sorted((YOLO_DATA / "run").rglob("*.*")))).hexdigest()[:12]
"""The Ultralytics release that made the run, and a digest of the run's files (they key the cached run)."""
_EPOCH = re.compile(r"^epoch([0-9]+)\.pt\Z")
LAST = "last.pt"


def build(folder: Path) -> Path:
    return yolo_run(folder)


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(match[1]): path for path in run.iterdir() if (match := _EPOCH.match(path.name))}


def restore(run: Path, path: Path) -> str:
    """``YOLO(path).train(resume=True)``, as recorded: a digest of what it restored."""
    recorded = yolo_restored(path)
    if "error" in recorded:
        raise Unrestorable(recorded["error"])
    return str(recorded["digest"])


def auto_resume(run: Path) -> Path | None:
    """``get_latest_run``: the newest ``last*.pt`` by ctime; none is "Resume checkpoint not found"."""
    found = glob.glob(f"{run.parent}/**/last*.pt", recursive=True)
    if not found:
        raise Unrestorable("Resume checkpoint not found. Please pass a valid checkpoint to resume from")
    return Path(max(found, key=os.path.getctime))


def last_copy(run: Path, restored: Callable[[Path], dict[str, Any]] = yolo_restored) -> dict[int, Path]:
    """``last.pt``, by the epoch it records (the one before the epoch its resume goes on at)."""
    if not (run / LAST).is_file():
        return {}
    recorded = restored(run / LAST)
    return {} if "error" in recorded else {int(recorded["resumes_at"]) - 1: run / LAST}


ULTRALYTICS = Fresh(
    name="ultralytics",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=auto_resume,
    save_more="from frameworks import yolo_resumed_save\nyolo_resumed_save(run)",
    # writes.json: args.yaml and results.csv (files 1-2), then last.pt, best.pt and epoch3.pt:
    # last.pt cut in place, last.pt whole with nothing after it, best.pt cut, epoch3.pt cut
    kill_points=(KillPoint(3, 0.5), KillPoint(3, 1.0), KillPoint(4, 0.5), KillPoint(5, 0.5)),
    pointer=lambda run: run / LAST,
    stale=lambda run: shutil.copyfile(run / "epoch0.pt", run / LAST),  # an older save's copy restored over it
    copies=last_copy,
)

test_breakage, test_killed_mid_save = matrix_tests(
    VERSION,
    ULTRALYTICS,
)
