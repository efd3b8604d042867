"""``ckptdoctor prune``: keep what a retention policy keeps, delete the rest, safely and explainably."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ckptdoctor.cli._acting import (
    DryRun,
    MinAge,
    Yes,
    circumstances,
    confirm,
    failures_explained,
    lock_all,
    scan_runs,
    show_plans,
)
from ckptdoctor.cli._output import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    AllFlag,
    ConfigOption,
    FormatOption,
    JsonFlag,
    OutputOption,
    Paths,
    QuietFlag,
    chosen,
    configured,
    say,
)
from ckptdoctor.model import Action
from ckptdoctor.render import HUMAN
from ckptdoctor.units import size

if TYPE_CHECKING:
    from ckptdoctor.actions import Done
    from ckptdoctor.model import Plan, Run
    from ckptdoctor.retention import Policy

KeepLast = Annotated[int | None, typer.Option("--keep-last", min=0, help="Keep the N newest complete checkpoints.", metavar="N")]
KeepBest = Annotated[int | None, typer.Option("--keep-best", min=0, help="Keep the N best by --metric.", metavar="N")]
Metric = Annotated[str | None, typer.Option("--metric", help="Metric for --keep-best (burn valid/ logs, HF log_history, Lightning file names).")]
Mode = Annotated[str | None, typer.Option("--mode", help="min (loss) or max (accuracy).", metavar="min|max")]
KeepEvery = Annotated[int | None, typer.Option("--keep-every", min=1, help="Keep checkpoints whose index is divisible by K.", metavar="K")]
KeepWithin = Annotated[str | None, typer.Option("--keep-within", help="Keep everything saved within DURATION of the newest (7d, 36h).", metavar="DURATION")]
Keep = Annotated[list[int] | None, typer.Option("--keep", help="Pin a checkpoint by index (repeatable).", metavar="INDEX")]
VerifyKept = Annotated[
    bool | None,
    typer.Option(
        "--verify/--no-verify",
        help="Read the checkpoints that would be the newest kept whole first; keep older ones in place of any that fail (config: verify).",
    ),
]
MaxRuns = Annotated[
    int | None, typer.Option("--max-runs", min=1, help="Refuse to delete in more than N runs at once (default 50; config: max-runs).", metavar="N")
]
DiscardJournal = Annotated[
    bool, typer.Option("--discard-journal", help="Drop what an interrupted prune left pending, putting back what it had moved, instead of finishing it.")
]
MetricsFile = Annotated[str | None, typer.Option("--metrics-file", help="CSV or JSON of index -> metric value.", metavar="FILE")]


def prune(
    paths: Paths = None,
    keep_last: KeepLast = None,
    keep_best: KeepBest = None,
    metric: Metric = None,
    mode: Mode = None,
    keep_every: KeepEvery = None,
    keep_within: KeepWithin = None,
    keep: Keep = None,
    metrics_file: MetricsFile = None,
    min_age: MinAge = None,
    dry_run: DryRun = False,
    yes: Yes = False,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    output: OutputOption = None,
    quiet: QuietFlag = False,
    show_all: AllFlag = False,
    discard_journal: DiscardJournal = False,
    verify_kept: VerifyKept = None,
    max_runs: MaxRuns = None,
    config: ConfigOption = None,
) -> None:
    """Delete checkpoints a retention policy does not keep; never the resume point, the framework's
    best or pointed-to checkpoint, an incomplete checkpoint newer than the resume point, files
    modified within --min-age, files a live process holds open, or anything outside the run.

    A checkpoint is kept if any rule keeps it; the plan shows the reasons. Deletion is journalled:
    a prune killed at any moment loses nothing that was to be kept, and the next one finishes it.
    The policy may also come from [tool.ckptdoctor.prune] in pyproject.toml or ckptdoctor.toml.

    Examples:

      ckptdoctor prune --keep-last 3 --dry-run runs/exp1/checkpoint

      ckptdoctor prune --keep-last 2 --keep-best 1 --metric Loss --yes runs/exp1/checkpoint

      0 3 * * * ckptdoctor prune -q --yes --keep-last 5 /data/runs
    """
    from ckptdoctor import actions, retention
    from ckptdoctor.cli import Interrupted
    from ckptdoctor.config import ConfigError, prune_settings
    from ckptdoctor.layouts import layout_named
    from ckptdoctor.metrics import MetricsError, metric_values

    given = {
        "keep-last": keep_last, "keep-best": keep_best, "metric": metric, "mode": mode, "keep-every": keep_every,
        "keep-within": keep_within, "keep": keep, "min-age": min_age, "metrics-file": metrics_file,
        "verify": verify_kept, "max-runs": max_runs,
    }  # fmt: skip
    try:
        table, _ = prune_settings(config)
        merged = {**table, **{k: v for k, v in given.items() if v is not None}}
        policy, metrics_path = _policy(merged)
        policy.check()
        verifying, scope = _flag(merged, "verify", False), _count(merged, "max-runs", MAX_RUNS)
    except (ConfigError, retention.PolicyError, ValueError) as error:
        say(f"ckptdoctor: error: {error}")
        raise typer.Exit(EXIT_USAGE) from error
    settings = configured(config)  # the format is the command line's: a plan is no report
    fmt = chosen(fmt, as_json)
    human = fmt == HUMAN
    with failures_explained("prune"), contextlib.ExitStack() as held:
        held.enter_context(actions.anchored(paths or ["."]))  # before the scan: what it finds is acted on through these
        report, runs = scan_runs(paths, "prune")
        lock_all(held, runs, dry_run)
        # under the locks: a scan from before them is safe to plan from. No other ckptdoctor
        # acts meanwhile, a trainer's new files are not in the plan, files gone since are
        # skipped, what may still be written is kept by --min-age, and every entry is acted on
        # only while it is the inode the plan saw
        if discard_journal:
            runs = _discard_journals(runs, paths, dry_run, quiet)
        problems: list[str] = []
        for run in runs:  # what an earlier prune could not remove is tried again: it was confirmed then
            notes, failed = actions.leftovers(retention.home(run), remove=not dry_run)
            for line in notes:
                say(f"note: {line}")
            problems += failed
        plans = []
        planned: dict[str, tuple[Run, float, frozenset[str]]] = {}
        try:
            for run in runs:
                root = retention.run_root(run)
                values = metric_values(run, root, policy.metric, metrics_path) if policy.keep_best and policy.metric else {}
                world = dataclasses.replace(circumstances(run, time.time()), metrics=values)
                if verifying:
                    run = _verified(run, policy, quiet)
                plans.append(retention.plan(run, layout_named(run.layout), policy, world))
                planned[run.path] = (run, world.now, frozenset(world.open_by))
        except (MetricsError, retention.PolicyError) as error:
            say(f"ckptdoctor: error: {error}")
            raise typer.Exit(EXIT_USAGE) from error
        journals = {plan.run: actions.pending(plan.root, plan.home, planned[plan.run][2], kept_paths(plan)) for plan in plans}
        doomed = [plan for plan in plans if plan.acting(Action.DELETE)]
        show_plans(
            [(plan, run.unit.value) for plan, run in zip(plans, runs, strict=True)], report, settings, dry_run=dry_run, fmt=fmt,
            quiet=quiet, output=output, show_all=show_all, pending=[found for listed in journals.values() for found in listed],
        )  # fmt: skip
        if dry_run or not (doomed or any(journals.values())):
            if human and not quiet:
                say("Dry run: no files were deleted." if dry_run else "Nothing to delete.")
            _fail_with(problems)
            raise typer.Exit(EXIT_OK)
        touched = sum(1 for plan in plans if plan in doomed or journals[plan.run])
        if touched > scope:
            _too_many(touched, scope, yes, human)
        if not yes:
            confirm("Delete them?", human, "nothing was deleted")
        try:
            for plan in plans:
                run, since, _ = planned[plan.run]
                if journals[plan.run]:
                    busy = frozenset(circumstances(run, time.time(), note=False).open_by)
                    finished = actions.finish_interrupted(plan.root, plan.home, busy, kept_paths(plan))
                    problems += finished.problems
                    if not quiet:
                        say(f"{plan.run}: finished an interrupted prune: {finished.entries} entries it had planned to delete.")
                if plan in doomed:
                    # again now: the prompt may have waited while a trainer wrote or opened files
                    done = actions.delete(plan, since, frozenset(circumstances(run, time.time(), note=False).open_by))
                    problems += done.problems
                    _report_done(plan, done, quiet)
        except Interrupted:
            _interrupted(plans)
            raise
    _fail_with(problems)
    raise typer.Exit(EXIT_OK)


def _fail_with(problems: list[str]) -> None:
    """Exit 1 naming each entry that could not be deleted, once the rest of the work is done."""
    if not problems:
        return
    for line in problems:
        say(f"ckptdoctor: error: {line}")
    say(
        f"ckptdoctor: {len(problems)} entr{'y' if len(problems) == 1 else 'ies'} could not be deleted (above); the rest of the plan "
        "was done, and the next prune tries them again if its policy still deletes them."
    )
    raise typer.Exit(EXIT_FINDINGS)


MAX_RUNS = 50
"""Runs one prune deletes in without --max-runs: a path one level too high is a typo, not a plan."""


def _flag(settings: dict[str, Any], key: str, default: bool) -> bool:
    value = settings.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false, not {value!r}")
    return value


def _count(settings: dict[str, Any], key: str, default: int) -> int:
    value = settings.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{key} must be a whole number of at least 1, not {value!r}")
    return value


def _too_many(touched: int, scope: int, yes: bool, human: bool) -> None:
    """A prune deleting in more runs than --max-runs asks on a terminal, and is refused otherwise."""
    import sys

    said = f"this prune deletes in {touched} runs, more than --max-runs {scope}"
    if human and not yes and sys.stdin.isatty() and sys.stdout.isatty():
        if typer.confirm(f"{said[0].upper()}{said[1:]}. Go on?", default=False):
            return
        say("Nothing was deleted.")
        raise typer.Exit(EXIT_OK)
    say(f"ckptdoctor: error: {said}; nothing was deleted: check the path, or pass --max-runs {touched} to go ahead")
    raise typer.Exit(EXIT_USAGE)


def _verified(run: Run, policy: Policy, quiet: bool) -> Run:
    """--verify: the run judged with its newest kept checkpoints read whole (see ``verify_newest``)."""
    from ckptdoctor.verify import verify_newest

    judged, failed = verify_newest(run, max(policy.keep_last, 1))
    for index in failed:
        say(f"{run.path}: {run.unit.value} {index} does not pass verify (read whole): it is not kept as a newest checkpoint; `ckptdoctor verify` says why.")
    return judged


def kept_paths(plan: Plan) -> frozenset[str]:
    """What ``plan`` keeps, relative to its run (a killed prune's journal spares it)."""
    return frozenset(os.path.relpath(entry.os_path, plan.root) for item in plan.items if item.action is not Action.DELETE for entry in item.entries)


def _report_done(plan: Plan, done: Done, quiet: bool) -> None:
    if done.journal_free:
        say(
            f"{plan.run}: the disk is too full for a journal: deleted in place, one checkpoint after the other, oldest first "
            "(a kill leaves at worst one old checkpoint incomplete, which the next prune deletes)."
        )
    if not quiet:
        say(f"{plan.run}: deleted {done.deleted} checkpoints ({done.files} files); freed {size(done.freed_bytes)}.")
    if done.left:
        say(f"{plan.run}: left {done.left} entries written, opened or replaced since the plan was made; the next prune looks again.")


def _interrupted(plans: list[Plan]) -> None:
    """Name what a prune stopped by Ctrl-C leaves, and both ways forward."""
    from ckptdoctor import actions

    for plan in plans:
        for found in actions.pending(plan.root, plan.home):
            say(
                f"{plan.run}: {found.journal} is pending: the next `ckptdoctor prune` shows what it would still delete and "
                "finishes it when confirmed; `ckptdoctor prune --discard-journal` drops it and puts back what it had moved."
            )


def _discard_journals(runs: list[Run], paths: list[str] | None, dry_run: bool, quiet: bool) -> list[Run]:
    """--discard-journal: drop the journals killed prunes left (a dry run only says what it would
    do), then scan again: what was put back is in the runs again."""
    from ckptdoctor import actions, retention

    changed = False
    for run in runs:
        root, place = retention.run_root(run), retention.home(run)
        for found in actions.pending(root, place):
            say(f"{run.path}: {'would drop' if dry_run else 'dropping'} {found.journal} ({found.in_trash} entries it had moved go back to the run).")
        if dry_run:
            continue
        restored, left = actions.discard(root, place)
        changed |= bool(restored)
        for line in left:
            say(f"ckptdoctor: error: {line}: left in the trash")
        if left:
            raise typer.Exit(EXIT_FINDINGS)
    if not changed:
        return runs
    roots = {os.path.realpath(retention.run_root(run)) for run in runs}
    _, rescanned = scan_runs(paths, "prune")
    return [run for run in rescanned if os.path.realpath(retention.run_root(run)) in roots]


def _policy(settings: dict[str, Any]) -> tuple[Policy, str | None]:
    from ckptdoctor.retention import MIN_AGE, Policy, parse_duration

    def integer(key: str) -> int:
        value = settings.get(key) or 0
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{key} must be a whole number, not {value!r}")
        return value

    keep = settings.get("keep") or []
    if settings.get("metrics-file") is not None and not isinstance(settings.get("metrics-file"), str):
        raise ValueError("metrics-file must be a path")
    if not isinstance(keep, list) or not all(isinstance(i, int) for i in keep):
        raise ValueError("keep must be a list of checkpoint indices")
    within = settings.get("keep-within")
    age = settings.get("min-age")
    policy = Policy(
        keep_last=integer("keep-last"),
        keep_best=integer("keep-best"),
        metric=settings.get("metric"),
        mode=str(settings.get("mode") or "min"),
        keep_every=integer("keep-every"),
        keep_within=parse_duration(str(within)) if within else 0.0,
        keep=frozenset(keep),
        min_age=parse_duration(str(age)) if age is not None else MIN_AGE,
    )
    return policy, settings.get("metrics-file")
