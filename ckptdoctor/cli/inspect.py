"""``ckptdoctor inspect``: which checkpoints a run has, which are whole, and which to resume from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ckptdoctor.cli._output import (
    EXIT_FINDINGS,
    EXIT_USAGE,
    Paths,
    ReportOptions,
    emit,
    reporting,
    say,
)
from ckptdoctor.model import Report

if TYPE_CHECKING:
    from ckptdoctor.pipelines.scan import Scan

ResumeFlag = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Print only the index to resume from (exit 1 when there is none), for job scripts.",
    ),
]


@reporting
def inspect(paths: Paths = None, resume: ResumeFlag = False, *, options: ReportOptions) -> None:
    """Find runs, group their files into checkpoints, and name the checkpoint to resume from.

    Reads only the first and last few KiB of each file (and a format's declared header).

    Examples:

      ckptdoctor inspect runs/exp1

      ckptdoctor inspect --json lightning_logs/ > report.json

      --resume-epoch $(ckptdoctor inspect --resume runs/exp1/checkpoint)
    """
    from ckptdoctor.pipelines.scan import (
        inspect as inspect_paths,  # the core loads only when a command runs
    )

    report, found = inspect_paths(paths or ["."], options.settings.thresholds)
    if resume:
        _print_resume(report, found)
    emit(report, options, found.empty)


def _print_resume(report: Report, found: Scan) -> None:
    for error in report.errors:
        say(f"ckptdoctor: error: {error.path}: {error.message}")
    if report.errors:
        raise typer.Exit(EXIT_USAGE)
    if len(report.runs) > 1:
        paths = ", ".join(run.path for run in report.runs)
        say(f"ckptdoctor: error: --resume needs one run; found {len(report.runs)}: {paths}")
        raise typer.Exit(EXIT_USAGE)
    run = report.runs[0] if report.runs else None
    checkpoint = run.resume if run else None
    if run is None or checkpoint is None:
        where = run.path if run else ", ".join(found.empty)
        say(f"No checkpoint to resume from in {where}")
        raise typer.Exit(EXIT_FINDINGS)
    typer.echo(checkpoint.index)
    raise typer.Exit(0)
