"""One acting pass, for ``prune``, ``repair`` and ``repair --undo`` alike: the safety protocol,
written once.

    anchor the paths → scan → lock → tidy what an interrupted pass left → plan → show
    → confirm → check the world again → journal and act (``actions``) → outcome

A ``Pass`` (``Prune``, ``Repair``, ``Undo``) supplies what differs: what it tidies before
planning, its planner (``retention``, ``repair``) and what it asks of the executor. Every step
that touches the run goes through the ``actions.executor.Executor`` handed to the pass in its
context: ``actions.disk`` for local folders, ``actions.bucket`` for S3 prefixes, the same steps
in the same order for both. This module decides nothing about what to keep and touches no file
itself; it never prints: what happens is told to a
``listener`` as it happens (``Planned``, then one ``Message`` per step), and a ``confirm``
callback answers each ``Question``. The CLI renders and asks; ``ckptdoctor.api`` passes its own.

Failures: ``Refused`` before anything was changed because the paths cannot be acted on as given
(the CLI's exit 2), ``Stopped`` when the pass cannot go on (exit 1); ``actions.Locked``,
``actions.ActionError`` and ``OSError`` come through as they are.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ckptdoctor.actions.disk import DiskExecutor
from ckptdoctor.actions.executor import Acted, Executor, Machine, World
from ckptdoctor.discover import remote
from ckptdoctor.errors import RefusedError, UsageError
from ckptdoctor.layouts.registry import home
from ckptdoctor.model import Action, Plan, Report, Run
from ckptdoctor.pipelines import scan
from ckptdoctor.pipelines.verify import verify_newest
from ckptdoctor.places import run_root
from ckptdoctor.planners.retention import Circumstances
from ckptdoctor.progress import Tally
from ckptdoctor.records import Pending
from ckptdoctor.stores import urls


class Refused(UsageError):
    """The paths cannot be acted on as given; nothing was changed. One line per reason."""

    def __init__(self, *lines: str) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


class Stopped(RefusedError):
    """The pass stopped part-way; one line per reason, each naming what is left where."""

    def __init__(self, *lines: str) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


class Tone(enum.Enum):
    DONE = "done"
    """What was done, as planned: ``--quiet`` leaves it out."""
    NOTICE = "notice"
    """Something the user must know (a note, a change since the plan): always said."""


@dataclass(frozen=True)
class Message:
    text: str
    tone: Tone = Tone.NOTICE


@dataclass(frozen=True)
class Planned:
    """Every run's plan, before anything is asked or done: what the user confirms."""

    report: Report
    plans: tuple[tuple[Plan, str], ...]
    """Each plan with the unit of its run's index (``epoch``, ``step``)."""
    pending: tuple[Pending, ...] = ()
    """What killed prunes' journals would still do; the same confirmation finishes it."""
    refused: tuple[str, ...] = ()
    """What is left alone whatever the answer, and why (see ``Outcome.refused``)."""


Event = Planned | Message
Listener = Callable[[Event], None]


class Ask(enum.Enum):
    GO = "go"
    """Carry out the plans shown."""
    TOO_MANY_RUNS = "too-many-runs"
    """A prune deletes in more runs than its limit: a path one level too high is a typo."""


@dataclass(frozen=True)
class Question:
    ask: Ask
    text: str
    """The question in words, as a prompt (``Delete them?``)."""
    declined: str
    """What is not done if the answer is no (``nothing was deleted``)."""
    why: str = ""
    """Why it is asked beyond the plans shown (``TOO_MANY_RUNS``: the runs and the limit)."""
    needed: int = 0
    """``TOO_MANY_RUNS``: the limit that would let this pass go ahead unasked."""


Confirm = Callable[[Question], bool]


@dataclass(frozen=True)
class Outcome:
    """What one acting pass found and did."""

    command: str
    report: Report
    plans: tuple[Plan, ...]
    dry_run: bool
    acted: bool = False
    """Confirmed, and carried out (what changed meanwhile is left: see ``messages``)."""
    declined: str = ""
    """When a question was answered no, what was not done (``nothing was deleted``)."""
    messages: tuple[str, ...] = ()
    """Every ``Message`` told, in order."""
    problems: tuple[str, ...] = ()
    """Entries that could not be acted on; the rest of the plan was done."""
    refused: tuple[str, ...] = ()
    """Runs (or quarantines) left alone, and why: a repair that cannot make a run resumable, an
    undo that would put an entry over one that exists again."""
    skipped: tuple[str, ...] = ()
    """Checkpoints the plan would have acted on that this user cannot read: left, and left by
    every pass this user runs (CKD215); the rest of the plan was done."""


_NEVER_WHOLE = {"/": "the root folder", os.path.realpath(os.path.expanduser("~")): "your home folder"}
"""Folders an acting command never takes whole: what rm refuses, and a home full of other things."""


@dataclass
class Context:
    """One pass in progress: its scan, what it has told, and what it has found wrong."""

    command: str
    paths: list[str]
    dry_run: bool
    listener: Listener
    executor: Executor
    """What every step that touches the runs goes through."""
    recurse: bool = True
    """False: only the run whose folder is a path given, never the runs in folders below it."""
    tally: Tally | None = None
    report: Report = field(default_factory=lambda: Report("", (), ()))
    runs: list[Run] = field(default_factory=list)
    told: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    noted: set[str] = field(default_factory=set)
    """What the open-files notes said (processes named, failures): each is said once per command."""
    skipped: list[str] = field(default_factory=list)

    def tell(self, text: str, tone: Tone = Tone.NOTICE) -> None:
        self.told.append(text)
        self.listener(Message(text, tone))

    def heard(self, acted: Acted) -> None:
        """Tell what an executor's step said, and keep what it could not do."""
        for said in acted.said:
            self.tell(said.text, Tone.DONE if said.done else Tone.NOTICE)
        self.problems += acted.problems

    def world(self, run: Run) -> Circumstances:
        """The world around ``run`` as its planners take it, told what cannot be known."""
        world: World = self.executor.world(run, self.tell, self.noted)
        return Circumstances(world.now, open_by=world.open_by, inside=world.inside, too_deep=world.too_deep)

    def scan(self) -> None:
        self.report, self.runs = scan_runs(self.paths, self.command, self.tell, self.tally)
        if not self.recurse:
            self.report, self.runs = own_runs(self.paths, self.report, self.runs, self.tell)

    def rescan(self) -> None:
        """Scan again after tidying changed the runs; the same runs, as they are now."""
        roots = {os.path.realpath(run_root(run)) for run in self.runs}
        self.scan()
        self.runs = [run for run in self.runs if os.path.realpath(run_root(run)) in roots]


class Pass:
    """What one kind of acting pass does at each step of ``carry_out``."""

    command = ""
    question = ""
    declined = ""
    acts_on: tuple[Action, ...] = ()

    def refuse(self, executor: Executor) -> None:
        """Before anything is read: ``Refused`` when this pass cannot be done by ``executor``."""

    def more_locks(self, context: Context) -> Iterable[tuple[str, str]]:
        """(home, shown path) of folders to lock beyond the runs' own."""
        return ()

    def tidy(self, context: Context) -> None:
        """Under the locks, before planning: what interrupted passes left."""

    def plan(self, context: Context) -> list[tuple[Plan, str]]:
        raise NotImplementedError

    def pending(self, context: Context, plans: Sequence[Plan]) -> tuple[Pending, ...]:
        return ()

    def before_asking(self, context: Context, plans: Sequence[Plan]) -> bool:
        """After the plans are shown, before any question: False stops the pass here."""
        return True

    def questions(self, context: Context, acting: Sequence[Plan]) -> list[Question]:
        return [Question(Ask.GO, self.question, self.declined)]

    def chores(self, context: Context) -> bool:
        """Whether the pass has work to confirm beyond its plans (a bucket's abandoned uploads)."""
        return False

    def act(self, context: Context, plans: Sequence[Plan]) -> None:
        """Carry out ``plans`` (every run's, in order), confirmed."""
        raise NotImplementedError


def carry_out(
    pass_: Pass,
    paths: Sequence[str] | None,
    *,
    dry_run: bool,
    confirm: Confirm,
    listener: Listener,
    recurse: bool = True,
    tally: Tally | None = None,
    lock: bool = True,
    machine: Machine | None = None,
) -> Outcome:
    """Run one acting pass over ``paths`` (the working folder when None): over every run found
    in and below them, or (``recurse`` False) only over the runs whose folders they are.
    ``tally`` counts what its scan sees, for a status line shown until the listener hears the
    first event. ``lock`` False (``--no-lock``): no lock, in buckets only. ``machine``: the
    process table and clock a local pass asks (``executor.MACHINE`` when None)."""
    given = list(paths or ["."])
    executor, given = executor_for(pass_.command, given, lock, machine)
    pass_.refuse(executor)
    context = Context(pass_.command, given, dry_run, listener, executor, recurse, tally)
    with contextlib.ExitStack() as held:
        shut = executor.opened(held, context.paths, dry_run)
        context.scan()
        lock_all(held, context, pass_.more_locks(context))
        # under the locks, a scan from before them is safe to plan from: no other ckptdoctor acts
        # meanwhile, a trainer's new files are not in the plan, files gone since are skipped, what
        # may still be written is kept by --min-age, and every entry is acted on only while it is
        # the inode (the object) the plan saw
        pass_.tidy(context)
        planned = pass_.plan(context)
        plans = [plan for plan, _ in planned]
        pending = pass_.pending(context, plans)
        for home_shut in shut:
            context.tell(f"note: {home_shut}: this user may not read it, so what earlier passes left there is not shown")
        listener(Planned(context.report, tuple(planned), pending, tuple(context.refused)))

        def outcome(acted: bool = False, declined: str = "") -> Outcome:
            return Outcome(
                pass_.command, context.report, tuple(plans), dry_run, acted, declined, tuple(context.told),
                tuple(context.problems), tuple(context.refused), tuple(context.skipped),
            )  # fmt: skip

        if not pass_.before_asking(context, plans):
            return outcome()
        acting = [plan for plan in plans if any(plan.acting(action) for action in pass_.acts_on)]
        if dry_run or not (acting or pending or pass_.chores(context)):
            return outcome()
        for question in pass_.questions(context, acting):
            if confirm(question) is not True:  # only True goes ahead: not "no", not 1
                return outcome(declined=question.declined)
        pass_.act(context, plans)
        return outcome(acted=True)


def executor_for(command: str, given: list[str], lock: bool, machine: Machine | None) -> tuple[Executor, list[str]]:
    """The executor that acts on ``given`` (local folders or bucket URLs, never both), and the
    paths as it takes them."""
    in_stores = [path for path in given if _in_store(path)]
    if in_stores:
        if len(in_stores) != len(given):
            raise Refused(f"{command} takes either local folders or bucket URLs, not both at once: run it once for each")
        # loaded only for runs in buckets: the store executor and S3's control plane
        from ckptdoctor.actions.bucket import BucketExecutor

        return BucketExecutor(home, lock), given
    if not lock:
        raise Refused("--no-lock is for buckets that do not honour conditional writes: a local run is always locked")
    return DiskExecutor(machine), [_local(path) for path in given]


def _in_store(path: str) -> bool:
    """Whether ``path`` names a prefix in an object store (not a ``file://`` URL, not a local
    folder whose name merely looks like a URL)."""
    return remote(path) and urls.scheme(path) != "file"


def _local(path: str) -> str:
    """The local path an acting pass acts on (a ``file://`` URL's path)."""
    try:
        local = urls.local_path(path)
    except urls.BadURL as error:
        raise Refused(str(error)) from None
    return path if local is None else local


def scan_runs(paths: Sequence[str], command: str, tell: Callable[[str], None], tally: Tally | None = None) -> tuple[Report, list[Run]]:
    """The report over ``paths`` and the distinct runs in it that ``command`` can change
    (``Refused`` when a path cannot be acted on as given)."""

    for path in paths:
        if os.path.realpath(path) in _NEVER_WHOLE:
            raise Refused(
                f"{path} is {_NEVER_WHOLE[os.path.realpath(path)]}; {command} acts on runs: name the run folders (or a folder that holds only runs)"
            )
    report, found = scan.inspect(list(paths), tally=tally)
    for path in paths:
        real = os.path.realpath(path)
        if os.path.ismount(real) and {os.path.realpath(run_root(run)) for run in report.runs if run.checkpoints} - {real}:
            raise Refused(f"{path} is the root of a filesystem holding runs below it; {command} acts on runs: name the run folders")
    if report.errors:
        raise Refused(*(f"{failure.path}: {failure.message}" for failure in report.errors))
    for path in found.empty:
        tell(f"No checkpoints found in {path}")
    single = [run.lone_file for run in report.runs if run.lone_file]
    if single:
        raise Refused(*(f"{path} is one file; {command} acts on whole runs: give the folder that holds it" for path in single))
    return dataclasses.replace(report, command=command), distinct([run for run in report.runs if run.checkpoints])


def own_runs(paths: Sequence[str], report: Report, runs: list[Run], tell: Callable[[str], None]) -> tuple[Report, list[Run]]:
    """Only the runs whose own folder is one of ``paths`` (``--no-recurse``), and the report of
    them alone: a loose file's run is repaired without the runs in the folders below it. A path
    that is no run's own folder is said, and nothing in or below it is touched."""
    given = {os.path.realpath(path): path for path in paths}
    kept = [run for run in runs if os.path.realpath(run_root(run)) in given]
    for real, path in given.items():
        if not any(os.path.realpath(run_root(run)) == real for run in kept):
            tell(f"No run in {path} itself; with --no-recurse the runs in folders below it are left alone")
    shown = {run.path for run in kept}
    narrowed = dataclasses.replace(
        report,
        runs=tuple(run for run in report.runs if run.path in shown),
        findings=tuple(f for f in report.findings if f.run in shown),
        unrecognised=tuple(path for path in report.unrecognised if os.path.realpath(os.path.dirname(path) or ".") in given),
    )
    return narrowed, kept


def distinct(runs: list[Run]) -> list[Run]:
    """Runs with distinct folders, in order: one run named twice (./run and $PWD/run), or reached
    again through a bind mount inside it (of its parent), is one run, with one lock and one plan."""
    seen: set[object] = set()
    kept = []
    for run in runs:
        root = run_root(run)
        try:
            info = os.stat(root)
            folder: object = (info.st_dev, info.st_ino)
        except OSError:
            folder = os.path.realpath(root)
        if folder not in seen:
            seen.add(folder)
            kept.append(run)
    return kept


def lock_all(held: contextlib.ExitStack, context: Context, more: Iterable[tuple[str, str]] = ()) -> None:
    """Take the lock of every run (and of every (home, shown path) in ``more``), in one order (no
    deadlocks between two commands), held to the end. A dry run writes nothing and takes no lock:
    it may be anyone's (a colleague, a read-only account or mount), so it only says who holds one."""
    executor, runs, more = context.executor, context.runs, list(more)
    refusals = executor.refusals(
        [*((run.path, run_root(run)) for run in runs), *((shown, place) for place, shown in more)], context.command
    )
    if refusals:
        raise Refused(*refusals)
    for note in executor.notes():
        context.tell(note)
    executor.ready(runs, context.dry_run)
    for place, shown in sorted({*((home(run), run.path) for run in runs), *more}):
        if context.dry_run:
            holder = executor.holder_now(place)
            if holder is not None:
                context.tell(
                    f"note: {shown} is locked by another ckptdoctor ({holder}): this dry run shows the run as it is before that one finishes"
                )
        else:
            held.enter_context(executor.locked(place, shown, context.tell))
        for stray in executor.strays(place):
            context.tell(f"note: {stray} is not ckptdoctor's: ignored")


def read_newest(run: Run, count: int, tell: Callable[..., None]) -> tuple[Run, tuple[int, ...]]:
    """The run judged with its ``count`` newest complete checkpoints read whole, and older ones in
    place of any that fail (``verify_newest``: ``prune --verify``, ``repair --verify``), and the
    checkpoints that failed, each told."""
    judged, failed = verify_newest(run, count)
    for index in failed:
        tell(f"{run.path}: {run.unit.value} {index} does not pass verify (read whole): it is not complete; `ckptdoctor verify` says why.")
    return judged, failed
