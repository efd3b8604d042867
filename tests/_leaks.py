"""Whether repeated calls into a compiled extension leave descriptors or memory behind."""

from __future__ import annotations

import dis
import itertools
import os
import tracemalloc
from collections.abc import Callable

FRAMES = 64
"""Frames kept of each allocation's stack: enough to reach ``calls`` from anything it calls."""

ROUNDS = 3
"""Measured rounds of ``calls``, after one that fills caches and free lists."""


def assert_nothing_left_behind(calls: Callable[[], None], count: int) -> None:
    """``calls`` (``count`` calls of the function under test), once to fill caches and free lists,
    then ``ROUNDS`` times measured. No descriptor may stay open and no object may be kept per call
    (a leaked object costs at least 32 bytes), so what is held of the allocations made inside
    ``calls`` must not grow by ``count * 32`` bytes in every round. One measure is not enough: an
    object the interpreter recycles (a list or tuple from a free list, reused by code outside
    ``calls``) keeps the stack of its first allocation, so the level holds a bounded amount of
    noise (up to 9 KiB seen after 100 listings), which a leak outgrows round after round."""
    descriptors = len(os.listdir("/proc/self/fd"))
    calls()
    tracemalloc.start(FRAMES)
    try:
        levels = []
        for _ in range(ROUNDS):
            calls()
            levels.append(_held_from(tracemalloc.take_snapshot(), calls))
    finally:
        tracemalloc.stop()
    assert len(os.listdir("/proc/self/fd")) == descriptors
    growth = [later - earlier for earlier, later in itertools.pairwise(levels)]
    assert min(growth) < count * 32, f"{levels} bytes held after each {count} calls: an object leaked per call"


def _held_from(snapshot: tracemalloc.Snapshot, function: Callable[[], None]) -> int:
    """Bytes still held of what was allocated with ``function`` on the stack."""
    code = function.__code__
    lines = {line for _, line in dis.findlinestarts(code) if line is not None}
    return sum(
        trace.size
        for trace in snapshot.traces
        if any(frame.filename == code.co_filename and frame.lineno in lines for frame in trace.traceback)
    )
