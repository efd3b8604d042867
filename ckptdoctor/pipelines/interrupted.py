"""What the world says of a save that stopped part-way (CKD117): whether a live process of this
machine still holds its files, how long ago they were written, and whether its volume has room for
the rest of it. Asked only of a run with such a checkpoint: a healthy run costs nothing."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from ckptdoctor import processes
from ckptdoctor.discover import remote
from ckptdoctor.model import Cause, Checkpoint, Interruption, Run, Status
from ckptdoctor.volumes import volume

FULL = 1 << 20
"""Less free space than this is a full volume, whatever the save still needed."""


def with_interruptions(runs: Sequence[Run], now: float) -> tuple[Run, ...]:
    """``runs`` with what the world says of each of their unfinished checkpoints (``Run.unfinished``)."""
    said: set[str] = set()  # each process the table hides is named once per command
    return tuple(
        dataclasses.replace(run, interrupted=tuple(_asked(run, checkpoint, now, said) for checkpoint in run.unfinished))
        if run.unfinished
        else run
        for run in runs
    )


def _asked(run: Run, checkpoint: Checkpoint, now: float, said: set[str]) -> Interruption:
    entries = [f.entry for f in checkpoint.files]
    times = [e.mtime for e in entries if e.mtime]
    age = max(0.0, now - max(times)) if times and len(times) == len(entries) else None
    if remote(run.path) or not entries:  # a store has no process table or free space to ask
        return Interruption(checkpoint.index, Cause.CUT_SHORT, age)
    held, _ = processes.open_by([e.os_path for e in entries], {e.os_path: e.inode for e in entries if e.inode}, said)
    if any(isinstance(holder, str) for holder in held.values()):  # the table could not be read: whether a save goes on is unknown
        return Interruption(checkpoint.index, Cause.CUT_SHORT, age)
    holders = tuple(dict.fromkeys(processes.named(pid) for pid in held.values() if isinstance(pid, int)))
    wanted = _wanted(run, checkpoint)
    try:
        found = volume(os.path.dirname(entries[0].os_path))
    except OSError:
        found = None
    if holders:
        cause = Cause.BEING_WRITTEN
    elif found is not None and found.free_bytes < max(FULL, wanted or 0):
        cause = Cause.DISK_FULL
    elif found is not None:
        cause = Cause.KILLED
    else:
        cause = Cause.CUT_SHORT
    return Interruption(checkpoint.index, cause, age, holders, found, wanted)


def _wanted(run: Run, checkpoint: Checkpoint) -> int | None:
    """What the rest of the save needed: the newest complete checkpoint before it, less what it holds."""
    earlier = [c for c in run.checkpoints if c.status is Status.COMPLETE and c.index <= checkpoint.index and c is not checkpoint]
    return max(0, earlier[-1].bytes - checkpoint.bytes) if earlier else None
