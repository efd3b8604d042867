"""The ``ckptdoctor`` command: one thin module per subcommand, wired together here."""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Annotated

import typer

from ckptdoctor import __version__
from ckptdoctor.cli._output import EXIT_INTERRUPTED, EXIT_USAGE
from ckptdoctor.cli.diskcheck import diskcheck
from ckptdoctor.cli.inspect import inspect
from ckptdoctor.cli.prune import prune
from ckptdoctor.cli.repair import repair
from ckptdoctor.cli.rules import rules
from ckptdoctor.cli.verify import verify

app = typer.Typer(
    name="ckptdoctor",
    help="A checkpoint doctor for training runs: what is there, what is broken, where to resume.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # plain help: typer's rich help imports a Markdown renderer that costs ~90 ms per `--help`
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _command(function: Callable[..., None]) -> None:
    """Add a subcommand. Its summary in ``ckptdoctor --help`` is its docstring's first paragraph,
    whole: given as ``short_help`` it wraps at any width, where click would cut it with "..."."""
    summary = " ".join((function.__doc__ or "").partition("\n\n")[0].split())
    app.command(short_help=summary)(function)


for _subcommand in (inspect, verify, prune, repair, diskcheck, rules):
    _command(_subcommand)


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


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted


def main() -> None:
    # A short-lived process that builds one object per file of a run and keeps them all to the
    # end: the cyclic collector would re-walk them over and over (and they hold no cycles).
    gc.disable()
    signal.signal(signal.SIGINT, _interrupt)
    try:
        app()
    except Interrupted:
        print("Interrupted.", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as error:  # the last line of defence: a message, never a traceback
        if os.environ.get("CKPTDOCTOR_DEBUG"):
            raise
        print(
            f"ckptdoctor: internal error: {type(error).__name__}: {error}\nPlease report it; set CKPTDOCTOR_DEBUG=1 for a traceback.",
            file=sys.stderr,
        )
        sys.exit(EXIT_USAGE)
