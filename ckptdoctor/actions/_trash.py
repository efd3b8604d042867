"""``prune``'s deletions, so that a kill at any instant loses nothing that was to be kept.

- ``trash/<id>/journal.json`` is written (and fsynced) before anything moves; it lists exactly the
  entries the plan deletes, each with its identity (device, inode, size, mtime, ctime).
- Each entry is renamed into ``trash/<id>/`` (one ``rename``: the same filesystem), then what was
  moved is removed, then the journal.
- An entry on another filesystem than the trash (accelerate's ``checkpoints/`` mounted on its
  own, whose trash lives beside it; a folder of the run mounted elsewhere) cannot be renamed
  there (EXDEV): it is deleted where it is, under the same journal, after a mark
  ``trash/<id>/<n>.in-place`` says so. A kill then leaves it partly deleted, and the next prune,
  confirmed, finishes deleting it while it is still that inode (its contents changed only by
  the deletion the journal began).

Killed before the journal is whole: nothing moved. Killed later: only planned entries moved or
gone; the next prune shows what the journal would still do and, confirmed, does it for the
entries that are still that same inode, unchanged, and not kept by its own policy.

On a full disk the journal cannot be written; the entries are then deleted where they are, one
checkpoint after the other, oldest first: a kill leaves at worst one planned checkpoint
incomplete, which is older than the resume point, and which the next prune deletes.

An entry that cannot be moved or deleted (an immutable file, a read-only folder) is reported and
left in the run; the rest of the plan goes on, and no journal keeps waiting for it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import time
import uuid
from collections.abc import Iterator

from ckptdoctor.actions import _confine
from ckptdoctor.actions._confine import (
    ActionError,
    Escapes,
    Folder,
    Outcome,
    as_planned,
    identity,
    inside_run,
    mount_points,
    mounted_in,
    open_run,
    put_back,
    remove,
    take,
)
from ckptdoctor.actions._home import FULL, create_new, open_home, own_folders, read_record, write_record
from ckptdoctor.model import NOTHING_SEEN, Action, Entry, Plan, Seen
from ckptdoctor.places import DEEPEST
from ckptdoctor.places import relative as relative_to
from ckptdoctor.records import Done, Finished, Journal, Pending, ours, plain

TRASH = "trash"
JOURNAL = "journal.json"
_MOVED = re.compile(r"\d{6}")
"""How an entry is named once moved into the trash: its place in the journal's list."""
_IN_PLACE = re.compile(r"(\d{6})\.in-place")
"""The mark of an entry deleted where it is (on another filesystem than the trash), by its place
in the journal's list: written before anything of it is deleted."""


def delete(plan: Plan, since: float, busy: frozenset[str] = frozenset(), seen: Seen = NOTHING_SEEN) -> Done:
    """Delete what ``plan`` says (under the caller's lock, after ``finish_interrupted``).
    Entries written after ``since`` (when the plan was made: a prompt may have waited), or
    otherwise than the scan ``seen`` them, held open (``busy``) or replaced since are left."""
    doomed = [item for item in plan.items if item.action is Action.DELETE]
    planned = inside_run(plan.root, [entry.os_path for item in doomed for entry in item.entries])
    with open_run(plan.root) as top:
        gone = {path for path in planned if top.look(path) is None}  # finished by a journal, or removed by hand
        relative = [path for path in planned if still_meant(top, path, since, busy, seen)]
        now = {path: identity(info) for path in relative if (info := top.look(path)) is not None}
        identities = as_planned(plan.root, (entry for item in doomed for entry in item.entries), now)
        relative = [path for path in relative if path in identities]
        left = len(planned) - len(relative) - len(gone)
        if not relative:
            return Done(0, 0, 0, left)
        record = Journal(plan.run, tuple(relative), identities)
        journal = _start_journal(plan.home, record)
        if journal is None:
            done, problems, changed = _delete_in_place(top, record)
        else:
            trash, folder = journal
            with trash, folder:
                _confine.between("journal written", folder.path)
                done, problems, changed = _move_all(top, folder, record, set(relative))
                problems += _finish(trash, folder)
    paths = [[relative_to(entry.os_path, plan.root) for entry in item.entries] for item in doomed]
    whole = [
        item for item, own in zip(doomed, paths, strict=True) if any(p in done for p in own) and all(p in done or p in gone for p in own)
    ]
    freed = plan.freed_bytes if len(whole) == len(doomed) else sum(item.bytes for item in whole)
    return Done(len(whole), len(done), freed, left + changed, tuple(problems), journal_free=journal is None)


def _start_journal(home: str, journal: Journal) -> tuple[Folder, Folder] | None:
    """The trash folder and a new journal folder in it, with its journal written; None when the
    disk is too full to write it."""
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    own = open_home(home, create=False)
    if own is None:
        raise ActionError(f"{home} vanished while its lock was held")
    trash = folder = None
    try:
        with own:
            trash = own.child(TRASH, create=True)
        folder = trash.child(name, create=True)
        write_record(folder, JOURNAL, journal.encode())
        return trash, folder
    except OSError as error:
        if folder is not None:
            folder.close()
        if trash is not None:
            _discard_folder(trash, name)
            trash.close()
        if error.errno in FULL:
            return None
        raise ActionError(f"cannot write in {home}: {error.strerror}; nothing was deleted") from error


def _discard_folder(trash: Folder, name: str) -> None:
    """Remove a journal folder that holds nothing moved (a half-written journal at most)."""
    with contextlib.suppress(OSError):
        remove(trash, name)


def _move_all(
    top: Folder, folder: Folder, journal: Journal, wanted: set[str], started: frozenset[int] = frozenset()
) -> tuple[set[str], list[str], int]:
    """Move each ``wanted`` entry of the journal's list into its folder, or delete it where it is
    when it lies on another filesystem (EXDEV), marked first (``started``: those a killed prune
    had marked, finished where they are); (those moved or deleted, problems, how many were left
    because changed)."""
    moved: set[str] = set()
    changed = 0
    problems: list[str] = []
    mounts = mount_points()
    for number, path in enumerate(journal.entries):
        if path not in wanted:
            continue
        failed: list[str] = []

        def into_trash(parent: Folder, name: str, number: int = number, failed: list[str] = failed) -> None:
            mount = mounted_in(parent, name, mounts)
            if mount is not None:
                raise OSError(errno.EBUSY, f"holds the mount point {mount}")
            if number not in started:
                try:
                    os.rename(name, f"{number:06d}", src_dir_fd=parent.fd, dst_dir_fd=folder.fd)
                    return
                except OSError as error:
                    if error.errno != errno.EXDEV:
                        raise
                _mark_in_place(folder, number)
            failed.extend(remove(parent, name, mounts))

        outcome, why = take(top, path, journal.identity(path), into_trash, same_inode=number in started)
        problems += [why] if why else failed
        if outcome is Outcome.DONE and not failed:
            moved.add(path)
        changed += outcome is Outcome.CHANGED
    return moved, problems, changed


def _mark_in_place(folder: Folder, number: int) -> None:
    """Say in the journal's folder, durably, that entry ``number`` is about to be deleted where it
    is: a kill part-way leaves it changed by this prune, which the next one finishes."""
    handle = create_new(folder, f"{number:06d}.in-place", 0o644)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
    folder.fsync()


def _marked(folder: Folder) -> frozenset[int]:
    """The entries (by place in the journal's list) a prune began deleting where they are."""
    return frozenset(int(found.group(1)) for name in folder.names() if (found := _IN_PLACE.fullmatch(name)))


def _ours_in_trash(name: str) -> bool:
    """Whether a journal folder's ``name`` is what a prune puts there, besides its journal: an
    entry moved in, a mark of one deleted in place, a journal's temporary file."""
    return bool(_MOVED.fullmatch(name) or _IN_PLACE.fullmatch(name)) or name == JOURNAL + ".tmp"


def _finish(trash: Folder, folder: Folder) -> list[str]:
    """Remove what was moved into ``folder``, then its journal, then the folder: past the
    journal's removal nothing waits on what could not be removed (reported)."""
    problems = []
    strays = []
    mounts = mount_points()
    marks = []
    try:
        journal: Journal | None = _read_journal(folder)[0] if folder.lstat(JOURNAL) is not None else None
    except ActionError:
        journal = None
    for name in folder.names():
        if _MOVED.fullmatch(name):
            failed = remove(folder, name, mounts)
            if failed and journal is not None and int(name) < len(journal.entries):
                # the trash's own name says nothing to the user: say what it was in the run
                was = os.path.join(journal.run, journal.entries[int(name)])
                failed = [f"{line} (it was {was}, and waits in ckptdoctor's trash: the next prune tries again)" for line in failed]
            problems += failed
        elif _IN_PLACE.fullmatch(name):
            marks.append(name)
        elif name not in (JOURNAL, JOURNAL + ".tmp"):
            strays.append(name)
    for name in (*marks, JOURNAL + ".tmp", JOURNAL):  # the journal last: until here a rerun would finish the job
        if folder.lstat(name) is not None:
            with folder.about(name):
                os.unlink(name, dir_fd=folder.fd)
    if strays:
        problems.append(f"{folder.path} holds {', '.join(strays)}, which ckptdoctor did not put there: left as it is")
    if problems:
        return problems  # the folder stays, with no journal: the next prune tries again
    with trash.about(os.path.basename(folder.path)):
        os.rmdir(os.path.basename(folder.path), dir_fd=trash.fd)
    trash.fsync()
    return problems


def _delete_in_place(top: Folder, journal: Journal) -> tuple[set[str], list[str], int]:
    """Delete the entries where they are, in the plan's order (its checkpoints oldest first);
    (those deleted, problems, how many were left because changed)."""
    deleted: set[str] = set()
    changed = 0
    problems: list[str] = []
    mounts = mount_points()
    for path in journal.entries:
        failed: list[str] = []

        def in_place(parent: Folder, name: str, failed: list[str] = failed) -> None:
            failed.extend(remove(parent, name, mounts))

        outcome, why = take(top, path, journal.identity(path), in_place)
        problems += [why] if why else failed
        if outcome is Outcome.DONE and not failed:
            deleted.add(path)
        changed += outcome is Outcome.CHANGED
    return deleted, problems, changed


def still_meant(top: Folder, relative: str, written: float, busy: frozenset[str], seen: Seen = NOTHING_SEEN) -> bool:
    """Whether an entry is still as it was when it was planned (``written``): reached inside the
    run without a symlink, not modified since, not held open (``busy``); for a folder, nothing
    inside it either (a folder that cannot be read through is not). A file the scan saw
    (``seen``, by path in the run) must still have the size and modification time it saw: a
    filesystem's clock may lag this machine's, and a copy may carry an old time."""
    if not plain(relative) or os.path.join(top.path, relative) in busy:
        return False
    try:
        parent, name = top.reach(relative)
    except (Escapes, OSError):
        return False
    with parent:
        info = parent.lstat(name)
        if info is None or changed_since(info, seen.get(os.path.normpath(relative)), written):
            return False
        if not stat.S_ISDIR(info.st_mode):
            return True
        unreadable: list[OSError] = []
        # a rewritten file does not touch its folder's mtime; a folder this user may not open, or
        # one nested past DEEPEST (the walk recurses), is not known unchanged
        try:
            for below, _, names, fd in os.fwalk(name, onerror=unreadable.append, dir_fd=parent.fd):
                if below.count(os.sep) > DEEPEST:
                    return False
                for inner in names:
                    try:
                        found = os.stat(inner, dir_fd=fd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    scanned = seen.get(os.path.normpath(os.path.join(os.path.dirname(relative), below, inner)))
                    if os.path.join(parent.path, below, inner) in busy or changed_since(found, scanned, written):
                        return False
        except OSError:
            return False
        return not unreadable


def changed_since(info: os.stat_result, scanned: Entry | None, written: float) -> bool:
    """Whether an entry was written after its plan (``written``): otherwise than the scan saw
    it (its time, and a file's size: a filesystem's clock may lag this machine's, and a copy
    may carry an old time), or at a time after the plan. A time after the plan that the scan
    saw already is no write since: a clock ahead of this one's dated it. An entry the scan did not
    see is also judged by its change time, which no copy sets back (`rsync -a` into the folder)."""
    if scanned is not None and (info.st_mtime != scanned.mtime or (not stat.S_ISDIR(info.st_mode) and info.st_size != scanned.size)):
        return True
    if scanned is None:
        return max(info.st_mtime, info.st_ctime) > written
    return info.st_mtime > written and info.st_mtime != scanned.mtime


def _journals(home: str) -> Iterator[tuple[Folder, str, Folder]]:
    """(trash, name, folder) for each folder in the trash, never through a symlink."""
    return own_folders(home, TRASH)


def _read_journal(folder: Folder) -> tuple[Journal, float]:
    """A journal and when it was written; ActionError if it is no journal ckptdoctor wrote."""
    try:
        written = os.stat(JOURNAL, dir_fd=folder.fd, follow_symlinks=False).st_mtime
        journal = Journal.decode(read_record(folder, JOURNAL))
    except (OSError, ValueError) as error:
        raise ActionError(
            f"an interrupted prune left {os.path.join(folder.path, JOURNAL)}, which cannot be completed ({error}); "
            "check that folder, then run prune with --discard-journal to go on"
        ) from error
    return journal, written


def _meant(
    top: Folder, journal: Journal, written: float, busy: frozenset[str], kept: frozenset[str], started: frozenset[int] = frozenset()
) -> list[str]:
    """The listed entries finishing a journal still deletes: in the run unchanged, the same inode
    it listed, not held open, and not kept by the policy of the prune finishing it. One it had
    begun deleting where it is (``started``) is changed by that deletion alone: it only has to be
    the same inode, with nothing in it held open."""
    meant = []
    for number, path in enumerate(journal.entries):
        if ours(path) or _under(path, kept):
            continue
        info = top.look(path)
        listed = journal.identity(path)
        if info is None or listed is None:
            continue
        if number in started:
            inside = os.path.join(top.path, path)
            if identity(info)[:2] == tuple(listed)[:2] and not any(p == inside or p.startswith(inside + os.sep) for p in busy):
                meant.append(path)
        elif still_meant(top, path, written, busy) and identity(info) == listed:
            meant.append(path)
    return meant


def _under(path: str, kept: frozenset[str]) -> bool:
    """Whether ``path`` is kept, holds something kept, or lies in a kept folder."""
    return path in kept or any(other.startswith(path + os.sep) or path.startswith(other + os.sep) for other in kept)


def _pending_journals(
    top: Folder, home: str, busy: frozenset[str], kept: frozenset[str]
) -> Iterator[tuple[Folder, Folder, Journal, list[str]]]:
    """(trash, journal folder, journal, the entries finishing it deletes) for each journal a
    killed prune left."""
    for trash, _, folder in _journals(home):
        if folder.lstat(JOURNAL) is not None:
            journal, written = _read_journal(folder)
            yield trash, folder, journal, _meant(top, journal, written, busy, kept, _marked(folder))


def pending(root: str, home: str, busy: frozenset[str] = frozenset(), kept: frozenset[str] = frozenset()) -> list[Pending]:
    """What each journal a killed prune left would still do (``finish_interrupted``)."""
    found = []
    with open_run(root) as top:
        for _, folder, journal, meant in _pending_journals(top, home, busy, kept):
            in_trash = sum(1 for name in folder.names() if _MOVED.fullmatch(name))
            spared = tuple(path for path in journal.entries if path not in meant and top.look(path) is not None)
            found.append(Pending(os.path.join(folder.path, JOURNAL), in_trash, tuple(meant), spared))
    return found


def finish_interrupted(root: str, home: str, busy: frozenset[str] = frozenset(), kept: frozenset[str] = frozenset()) -> Finished:
    """Complete what earlier, killed prunes' journals list (see ``pending``)."""
    finished: list[str] = []
    problems: list[str] = []
    with open_run(root) as top:
        for trash, folder, journal, meant in _pending_journals(top, home, busy, kept):
            already = [journal.entries[int(name)] for name in folder.names() if _MOVED.fullmatch(name) and int(name) < len(journal.entries)]
            moved, failed, _ = _move_all(top, folder, journal, set(meant), _marked(folder))
            finished += already + sorted(moved)
            problems += failed + _finish(trash, folder)
    return Finished(tuple(finished), tuple(problems))


def leftovers(home: str, remove: bool) -> tuple[list[str], list[str]]:
    """Trash folders with no journal: what a finished prune could not remove (an immutable file),
    tried again when ``remove``, and a folder holding what ckptdoctor never put there, left
    alone. (notes, what still cannot be removed.)"""
    notes: list[str] = []
    failed: list[str] = []
    for trash, _, folder in _journals(home):
        if folder.lstat(JOURNAL) is not None:
            continue
        names = folder.names()
        if not all(_ours_in_trash(item) for item in names):
            notes.append(f"{folder.path} holds files ckptdoctor did not put there: left as it is")
        elif remove:
            failed += _finish(trash, folder)
        elif names:
            notes.append(f"{folder.path} holds what an earlier prune could not remove; a prune without --dry-run tries again")
    return notes, failed


def discard(root: str, home: str) -> tuple[int, list[str]]:
    """Drop the journals killed prunes left: what they had moved into their trash goes back to
    its place in the run where that place is free; (entries put back, what was left and why)."""
    restored = 0
    left: list[str] = []
    with open_run(root) as top:
        for trash, name, folder in _journals(home):
            listed: tuple[str, ...] = ()
            if folder.lstat(JOURNAL) is not None:
                listed = _read_journal(folder)[0].entries
            for item in folder.names():
                if not _MOVED.fullmatch(item) or int(item) >= len(listed) or ours(listed[int(item)]):
                    continue
                try:
                    parent, place = top.reach(listed[int(item)])
                except (Escapes, OSError) as error:
                    left.append(f"{os.path.join(folder.path, item)} ({listed[int(item)]}): {error}")
                    continue
                with parent:
                    if put_back(folder, item, parent, place):
                        restored += 1
                    else:
                        left.append(f"{os.path.join(folder.path, item)}: {listed[int(item)]} is in the run again")
            if left:
                continue
            for stale in (JOURNAL, JOURNAL + ".tmp", *(name for name in folder.names() if _IN_PLACE.fullmatch(name))):
                if folder.lstat(stale) is not None:  # an entry it began deleting in place stays as the deletion left it
                    with folder.about(stale):
                        os.unlink(stale, dir_fd=folder.fd)
            if not folder.names():
                with trash.about(name):  # the journal's id alone names no folder
                    os.rmdir(name, dir_fd=trash.fd)
    return restored, left
