"""The ``ckptdoctor`` program (its console script, and ``python -m ckptdoctor``).

A command is a short process that builds its objects and keeps them to the end. So the cyclic
collector is off from the first import on (typer and the tables import thousands of objects it
would walk again and again), and a process that ends with its output written, nothing left to run
at exit and no thread still working, ends at once (``os._exit``), without freeing its heap object
by object. Anything else, and the interpreter ends it as always: an error writing stdout is
reported as Python reports it, exit handlers run, threads are waited for.

:func:`ckptdoctor.cli.main` stays an ordinary function (the tests, and programs that run the
command line in their own process, call it); only this entry point ends the process itself.

Ctrl-C is "Interrupted." and exit 130 from this module's first statement on: until ``cli.main``
sets its own handling, and once it is done, nothing is held, so the process ends at once. (Before
it, in the interpreter's own start-up, Python says what it says: a window of a few ms.)
"""

from __future__ import annotations

# Only modules the interpreter has loaded before any program runs (a look-up, no file to find
# and read: a Ctrl-C then would still be Python's KeyboardInterrupt); `signal` is the Python
# face of `_signal`, and a file to import.
import _signal  # type: ignore[import-not-found]  # no stub: it is CPython's own
import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing's flag, without importing typing before the handler is set
    from types import FrameType


def _interrupted(signum: int, frame: FrameType | None) -> None:
    # in the middle of an import, with nothing taken yet: no exception that an import could
    # swallow or show as a traceback, and no stdio buffer that a write might find half-used
    os.write(2, b"Interrupted.\n")
    os._exit(130)


_signal.signal(_signal.SIGINT, _interrupted)  # first: typer and the command line take ~0.1 s to import

import atexit  # noqa: E402
import gc  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from typing import NoReturn  # noqa: E402


def program() -> NoReturn:
    gc.disable()
    # after the collector is off: the command line and everything it imports
    from ckptdoctor.cli import main

    code: str | int | None = None
    try:
        main()
    except SystemExit as done:
        code = done.code
    _signal.signal(_signal.SIGINT, _interrupted)  # the command is over: a Ctrl-C now ends it as one at start-up does
    if (code is None or isinstance(code, int)) and _ended_cleanly():
        os._exit(code or 0)
    sys.exit(code)


def _ended_cleanly() -> bool:
    """Whether the process can end now, as the interpreter would, minus freeing its memory: no
    thread left to wait for, the exit handlers run, and stdout and stderr flushed without error.
    (An exit handler that itself needs the heap torn down, none of ckptdoctor's, would be run here
    all the same: what it writes is flushed below.)"""
    if any(thread.is_alive() and not thread.daemon for thread in threading.enumerate() if thread is not threading.main_thread()):
        return False
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is None or stream.closed:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):  # reported by the interpreter's own exit, which flushes again
            return False
    return True


if __name__ == "__main__":
    program()
