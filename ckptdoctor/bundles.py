"""What bundled checkpoints keep under which top-level key: one table for every reader, layout
and rule that asks.

A bundled checkpoint (Lightning's ``.ckpt``, timm's ``checkpoint-N.pth.tar``, a script's
``torch.save({"model": ..., "optimizer": ...})``) is one pickled dict. Its keys say which roles
it holds (layouts confirm a file's roles from them) and which parts are weights at all: NaN and
Inf matter in model and optimizer tensors only, not in a callback's ``kth_value = inf``.
"""

from __future__ import annotations

from ckptdoctor.model import Role

ROLE_KEYS: tuple[tuple[Role, tuple[str, ...]], ...] = (
    (Role.MODEL, ("state_dict", "model", "model_state_dict", "model_state", "module", "net", "network")),
    (Role.OPTIMIZER, ("optimizer_states", "optimizer", "optimizer_state_dict", "optimizer_state", "optim", "opt")),
    (Role.SCHEDULER, ("lr_schedulers", "scheduler", "lr_scheduler", "scheduler_state_dict", "scheduler_state")),
)
"""Top-level keys under which bundled checkpoints keep each part (Lightning, timm, DeepSpeed, scripts)."""

OPTIMIZER_STATE = ("state", "param_groups")
"""The keys of a bare ``optimizer.state_dict()``."""

NOT_WEIGHTS = frozenset({
    # Lightning: ModelCheckpoint keeps best_model_score and kth_value (inf when monitor=None),
    # EarlyStopping its best_score; loops keep progress counters; hyper-parameters are config
    "callbacks", "loops", "hyper_parameters", "datamodule_hyper_parameters",
})  # fmt: skip
"""Top-level keys of state that is not weights: a non-finite value there harms no resume."""


def weights(tensor_name: str) -> bool:
    """Whether a tensor, by its dotted path in the saved object, is weights or optimizer state
    (anything not known to be something else is)."""
    return tensor_name.partition(".")[0] not in NOT_WEIGHTS
