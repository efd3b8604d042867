"""One acting pass, for ``prune``, ``repair`` and ``repair --undo`` alike: the safety protocol,
written once.

    anchor the paths → scan → lock → tidy what an interrupted pass left → plan → show
    → confirm → check the world again → journal and act (``actions``) → outcome

A ``Pass`` (``Prune``, ``Repair``, ``Undo``) supplies what differs: what it tidies before
planning, its planner (``retention``, ``repair``) and its executor call. This module decides
nothing about what to keep and touches no file itself; it never prints: what happens is told to a
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
import shlex
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ckptdoctor import actions, processes
from ckptdoctor.discover import remote
from ckptdoctor.errors import RefusedError, UsageError
from ckptdoctor.layouts.registry import layout_named
from ckptdoctor.model import Action, Entry, Plan, PlanItem, Report, Role, Run, Seen, Unit
from ckptdoctor.pipelines import scan
from ckptdoctor.pipelines.verify import verify_newest
from ckptdoctor.places import DEEPEST, home, home_of, relative, run_root
from ckptdoctor.planners import repair, retention
from ckptdoctor.planners.metrics import MetricsError, metric_values
from ckptdoctor.planners.retention import MIN_AGE, Circumstances, Policy, PruneSettings, parse_duration
from ckptdoctor.progress import Tally
from ckptdoctor.quoting import shell_word
from ckptdoctor.records import Moved, ObjectJournal, Pending, Quarantine, StoredState
from ckptdoctor.stores import urls
from ckptdoctor.units import duration, files_or_folders, size


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
class _Context:
    """One pass in progress: its scan, what it has told, and what it has found wrong."""

    command: str
    paths: list[str]
    dry_run: bool
    listener: Listener
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

    def more_locks(self, context: _Context) -> Iterable[tuple[str, str]]:
        """(home, shown path) of folders to lock beyond the runs' own."""
        return ()

    def tidy(self, context: _Context) -> None:
        """Under the locks, before planning: what interrupted passes left."""

    def plan(self, context: _Context) -> list[tuple[Plan, str]]:
        raise NotImplementedError

    def pending(self, context: _Context, plans: Sequence[Plan]) -> tuple[Pending, ...]:
        return ()

    def before_asking(self, context: _Context, plans: Sequence[Plan]) -> bool:
        """After the plans are shown, before any question: False stops the pass here."""
        return True

    def questions(self, context: _Context, acting: Sequence[Plan]) -> list[Question]:
        return [Question(Ask.GO, self.question, self.declined)]

    def act(self, context: _Context, plans: Sequence[Plan]) -> None:
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
) -> Outcome:
    """Run one acting pass over ``paths`` (the working folder when None): over every run found
    in and below them, or (``recurse`` False) only over the runs whose folders they are.
    ``tally`` counts what its scan sees, for a status line shown until the listener hears the
    first event."""
    given = list(paths or ["."])
    in_stores = [path for path in given if _in_store(path)]
    if in_stores:
        if len(in_stores) != len(given):
            raise Refused(f"{pass_.command} takes either local folders or bucket URLs, not both at once: run it once for each")
        return _carry_out_in_store(pass_, _Context(pass_.command, given, dry_run, listener, recurse, tally), confirm, lock)
    if not lock:
        raise Refused("--no-lock is for buckets that do not honour conditional writes: a local run is always locked")
    context = _Context(pass_.command, [_local(path) for path in given], dry_run, listener, recurse, tally)
    with contextlib.ExitStack() as held:
        held.enter_context(actions.anchored(context.paths))  # before the scan: what it finds is acted on through these
        # anyone who may read the run may preview it, though ckptdoctor's folder in it be shut to them
        shut = held.enter_context(actions.reading_only()) if dry_run else []
        context.scan()
        lock_all(held, context.runs, dry_run, context.tell, pass_.more_locks(context))
        # under the locks, a scan from before them is safe to plan from: no other ckptdoctor acts
        # meanwhile, a trainer's new files are not in the plan, files gone since are skipped, what
        # may still be written is kept by --min-age, and every entry is acted on only while it is
        # the inode the plan saw
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
        if dry_run or not (acting or pending):
            return outcome()
        for question in pass_.questions(context, acting):
            if confirm(question) is not True:  # only True goes ahead: not "no", not 1
                return outcome(declined=question.declined)
        pass_.act(context, plans)
        return outcome(acted=True)


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


def _seen(run: Run, root: str) -> Seen:
    """Every file of ``run`` as its scan saw it, by path in its folder (``root``)."""
    files = [f for c in run.checkpoints for f in c.files] + [*run.loose_files, *run.extra_files]
    return {relative(f.entry.os_path, root): f.entry for f in files if not f.entry.is_dir and not f.entry.is_symlink}


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


def lock_all(
    held: contextlib.ExitStack, runs: list[Run], dry_run: bool, tell: Callable[[str], None], more: Iterable[tuple[str, str]] = ()
) -> None:
    """Take the lock of every run (and of every (home, shown path) in ``more``), in one order (no
    deadlocks between two commands), held to the end. A dry run writes nothing and takes no lock:
    it may be anyone's (a colleague, a read-only account or mount), so it only says who holds one."""

    if not dry_run:  # before ckptdoctor's own folder is made in it
        for run in runs:
            actions.confirm_run(run_root(run), (f.entry for c in run.checkpoints for f in c.files))
    for place, shown in sorted({*((home(run), run.path) for run in runs), *more}):
        if dry_run:
            holder = actions.holder_now(place)
            if holder is not None:
                tell(
                    f"note: {shown} is locked by another ckptdoctor ({holder}): this dry run shows the run as it is before that one finishes"
                )
        else:
            held.enter_context(actions.locked(place, shown))
        for stray in actions.strays(place):
            tell(f"note: {stray} is not ckptdoctor's: ignored")


def circumstances(run: Run, now: float, tell: Callable[[str], None] | None = None, noted: set[str] | None = None) -> Circumstances:
    """The world around ``run``: what is inside its folders, and which of its files live
    processes hold open. What cannot be known is told (with ``tell``, even under --quiet: a prune
    that could not check open files is never silent), once per command: ``noted`` holds what was
    said for the runs before this one."""

    inside, deep = folder_contents(run)
    # the scan's identities: a file replaced since has another, but is kept anyway, as changed since the plan
    entries = [f.entry for c in run.checkpoints for f in c.files] + [f.entry for f in run.loose_files]
    busy, said = processes.open_by(files_of(run, inside), {e.os_path: e.inode for e in entries if e.inode is not None}, noted)
    if said and tell is not None:
        tell(f"note: {said}")
    return Circumstances(now, open_by=busy, inside=inside, too_deep=deep)


def _busy_now(run: Run) -> frozenset[str]:
    """Files of ``run`` held open right now: again after the prompt, which may have waited while
    a trainer wrote or opened files."""
    return frozenset(circumstances(run, time.time()).open_by)


def folder_contents(run: Run) -> tuple[dict[str, tuple[tuple[str, float, int], ...]], frozenset[str]]:
    """Every file inside each checkpoint folder and staging folder of ``run``, by the folder's
    os path: moving or deleting the folder takes them all (symlinked folders are not followed);
    and the folders whose trees go deeper than ``places.DEEPEST`` (walked no further: no command
    acts on them)."""
    folders = [c.folder for c in run.checkpoints if c.folder is not None]
    folders += [f.entry for f in run.loose_files if f.entry.is_dir and Role.TEMP in f.roles]
    inside: dict[str, tuple[tuple[str, float, int], ...]] = {}
    deep: set[str] = set()
    for entry in folders:
        if entry.is_symlink:
            continue
        found = []
        pending = [(entry.os_path, 0)]  # a stack, not os.walk's recursion: a tree may be thousands of levels deep
        while pending:
            folder, depth = pending.pop()
            if depth > DEEPEST:
                deep.add(entry.os_path)
                continue
            try:
                with os.scandir(folder) as listing:
                    items = list(listing)
            except OSError:
                continue
            for item in items:
                try:
                    info = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    pending.append((item.path, depth + 1))
                else:
                    found.append((item.path, info.st_mtime, info.st_size))
        inside[entry.os_path] = tuple(found)
    return inside, frozenset(deep)


def files_of(run: Run, inside: dict[str, tuple[tuple[str, float, int], ...]]) -> list[str]:
    """Every file an acting command could touch in ``run`` (for the open-files scan)."""
    files = [f.entry.os_path for c in run.checkpoints for f in c.files]
    files += [f.entry.os_path for f in run.loose_files if not f.entry.is_dir]
    return files + [path for contents in inside.values() for path, _, _ in contents]


def _entries(count: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}"


# prune


MAX_RUNS = 50
"""Runs one prune deletes in without --max-runs: a path one level too high is a typo, not a plan."""


@dataclass(frozen=True)
class PruneOptions:
    """What ``prune`` keeps beyond its policy, and how careful it is."""

    metrics_file: str | None = None
    """CSV or JSON of index -> metric value, for --keep-best."""
    verify_kept: bool = False
    """Read the would-be newest kept checkpoints whole first; keep older ones for any that fail."""
    max_runs: int = MAX_RUNS
    discard_journal: bool = False
    """Drop what an interrupted prune left pending, putting back what it had moved."""
    abort_uploads: float | None = None
    """Runs in buckets: abort the incomplete multipart uploads under the run older than this many
    seconds (by the store's clock)."""


class Prune(Pass):
    command = "prune"
    question = "Delete them?"
    declined = "nothing was deleted"
    acts_on = (Action.DELETE,)

    def __init__(self, policy: Policy, options: PruneOptions) -> None:
        self.policy = policy
        self.options = options
        self._worlds: dict[str, tuple[Run, float, frozenset[str]]] = {}
        self._journals: dict[str, list[Pending]] = {}

    def tidy(self, context: _Context) -> None:

        if self.options.discard_journal:
            self._discard_journals(context)
        for run in context.runs:  # what an earlier prune could not remove is tried again: it was confirmed then
            notes, failed = actions.leftovers(home(run), remove=not context.dry_run)
            for line in notes:
                context.tell(f"note: {line}")
            context.problems += failed

    def _discard_journals(self, context: _Context) -> None:
        """Drop the journals killed prunes left (a dry run only says what it would do), then scan
        again: what was put back is in the runs again."""

        changed = False
        for run in context.runs:
            root, place = run_root(run), home(run)
            for found in actions.pending(root, place):
                context.tell(
                    f"{run.path}: {'would drop' if context.dry_run else 'dropping'} {found.journal} ({found.in_trash} entries it had moved go back to the run)."
                )
            if context.dry_run:
                continue
            restored, left = actions.discard(root, place)
            changed |= bool(restored)
            if left:
                raise Stopped(*(f"{line}: left in the trash" for line in left))
        if changed:
            context.rescan()

    def plan(self, context: _Context) -> list[tuple[Plan, str]]:

        if self.policy.empty:  # --discard-journal alone: what the killed prunes had moved is back, and that is all
            return []
        planned = []
        try:
            for run in context.runs:
                metric = self.policy.metric if self.policy.keep_best else None
                values = metric_values(run, run_root(run), metric, self.options.metrics_file) if metric else {}
                world = dataclasses.replace(circumstances(run, time.time(), context.tell, context.noted), metrics=values)
                judged, plan = self._planned(run, context, world)
                planned.append((plan, run.unit.value))
                self._worlds[plan.run] = (judged, world.now, frozenset(world.open_by))
                context.skipped += [_skipped_line(plan, item, run.unit.value) for item in retention.skipped(plan)]
        except (MetricsError, retention.PolicyError) as error:
            raise Refused(str(error)) from error
        return planned

    def _planned(self, run: Run, context: _Context, world: Circumstances) -> tuple[Run, Plan]:
        """The plan for ``run``, and the run as it was judged for it: with --verify, its newest
        kept checkpoints read whole first; without, the newest kept one read whole where the plan
        would delete a complete checkpoint and keep none that a header read proves whole
        (``retention.unproven``): a prune never leaves a run without a checkpoint that loads. Raises
        ``retention.PolicyError``."""
        layout = layout_named(run.layout)
        judged, plan = run, retention.plan(run, layout, self.policy, world)
        if self.options.verify_kept or retention.unproven(run, plan):
            judged, failed = read_newest(run, max(self.policy.keep_last, 1) if self.options.verify_kept else 1, context.tell)
            if failed:
                world = dataclasses.replace(world, not_whole=failed)
                plan = retention.plan(judged, layout, self.policy, world)
        young = retention.young(judged, layout, self.policy, world, plan)
        if young:  # the fix a crash's findings print does nothing for --min-age: say so, with what does
            count = f"{len(young)} {run.unit.value}{'s are' if len(young) > 1 else ' is'}"
            context.tell(
                f"{run.path}: {count} kept only because {'they were' if len(young) > 1 else 'it was'} written within --min-age "
                f"{duration(self.policy.min_age)} (a save may still be running): once no job writes here, "
                f"`{self.at_min_age_0(run.path)}` deletes {'them' if len(young) > 1 else 'it'} too."
            )
        return judged, plan

    def at_min_age_0(self, path: str) -> str:
        """The command that prunes the run at ``path`` alone as this prune does, with --min-age 0."""
        return self.again(path, "--min-age 0")

    def again(self, path: str, *more: str) -> str:
        """The command that prunes the run at ``path`` alone as this prune does, with ``more``."""
        policy, words = self.policy, ["ckptdoctor prune"]
        if policy.keep_last:
            words.append(f"--keep-last {policy.keep_last}")
        if policy.keep_best:
            words.append(f"--keep-best {policy.keep_best} --metric {shlex.quote(str(policy.metric))} --mode {policy.mode}")
        if self.options.metrics_file:
            words.append(f"--metrics-file {shell_word(self.options.metrics_file)}")
        if policy.keep_every:
            words.append(f"--keep-every {policy.keep_every}")
        if policy.keep_within:
            seconds = policy.keep_within
            words.append(f"--keep-within {int(seconds) if seconds == int(seconds) else seconds}s")
        words += [f"--keep {index}" for index in sorted(policy.keep)]
        if self.options.verify_kept:
            words.append("--verify")
        return " ".join([*words, *more, "--no-recurse", shell_word(path)])

    def pending(self, context: _Context, plans: Sequence[Plan]) -> tuple[Pending, ...]:

        self._journals = {plan.run: actions.pending(plan.root, plan.home, self._worlds[plan.run][2], kept_paths(plan)) for plan in plans}
        return tuple(found for listed in self._journals.values() for found in listed)

    def questions(self, context: _Context, acting: Sequence[Plan]) -> list[Question]:
        touched = len({plan.run for plan in acting} | {run for run, found in self._journals.items() if found})
        asked = []
        if touched > self.options.max_runs:
            said = f"this prune deletes in {touched} runs, more than --max-runs {self.options.max_runs}"
            asked.append(Question(Ask.TOO_MANY_RUNS, f"{said[0].upper()}{said[1:]}. Go on?", self.declined, said, touched))
        return [*asked, *super().questions(context, acting)]

    def act(self, context: _Context, plans: Sequence[Plan]) -> None:

        try:
            for plan in plans:
                run, since, _ = self._worlds[plan.run]
                if self._journals.get(plan.run):
                    finished = actions.finish_interrupted(plan.root, plan.home, _busy_now(run), kept_paths(plan))
                    context.problems += finished.problems
                    context.tell(
                        f"{plan.run}: finished an interrupted prune: {finished.entries} entries it had planned to delete.", Tone.DONE
                    )
                if plan.acting(Action.DELETE):
                    self._delete(context, plan, run, since)
        except Exception:
            raise
        except BaseException:  # Ctrl-C: name what is left pending, and both ways forward
            for plan in plans:
                for found in actions.pending(plan.root, plan.home):
                    context.tell(
                        f"{plan.run}: {found.journal} is pending: `{self.again(plan.run)}` shows what it would still delete "
                        f"and finishes it when confirmed; `ckptdoctor prune --discard-journal --no-recurse {shell_word(plan.run)}` "
                        "drops it and puts back what it had moved, and deletes nothing."
                    )
            raise

    @staticmethod
    def _delete(context: _Context, plan: Plan, run: Run, since: float) -> None:
        changed = actions.changed_since_scan(plan.root, _relied_on(run))
        if changed:  # deleting older checkpoints now could leave the run nothing to resume from
            context.problems.append(_undeleted(plan, changed))
            return
        done = actions.delete(plan, since, _busy_now(run), _seen(run, plan.root))
        context.problems += done.problems
        if done.journal_free:
            context.tell(
                f"{plan.run}: the disk is too full for a journal: deleted in place, one checkpoint after the other, oldest first "
                "(a kill leaves at worst one old checkpoint incomplete, which the next prune deletes)."
            )
        folders = all(entry.is_dir for item in plan.acting(Action.DELETE) for entry in item.entries)
        what = files_or_folders(done.files, done.files if folders else 0)
        deleted = f"{done.deleted} checkpoint{'s' if done.deleted != 1 else ''} ({what})"
        context.tell(f"{plan.run}: deleted {deleted}; freed {size(done.freed_bytes)}.", Tone.DONE)
        if done.left:
            context.tell(
                f"{plan.run}: left {done.left} entries written, opened or replaced since the plan was made; the next prune looks again."
            )


def _skipped_line(plan: Plan, item: PlanItem, unit: str) -> str:
    """What a prune skips because this user cannot read it, and who can delete it."""
    where = ", ".join(item.paths) or f"{unit} {item.number}"
    return f"{plan.run}: {unit} {item.number} ({where}) is one this user cannot read: skipped, not deleted; CKD215 says who can"


def _undeleted(plan: Plan, changed: str) -> str:
    return (
        f"{plan.run}: nothing was deleted: {changed}, which the plan keeps the run resumable by, changed since the plan "
        "was made; prune again to plan from the run as it is"
    )


def _relied_on(run: Run) -> list[Entry]:
    """What acting on ``run`` relies on being as the scan saw it: the files of the checkpoint to
    resume from, and the pointers that name what is kept."""
    resume = [file.entry for file in run.resume.files] if run.resume else []
    return resume + [file.entry for file in run.loose_files if Role.POINTER in file.roles and not file.entry.is_dir]


def prune_from(settings: PruneSettings, discard_journal: bool = False) -> Prune:
    """The prune that ``settings`` ask for (checked when they were made): from a configuration
    file, the command line or the Python API, or one over another. PolicyError names what the
    policy cannot be."""
    policy = Policy(
        keep_last=settings.keep_last or 0,
        keep_best=settings.keep_best or 0,
        metric=settings.metric,
        mode=settings.mode or "min",
        keep_every=settings.keep_every or 0,
        keep_within=parse_duration(settings.keep_within) if settings.keep_within else 0.0,
        keep=frozenset(settings.keep or ()),
        min_age=parse_duration(settings.min_age) if settings.min_age is not None else MIN_AGE,
    )
    policy.check(discarding=discard_journal)
    abort_uploads = parse_duration(settings.abort_uploads) if settings.abort_uploads is not None else None
    max_runs = settings.max_runs if settings.max_runs is not None else MAX_RUNS
    return Prune(policy, PruneOptions(settings.metrics_file, settings.verify or False, max_runs, discard_journal, abort_uploads))


def kept_paths(plan: Plan) -> frozenset[str]:
    """What ``plan`` keeps, relative to its run (a killed prune's journal spares it)."""
    return frozenset(
        relative(entry.os_path, plan.root) for item in plan.items if item.action is not Action.DELETE for entry in item.entries
    )


# prune in a bucket


ABANDONED = 24 * 3600.0
"""An incomplete multipart upload older than this (without --abort-uploads) is taken for abandoned;
a younger one may be a save still going on, and keeps what it writes into."""


@dataclass
class _InStore:
    """One run in a bucket, as a prune there sees it."""

    run: Run
    place: Any
    """Its ``actions._objects.Place``."""
    now: float
    uploads: list[Any]
    plan: Plan | None = None
    journals: list[Any] = field(default_factory=list)
    quarantine: Any = None
    """``repair --undo``: the quarantine (``actions._object_quarantine.Found``) to put back."""


def _carry_out_in_store(pass_: Pass, context: _Context, confirm: Confirm, lock: bool) -> Outcome:
    """``carry_out`` for runs in buckets: the same steps, by the store's own means (a lock
    object, journal and manifest objects, conditional copies and deletes, ages by the store's
    clock). ``lock`` False (``--no-lock``): no lock, for a store that does not honour conditions."""
    # loaded only for runs in buckets: the store executor and S3's control plane
    from ckptdoctor.actions import _objects

    if isinstance(pass_, Prune) and pass_.policy.keep_best:
        raise Refused("--keep-best reads metrics beside local runs only, for now: use --keep-last or --keep-within on a bucket")
    if isinstance(pass_, Prune) and pass_.options.discard_journal:
        raise Refused(
            "--discard-journal: a bucket has no trash to put back from; the next prune finishes (or shows) what a killed one left"
        )
    context.scan()
    runs = [_InStore(run, _objects.place_of(run_root(run), home(run)), 0.0, []) for run in context.runs]
    if isinstance(pass_, Undo) and not runs:  # every checkpoint quarantined: the run is its folder's quarantine
        runs = [
            _InStore(_bare_run(path), _objects.place_of(path.rstrip("/"), home_of(path.rstrip("/"), False)), 0.0, [])
            for path in context.paths
        ]
    for found in runs:  # before any lock is written: only S3 has the conditional writes acting needs
        if found.place.run.store is not urls.Store.S3:
            raise Refused(
                f"{found.run.path}: {pass_.command} acts in s3:// buckets only, for now (it needs S3's conditional copy and delete)"
            )
    with contextlib.ExitStack() as held:
        leases = {}
        if not lock:
            context.tell("note: --no-lock: no lock is taken, and a store that ignores conditions deletes even what changed since the plan")
        if not context.dry_run and lock:
            for found in sorted(runs, key=lambda found: found.run.path):
                leases[found.run.path] = held.enter_context(_objects.locked(found.place, found.run.path))
        for found in runs:
            found.now = found.place.control.now()
            if isinstance(pass_, Prune):
                _plan_in_store(pass_, context, found)
            elif isinstance(pass_, Repair):
                _plan_repair_in_store(pass_, context, found)
            elif isinstance(pass_, Undo):
                _plan_undo_in_store(pass_, context, found)
        planned = [(found.plan, found.run.unit.value) for found in runs if found.plan is not None]
        plans = [plan for plan, _ in planned]
        pending = tuple(_pending_in_store(found) for found in runs if any(journal.journal is not None for journal in found.journals))
        context.listener(Planned(context.report, tuple(planned), pending, tuple(context.refused)))

        def outcome(acted: bool = False, declined: str = "") -> Outcome:
            return Outcome(
                pass_.command, context.report, tuple(plans), context.dry_run, acted, declined, tuple(context.told),
                tuple(context.problems), tuple(context.refused),
            )  # fmt: skip

        if isinstance(pass_, Undo) and context.refused:
            context.tell("Nothing was restored.")
            return outcome()
        acting = [plan for plan in plans if any(plan.acting(action) for action in pass_.acts_on)]
        aborting = isinstance(pass_, Prune) and any(_stale_uploads(pass_, found) for found in runs)
        if context.dry_run or not (acting or pending or aborting):
            return outcome()
        for question in pass_.questions(context, acting):
            if confirm(question) is not True:
                return outcome(declined=question.declined)
        for found in runs:
            lease = leases.get(found.run.path)
            if isinstance(pass_, Prune):
                _act_in_store(pass_, context, found, lease)
            elif isinstance(pass_, Repair):
                _repair_in_store(context, found, lease)
            else:
                _undo_in_store(context, found)
        return outcome(acted=True)


def _bare_run(path: str) -> Run:
    return Run(path.rstrip("/"), "unknown", Unit.SAVE, (), ())


def _plan_in_store(prune: Prune, context: _Context, found: _InStore) -> None:
    # loaded only for runs in buckets: the store executor
    from ckptdoctor.actions import _objects

    run, place = found.run, found.place
    found.uploads = place.control.uploads(place.run.prefix + "/")
    found.journals = _objects.journals(place)
    for journal in found.journals:
        if journal.journal is None:
            context.tell(f"note: {place.run.url_of(journal.key)} is not ckptdoctor's ({journal.why}): ignored")
    inside, open_by = _objects_inside(run, found)
    world = Circumstances(found.now, open_by=open_by, inside=inside)
    try:
        found.run, found.plan = prune._planned(run, context, world)
    except retention.PolicyError as error:
        raise Refused(str(error)) from error
    _say_versions(context, found)
    stale = _stale_uploads(prune, found)
    if stale:
        verb = "would abort" if context.dry_run else "aborts"
        context.tell(
            f"{run.path}: {verb} {len(stale)} incomplete upload{'s' if len(stale) != 1 else ''} older than "
            f"{duration(prune.options.abort_uploads or 0)} ({size(sum(upload.parts_bytes for upload in stale))} of parts)"
        )


def _objects_inside(run: Run, found: _InStore) -> tuple[dict[str, tuple[tuple[str, float, int], ...]], dict[str, int | str]]:
    """Every object inside each checkpoint folder of ``run`` (from the scan's listing), with the
    uploads going on into it; and what the young uploads are writing, by URL: a save into a
    checkpoint that is still going on keeps it, as a file held open does on disk."""
    folders = [c.folder for c in run.checkpoints if c.folder is not None]
    folders += [f.entry for f in run.loose_files if f.entry.is_dir and Role.TEMP in f.roles]
    location = found.place.run
    listed = sorted(url for url in _listed_under(location.url))
    young = [upload for upload in found.uploads if found.now - upload.initiated < ABANDONED]
    inside: dict[str, tuple[tuple[str, float, int], ...]] = {}
    open_by: dict[str, int | str] = {}
    folder_prefixes = tuple(folder.os_path + "/" for folder in folders)
    resume = run.resume.index if run.resume is not None else None
    newer = [c for c in run.checkpoints if resume is None or c.index > resume]
    for upload in young:
        url = location.url_of(upload.key)
        said = f"an upload into it began {duration(max(0.0, found.now - upload.initiated))} ago and is not complete"
        open_by[url] = said
        if not url.startswith(folder_prefixes):  # a file of some save still arriving: the saves after the resume point may be its
            for checkpoint in newer:
                open_by.update(
                    (file.entry.os_path, f"a save may still be arriving: {said} ({upload.key.rsplit('/', 1)[-1]})")
                    for file in checkpoint.files
                )
    for folder in folders:
        prefix = folder.os_path + "/"
        contents = [(url, info.modified, info.size) for url in listed if url.startswith(prefix) and (info := _info(url)) is not None]
        contents += [(location.url_of(u.key), u.initiated, u.parts_bytes) for u in young if location.url_of(u.key).startswith(prefix)]
        inside[folder.os_path] = tuple(contents)
    return inside, open_by


def _listed_under(url: str) -> list[str]:
    # loaded only for runs in buckets: what their listing showed
    from ckptdoctor.stores import session

    return session.listed_under(url)


def _info(url: str) -> Any:
    # loaded only for runs in buckets: what their listing showed
    from ckptdoctor.stores import session

    return session.listed(url)


def _stale_uploads(prune: Prune, found: _InStore) -> list[Any]:
    age = prune.options.abort_uploads
    if age is None:
        return []
    return [upload for upload in found.uploads if found.now - upload.initiated >= age]


def _say_versions(context: _Context, found: _InStore) -> None:
    """On a versioned bucket a delete frees nothing: say so before anything is asked."""
    plan = found.plan
    if plan is None or not plan.acting(Action.DELETE):
        return
    control = found.place.control
    if control.versioning() is None:
        return
    expiring = [rule for rule in control.lifecycle() if rule.get("Status") == "Enabled" and "NoncurrentVersionExpiration" in rule]
    later = (
        f"once its lifecycle rule expires noncurrent versions ({expiring[0]['NoncurrentVersionExpiration'].get('NoncurrentDays', '?')} days)"
        if expiring
        else "never: no lifecycle rule expires noncurrent versions (add one with a NoncurrentVersionExpiration)"
    )
    context.tell(
        f"note: {found.place.run.root} keeps object versions: these deletes free 0 B now (each leaves a delete marker), "
        f"and {size(plan.freed_bytes)} {later}"
    )


def _planned_objects(plan: Plan, run: Run) -> tuple[list[tuple[str, str]], list[str], int]:
    """The (key, ETag) of every object the plan deletes (a folder's are every object listed below
    it); the URLs of those the listing gave no ETag, which no delete can be conditioned on; and
    how many checkpoints are left because a folder of theirs changed since the scan."""
    # loaded only for runs in buckets: the store executor and what their listing showed
    from ckptdoctor.actions._objects import folder_unchanged
    from ckptdoctor.stores import session

    location = urls.parse(run_root(run))
    found: list[tuple[str, str]] = []
    unconditioned: list[str] = []
    left = 0
    for item in plan.acting(Action.DELETE):
        if not all(folder_unchanged(entry.os_path) for entry in item.entries if entry.is_dir):
            left += 1
            continue
        for entry in item.entries:
            urls_of = session.listed_under(entry.os_path) if entry.is_dir else [entry.os_path]
            for url in urls_of:
                info = session.listed(url)
                if info is not None and info.etag:
                    found.append((location.key_of(url), info.etag))
                elif info is not None:
                    unconditioned.append(url)
    return found, unconditioned, left


def _journal_objects(found: _InStore) -> frozenset[tuple[str, str]]:
    """What a killed prune's journal may still delete: objects of the run's checkpoints (never any
    other object of the run, whatever a planted journal names) that this plan does not keep, each
    with the ETag the listing shows."""
    # loaded only for runs in buckets: what their listing showed
    from ckptdoctor.stores import session

    plan, location = found.plan, found.place.run
    kept = kept_paths(plan) if plan is not None else frozenset()
    urls_of: list[str] = []
    for checkpoint in found.run.checkpoints:
        entries = [checkpoint.folder] if checkpoint.folder is not None else [file.entry for file in checkpoint.files]
        for entry in entries:
            urls_of += session.listed_under(entry.os_path) if entry.is_dir else [entry.os_path]
    finishable: set[tuple[str, str]] = set()
    for url in urls_of:
        key = url[len(location.url) + 1 :]
        info = session.listed(url)
        if info is None or info.etag is None or any(key == k or key.startswith(k + "/") for k in kept):
            continue
        finishable.add((key, info.etag))
    return frozenset(finishable)


def _pending_in_store(found: _InStore) -> Pending:
    """What the journals a killed prune left would still delete (objects unchanged, not kept now)."""
    # loaded only for runs in buckets: what their listing showed
    from ckptdoctor.stores import session

    location = found.place.run
    in_run: list[str] = []
    spared: list[str] = []
    finishable = _journal_objects(found)
    for journal in found.journals:
        if journal.journal is None:
            continue
        for key, etag in journal.journal.objects:
            info = session.listed(f"{location.url}/{key}")
            if info is None:
                continue
            (in_run if (key, etag) in finishable else spared).append(key)
    names = ", ".join(found.place.run.url_of(j.key) for j in found.journals if j.journal is not None)
    return Pending(names, 0, tuple(in_run), tuple(spared))


def _act_in_store(prune: Prune, context: _Context, found: _InStore, lease: Any) -> None:
    # loaded only for runs in buckets: the store executor and what their listing showed
    from ckptdoctor.actions import _objects
    from ckptdoctor.stores import session

    run, place, plan = found.run, found.place, found.plan
    location = place.run
    for journal in found.journals:  # what a killed prune was confirmed to delete, still as it was
        if journal.journal is None:
            continue
        finishable = _journal_objects(found)
        left = [(location.key_of(f"{location.url}/{key}"), etag) for key, etag in journal.journal.objects if (key, etag) in finishable]
        done = _objects.delete_objects(place, left, lease)
        context.problems += done.problems
        if not done.problems:
            _objects.close_journal(place, journal.key, journal.etag)
        context.tell(f"{run.path}: finished an interrupted prune: {len(done.deleted)} objects it had planned to delete.", Tone.DONE)
    if plan is not None and plan.acting(Action.DELETE):
        changed = _objects.changed_since_scan(_relied_on(run))
        if changed:
            context.problems.append(_undeleted(plan, changed))
        else:
            objects, unconditioned, changed_folders = _planned_objects(plan, run)
            if changed_folders:
                context.tell(
                    f"{plan.run}: left {changed_folders} checkpoint folders written to since the plan was made; the next prune looks again."
                )
            context.problems += [
                f"{url}: the store listed it without an ETag: it cannot be deleted only as planned, so it is left" for url in unconditioned
            ]
            below = len(location.prefix) + 1 if location.prefix else 0
            key, etag = _objects.write_journal(place, ObjectJournal(run.path, tuple((k[below:], e) for k, e in objects)))
            done = _objects.delete_objects(place, objects, lease)
            context.problems += done.problems
            if not done.problems:
                _objects.close_journal(place, key, etag)
            freed = sum(info.size for k in done.deleted if (info := session.listed(location.url_of(k))) is not None)
            checkpoints = len(plan.acting(Action.DELETE))
            context.tell(
                f"{plan.run}: deleted {checkpoints} checkpoint{'s' if checkpoints != 1 else ''} ({len(done.deleted)} objects); "
                f"{size(freed)} no longer listed.",
                Tone.DONE,
            )
            if done.changed:
                context.tell(
                    f"{plan.run}: left {len(done.changed)} objects rewritten or removed since the plan was made; the next prune looks again."
                )
    for upload in _stale_uploads(prune, found):
        if place.control.abort(upload):
            context.tell(
                f"{run.path}: aborted the incomplete upload of {location.url_of(upload.key)} ({size(upload.parts_bytes)} of parts).",
                Tone.DONE,
            )


def _plan_repair_in_store(repair_: Repair, context: _Context, found: _InStore) -> None:
    run, place = found.run, found.place
    found.uploads = place.control.uploads(place.run.prefix + "/")
    for left in _quarantines_in_store(found):
        if left.manifest is not None and left.manifest.state == "repairing":
            context.tell(
                f"note: an interrupted repair left {place.run.url_of(left.key)}: what it moved stays there "
                f"(`ckptdoctor repair --undo --id {left.ident} {shell_word(run.path)}` puts it back); the rest is planned anew"
            )
    inside, open_by = _objects_inside(run, found)
    world = Circumstances(found.now, open_by=open_by, inside=inside)
    findings = [finding for finding in context.report.findings if finding.run == run.path]
    try:
        found.plan = repair.plan(run, layout_named(run.layout), findings, world, repair_.min_age)
    except repair.Refused as refusal:
        context.refused.append(str(refusal))


def _quarantines_in_store(found: _InStore) -> list[Any]:
    # loaded only for runs in buckets: their quarantines
    from ckptdoctor.actions import _object_quarantine

    return _object_quarantine.quarantines(found.place)


def _repair_in_store(context: _Context, found: _InStore, lease: Any) -> None:
    # loaded only for runs in buckets: the store executor
    from ckptdoctor.actions import _object_quarantine, _objects

    plan, run = found.plan, found.run
    if plan is None or not (plan.acting(Action.QUARANTINE) or plan.acting(Action.REPOINT)):
        return
    changed = _objects.changed_since_scan(_relied_on(run))
    if changed:
        context.problems.append(_unmoved(plan, changed))
        return
    _tell_moved(context, plan, _object_quarantine.quarantine(found.place, plan, found.now, lease), "object")


def _plan_undo_in_store(undo: Undo, context: _Context, found: _InStore) -> None:
    # loaded only for runs in buckets: their quarantines
    from ckptdoctor.actions import _object_quarantine

    every = [left for left in _quarantines_in_store(found) if left.manifest is not None]
    picked = [left for left in every if left.ident == undo.ident] if undo.ident else every[-1:]
    if not picked:
        if undo.ident:
            raise Refused(f"no run given holds quarantine {undo.ident}")
        context.tell(f"{found.run.path}: no quarantine: nothing to undo", Tone.DONE)
        return
    chosen = picked[0]
    standing = _object_quarantine.standing(found.place, chosen)
    found.plan = repair.undo_plan(standing, found.run.path, found.place.run.url, standing.home)
    found.journals = []
    found.quarantine = chosen
    context.refused += undo_refusals(standing) + undo_unmatched(standing)  # a bucket's copy changed: nothing goes back


def _undo_in_store(context: _Context, found: _InStore) -> None:
    # loaded only for runs in buckets: the store executor
    from ckptdoctor.actions import _object_quarantine

    if found.plan is None or found.quarantine is None:
        return
    restored, problems = _object_quarantine.restore(found.place, found.quarantine)
    context.tell(
        f"{found.plan.run}: put back {_entries(restored)} from {found.place.run.url_of(found.quarantine.key.rsplit('/', 1)[0])}.", Tone.DONE
    )
    context.problems += problems


# repair


def read_newest(run: Run, count: int, tell: Callable[..., None]) -> tuple[Run, tuple[int, ...]]:
    """The run judged with its ``count`` newest complete checkpoints read whole, and older ones in
    place of any that fail (``verify_newest``: ``prune --verify``, ``repair --verify``), and the
    checkpoints that failed, each told."""
    judged, failed = verify_newest(run, count)
    for index in failed:
        tell(f"{run.path}: {run.unit.value} {index} does not pass verify (read whole): it is not complete; `ckptdoctor verify` says why.")
    return judged, failed


class Repair(Pass):
    command = "repair"
    question = "Move and re-point them?"
    declined = "nothing was moved"
    acts_on = (Action.QUARANTINE, Action.REPOINT)

    def __init__(self, min_age: float, read_whole: bool = False) -> None:
        self.min_age = min_age
        self.read_whole = read_whole
        self._worlds: dict[str, tuple[Run, float]] = {}

    def tidy(self, context: _Context) -> None:
        """Close what killed repairs left (a dry run only notes it), then scan again: what they
        had moved stays in their quarantines, and this repair plans the rest anew."""
        closed_any = False
        for run in context.runs:
            root, place = run_root(run), home(run)
            for journal in actions.pending(root, place):
                context.tell(f"note: an interrupted prune left {journal.journal}; `ckptdoctor prune` shows what it would still do")
            if context.dry_run:
                for found in actions.quarantines(root, place):
                    if found.state == "repairing":
                        context.tell(
                            f"note: an interrupted repair left {found.folder}; a repair without --dry-run closes it "
                            "(what it moved stays there) and plans the rest anew"
                        )
                continue
            actions.sweep(place)
            closed, failed = actions.close_repairs(root, place)
            context.problems += failed
            for ident in closed:  # each its own undo: the one after this repair's would not reach it
                context.tell(
                    f"{run.path}: closed an interrupted repair: what it moved stays in its quarantine "
                    f"(`ckptdoctor repair --undo --no-recurse --id {ident} {shell_word(run.path)}` puts it back); the rest is planned anew.",
                )
            closed_any = closed_any or bool(closed)
        if closed_any:
            context.rescan()

    def plan(self, context: _Context) -> list[tuple[Plan, str]]:

        planned = []
        for scanned in context.runs:
            findings = [finding for finding in context.report.findings if finding.run == scanned.path]
            world = circumstances(scanned, time.time(), context.tell, context.noted)
            run = read_newest(scanned, 1, context.tell)[0] if self.read_whole else scanned
            try:
                planned.append((repair.plan(run, layout_named(run.layout), findings, world, self.min_age), run.unit.value))
            except repair.Refused as refusal:
                context.refused.append(str(refusal))
            self._worlds[run.path] = (run, world.now)
        return planned

    def act(self, context: _Context, plans: Sequence[Plan]) -> None:

        for plan in plans:
            if not any(plan.acting(action) for action in self.acts_on):
                continue
            run, since = self._worlds[plan.run]
            changed = actions.changed_since_scan(plan.root, _relied_on(run))
            if changed:  # moving and re-pointing now could leave the run pointing at a damaged checkpoint
                context.problems.append(_unmoved(plan, changed))
                continue
            _tell_moved(context, plan, actions.quarantine(plan, since, _busy_now(run), _seen(run, plan.root)), "entry")


def _unmoved(plan: Plan, changed: str) -> str:
    return (
        f"{plan.run}: nothing was moved: {changed}, which the plan makes the run resume from, changed since the plan "
        "was made; repair again to plan from the run as it is"
    )


def _tell_moved(context: _Context, plan: Plan, moved: Moved, what: str) -> None:
    """What a repair moved (``what``: an ``entry`` on disk, an ``object`` in a bucket) and left."""
    many = "entries" if what == "entry" else f"{what}s"
    pointers = f", re-pointed {moved.repointed} pointer{'s' if moved.repointed != 1 else ''}" if moved.repointed else ""
    context.tell(
        f"{plan.run}: quarantined {moved.entries} {what if moved.entries == 1 else many} ({size(moved.bytes)}) in {moved.folder}{pointers}; "
        f"`ckptdoctor repair --undo --no-recurse {shell_word(plan.run)}` puts it all back.",
        Tone.DONE,
    )
    if moved.left:
        context.tell(
            f"{plan.run}: left {moved.left} {many} written, opened or replaced since the plan was made; the next repair looks again."
        )
    context.problems += moved.problems


# repair --undo


class Undo(Pass):
    command = "repair"
    question = "Put them back?"
    declined = "nothing was restored"
    acts_on = (Action.RESTORE,)

    def __init__(self, ident: str | None = None) -> None:
        self.ident = ident
        """The quarantine to put back; by default each run's latest."""
        self._roots: list[tuple[str, str, str, str]] = []
        self._chosen: dict[str, Quarantine] = {}

    def more_locks(self, context: _Context) -> Iterable[tuple[str, str]]:
        self._roots = undo_roots(context.paths, context.runs)
        return [(place, shown) for shown, _, place, _ in self._roots]

    def plan(self, context: _Context) -> list[tuple[Plan, str]]:

        planned = []
        for shown, root, place, unit in self._roots:
            if not context.dry_run:
                actions.sweep(place)
            every = actions.quarantines(root, place)
            picked = [q for q in every if q.ident == self.ident] if self.ident else every[-1:]
            if not picked and not self.ident:
                context.tell(f"{shown}: no quarantine: nothing to undo", Tone.DONE)
            for found in picked:
                plan = repair.undo_plan(found, shown, root, place)
                self._chosen[plan.run] = found
                planned.append((plan, unit))
                context.refused += undo_refusals(found)
                context.problems += undo_unmatched(found)  # on disk, the rest goes back (a copy of the run)
        if self.ident and not planned:
            raise Refused(f"no run given holds quarantine {self.ident}")
        return planned

    def before_asking(self, context: _Context, plans: Sequence[Plan]) -> bool:

        if context.refused:
            context.tell("Nothing was restored.")
            return False
        if not context.dry_run:
            for plan in plans:
                if not plan.acting(Action.RESTORE):  # nothing in it to put back (a repair killed early): it goes
                    context.problems += actions.restore(self._chosen[plan.run], plan.root)[1]
        return True

    def act(self, context: _Context, plans: Sequence[Plan]) -> None:

        for plan in plans:
            if plan.acting(Action.RESTORE):
                found = self._chosen[plan.run]
                restored, left = actions.restore(found, plan.root)
                context.tell(f"{plan.run}: put back {_entries(restored)} from {found.folder}.", Tone.DONE)
                context.problems += left


def undo_refusals(found: Quarantine) -> list[str]:
    """Why ``repair --undo`` of ``found`` puts nothing back: what is in the run again (on disk and
    in a bucket alike). Nothing said here deletes anything: both copies are data."""
    return [
        f"{item.path} is in the run again and in {found.folder}: move one of them aside (keep both), then undo again"
        for item in found.items
        if item.state is StoredState.CONFLICT
    ]


def undo_unmatched(found: Quarantine) -> list[str]:
    """What in ``found`` is not what the repair moved there, or cannot be shown to be (a copy of
    the run made from a manifest that recorded no content): each named, left in the quarantine,
    never put back and never to be deleted for the rest to go back."""
    return [
        f"{item.path} in {found.folder} is not what the repair moved there, or cannot be shown to be "
        "(another file or a link, its size, time or bytes differ, or an older ckptdoctor recorded no fingerprint of it): "
        "left in the quarantine; if you know it is the one, move it back into the run yourself"
        for item in found.items
        if item.state is StoredState.REPLACED
    ]


def undo_roots(paths: Sequence[str], runs: Sequence[Run]) -> list[tuple[str, str, str, str]]:
    """(shown path, root, home, unit) of every run to undo in: the runs found, and any folder
    given that holds a quarantine but no longer scans as a run."""

    roots = [(run.path, run_root(run), home(run), run.unit.value) for run in runs]
    known = {os.path.realpath(root) for _, root, _, _ in roots}
    for path in paths:
        if os.path.realpath(path) in known:
            continue
        for beside in (False, True):
            if os.path.isdir(os.path.join(home_of(path, beside), actions.QUARANTINE)):
                roots.append((path, path, home_of(path, beside), "index"))
    return roots
