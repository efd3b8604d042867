"""The fresh-run matrix (``matrix.py``) for mmengine: a real ``Runner.train()`` of three epochs
with ``CheckpointHook(interval=1)`` keeping every save (``epoch_1.pth`` to ``epoch_3.pth``, then
``last_checkpoint``); the oracle is ``Runner(resume=True, load_from=path)``, the automatic resume
``Runner(resume=True)``, which takes the path ``last_checkpoint`` holds
(``mmengine.runner.checkpoint.find_latest_checkpoint``). mmengine 0.10 loads with torch's default
``weights_only=True``, which refuses its own ``HistoryBuffer`` on torch >= 2.6: every resume here
sets ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``, as docs/framework-sources.md says."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from frameworks import mmengine_run
from matrix import Fresh, KillPoint, Restored, matrix_tests, restored_by

mmengine = pytest.importorskip("mmengine")
pytest.importorskip("torch")

from mmengine.hooks import Hook  # noqa: E402  (after the skip where mmengine is missing)

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

KEEP_ALL = {"max_keep_ckpts": -1, "save_best": None}
"""``CheckpointHook(interval=1)`` keeping every save, and no best checkpoint (whose full path a
resumed run would delete, wherever the run was copied to)."""
FORCE = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


class _Capture(Hook):  # type: ignore[misc]
    """Stops the run before its first step, once the Runner has resumed model, optimizer,
    schedulers and loop counters (``Runner.train``: ``load_or_resume`` then ``train_loop.run``)."""

    priority = "HIGHEST"

    def before_train(self, runner: Any) -> None:
        schedulers = [scheduler.state_dict() for scheduler in runner.param_schedulers]
        raise Restored(runner.model.state_dict(), runner.optim_wrapper.state_dict(), schedulers, runner.epoch, runner.iter)


def build(folder: Path) -> Path:
    work = folder / "run"
    mmengine_run(work, "epoch", 3, **KEEP_ALL)
    return work


def checkpoints(run: Path) -> dict[int, Path]:
    found = {}
    for path in run.glob("epoch_*.pth"):
        epoch = path.stem.removeprefix("epoch_")
        if epoch.isdigit():
            found[int(epoch)] = path
    return found


def restore(run: Path, path: Path) -> str:
    """What ``Runner(resume=True, load_from=path).train()`` restores before its first step."""
    with tempfile.TemporaryDirectory() as elsewhere, mock.patch.dict(os.environ, {FORCE: "1"}):
        work = Path(elsewhere) / "work"
        return restored_by(lambda: mmengine_run(work, "epoch", 10, resume=str(path), custom_hooks=[_Capture()], **KEEP_ALL))


def auto_resume(run: Path) -> Path | None:
    """``Runner(resume=True)``: ``load_or_resume`` resumes from ``find_latest_checkpoint(work_dir)``,
    or, where it finds none, trains from scratch."""
    from mmengine.runner.checkpoint import find_latest_checkpoint

    found = find_latest_checkpoint(str(run))
    return None if found is None else Path(found)


def relocate(old: Path, new: Path) -> None:
    """``last_checkpoint`` holds the full path of the newest save: a Runner at ``new`` writes it there."""
    pointer = new / "last_checkpoint"
    if pointer.is_file():
        pointer.write_text(pointer.read_text().replace(str(old), str(new)))


def stale(run: Path) -> None:
    (run / "last_checkpoint").write_text(str(run / "epoch_4.pth"))  # a save never made, as CheckpointHook writes it


EPOCH = Fresh(
    name="epoch",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=auto_resume,
    save_more=(
        f"import os\nos.environ[{FORCE!r}] = '1'\nfrom frameworks import mmengine_run\n"
        f"mmengine_run(run, 'epoch', 4, resume=True, **{KEEP_ALL!r})"
    ),
    # the resumed Runner writes its log, config and vis_data (files 1 to 10) before epoch_4.pth
    kill_points=(KillPoint(11, 0.5), KillPoint(11, 1.0), KillPoint(12, 0.5)),
    pointer=lambda run: run / "last_checkpoint",
    stale=stale,
    healthy_warnings={
        "CKD402": f"mmengine 0.10's resume fails on torch >= 2.6 without {FORCE}=1: its HistoryBuffer is refused by weights_only"
    },
    relocate=relocate,
)

test_breakage, test_killed_mid_save = matrix_tests(
    mmengine.__version__,
    EPOCH,
)
