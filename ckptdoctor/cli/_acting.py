"""What the commands that change a run (``prune``, ``repair``) share around the API's acting
pass: options, showing the plans and messages, and asking."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, TypeVar

import typer

from ckptdoctor.cli._errors import say
from ckptdoctor.cli._output import (
    EXIT_FINDINGS,
    EXIT_USAGE,
    AllFlag,
    ColorOption,
    ConfigOption,
    EndpointOption,
    JsonFlag,
    OutputOption,
    QuietFlag,
    chosen,
    configured,
    format_option,
    rendered,
    sharing,
    use_endpoint,
    write,
)
from ckptdoctor.render import HUMAN, JSON, Kind, Plans, RenderOptions, named

if TYPE_CHECKING:
    from ckptdoctor.api import ActOptions, Confirm, Event, Listener, Outcome, Pending, Planned, Question, Settings

Asked = TypeVar("Asked", bound="ActOptions")
Done = TypeVar("Done")

MinAge = Annotated[
    str | None, typer.Option("--min-age", help="Never touch files modified more recently (default 10min).", metavar="DURATION")
]
DryRun = Annotated[bool, typer.Option("--dry-run", "-n", help="Print the plan and change nothing.")]
NoRecurse = Annotated[
    bool,
    typer.Option(
        "--no-recurse", help="Act only on the run whose folder is PATH itself, never on runs in folders below it (its loose files' fix)."
    ),
]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (required when stdin is not a terminal).")]
NoLock = Annotated[
    bool,
    typer.Option(
        "--no-lock",
        help="Runs in buckets: act on a store that does not honour conditional writes, with no lock and deletes it may not hold to "
        "the plan (refused without it).",
    ),
]
PlanFormat = Annotated[
    str | None, format_option(Kind.REPORT, "Output format of the plan (human, json) or, in another format, of the scan's findings.")
]


class ActingOptions(NamedTuple):
    """How an acting command (prune, repair) runs and shows its plan: its shared options, with
    the configuration file's settings. Built by :func:`acting_options` alone. (A NamedTuple, as
    ``ReportOptions``: defined at every start.)"""

    min_age: str | None
    """As given (``--min-age``): each command weighs it against its own configuration."""
    dry_run: bool
    yes: bool
    recurse: bool
    """False (``--no-recurse``): only the runs whose folders are the paths given."""
    lock: bool
    """False (``--no-lock``): act in a bucket that does not honour conditional writes."""
    format: str
    """The command line's (a plan is no report: ``format =`` in the configuration is not used)."""
    output: str | None
    quiet: bool
    show_all: bool
    config: str | None
    settings: Settings

    @property
    def human(self) -> bool:
        return self.format == HUMAN

    def listener(self, repair: bool = False) -> Listener:
        return listener(
            self.settings,
            dry_run=self.dry_run,
            fmt=self.format,
            quiet=self.quiet,
            output=self.output,
            show_all=self.show_all,
            repair=repair,
        )

    def confirm(self) -> Confirm:
        return asker(self.yes, self.human)


def acting_options(
    min_age: MinAge = None,
    dry_run: DryRun = False,
    yes: Yes = False,
    no_recurse: NoRecurse = False,
    no_lock: NoLock = False,
    fmt: PlanFormat = None,
    as_json: JsonFlag = False,
    output: OutputOption = None,
    quiet: QuietFlag = False,
    color: ColorOption = None,
    show_all: AllFlag = False,
    config: ConfigOption = None,
    endpoint: EndpointOption = None,
    paths: list[str] | None = None,
) -> ActingOptions:
    """The options every acting command takes (:func:`acting_command` adds them); exit 2 naming a bad
    configuration key."""
    use_endpoint(endpoint)
    return ActingOptions(
        min_age, dry_run, yes, not no_recurse, not no_lock, chosen(fmt, as_json), output, quiet, show_all, config, configured(config, paths)
    )


acting_command = sharing(acting_options)
"""``prune`` and ``repair``: the acting options, as one :class:`ActingOptions`."""


def carried_out(
    run: Callable[[Asked], Done],
    kind: Callable[..., Asked],
    paths: Sequence[str] | None,
    options: ActingOptions,
    repair: bool = False,
    **own: Any,
) -> Done:
    """The API's ``run`` of the options ``kind`` (the command's ``own`` with the shared acting
    options), with a status line on the terminal while it scans; the line goes before the pass
    tells anything (its plans, its notes)."""
    # loaded when the command runs: --help stays fast
    from ckptdoctor.cli._progress import ScanStatus

    with ScanStatus(options.quiet) as status:
        hear = options.listener(repair)

        def heard(event: Event) -> None:
            status.stop()
            hear(event)

        asked = kind(
            tuple(paths or ["."]), settings=options.settings, dry_run=options.dry_run, confirm=options.confirm(), listener=heard,
            recurse=options.recurse, lock=options.lock, tally=status.tally, **own,
        )  # fmt: skip
        return run(asked)


def listener(
    settings: Settings, *, dry_run: bool, fmt: str, quiet: bool, output: str | None, show_all: bool, repair: bool = False
) -> Listener:
    """What the CLI does with each step an acting pass tells: the plans on stdout (tables, or
    the JSON document), every other message on stderr (what was done only without --quiet)."""
    # loaded when the command runs: --help stays fast
    from ckptdoctor.api import Planned, Tone

    def hear(event: Event) -> None:
        if isinstance(event, Planned):
            show_plans(event, settings, dry_run=dry_run, fmt=fmt, quiet=quiet, output=output, show_all=show_all, repair=repair)
            for reason in event.refused:
                say(f"ckptdoctor: error: {reason}")
        elif not (quiet and event.tone is Tone.DONE):
            say(event.text)

    return hear


def show_plans(
    planned: Planned, settings: Settings, *, dry_run: bool, fmt: str, quiet: bool, output: str | None, show_all: bool, repair: bool
) -> None:
    """The plans in ``fmt`` where it renders plans (tables, the JSON document); in a format that
    does not, the scan's findings (as configured), which is what a CI system reads. What killed
    prunes' journals would still do is said on stderr beside any but the JSON document, which
    holds it: the same confirmation finishes it."""
    renderer = named(fmt)
    if fmt != JSON:
        for found in planned.pending:
            say(pending_line(found))
    if Kind.PLAN not in renderer.kinds:
        write(rendered(dataclasses.replace(planned.report, findings=settings.apply(planned.report.findings)), fmt), output)
    elif not (quiet and renderer.for_people):
        plans = Plans(planned.report, planned.plans, dry_run, planned.pending, repair)
        write(renderer.module().render_plans(plans, RenderOptions(show_all=show_all, to_file=output is not None)), output)


def pending_line(found: Pending) -> str:
    """What one killed prune's journal would still do."""
    shown = ", ".join(found.in_run[:5]) + (f" and {len(found.in_run) - 5} more" if len(found.in_run) > 5 else "")
    deletes = f"{len(found.in_run)} entries still in the run ({shown})" if found.in_run else "no entry still in the run"
    spares = f"; it spares {len(found.spared)} it listed that changed, are open or are kept now" if found.spared else ""
    if "://" in found.journal:  # a bucket's journal: deletes there are final, and there is no trash to put back from
        return f"pending: an interrupted prune left {found.journal}; finishing it deletes {deletes}{spares}"
    return (
        f"pending: an interrupted prune left {found.journal}; finishing it deletes {deletes} and "
        f"{found.in_trash} it had moved into its trash{spares} (--discard-journal drops it instead)"
    )


def asker(yes: bool, human: bool) -> Confirm:
    """The answer to an acting pass's questions: --yes to go ahead, else the user, when stdin is a
    terminal (wherever stdout goes: ``prune > plan.txt`` still asks, as git and apt do); with no
    terminal to answer on (or in JSON mode) exit 2, naming what would let it go on."""

    def answer(question: Question) -> bool:
        # loaded when the command runs: --help stays fast
        from ckptdoctor.api import Ask

        if question.ask is Ask.GO and yes:
            return True
        if human and not yes and sys.stdin.isatty():
            return ask(question.text)
        if question.ask is Ask.TOO_MANY_RUNS:
            say(f"ckptdoctor: error: {question.why}; {question.declined}: check the path, or pass --max-runs {question.needed} to go ahead")
        else:
            say(f"ckptdoctor: error: not on a terminal: pass --yes to go ahead (or --dry-run to only see the plan); {question.declined}")
        raise typer.Exit(EXIT_USAGE)

    return answer


def ask(text: str) -> bool:
    """Ask on the terminal: the prompt on stderr, the answer from stdin, so that stdout (the plan,
    perhaps redirected to a file or a pipe) gets neither. Only ``y`` or ``yes`` go ahead; anything
    else, or end of input, is a no."""
    sys.stderr.write(f"{text} [y/N]: ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def declined(outcome: Outcome) -> None:
    """A question answered no: say what was not done, and stop (exit 1: what was asked for was
    not done, so a script that goes on only after a prune goes no further)."""
    if outcome.declined:
        say(f"{outcome.declined[0].upper()}{outcome.declined[1:]}.")
        raise typer.Exit(EXIT_FINDINGS)
