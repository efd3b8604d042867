"""The ``ckptdoctor`` command: one thin module per subcommand, wired together here.

A subcommand's module is imported, and its options built, only when that command runs or shows
its own ``--help``: typer builds a command's options from its signature, and building all six for
every start would cost each command the others' time. ``ckptdoctor --help`` lists them from their
docstrings alone, building none.
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, MutableMapping
from types import FrameType
from typing import Annotated, Any

import typer
from typer.core import TyperGroup
from typer.main import get_command_from_info
from typer.models import CommandInfo

from ckptdoctor.cli._output import EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE
from ckptdoctor.version import __version__

SUBCOMMANDS = ("inspect", "verify", "prune", "repair", "diskcheck", "rules")
"""In the order ``ckptdoctor --help`` lists them; ``ckptdoctor.cli.<name>`` defines the function ``<name>``."""


def _function(name: str) -> Callable[..., None]:
    # the subcommand's module loads only when that command is used or listed
    function: Callable[..., None] = getattr(importlib.import_module(f"{__name__}.{name}"), name)
    return function


def _summary(function: Callable[..., None]) -> str:
    """A subcommand's summary in ``ckptdoctor --help``: its docstring's first paragraph, whole
    (given as ``short_help``, it wraps at any width, where click would cut it with "...")."""
    return " ".join((function.__doc__ or "").partition("\n\n")[0].split())


class _Built(MutableMapping[str, Any]):
    """The subcommands by name, in ``--help``'s order, each built on first use (as typer would
    build it had it been registered with ``app.command``)."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in SUBCOMMANDS:
                raise KeyError(name)
            function = _function(name)
            info = CommandInfo(callback=function, short_help=_summary(function))
            self._built[name] = get_command_from_info(
                info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode
            )
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        raise TypeError(f"the subcommands are ckptdoctor.cli.SUBCOMMANDS, not {name!r}")

    def __delitem__(self, name: str) -> None:
        raise TypeError(f"the subcommands are ckptdoctor.cli.SUBCOMMANDS, not {name!r}")

    def __iter__(self) -> Iterator[str]:
        return iter(SUBCOMMANDS)

    def __len__(self) -> int:
        return len(SUBCOMMANDS)


class _Subcommands(TyperGroup):
    """ckptdoctor's group: the subcommands of :data:`SUBCOMMANDS`, each built when used."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.commands = _Built()

    def list_commands(self, ctx: Any) -> list[str]:
        # the names alone (typer's own lists the built commands: it would build them all)
        return list(SUBCOMMANDS)

    def main(  # type: ignore[override]
        self, args: list[str] | None = None, prog_name: str | None = None, standalone_mode: bool = True, **extra: Any
    ) -> Any:
        """As typer's, but a command line the parser refuses is said in one line of ckptdoctor's
        words (``_errors.misused``), not in Click's block; ``ckptdoctor`` alone still shows its help."""
        if not standalone_mode:
            return super().main(args, prog_name, standalone_mode=False, **extra)
        given = sys.argv[1:] if args is None else list(args)
        try:
            # not standalone: what the parser raises comes here, and an exit code comes back
            code = super().main(given, prog_name, standalone_mode=False, **extra)
        except typer.TyperException as error:
            if not given:  # no arguments: the help, as no_args_is_help promises
                error.show()  # type: ignore[attr-defined]
                sys.exit(error.exit_code)
            # loaded only when a command line is refused
            from ckptdoctor.cli._errors import misused

            named = next((word for word in given if word in SUBCOMMANDS), None)  # the parser's context is not always there
            sys.exit(misused(error, f"ckptdoctor {named}" if named else "ckptdoctor"))
        except typer.Abort:  # end of input where an answer was awaited
            print("Aborted.", file=sys.stderr)
            sys.exit(EXIT_FINDINGS)
        sys.exit(code if isinstance(code, int) else 0)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        # the summaries alone: `ckptdoctor --help` builds none of the commands it lists
        with formatter.section("Commands"):
            formatter.write_dl([(name, _summary(_function(name))) for name in SUBCOMMANDS])


app = typer.Typer(
    name="ckptdoctor",
    cls=_Subcommands,
    help="A checkpoint doctor for training runs: what is there, what is broken, where to resume.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # plain help: typer's rich help imports a Markdown renderer that costs ~90 ms per `--help`
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ckptdoctor {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")] = False,
) -> None:
    """A checkpoint doctor for training runs: what is there, what is broken, where to resume."""


class Interrupted(BaseException):
    """Ctrl-C, raised past the CLI framework so that the exit code is 130, not 1."""


class Terminated(Interrupted):
    """SIGTERM (a scheduler's time limit, ``kill``, ``timeout``): ended as Ctrl-C ends a command,
    so that what it holds is let go (a lock in a bucket outlives a process that just dies)."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Terminated if signum == signal.SIGTERM else Interrupted


def main() -> None:
    # A short-lived process that builds one object per file of a run and keeps them all to the
    # end: the cyclic collector would re-walk them over and over (and they hold no cycles).
    gc.disable()
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        app()
    except Terminated:
        print("Terminated.", file=sys.stderr)
        sys.exit(EXIT_TERMINATED)
    except Interrupted:
        print("Interrupted.", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as error:  # the last line of defence: a message, never a traceback
        if isinstance(error, OSError) and _output_failed(error):
            print(f"ckptdoctor: error: cannot write the output: {error.strerror}", file=sys.stderr)
            sys.exit(EXIT_USAGE)
        if os.environ.get("CKPTDOCTOR_DEBUG"):
            raise
        print(
            f"ckptdoctor: internal error: {type(error).__name__}: {error}\nPlease report it; set CKPTDOCTOR_DEBUG=1 for a traceback.",
            file=sys.stderr,
        )
        sys.exit(EXIT_USAGE)


def _output_failed(error: OSError) -> bool:
    """Whether ``error`` is stdout's (``_errors.OutputFailed``, ``_errors.stdout_failed``). Its descriptor then goes to
    /dev/null, so that what its buffer still holds does not fail again at the interpreter's own
    last flush."""
    # loaded only when something failed: start-up stays lean
    from ckptdoctor.cli._errors import OutputFailed, stdout_failed

    if not (isinstance(error, OutputFailed) or stdout_failed(error)):
        return False
    if sys.stdout is not None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return True
