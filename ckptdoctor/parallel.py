"""Spread work over every core for big runs (hundreds of thousands of files).

Work is forked after its inputs are built: workers find them through the task's closure
(copy-on-write), so only results travel back. Below a size, or where fork is not available,
the work runs in this process: a pool costs more than it saves on small runs.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

PARALLEL_MIN = 4096
"""Below this many items a pool costs more than it saves."""
CHUNK = 2048

_task: Callable[[int, int], object] | None = None


def map_chunks(task: Callable[[int, int], T], total: int, chunk: int = CHUNK) -> list[T]:
    """``task(start, stop)`` for consecutive chunks of ``range(total)``, in order."""
    starts = range(0, total, chunk)
    workers = cores()
    if total < PARALLEL_MIN or workers < 2 or not sys.platform.startswith("linux"):
        return [task(start, min(start + chunk, total)) for start in starts]
    # imported only for big runs: process pools cost every other command start-up time
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    global _task
    _task = task
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=start_worker, initargs=(os.getpid(),)) as pool:
            stops = [min(start + chunk, total) for start in starts]
            return list(pool.map(_run_chunk, starts, stops))  # type: ignore[arg-type]
    finally:
        _task = None


def _run_chunk(start: int, stop: int) -> object:
    assert _task is not None
    return _task(start, stop)


def start_worker(parent: int) -> None:
    """Set up a forked worker: Ctrl-C is the parent's to handle (it stops the pool and exits 130),
    and the worker dies with its parent. A parent SIGKILLed mid-scan (OOM killer, ``timeout -s
    KILL``) would otherwise leave workers waiting for work for ever, holding the caller's output
    pipe and the run's filesystem."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        # only a big run starts a pool
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the line above
        os._exit(1)


_PR_SET_PDEATHSIG = 1


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
