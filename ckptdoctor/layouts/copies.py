"""Whole copies a framework keeps of one of its saves (Lightning's ``last.ckpt``, fairseq's
``checkpoint_last.pt``): which save each holds, and where one stands for its save.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence

from ckptdoctor.layouts.content import confirmed_roles
from ckptdoctor.layouts.judging import UNUSABLE, whole_save
from ckptdoctor.model import COPY_OF, TOP_LEVEL_NUMBER, Checkpoint, CheckpointFile, Entry, Role, Run, Status
from ckptdoctor.readers.files import same_save, with_keys


class Copy(enum.Enum):
    """What a whole copy of a save is to its framework (``Layout.whole_copy``)."""

    RESUMED = "resumed"
    """What the framework resumes from (Lightning's copied ``last.ckpt``, fairseq's
    ``checkpoint_last.pt``): where its save's own files are broken, it stands for that save."""
    KEPT = "kept"
    """A copy kept aside (fairseq's best copies): the save it holds is known, nothing more."""


def stand_ins(
    whole_copy: Callable[[Entry], Copy | None],
    key: str | None,
    loose: list[CheckpointFile],
    saves: Sequence[tuple[int, Sequence[CheckpointFile]]],
    checkpoints: list[Checkpoint],
    judge: Callable[[int, Sequence[CheckpointFile], tuple[CheckpointFile, ...]], Checkpoint],
) -> tuple[list[CheckpointFile], list[Checkpoint]]:
    """The run's loose files and checkpoints once its whole copies (``Layout.whole_copy``) are
    placed: each copy is marked with the save it holds (``COPY_OF``), and where that save's own
    files are not whole and the copy is, the copy joins its checkpoint as the whole save the
    framework resumes from (the numbered file cut, the copy written whole after it)."""
    kinds = {id(f): kind for f in loose if Role.POINTER in f.roles and (kind := whole_copy(f.entry)) is not None}
    if not kinds:
        return loose, checkpoints
    position = {c.index: at for at, c in enumerate(checkpoints)}
    numbered = dict(saves)
    placed: dict[int, CheckpointFile | None] = {}  # by the copy's id: marked, or None once it joined its checkpoint
    # those the framework resumes from first: of two whole copies of a save, one stands for it
    for file in sorted((f for f in loose if id(f) in kinds), key=lambda f: kinds[id(f)] is not Copy.RESUMED):
        index = copy_of(file, saves, key)
        if index is None:
            continue
        marked = file._replace(report=dataclasses.replace(file.report, facts=(*file.report.facts, (COPY_OF, str(index)))))
        placed[id(file)] = marked
        before = checkpoints[position[index]]
        if before.status is Status.COMPLETE or marked.report.problems & UNUSABLE or kinds[id(file)] is Copy.KEPT:
            continue
        roles = next((f.roles for f in before.files if whole_save(f)), ())
        report = with_keys(marked.entry, marked.report) if len(roles) > 1 else marked.report
        joined = marked._replace(roles=(*confirmed_roles(roles, report), Role.POINTER), report=report)
        after = judge(index, numbered[index], (joined,))
        if after.status is Status.COMPLETE:  # else the copy lacks what the save needs as well
            checkpoints[position[index]] = after
            placed[id(file)] = None
    kept = [placed.get(id(f), f) for f in loose]
    return [f for f in kept if f is not None], checkpoints


def copy_of(copy: CheckpointFile, saves: Sequence[tuple[int, Sequence[CheckpointFile]]], key: str | None) -> int | None:
    """The index of the save whose whole copy ``copy`` is: the newest save whose file holds the
    very pickle ``copy``'s central directory records (``readers.files.same_save``: the save's
    counters are in it, so it tells one save from another; read in the save's own directory, or
    in its first bytes where it was cut short or its end zeroed). A byte copy has its save's size:
    only saves of that size, or whose files are damaged since, are compared. Where none matches,
    the index ``copy`` records under ``key`` (``Layout.index_keys``), if the run has that save.
    None where neither tells (a copy of a save since deleted)."""
    files = [
        (index, f)
        for index, held in reversed(saves)
        for f in held
        if whole_save(f) and (f.entry.size == copy.entry.size or f.report.problems & UNUSABLE)
    ]
    found = same_save(copy.entry, [f.entry for _, f in files]) if files and not copy.entry.is_dir else None
    if found is not None:
        return files[found][0]
    if key is None or copy.entry.is_dir or copy.entry.dangling:
        return None
    recorded = with_keys(copy.entry, copy.report).fact(f"{TOP_LEVEL_NUMBER}{key}")
    indexes = {index for index, _ in saves}
    return int(recorded) if recorded is not None and recorded.isdigit() and int(recorded) in indexes else None


def copied(file: CheckpointFile) -> int | None:
    """The index of the save a whole copy holds (``COPY_OF``, left by ``group``), if known."""
    index = file.report.fact(COPY_OF)
    return int(index) if index is not None else None


def loaded_copy(run: Run, copy: CheckpointFile) -> Checkpoint | None:
    """What a framework's resume that loads the whole-copy file ``copy`` loads: the copy as a
    broken checkpoint where it is cut or damaged (a resume from it fails), else the checkpoint
    of the save it holds; None where that save is not known (it resumes from a save ckptdoctor
    cannot place)."""
    broken = {problem.status for problem in copy.report.problems if problem.status is not None}
    if broken:
        status = Status.PARTIAL if Status.PARTIAL in broken else Status.CORRUPT
        return Checkpoint(run.checkpoints[-1].index if run.checkpoints else 0, (copy,), status)
    index = copied(copy)
    return next((c for c in run.checkpoints if c.index == index), None)
