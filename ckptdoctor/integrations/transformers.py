"""An HF ``TrainerCallback`` that checks the disk before each checkpoint save.

    trainer = Trainer(..., callbacks=[DiskCheckCallback()])

When the save the Trainer is about to make would not fit (CKD501) or cannot be written
(CKD503), it cancels that save, asks the Trainer to stop, and logs the finding with its fixes;
``train()`` returns normally, and every ``checkpoint-N`` already saved stays whole.
"""

from __future__ import annotations

import logging
from typing import Any

from transformers import TrainerCallback

from ckptdoctor.api import preflight
from ckptdoctor.integrations._common import blocking, explain, optimizer_kind, parameter_bytes
from ckptdoctor.model import Finding, Report

log = logging.getLogger("ckptdoctor")


class DiskCheckCallback(TrainerCallback):
    """Run ``ckptdoctor.preflight`` on ``args.output_dir`` whenever the Trainer is about to save."""

    def __init__(self, keep_last: int | None = None, margin: float = 0.10) -> None:
        self.keep_last = keep_last
        self.margin = margin
        self.report: Report | None = None
        """The last preflight report."""
        self.stopped: Finding | None = None
        """Why training was stopped, if it was."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        return self._check(args, state, control, kwargs)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        return self._check(args, state, control, kwargs)

    def _check(self, args: Any, state: Any, control: Any, kwargs: dict[str, Any]) -> Any:
        if not control.should_save or not state.is_world_process_zero:
            return control
        model, optimizer = kwargs.get("model"), kwargs.get("optimizer")
        self.report = preflight(
            args.output_dir,
            model_bytes=parameter_bytes(model) if model is not None else None,
            optimizer=(optimizer_kind(optimizer) if optimizer is not None else None) or "adamw",
            keep_last=self.keep_last if self.keep_last is not None else args.save_total_limit,
            margin=self.margin,
        )
        finding = blocking(self.report)
        if finding is not None:
            self.stopped = finding
            log.error(explain(finding))
            control.should_save = False
            control.should_training_stop = True
        return control
