"""What the commands that change a run (``prune``, ``repair``) share around the API's acting
pass: options, showing the plans and messages, and asking."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, TypeVar

import typer

from ckptdoctor.cli._errors import fitted, say
from ckptdoctor.cli._output import (
    EXIT_FINDINGS,
    EXIT_OK,
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
    notes: Notes

    @property
    def human(self) -> bool:
        return self.format == HUMAN

    def listener(self, repair: bool = False) -> Listener:
        return listener(
            self.settings,
            self.notes,
            dry_run=self.dry_run,
            fmt=self.format,
            quiet=self.quiet,
            output=self.output,
            show_all=self.show_all,
            repair=repair,
        )

    def confirm(self) -> Confirm:
        return asker(self.yes, self.human, self.notes)


class Notes:
    """What an acting command notes on stderr beside its plans (what it could not check, what it
    left and why, what killed passes left), said once per command however many runs it acts on:
    a note told again is not said again, and notes that differ only in the run they name are one
    line that names the others. Held until the plans are shown (they come before them), the
    question is asked, or the pass is over; with ``--quiet``, to the end, and said only where the
    command fails (a cron job's mail is its output: nothing when all went well)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._held: list[str] = []
        self._said: set[str] = set()
        self._runs: tuple[str, ...] = ()

    def hear(self, text: str) -> None:
        if text not in self._said and text not in self._held:
            self._held.append(text)

    def runs_are(self, runs: Sequence[str]) -> None:
        """The runs of the pass (their paths, as its notes name them)."""
        self._runs = tuple(sorted(runs, key=len, reverse=True))  # the longest first: a run inside another's folder

    def say(self) -> None:
        """Say what is held."""
        for line in _grouped(self._held, self._runs):
            say(line)
        self._said.update(self._held)
        self._held.clear()

    def flush(self) -> None:
        """Say what is held unless ``--quiet`` holds it to the end."""
        if not self.quiet:
            self.say()

    @contextlib.contextmanager
    def kept(self) -> Iterator[None]:
        """Around the whole command: what is still held is said as it ends, unless it ends well under ``--quiet``."""
        failed = True
        try:
            yield
            failed = False
        except typer.Exit as done:
            failed = done.exit_code != EXIT_OK
            raise
        finally:
            if failed or not self.quiet:
                self.say()


def _grouped(notes: Sequence[str], runs: Sequence[str]) -> list[str]:
    """``notes`` in order, those that differ only in the run they name as one line: the first
    whole (its paths and commands still work when pasted), then the other runs it holds for."""
    from ckptdoctor.api import counted  # loaded by the pass already: --help never comes here

    groups: dict[str, list[tuple[str, str]]] = {}
    for note in notes:
        run = next((run for run in runs if run in note), "")
        groups.setdefault(note.replace(run, "\0") if run else note, []).append((note, run))
    lines = []
    for same in groups.values():
        (first, _), others = same[0], [run for _, run in same[1:]]
        if not others:
            lines.append(first)
            continue
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        lines.append(f"{first} (and the same for {counted(len(others), 'more run')}: {shown})")
    return lines


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
        min_age, dry_run, yes, not no_recurse, not no_lock, chosen(fmt, as_json), output, quiet, show_all, config,
        configured(config, paths), Notes(quiet),
    )  # fmt: skip


acting_command = sharing(acting_options, around=lambda options: options.notes.kept())
"""``prune`` and ``repair``: the acting options, as one :class:`ActingOptions`, and their notes
said once as the command ends."""


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
        done = run(asked)
    options.notes.flush()  # before what the command says of the outcome
    return done


def listener(
    settings: Settings, notes: Notes, *, dry_run: bool, fmt: str, quiet: bool, output: str | None, show_all: bool, repair: bool = False
) -> Listener:
    """What the CLI does with each step an acting pass tells: the plans on stdout (tables, or
    the JSON document), what was done on stderr as it is done (not with --quiet), every other
    message among the ``notes``, and what is refused at once."""
    # loaded when the command runs: --help stays fast
    from ckptdoctor.api import Planned, Tone

    def hear(event: Event) -> None:
        if isinstance(event, Planned):
            notes.runs_are([run.path for run in event.report.runs])
            if fmt != JSON:  # the JSON document holds them
                for found in event.pending:
                    notes.hear(pending_line(found))
            notes.flush()  # the notes of the scan and the planning, before the plans
            show_plans(event, settings, dry_run=dry_run, fmt=fmt, quiet=quiet, output=output, show_all=show_all, repair=repair)
            for reason in event.refused:
                say(f"ckptdoctor: error: {reason}")
        elif event.tone is Tone.DONE:
            if not quiet:
                say(event.text)
        else:
            notes.hear(event.text)

    return hear


def show_plans(
    planned: Planned, settings: Settings, *, dry_run: bool, fmt: str, quiet: bool, output: str | None, show_all: bool, repair: bool
) -> None:
    """The plans in ``fmt`` where it renders plans (tables, the JSON document); in a format that
    does not, the scan's findings (as configured), which is what a CI system reads. (What killed
    prunes' journals would still do is among the notes, or in the JSON document: the same
    confirmation finishes it.)"""
    renderer = named(fmt)
    if Kind.PLAN not in renderer.kinds:
        write(rendered(dataclasses.replace(planned.report, findings=settings.apply(planned.report.findings)), fmt), output)
    elif not (quiet and renderer.for_people):
        plans = Plans(planned.report, planned.plans, dry_run, planned.pending, repair)
        write(renderer.module().render_plans(plans, RenderOptions(show_all=show_all, to_file=output is not None)), output)


def pending_line(found: Pending) -> str:
    """What one killed prune's journal would still do."""
    # loaded when a journal is shown: --help stays fast
    from ckptdoctor.api import counted

    shown = ", ".join(found.in_run[:5]) + (f" and {len(found.in_run) - 5} more" if len(found.in_run) > 5 else "")
    deletes = (
        f"{counted(len(found.in_run), 'entry', 'entries')} still in the run ({shown})" if found.in_run else "no entry still in the run"
    )
    spares = f"; it spares {len(found.spared)} it listed that changed, are open or are kept now" if found.spared else ""
    if "://" in found.journal:  # a bucket's journal: deletes there are final, and there is no trash to put back from
        return f"pending: an interrupted prune left {found.journal}; finishing it deletes {deletes}{spares}"
    return (
        f"pending: an interrupted prune left {found.journal}; finishing it deletes {deletes} and "
        f"{found.in_trash} it had moved into its trash{spares} (--discard-journal drops it instead)"
    )


def asker(yes: bool, human: bool, notes: Notes) -> Confirm:
    """The answer to an acting pass's questions: --yes to go ahead, else the user, when stdin is a
    terminal (wherever stdout goes: ``prune > plan.txt`` still asks, as git and apt do), told the
    ``notes`` first, even with --quiet; with no terminal to answer on (or in JSON mode) exit 2,
    naming what would let it go on."""

    def answer(question: Question) -> bool:
        # loaded when the command runs: --help stays fast
        from ckptdoctor.api import Ask

        if question.ask is Ask.GO and yes:
            return True
        if human and not yes and sys.stdin.isatty():
            notes.say()
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
    sys.stderr.write(f"{fitted(f'{text} [y/N]:')} ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def declined(outcome: Outcome) -> None:
    """A question answered no: say what was not done, and stop (exit 1: what was asked for was
    not done, so a script that goes on only after a prune goes no further)."""
    if outcome.declined:
        say(f"{outcome.declined[0].upper()}{outcome.declined[1:]}.")
        raise typer.Exit(EXIT_FINDINGS)
