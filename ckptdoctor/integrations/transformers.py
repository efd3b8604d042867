"""An HF ``TrainerCallback`` that checks the disk before each checkpoint save.

    trainer = Trainer(..., callbacks=[DiskCheckCallback()])

When the save the Trainer is about to make would not fit (CKD501) or cannot be written
(CKD503), on rank 0's word every rank cancels it (with ``save_strategy="best"``, the evaluation
that would decide it), the Trainer is asked to stop, and the finding is logged with its fixes.
Every ``checkpoint-N`` already saved stays whole, and ``train()`` then raises ``DiskCheckFailed``
(uncaught: exit status 1), so that a pipeline sees the failure;
``DiskCheckCallback(raise_on_stop=False)`` returns normally instead.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from ckptdoctor.integrations._common import DiskCheckFailed, Watch
from ckptdoctor.model import Finding

__all__ = ["DiskCheckCallback", "DiskCheckFailed"]


class DiskCheckCallback(Watch, TrainerCallback):
    """Run ``ckptdoctor.preflight`` on ``args.output_dir`` whenever the Trainer is about to save
    (``DiskCheckCallback(keep_last=None, margin=0.10, raise_on_stop=True)``; ``.report``, ``.stopped``)."""

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.fail_if_stopped()
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        return self._check(args, state, control, kwargs)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        return self._check(args, state, control, kwargs)

    def _check(self, args: Any, state: Any, control: Any, kwargs: dict[str, Any]) -> Any:
        # with save_strategy="best" the Trainer decides to save after the evaluation: judge before it
        best = str(getattr(args.save_strategy, "value", args.save_strategy)) == "best"
        if self.stopped is not None or not (control.should_save or (best and control.should_evaluate)):
            return control
        finding = None
        if state.is_world_process_zero:
            judge = self.judge(args.save_total_limit)
            optimizer = None if args.save_only_model else kwargs.get("optimizer")
            self.report = judge.preflight(args.output_dir, kwargs.get("model"), optimizer)
            finding = judge.blocking(self.report)
        finding = _from_rank_zero(finding)
        if finding is not None:
            self.stop(finding, state.is_world_process_zero)
            control.should_save = False
            if best:
                control.should_evaluate = False
            control.should_training_stop = True
        return control


def _from_rank_zero(finding: Finding | None) -> Finding | None:
    """Rank 0's decision on every rank (each must skip the same save, or the save's collectives hang)."""
    # loaded when the callback first runs: importing it costs a trainer nothing
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return finding
    box = [finding]
    dist.broadcast_object_list(box, src=0)
    return box[0]
