"""Options every command shares, and the one place that turns a report into output and an exit code."""

from __future__ import annotations

import dataclasses
import enum
import io
import os
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from ckptdoctor.model import Report, Severity

if TYPE_CHECKING:
    from rich.console import Console

    from ckptdoctor.config import Settings


class OutputFormat(str, enum.Enum):
    HUMAN = "human"
    JSON = "json"
    SARIF = "sarif"
    JUNIT = "junit"
    GITHUB = "github"


class FailOn(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

Paths = Annotated[
    list[str] | None,
    typer.Argument(help="Run folders, parents of runs, or single files.", show_default="."),
]
FormatOption = Annotated[
    OutputFormat | None,
    typer.Option("--format", "-f", help="Output format (default: human; CKPTDOCTOR_FORMAT, format = in the config).", case_sensitive=False, show_default=False),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Short for --format json.")]
OutputOption = Annotated[
    str | None,
    typer.Option("--output", "-o", help="Write the report to this file instead of stdout.", metavar="FILE"),
]
FailOnOption = Annotated[
    FailOn | None,
    typer.Option("--fail-on", help="Exit 1 when a finding is at or above this severity (default: error).", case_sensitive=False, show_default=False),
]
ConfigOption = Annotated[str | None, typer.Option("--config", help="Settings file (default: [tool.ckptdoctor] of the nearest pyproject.toml, or ckptdoctor.toml).", metavar="FILE")]
SelectOption = Annotated[list[str] | None, typer.Option("--select", help="Report only these rules: codes, prefixes (CKD1) or names; repeatable or comma-separated.", metavar="RULES")]
IgnoreOption = Annotated[list[str] | None, typer.Option("--ignore", help="Do not report these rules (as --select).", metavar="RULES")]
ExitZeroFlag = Annotated[bool, typer.Option("--exit-zero", help="Exit 0 whatever the findings (errors in usage still exit 2).")]
QuietFlag = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing when the exit code is 0, but notes on what could not be checked (for cron).")]
AllFlag = Annotated[bool, typer.Option("--all", help="Show every checkpoint, not only the newest 20.")]
BaselineOption = Annotated[str | None, typer.Option("--baseline", help="Report only findings this baseline does not record.", metavar="FILE")]
WriteBaselineOption = Annotated[str | None, typer.Option("--write-baseline", help="Record today's findings in FILE (for --baseline) and exit 0.", metavar="FILE")]


WIDTH_OFF_TERMINAL = 120
"""Pipes and files get wide lines rather than rich's 80 columns: logs are read in editors."""


def stdout_console(file: io.StringIO | None = None) -> Console:
    from rich.console import Console  # rich only when something is rendered for people

    if file is not None:
        return Console(file=file, width=WIDTH_OFF_TERMINAL, no_color=True, highlight=False)
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = WIDTH_OFF_TERMINAL
    return console


def stderr_console() -> Console:
    from rich.console import Console

    # one message, one line: scripts grep stderr, and wrapped paths do not paste back
    return Console(stderr=True, highlight=False, soft_wrap=True)


def configured(config: str | None) -> Settings:
    """The settings of the environment and the configuration file; exit 2 naming a bad key."""
    from ckptdoctor.config import ConfigError, settings
    from ckptdoctor.layouts._base import use_role_hints

    use_role_hints({})  # nothing from an earlier command in this process
    try:
        found = settings(config)
    except ConfigError as error:
        say(f"ckptdoctor: error: {error}")
        raise typer.Exit(EXIT_USAGE) from error
    use_role_hints(found.roles)
    return found


def _rules(values: list[str] | None) -> tuple[str, ...]:
    return tuple(part.strip() for value in values or () for part in value.split(",") if part.strip())


def exit_code(report: Report, fail_on: FailOn, exit_zero: bool) -> int:
    if report.errors:
        return EXIT_USAGE
    if exit_zero:
        return EXIT_OK
    threshold = Severity(fail_on.value).rank
    return EXIT_FINDINGS if any(f.severity.rank >= threshold for f in report.findings) else EXIT_OK


def emit(
    report: Report,
    *,
    fmt: OutputFormat | None,
    as_json: bool,
    output: str | None,
    fail_on: FailOn | None,
    exit_zero: bool,
    quiet: bool,
    show_all: bool = False,
    empty: tuple[str, ...] = (),
    baseline: str | None = None,
    write_baseline: str | None = None,
    settings: Settings | None = None,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
) -> None:
    """Print (or write) the report, say what went wrong on stderr, and exit with the right code.
    The command line wins over the environment, which wins over the configuration file."""
    from ckptdoctor.config import ConfigError, Settings, check_rules

    settings = settings or Settings()
    try:
        chosen_rules, dropped_rules = check_rules(_rules(select), "--select"), check_rules(_rules(ignore), "--ignore")
    except ConfigError as bad:
        say(f"ckptdoctor: error: {bad}")
        raise typer.Exit(EXIT_USAGE) from bad
    for failure in report.errors:
        say(f"ckptdoctor: error: {failure.path}: {failure.message}")
    if report.errors and write_baseline is not None:
        say(f"ckptdoctor: error: {write_baseline} not written: a baseline records a whole scan")
        raise typer.Exit(EXIT_USAGE)
    report = dataclasses.replace(report, findings=settings.apply(report.findings, chosen_rules, dropped_rules))
    report = baselined(report, baseline, write_baseline, quiet)
    fmt = chosen(fmt, as_json, settings)
    code = exit_code(report, fail_on or FailOn(settings.fail_on or "error"), exit_zero)
    if quiet and code == EXIT_OK and output is None:  # a report asked for in a file is always written
        raise typer.Exit(code)
    for path in empty:
        say(f"No checkpoints found in {path}")
    if report.unrecognised:
        _hint_unrecognised(report.unrecognised)
    # renderers are imported when a report exists, and only the one asked for: `--help` pays for
    # neither, and `--json` never loads rich
    if fmt is OutputFormat.JSON:
        from ckptdoctor.render import json as json_render

        text = json_render.render(report)
    elif fmt is not OutputFormat.HUMAN:
        text = machine(report, fmt)
    else:
        buffer = io.StringIO() if output else None
        from ckptdoctor.render import human

        console = stdout_console(buffer)
        if not report.runs and not report.findings and report.errors:
            raise typer.Exit(code)
        human.render(report, console, show_all)
        if buffer is None:
            _summary(report, stderr_console())
            raise typer.Exit(code)
        text = buffer.getvalue()
    write(text, output)
    raise typer.Exit(code)


def baselined(report: Report, baseline: str | None, write_baseline: str | None, quiet: bool) -> Report:
    """``--write-baseline``: record the findings and exit 0. ``--baseline``: the report without
    the findings it records (a note on stderr says how many were left out)."""
    from ckptdoctor import baseline as baselines

    try:
        if write_baseline is not None:
            count = baselines.write(report, write_baseline)
            if not quiet:
                say(f"Recorded {count} finding{'s' if count != 1 else ''} in {write_baseline}; `--baseline {write_baseline}` reports only new ones.")
            raise typer.Exit(EXIT_OK)
        if baseline is None:
            return report
        report, known = baselines.new_only(report, baselines.load(baseline))
    except baselines.BaselineError as error:
        say(f"ckptdoctor: error: {error}")
        raise typer.Exit(EXIT_USAGE) from error
    if known and not quiet:
        say(f"{known} finding{'s' if known != 1 else ''} recorded in {baseline} not shown.")
    return report


def chosen(fmt: OutputFormat | None, as_json: bool, settings: Settings | None = None) -> OutputFormat:
    """The format asked for (``--json`` being short for ``--format json``), else the configured one."""
    if as_json:
        return OutputFormat.JSON
    if fmt is not None:
        return fmt
    return OutputFormat(settings.format) if settings is not None and settings.format else OutputFormat.HUMAN


def machine(report: Report, fmt: OutputFormat) -> str:
    """The report as SARIF, JUnit XML or GitHub annotations (``github`` also appends a Markdown
    summary to ``$GITHUB_STEP_SUMMARY`` when it is set, as Actions does)."""
    if fmt is OutputFormat.SARIF:
        from ckptdoctor.render import sarif

        return sarif.render(report)
    if fmt is OutputFormat.JUNIT:
        from ckptdoctor.render import junit

        return junit.render(report)
    from ckptdoctor.render import github

    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_file:
        try:
            with open(summary_file, "a", encoding="utf-8") as handle:
                handle.write(github.summary(report))
        except OSError as error:
            say(f"ckptdoctor: warning: cannot append to $GITHUB_STEP_SUMMARY ({summary_file}): {error.strerror}")
    return github.render(report)


def say(line: str) -> None:
    """One plain line on stderr (errors, hints): no rich needed, so ``--json`` runs never load it."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _hint_unrecognised(paths: tuple[str, ...]) -> None:
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    say(
        f"{len(paths)} file{'s' if len(paths) != 1 else ''} named like checkpoints follow no layout "
        f"ckptdoctor knows ({shown}); name one to check it: ckptdoctor inspect {paths[0]}"
    )


def _summary(report: Report, console: Console) -> None:
    counts = [f"{report.count(s)} {s.value}{'s' if report.count(s) != 1 and s is not Severity.INFO else ''}" for s in reversed(Severity)]
    runs = len(report.runs)
    console.print(f"{', '.join(counts)} in {runs} run{'s' if runs != 1 else ''}.", style="dim", markup=False)


def write(text: str, output: str | None) -> None:
    """The report on stdout, or in ``output`` (a clear error and exit 2 when it cannot be written)."""
    # names that are not valid UTF-8 (kept as surrogate escapes) are written as \x escapes
    encoded = text.encode("utf-8", "backslashreplace")
    if output is None or output == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(encoded)
        sys.stdout.buffer.flush()
        return
    try:
        with open(output, "wb") as handle:
            handle.write(encoded)
    except OSError as error:
        say(f"ckptdoctor: error: cannot write {output}: {error.strerror}")
        raise typer.Exit(EXIT_USAGE) from error
