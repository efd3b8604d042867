"""The one interface an acting pass (``ckptdoctor.acting``) acts through, whatever holds the run.

An ``Executor`` does each step of the acting protocol by its own means: ``actions.disk`` on a
local folder (``flock``, renames into a trash, a quarantine folder), ``actions.bucket`` in an S3
bucket (a lock object with a lease, journal and manifest objects, conditional copies and
deletes). The passes (prune, repair, undo) plan and act through the executor they are handed and
never ask which one it is; what one of them lacks is a property it declares (``reads_metrics``,
``has_trash``), and what one of them does beyond the other (a bucket's incomplete uploads) is a
method the other answers with nothing.

Every executor holds its locks until the ``ExitStack`` it entered them in closes, on every exit
path (an error, Ctrl-C), and closes what killed passes left before anything is planned.

What it asks of the machine it runs on, the processes that hold files and the time, comes from a
``Machine``: tests hand it a fake one (``MACHINE``), so that no test depends on what else the
machine runs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ckptdoctor import processes
from ckptdoctor.model import Action, Entry, Plan, Role, Run
from ckptdoctor.places import relative
from ckptdoctor.processes import Holder, Identity
from ckptdoctor.records import Moved, Pending, Quarantine
from ckptdoctor.units import counted, size


class ProcessTable(Protocol):
    """``processes.open_by``'s signature: ``{path: holder}`` of the paths live processes hold, and a
    note on what could not be read."""

    def __call__(
        self, paths: Iterable[str], identities: Mapping[str, Identity] | None = None, said: set[str] | None = None
    ) -> tuple[dict[str, Holder], str | None]: ...


Clock = Callable[[], float]
"""Seconds since the epoch, now."""


def _open_by(
    paths: Iterable[str], identities: Mapping[str, Identity] | None = None, said: set[str] | None = None
) -> tuple[dict[str, Holder], str | None]:
    return processes.open_by(paths, identities, said)  # looked up at each call, as ``time.time`` below


def _now() -> float:
    return time.time()


@dataclass(frozen=True)
class Machine:
    """What acting on a local run asks of the machine: which files live processes hold, and the time."""

    processes: ProcessTable = _open_by
    clock: Clock = _now


MACHINE = Machine()
"""The machine a local pass asks when its caller names none: tests put a fake one here."""


Inside = dict[str, tuple[tuple[str, float, int], ...]]
"""Every file inside each checkpoint folder of a run, by the folder's path: (path, mtime, size)."""


@dataclass(frozen=True)
class World:
    """The world around one run when it is planned (``retention.Circumstances`` is made of it)."""

    now: float
    open_by: Mapping[str, Holder] = field(default_factory=dict)
    inside: Inside = field(default_factory=dict)
    too_deep: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Said:
    """A line an executor's step tells the user."""

    text: str
    done: bool = False
    """What was done as planned (``--quiet`` leaves it out); else something the user must know."""


@dataclass
class Acted:
    """What one step did: its lines, in order, and the entries it could not act on."""

    said: list[Said] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def deleted(run: str, checkpoints: int, what: str | None, freed: str, left: str | None) -> list[Said]:
    """What a delete in ``run`` says: the checkpoints it deleted (``what``: their files, folders or
    objects, counted; None: nothing was) and what that ``freed``; and what it ``left`` because it
    changed since the plan (counted, and how it changed)."""
    # nothing deleted says nothing: a finished journal took it all (and said so), or someone else did
    said = [Said(f"{run}: deleted {counted(checkpoints, 'checkpoint')} ({what}); {freed}.", True)] if what is not None else []
    if left is not None:
        said.append(Said(f"{run}: left {left} since the plan was made; the next prune looks again."))
    return said


def finished(run: str, deletions: int, plan: Plan, gone: Callable[[Entry], bool]) -> Said:
    """What finishing a killed prune's pending ``deletions`` in ``run`` says: how many, and the
    checkpoints of ``plan`` that took wholly (each of its entries ``gone``), with the bytes the
    plan counted for them, so the delete that follows need not say "deleted 0 checkpoints"."""
    whole = [item for item in plan.acting(Action.DELETE) if item.entries and all(gone(entry) for entry in item.entries)]
    what = f" ({counted(len(whole), 'checkpoint')}, {size(sum(item.bytes for item in whole))} freed)" if whole else ""
    return Said(f"{run}: finished {counted(deletions, 'deletion')} a killed prune left pending{what}.", True)


class Executor(Protocol):
    """One way of acting on runs: on a local disk, or in a bucket."""

    noun: str
    """What it moves, deletes and puts back: ``entry`` (a file or folder) or ``object``."""
    reads_metrics: bool
    """Whether metrics files beside the runs can be read (``prune --keep-best``)."""
    has_trash: bool
    """Whether a killed prune's deletions can be put back (``prune --discard-journal``)."""
    partial_undo: bool
    """Whether an undo puts back the rest of a quarantine when some of it is not what the repair
    moved there (a run's copy on disk: yes; a bucket, where a copy changed: nothing goes back)."""

    def opened(self, held: contextlib.ExitStack, paths: Sequence[str], dry_run: bool) -> list[str]:
        """Before the scan, held to the end: what the user named, opened; the homes a dry run
        may not read (said, not acted on)."""

    def refusals(self, places: Sequence[tuple[str, str]], command: str) -> list[str]:
        """Before any lock is taken: why ``command`` cannot act on each (shown path, URL or
        path) it cannot act on at all."""

    def notes(self) -> list[str]:
        """What the user must know of how this executor acts, before it locks anything."""

    def ready(self, runs: Sequence[Run], dry_run: bool) -> None:
        """Before any lock is taken: confirm ``runs`` are what was scanned (``ActionError``)."""

    def locked(self, home: str, shown: str, tell: Callable[[str], None]) -> contextlib.AbstractContextManager[None]:
        """Hold the lock of ``home`` (``Locked`` when another holds it), renewing any lease while
        the work goes on, and release it however the block ends; ``tell`` hears a lock taken over
        and one that could not be released."""

    def holder_now(self, home: str) -> str | None:
        """Who holds ``home``'s lock, without taking it (a dry run)."""

    def strays(self, home: str) -> list[str]:
        """What in ``home`` is not ckptdoctor's."""

    def world(self, run: Run, tell: Callable[[str], None] | None = None, noted: set[str] | None = None) -> World:
        """The world around ``run`` now: its clock, what is inside its folders, what is held."""

    def busy_now(self, run: Run) -> frozenset[str]:
        """Files of ``run`` held right now (again after the prompt)."""

    def changed_since_scan(self, root: str, entries: Sequence[Entry]) -> str | None:
        """The first of ``entries`` (below ``root``) no longer as the scan saw it, in words."""

    # --- prune -------------------------------------------------------------------------------

    def leftovers(self, home: str, remove: bool) -> tuple[list[str], list[str]]:
        """(notes, problems) on what earlier prunes could not remove, removed where ``remove``."""

    def journals(self, root: str, home: str) -> list[Pending]:
        """The journals killed prunes left (what each would still do, as far as known without a plan)."""

    def pending(self, run: Run, plan: Plan, busy: frozenset[str], tell: Callable[[str], None] | None = None) -> list[Pending]:
        """What those journals would still do, sparing what ``plan`` keeps and ``busy``."""

    def discard(self, root: str, home: str) -> tuple[int, list[str]]:
        """Drop those journals, putting back what they had moved; (count, what is left)."""

    def finish_interrupted(self, run: Run, plan: Plan) -> Acted:
        """Finish what the killed prunes' journals were confirmed to do."""

    def delete(self, run: Run, plan: Plan, since: float) -> Acted:
        """Delete what ``plan`` deletes, journalled, each only while it is what the plan saw."""

    def prune_notes(self, run: Run, plan: Plan, abort_uploads: float | None, dry_run: bool) -> list[str]:
        """What the user must know before a prune is asked (a versioned bucket frees nothing)."""

    def chores(self, run: Run, abort_uploads: float | None) -> bool:
        """Whether a prune has work of its own in ``run`` beyond its plan."""

    def do_chores(self, run: Run, abort_uploads: float | None) -> Acted:
        """That work (a bucket's abandoned uploads aborted)."""

    # --- repair and undo -----------------------------------------------------------------------

    def sweep(self, home: str) -> None:
        """Remove what a repair killed before its manifest was whole left."""

    def close_repairs(self, root: str, home: str) -> tuple[list[str], list[str]]:
        """Close the quarantines of killed repairs (what they moved stays); (their ids, problems)."""

    def quarantine(self, run: Run, plan: Plan, since: float) -> Moved:
        """Move aside and re-point what ``plan`` says, each only while it is what the plan saw."""

    def quarantine_homes(self, path: str) -> list[str]:
        """Homes of ``path`` that may hold quarantines though it no longer scans as a run."""

    def quarantines(self, root: str, home: str) -> list[Quarantine]:
        """Every quarantine in ``home``, oldest first, as it stands now."""

    def restore(self, found: Quarantine, root: str) -> tuple[int, list[str]]:
        """Put back what of ``found`` may go back; (count, problems)."""


def relied_on(run: Run) -> list[Entry]:
    """What acting on ``run`` relies on being as the scan saw it: the files of the checkpoint to
    resume from, and the pointers that name what is kept."""
    resume = [file.entry for file in run.resume.files] if run.resume else []
    return resume + [file.entry for file in run.loose_files if Role.POINTER in file.roles and not file.entry.is_dir]


def kept_paths(plan: Plan) -> frozenset[str]:
    """What ``plan`` keeps, relative to its run (a killed prune's journal spares it)."""
    return frozenset(
        relative(entry.os_path, plan.root) for item in plan.items if item.action is not Action.DELETE for entry in item.entries
    )
