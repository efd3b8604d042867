"""Interleaved rounds of in-process measures: what the benchmarks that time functions share."""

from __future__ import annotations

import time
from collections.abc import Callable


def interleaved(measures: dict[str, Callable[[], object]], repeat: int) -> dict[str, list[float]]:
    """Seconds of each measure in each of ``repeat`` rounds, after one untimed pass each (the same
    warm cache for all). Each round starts one measure further on, so that a noisy neighbour or
    a cache one measure leaves warm for the next favours none of them."""
    names = list(measures)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        measures[name]()
    for round_ in range(repeat):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            start = time.perf_counter()
            measures[name]()
            times[name].append(time.perf_counter() - start)
    return times
