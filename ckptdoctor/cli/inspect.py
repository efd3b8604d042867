"""``ckptdoctor inspect``: which checkpoints a run has, which are whole, and which to resume from."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from ckptdoctor.cli._errors import say
from ckptdoctor.cli._output import (
    EXIT_FINDINGS,
    EXIT_USAGE,
    Paths,
    ReportOptions,
    emit,
    reporting,
)
from ckptdoctor.render import JSON

if TYPE_CHECKING:
    from ckptdoctor.api import Scanned

ResumeFlag = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Print only the index to resume from (exit 1 when there is none), for job scripts; with --json, one JSON object: "
        '{"run", "unit", "index", "resume_path"}.',
    ),
]
ResumePathFlag = Annotated[
    bool,
    typer.Option(
        "--resume-path",
        help="Print only the path to pass to the framework's resume (a checkpoint's folder, or its model file); with --json, "
        "the object --resume --json prints.",
    ),
]


@reporting
def inspect(paths: Paths = None, resume: ResumeFlag = False, resume_path: ResumePathFlag = False, *, options: ReportOptions) -> None:
    """Name the checkpoint to resume from, and what is missing.

    Finds runs, groups their files into checkpoints, and names the newest complete one. Reads
    only the first and last few KiB of each file (and a format's declared header).

    Examples:

    \b
      ckptdoctor inspect runs/exp1
      ckptdoctor inspect --json lightning_logs/ > report.json
      python train.py --resume-epoch "$(ckptdoctor inspect --resume runs/exp1/checkpoint)"
      python train.py --resume_from_checkpoint "$(ckptdoctor inspect --resume-path out)"
    """
    # the core loads only when a command runs
    from ckptdoctor import api
    from ckptdoctor.cli._progress import ScanStatus

    if resume and resume_path:
        say("ckptdoctor: error: --resume and --resume-path print one thing each: pass one of them")
        raise typer.Exit(EXIT_USAGE)
    with ScanStatus(options.quiet) as status:
        asked = api.InspectOptions(
            tuple(paths or ["."]), settings=options.settings, select=options.select, ignore=options.ignore, tally=status.tally
        )
        scanned = api.run_inspect(asked)
    if resume or resume_path:
        print_resume(scanned, "--resume-path" if resume_path else "--resume", paths or ["."], as_json=options.format == JSON)
    emit(scanned.report, options, scanned.empty)


def print_resume(scanned: Scanned, flag: str, given: list[str], unverified: str = "", *, as_json: bool = False) -> None:
    """The resume point's index (``--resume``) or the path its framework resumes from
    (``--resume-path``), alone on stdout, or (``as_json``) both in one JSON object with the run
    and its unit; exit 1 when there is none (``unverified`` says why, for ``verify``). Of several
    runs, the one whose folder was ``given``: runs in folders below it are not where the job resumes."""
    # the core loads only when a command runs
    from ckptdoctor.api import printable, run_root, shell_word

    report = scanned.report
    for error in report.errors:
        say(f"ckptdoctor: error: {error.path}: {error.message}")
    if report.errors:
        raise typer.Exit(EXIT_USAGE)
    runs = report.runs
    if len(runs) > 1:  # the run in the folder named, not those in folders below it (a copied best/)
        runs = tuple(run for run in runs if os.path.realpath(run_root(run)) in {os.path.realpath(path) for path in given})
    if len(runs) != 1 and report.runs:
        paths = ", ".join(run.path for run in report.runs)
        say(f"ckptdoctor: error: {flag} needs one run; found {len(report.runs)}: {paths}")
        raise typer.Exit(EXIT_USAGE)
    run = runs[0] if runs else None
    if run is not None and run.lone_file:  # one file says nothing of the checkpoint it is part of
        say(
            f"ckptdoctor: error: {flag} needs a run's folder: {run.lone_file} is one file of a run; "
            f"ask of its run: ckptdoctor {report.command} {flag} {shell_word(run_root(run))}"
        )
        raise typer.Exit(EXIT_USAGE)
    checkpoint = run.resume if run else None
    if run is not None and (led := scanned.led_outside(run)):
        say(f"ckptdoctor: warning: {led} (CKD113): pass the checkpoint named here explicitly, or `ckptdoctor repair` re-points it")
    if run is not None and run.resume_depends_on:
        newest = run.resume_depends_on[-1]
        fallback = f"{run.unit.value} {checkpoint.index}" if checkpoint is not None else "none this user can read"
        say(
            f"The resume point of {run.path} depends on {run.unit.value} {newest.index}, which this user cannot read (CKD215): "
            f"{run.unit.value} {newest.index} if it is whole, else {fallback}; `ckptdoctor {report.command} {shell_word(run_root(run))}` says who can read it"
        )
        raise typer.Exit(EXIT_FINDINGS)
    if run is None or checkpoint is None:
        where = run.path if run else ", ".join(scanned.empty)
        say(f"No checkpoint to resume from in {where}{unverified}")
        raise typer.Exit(EXIT_FINDINGS)
    if as_json:  # control characters escaped by JSON itself
        answer = {"run": run.path, "unit": run.unit.value, "index": checkpoint.index, "resume_path": run.resume_path}
        typer.echo(json.dumps(answer))
        raise typer.Exit(0)
    shown = str(run.resume_path if flag == "--resume-path" else checkpoint.index)
    typer.echo(printable(shown) if sys.stdout.isatty() else shown)  # raw for $(...), never obeyed on a terminal
    raise typer.Exit(0)
