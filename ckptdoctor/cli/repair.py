"""``ckptdoctor repair``: make a run resumable from its newest complete checkpoint, moving (never
deleting) what stands in the way; ``--undo`` puts it back."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Annotated

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
    stdout_console,
)
from ckptdoctor.render import HUMAN
from ckptdoctor.units import size

if TYPE_CHECKING:
    from ckptdoctor.config import Settings
    from ckptdoctor.model import Plan, Report, Run

Undo = Annotated[bool, typer.Option("--undo", help="Put back what the latest repair of each run moved and re-pointed.")]
QuarantineId = Annotated[str | None, typer.Option("--id", help="With --undo: the quarantine to put back (default: the latest).", metavar="ID")]


def repair(
    paths: Paths = None,
    undo: Undo = False,
    ident: QuarantineId = None,
    min_age: MinAge = None,
    dry_run: DryRun = False,
    yes: Yes = False,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    output: OutputOption = None,
    quiet: QuietFlag = False,
    show_all: AllFlag = False,
    config: ConfigOption = None,
) -> None:
    """Make a run resumable from its newest complete checkpoint: move incomplete, partial and
    corrupt checkpoints newer than it, empty files and staging leftovers into a quarantine in the
    run, and re-point `latest` (DeepSpeed), the Megatron tracker and a broken `last.ckpt` at it.

    Nothing is deleted and no checkpoint's bytes change; every action names the rule it fixes.
    Files modified within --min-age or held open are left alone. `repair --undo` puts everything
    back (never over a file that exists again).

    Examples:

      ckptdoctor repair --dry-run runs/exp1/checkpoint

      ckptdoctor repair --yes runs/exp1/checkpoint

      ckptdoctor repair --undo runs/exp1/checkpoint
    """
    from ckptdoctor.retention import MIN_AGE, parse_duration

    if ident is not None and not undo:
        say("ckptdoctor: error: --id names a quarantine to put back: use it with --undo")
        raise typer.Exit(EXIT_USAGE)
    settings = configured(config)
    min_age = min_age if min_age is not None else settings.min_age
    try:
        age = parse_duration(min_age) if min_age is not None else MIN_AGE
    except ValueError as error:
        say(f"ckptdoctor: error: --min-age: {error}")
        raise typer.Exit(EXIT_USAGE) from error
    fmt = chosen(fmt, as_json)  # the command line's: a plan is no report
    from ckptdoctor.actions import anchored

    with failures_explained("repair"), contextlib.ExitStack() as held:
        held.enter_context(anchored(paths or ["."]))  # before the scan: what it finds is acted on through these
        report, runs = scan_runs(paths, "repair")
        lock_all(held, runs, dry_run, [(place, shown) for shown, _, place, _ in _undo_roots(paths, runs)] if undo else ())
        if undo:
            code = _undo(paths, report, runs, settings, ident, dry_run, yes, fmt, quiet, output, show_all)
        else:
            code = _repair(paths, report, runs, settings, age, dry_run, yes, fmt, quiet, output, show_all)
    raise typer.Exit(code)


def _repair(
    paths: list[str] | None, report: Report, runs: list[Run], settings: Settings, min_age: float, dry_run: bool, yes: bool, fmt: str, quiet: bool, output: str | None, show_all: bool
) -> int:
    from ckptdoctor import actions, repair
    from ckptdoctor.layouts import layout_named
    from ckptdoctor.model import Action
    from ckptdoctor.retention import home, run_root

    human = fmt == HUMAN
    finished = 0
    problems: list[str] = []
    for run in runs:
        root, place = run_root(run), home(run)
        for journal in actions.pending(root, place):
            say(f"note: an interrupted prune left {journal.journal}; `ckptdoctor prune` shows what it would still do")
        if dry_run:
            for found in actions.quarantines(root, place):
                if found.state == "repairing":
                    say(f"note: an interrupted repair left {found.folder}; a repair without --dry-run finishes it")
        else:
            actions.sweep(place)
            count, failed = actions.finish_repairs(root, place, frozenset(circumstances(run, time.time(), note=False).open_by))
            finished += count
            problems += failed
    if finished:
        if not quiet:
            say(f"Finished {finished} interrupted repair{'s' if finished != 1 else ''}.")
        roots = {run_root(run) for run in runs}
        report, rescanned = scan_runs(paths, "repair")
        runs = [run for run in rescanned if run_root(run) in roots]
    plans: list[tuple[Plan, str]] = []
    planned: dict[str, tuple[Run, float]] = {}
    refused: list[str] = []
    for run in runs:
        findings = [finding for finding in report.findings if finding.run == run.path]
        world = circumstances(run, time.time())
        try:
            plans.append((repair.plan(run, layout_named(run.layout), findings, world, min_age), run.unit.value))
        except repair.Refused as refusal:
            refused.append(str(refusal))
        planned[run.path] = (run, world.now)
    show_plans(plans, report, settings, dry_run=dry_run, fmt=fmt, quiet=quiet, output=output, show_all=show_all, repair=True)
    for reason in refused:
        say(f"ckptdoctor: error: {reason}")
    acting = [plan for plan, _ in plans if plan.acting(Action.QUARANTINE) or plan.acting(Action.REPOINT)]
    outcome = EXIT_FINDINGS if refused else EXIT_OK
    if dry_run or not acting:
        if human and not quiet:
            say("Dry run: nothing was moved." if dry_run else "Nothing to repair.")
        return outcome
    if not yes:
        confirm("Move and re-point them?", human, "nothing was moved")
    for plan in acting:
        run, since = planned[plan.run]
        # again now: the prompt may have waited while a trainer wrote or opened files
        moved = actions.quarantine(plan, since, frozenset(circumstances(run, time.time(), note=False).open_by))
        if not quiet:
            pointers = f", re-pointed {moved.repointed} pointer{'s' if moved.repointed != 1 else ''}" if moved.repointed else ""
            say(
                f"{plan.run}: quarantined {moved.entries} entr{'y' if moved.entries == 1 else 'ies'} ({size(moved.bytes)}) "
                f"in {moved.folder}{pointers}; `ckptdoctor repair --undo {plan.run}` puts it all back."
            )
        if moved.left:
            say(f"{plan.run}: left {moved.left} entries written, opened or replaced since the plan was made; the next repair looks again.")
        problems += moved.problems
    if human and not quiet:
        from ckptdoctor.render.human import resume_line

        console = stdout_console()
        for run in runs:  # the resume point is the one kept: the last line says where to go on
            if any(plan.run == run.path for plan in acting):
                console.print(resume_line(run))
    for line in problems:
        say(f"ckptdoctor: error: {line}")
    if problems:
        say(f"ckptdoctor: {len(problems)} entr{'y' if len(problems) == 1 else 'ies'} could not be moved (above); the rest of the plan was done.")
        return EXIT_FINDINGS
    return outcome


def _undo(
    paths: list[str] | None, report: Report, runs: list[Run], settings: Settings, ident: str | None, dry_run: bool, yes: bool, fmt: str, quiet: bool, output: str | None, show_all: bool
) -> int:
    from ckptdoctor import actions
    from ckptdoctor.model import Action
    from ckptdoctor.repair import undo_plan

    human = fmt == HUMAN
    chosen: list[tuple[str, str, str, str, actions.Quarantine]] = []
    for shown, root, place, unit in _undo_roots(paths, runs):
        if not dry_run:
            actions.sweep(place)
        every = actions.quarantines(root, place)
        picked = [q for q in every if q.ident == ident] if ident else every[-1:]
        if not picked and not ident and not quiet:
            say(f"{shown}: no quarantine: nothing to undo")
        chosen += [(shown, root, place, unit, q) for q in picked]
    if ident and not chosen:
        say(f"ckptdoctor: error: no run given holds quarantine {ident}")
        return EXIT_USAGE
    plans = [(undo_plan(found, shown, root, place), unit) for shown, root, place, unit, found in chosen]
    show_plans(plans, report, settings, dry_run=dry_run, fmt=fmt, quiet=quiet, output=output, show_all=show_all, repair=True)
    blocked = [(found, item) for *_, found in chosen for item in found.items if item.state is actions.StoredState.CONFLICT]
    for found, item in blocked:
        say(f"ckptdoctor: error: {item.path} is in the run again and in {found.folder}: move one of them aside, then undo again")
    if blocked:
        say("Nothing was restored.")
        return EXIT_FINDINGS
    pairs = [(plan, found) for (plan, _), (*_, found) in zip(plans, chosen, strict=True)]
    acting = [(plan, found) for plan, found in pairs if plan.acting(Action.RESTORE)]
    outcome = EXIT_OK
    if not dry_run:
        for plan, found in pairs:
            if not plan.acting(Action.RESTORE):  # nothing in it to put back (a repair killed early): it goes
                outcome = max(outcome, _said(actions.restore(found, plan.root)[1]))
    if dry_run or not acting:
        if human and not quiet:
            say("Dry run: nothing was restored." if dry_run else "Nothing to restore.")
        return outcome
    if not yes:
        confirm("Put them back?", human, "nothing was restored")
    for plan, found in acting:
        restored, left = actions.restore(found, plan.root)
        if not quiet:
            say(f"{plan.run}: put back {restored} entr{'y' if restored == 1 else 'ies'} from {found.folder}.")
        outcome = max(outcome, _said(left))
    return outcome


def _said(left: list[str]) -> int:
    """Each line of what an undo left, as an error; exit 1 when there is one."""
    for line in left:
        say(f"ckptdoctor: error: {line}")
    return EXIT_FINDINGS if left else EXIT_OK


def _undo_roots(paths: list[str] | None, runs: list[Run]) -> list[tuple[str, str, str, str]]:
    """(shown path, root, home, unit) of every run to undo in: the runs found, and any folder
    given that holds a quarantine but no longer scans as a run."""
    import os

    from ckptdoctor.actions import QUARANTINE, home_of
    from ckptdoctor.retention import home, run_root

    roots = [(run.path, run_root(run), home(run), run.unit.value) for run in runs]
    known = {os.path.realpath(root) for _, root, _, _ in roots}
    for path in paths or ["."]:
        if os.path.realpath(path) in known:
            continue
        for beside in (False, True):
            if os.path.isdir(os.path.join(home_of(path, beside), QUARANTINE)):
                roots.append((path, path, home_of(path, beside), "index"))
    return roots
