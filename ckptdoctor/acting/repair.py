"""``repair``: move aside what makes a run fail to resume, and re-point what names it, through
the executor it is handed."""

from __future__ import annotations

import errno
import functools
from collections.abc import Sequence

from ckptdoctor.acting.protocol import Context, Pass, Tone, read_newest
from ckptdoctor.actions.executor import relied_on
from ckptdoctor.errors import RefusedError
from ckptdoctor.layouts.registry import Layout, home, layout_named
from ckptdoctor.model import Action, Finding, Plan, Run
from ckptdoctor.places import run_root
from ckptdoctor.planners import repair, retention, space
from ckptdoctor.planners.retention import MIN_AGE, Circumstances
from ckptdoctor.quoting import shell_word
from ckptdoctor.records import Moved
from ckptdoctor.rules.disk import prune_to_fit
from ckptdoctor.units import counted, size

FULL = (errno.ENOSPC, errno.EDQUOT)
"""What a write on a full disk (or past a quota) fails with."""


class Repair(Pass):
    command = "repair"
    question = "Move and re-point them?"
    declined = "nothing was moved"
    acts_on = (Action.QUARANTINE, Action.REPOINT)

    def __init__(self, min_age: float, read_whole: bool = False) -> None:
        self.min_age = min_age
        self.read_whole = read_whole
        self._worlds: dict[str, tuple[Run, float]] = {}

    def tidy(self, context: Context) -> None:
        """Close what killed repairs left (a dry run only notes it), then scan again: what they
        had moved stays in their quarantines, and this repair plans the rest anew."""
        closed_any = False
        for run in context.runs:
            root, place = run_root(run), home(run)
            for journal in context.executor.journals(root, place):
                context.tell(f"note: an interrupted prune left {journal.journal}; `ckptdoctor prune` shows what it would still do")
            if context.dry_run:
                for found in context.executor.quarantines(root, place):
                    if found.state == "repairing":
                        context.tell(
                            f"note: an interrupted repair left {found.folder}; a repair without --dry-run closes it "
                            "(what it moved stays there) and plans the rest anew"
                        )
                continue
            context.executor.sweep(place)
            closed, failed = context.executor.close_repairs(root, place)
            context.problems += failed
            for ident in closed:  # each its own undo: the one after this repair's would not reach it
                context.tell(
                    f"{run.path}: closed an interrupted repair: what it moved stays in its quarantine "
                    f"(`ckptdoctor repair --undo --no-recurse --id {ident} {shell_word(run.path)}` puts it back); the rest is planned anew.",
                )
            closed_any = closed_any or bool(closed)
        if closed_any:
            context.rescan()

    def plan(self, context: Context) -> list[tuple[Plan, str]]:

        planned = []
        for scanned in context.runs:
            findings = [finding for finding in context.report.findings if finding.run == scanned.path]
            world = context.world(scanned)
            run = read_newest(scanned, 1, context.tell)[0] if self.read_whole else scanned
            replan = functools.partial(_replanned, run, layout_named(run.layout), findings)
            try:
                planned.append((replan(self.min_age, world), run.unit.value))
            except repair.NotResumable as refusal:
                context.refused.append(str(refusal))
            else:
                self._tell_spared(context, run, planned[-1][0], replan, world)
            self._worlds[run.path] = (run, world.now)
        return planned

    def _tell_spared(self, context: Context, run: Run, plan: Plan, replan: retention.Replan, world: Circumstances) -> None:
        """Say what ``plan`` leaves only for --min-age or a live process, and what acts on it now."""
        spared = retention.spared(plan, replan, world, self.min_age, self.acts_on)
        if spared is None:
            return
        for note in retention.spared_notes(run.path, run.unit.value, spared, self.min_age, world.now, "moves", self.again(run.path, 0.0)):
            context.tell(note)

    def again(self, path: str, min_age: float | None = None) -> str:
        """The command that repairs the run at ``path`` alone as this repair does (at ``min_age``, if given)."""
        min_age = self.min_age if min_age is None else min_age
        words = ["ckptdoctor repair", *(["--verify"] if self.read_whole else [])]
        if min_age != MIN_AGE:
            words.append(f"--min-age {min_age:g}" if not min_age else f"--min-age {min_age:g}s")
        return " ".join([*words, "--no-recurse", shell_word(path)])

    def act(self, context: Context, plans: Sequence[Plan]) -> None:

        for plan in plans:
            if not any(plan.acting(action) for action in self.acts_on):
                continue
            run, since = self._worlds[plan.run]
            changed = context.executor.changed_since_scan(plan.root, relied_on(run))
            if changed:  # moving and re-pointing now could leave the run pointing at a damaged checkpoint
                context.problems.append(_unmoved(plan, changed))
                continue
            try:
                moved = context.executor.quarantine(run, plan, since)
            except RefusedError as error:
                if isinstance(error.__cause__, OSError) and error.__cause__.errno in FULL:  # say the prune that makes room
                    context.tell(
                        f"{plan.run}: the disk is full: {_making_room(run, plan.root, since)}; then `{self.again(plan.run)}` moves it."
                    )
                raise
            _tell_moved(context, plan, moved, context.executor.noun)


def _making_room(run: Run, root: str, now: float) -> str:
    """The prune that frees room on a full disk for ``run``'s next save (and so for a repair's
    records), as ``diskcheck`` words it, by the clock the repair was planned by."""
    volume = space.volume(root)
    guess = space.estimate(run)
    fit = space.freeing(run, space.needed(guess), volume.free_bytes, now) if guess is not None else None
    return prune_to_fit(fit, volume.mountpoint, shell_word(run.path), run.unit.value)


def _replanned(run: Run, layout: Layout, findings: Sequence[Finding], min_age: float, around: Circumstances) -> Plan:
    """The repair plan of ``run`` at ``min_age`` in the world ``around`` (``retention.Replan``)."""
    return repair.plan(run, layout, findings, around, min_age)


def _unmoved(plan: Plan, changed: str) -> str:
    return (
        f"{plan.run}: nothing was moved: {changed}, which the plan makes the run resume from, changed since the plan "
        "was made; repair again to plan from the run as it is"
    )


def _tell_moved(context: Context, plan: Plan, moved: Moved, what: str) -> None:
    """What a repair moved (``what``: an ``entry`` on disk, an ``object`` in a bucket) and left."""
    many = "entries" if what == "entry" else f"{what}s"
    pointers = f", re-pointed {counted(moved.repointed, 'pointer')}" if moved.repointed else ""
    context.tell(
        f"{plan.run}: quarantined {counted(moved.entries, what, many)} ({size(moved.bytes)}) in {moved.folder}{pointers}; "
        f"`ckptdoctor repair --undo --no-recurse {shell_word(plan.run)}` puts it all back.",
        Tone.DONE,
    )
    if moved.left:
        context.tell(
            f"{plan.run}: left {counted(moved.left, what, many)} written, opened or replaced since the plan was made; the next repair looks again."
        )
    context.problems += moved.problems
