"""``repair --undo``: put back what a repair quarantined, through the executor it is handed."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence

from ckptdoctor.acting.protocol import Context, Pass, Refused, Tone
from ckptdoctor.actions.executor import Executor
from ckptdoctor.layouts.registry import home
from ckptdoctor.model import Action, Plan, Run
from ckptdoctor.places import run_root
from ckptdoctor.planners import repair
from ckptdoctor.quoting import shell_word
from ckptdoctor.records import Quarantine, StoredState


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

    def more_locks(self, context: Context) -> Iterable[tuple[str, str]]:
        self._roots = undo_roots(context.paths, context.runs, context.executor)
        return [(place, shown) for shown, _, place, _ in self._roots]

    def plan(self, context: Context) -> list[tuple[Plan, str]]:

        planned = []
        for shown, root, place, unit in self._roots:
            if not context.dry_run:
                context.executor.sweep(place)
            every = context.executor.quarantines(root, place)
            picked = [q for q in every if q.ident == self.ident] if self.ident else _latest(every)
            if not picked and not self.ident:
                context.tell(f"{shown}: no quarantine: nothing to undo", Tone.DONE)
            for other in every:
                if other not in picked and _holds(other):
                    context.tell(_also_there(other, shown))
            for found in picked:
                plan = repair.undo_plan(found, shown, root, place)
                self._chosen[plan.run] = found
                planned.append((plan, unit))
                context.refused += undo_refusals(found)
                if context.executor.partial_undo:  # the rest goes back (on disk: a copy of the run)
                    context.problems += undo_unmatched(found)
                else:
                    context.refused += undo_unmatched(found)
        if self.ident and not planned:
            raise Refused(f"no run given holds quarantine {self.ident}")
        return planned

    def before_asking(self, context: Context, plans: Sequence[Plan]) -> bool:

        if context.refused:
            context.tell("Nothing was restored.")
            return False
        if not context.dry_run:
            for plan in plans:
                if not plan.acting(Action.RESTORE):  # nothing in it to put back (a repair killed early): it goes
                    context.problems += context.executor.restore(self._chosen[plan.run], plan.root)[1]
        return True

    def act(self, context: Context, plans: Sequence[Plan]) -> None:

        for plan in plans:
            if plan.acting(Action.RESTORE):
                found = self._chosen[plan.run]
                restored, left = context.executor.restore(found, plan.root)
                context.tell(f"{plan.run}: put back {_entries(restored)} from {found.folder}.", Tone.DONE)
                context.problems += left


def _latest(every: Sequence[Quarantine]) -> list[Quarantine]:
    """The quarantine ``--undo`` puts back by default: the newest that still holds anything (an
    emptied one, or one whose entries all went back, says nothing of the repair before it)."""
    holding = [found for found in every if _holds(found)]
    return (holding or list(every))[-1:]


def _holds(found: Quarantine) -> bool:
    return any(item.state in (StoredState.QUARANTINED, StoredState.CONFLICT) for item in found.items)


def _also_there(found: Quarantine, shown: str) -> str:
    """What another quarantine of the run still holds, and the command that puts it back (a repair
    killed part-way, then run again, leaves two)."""
    count = sum(item.state in (StoredState.QUARANTINED, StoredState.CONFLICT) for item in found.items)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(found.created))
    return (
        f"note: {found.folder} (a repair of {when}{', killed part-way' if found.state == 'repairing' else ''}) still holds "
        f"{_entries(count)}: `ckptdoctor repair --undo --no-recurse --id {found.ident} {shell_word(shown)}` puts {'it' if count == 1 else 'them'} back"
    )


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


def undo_roots(paths: Sequence[str], runs: Sequence[Run], executor: Executor) -> list[tuple[str, str, str, str]]:
    """(shown path, root, home, unit) of every run to undo in: the runs found, and any folder
    given that holds a quarantine but no longer scans as a run."""

    roots = [(run.path, run_root(run), home(run), run.unit.value) for run in runs]
    known = {os.path.realpath(root) for _, root, _, _ in roots}
    for path in paths:
        if os.path.realpath(path) in known:
            continue
        roots += [(path, path, place, "index") for place in executor.quarantine_homes(path)]
    return roots


def _entries(count: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}"
