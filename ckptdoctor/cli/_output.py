"""Options every command shares, and the one place that turns a report into output and an exit code."""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import io
import itertools
import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, TypeVar

import typer

from ckptdoctor.cli._errors import OutputFailed, explained, say
from ckptdoctor.errors import EXIT_FINDINGS as EXIT_FINDINGS
from ckptdoctor.errors import EXIT_USAGE as EXIT_USAGE
from ckptdoctor.render import HUMAN, JSON, PLAIN, Chunks, Kind, RenderOptions, formats, named

# the consoles of the commands' own lines (progress, plans, prompts), re-exported for them
from ckptdoctor.render.console import AUTO, COLOUR_CHOICES, use_colour
from ckptdoctor.render.console import stderr_console as stderr_console
from ckptdoctor.render.console import stdout_console as stdout_console

if TYPE_CHECKING:
    from ckptdoctor.api import Report, Settings, Severity


Number = TypeVar("Number", int, float)


def one_of(*choices: str) -> Callable[[str], str]:
    """An option's parser taking one of ``choices``, in any case; another is refused in ckptdoctor's
    words (``cli._errors.misused`` says which option)."""

    def parse(value: str) -> str:
        if value.lower() in choices:
            return value.lower()
        raise typer.BadParameter(f"must be one of {', '.join(choices[:-1])} or {choices[-1]}, not {value!r}")

    return parse


def number(kind: type[Number], minimum: Number | None = None) -> Callable[[str | Number], Number]:
    """An option's parser taking a number of ``kind`` (int: a whole one), at least ``minimum``."""

    def parse(value: str | Number) -> Number:
        try:
            parsed = kind(value)
        except ValueError:
            raise typer.BadParameter(f"must be {'a whole number' if kind is int else 'a number'}, not {value!r}") from None
        if minimum is not None and parsed < minimum:
            raise typer.BadParameter(f"must be {minimum} or more, not {parsed}")
        return parsed

    return parse


SEVERITIES = ("error", "warning", "info")


def _use_colour(choice: str | None) -> None:
    # as the option is read: every console of the command, its report's and its messages', is made after
    use_colour(choice or AUTO)


EXIT_OK = 0
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
"""128 + SIGTERM, as a shell reports a process SIGTERM ended."""


def format_option(kind: Kind, help: str) -> Any:
    """``--format``, offering the registered formats that render ``kind`` (case-insensitive);
    another is refused with the message ``format =`` in the configuration gets."""
    names = formats(kind)

    def parse(value: str) -> str:
        try:
            return named(value, kind).name
        except ValueError as error:
            raise typer.BadParameter(str(error)) from error

    return typer.Option("--format", "-f", parser=parse, metavar=f"<{'|'.join(names)}>", help=help, show_default=False)


Paths = Annotated[
    list[str] | None,
    typer.Argument(help="Run folders, parents of runs, or single files.", show_default="."),
]
FormatOption = Annotated[
    str | None, format_option(Kind.REPORT, "Output format (default: human; CKPTDOCTOR_FORMAT, format = in the config).")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Short for --format json (refused beside another --format).")]
OutputOption = Annotated[
    str | None,
    typer.Option("--output", "-o", help="Write the report to this file instead of stdout.", metavar="FILE"),
]
FailOnOption = Annotated[
    str | None,
    typer.Option(
        "--fail-on",
        parser=one_of(*SEVERITIES),
        metavar=f"<{'|'.join(SEVERITIES)}>",
        help="Exit 1 when a finding is at or above this severity (default: error).",
        show_default=False,
    ),
]
EndpointOption = Annotated[
    str | None,
    typer.Option(
        "--endpoint-url",
        help="The S3-compatible server of s3:// paths (MinIO, Ceph, R2, SeaweedFS), or the emulator of gs:// and az:// ones "
        "(default: AWS_ENDPOINT_URL).",
        metavar="URL",
    ),
]
ConfigOption = Annotated[
    str | None,
    typer.Option(
        "--config", help="Settings file (default: [tool.ckptdoctor] of the nearest pyproject.toml, or ckptdoctor.toml).", metavar="FILE"
    ),
]
SelectOption = Annotated[
    list[str] | None,
    typer.Option(
        "--select", help="Report only these rules: codes, prefixes (CKD1) or names; repeatable or comma-separated.", metavar="RULES"
    ),
]
IgnoreOption = Annotated[list[str] | None, typer.Option("--ignore", help="Do not report these rules (as --select).", metavar="RULES")]
ExitZeroFlag = Annotated[bool, typer.Option("--exit-zero", help="Exit 0 whatever the findings (errors in usage still exit 2).")]
QuietFlag = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="Print nothing at all when the exit code is 0 (for cron): no report or plan, and no notes (what could not be "
        "checked, what --min-age kept); all of it when the exit code is not 0. The same command without -q shows them.",
    ),
]
ColorOption = Annotated[
    str | None,
    typer.Option(
        "--color",
        parser=one_of(*COLOUR_CHOICES),
        callback=_use_colour,
        metavar=f"<{'|'.join(COLOUR_CHOICES)}>",
        show_default=False,
        help="Style the output (colour, bold): auto, on a terminal unless NO_COLOR is set (FORCE_COLOR: piped too); always; "
        "never. A file (-o) is plain text.",
    ),
]
AllFlag = Annotated[bool, typer.Option("--all", help="Show every checkpoint, not only the newest 20.")]
VerboseFlag = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", help="Show every finding in full: info findings one by one with their fixes (default: one line per rule)."
    ),
]
BaselineOption = Annotated[
    str | None, typer.Option("--baseline", help="Report only findings this baseline does not record.", metavar="FILE")
]
WriteBaselineOption = Annotated[
    str | None, typer.Option("--write-baseline", help="Record today's findings in FILE (for --baseline) and exit 0.", metavar="FILE")
]


class ReportOptions(NamedTuple):
    """How a report command (inspect, verify, diskcheck) reports: its shared options, with the
    environment and the configuration file under them. Built by :func:`report_options` alone.
    (A NamedTuple: a frozen dataclass costs every start ~1 ms more to define.)"""

    format: str
    output: str | None
    fail_on: Severity
    exit_zero: bool
    quiet: bool
    show_all: bool
    verbose: bool
    baseline: str | None
    write_baseline: str | None
    select: tuple[str, ...]
    """The command line's rules: they replace the file's ``select``."""
    ignore: tuple[str, ...]
    """The command line's rules: they add to the file's ``ignore``."""
    config: str | None
    """The settings file named on the command line (``--config``)."""
    settings: Settings


def report_options(
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    output: OutputOption = None,
    fail_on: FailOnOption = None,
    exit_zero: ExitZeroFlag = False,
    quiet: QuietFlag = False,
    color: ColorOption = None,
    show_all: AllFlag = False,
    verbose: VerboseFlag = False,
    baseline: BaselineOption = None,
    write_baseline: WriteBaselineOption = None,
    config: ConfigOption = None,
    select: SelectOption = None,
    ignore: IgnoreOption = None,
    endpoint: EndpointOption = None,
    paths: list[str] | None = None,
) -> ReportOptions:
    """The report options of a command line (its parameters are those every report command
    takes: :func:`reporting` adds them). The command line wins over the environment, which wins
    over the configuration file; exit 2 naming a bad key or rule."""
    # loaded when the command runs: --help stays fast
    from ckptdoctor.api import Severity, check_rules

    settings = configured(config, paths)
    use_endpoint(endpoint)
    chosen_rules, dropped_rules = check_rules(_rules(select), "--select"), check_rules(_rules(ignore), "--ignore", "ignore")
    threshold = fail_on or settings.fail_on or "error"
    return ReportOptions(
        format=chosen(fmt, as_json, settings), output=output, fail_on=Severity(threshold), exit_zero=exit_zero, quiet=quiet,
        show_all=show_all, verbose=verbose, baseline=baseline, write_baseline=write_baseline, select=chosen_rules, ignore=dropped_rules,
        config=config, settings=settings,
    )  # fmt: skip


def sharing(
    build: Callable[..., Any], around: Callable[[Any], contextlib.AbstractContextManager[None]] | None = None
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator giving a command, after its own options, the parameters of ``build`` (options
    several commands share, declared once), and calling it with ``options``: what ``build``
    makes of them, inside ``around(options)`` where given. No command can drift from the others."""
    # `paths`, the command's own argument, is handed to `build` too (where its settings are looked for)
    shared = {name: p for name, p in inspect.signature(build, eval_str=True).parameters.items() if name != "paths"}

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        own = inspect.signature(command, eval_str=True)

        @functools.wraps(command)
        def with_options(**given: Any) -> None:
            with explained(command.__name__):
                named = given.get("paths", [given["path"]] if "path" in given else None)
                options = build(**{name: given.pop(name) for name in shared}, paths=named)
                with around(options) if around is not None else contextlib.nullcontext():
                    command(**given, options=options)

        parameters = [p for p in own.parameters.values() if p.name != "options"] + list(shared.values())
        # Typer reads the command's options from its signature and annotations
        with_options.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
        with_options.__annotations__ = {p.name: p.annotation for p in parameters}
        return with_options

    return decorate


reporting = sharing(report_options)
"""``inspect``, ``verify`` and ``diskcheck``: the report options, as one :class:`ReportOptions`."""


def use_endpoint(endpoint: str | None) -> None:
    """Reach the stores of URL paths at ``endpoint`` (``--endpoint-url``); exit 2 for one that is no
    http(s) URL."""
    if endpoint is None:
        return
    # loaded only when an endpoint is given: a local run's start-up does not change
    from ckptdoctor.api import bad_endpoint
    from ckptdoctor.api import use_endpoint as configure

    why = bad_endpoint(endpoint)
    if why is not None:
        say(f"ckptdoctor: error: --endpoint-url {endpoint}: {why}")
        raise typer.Exit(EXIT_USAGE)

    configure(endpoint)


def configured(config: str | None, paths: list[str] | None) -> Settings:
    """The settings of the environment and the configuration file (``--config``, else the one
    nearest the first path, else the working folder's), read once: the command's options carry
    them to the API, which reads them the same way."""
    # loaded when the command runs: --help stays fast
    from ckptdoctor.api import read_settings

    return read_settings(config, start=paths[0] if paths else None)


def _rules(values: list[str] | None) -> tuple[str, ...]:
    return tuple(part.strip() for value in values or () for part in value.split(",") if part.strip())


def exit_code(report: Report, fail_on: Severity, exit_zero: bool) -> int:
    if report.errors:
        return EXIT_USAGE
    if exit_zero:
        return EXIT_OK
    return EXIT_FINDINGS if any(f.severity.rank >= fail_on.rank for f in report.findings) else EXIT_OK


def emit(report: Report, options: ReportOptions, empty: tuple[str, ...] = ()) -> None:
    """Print (or write) the report, say what went wrong on stderr, and exit with the right code.
    ``empty``: the paths where no checkpoint was found."""
    for failure in report.errors:
        say(f"ckptdoctor: error: {failure.path}: {failure.message}")
    if report.errors and options.write_baseline is not None:
        say(f"ckptdoctor: error: {options.write_baseline} not written: a baseline records a whole scan")
        raise typer.Exit(EXIT_USAGE)
    report = baselined(report, options.baseline, options.write_baseline, options.quiet)
    code = exit_code(report, options.fail_on, options.exit_zero)
    if options.quiet and code == EXIT_OK and options.output is None:  # a report asked for in a file is always written
        raise typer.Exit(code)
    for path in empty:
        say(f"No checkpoints found in {path}")
    if report.unrecognised:
        _hint_unrecognised(report.unrecognised)
    renderer = named(options.format)
    if renderer.for_people and report.errors and not report.runs and not report.findings:
        raise typer.Exit(code)  # the errors above say it all
    to_file = options.output is not None
    text = rendered(report, options.format, RenderOptions(options.show_all, to_file=to_file, verbose=options.verbose))
    # the count ends the report, wherever it goes
    write(text, options.output, summed_up(report, to_file) if renderer.for_people else "")
    raise typer.Exit(code)


def baselined(report: Report, baseline: str | None, write_baseline: str | None, quiet: bool) -> Report:
    """``--write-baseline``: record the findings and exit 0. ``--baseline``: the report without
    the findings it records (a note on stderr says how many were left out)."""
    # loaded when the command runs: --help stays fast
    from ckptdoctor.api import baseline as baselines

    if write_baseline is not None:
        count = baselines.write(report, write_baseline)
        if not quiet:
            say(
                f"Recorded {count} finding{'s' if count != 1 else ''} in {write_baseline}; `--baseline {write_baseline}` reports only new ones."
            )
        raise typer.Exit(EXIT_OK)
    if baseline is None:
        return report
    report, known = baselines.new_only(report, baselines.load(baseline))
    if known and not quiet:
        say(f"{known} finding{'s' if known != 1 else ''} recorded in {baseline} not shown.")
    return report


def chosen(fmt: str | None, as_json: bool, settings: Settings | None = None) -> str:
    """The format asked for (``--json`` being short for ``--format json``), else the configured one;
    exit 2 where ``--json`` and another ``--format`` are both given (a CI configuration with both
    is a mistake: which one it meant, no guess can tell)."""
    if as_json and fmt is not None and fmt != JSON:
        say(f"ckptdoctor: error: --json is short for --format json, and --format {fmt} was given too: pass one of them")
        raise typer.Exit(EXIT_USAGE)
    if as_json:
        return JSON
    if fmt is not None:
        return fmt
    return settings.format if settings is not None and settings.format else HUMAN


def rendered(report: Report, fmt: str, options: RenderOptions = PLAIN) -> str | Chunks:
    """The report in format ``fmt`` (its module imported now: ``--help`` pays for no renderer,
    and ``--json`` never loads rich); a format with a job summary appends it, as Actions does."""
    renderer = named(fmt)
    module = renderer.module()
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY") if renderer.job_summary else None
    if summary_file:
        try:
            with open(summary_file, "a", encoding="utf-8") as handle:
                handle.write(module.summary(report))
        except OSError as error:
            say(f"ckptdoctor: warning: cannot append to $GITHUB_STEP_SUMMARY ({summary_file}): {error.strerror}")
    return module.render(report, options)


def _hint_unrecognised(paths: tuple[str, ...]) -> None:
    # loaded by the report already: --help never comes here
    from ckptdoctor.api import shell_word

    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    follow = "file named like a checkpoint follows" if len(paths) == 1 else "files named like checkpoints follow"
    say(f"{len(paths)} {follow} no layout ckptdoctor knows ({shown}); name one to check it: ckptdoctor inspect {shell_word(paths[0])}")


def summed_up(report: Report, to_file: bool) -> str:
    """The report's last line: how many findings of each severity in how many runs (and what the
    store's requests cost), dimmed where stdout is styled."""
    # loaded by the report already: --help never comes here
    from ckptdoctor.api import Severity, counted, size

    counts = [f"{report.count(s)} {s.value}{'s' if report.count(s) != 1 and s is not Severity.INFO else ''}" for s in reversed(Severity)]
    runs = len(report.runs)
    cost = ""
    if report.transfer is not None:
        requests = report.transfer.requests
        cost = f"; {requests:,} request{'' if requests == 1 else 's'} to the store, {size(report.transfer.received)} read"
    console = stdout_console(io.StringIO() if to_file else None)
    with console.capture() as captured:
        console.print(f"{', '.join(counts)} in {counted(runs, 'run')}{cost}.", style="dim", markup=False)
    return captured.get()


def write(text: str | Chunks, output: str | None, ending: str = "") -> None:
    """The report, then ``ending``, on stdout, or in ``output`` (a clear error and exit 2 when it
    cannot be written)."""
    chunks = itertools.chain(_utf8(text), _utf8(ending))
    if output is None or output == "-":
        if sys.stdout is None:  # started with stdout closed (`>&-`)
            raise OutputFailed(errno.EBADF, "stdout is closed")
        try:
            sys.stdout.flush()
            for chunk in chunks:
                sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
        except OSError as error:  # stdout's: cli.main says so
            raise OutputFailed(error.errno, error.strerror) from error
        return
    # loaded only where a report goes to a file
    from ckptdoctor.api import write_whole
    from ckptdoctor.errors import UsageError

    try:
        write_whole(output, chunks)
    except OSError as error:
        raise UsageError(f"cannot write {output}: {error.strerror}") from error


def _utf8(text: str | Chunks) -> Iterable[bytes]:
    if isinstance(text, str):
        # names that are not valid UTF-8 (kept as surrogate escapes) are written as \x escapes
        return (text.encode("utf-8", "backslashreplace"),) if text else ()
    return text
