"""A Lightning callback that checks the disk before each ``ModelCheckpoint`` save.

    trainer = Trainer(callbacks=[ModelCheckpoint(...), DiskCheck(keep_last=3)])

Lightning runs checkpoint callbacks last, so this one looks first, on the same schedule as each
``ModelCheckpoint`` (its steps, epochs, and whether it saves at the end of the training epoch or
of validation). When the save due would not fit (CKD501) or cannot be written (CKD503), on rank
0's word every rank skips it, ``trainer.should_stop`` is set, and the finding is logged with its
fixes. Every checkpoint already saved stays whole, and ``fit()`` then raises ``DiskCheckFailed``
(uncaught: exit status 1), so that a pipeline sees the failure; ``DiskCheck(raise_on_stop=False)``
returns normally instead. Lightning writes a checkpoint to ``$TMPDIR`` before moving it into
place, so that volume is checked too.
"""

from __future__ import annotations

import tempfile
from typing import Any

from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint

from ckptdoctor.integrations._common import DiskCheckFailed, Watch
from ckptdoctor.model import Finding

__all__ = ["DiskCheck", "DiskCheckFailed"]


class DiskCheck(Watch, Callback):
    """Run ``ckptdoctor.preflight`` on each ``ModelCheckpoint``'s folder before it saves
    (``DiskCheck(keep_last=None, margin=0.10, raise_on_stop=True)``; ``.report``, ``.stopped``)."""

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.fail_if_stopped()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        due = [cb for cb in _saving(trainer) if cb._every_n_train_steps >= 1 and trainer.global_step % cb._every_n_train_steps == 0]
        self._check(trainer, pl_module, due)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        due = [cb for cb in _saving(trainer) if cb._should_save_on_train_epoch_end(trainer) and _epoch_due(cb, trainer)]
        self._check(trainer, pl_module, due)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        due = [
            cb
            for cb in _saving(trainer)
            if not cb._should_save_on_train_epoch_end(trainer)
            and (_epoch_due(cb, trainer) or getattr(cb, "_defer_save_until_validation", False))
        ]
        self._check(trainer, pl_module, due)

    def _check(self, trainer: Any, pl_module: Any, due: list[Any]) -> None:
        """Every rank comes here with the same ``due`` (the schedule is the same everywhere)."""
        if not due or self.stopped is not None:
            return
        finding = None
        if trainer.is_global_zero:
            finding = self._judge(trainer, pl_module, due)
        finding = trainer.strategy.broadcast(finding, src=0)
        if finding is None:
            return
        self.stop(finding, trainer.is_global_zero)
        trainer.should_stop = True
        for checkpointer in _checkpointers(trainer):
            checkpointer._last_global_step_saved = trainer.global_step  # ModelCheckpoint's own "saved at this step": it skips
            checkpointer.save_last = False  # and no last.ckpt at the end of training either

    def _judge(self, trainer: Any, pl_module: Any, due: list[Any]) -> Finding | None:
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        for checkpointer in due:
            if checkpointer.dirpath is None:
                continue
            judge = self.judge(_keep_last(checkpointer))
            self.report = judge.preflight(checkpointer.dirpath, pl_module, None if checkpointer.save_weights_only else optimizer)
            finding = judge.blocking(self.report) or judge.staging(
                self.report, tempfile.gettempdir(), "Lightning writes each checkpoint there first, then moves it"
            )
            if finding is not None:
                return finding
        return None


def _checkpointers(trainer: Any) -> list[Any]:
    return [cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint)]


def _saving(trainer: Any) -> list[Any]:
    """Checkpointers that may save at this point (Lightning's own conditions)."""
    return [cb for cb in _checkpointers(trainer) if not cb._should_skip_saving_checkpoint(trainer)]


def _epoch_due(checkpointer: Any, trainer: Any) -> bool:
    every = checkpointer._every_n_epochs
    return bool(every >= 1 and (trainer.current_epoch + 1) % every == 0)


def _keep_last(checkpointer: Any) -> int | None:
    top = getattr(checkpointer, "save_top_k", -1)
    return int(top) if top and top > 0 else None
