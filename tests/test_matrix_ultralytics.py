"""The fresh-run matrix (``matrix.py``) for Ultralytics YOLO's trainer with ``save_period=1``.

Ultralytics cannot train here (its torchvision is a CUDA build; docs/framework-sources.md): the
run is written by ``frameworks.YoloTrainer``, which saves as ultralytics 8.4.190 does
(``ultralytics/engine/trainer.py``, ``BaseTrainer.save_model``: one serialized dict written in
place to ``weights/last.pt``, to ``weights/best.pt`` on a new best fitness and to
``weights/epoch{N}.pt``), three epochs of ten. The oracle is ``YoloTrainer.resumed``,
``yolo train resume model=<path>`` (``check_resume``, ``resume_training``,
``_load_checkpoint_state``); the automatic resume, ``yolo train resume`` without a model, takes
``get_latest_run`` (``ultralytics/utils/files.py``: the newest ``last*.pt`` below the folder by
ctime) and fails ("Resume checkpoint not found") where there is none. ``last.pt`` is a whole copy
of the newest epoch, resumed in its place.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from frameworks import YoloTrainer, yolo_load
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

torch = pytest.importorskip("torch")

VERSION = "8.4.190"
"""The Ultralytics release the builder and the oracle follow (it keys the cached run)."""
_EPOCH = re.compile(r"^epoch([0-9]+)\.pt\Z")
LAST = "last.pt"


def build(folder: Path) -> Path:
    trainer = YoloTrainer(folder / "train", epochs=10, save_period=1)
    for fitness in (0.3, 0.5, 0.4):
        trainer.train_epoch(fitness)
    return trainer.wdir


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(match[1]): path for path in run.iterdir() if (match := _EPOCH.match(path.name))}


def restore(run: Path, path: Path) -> str:
    """``resume model=path``: the weights (from the EMA), SGD, ``best_fitness`` and the epoch it goes on at."""
    with tempfile.TemporaryDirectory() as save_dir:
        try:
            trainer = YoloTrainer.resumed(path, Path(save_dir))
        except Exception as error:
            raise Unrestorable(f"{type(error).__name__}: {error}") from error
    return tensors_digest(trainer.model.state_dict(), trainer.optimizer.state_dict(), trainer.best_fitness, trainer.epoch)


def auto_resume(run: Path) -> Path | None:
    """``get_latest_run``: the newest ``last*.pt`` by ctime; none is "Resume checkpoint not found"."""
    found = glob.glob(f"{run.parent}/**/last*.pt", recursive=True)
    if not found:
        raise Unrestorable("Resume checkpoint not found. Please pass a valid checkpoint to resume from")
    return Path(max(found, key=os.path.getctime))


def last_copy(run: Path) -> dict[int, Path]:
    """``last.pt``, by the epoch it records."""
    try:
        return {int(yolo_load(run / LAST)["epoch"]): run / LAST}
    except Exception:
        return {}


ULTRALYTICS = Fresh(
    name="ultralytics",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=auto_resume,
    save_more="from frameworks import YoloTrainer\nYoloTrainer.resumed(run / 'last.pt', run.parent).train_epoch(0.45)",
    # args.yaml and results.csv (files 1-2), then last.pt cut in place, last.pt whole before
    # epoch3.pt, and epoch3.pt cut
    kill_points=(KillPoint(3, 0.5), KillPoint(3, 1.0), KillPoint(4, 0.5)),
    pointer=lambda run: run / LAST,
    stale=lambda run: shutil.copyfile(run / "epoch0.pt", run / LAST),  # an older save's copy restored over it
    copies=last_copy,
)

_PICKLED = (
    "verify --deep calls every save corrupt for its pickled nn.Module ema (CKD401) and the run CKD110, "
    "though Ultralytics' torch_load (weights_only=False) restores each one"
)

test_breakage, test_killed_mid_save = matrix_tests(
    VERSION,
    ULTRALYTICS,
    expected_failures={
        "ultralytics-healthy": _PICKLED,
        "ultralytics-truncated-newest": _PICKLED,
        "ultralytics-zero-tail": _PICKLED,
        "ultralytics-stale-pointer": _PICKLED + "; and last.pt, a whole copy of epoch 0, is not reported: resume=True restores epoch 0",
        "ultralytics-deleted-pointer": _PICKLED
        + "; and a deleted last.pt is not reported: resume=True fails ('Resume checkpoint not found')",
        "ultralytics-torn-copy": _PICKLED + "; and inspect names the torn epoch2.pt in --resume-path, not last.pt, a whole copy of epoch 2",
        "ultralytics-file3-50pct": _PICKLED + "; and a cut last.pt is CKD203 but not CKD113/CKD114: resume=True picks it and fails",
        "ultralytics-file3-100pct": _PICKLED,
        "ultralytics-file4-50pct": _PICKLED,
    },
)
