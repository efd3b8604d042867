"""``repair``'s quarantine: what it takes out of the run is moved aside, never deleted.

``quarantine/<id>/manifest.json`` is written (and fsynced) before anything moves; it lists every
entry to move, with its identity, and every pointer to write. Then the space the manifest's last
rewrite needs is reserved, so that a full disk cannot stop a repair half-way. Entries are
renamed into ``quarantine/<id>/files/`` under their path in the run; a pointer's old version is
kept there too (a hard link, so the swap to the new one is a single ``rename``). The manifest's
``state`` then becomes ``done``. Killed before that: the next ``repair`` finishes what the
manifest lists; ``--undo`` puts back whatever had moved.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Sequence

from ckptdoctor.actions import _confine
from ckptdoctor.actions._confine import (
    ActionError,
    Escapes,
    Folder,
    Outcome,
    as_planned,
    identity,
    inside_run,
    open_run,
    put_back,
    take,
)
from ckptdoctor.actions._content import fingerprint
from ckptdoctor.actions._home import (
    FULL,
    create_new,
    open_home,
    own_folders,
    read_record,
    write_record,
)
from ckptdoctor.actions._trash import changed_since, still_meant
from ckptdoctor.model import NOTHING_SEEN, Action, Plan, PointerKind, PointerWrite, Seen
from ckptdoctor.records import (
    MANIFEST_VERSION,
    EntryLine,
    Identity,
    Manifest,
    Moved,
    Phase,
    PointerLine,
    Quarantine,
    Stored,
    StoredState,
)
from ckptdoctor.regular import open_regular, read_regular

QUARANTINE = "quarantine"
MANIFEST = "manifest.json"
RESERVE = "manifest.reserve"
FILES = "files"
_SCRATCH = "pointer-"
_SLACK = 64 * 1024
"""Reserved beyond the manifest's own size: its temporary copy, pointers, folder blocks."""


class _Places:
    """The run, ckptdoctor's own folder and one quarantine's folders, open for one repair or undo
    (``stored`` is None when the quarantine holds no ``files`` folder)."""

    def __init__(self, root: str, home: str, ident: str, create: bool) -> None:
        self.opened: list[Folder] = []
        try:
            self.top = self._keep(open_run(root))
            own = open_home(home, create)
            if own is None:
                raise FileNotFoundError(errno.ENOENT, "no such folder", home)
            self.own = self._keep(own)
            self.quarantine = self._keep(own.child(QUARANTINE, create))
            self.here = self._keep(self.quarantine.child(ident, create))
            self.stored = self._keep(self.here.child(FILES, create=True)) if create else self._files()
        except BaseException:
            self.close()
            raise

    def _keep(self, folder: Folder) -> Folder:
        self.opened.append(folder)
        return folder

    def _files(self) -> Folder | None:
        try:
            return self._keep(self.here.child(FILES))
        except FileNotFoundError:
            return None

    def close(self) -> None:
        for folder in reversed(self.opened):
            folder.close()


def quarantine(plan: Plan, since: float, busy: frozenset[str] = frozenset(), seen: Seen = NOTHING_SEEN) -> Moved:
    """Do what a ``repair`` plan says (under the caller's lock): manifest, moves, pointers.
    What was written after ``since`` (when the plan was made: a prompt may have waited) or
    otherwise than the scan ``seen`` it, is held open (``busy``) or was replaced since is left."""
    moves = [(item, entry) for item in plan.acting(Action.QUARANTINE) for entry in item.entries]
    repoints = [item for item in plan.acting(Action.REPOINT) if item.write is not None]
    root = plan.root
    relative = inside_run(root, [entry.os_path for _, entry in moves] + [item.entries[0].os_path for item in repoints])
    ident = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    with open_run(root) as top:
        lines = [
            EntryLine(path, item.number, item.reasons, item.bytes if len(item.entries) == 1 else entry.size, None)
            for path, (item, entry) in zip(relative[: len(moves)], moves, strict=True)
        ]
        planned = as_planned(
            root,
            (entry for _, entry in moves),
            {path: identity(info) for path in relative[: len(moves)] if (info := top.look(path)) is not None},
        )
        movable = [
            line for line in _movable(top, lines, since, busy, seen) if line.path in planned
        ]  # before the manifest: it lists what moves
        pointers = [
            PointerLine(path, item.number, item.reasons, item.write.text, item.write.kind, top.look(path) is not None)
            for path, item in zip(relative[len(moves) :], repoints, strict=True)
            if item.write is not None
        ]
        manifest = Manifest(MANIFEST_VERSION, plan.run, time.time(), Phase.REPAIRING, tuple(movable), tuple(pointers))
    try:
        places = _Places(root, plan.home, ident, create=True)
    except OSError as error:
        raise ActionError(f"cannot write in {plan.run}: {error.strerror}; nothing was moved") from error
    try:
        try:
            encoded = manifest.encode()
            write_record(places.here, MANIFEST, encoded)
            _reserve(places.here, encoded)
        except OSError as error:
            _confine.remove(places.quarantine, ident)
            if error.errno in FULL:
                raise ActionError(
                    f"{plan.run}'s filesystem is too full to record what repair would move; nothing was moved: "
                    "free some space first (a prune of old checkpoints works on a full disk)"
                ) from error
            raise ActionError(f"cannot write in {plan.run}: {error.strerror}; nothing was moved") from error
        _confine.between("manifest written", places.here.path)
        entries, moved_bytes, problems, changed, repointed = _carry_out(places, manifest, since, seen)
    finally:
        places.close()
    folder = os.path.join(plan.home, QUARANTINE, ident)
    return Moved(ident, folder, entries, moved_bytes, repointed, len(lines) - len(movable) + changed, tuple(problems))


def _reserve(here: Folder, manifest: bytes) -> None:
    """Hold the space the manifest's last rewrite needs (OSError ENOSPC when it is not there)."""
    handle = create_new(here, RESERVE, 0o600)
    try:
        os.posix_fallocate(handle, 0, len(manifest) + _SLACK)
        os.fsync(handle)
    finally:
        os.close(handle)


def _release(here: Folder) -> None:
    if here.lstat(RESERVE) is not None:
        os.unlink(RESERVE, dir_fd=here.fd)


def sweep(home: str) -> None:
    """Remove what a repair killed before its manifest was whole left in ``home``: quarantine
    folders with no manifest (nothing was moved into them: they hold folders, a half-written
    manifest and its reserve at most) and scratch pointers never swapped in."""
    own = open_home(home, create=False)
    if own is None:
        return
    with own:
        for name in own.names():
            if (
                name.startswith(_SCRATCH)
                and name.endswith(".tmp")
                and (info := own.lstat(name)) is not None
                and not stat.S_ISDIR(info.st_mode)
            ):
                os.unlink(name, dir_fd=own.fd)
    for quarantine, name, here in own_folders(home, QUARANTINE):
        if here.lstat(MANIFEST) is None and {inner for _, _, files, _ in os.fwalk(dir_fd=here.fd) for inner in files} <= {
            MANIFEST + ".tmp",
            RESERVE,
        }:
            _confine.remove(quarantine, name)


def close_repairs(root: str, home: str) -> tuple[list[str], list[str]]:
    """Close the quarantines of repairs that were killed part-way; (their ids, problems).

    What such a repair had moved stays in its quarantine (``--undo`` puts it back), and a pointer
    it had begun to re-point is finished; nothing else moves. What it had not moved yet is for the
    next plan to decide, made from the run as it is now and confirmed like any other: a manifest
    is a record of what was done, never an order (a hand-written one moves nothing), and what
    was damaged then may be whole again.
    """
    closed: list[str] = []
    problems: list[str] = []
    for found in quarantines(root, home):
        if found.state != Phase.REPAIRING.value:
            continue
        places = _Places(root, home, found.ident, create=False)
        try:
            manifest = _read_manifest(places.here)
            written = os.stat(MANIFEST, dir_fd=places.here.fd, follow_symlinks=False).st_mtime
            moved = tuple(line for line in manifest.entries if places.stored is not None and places.stored.look(line.path) is not None)
            begun = tuple(line for line in manifest.pointers if places.stored is not None and places.stored.look(line.path) is not None)
            problems += _carry_out(places, dataclasses.replace(manifest, entries=moved, pointers=begun), written)[2]
        except (OSError, ValueError) as error:
            raise ActionError(
                f"an interrupted repair left {os.path.join(places.here.path, MANIFEST)}, which cannot be closed ({error})"
            ) from error
        finally:
            places.close()
        closed.append(found.ident)
    return closed, problems


def _movable(top: Folder, lines: Sequence[EntryLine], written: float, busy: frozenset[str], seen: Seen) -> list[EntryLine]:
    """The manifest ``lines`` whose entries are still as planned at ``written`` (see
    ``still_meant``), each with its identity now: when one file of a checkpoint was written
    since, it may be being saved again, and none of that checkpoint moves."""
    meant: dict[str, Identity] = {}
    for line in lines:
        info = top.look(line.path) if still_meant(top, line.path, written, busy, seen) else None
        if info is not None:
            meant[line.path] = identity(info)
    spoiled = {line.index for line in lines if line.path not in meant and top.look(line.path) is not None}
    return [
        # its fingerprint read from that very inode: changed after, it no longer moves (``take``)
        dataclasses.replace(line, identity=meant[line.path], content=fingerprint(top, line.path, meant[line.path][:2]))
        for line in lines
        if line.path in meant and line.index not in spoiled - {None}
    ]


def _carry_out(places: _Places, manifest: Manifest, written: float, seen: Seen = NOTHING_SEEN) -> tuple[int, int, list[str], int, int]:
    """Move the manifest's entries, write its pointers, mark it done; again after a kill, the
    same steps finish the job (what is done already is skipped). (moved, bytes, problems, left
    because changed.)"""
    moved = moved_bytes = changed = 0
    problems: list[str] = []
    assert places.stored is not None, "a repair made its files folder"
    for line in manifest.entries:
        try:
            stored, name = places.stored.reach(line.path, create=True)
        except (OSError, Escapes) as error:
            problems.append(f"{line.path}: cannot make its place in the quarantine ({error})")
            continue
        with stored:
            if stored.lstat(name) is not None:
                continue

            def into_quarantine(parent: Folder, source: str, stored: Folder = stored, name: str = name) -> None:
                os.rename(source, name, src_dir_fd=parent.fd, dst_dir_fd=stored.fd)

            outcome, why = take(places.top, line.path, line.identity, into_quarantine)
            problems += [why] if why else []
        moved += outcome is Outcome.DONE
        changed += outcome is Outcome.CHANGED
        moved_bytes += line.bytes if outcome is Outcome.DONE else 0
    repointed = 0
    for pointer in manifest.pointers:
        try:
            if _write_pointer(places, pointer, written, seen):
                repointed += 1
            else:
                problems.append(
                    f"left {pointer.path} as it is: it was written since the plan (by its framework?); `ckptdoctor repair` again sees it as it is now"
                )
        except (OSError, Escapes) as error:
            problems.append(
                f"cannot re-point {pointer.path}: {error}; the old pointer is kept in {places.here.path} "
                "(`ckptdoctor repair --undo` puts it back)"
            )
    _release(places.here)
    write_record(places.here, MANIFEST, dataclasses.replace(manifest, state=Phase.DONE).encode())
    return moved, moved_bytes, problems, changed, repointed


def _write_pointer(places: _Places, line: PointerLine, written: float, seen: Seen) -> bool:
    """Keep the old pointer in the quarantine (a hard link: its bytes and inode stay), then swap
    the new one in with one rename, so that a framework never finds no pointer at all. False
    where it was written since the plan (``changed_since``): that one is newer, and stays."""
    assert places.stored is not None, "a repair made its files folder"
    write = line.write
    parent, name = places.top.reach(line.path)
    with parent:
        if _is_written(parent, name, write):
            return True
        now = parent.lstat(name)
        if now is not None and changed_since(now, seen.get(os.path.normpath(line.path)), written):
            return False
        stored, kept = places.stored.reach(line.path, create=True)
        with stored:
            if line.existed and stored.lstat(kept) is None:
                if now is None:
                    return False  # the old pointer is gone and was never kept: do not invent one
                try:
                    os.link(name, kept, src_dir_fd=parent.fd, dst_dir_fd=stored.fd, follow_symlinks=False)
                except OSError:
                    # no hard links here (some network filesystems): keep the old one by moving it
                    os.rename(name, kept, src_dir_fd=parent.fd, dst_dir_fd=stored.fd)
        scratch = f"{_SCRATCH}{uuid.uuid4().hex[:8]}.tmp"
        _scratch_pointer(places.own, scratch, parent, write)
        os.replace(scratch, name, src_dir_fd=places.own.fd, dst_dir_fd=parent.fd)
        parent.fsync()
    return True


def _scratch_pointer(own: Folder, scratch: str, parent: Folder, write: PointerWrite) -> None:
    """Write the new pointer as ``scratch`` in ckptdoctor's own folder (on the run's filesystem)."""
    if write.kind is PointerKind.SYMLINK:
        os.symlink(write.text, scratch, dir_fd=own.fd)
        return
    handle = create_new(own, scratch, 0o644)
    try:
        if write.kind is PointerKind.COPY:
            source_folder, source_name = parent.reach(write.text)
            with source_folder:
                source = open_regular(source_name, dir_fd=source_folder.fd)
                try:
                    with os.fdopen(source, "rb", closefd=False) as reading, os.fdopen(handle, "wb", closefd=False) as writing:
                        shutil.copyfileobj(reading, writing, 1 << 20)
                    info = os.fstat(source)
                    os.utime(handle, ns=(info.st_atime_ns, info.st_mtime_ns))  # as copy2 does: _is_written compares times
                    os.fchmod(handle, stat.S_IMODE(info.st_mode))
                finally:
                    os.close(source)
        else:
            os.write(handle, write.text.encode("utf-8", "surrogateescape"))
        os.fsync(handle)
    finally:
        os.close(handle)


def _is_written(parent: Folder, name: str, write: PointerWrite) -> bool:
    """Whether the pointer ``name`` in ``parent`` already says what ``write`` says."""
    try:
        info = parent.lstat(name)
        if info is None:
            return False
        if write.kind is PointerKind.SYMLINK:
            return stat.S_ISLNK(info.st_mode) and os.readlink(name, dir_fd=parent.fd) == write.text
        if not stat.S_ISREG(info.st_mode):
            return False
        if write.kind is PointerKind.COPY:  # the copy keeps the time: a later save by the framework would not
            copied = parent.look(write.text)
            return copied is not None and (info.st_size, info.st_mtime_ns) == (copied.st_size, copied.st_mtime_ns)
        size = len(write.text.encode("utf-8", "surrogateescape"))
        return read_regular(name, size + 1, dir_fd=parent.fd).decode("utf-8", "surrogateescape") == write.text
    except OSError:
        return False


def quarantines(root: str, home: str) -> list[Quarantine]:
    """The run's quarantines, oldest first, each with where its entries stand now."""
    found = []
    with open_run(root) as top:
        for _, ident, here in own_folders(home, QUARANTINE):
            try:
                manifest = _read_manifest(here)
            except FileNotFoundError:
                continue  # killed before its manifest was whole: nothing was moved
            except (OSError, ValueError) as error:
                raise ActionError(f"{os.path.join(here.path, MANIFEST)} cannot be read ({error}); check that folder") from error
            try:
                stored: Folder | None = here.child(FILES)
            except FileNotFoundError:
                stored = None
            try:
                items = [_stored(top, stored, line) for line in manifest.lines]
            finally:
                if stored is not None:
                    stored.close()
            found.append(Quarantine(ident, here.path, manifest.run, float(manifest.created), manifest.state.value, tuple(items), home))
    return sorted(found, key=lambda q: (q.created, q.ident))  # two repairs within a second: by time


def _stored(top: Folder, stored: Folder | None, line: EntryLine | PointerLine) -> Stored:
    path = line.path
    in_run, kept = top.look(path), (stored.look(path) if stored is not None else None)
    write, existed = None, False
    same = in_run is not None and kept is not None and (in_run.st_dev, in_run.st_ino) == (kept.st_dev, kept.st_ino)
    if isinstance(line, EntryLine):
        if kept is not None and in_run is not None:
            # one file in both places: an undo killed between linking it back and unlinking the spare
            state = StoredState.BACK if same else StoredState.CONFLICT
        elif kept is not None:
            state = StoredState.QUARANTINED if _as_moved(stored, line, kept) else StoredState.REPLACED
        else:
            state = StoredState.BACK if in_run is not None else StoredState.LOST
    else:
        write, existed = line.write, line.existed
        ours = _written_at(top, path, write)
        state = _pointer_state(ours, existed, in_run is not None, kept is not None, lambda: same)
    return Stored(path, line.index, line.reasons, write, existed, state, line.bytes if isinstance(line, EntryLine) else 0)


def _as_moved(stored: Folder | None, line: EntryLine, kept: os.stat_result) -> bool:
    """Whether what the quarantine holds (``kept``, in ``stored``) is what the repair moved there:
    a move keeps the inode, size and modification time (not the change time); a copy of the run
    (another inode) must match the content fingerprint the manifest recorded, which manifests
    before version 3 lack: their entries on a copy are never put back. A version 1 manifest
    recorded no identity: then anything but a symlink the repair could not have moved (it never
    follows one)."""
    moved = line.identity
    if moved is None:
        return not stat.S_ISLNK(kept.st_mode)
    if (kept.st_dev, kept.st_ino, kept.st_size, kept.st_mtime_ns) == moved[:4]:
        return True
    # restored onto the same disk, another file may even have the inode this one had
    return stored is not None and line.content is not None and fingerprint(stored, line.path) == line.content


def _written_at(top: Folder, path: str, write: PointerWrite) -> bool:
    try:
        parent, name = top.reach(path)
    except (OSError, Escapes):
        return False
    with parent:
        return _is_written(parent, name, write)


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


def restore(found: Quarantine, root: str) -> tuple[int, list[str]]:
    """Put back what ``found`` holds (the caller checked there were no conflicts, and named what
    is not what the repair moved: that stays), then remove it; returns the entries put back, and
    a line for each entry left because something took its place since the caller looked (or a
    folder on the way became a symlink). A quarantine that holds anything else (a file someone
    put there, or what was not put back) is kept. Killed part-way, the next ``--undo`` goes on
    from there."""
    unmatched = {item.path for item in found.items if item.state is StoredState.REPLACED}
    places = _Places(root, found.home, found.ident, create=False)
    try:
        manifest = _read_manifest(places.here)
        try:
            write_record(places.here, MANIFEST, dataclasses.replace(manifest, state=Phase.UNDOING).encode())
        except OSError as error:  # the run undone may be a copy: its manifest names where it was made
            raise ActionError(f"cannot write in {root}: {error.strerror}; nothing was restored") from error
        _release(places.here)
        _confine.between("undo started", places.here.path)
        restored = 0
        left = []
        for line in manifest.lines:
            item = _stored(places.top, places.stored, line)  # again: the run may have changed since the plan
            if item.state is StoredState.REPLACED and item.path in unmatched:
                continue  # named already, and left where it is
            try:
                outcome = _restore_one(places, item)
            except Escapes:
                outcome = False
            if outcome is None:
                continue
            if outcome:
                restored += 1
            else:
                left.append(f"{item.path} changed in the run while undoing: left as it is; the quarantined one stays in {places.here.path}")
        strays = [stray for stray in _not_ours(places.here) if not any(_below(stray, os.path.join(FILES, path)) for path in unmatched)]
        if not strays and not unmatched:
            os.unlink(MANIFEST, dir_fd=places.here.fd)
            _confine.remove(places.quarantine, found.ident)  # only empty folders are left in it
        elif not left:
            left += [
                f"{os.path.join(places.here.path, stray)} is not what this repair put there: the quarantine is kept as it is"
                for stray in strays
            ]
        return restored, left
    finally:
        places.close()


def _below(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + os.sep)


def _not_ours(here: Folder) -> list[str]:
    """What a quarantine holds besides its manifest, reserve and empty folders: a quarantined file
    still there, or anything someone put in it. Such a quarantine is never removed."""
    ours = {MANIFEST, MANIFEST + ".tmp", RESERVE}
    found = []
    for below, folders, files, fd in os.fwalk(dir_fd=here.fd):
        found += [os.path.normpath(os.path.join(below, name)) for name in files if below != os.curdir or name not in ours]
        found += [
            os.path.normpath(os.path.join(below, name))
            for name in folders
            if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
        ]
    return found


def _restore_one(places: _Places, item: Stored) -> bool | None:
    """Put one entry back: True when done, False when something stands in its way, None when
    there is nothing to do."""
    if item.state in (StoredState.CONFLICT, StoredState.REPLACED):
        return False
    if item.state is StoredState.BACK:
        stored = places.stored.look(item.path) if places.stored is not None else None
        now = places.top.look(item.path)
        if (
            places.stored is not None
            and stored is not None
            and now is not None
            and (stored.st_dev, stored.st_ino) == (now.st_dev, now.st_ino)
        ):
            folder, name = places.stored.reach(item.path)
            with folder:
                os.unlink(name, dir_fd=folder.fd)  # a spare link to what is back in place
        return None
    if item.state is not StoredState.QUARANTINED or places.stored is None:
        return None
    target, name = places.top.reach(item.path, create=True)
    with target:
        if item.write is not None and not item.existed:
            os.unlink(name, dir_fd=target.fd)  # a pointer the repair created, still saying what it wrote
            return True
        source, kept = places.stored.reach(item.path)
        with source:
            if item.write is not None:
                os.replace(kept, name, src_dir_fd=source.fd, dst_dir_fd=target.fd)  # over the pointer the repair wrote (or none)
                return True
            return put_back(source, kept, target, name)


def _read_manifest(here: Folder) -> Manifest:
    """A quarantine's manifest, checked field by field (it is a file anyone can edit); ValueError
    (``records.BadRecord``) says what is wrong, OSError what stops it being read."""
    return Manifest.decode(read_record(here, MANIFEST))
