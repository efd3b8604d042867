"""``prune``: delete what a retention policy does not keep, through the executor it is handed."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ckptdoctor.acting.protocol import Ask, Context, Pass, Question, Refused, Stopped, read_newest
from ckptdoctor.actions.executor import Executor, relied_on
from ckptdoctor.layouts.registry import home, layout_named
from ckptdoctor.model import Action, Plan, PlanItem, Run
from ckptdoctor.places import run_root
from ckptdoctor.planners import retention
from ckptdoctor.planners.metrics import MetricsError, metric_values
from ckptdoctor.planners.retention import MIN_AGE, Circumstances, Policy, PruneSettings, parse_duration
from ckptdoctor.quoting import shell_word
from ckptdoctor.records import Pending
from ckptdoctor.units import counted

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

    def refuse(self, executor: Executor) -> None:
        if self.policy.keep_best and not executor.reads_metrics:
            raise Refused("--keep-best reads metrics beside local runs only, for now: use --keep-last or --keep-within on a bucket")
        if self.options.discard_journal and not executor.has_trash:
            raise Refused(
                "--discard-journal: a bucket has no trash to put back from; the next prune finishes (or shows) what a killed one left"
            )

    def tidy(self, context: Context) -> None:

        if self.options.discard_journal:
            self._discard_journals(context)
        for run in context.runs:  # what an earlier prune could not remove is tried again: it was confirmed then
            notes, failed = context.executor.leftovers(home(run), remove=not context.dry_run)
            for line in notes:
                context.tell(f"note: {line}")
            context.problems += failed

    def _discard_journals(self, context: Context) -> None:
        """Drop the journals killed prunes left (a dry run only says what it would do), then scan
        again: what was put back is in the runs again."""

        changed = False
        for run in context.runs:
            root, place = run_root(run), home(run)
            for found in context.executor.journals(root, place):
                context.tell(
                    f"{run.path}: {'would drop' if context.dry_run else 'dropping'} {found.journal} ({counted(found.in_trash, 'entry', 'entries')} it had moved go back to the run)."
                )
            if context.dry_run:
                continue
            restored, left = context.executor.discard(root, place)
            changed |= bool(restored)
            if left:
                raise Stopped(*(f"{line}: left in the trash" for line in left))
        if changed:
            context.rescan()

    def plan(self, context: Context) -> list[tuple[Plan, str]]:

        if self.policy.empty:  # --discard-journal alone: what the killed prunes had moved is back, and that is all
            return []
        planned = []
        try:
            for run in context.runs:
                metric = self.policy.metric if self.policy.keep_best else None
                values = metric_values(run, run_root(run), metric, self.options.metrics_file) if metric else {}
                world = dataclasses.replace(context.world(run), metrics=values)
                judged, plan = self._planned(run, context, world)
                planned.append((plan, run.unit.value))
                self._worlds[plan.run] = (judged, world.now, frozenset(world.open_by))
                context.skipped += [_skipped_line(plan, item, run.unit.value) for item in retention.skipped(plan)]
                for note in context.executor.prune_notes(judged, plan, self.options.abort_uploads, context.dry_run):
                    context.tell(note)
        except (MetricsError, retention.PolicyError) as error:
            raise Refused(str(error)) from error
        return planned

    def _planned(self, run: Run, context: Context, world: Circumstances) -> tuple[Run, Plan]:
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

        def replan(min_age: float, around: Circumstances) -> Plan:
            return retention.plan(judged, layout, dataclasses.replace(self.policy, min_age=min_age), around)

        spared = retention.spared(plan, replan, world, self.policy.min_age, self.acts_on)
        if spared is not None:  # the fix a crash's findings print does nothing for --min-age or a live writer: say so, with what does
            for note in retention.spared_notes(
                run.path, run.unit.value, spared, self.policy.min_age, world.now, "deletes", self.at_min_age_0(run.path)
            ):
                context.tell(note)
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

    def pending(self, context: Context, plans: Sequence[Plan]) -> tuple[Pending, ...]:

        self._journals = {
            plan.run: context.executor.pending(self._worlds[plan.run][0], plan, self._worlds[plan.run][2], context.tell) for plan in plans
        }
        return tuple(found for listed in self._journals.values() for found in listed)

    def questions(self, context: Context, acting: Sequence[Plan]) -> list[Question]:
        touched = len({plan.run for plan in acting} | {run for run, found in self._journals.items() if found})
        asked = []
        if touched > self.options.max_runs:
            said = f"this prune deletes in {counted(touched, 'run')}, more than --max-runs {self.options.max_runs}"
            asked.append(Question(Ask.TOO_MANY_RUNS, f"{said[0].upper()}{said[1:]}. Go on?", self.declined, said, touched))
        return [*asked, *super().questions(context, acting)]

    def chores(self, context: Context) -> bool:
        return any(context.executor.chores(run, self.options.abort_uploads) for run, _, _ in self._worlds.values())

    def act(self, context: Context, plans: Sequence[Plan]) -> None:

        try:
            for plan in plans:
                run, since, _ = self._worlds[plan.run]
                if self._journals.get(plan.run):
                    context.heard(context.executor.finish_interrupted(run, plan))
                if plan.acting(Action.DELETE):
                    changed = context.executor.changed_since_scan(plan.root, relied_on(run))
                    if changed:  # deleting older checkpoints now could leave the run nothing to resume from
                        context.problems.append(_undeleted(plan, changed))
                    else:
                        context.heard(context.executor.delete(run, plan, since))
                context.heard(context.executor.do_chores(run, self.options.abort_uploads))
        except Exception:
            raise
        except BaseException:  # Ctrl-C: name what is left pending, and both ways forward
            for plan in plans:
                for found in context.executor.journals(plan.root, plan.home):
                    said = f"{plan.run}: {found.journal} is pending: `{self.again(plan.run)}` shows what it would still delete and finishes it when confirmed"
                    if context.executor.has_trash:
                        said += (
                            f"; `ckptdoctor prune --discard-journal --no-recurse {shell_word(plan.run)}` "
                            "drops it and puts back what it had moved, and deletes nothing"
                        )
                    context.tell(said + ".")
            raise


def _skipped_line(plan: Plan, item: PlanItem, unit: str) -> str:
    """What a prune skips because this user cannot read it, and who can delete it."""
    where = ", ".join(item.paths) or f"{unit} {item.number}"
    return f"{plan.run}: {unit} {item.number} ({where}) is one this user cannot read: skipped, not deleted; CKD215 says who can"


def _undeleted(plan: Plan, changed: str) -> str:
    return (
        f"{plan.run}: nothing was deleted: {changed}, which the plan keeps the run resumable by, changed since the plan "
        "was made; prune again to plan from the run as it is"
    )


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
