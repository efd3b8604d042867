"""Carry out a plan on disk, so that a kill at any instant loses nothing that was to be kept.

Everything lives in the run's own ``.ckptdoctor/`` folder (the same filesystem, so a move is one
``rename``):

- ``lock``: an advisory ``flock`` for the whole command; its content says who holds it.
- ``trash/<id>/journal.json``: written (and fsynced) before anything moves; it lists exactly
  the entries the plan deletes.
- then each entry is renamed into ``trash/<id>/``, then the trash is removed, then the journal.

Killed before the journal is complete: nothing moved. Killed later: only planned entries moved
or gone, and the next command under the lock finishes what the journal lists.

- ``quarantine/<id>/``: where ``repair`` moves what it takes out of the run (never deleting), with
  a manifest that ``repair --undo`` reads to put it all back.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import getpass
import json
import os
import shutil
import socket
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from ckptdoctor.discover import OWN_FOLDER
from ckptdoctor.model import Action, Plan, PointerKind, PointerWrite
from ckptdoctor.regular import read_regular

MAX_JOURNAL = 256 * 1024 * 1024
"""A journal or manifest longer than this is refused: ckptdoctor never wrote it."""
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
    left: int = 0
    """Entries left because they were written or opened after the plan was made."""


def home_of(root: str, beside: bool) -> str:
    """Where ckptdoctor keeps its lock, journals and quarantines for the run in ``root``: in it
    (``<run>/.ckptdoctor``), or ``beside`` it (``<parent>/.ckptdoctor/<run name>``) for frameworks
    that read every name in the run folder. Either way on the run's filesystem, as a move must be."""
    if beside:
        absolute = os.path.abspath(root)
        return os.path.join(os.path.dirname(absolute), OWN_FOLDER, os.path.basename(absolute))
    return os.path.join(root, OWN_FOLDER)


@contextlib.contextmanager
def locked(home: str, run: str, create: bool = True) -> Iterator[None]:
    """Hold the run's lock; raises Locked (naming the holder) or ActionError at once. Without
    ``create`` (a dry run, which changes nothing) a run that has no lock file is not locked."""
    if not create and not os.path.isfile(os.path.join(home, LOCK)):
        yield
        return
    _refuse_links(home)
    try:
        os.makedirs(home, exist_ok=True)
        # never through a symlink: a planted link would have the lock written over the file it names
        handle = os.open(os.path.join(home, LOCK), os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_CREAT if create else 0), 0o644)
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            os.close(handle)
            raise OSError(0, "it is not a regular file")
    except OSError as error:
        why = "it is a symlink, which ckptdoctor does not follow" if error.errno == errno.ELOOP else error.strerror or str(error)
        raise ActionError(f"cannot use the lock {os.path.join(home, LOCK)}: {why}") from error
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Locked(run, _holder(handle)) from None
        if os.fstat(handle).st_ino != os.stat(os.path.join(home, LOCK)).st_ino:
            raise Locked(run, "its lock file was replaced meanwhile")
        if create:
            os.ftruncate(handle, 0)
            os.pwrite(handle, json.dumps(_whoami()).encode(), 0)
        yield
    finally:
        os.close(handle)  # closing releases the flock (the kernel does it too, if we are killed)


def _refuse_links(home: str) -> None:
    """ActionError if ckptdoctor's own folder, or a folder in it, is a symlink: what it moves
    would leave the run (and its filesystem) through it."""
    own = home if os.path.basename(home) == OWN_FOLDER else os.path.dirname(home)
    for path in (own, home, os.path.join(home, TRASH), os.path.join(home, QUARANTINE)):
        if os.path.islink(path):
            raise ActionError(f"{path} is a symlink; ckptdoctor keeps what it moves inside the run and will not follow it: replace it with a folder")


def _own_folders(base: str) -> list[str]:
    """The entries of ckptdoctor's trash or quarantine folder that are real folders, sorted: a
    symlink planted there (to a folder holding a journal, say) is never followed, and a stray file
    (a ``.DS_Store``) is not an entry."""
    if not os.path.isdir(base) or os.path.islink(base):
        return []
    found = []
    for name in sorted(os.listdir(base)):
        path = os.path.join(base, name)
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                found.append(path)
        except OSError:
            continue
    return found


def _whoami() -> dict[str, object]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "user": getpass.getuser(), "started": time.time()}


def _holder(handle: int) -> str:
    try:
        info = json.loads(os.pread(handle, 4096, 0) or b"{}")
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["started"])))
        return f"pid {info['pid']} on {info['host']} by {info['user']}, since {started}"
    except (ValueError, KeyError, TypeError, OSError):
        return "holder unknown"


def pending(home: str) -> list[str]:
    """Journals a killed command left in the run (what ``finish_interrupted`` would complete)."""
    return [os.path.join(folder, JOURNAL) for folder in _own_folders(os.path.join(home, TRASH)) if os.path.isfile(os.path.join(folder, JOURNAL))]


def finish_interrupted(root: str, home: str, busy: frozenset[str] = frozenset()) -> int:
    """Complete what an earlier, killed command's journals list; returns the entries finished.

    Only what the journal meant is moved: an entry outside the run, one modified after the journal
    was written (the run was restarted since), or one a live process holds open (``busy``) stays.
    """
    finished = 0
    real_root = os.path.realpath(root)
    for folder in _own_folders(os.path.join(home, TRASH)):
        journal = os.path.join(folder, JOURNAL)
        if not os.path.isfile(journal):
            shutil.rmtree(folder, ignore_errors=True)  # killed before its journal was whole: nothing moved
            continue
        try:
            written = os.stat(journal).st_mtime
            document = json.loads(read_regular(journal, MAX_JOURNAL))
            listed = [str(path) for path in document["entries"]]
            identities = document.get("identities") if isinstance(document.get("identities"), dict) else {}
            meant = [
                path
                for path in listed
                if _still_meant(root, real_root, path, written, busy) and identities.get(path) == _identity(os.path.join(root, path))
            ]
            finished += _move_and_remove(root, folder, listed, meant)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ActionError(
                f"an interrupted prune left {journal}, which cannot be completed ({error}); "
                "check that folder, then delete it to go on"
            ) from error
    return finished


def _still_meant(root: str, real_root: str, relative: str, written: float, busy: frozenset[str]) -> bool:
    """Whether an entry is still as it was when it was planned (``written``): inside the run,
    not modified since, not held open (``busy``); for a folder, nothing inside it either."""
    path = os.path.join(root, relative)
    if not _confined(root, real_root, relative) or path in busy:
        return False
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if info.st_mtime > written:
        return False
    if not stat.S_ISDIR(info.st_mode):
        return True
    for folder, _, names in os.walk(path):  # a rewritten file does not touch its folder's mtime
        for name in names:
            inner = os.path.join(folder, name)
            try:
                if inner in busy or os.lstat(inner).st_mtime > written:
                    return False
            except FileNotFoundError:
                continue
    return True


def _identity(path: str) -> list[int] | None:
    """What makes an entry the one a journal listed: device, inode, size and both times in ns. A
    file restored from a backup keeps its mtime, never its inode or ctime."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def _confined(root: str, real_root: str, relative: str) -> bool:
    """Whether ``relative`` names an entry of the run: no absolute path, no ``..``, and no
    symlinked folder on the way out of it (the entry itself may be a link: links are moved)."""
    if os.path.isabs(relative) or os.pardir in relative.split(os.sep):
        return False
    path = os.path.join(root, relative)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)).startswith(real_root + os.sep)


def delete(plan: Plan, since: float, busy: frozenset[str] = frozenset()) -> Done:
    """Delete what ``plan`` says (under the caller's lock, after ``finish_interrupted``):
    journal, move to trash, remove. Entries written after ``since`` (when the plan was made: a
    prompt may have waited) or held open (``busy``) are left."""
    doomed = [item for item in plan.items if item.action is Action.DELETE]
    root = plan.root
    real_root = os.path.realpath(root)
    planned = _inside_run(root, [entry.os_path for item in doomed for entry in item.entries])
    relative = [path for path in planned if _still_meant(root, real_root, path, since, busy)]
    if not relative:
        return Done(0, 0, 0, len(planned))
    folder = os.path.join(plan.home, TRASH, f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}")
    try:
        os.makedirs(folder)
        identities = {path: _identity(os.path.join(root, path)) for path in relative}
        _write_atomically(os.path.join(folder, JOURNAL), {"run": plan.run, "entries": relative, "identities": identities})
    except OSError as error:
        shutil.rmtree(folder, ignore_errors=True)
        raise ActionError(f"cannot write in {plan.run}: {error.strerror}; nothing was deleted") from error
    moved = _move_and_remove(root, folder, relative)
    return Done(len(doomed), moved, plan.freed_bytes, len(planned) - len(relative))


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
    _fsync(os.path.dirname(path))


def _fsync(path: str) -> None:
    """Make a file's bytes, or a rename in a folder, durable (a crash could otherwise undo it)."""
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


# --- quarantine (repair) ---------------------------------------------------------------------
#
# ``quarantine/<id>/manifest.json`` is written (and fsynced) before anything moves; it lists every
# entry to move and every pointer to write. Entries are renamed into ``quarantine/<id>/files/``
# under their path in the run; a pointer's old version is kept there too (a hard link, so the
# swap to the new one is a single ``rename``). The manifest's ``state`` then becomes ``done``.
# Killed before that: the next ``repair`` finishes what the manifest lists; ``--undo`` puts back
# whatever had moved. Nothing is deleted, ever.

QUARANTINE = "quarantine"
MANIFEST = "manifest.json"
FILES = "files"
_SCRATCH = "pointer-"
_STATES = ("repairing", "done", "undoing")


class StoredState(str, enum.Enum):
    """Where one quarantined entry (or re-pointed pointer) stands now."""

    QUARANTINED = "quarantined"
    """In the quarantine, its place in the run free: ``--undo`` can put it back."""
    BACK = "back"
    """In the run already (restored, or never moved by a repair that was killed)."""
    CONFLICT = "conflict"
    """In the quarantine, and something else is at its place in the run."""
    LOST = "lost"
    """Neither in the quarantine nor in the run: someone removed it."""


class Stored(NamedTuple):
    """One line of a quarantine's manifest, with where it stands now."""

    path: str
    """Relative to the run."""
    number: int | None
    """The checkpoint index (``index`` is taken by tuple)."""
    reasons: tuple[str, ...]
    write: PointerWrite | None
    """For a pointer: what the repair wrote there."""
    existed: bool
    """For a pointer: whether there was one before (its old version is in the quarantine)."""
    state: StoredState
    bytes: int


@dataclass(frozen=True)
class Quarantine:
    """What one ``repair`` moved aside, read back from its manifest."""

    ident: str
    folder: str
    run: str
    created: float
    state: str
    """``repairing`` (killed part-way), ``done``, or ``undoing`` (an undo was killed part-way)."""
    items: tuple[Stored, ...]


@dataclass(frozen=True)
class Moved:
    ident: str
    folder: str
    entries: int
    bytes: int
    repointed: int
    left: int = 0
    """Entries left because they (or their checkpoint) were written or opened after the plan."""


def quarantine(plan: Plan, since: float, busy: frozenset[str] = frozenset()) -> Moved:
    """Do what a ``repair`` plan says (under the caller's lock): manifest, moves, pointers.
    What was written after ``since`` (when the plan was made: a prompt may have waited) or is
    held open (``busy``) is left."""
    moves = [(item, entry) for item in plan.acting(Action.QUARANTINE) for entry in item.entries]
    repoints = [item for item in plan.acting(Action.REPOINT) if item.write is not None]
    root = plan.root
    relative = _inside_run(root, [entry.os_path for _, entry in moves] + [item.entries[0].os_path for item in repoints])
    ident = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    folder = os.path.join(plan.home, QUARANTINE, ident)
    lines = [
        {"path": path, "index": item.number, "reasons": list(item.reasons), "bytes": item.bytes if len(item.entries) == 1 else entry.size}
        for path, (item, entry) in zip(relative[: len(moves)], moves, strict=True)
    ]
    movable = _movable(root, lines, since, busy)  # before the manifest: it lists what moves
    manifest: dict[str, Any] = {
        "version": 1,
        "run": plan.run,
        "created": time.time(),
        "state": "repairing",
        "entries": movable,
        "pointers": [
            {
                "path": path, "index": item.number, "reasons": list(item.reasons), "text": item.write.text,
                "kind": item.write.kind.value, "existed": os.path.lexists(item.entries[0].os_path),
            }
            for path, item in zip(relative[len(moves) :], repoints, strict=True)
            if item.write is not None
        ],
    }  # fmt: skip
    try:
        os.makedirs(os.path.join(folder, FILES))
        _write_atomically(os.path.join(folder, MANIFEST), manifest)
    except OSError as error:
        shutil.rmtree(folder, ignore_errors=True)
        raise ActionError(f"cannot write in {plan.run}: {error.strerror}; nothing was moved") from error
    entries, moved_bytes = _carry_out(root, plan.home, folder, manifest, since)
    return Moved(ident, folder, entries, moved_bytes, len(manifest["pointers"]), len(lines) - len(movable))


def sweep(home: str) -> None:
    """Remove what a repair killed before its manifest was whole left in ``home``: quarantine
    folders with no manifest (nothing was moved into them: they hold folders at most, and a
    half-written manifest) and scratch pointers never swapped in."""
    for folder in _own_folders(os.path.join(home, QUARANTINE)):
        if os.path.exists(os.path.join(folder, MANIFEST)):
            continue
        names = [name for _, _, files in os.walk(folder) for name in files]
        if set(names) <= {MANIFEST + ".tmp"}:
            shutil.rmtree(folder)
    for name in os.listdir(home) if os.path.isdir(home) else ():
        if name.startswith(_SCRATCH) and name.endswith(".tmp"):
            os.unlink(os.path.join(home, name))


def finish_repairs(root: str, home: str, busy: frozenset[str] = frozenset()) -> int:
    """Complete the quarantines of repairs that were killed part-way; returns how many.

    As with a prune's journal, only what the manifest meant: nothing outside the run, nothing
    modified after the manifest was written, nothing a live process holds open.
    """
    finished = 0
    for found in quarantines(root, home):
        if found.state != "repairing":
            continue
        manifest_path = os.path.join(found.folder, MANIFEST)
        try:
            manifest = _read_manifest(manifest_path)
            written = os.stat(manifest_path).st_mtime
        except (OSError, ValueError) as error:
            raise ActionError(f"an interrupted repair left {manifest_path}, which cannot be completed ({error})") from error
        moved = [line for line in manifest["entries"] if os.path.lexists(os.path.join(found.folder, FILES, line["path"]))]
        rest = [line for line in manifest["entries"] if line not in moved]
        manifest["entries"] = moved + _movable(root, rest, written, busy)  # what undo will put back
        _carry_out(root, home, found.folder, manifest, written)
        finished += 1
    return finished


def _movable(root: str, lines: list[dict[str, Any]], written: float, busy: frozenset[str]) -> list[dict[str, Any]]:
    """The manifest ``lines`` whose entries are still as planned at ``written`` (see
    ``_still_meant``), or already moved: when one file of a checkpoint was written since, it may
    be being saved again, and none of that checkpoint moves."""
    real_root = os.path.realpath(root)
    meant = {line["path"] for line in lines if _still_meant(root, real_root, line["path"], written, busy)}
    spoiled = {line.get("index") for line in lines if line["path"] not in meant and os.path.lexists(os.path.join(root, line["path"]))}
    return [line for line in lines if line["path"] in meant and line.get("index") not in spoiled - {None}]


def _carry_out(root: str, home: str, folder: str, manifest: dict[str, Any], written: float) -> tuple[int, int]:
    """Move the manifest's entries (checked by ``_movable``), write its pointers, mark it done;
    again after a kill, the same steps finish the job (what is done already is skipped)."""
    real_root = os.path.realpath(root)
    moved = moved_bytes = 0
    for line in manifest["entries"]:
        source = os.path.join(root, line["path"])
        stored = os.path.join(folder, FILES, line["path"])
        if os.path.lexists(stored) or not os.path.lexists(source):
            continue
        try:
            os.makedirs(os.path.dirname(stored), exist_ok=True)
            os.rename(source, stored)
        except OSError as error:
            raise ActionError(
                f"cannot move {line['path']} into {folder}: {error.strerror}; what was moved so far is there "
                "(`ckptdoctor repair --undo` puts it back), and the next repair finishes the job"
            ) from error
        moved += 1
        moved_bytes += int(line.get("bytes", 0))
    for line in manifest["pointers"]:
        try:
            _write_pointer(root, real_root, home, folder, line, written)
        except OSError as error:
            raise ActionError(
                f"cannot re-point {line['path']}: {error.strerror}; the old pointer is kept in {folder} "
                "(`ckptdoctor repair --undo` puts it back), and the next repair finishes the job"
            ) from error
    manifest["state"] = "done"
    _write_atomically(os.path.join(folder, MANIFEST), manifest)
    return moved, moved_bytes


def _write_pointer(root: str, real_root: str, home: str, folder: str, line: dict[str, Any], written: float) -> None:
    """Keep the old pointer in the quarantine (a hard link: its bytes and inode stay), then swap
    the new one in with one rename, so that a framework never finds no pointer at all."""
    target = os.path.join(root, line["path"])
    stored = os.path.join(folder, FILES, line["path"])
    write = _pointer_write(line)
    if not _confined(root, real_root, line["path"]) or _is_written(target, write):
        return
    if os.path.lexists(target) and os.lstat(target).st_mtime > written:
        return  # rewritten by its framework since the repair was planned: that one is newer
    if line["existed"] and not os.path.lexists(stored):
        if not os.path.lexists(target):
            return  # the old pointer is gone and was never kept: do not invent one
        os.makedirs(os.path.dirname(stored), exist_ok=True)
        try:
            os.link(target, stored, follow_symlinks=False)
        except OSError:
            # no hard links here (some network filesystems): keep the old one by moving it
            os.rename(target, stored)
    scratch = os.path.join(home, f"{_SCRATCH}{uuid.uuid4().hex[:8]}.tmp")
    if write.kind is PointerKind.SYMLINK:
        os.symlink(write.text, scratch)
    elif write.kind is PointerKind.COPY:
        shutil.copy2(os.path.join(os.path.dirname(target), write.text), scratch, follow_symlinks=True)
        _fsync(scratch)
    else:
        with open(scratch, "w", encoding="utf-8") as handle:
            handle.write(write.text)
        _fsync(scratch)
    os.replace(scratch, target)
    _fsync(os.path.dirname(target))


def _pointer_write(line: dict[str, Any]) -> PointerWrite:
    return PointerWrite(os.path.basename(str(line["path"])), str(line["text"]), PointerKind(line["kind"]))



def _is_written(path: str, write: PointerWrite) -> bool:
    """Whether the pointer at ``path`` already says what ``write`` says."""
    try:
        if write.kind is PointerKind.SYMLINK:
            return os.path.islink(path) and os.readlink(path) == write.text
        if os.path.islink(path) or not os.path.isfile(path):
            return False
        if write.kind is PointerKind.COPY:  # copy2 keeps the time: a later save by the framework would not
            made, copied = os.stat(path), os.stat(os.path.join(os.path.dirname(path), write.text))
            return (made.st_size, made.st_mtime_ns) == (copied.st_size, copied.st_mtime_ns)
        return read_regular(path, len(write.text.encode("utf-8", "surrogateescape")) + 1).decode("utf-8", "surrogateescape") == write.text
    except OSError:
        return False


def quarantines(root: str, home: str) -> list[Quarantine]:
    """The run's quarantines, oldest first, each with where its entries stand now."""
    found = []
    for folder in _own_folders(os.path.join(home, QUARANTINE)):
        ident = os.path.basename(folder)
        try:
            manifest = _read_manifest(os.path.join(folder, MANIFEST))
        except FileNotFoundError:
            continue  # killed before its manifest was whole: nothing was moved
        except (OSError, ValueError) as error:
            raise ActionError(f"{os.path.join(folder, MANIFEST)} cannot be read ({error}); check that folder") from error
        items = [_stored(root, folder, line, None) for line in manifest["entries"]]
        items += [_stored(root, folder, line, line) for line in manifest["pointers"]]
        found.append(Quarantine(ident, folder, str(manifest["run"]), float(manifest["created"]), str(manifest["state"]), tuple(items)))
    return sorted(found, key=lambda q: (q.created, q.ident))  # two repairs within a second: by time


def _stored(root: str, folder: str, line: dict[str, Any], pointer: dict[str, Any] | None) -> Stored:
    path = str(line["path"])
    target = os.path.join(root, path)
    kept = os.path.join(folder, FILES, path)
    in_run, in_quarantine = os.path.lexists(target), os.path.lexists(kept)
    index = line.get("index")
    write, existed = None, False
    if pointer is None:
        if in_quarantine and in_run:
            # one file in both places: an undo killed between linking it back and unlinking the spare
            state = StoredState.BACK if _same_file(target, kept) else StoredState.CONFLICT
        elif in_quarantine:
            state = StoredState.QUARANTINED
        else:
            state = StoredState.BACK if in_run else StoredState.LOST
    else:
        write = _pointer_write(pointer)
        existed = bool(pointer["existed"])
        state = _pointer_state(_is_written(target, write), existed, in_run, in_quarantine, lambda: _same_file(target, kept))
    return Stored(path, index if isinstance(index, int) else None, tuple(line.get("reasons", ())), write, existed, state, int(line.get("bytes", 0)))


def _pointer_state(ours: bool, existed: bool, in_run: bool, in_quarantine: bool, same: Callable[[], bool]) -> StoredState:
    """Where a re-pointed pointer stands: what the run holds against what the repair wrote and kept."""
    if ours:
        # the repair's pointer is in place: undo removes it, or puts the kept old one back
        return StoredState.LOST if existed and not in_quarantine else StoredState.QUARANTINED
    if not existed:
        return StoredState.CONFLICT if in_run else StoredState.BACK
    if not in_quarantine:
        return StoredState.BACK  # never touched, or put back already
    if not in_run:
        return StoredState.QUARANTINED  # killed between keeping the old one and writing the new
    # both there: the same file when the repair was killed before its swap; else someone wrote a new one since
    return StoredState.BACK if same() else StoredState.CONFLICT


def _same_file(first: str, second: str) -> bool:
    try:
        a, b = os.lstat(first), os.lstat(second)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def restore(found: Quarantine, root: str) -> tuple[int, list[str]]:
    """Put back what ``found`` holds (the caller checked there were no conflicts), then remove
    it; returns the entries put back, and those left because something took their place since
    the caller looked. Killed part-way, the next ``--undo`` goes on from there."""
    manifest_path = os.path.join(found.folder, MANIFEST)
    manifest = _read_manifest(manifest_path)
    manifest["state"] = "undoing"
    try:
        _write_atomically(manifest_path, manifest)
    except OSError as error:
        raise ActionError(f"cannot write in {found.run}: {error.strerror}; nothing was restored") from error
    restored = 0
    left = []
    real_root = os.path.realpath(root)
    lines = [(line, None) for line in manifest["entries"]] + [(line, line) for line in manifest["pointers"]]
    for line, pointer in lines:
        if not _confined(root, real_root, str(line["path"])):
            raise ActionError(f"{manifest_path} names {line['path']!r}, outside the run: nothing more was restored")
        item = _stored(root, found.folder, line, pointer)  # again: the run may have changed since the plan
        target = os.path.join(root, item.path)
        stored = os.path.join(found.folder, FILES, item.path)
        if item.state is StoredState.BACK and os.path.lexists(stored) and _same_file(target, stored):
            os.unlink(stored)  # a spare link to what is back in place
        if item.state is StoredState.CONFLICT:
            left.append(item.path)
        if item.state is not StoredState.QUARANTINED:
            continue
        if item.write is not None and not item.existed:
            os.unlink(target)  # a pointer the repair created, still saying what it wrote
        elif item.write is not None:
            os.replace(stored, target)  # over the pointer the repair wrote (or none)
        else:
            _put_back(stored, target)
        restored += 1
    leftover = [os.path.join(folder, name) for folder, _, names in os.walk(os.path.join(found.folder, FILES)) for name in names]
    if not leftover:
        os.unlink(manifest_path)
        shutil.rmtree(found.folder)  # only empty folders are left in it
    return restored, left


def _put_back(stored: str, target: str) -> None:
    """Move ``stored`` to ``target``, never over something that appeared there meanwhile."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if not os.path.isdir(stored) or os.path.islink(stored):
        try:
            os.link(stored, target, follow_symlinks=False)  # fails if target exists: no overwrite
        except FileExistsError:
            raise ActionError(f"{target} appeared while restoring; it was left as it is, and the quarantined one kept") from None
        except OSError:
            pass  # no hard links here: fall back to a rename, checked just before
        else:
            os.unlink(stored)
            return
    if os.path.lexists(target):
        raise ActionError(f"{target} appeared while restoring; it was left as it is, and the quarantined one kept")
    os.rename(stored, target)


def _read_manifest(path: str) -> dict[str, Any]:
    """A quarantine's manifest, checked field by field (it is a file anyone can edit); ValueError
    says what is wrong."""
    manifest = json.loads(read_regular(path, MAX_JOURNAL))
    if not isinstance(manifest, dict) or not isinstance(manifest.get("entries"), list) or not isinstance(manifest.get("pointers"), list):
        raise ValueError("not a ckptdoctor quarantine manifest")
    if not isinstance(manifest.get("run"), str) or not isinstance(manifest.get("created"), int | float) or manifest.get("state") not in _STATES:
        raise ValueError("its run, created or state field is missing or wrong")
    kinds = {kind.value for kind in PointerKind}
    for line in manifest["entries"] + manifest["pointers"]:
        named = line.get("path") if isinstance(line, dict) else None
        if not isinstance(named, str) or not named or os.path.isabs(named) or os.pardir in named.split(os.sep):
            raise ValueError(f"an entry names {named!r}, which is not a path inside the run")
    for line in manifest["pointers"]:
        if not isinstance(line.get("text"), str) or line.get("kind") not in kinds or not isinstance(line.get("existed"), bool):
            raise ValueError(f"the pointer line for {line['path']!r} is incomplete")
    return manifest


def _inside_run(root: str, paths: list[str]) -> list[str]:
    """``paths`` relative to the run; ActionError if any lies outside it."""
    relative = [os.path.relpath(path, root) for path in paths]
    if any(path.startswith(os.pardir) or os.path.isabs(path) for path in relative):
        raise ActionError("the plan names files outside the run: refused")
    return relative
