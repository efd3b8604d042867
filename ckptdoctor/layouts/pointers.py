"""Pointers: the files a framework follows to a checkpoint (``latest``, ``last_checkpoint``,
``last.ckpt``), what each names, and why a framework could not follow one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ckptdoctor.discover import remote
from ckptdoctor.layouts.copies import copied
from ckptdoctor.layouts.judging import CORRUPT, PARTIAL, UNUSABLE, whole_save
from ckptdoctor.layouts.judging import UNKNOWN as UNKNOWN  # what no one can yet say is whole or broken: planners ask it here
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.model import Checkpoint, CheckpointFile, Role, Run, Status


class Pointer(NamedTuple):
    """A file that names a checkpoint the framework will follow."""

    source: CheckpointFile | None
    """The pointer file; None when the framework expects one and there is none."""
    target: str
    """What the pointer says, as written."""
    number: int | None
    """The checkpoint index it names, None when it names none that can exist (``index`` is taken by tuple)."""
    meaning: str
    """What the framework uses it for (``best_model_checkpoint``, ``latest``)."""
    loads: frozenset[Role] = frozenset()
    """The roles its follower loads from the checkpoint it names (HF's ``load_best_model_at_end``
    loads the weights alone); empty: the whole checkpoint."""
    copy: bool = False
    """The pointer file is a whole copy of the save it names (``Layout.whole_copy``), loaded in
    its place: it is followable while the copy itself is whole."""
    outside: str | None = None
    """Where it leads out of the run, to a file or folder that is there (``elsewhere``): the
    framework loads that, and nothing of it was judged with the run."""


_KNOWN_FOLLOWABLE = frozenset({Status.COMPLETE, Status.UNREADABLE, Status.ARCHIVED})
"""What a pointer may name: a complete checkpoint, or one this user cannot read, or one archived
(nothing says it is not whole: its owner can tell, a restore shows it, and no ``repair`` re-points
away from it; CKD217 says to restore it)."""

OUTSIDE = "outside this run's checkpoints"
"""What ``unfollowable`` says of a pointer that leads to a file or folder that is there, but none
of the run's checkpoints (``Pointer.outside``): the framework loads it, and it was not judged as one."""


def unfollowable(run: Run, pointer: Pointer) -> str | None:
    """Why the framework cannot follow ``pointer`` (``missing``, ``not there``, ``partial``, ...);
    None if it can."""
    if pointer.source is None:
        return "missing"
    if pointer.source.report.problems & UNKNOWN:
        return None  # what this user may not read, or no one before a restore, is unknown, never stale
    if pointer.number is None and not pointer.target:
        return "empty" if pointer.source.entry.size == 0 else "unreadable"
    target = next((c for c in run.checkpoints if c.index == pointer.number), None)
    if target is None:
        return OUTSIDE if pointer.number is None and pointer.outside is not None else "not there"
    if target.status in _KNOWN_FOLLOWABLE or (pointer.loads and _whole_for(target, pointer.loads)):
        return None
    if pointer.copy and not pointer.source.report.problems & UNUSABLE:
        return None  # the framework loads the copy, which is whole
    return str(target.status.value)


def unreadable_pointer(source: CheckpointFile, meaning: str) -> Pointer:
    """A pointer file that names nothing (empty: killed while the framework rewrote it in place;
    or not one name): the framework's resume stops on it or loads something else (Megatron's
    ``read_metadata`` exits, fvcore's ``get_checkpoint_file`` returns the folder itself)."""
    return Pointer(source, "", None, meaning)


def _whole_for(checkpoint: Checkpoint, roles: frozenset[Role]) -> bool:
    """Whether every file of ``roles`` is there and whole (the rest of the checkpoint aside)."""
    if roles & set(checkpoint.missing):
        return False
    held = [f for f in checkpoint.files if roles & set(f.roles)]
    return bool(held) and not any(f.report.problems & (PARTIAL | CORRUPT) or Role.TEMP in f.roles for f in held)


def followed(run: Run, pointers: Sequence[Pointer]) -> Checkpoint | None:
    """The checkpoint the first pointer names: what a framework that resumes through it loads."""
    for pointer in pointers:
        return next((c for c in run.checkpoints if c.index == pointer.number), None)
    return None


def link_beside(link_path: str, target: str) -> bool:
    """Whether a symlink at ``link_path`` names a file in its own folder: a framework that loads
    whatever its link names (Lightning's ``last.ckpt``, Composer's ``latest-rank0.pt``) loads a
    file of the same name in another run as readily, and that one is not this run's."""
    folder = os.path.dirname(link_path)
    return os.path.realpath(os.path.dirname(os.path.join(folder, target))) == os.path.realpath(folder)


def symlink_pointers(run: Run, claim: Callable[[str], Claim | None], meaning: str) -> tuple[Pointer, ...]:
    """What the run's pointer files that are symlinks name (a dangling one names nothing: its
    own finding, CKD113, says so, and ``repair`` re-points it): the index ``claim`` reads in the
    target's name where the target lies beside the link, else None (not the run's)."""
    found = []
    for file in run.loose_files:
        if Role.POINTER in file.roles and file.entry.link and not file.entry.dangling:
            named = claim(file.entry.link.rsplit("/", 1)[-1]) if link_beside(file.entry.os_path, file.entry.link) else None
            # a link's framework loads a file, this run's checkpoint or not
            outside = elsewhere(file, file.entry.link) if named is None and not file.entry.is_dir else None
            found.append(Pointer(file, file.entry.link, named.number if named else None, meaning, outside=outside))
    return tuple(found)


def elsewhere(source: CheckpointFile, target: str, beside: bool = True) -> str | None:
    """Where the pointer file ``source`` leads when its ``target`` (a symlink's, or the text a
    framework joins to the pointer's folder: mmengine's absolute path, DeepSpeed's tag), which
    names none of the run's checkpoints, is a file or folder that is there (outside the run, a
    hidden file beside the pointer, ckptdoctor's own quarantine): the path the framework opens.
    None where it is not there, is the pointer itself, lies beside it where not ``beside`` (a
    framework that takes only its own names there), or the run is in a store (whose pointers
    name no local path)."""
    if remote(source.entry.os_path) or (not beside and link_beside(source.entry.os_path, target)):
        return None
    path = os.path.normpath(os.path.join(os.path.dirname(source.entry.os_path), target))
    return path if os.path.exists(path) and path != os.path.normpath(source.entry.os_path) else None


def copy_pointer(run: Run, copy: CheckpointFile, meaning: str) -> Pointer | None:
    """A whole copy as a pointer: it names the save it holds (``copied``), by that save's file;
    None where that save is not known."""
    index = copied(copy)
    target = next((c for c in run.checkpoints if c.index == index), None)
    if target is None:
        return None
    named = next((f.name for f in target.files if whole_save(f) and Role.POINTER not in f.roles), copy.name)
    return Pointer(copy, named, index, meaning, copy=True)


def pointer_files(run: Run) -> list[CheckpointFile]:
    """The run's pointer files, loose or standing for their save in its checkpoint (a copy)."""
    return [f for f in (*run.loose_files, *(f for c in run.checkpoints for f in c.files)) if Role.POINTER in f.roles]
