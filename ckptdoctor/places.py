"""Where a run is on disk, and where ckptdoctor keeps its own records for it.

Planners name these places in a plan and the executor acts there, so both import this module and
neither imports the other.
"""

from __future__ import annotations

import os
import posixpath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ckptdoctor.model import Run

OWN_FOLDER = ".ckptdoctor"
"""ckptdoctor's own folder: its lock, prune's journals and trash, repair's quarantines."""

MOVED_ASIDE = ".ckptdoctor-quarantine"
"""Where a fix tells the user to move by hand a loose file that no ``repair`` moves (a stray or
damaged file of no checkpoint): beside it, and, like ``OWN_FOLDER``, never scanned below a path."""


def home_of(root: str, beside: bool) -> str:
    """Where ckptdoctor keeps its lock, journals and quarantines for the run in ``root``: in it
    (``<run>/.ckptdoctor``), or ``beside`` it (``<parent>/.ckptdoctor/<run name>``) for frameworks
    that read every name in the run folder. Either way on the run's filesystem, as a move must be."""
    if beside and store_url(root):
        return f"{parent(root)}/{OWN_FOLDER}/{posixpath.basename(root.rstrip('/'))}"
    if beside:
        absolute = os.path.abspath(root)
        return os.path.join(os.path.dirname(absolute), OWN_FOLDER, os.path.basename(absolute))
    return os.path.join(root, OWN_FOLDER)


def store_url(path: str) -> bool:
    """Whether ``path`` is an object's or a prefix's URL (``s3://bkt/run``), as a store listing
    makes them: such a path is absolute already, and its ``//`` is no empty folder."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.isalnum()


def parent(path: str) -> str:
    """The folder above ``path`` (``..`` of it, normalised); a URL keeps its scheme."""
    if store_url(path):
        scheme, _, rest = path.partition("://")
        above = posixpath.dirname(posixpath.normpath(rest))
        return f"{scheme}://{above or rest}"
    return os.path.normpath(os.path.join(path, os.pardir))


def nearest_existing(path: str) -> str:
    """``path``, or the nearest path above it that exists (``.`` or ``/`` at the top): what a
    save into ``path`` meets first, a folder or something that stands where one should."""
    while not os.path.lexists(path):
        parent = os.path.dirname(path.rstrip("/"))
        if not parent or parent == path:
            return "/" if os.path.isabs(path) else "."
        path = parent
    return path


def relative(path: str, root: str) -> str:
    """``path`` relative to ``root``: ``os.path.relpath(path, root)``, without its cost (two
    ``abspath`` calls and a walk) where ``path`` is ``root`` joined with plain names, as a scan's
    entries are: a plan of a big run asks it of every file."""
    prefix = root if root.endswith(os.sep) else root + os.sep
    if path.startswith(prefix):
        rest = path[len(prefix) :]
        if rest and not any(part in _NOT_PLAIN for part in rest.split(os.sep)):
            return rest
    return os.path.relpath(path, root)


_NOT_PLAIN = frozenset({"", ".", ".."})
"""Path parts that ``relpath`` would normalise away: a path holding one takes the long way."""


def run_root(run: Run) -> str:
    """The run's folder as the OS opens it, from any entry in it."""
    for checkpoint in run.checkpoints:
        entry = checkpoint.folder or (checkpoint.files[0].entry if checkpoint.files else None)
        if entry is not None:
            return os.path.dirname(entry.os_path)
    return run.path


DEEPEST = 256
"""Folders nested deeper than this below an entry that ``prune`` or ``repair`` would act on are
not walked (Python's own walks recurse, a frame and a descriptor per level): the entry is left as
it is, and said. No checkpoint is saved this deep."""
