"""Will the next save fit? The volume under a run, the size of its next save, and how many more
saves its retention leaves room for (``diskcheck``, ``ckptdoctor.preflight``).

``estimate``, ``runway``, ``growth`` and ``bucket_check`` are pure; ``volume`` and ``why_unwritable``
ask the system (psutil, statvfs, and one probe file that is written, fsynced and removed). A run in
a bucket has no volume: ``stores.probe`` tries what the store allows, and ``bucket_check`` puts
that beside the run's growth.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import time
import uuid
from collections.abc import Mapping
from types import MappingProxyType

from ckptdoctor.errors import InvalidValue
from ckptdoctor.model import Access, BucketCheck, DiskCheck, Estimate, Freeing, Growth, Run, Status, Volume
from ckptdoctor.optimizers import STATE
from ckptdoctor.places import nearest_existing, run_root
from ckptdoctor.units import counted, size
from ckptdoctor.volumes import volume as volume

OPTIMIZER_STATE: Mapping[str, float] = MappingProxyType({kind: size.typical for kind, size in STATE.items()})
"""Optimizer state per byte of parameters with default settings (``ckptdoctor.optimizers``)."""

RECENT = 3
"""How many of the newest complete checkpoints the estimate looks at (the largest wins)."""
MARGIN = 0.10
"""Headroom on top of the estimate: saves vary (metadata, growing state), and filesystems
allocate in blocks."""
MAX_MARGIN = 10.0
"""More headroom than this (ten times the save) is a typo, not a margin."""


class EstimateError(InvalidValue):
    """A model size or optimizer that cannot be used (exit 2)."""


def estimate(run: Run | None, model_bytes: int | None = None, optimizer: str | None = None, model_first: bool = True) -> Estimate | None:
    """The next save of ``run``: the model's bytes plus the optimizer's state where a model size
    is given (the user knows the next save better: a bigger model, another optimizer), else the
    largest of the run's newest complete checkpoints (all roles); None when nothing says.
    ``model_first`` False: the run's checkpoints win, and the model sizes only a run's first save
    (a training callback, which always knows its model, sizes later saves by what was written)."""
    measured = _measured(run)
    if model_bytes is None or (measured is not None and not model_first):
        return measured
    if optimizer is None:
        raise EstimateError("--optimizer is needed with a model size: the optimizer's state is most of a save (adam keeps 2x the model)")
    if optimizer not in OPTIMIZER_STATE:
        raise EstimateError(f"unknown optimizer {optimizer!r} (known: {', '.join(OPTIMIZER_STATE)})")
    state = OPTIMIZER_STATE[optimizer]
    basis = f"model {size(model_bytes)} + {optimizer} state ({state:g}x the model)"
    if measured is not None:  # the size given wins: said, beside what the run's own saves measure
        basis += f", from the model size given; the run's last saves measure {size(measured.bytes)}"
    return Estimate(math.ceil(model_bytes * (1 + state)), measured.files if measured is not None else 3, basis)


def _measured(run: Run | None) -> Estimate | None:
    """The next save as ``run``'s saves measure it: the largest of its newest complete checkpoints."""
    complete = [c for c in run.checkpoints if c.status is Status.COMPLETE][-RECENT:] if run is not None else []
    if run is None or not complete:
        return None
    largest = max(complete, key=lambda c: c.bytes)
    unit = run.unit.value
    basis = (
        f"the largest of the last {counted(len(complete), 'complete ' + unit)}: {unit} {largest.index}"
        if len(complete) > 1
        else f"the only complete {unit}: {unit} {largest.index}"
    )
    return Estimate(largest.bytes, len(largest.files) + (1 if largest.folder is not None else 0), basis)


def needed(estimate: Estimate, margin: float = MARGIN) -> int:
    return math.ceil(estimate.bytes * (1 + margin))


def runway(estimate: Estimate, free_bytes: int, kept: int, keep_last: int | None, margin: float = MARGIN) -> int | None:
    """How many more saves fit in ``free_bytes``: each adds ``estimate`` until retention (keep
    the last ``keep_last``) deletes an older one *after* the new one is written. None when
    retention holds the run within the free space for good. ``kept`` is how many the run holds."""
    step = needed(estimate, margin)
    if step <= 0:
        return None
    if keep_last is not None:
        growth = max(0, keep_last - kept)
        if free_bytes >= growth * estimate.bytes + step:
            return None  # up to keep_last, then every save frees as much as it takes
    return max(0, (free_bytes - step) // estimate.bytes + 1) if free_bytes >= step else 0


def why_unwritable(folder: str) -> str:
    """Why ``folder`` cannot take a save ('' when it can): a probe file is created, written,
    fsynced and removed in it; a folder that does not exist yet is judged by whether it could be
    created (nothing is created)."""
    if not os.path.isdir(folder):
        if os.path.lexists(folder):
            return f"{folder} exists and is not a folder"
        parent = nearest_existing(os.path.abspath(folder))
        if not os.path.isdir(parent):
            return f"{parent} is not a folder"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"{folder} does not exist, and {parent} does not let this user create it"
        return ""
    name = os.path.join(folder, f".ckptdoctor-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        handle = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as error:
        return f"cannot create a file in {folder}: {error.strerror}{_which(error)}"
    try:
        try:
            os.write(handle, b"\0" * 4096)
            os.fsync(handle)
        except OSError as error:
            return f"cannot write to {folder}: {error.strerror}{_which(error)}"
        finally:
            os.close(handle)
    finally:
        with contextlib.suppress(OSError):  # gone already, or the folder turned read-only: nothing to undo
            os.unlink(name)
    return ""


def _which(error: OSError) -> str:
    """Whether a failed probe met a full disk or a folder this user may not write (CKD503's fixes differ)."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return " (the disk is full, or the quota used up)"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return " (this user may not write there)"
    return ""


def check(
    path: str,
    run: Run | None,
    model_bytes: int | None = None,
    optimizer: str | None = None,
    keep_last: int | None = None,
    margin: float = MARGIN,
    model_first: bool = True,
) -> DiskCheck:
    """Everything ``diskcheck`` measures about the folder ``path`` (the run's, or where one
    will be): the volume, writability, the next save (``estimate``), and the runway under
    ``keep_last``."""
    folder = run_root(run) if run is not None else path
    try:
        found: Volume | None = volume(folder)
    except OSError:
        found = None
    why = why_unwritable(folder)
    guess = estimate(run, model_bytes, optimizer, model_first)
    kept = len(run.checkpoints) if run is not None else 0
    need = needed(guess, margin) if guess is not None else 0
    left = runway(guess, found.free_bytes, kept, keep_last, margin) if guess is not None and found is not None else None
    fit = freeing(run, need, found.free_bytes) if run is not None and found is not None and guess is not None else None
    return DiskCheck(folder, found, not why, why, guess, need, keep_last, left, _sizes(run), os.path.isdir(folder), freeing=fit)


def freeing(run: Run, needed_bytes: int, free_bytes: int, now: float | None = None) -> Freeing | None:
    """Where ``free_bytes`` fall short of ``needed_bytes``: the most complete checkpoints a prune
    of ``run`` can keep (``--keep-last N``) and still free the rest, as ``prune`` would plan it
    now (the resume point, pointers and files held back are kept); at the default --min-age, else
    at --min-age 0 where only checkpoints written since free enough. None where nothing is short."""
    if free_bytes >= needed_bytes:
        return None
    # loaded when space is short: a trainer's preflight that fits loads no planner of prune
    from ckptdoctor.actions.disk import folder_contents
    from ckptdoctor.layouts.registry import layout_named
    from ckptdoctor.planners.retention import MIN_AGE, Circumstances, Policy, plan

    layout = layout_named(run.layout)
    inside, deep = folder_contents(run)
    world = Circumstances(time.time() if now is None else now, inside=inside, too_deep=deep)
    shortfall = needed_bytes - free_bytes
    kept = max(1, sum(1 for c in run.checkpoints if c.status is Status.COMPLETE))

    def freed(keep_last: int, min_age: float) -> int:
        return plan(run, layout, Policy(keep_last=keep_last, min_age=min_age), world).freed_bytes

    for min_age in (MIN_AGE, 0.0):
        if freed(1, min_age) < shortfall:
            continue
        fewest, most = 1, kept  # what a prune frees shrinks as it keeps more: the most it may keep, by halving
        while fewest < most:
            middle = (fewest + most + 1) // 2
            fewest, most = (middle, most) if freed(middle, min_age) >= shortfall else (fewest, middle - 1)
        return Freeing(fewest, freed(fewest, min_age), shortfall, young=MIN_AGE if min_age == 0.0 else 0.0)
    return Freeing(None, freed(1, 0.0), shortfall)


def _sizes(run: Run | None) -> tuple[tuple[int, int], ...]:
    """(index, bytes) of each of the run's checkpoints, oldest first."""
    return tuple((c.index, c.bytes) for c in run.checkpoints) if run is not None else ()


MONTH = 30 * 24 * 3600
"""Seconds in the month growth is given per."""


def growth(run: Run | None, keep_last: int | None, deletes_free_nothing: bool = False) -> Growth | None:
    """How ``run`` grows in its bucket: the mean bytes of its checkpoints per save, the saves a
    month its checkpoints' last-modified times (the store's clock) show, and what it holds for
    good at ``keep_last`` (none: it grows without bound, as where deletes free nothing)."""
    saved = [c for c in run.checkpoints if c.files] if run is not None else []
    if not saved:
        return None
    stored = sum(c.bytes for c in saved)
    per_save = round(stored / len(saved))
    times = sorted(max(f.entry.mtime for f in c.files) for c in saved)
    span = times[-1] - times[0]
    per_month = (len(times) - 1) * MONTH / span if len(times) > 1 and span > 0 else None
    monthly = round(per_save * per_month) if per_month is not None else None
    steady = keep_last * per_save if keep_last is not None and not deletes_free_nothing else None
    return Growth(len(saved), stored, per_save, per_month, monthly, keep_last, steady, deletes_free_nothing)


def bucket_check(
    url: str,
    run: Run | None,
    probed: BucketCheck,
    model_bytes: int | None = None,
    optimizer: str | None = None,
    keep_last: int | None = None,
    margin: float = MARGIN,
    model_first: bool = True,
) -> DiskCheck:
    """``diskcheck`` of the run at ``url`` in a bucket: what the probes found, the next save
    (``estimate``), and the growth at ``keep_last``; no volume, so no free space and no runway."""
    write = next((p for p in probed.permissions if p.action == "write"), None)
    writable = write is not None and write.access is Access.GRANTED
    why = "" if writable else (write.detail if write is not None and write.detail else "the write probe could not be made")
    guess = estimate(run, model_bytes, optimizer, model_first)
    frees_nothing = probed.versioned and probed.expires_noncurrent is not True
    return DiskCheck(
        url,
        None,
        writable,
        why,
        guess,
        needed(guess, margin) if guess is not None else 0,
        keep_last,
        None,
        _sizes(run),
        probed.has_objects,
        bucket=probed,
        growth=growth(run, keep_last, frees_nothing),
    )
