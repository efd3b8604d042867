"""A Lightning callback that checks the disk before each ``ModelCheckpoint`` save.

    trainer = Trainer(callbacks=[ModelCheckpoint(...), DiskCheck(keep_last=3)])

Lightning runs checkpoint callbacks last, so this one looks first: when the next save would not
fit (CKD501) or cannot be written (CKD503), it tells every ``ModelCheckpoint`` to skip it, sets
``trainer.should_stop`` and logs the finding with its fixes; ``fit()`` then returns normally, and
every checkpoint already saved stays whole.
"""

from __future__ import annotations

import logging
from typing import Any

from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint

from ckptdoctor.api import preflight
from ckptdoctor.integrations._common import blocking, explain, optimizer_kind, parameter_bytes
from ckptdoctor.model import Finding, Report

log = logging.getLogger("ckptdoctor")


class DiskCheck(Callback):
    """Run ``ckptdoctor.preflight`` on each ``ModelCheckpoint``'s folder before it saves."""

    def __init__(self, keep_last: int | None = None, margin: float = 0.10) -> None:
        self.keep_last = keep_last
        self.margin = margin
        self.report: Report | None = None
        """The last preflight report."""
        self.stopped: Finding | None = None
        """Why training was stopped, if it was."""

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        steps = [cb for cb in _checkpointers(trainer) if cb._every_n_train_steps and trainer.global_step % cb._every_n_train_steps == 0]
        self._check(trainer, pl_module, steps)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._check(trainer, pl_module, _checkpointers(trainer))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self._check(trainer, pl_module, _checkpointers(trainer))

    def _check(self, trainer: Any, pl_module: Any, checkpointers: list[Any]) -> None:
        if not checkpointers or self.stopped is not None or not trainer.is_global_zero:
            return
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        for checkpointer in checkpointers:
            if checkpointer.dirpath is None:
                continue
            self.report = preflight(
                checkpointer.dirpath,
                model_bytes=parameter_bytes(pl_module),
                optimizer=optimizer_kind(optimizer) if optimizer is not None else "sgd",
                keep_last=self.keep_last if self.keep_last is not None else _keep_last(checkpointer),
                margin=self.margin,
            )
            finding = blocking(self.report)
            if finding is not None:
                self.stopped = finding
                log.error(explain(finding))
                trainer.should_stop = True
                for each in _checkpointers(trainer):
                    each._last_global_step_saved = trainer.global_step  # Lightning's own "already saved" mark: skip
                return


def _checkpointers(trainer: Any) -> list[Any]:
    return [cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint)]


def _keep_last(checkpointer: Any) -> int | None:
    top = getattr(checkpointer, "save_top_k", -1)
    return int(top) + (1 if getattr(checkpointer, "save_last", False) else 0) if top and top > 0 else None
