"""How much state each optimizer keeps, per byte of parameters: one table for the size rules
(CKD209) and for ``diskcheck``'s estimate of a save.

Each kind has its state with default settings (``typical``: what a save of it usually weighs)
and with every option that adds buffers (``at_most``: beyond that, state has accumulated). The
kinds are those ``verify`` recognises from the state's fields (``rules/consistency.py``) and
those ``diskcheck --optimizer`` accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple


class StateSize(NamedTuple):
    typical: float
    at_most: float


STATE: Mapping[str, StateSize] = MappingProxyType({
    "adam": StateSize(2.0, 2.0),  # exp_avg, exp_avg_sq (amsgrad's max_exp_avg_sq is its own kind)
    "adamw": StateSize(2.0, 2.0),
    "adam-amsgrad": StateSize(3.0, 3.0),
    "adan": StateSize(4.0, 4.0),
    "sgd": StateSize(0.0, 0.0),  # with momentum it is its own kind
    "sgd-momentum": StateSize(1.0, 1.0),
    "adagrad": StateSize(1.0, 1.0),  # sum of squares
    "rmsprop": StateSize(1.0, 3.0),  # square_avg; momentum adds momentum_buffer, centered grad_avg
    "lion": StateSize(1.0, 1.0),  # momentum
    "adafactor": StateSize(0.1, 1.0),  # row and column statistics (a small fraction); first moment optional
})  # fmt: skip
"""State per byte of parameters when it is kept in the parameters' dtype."""

UNKNOWN = STATE["adam"]
"""What an optimizer of unknown kind is taken to keep: Adam's, the most common."""


def state_size(kind: str) -> StateSize:
    return STATE.get(kind, UNKNOWN)


FRESH_START_COST = (
    "This has a cost: Adam/AdamW moments restart from zero, so expect a loss spike and a few hundred steps of warm-up "
    "lost, and the learning-rate schedule restarts too unless you restore it separately (advance the scheduler to where "
    "{unit} {index} left it)."
)
"""What resuming with a fresh optimizer costs, said by every fix that suggests it (a fix template:
``{unit}`` and ``{index}`` are the run's)."""
