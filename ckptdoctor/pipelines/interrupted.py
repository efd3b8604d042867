"""What the world says of a save that stopped part-way (CKD117): whether a live process of this
machine still holds its files, how long ago they were written, and whether its volume has room for
the rest of it. Asked only of a run with such a checkpoint, once per run (one reading of the
process table, one of the volume): a healthy run costs nothing."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from ckptdoctor import processes, volumes
from ckptdoctor.discover import remote
from ckptdoctor.model import Cause, Checkpoint, Interruption, Run, Status, Volume

FULL = 1 << 20
"""Less free space than this is a full volume, whatever the save still needed."""


def with_interruptions(runs: Sequence[Run], now: float) -> tuple[Run, ...]:
    """``runs`` with what the world says of each of their unfinished checkpoints (``Run.unfinished``)."""
    said: set[str] = set()  # each process the table hides is named once per command
    asked = []
    for run in runs:
        unfinished = run.unfinished
        asked.append(dataclasses.replace(run, interrupted=_asked(run, unfinished, now, said)) if unfinished else run)
    return tuple(asked)


def _asked(run: Run, unfinished: Sequence[Checkpoint], now: float, said: set[str]) -> tuple[Interruption, ...]:
    if remote(run.path):  # a store has no process table or free space to ask
        return tuple(Interruption(c.index, Cause.CUT_SHORT, _age(c, now)) for c in unfinished)
    entries = [f.entry for c in unfinished for f in c.files]
    held, note = processes.open_by([e.os_path for e in entries], {e.os_path: e.inode for e in entries if e.inode}, said)
    unknown = any(isinstance(holder, str) for holder in held.values())  # the table could not be read
    try:
        found: Volume | None = volumes.volume(os.path.dirname(entries[0].os_path)) if entries else None
    except OSError:
        found = None
    wanted = _wanted(run, unfinished)
    interruptions = []
    for checkpoint in unfinished:
        pids = {pid for f in checkpoint.files if isinstance(pid := held.get(f.entry.os_path), int)}
        mine = {f.entry.inode for f in checkpoint.files if f.entry.inode}
        writers = {pid for pid in pids if processes.writing(pid, mine)}
        holders = tuple(sorted(processes.named(pid) for pid in writers))
        readers = tuple(sorted(processes.named(pid) for pid in pids - writers))
        rest = wanted.get(id(checkpoint))
        if holders:
            cause = Cause.BEING_WRITTEN
        elif found is not None and found.free_bytes < max(FULL, rest or 0):
            cause = Cause.DISK_FULL
        elif unknown or found is None:  # whether a save goes on here is not known
            cause = Cause.CUT_SHORT
        else:
            cause = Cause.KILLED
        interruptions.append(Interruption(checkpoint.index, cause, _age(checkpoint, now), holders, readers, found, rest, note is not None))
    return tuple(interruptions)


def _age(checkpoint: Checkpoint, now: float) -> float | None:
    """Seconds since its newest file was written; None where a file's time is unknown or ahead of ``now``."""
    times = [f.entry.mtime for f in checkpoint.files]
    if not times or not all(times) or max(times) > now:  # a file dated ahead of the clock has no age to tell
        return None
    return now - max(times)


def _wanted(run: Run, unfinished: Sequence[Checkpoint]) -> dict[int, int]:
    """What the rest of each unfinished save needed (by ``id``): the newest complete checkpoint
    before it, less what it holds; none where no complete checkpoint comes before it."""
    wanted: dict[int, int] = {}
    cut = {id(c) for c in unfinished}
    last: Checkpoint | None = None
    for checkpoint in run.checkpoints:  # in the run's order: one pass, whatever the run's size
        if id(checkpoint) in cut and last is not None:
            wanted[id(checkpoint)] = max(0, last.bytes - checkpoint.bytes)
        if checkpoint.status is Status.COMPLETE:
            last = checkpoint
    return wanted
