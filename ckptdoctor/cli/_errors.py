"""The one place where what stops a command becomes its message and exit code (as the ``hf``
command line's ``CLI_ERROR_MAPPINGS``): each kind of :class:`~ckptdoctor.errors.CkptdoctorError`
carries its exit code, and says itself in one line per reason. Anything else that escapes a
command is a bug, and ``cli.main`` says "internal error"."""

from __future__ import annotations

import contextlib
import errno
import re
import sys
from collections.abc import Iterator
from typing import Any

import typer

from ckptdoctor.errors import EXIT_FINDINGS, EXIT_USAGE, CkptdoctorError, StoreError
from ckptdoctor.render.lines import fill, stderr_width

ACTING = frozenset({"prune", "repair"})
"""Commands that change runs: what stops them part-way says that nothing to be kept was touched."""
UNTOUCHED = "nothing that was to be kept was touched"


class OutputFailed(OSError):
    """Writing the report to stdout failed: its reader went away (EPIPE, which ends the command as
    Click ends it), its disk is full, or it is closed. Nothing the command checked or did failed,
    so no command reports it as its own (an acting one says nothing of what it kept)."""


@contextlib.contextmanager
def explained(command: str) -> Iterator[None]:
    """Run ``command``'s body; turn what stops it for its user into lines on stderr and its exit code."""
    try:
        yield
    except CkptdoctorError as error:
        after = f"; {UNTOUCHED}" if isinstance(error, StoreError) and command in ACTING else ""
        for line in error.lines:
            say(f"ckptdoctor: error: {line}{after}")
        raise typer.Exit(error.exit_code) from error
    except OSError as error:
        if isinstance(error, OutputFailed):
            raise
        if command in ACTING:
            say(f"ckptdoctor: error: {_acting_failure(error, command)}")
            raise typer.Exit(EXIT_FINDINGS) from error
        if command != "diskcheck" or stdout_failed(error):  # a read the scan did not expect: a bug, or stdout's (cli.main says which)
            raise
        where = f"{error.filename}: " if error.filename else ""
        say(f"ckptdoctor: error: {where}{error.strerror or error}")
        raise typer.Exit(EXIT_USAGE) from error


def say(line: str) -> None:
    """One message on stderr (errors, hints): no rich needed, so ``--json`` runs never load it."""
    sys.stderr.write(fitted(line) + "\n")
    sys.stderr.flush()


def fitted(line: str) -> str:
    """``line`` as said on stderr: its control characters (from a file's name) shown, never
    obeyed; on a terminal, wrapped at its spaces to its width (``$COLUMNS`` where set), a path or
    a command never broken; elsewhere (a pipe, a file, a log), one line, as scripts grep it."""
    # loaded when something is said: --help stays fast
    from ckptdoctor.api import printable

    return fill(printable(line, line=True), stderr_width())


def stdout_failed(error: OSError) -> bool:
    """Whether ``error`` is stdout's (a full disk or a quota where the output goes: no bug of
    ours): an error only a write gives, with no file name (every file ckptdoctor writes itself is
    named in its errors). Not EIO: a read of a damaged checkpoint gives it too."""
    return error.filename is None and error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _acting_failure(error: OSError, command: str) -> str:
    """EIO, ENOSPC, EROFS, EACCES in the middle of acting: no usage error, no bug. What this user
    may not do, its next command may not either: no promise that it will."""
    # loaded when said: the core loads only when a command runs
    from ckptdoctor.api import DENIED

    where = f"{error.filename}: " if isinstance(error.filename, str) and error.filename else ""  # never a descriptor's number
    why = error.strerror or type(error).__name__
    code = errno.errorcode.get(error.errno or 0, "")
    after = (
        f"this user may not change it: a {command} by its owner, or a change of its permissions, goes on"
        if error.errno in DENIED
        else f"the next {command} finishes the job"
    )
    return f"{where}{why}{f' ({code})' if code else ''}; {UNTOUCHED}, and {after}"


def misused(error: typer.TyperException, command: str) -> int:
    """Say what the command line's parser found wrong with ``command``'s arguments, in ckptdoctor's
    words and one line (not Click's usage block): the option and what it must be, as a bad
    setting in the configuration is said. Returns the exit code (2)."""
    say(f"ckptdoctor: error: {_misuse(error, command)}")
    return error.exit_code


def _misuse(error: typer.TyperException, command: str) -> str:
    # Click's exceptions are typer's (vendored), and only BadParameter is named in its API: the
    # others are told apart by what they carry
    if isinstance(error, typer.BadParameter) and error.message:
        name = _named(error.param)
        return f"{name} {error.message}" if error.message.startswith("must ") else f"{name}: {error.message}"
    option, possible = getattr(error, "option_name", None), getattr(error, "possibilities", None)
    if option is not None and possible is not None:  # an option the command does not take
        guess = f" (did you mean {' or '.join(sorted(possible))}?)" if possible else ""
        return f"no option {option}{guess}: `{command} -h` lists them"
    said = error.format_message().strip()
    said = re.sub(r"\. Did you mean (.+)\?$", r" (did you mean \1?)", said).rstrip(".")
    return f"{said[:1].lower()}{said[1:]}: `{command} -h` says how it is used"


def _named(param: Any) -> str:
    """How an option is named in a message: its long name (``--keep-last``); an argument's in capitals."""
    opts = [str(name) for name in getattr(param, "opts", ())]
    if getattr(param, "param_type_name", "") == "argument" or not opts:
        return str(getattr(param, "name", "") or "the value").upper()
    return next((name for name in opts if name.startswith("--")), opts[0])
