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
    EXIT_OK,
    EXIT_USAGE,
    AllFlag,
    FormatOption,
    JsonFlag,
    OutputFormat,
    OutputOption,
    Paths,
    QuietFlag,
    chosen,
    configured,
    say,
)
from ckptdoctor.model import Action
from ckptdoctor.units import size

if TYPE_CHECKING:

    from ckptdoctor.model import Run
    from ckptdoctor.retention import Policy

KeepLast = Annotated[int | None, typer.Option("--keep-last", min=0, help="Keep the N newest complete checkpoints.", metavar="N")]
KeepBest = Annotated[int | None, typer.Option("--keep-best", min=0, help="Keep the N best by --metric.", metavar="N")]
Metric = Annotated[str | None, typer.Option("--metric", help="Metric for --keep-best (burn valid/ logs, HF log_history, Lightning file names).")]
Mode = Annotated[str | None, typer.Option("--mode", help="min (loss) or max (accuracy).", metavar="min|max")]
KeepEvery = Annotated[int | None, typer.Option("--keep-every", min=1, help="Keep checkpoints whose index is divisible by K.", metavar="K")]
KeepWithin = Annotated[str | None, typer.Option("--keep-within", help="Keep everything saved within DURATION of the newest (7d, 36h).", metavar="DURATION")]
Keep = Annotated[list[int] | None, typer.Option("--keep", help="Pin a checkpoint by index (repeatable).", metavar="INDEX")]
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
    from ckptdoctor.config import ConfigError, prune_settings
    from ckptdoctor.layouts import layout_named
    from ckptdoctor.metrics import MetricsError, metric_values

    given = {
        "keep-last": keep_last, "keep-best": keep_best, "metric": metric, "mode": mode, "keep-every": keep_every,
        "keep-within": keep_within, "keep": keep, "min-age": min_age, "metrics-file": metrics_file,
    }  # fmt: skip
    try:
        table, _ = prune_settings()
        policy, metrics_path = _policy({**table, **{k: v for k, v in given.items() if v is not None}})
        policy.check()
    except (ConfigError, retention.PolicyError, ValueError) as error:
        say(f"ckptdoctor: error: {error}")
        raise typer.Exit(EXIT_USAGE) from error
    settings = configured(None)  # the format is the command line's: a plan is no report
    fmt = chosen(fmt, as_json)
    report, runs = scan_runs(paths, "prune")
    human = fmt is OutputFormat.HUMAN
    roots = {os.path.realpath(retention.run_root(run)) for run in runs}
    with failures_explained("prune"), contextlib.ExitStack() as held:
        lock_all(held, runs, dry_run)
        # under the locks: finish what a killed prune left (a dry run only says so), then look
        # again. A scan from before the locks is otherwise safe to plan from: no other
        # ckptdoctor acts meanwhile, a trainer's new files are not in the plan, files gone since
        # are skipped, and what may still be written is kept by --min-age
        finished = 0
        for run in runs:
            root = retention.run_root(run)
            if dry_run:
                for journal in actions.pending(retention.home(run)):
                    say(f"note: an interrupted prune left {journal}; a prune without --dry-run finishes it")
            else:
                finished += actions.finish_interrupted(root, retention.home(run), frozenset(circumstances(run, time.time(), True).open_by))
        if finished:
            if not quiet:
                say(f"Finished an interrupted prune: {finished} entries it had planned to delete.")
            report, runs = scan_runs(paths, "prune")
            runs = [run for run in runs if os.path.realpath(retention.run_root(run)) in roots]
        plans = []
        planned: dict[str, tuple[Run, float]] = {}
        try:
            for run in runs:
                root = retention.run_root(run)
                values = metric_values(run, root, policy.metric, metrics_path) if policy.keep_best and policy.metric else {}
                world = dataclasses.replace(circumstances(run, time.time(), quiet), metrics=values)
                plans.append(retention.plan(run, layout_named(run.layout), policy, world))
                planned[run.path] = (run, world.now)
        except (MetricsError, retention.PolicyError) as error:
            say(f"ckptdoctor: error: {error}")
            raise typer.Exit(EXIT_USAGE) from error
        doomed = [plan for plan in plans if plan.acting(Action.DELETE)]
        show_plans([(plan, run.unit.value) for plan, run in zip(plans, runs, strict=True)], report, settings, dry_run=dry_run, fmt=fmt, quiet=quiet, output=output, show_all=show_all)
        if dry_run or not doomed:
            if human and not quiet:
                say("Dry run: no files were deleted." if dry_run else "Nothing to delete.")
            raise typer.Exit(EXIT_OK)
        if not yes:
            confirm("Delete them?", human, "nothing was deleted")
        for plan in doomed:
            run, since = planned[plan.run]
            # again now: the prompt may have waited while a trainer wrote or opened files
            done = actions.delete(plan, since, frozenset(circumstances(run, time.time(), True).open_by))
            if not quiet:
                say(f"{plan.run}: deleted {done.deleted} checkpoints ({done.files} files); freed {size(done.freed_bytes)}.")
            if done.left:
                say(f"{plan.run}: left {done.left} entries written or opened since the plan was made; the next prune looks again.")
    raise typer.Exit(EXIT_OK)


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
