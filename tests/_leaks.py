"""Whether repeated calls into a compiled extension leave descriptors or memory behind."""

from __future__ import annotations

import dis
import os
import tracemalloc
from collections.abc import Callable

FRAMES = 64
"""Frames kept of each allocation's stack: enough to reach ``calls`` from anything it calls."""


def assert_nothing_left_behind(calls: Callable[[], None], count: int) -> None:
    """``calls`` (``count`` calls of the function under test) twice: once to fill caches and free
    lists, then measured. No descriptor may stay open and no object may be kept per call (a
    leaked object costs at least 32 bytes). Only what is still held of the allocations made
    inside ``calls`` counts: a thread another test left running allocates meanwhile too."""
    descriptors = len(os.listdir("/proc/self/fd"))
    calls()
    tracemalloc.start(FRAMES)
    try:
        calls()
        kept = _held_from(tracemalloc.take_snapshot(), calls)
    finally:
        tracemalloc.stop()
    assert len(os.listdir("/proc/self/fd")) == descriptors
    assert kept < count * 32, f"{kept} bytes more after {count} calls: an object leaked per call"


def _held_from(snapshot: tracemalloc.Snapshot, function: Callable[[], None]) -> int:
    """Bytes still held of what was allocated with ``function`` on the stack."""
    code = function.__code__
    lines = {line for _, line in dis.findlinestarts(code) if line is not None}
    return sum(
        trace.size
        for trace in snapshot.traces
        if any(frame.filename == code.co_filename and frame.lineno in lines for frame in trace.traceback)
    )
