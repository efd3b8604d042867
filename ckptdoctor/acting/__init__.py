"""One acting pass, for ``prune``, ``repair`` and ``repair --undo`` alike (``protocol``), each pass
in its own module (``prune``, ``repair``, ``undo``), acting through the executor of
``ckptdoctor.actions.executor`` it is handed: what the CLI and the API call."""

from ckptdoctor.acting.protocol import (
    Ask,
    Confirm,
    Event,
    Listener,
    Message,
    Outcome,
    Pass,
    Planned,
    Question,
    Refused,
    Stopped,
    Tone,
    carry_out,
)
from ckptdoctor.acting.prune import MAX_RUNS, Prune, PruneOptions, prune_from
from ckptdoctor.acting.repair import Repair
from ckptdoctor.acting.undo import Undo

__all__ = [
    "MAX_RUNS",
    "Ask",
    "Confirm",
    "Event",
    "Listener",
    "Message",
    "Outcome",
    "Pass",
    "Planned",
    "Prune",
    "PruneOptions",
    "Question",
    "Refused",
    "Repair",
    "Stopped",
    "Tone",
    "Undo",
    "carry_out",
    "prune_from",
]
