"""Spread work over every core for big runs (hundreds of thousands of files, or gigabytes).

Work is forked after its inputs are built: workers find them in their copy of the parent's
memory, so only results travel back. Below a size, or where fork is not available, the work
runs in this process: forking costs more than it saves on small runs.

``forked`` is the one way work leaves the process: no ``multiprocessing`` to import (a pool costs
start-up time and threads that feed its queues), nothing but the results pickled. ``map_chunks``
(``inspect``'s reads without the compiled reader) and ``verify --jobs`` both run on it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Generator
from typing import NoReturn, TypeVar

T = TypeVar("T")

PARALLEL_MIN = 4096
"""Below this many items forking costs more than it saves."""
CHUNK = 2048
MAX_TASKS = 1024
"""Task numbers are written to a pipe before any worker reads it: 4 KiB, less than any pipe holds."""
_NUMBER = 4
"""Bytes of a task's number in the workers' common pipe (a read of 4 bytes is atomic)."""
_LENGTH = 8
"""Bytes of the length that leads each pickled frame a worker sends."""


def map_chunks(task: Callable[[int, int], T], total: int, chunk: int = CHUNK) -> list[T]:
    """``task(start, stop)`` for consecutive chunks of ``range(total)``, in order."""
    workers = cores()
    if total < PARALLEL_MIN or workers < 2 or not sys.platform.startswith("linux"):
        return [task(start, min(start + chunk, total)) for start in range(0, total, chunk)]
    chunk = max(chunk, -(-total // MAX_TASKS))
    starts = range(0, total, chunk)
    results: dict[int, T] = {}
    with contextlib.closing(forked(lambda number: task(starts[number], min(starts[number] + chunk, total)), len(starts), workers)) as done:
        for number, result in done:
            results[number] = result
    if len(results) < len(starts):
        raise RuntimeError(f"a worker process died (killed?): {len(starts) - len(results)} of {len(starts)} chunks were not done")
    return [results[number] for number in range(len(starts))]


def forked(run: Callable[[int], T], count: int, workers: int) -> Generator[tuple[int, T], None, None]:
    """``(n, run(n))`` for each ``n`` in ``range(count)`` (at most ``MAX_TASKS``), as each is
    done, run in ``workers`` forked processes; a task a dead worker took is never yielded (the
    caller counts what came back).

    The workers are forked with everything ``run`` needs in memory, take the next task's number
    from a common pipe, so that they end together however the machine slows one, and send each
    result back, pickled, on a pipe of their own; they end with ``os._exit``, with nothing to tear
    down. A worker that fails sends its exception, which is raised here; on Ctrl-C (which the
    workers ignore), an error, or when the caller stops early, every worker is killed."""
    if count > MAX_TASKS:
        raise ValueError(f"{count} tasks: at most {MAX_TASKS} fit the pipe of task numbers")
    # only forked work needs these: a small run starts without them
    import pickle
    import selectors

    numbers, numbers_end = os.pipe()
    # every task's number, written before any worker starts: once read to its end the pipe is empty
    os.write(numbers_end, b"".join(number.to_bytes(_NUMBER, "little") for number in range(count)))
    os.close(numbers_end)
    parent = os.getpid()
    children: dict[int, int] = {}  # result pipe -> pid
    try:
        for _ in range(min(workers, count)):
            results, results_end = os.pipe()
            try:
                pid = os.fork()
            except OSError:  # out of processes: the workers forked so far are stopped below
                os.close(results)
                os.close(results_end)
                raise
            if pid == 0:  # pragma: no cover - the worker (coverage does not follow a fork)
                _work(parent, run, numbers, results_end, inherited=(*children, results))
            os.close(results_end)
            children[results] = pid
        received = {pipe: bytearray() for pipe in children}
        with selectors.DefaultSelector() as selector:
            for pipe in children:
                selector.register(pipe, selectors.EVENT_READ)
            while selector.get_map():
                for key, _ in selector.select():
                    chunk = os.read(key.fd, 1 << 20)
                    if not chunk:  # the worker is done (a task it took and never sent is found missing)
                        selector.unregister(key.fd)
                        continue
                    frames = received[key.fd]
                    frames += chunk
                    while len(frames) >= _LENGTH and len(frames) >= _LENGTH + (length := int.from_bytes(frames[:_LENGTH], "little")):
                        value = pickle.loads(frames[_LENGTH : _LENGTH + length])
                        del frames[: _LENGTH + length]
                        if isinstance(value, BaseException):
                            raise value
                        yield value
    finally:
        os.close(numbers)
        for pipe, pid in children.items():  # done, failed or interrupted: no worker outlives the call
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(pipe)


def _work(
    parent: int, run: Callable[[int], object], numbers: int, results: int, inherited: tuple[int, ...]
) -> NoReturn:  # pragma: no cover
    """A forked worker: the tasks whose numbers it takes, each result sent as one frame.
    Whatever happens, it ends here, never back in the parent's code."""
    code = 0
    try:
        for pipe in inherited:
            os.close(pipe)
        start_worker(parent)
        while claimed := os.read(numbers, _NUMBER):
            number = int.from_bytes(claimed, "little")
            _send(results, (number, run(number)))
    except BaseException as error:  # handed to the parent, which raises it
        code = 1
        with contextlib.suppress(BaseException):
            try:
                _send(results, error)
            except BaseException:  # an exception that does not pickle: its traceback does
                # only a failing worker formats a traceback
                import traceback

                _send(results, RuntimeError(traceback.format_exc()))
    finally:
        os._exit(code)


def _send(pipe: int, value: object) -> None:
    # imported by forked before the fork
    import pickle

    data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    view = memoryview(len(data).to_bytes(_LENGTH, "little") + data)
    while view:
        view = view[os.write(pipe, view) :]


def start_worker(parent: int) -> None:
    """Set up a forked worker: Ctrl-C is the parent's to handle (it stops the workers and exits
    130), SIGTERM ends it at once, and the worker dies with its parent. A parent SIGKILLed mid-scan (OOM killer, ``timeout
    -s KILL``) would otherwise leave workers running for ever, holding the caller's output pipe and
    the run's filesystem."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's handler lets go of its locks; a worker holds none
    if sys.platform.startswith("linux"):
        # only forked work gets here
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
