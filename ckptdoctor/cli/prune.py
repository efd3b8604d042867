"""``ckptdoctor prune``: keep what a retention policy keeps, delete the rest, safely and explainably."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ckptdoctor.cli._output import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    AllFlag,
    FormatOption,
    JsonFlag,
    OutputFormat,
    OutputOption,
    Paths,
    QuietFlag,
    say,
    stdout_console,
    write,
)
from ckptdoctor.units import size

if TYPE_CHECKING:
    from rich.console import Console

    from ckptdoctor.model import Plan, Report, Run
    from ckptdoctor.retention import Policy

EXIT_LOCKED = 3
"""Another ckptdoctor is acting on the run (cli-conventions §2)."""

KeepLast = Annotated[int | None, typer.Option("--keep-last", min=0, help="Keep the N newest complete checkpoints.", metavar="N")]
KeepBest = Annotated[int | None, typer.Option("--keep-best", min=0, help="Keep the N best by --metric.", metavar="N")]
Metric = Annotated[str | None, typer.Option("--metric", help="Metric for --keep-best (burn valid/ logs, HF log_history, Lightning file names).")]
Mode = Annotated[str | None, typer.Option("--mode", help="min (loss) or max (accuracy).", metavar="min|max")]
KeepEvery = Annotated[int | None, typer.Option("--keep-every", min=1, help="Keep checkpoints whose index is divisible by K.", metavar="K")]
KeepWithin = Annotated[str | None, typer.Option("--keep-within", help="Keep everything saved within DURATION of the newest (7d, 36h).", metavar="DURATION")]
Keep = Annotated[list[int] | None, typer.Option("--keep", help="Pin a checkpoint by index (repeatable).", metavar="INDEX")]
MetricsFile = Annotated[str | None, typer.Option("--metrics-file", help="CSV or JSON of index -> metric value.", metavar="FILE")]
MinAge = Annotated[str | None, typer.Option("--min-age", help="Never delete files modified more recently (default 10min).", metavar="DURATION")]
DryRun = Annotated[bool, typer.Option("--dry-run", "-n", help="Print the plan and change nothing.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (required off a terminal).")]


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
    fmt: FormatOption = OutputFormat.HUMAN,
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
    from ckptdoctor.processes import open_by
    from ckptdoctor.scan import inspect as inspect_paths

    given = {
        "keep-last": keep_last, "keep-best": keep_best, "metric": metric, "mode": mode, "keep-every": keep_every,
        "keep-within": keep_within, "keep": keep, "min-age": min_age, "metrics-file": metrics_file,
    }  # fmt: skip
    try:
        settings, _ = prune_settings()
        policy, metrics_path = _policy({**settings, **{k: v for k, v in given.items() if v is not None}})
        policy.check()
    except (ConfigError, retention.PolicyError, ValueError) as error:
        say(f"ckptdoctor: error: {error}")
        raise typer.Exit(EXIT_USAGE) from error
    report, found = inspect_paths(paths or ["."])
    for failure in report.errors:
        say(f"ckptdoctor: error: {failure.path}: {failure.message}")
    if report.errors:
        raise typer.Exit(EXIT_USAGE)
    for path in found.empty:
        say(f"No checkpoints found in {path}")
    runs = [run for run in report.runs if run.checkpoints and not run.single_file]
    human = not (as_json or fmt is OutputFormat.JSON)
    console = stdout_console()
    runs = _distinct(runs)  # one run named twice (./run and $PWD/run) is one run, and one lock
    roots = {os.path.realpath(retention.run_root(run)) for run in runs}
    try:
        with contextlib.ExitStack() as held:
            # every run's lock, taken before planning and held to the end (in one order: no deadlocks)
            for root, shown in sorted({(retention.run_root(run), run.path) for run in runs}):
                held.enter_context(actions.locked(root, shown))
            # under the locks: finish what a killed prune left (a dry run only says so), then look
            # again. A scan from before the locks is otherwise safe to plan from: no other
            # ckptdoctor acts meanwhile, a trainer's new files are not in the plan, files gone since
            # are skipped, and what may still be written is kept by --min-age
            finished = 0
            for run in runs:
                root = retention.run_root(run)
                if dry_run:
                    for journal in actions.pending(root):
                        say(f"note: an interrupted prune left {journal}; a prune without --dry-run finishes it")
                else:
                    finished += actions.finish_interrupted(root, frozenset(open_by(_paths(run, _inside(run)))[0]))
            if finished:
                if not quiet:
                    say(f"Finished an interrupted prune: {finished} entries it had planned to delete.")
                report, found = inspect_paths(paths or ["."])
            report = dataclasses.replace(report, command="prune")
            runs = _distinct([run for run in report.runs if run.checkpoints and not run.single_file])
            runs = [run for run in runs if os.path.realpath(retention.run_root(run)) in roots]
            plans = []
            for run in runs:
                root = retention.run_root(run)
                values = metric_values(run, root, policy.metric, metrics_path) if policy.keep_best and policy.metric else {}
                inside = _inside(run)
                busy, note = open_by(_paths(run, inside))
                if note and not quiet:
                    say(f"note: {note}")
                circumstances = retention.Circumstances(time.time(), values, busy, inside)
                plans.append(retention.plan(run, layout_named(run.layout), policy, circumstances))
            doomed = [plan for plan in plans if any(item.action.value == "delete" for item in plan.items)]
            _show(plans, runs, report, dry_run, human, quiet, output, show_all, console)
            if dry_run or not doomed:
                if human and not quiet:
                    say("Dry run: no files were deleted." if dry_run else "Nothing to delete.")
                raise typer.Exit(EXIT_OK)
            if not yes:
                _confirm(human)
            for plan in doomed:
                done = actions.delete(plan, plan.root)
                if not quiet:
                    say(f"{plan.run}: deleted {done.deleted} checkpoints ({done.files} files); freed {size(done.freed_bytes)}.")
    except actions.Locked as locked:
        say(f"ckptdoctor: error: {locked}")
        raise typer.Exit(EXIT_LOCKED) from locked
    except (actions.ActionError, MetricsError, retention.PolicyError) as error:
        say(f"ckptdoctor: error: {error}")
        raise typer.Exit(EXIT_FINDINGS if isinstance(error, actions.ActionError) else EXIT_USAGE) from error
    except PermissionError as error:
        say(f"ckptdoctor: error: {error.filename}: permission denied; nothing that was to be kept was touched, and the next prune finishes the job")
        raise typer.Exit(EXIT_FINDINGS) from error
    raise typer.Exit(EXIT_OK)


def _distinct(runs: list[Run]) -> list[Run]:
    """Runs with distinct real folders, in order."""
    from ckptdoctor.retention import run_root

    seen: set[str] = set()
    distinct = []
    for run in runs:
        real = os.path.realpath(run_root(run))
        if real not in seen:
            seen.add(real)
            distinct.append(run)
    return distinct


def _inside(run: Run) -> dict[int, tuple[tuple[str, float, int], ...]]:
    """Every file inside each checkpoint folder (deleting the folder deletes them all)."""
    inside: dict[int, tuple[tuple[str, float, int], ...]] = {}
    for checkpoint in run.checkpoints:
        if checkpoint.folder is None or checkpoint.folder.is_symlink:
            continue
        found = []
        for folder, _, names in os.walk(checkpoint.folder.os_path):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                found.append((path, info.st_mtime, info.st_size))
        inside[checkpoint.index] = tuple(found)
    return inside


def _paths(run: Run, inside: dict[int, tuple[tuple[str, float, int], ...]]) -> list[str]:
    files = [f.entry.os_path for c in run.checkpoints for f in c.files]
    return files + [path for contents in inside.values() for path, _, _ in contents]


def _policy(settings: dict[str, Any]) -> tuple[Policy, str | None]:
    from ckptdoctor.retention import MIN_AGE, Policy, parse_duration

    def integer(key: str) -> int:
        value = settings.get(key) or 0
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{key} must be a whole number, not {value!r}")
        return value

    keep = settings.get("keep") or []
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


def _show(
    plans: list[Plan], runs: list[Run], report: Report, dry_run: bool, human: bool, quiet: bool, output: str | None, show_all: bool, console: Console
) -> None:
    if not human:
        from ckptdoctor.render.json import plan_document

        write(plan_document(report, tuple(plans), dry_run), output)
        return
    if quiet:
        return
    from ckptdoctor.render.human import plan_block

    for plan, run in zip(plans, runs, strict=True):
        console.print(plan_block(plan, run.unit.value, show_all))


def _confirm(human: bool) -> None:
    if human and sys.stdin.isatty() and sys.stdout.isatty():
        if typer.confirm("Delete them?", default=False):
            return
        say("Nothing was deleted.")
        raise typer.Exit(EXIT_OK)
    say("ckptdoctor: error: not on a terminal: pass --yes to delete (or --dry-run to only see the plan); nothing was deleted")
    raise typer.Exit(EXIT_USAGE)

