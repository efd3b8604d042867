"""Whether repeated calls into a compiled extension leave descriptors or memory behind."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable


def assert_nothing_left_behind(calls: Callable[[], None], count: int) -> None:
    """``calls`` (``count`` calls of the function under test) twice: once to fill caches and free
    lists, then measured. No descriptor may stay open and no object may be kept per call (a
    leaked object costs at least 32 bytes)."""
    descriptors = len(os.listdir("/proc/self/fd"))
    calls()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        calls()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(os.listdir("/proc/self/fd")) == descriptors
    assert after - before < count * 32, f"{after - before} bytes more after {count} calls: an object leaked per call"
