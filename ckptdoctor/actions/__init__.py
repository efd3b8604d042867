"""Carry out a plan on disk, so that a kill at any instant loses nothing that was to be kept, and
nothing outside the run is ever reached.

- ``_confine``: entries below the run reached one folder at a time, never through a symlink, and
  acted on only while they are the inode the plan saw.
- ``_home``: ckptdoctor's own folder in the run (``.ckptdoctor/``), its lock and its records.
- ``_trash``: ``prune``'s journalled deletions (and, on a full disk, its journal-free order).
- ``_quarantine``: ``repair``'s moves aside, with a manifest ``--undo`` reads to put them back.

What the journal and manifest say, and what these functions return, is typed in
``ckptdoctor.records``, which the planners and renderers import instead of this package.
"""

from ckptdoctor.actions._confine import ActionError, Escapes, anchored, changed_since_scan, confirm_run
from ckptdoctor.actions._home import Locked, holder_now, locked, reading_only, strays
from ckptdoctor.actions._quarantine import (
    QUARANTINE,
    close_repairs,
    quarantine,
    quarantines,
    restore,
    sweep,
)
from ckptdoctor.actions._trash import (
    delete,
    discard,
    finish_interrupted,
    leftovers,
    pending,
)

__all__ = [
    "QUARANTINE",
    "ActionError",
    "Escapes",
    "Locked",
    "anchored",
    "changed_since_scan",
    "close_repairs",
    "confirm_run",
    "delete",
    "discard",
    "finish_interrupted",
    "holder_now",
    "leftovers",
    "locked",
    "pending",
    "quarantine",
    "quarantines",
    "reading_only",
    "restore",
    "strays",
    "sweep",
]
