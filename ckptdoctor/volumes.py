"""The filesystem under a path: its mount, type, size and free space (``diskcheck``, and the cause
of a save cut short: a full disk)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ckptdoctor.model import Volume


def volume(path: str) -> Volume:
    """The filesystem that holds ``path`` (or would hold it: its nearest existing parent);
    OSError if nothing of it can be reached."""
    import psutil  # only diskcheck pays for it

    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    usage = psutil.disk_usage(existing)
    info = os.statvfs(existing)
    mountpoint, fstype = _mount(existing, psutil.disk_partitions(all=True))
    return Volume(existing, mountpoint, fstype, usage.total, usage.free, info.f_favail if info.f_files else None)


def _mount(path: str, partitions: Sequence[Any]) -> tuple[str, str]:
    """The mount that holds ``path``: the longest mount point above its real path."""
    real = os.path.realpath(path)
    best = ("/", "unknown")
    for partition in partitions:
        point = partition.mountpoint
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):  # on one mount point, the one listed last is on top
            best = (point, partition.fstype)
    return best
