"""The fresh-run matrix (``matrix.py``) for Lightning: real ``Trainer.fit`` runs of three epochs
with ``ModelCheckpoint(save_top_k=-1)``, ``last.ckpt`` as a link, as a copy, and under a filename
template with text before ``{epoch}``; the oracle is ``trainer.fit(ckpt_path=...)``, and
``ckpt_path="last"`` as ``_CheckpointConnector._parse_ckpt_path`` resolves it."""

from __future__ import annotations

import itertools
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from frameworks import lightning_fit
from matrix import Fresh, KillPoint, Restored, matrix_tests, restored_by

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

lightning = pytest.importorskip("lightning")

_STEP = re.compile(r"step=(\d+)")


class _Capture(lightning.Callback):  # type: ignore[misc]
    """Stops the fit once Lightning has restored the model, optimizer, scheduler and loops."""

    def on_train_start(self, trainer: Any, module: Any) -> None:
        schedulers = [config.scheduler.state_dict() for config in trainer.lr_scheduler_configs]
        optimizers = [optimizer.state_dict() for optimizer in trainer.optimizers]
        raise Restored(module.state_dict(), optimizers, schedulers, trainer.global_step, trainer.current_epoch)


def checkpoints(run: Path) -> dict[int, Path]:
    found = {}
    for path in run.glob("*.ckpt"):
        match = _STEP.search(path.name)
        if match and not path.name.startswith("last"):
            found[int(match.group(1))] = path
    return found


_restores = itertools.count()


def restore(run: Path, path: Path) -> str:
    """What ``trainer.fit(model, ckpt_path=path)`` restores before its first step."""
    folder = run.parent / f"restored-{next(_restores)}"
    return restored_by(lambda: lightning_fit(folder, 10, ckpt_path=str(path), callbacks=[_Capture()], save_top_k=0))


def auto_resume(run: Path) -> Path | None:
    """``trainer.fit(ckpt_path="last")``: the path Lightning's own ``_parse_ckpt_path`` picks."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.trainer.states import TrainerFn

    trainer = lightning.Trainer(callbacks=[ModelCheckpoint(dirpath=run)], logger=False, enable_progress_bar=False)
    picked = trainer._checkpoint_connector._parse_ckpt_path(TrainerFn.FITTING, "last", model_provided=True, model_connected=False)
    return None if picked is None else Path(picked)


def last_copy(run: Path) -> dict[int, Path]:
    """``last.ckpt`` saved as a whole copy (``save_last=True``), by the step it holds."""
    import torch

    last = run / "last.ckpt"
    if last.is_symlink() or not last.is_file():
        return {}
    try:
        return {int(torch.load(last, weights_only=False)["global_step"]): last}
    except Exception:
        return {}


def variant(name: str, kill_points: tuple[KillPoint, ...], **checkpointing: Any) -> Fresh:
    def build(folder: Path) -> Path:
        lightning_fit(folder, 3, save_top_k=-1, **checkpointing)
        return folder / "checkpoints"

    def stale(run: Path) -> None:
        last = run / "last.ckpt"
        if last.is_symlink():  # a link to a save since deleted
            last.unlink()
            last.symlink_to("epoch=5-step=24.ckpt")
        else:  # a whole copy of an older save: `save_last=True` rewrites it, a restore of a backup may not
            shutil.copyfile(checkpoints(run)[8], last)

    arguments = ", ".join(f"{key}={value!r}" for key, value in checkpointing.items())
    return Fresh(
        name=name,
        build=build,
        checkpoints=checkpoints,
        restore=restore,
        auto_resume=auto_resume,
        save_more=f"from frameworks import lightning_fit\nlightning_fit(run.parent, 4, ckpt_path='last', save_top_k=-1, {arguments})",
        kill_points=kill_points,
        pointer=lambda run: run / "last.ckpt",
        stale=stale,
        copies=last_copy,
    )


# Lightning saves into a temporary file and moves it into place (`_atomic_save` in a fsspec
# transaction): file 1 is the new epoch's, file 2 the new `last.ckpt` copy's
LINK = variant("link", (KillPoint(1, 0.5),), save_last="link")
COPY = variant("copy", (KillPoint(1, 0.5), KillPoint(2, 1.0)), save_last=True)
TEMPLATE = variant("template", (KillPoint(1, 0.5),), save_last="link", filename="periodic-{epoch}-{step}")


test_breakage, test_killed_mid_save = matrix_tests(
    lightning.__version__,
    LINK,
    COPY,
    TEMPLATE,
)
