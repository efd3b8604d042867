"""Probe many files at once on every core: big runs hold hundreds of thousands of files.

Readers are pure, so probing parallelises cleanly. Worker processes are forked after the
entries are known and find them in a module global (copy-on-write), so only the reports travel
back; clean reports are shared objects and pickle to almost nothing.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence

from ckptdoctor.model import Entry, FileReport

PARALLEL_MIN = 4096
"""Below this many files a pool costs more than it saves."""
CHUNK = 2048

_pending: Sequence[Entry] = ()
_probe: Callable[[Entry], FileReport] | None = None


def probe_all(entries: Sequence[Entry], probe: Callable[[Entry], FileReport]) -> list[FileReport]:
    workers = _cores()
    if len(entries) < PARALLEL_MIN or workers < 2 or not sys.platform.startswith("linux"):
        return [probe(entry) for entry in entries]
    # imported only for big runs: process pools cost every other command start-up time
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    global _pending, _probe
    _pending, _probe = entries, probe
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_quiet) as pool:
            starts = range(0, len(entries), CHUNK)
            results: list[FileReport] = []
            for chunk in pool.map(_probe_chunk, starts):
                results.extend(chunk)
            return results
    finally:
        _pending, _probe = (), None


def _probe_chunk(start: int) -> list[FileReport]:
    assert _probe is not None
    return [_probe(entry) for entry in _pending[start : start + CHUNK]]


def _quiet() -> None:
    # Ctrl-C is the parent's to handle: it stops the pool and exits 130
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
