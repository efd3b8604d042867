"""``repair``: move aside what makes a run fail to resume, and re-point what names it, through
the executor it is handed."""

from __future__ import annotations

from collections.abc import Sequence

from ckptdoctor.acting.protocol import Context, Pass, Tone, read_newest
from ckptdoctor.actions.executor import relied_on
from ckptdoctor.layouts.registry import home, layout_named
from ckptdoctor.model import Action, Plan, Run
from ckptdoctor.places import run_root
from ckptdoctor.planners import repair
from ckptdoctor.quoting import shell_word
from ckptdoctor.records import Moved
from ckptdoctor.units import counted, size


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
            try:
                planned.append((repair.plan(run, layout_named(run.layout), findings, world, self.min_age), run.unit.value))
            except repair.NotResumable as refusal:
                context.refused.append(str(refusal))
            self._worlds[run.path] = (run, world.now)
        return planned

    def act(self, context: Context, plans: Sequence[Plan]) -> None:

        for plan in plans:
            if not any(plan.acting(action) for action in self.acts_on):
                continue
            run, since = self._worlds[plan.run]
            changed = context.executor.changed_since_scan(plan.root, relied_on(run))
            if changed:  # moving and re-pointing now could leave the run pointing at a damaged checkpoint
                context.problems.append(_unmoved(plan, changed))
                continue
            _tell_moved(context, plan, context.executor.quarantine(run, plan, since), context.executor.noun)


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
