"""The fresh-run matrix (``matrix.py``) for fairseq's ``fairseq-train``.

fairseq 0.12.2 does not import on Python 3.11 (docs/framework-sources.md): the run is written by
``frameworks.FairseqTrainer``, which saves as facebookresearch/fairseq 3d262bb2 does
(``checkpoint_utils.save_checkpoint``: ``checkpoint{E}.pt`` through ``<name>.tmp`` and a rename
(``torch_persistent_save``), then whole copies to ``checkpoint_best.pt`` and
``checkpoint_last.pt``; ``Trainer.state_dict`` for the keys), three epochs of four updates. The
oracle is ``frameworks.fairseq_resume``, ``checkpoint_utils.load_checkpoint`` and
``Trainer.load_checkpoint`` with ``--restore-file <path>``; the automatic resume is the default
``--restore-file checkpoint_last.pt``, which starts afresh where that file is missing.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from frameworks import FairseqTrainer, fairseq_resume
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

torch = pytest.importorskip("torch")

SOURCE = "3d262bb2"
"""The fairseq commit the builder and the oracle follow (it keys the cached run)."""
_EPOCH = re.compile(r"^checkpoint([0-9]+)\.pt\Z")
LAST = "checkpoint_last.pt"


def build(folder: Path) -> Path:
    return FairseqTrainer(folder / "checkpoints").epochs(3).save_dir


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(match[1]): path for path in run.iterdir() if (match := _EPOCH.match(path.name))}


def restore(run: Path, path: Path) -> str:
    """``--restore-file path``: the weights, Adam, the scheduler's state, the update count and
    where the epoch iterator goes on."""
    try:
        restored = fairseq_resume(path)
    except Exception as error:
        raise Unrestorable(f"{type(error).__name__}: {error}") from error
    optimizer = None if restored["optimizer"] is None else restored["optimizer"].state_dict()
    counters = (restored["num_updates"], restored["epoch"], restored["in_epoch"])
    return tensors_digest(restored["model"].state_dict(), optimizer, restored["lr_scheduler_state"], counters)


def auto_resume(run: Path) -> Path | None:
    """The default ``--restore-file checkpoint_last.pt`` (``load_checkpoint``), where it exists."""
    last = run / LAST
    return last if last.exists() else None


def last_copy(run: Path) -> dict[int, Path]:
    """``checkpoint_last.pt``, a whole copy, by the epoch it ended (its iterator goes on at the next)."""
    try:
        return {fairseq_resume(run / LAST)["epoch"] - 1: run / LAST}
    except Exception:
        return {}


FAIRSEQ = Fresh(
    name="fairseq",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=auto_resume,
    save_more="from frameworks import fairseq_relaunched\nfairseq_relaunched(run).epochs(1)",
    # checkpoint4.pt.tmp cut and whole (not yet renamed); checkpoint_best.pt copied whole, before
    # checkpoint_last.pt. Copies go through os.sendfile (shutil.copyfile), so they die only whole
    kill_points=(KillPoint(1, 0.5), KillPoint(1, 1.0), KillPoint(2, 1.0)),
    pointer=lambda run: run / LAST,
    stale=lambda run: shutil.copyfile(run / "checkpoint2.pt", run / LAST),  # a copy of an older save restored over it
    copies=last_copy,
)

test_breakage, test_killed_mid_save = matrix_tests(
    SOURCE,
    FAIRSEQ,
    expected_failures={
        "fairseq-zero-tail": "checkpoint3.pt's zeroed 4 KiB cover most of its data.pkl in a file this small (5 KiB), and fairseq "
        "records the epoch only nested (extra_state.train_iterator): nothing read ties the whole checkpoint_last.pt to epoch 3, "
        "so ckptdoctor resumes from epoch 2 where fairseq's default --restore-file resumes from the copy of epoch 3",
    },
)
