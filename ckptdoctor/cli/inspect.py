"""``ckptdoctor inspect``: which checkpoints a run has, which are whole, and which to resume from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ckptdoctor.cli._output import (
    EXIT_FINDINGS,
    EXIT_USAGE,
    AllFlag,
    BaselineOption,
    ConfigOption,
    ExitZeroFlag,
    FailOnOption,
    FormatOption,
    IgnoreOption,
    JsonFlag,
    OutputOption,
    Paths,
    QuietFlag,
    SelectOption,
    WriteBaselineOption,
    configured,
    emit,
    say,
)
from ckptdoctor.model import Report

if TYPE_CHECKING:
    from ckptdoctor.scan import Scan

ResumeFlag = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Print only the index to resume from (exit 1 when there is none), for job scripts.",
    ),
]


def inspect(
    paths: Paths = None,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    output: OutputOption = None,
    fail_on: FailOnOption = None,
    exit_zero: ExitZeroFlag = False,
    quiet: QuietFlag = False,
    show_all: AllFlag = False,
    baseline: BaselineOption = None,
    write_baseline: WriteBaselineOption = None,
    config: ConfigOption = None,
    select: SelectOption = None,
    ignore: IgnoreOption = None,
    resume: ResumeFlag = False,
) -> None:
    """Find runs, group their files into checkpoints, and name the checkpoint to resume from.

    Reads only the first and last few KiB of each file (and a format's declared header).

    Examples:

      ckptdoctor inspect runs/exp1

      ckptdoctor inspect --json lightning_logs/ > report.json

      --resume-epoch $(ckptdoctor inspect --resume runs/exp1/checkpoint)
    """
    from ckptdoctor.scan import inspect as inspect_paths  # the core loads only when a command runs

    settings = configured(config)
    report, found = inspect_paths(paths or ["."], settings.thresholds)
    if resume:
        _print_resume(report, found)
    emit(
        report,
        fmt=fmt,
        as_json=as_json,
        output=output,
        fail_on=fail_on,
        exit_zero=exit_zero,
        quiet=quiet,
        show_all=show_all,
        baseline=baseline,
        write_baseline=write_baseline,
        settings=settings,
        select=select,
        ignore=ignore,
        empty=found.empty,
    )


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
