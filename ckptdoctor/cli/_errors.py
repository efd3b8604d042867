"""The one place where what stops a command becomes its message and exit code (as the ``hf``
command line's ``CLI_ERROR_MAPPINGS``): each kind of :class:`~ckptdoctor.errors.CkptdoctorError`
carries its exit code, and says itself in one line per reason. Anything else that escapes a
command is a bug, and ``cli.main`` says "internal error"."""

from __future__ import annotations

import contextlib
import errno
import sys
from collections.abc import Iterator

import typer

from ckptdoctor.errors import EXIT_FINDINGS, EXIT_USAGE, CkptdoctorError, StoreError
from ckptdoctor.render.lines import fill, stderr_width

ACTING = frozenset({"prune", "repair"})
"""Commands that change runs: what stops them part-way says that nothing to be kept was touched."""
UNTOUCHED = "nothing that was to be kept was touched"


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
