"""The ``ckptdoctor`` program (its console script, and ``python -m ckptdoctor``).

A command is a short process that builds its objects and keeps them to the end. So the cyclic
collector is off from the first import on (typer and the tables import thousands of objects it
would walk again and again), and a process that ends with its output written, nothing left to run
at exit and no thread still working, ends at once (``os._exit``), without freeing its heap object
by object. Anything else, and the interpreter ends it as always: an error writing stdout is
reported as Python reports it, exit handlers run, threads are waited for.

:func:`ckptdoctor.cli.main` stays an ordinary function (the tests, and programs that run the
command line in their own process, call it); only this entry point ends the process itself.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from typing import NoReturn


def program() -> NoReturn:
    gc.disable()
    # after the collector is off: the command line and everything it imports
    from ckptdoctor.cli import main

    code: str | int | None = None
    try:
        main()
    except SystemExit as done:
        code = done.code
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
