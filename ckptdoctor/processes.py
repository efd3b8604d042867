"""Which files live processes hold open (psutil): ``prune`` never deletes those."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

BUDGET = 2.0
"""Seconds the process table may take to read; past that, the rest is skipped with a note."""


def open_by(paths: Iterable[str], budget: float = BUDGET) -> tuple[dict[str, int], str | None]:
    """``{path: pid}`` for the given paths some process has open, and a note when the process table
    could not be read (none of its processes, or not within the time budget). A few unreadable
    processes (a container's init) are expected and not noted."""
    import psutil  # only the acting commands read the process table

    wanted = _resolved(paths)
    found: dict[str, int] = {}
    hidden = seen = 0
    started = time.monotonic()
    try:
        processes = list(psutil.process_iter())
    except (psutil.Error, OSError) as error:
        return found, f"the process table cannot be read ({error}): files held open were not checked"
    for process in processes:
        seen += 1
        if time.monotonic() - started > budget:
            return found, f"the process table was read for {budget:g} s only: open files of the rest were not checked"
        try:
            files = process.open_files()
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            hidden += 1
            continue
        for file in files:
            path = wanted.get(file.path)
            if path is not None:
                found[path] = process.pid
    if seen and hidden == seen:
        return found, "no process's open files could be read: files held open were not checked"
    return found, None


def _resolved(paths: Iterable[str]) -> dict[str, str]:
    """Each path under its real name (what the process table shows), resolving each folder once:
    a run reached through a symlinked folder (``/data`` -> ``/mnt/data``) still matches."""
    folders: dict[str, str] = {}
    resolved: dict[str, str] = {}
    for path in paths:
        folder, name = os.path.split(path)
        real = folders.get(folder)
        if real is None:
            real = folders[folder] = os.path.realpath(folder or ".")
        resolved[os.path.join(real, name)] = path
    return resolved
