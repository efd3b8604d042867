"""Carry out a plan on disk, so that a kill at any instant loses nothing that was to be kept.

Everything lives in the run's own ``.ckptdoctor/`` folder (the same filesystem, so a move is one
``rename``):

- ``lock``: an advisory ``flock`` for the whole command; its content says who holds it.
- ``trash/<id>/journal.json``: written (and fsynced) before anything moves; it lists exactly
  the entries the plan deletes.
- then each entry is renamed into ``trash/<id>/``, then the trash is removed, then the journal.

Killed before the journal is complete: nothing moved. Killed later: only planned entries moved
or gone, and the next command under the lock finishes what the journal lists.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from ckptdoctor.discover import OWN_FOLDER
from ckptdoctor.model import Action, Plan

LOCK = "lock"
TRASH = "trash"
JOURNAL = "journal.json"


class Locked(Exception):
    """Another ckptdoctor holds the run's lock."""

    def __init__(self, run: str, holder: str) -> None:
        super().__init__(f"{run} is locked by another ckptdoctor ({holder}); try again when it has finished")
        self.holder = holder


class ActionError(Exception):
    """The run cannot be changed (read-only, permissions); nothing was half done."""


@dataclass(frozen=True)
class Done:
    deleted: int
    """Checkpoints removed."""
    files: int
    freed_bytes: int


def own_folder(root: str) -> str:
    return os.path.join(root, OWN_FOLDER)


@contextlib.contextmanager
def locked(root: str, run: str) -> Iterator[None]:
    """Hold the run's lock; raises Locked (naming the holder) or ActionError at once."""
    folder = own_folder(root)
    try:
        os.makedirs(folder, exist_ok=True)
        handle = os.open(os.path.join(folder, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise ActionError(f"cannot create {os.path.join(run, OWN_FOLDER, LOCK)}: {error.strerror}") from error
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Locked(run, _holder(handle)) from None
        if os.fstat(handle).st_ino != os.stat(os.path.join(folder, LOCK)).st_ino:
            raise Locked(run, "its lock file was replaced meanwhile")
        os.ftruncate(handle, 0)
        os.pwrite(handle, json.dumps(_whoami()).encode(), 0)
        yield
    finally:
        os.close(handle)  # closing releases the flock (the kernel does it too, if we are killed)


def _whoami() -> dict[str, object]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "user": getpass.getuser(), "started": time.time()}


def _holder(handle: int) -> str:
    try:
        info = json.loads(os.pread(handle, 4096, 0) or b"{}")
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["started"])))
        return f"pid {info['pid']} on {info['host']} by {info['user']}, since {started}"
    except (ValueError, KeyError, TypeError, OSError):
        return "holder unknown"


def pending(root: str) -> list[str]:
    """Journals a killed command left in the run (what ``finish_interrupted`` would complete)."""
    trash = os.path.join(own_folder(root), TRASH)
    if not os.path.isdir(trash):
        return []
    return [os.path.join(trash, name, JOURNAL) for name in sorted(os.listdir(trash)) if os.path.isfile(os.path.join(trash, name, JOURNAL))]


def finish_interrupted(root: str, busy: frozenset[str] = frozenset()) -> int:
    """Complete what an earlier, killed command's journals list; returns the entries finished.

    Only what the journal meant is moved: an entry outside the run, one modified after the journal
    was written (the run was restarted since), or one a live process holds open (``busy``) stays.
    """
    trash = os.path.join(own_folder(root), TRASH)
    finished = 0
    if not os.path.isdir(trash):
        return 0
    real_root = os.path.realpath(root)
    for name in sorted(os.listdir(trash)):
        folder = os.path.join(trash, name)
        journal = os.path.join(folder, JOURNAL)
        if not os.path.isfile(journal):
            shutil.rmtree(folder, ignore_errors=True)  # killed before its journal was whole: nothing moved
            continue
        try:
            written = os.stat(journal).st_mtime
            with open(journal, encoding="utf-8") as handle:
                listed = [str(path) for path in json.load(handle)["entries"]]
            meant = [path for path in listed if _still_meant(root, real_root, path, written, busy)]
            finished += _move_and_remove(root, folder, listed, meant)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ActionError(
                f"an interrupted prune left {journal}, which cannot be completed ({error}); "
                "check that folder, then delete it to go on"
            ) from error
    return finished


def _still_meant(root: str, real_root: str, relative: str, written: float, busy: frozenset[str]) -> bool:
    path = os.path.join(root, relative)
    real = os.path.realpath(os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)))
    if os.path.isabs(relative) or not real.startswith(real_root + os.sep) or path in busy:
        return False
    try:
        return os.lstat(path).st_mtime <= written
    except FileNotFoundError:
        return False


def delete(plan: Plan, root: str) -> Done:
    """Delete what ``plan`` says (under the caller's lock, after ``finish_interrupted``):
    journal, move to trash, remove."""
    doomed = [item for item in plan.items if item.action is Action.DELETE]
    relative = [os.path.relpath(entry.os_path, root) for item in doomed for entry in item.entries]
    if any(path.startswith(os.pardir) or os.path.isabs(path) for path in relative):
        raise ActionError("the plan names files outside the run: refused")
    if not relative:
        return Done(0, 0, 0)
    folder = os.path.join(own_folder(root), TRASH, f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}")
    try:
        os.makedirs(folder)
        _write_atomically(os.path.join(folder, JOURNAL), {"run": plan.run, "entries": relative})
    except OSError as error:
        shutil.rmtree(folder, ignore_errors=True)
        raise ActionError(f"cannot write in {plan.run}: {error.strerror}; nothing was deleted") from error
    _move_and_remove(root, folder, relative)
    return Done(len(doomed), len(relative), plan.freed_bytes)


def _move_and_remove(root: str, folder: str, relative: list[str], meant: list[str] | None = None) -> int:
    """Move each listed entry (if still in the run, and still ``meant``) into ``folder``, then
    remove ``folder``."""
    moved = 0
    wanted = set(relative if meant is None else meant)
    for number, path in enumerate(relative):
        source = os.path.join(root, path)
        if path in wanted and os.path.lexists(source):
            os.rename(source, os.path.join(folder, f"{number:06d}"))
            moved += 1
    with os.scandir(folder) as items:
        for item in items:
            if item.name == JOURNAL:
                continue
            if item.is_dir(follow_symlinks=False):
                shutil.rmtree(item.path)
            else:
                os.unlink(item.path)
    os.unlink(os.path.join(folder, JOURNAL))  # last: until here a rerun would finish the job
    os.rmdir(folder)
    return moved


def _write_atomically(path: str, document: dict[str, object]) -> None:
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(document, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    directory = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
