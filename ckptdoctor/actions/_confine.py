"""Reach what lies below a run without ever following a symlink.

A path checked once and used later can be swapped in between: a folder replaced by a symlink to
``/etc`` turns a rename "inside the run" into one outside it. So the run's folder (and
ckptdoctor's own) is opened once, and every entry below it is reached one name at a time, each
folder opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to the one above (``dir_fd``), as
``shutil.rmtree`` does on Linux. A descriptor keeps naming the folder it opened whatever is
renamed meanwhile; a symlink on the way is refused (``Escapes``), never followed.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import errno
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType

from ckptdoctor.errors import RefusedError
from ckptdoctor.model import Entry
from ckptdoctor.places import DEEPEST, relative
from ckptdoctor.records import Identity, plain

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ActionError(RefusedError):
    """The run cannot be changed (read-only, permissions, a planted symlink); nothing was half done."""


class Escapes(ActionError):
    """A symlink, or something that is no folder, stands where a folder of the run was."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path} is a symlink or no longer a folder; ckptdoctor does not follow it out of the run")
        self.path = path


def identity(info: os.stat_result) -> Identity:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def inside_run(root: str, paths: list[str]) -> list[str]:
    """``paths`` relative to the run's folder ``root``; ActionError if any lies outside it."""
    relative = [os.path.relpath(path, root) for path in paths]
    if not all(plain(path) for path in relative):
        raise ActionError("the plan names files outside the run: refused")
    return relative


def as_planned(root: str, entries: Iterable[Entry], identities: dict[str, Identity]) -> dict[str, Identity]:
    """The ``identities`` (by path relative to ``root``) still those the plan's scan saw: the same
    device and inode, and for a file the same size and modification time. An entry replaced or
    written since the scan is not the one the plan judged; the scan's own times are compared, not
    the clock's (a filesystem stamps a write with a coarser, or another machine's, clock)."""
    scanned = {relative(entry.os_path, root): entry for entry in entries if entry.inode is not None and not entry.is_symlink}
    return {path: found for path, found in identities.items() if path not in scanned or _same(scanned[path], found)}


def _same(entry: Entry, found: Identity) -> bool:
    if entry.inode != found[:2]:
        return False
    # a float of seconds holds a time of now to a quarter of a microsecond
    return entry.is_dir or (entry.size == found[2] and abs(entry.mtime - found[3] / 1e9) < 1e-6)


class Mounted(Escapes):
    """A mount point stands where a folder of ckptdoctor's own was: another filesystem, someone's
    data mounted there, never reached into (``find -xdev``)."""

    def __init__(self, path: str) -> None:
        ActionError.__init__(
            self,
            f"{path} is a mount point (another filesystem) inside ckptdoctor's own folder; ckptdoctor does not reach into it: unmount it",
        )
        self.path = path


class Folder:
    """An open folder; ``path`` is how messages (and the open-files scan) name it. A folder opened
    ``within_mount`` (ckptdoctor's own) reaches no folder below it on another mount: every step
    is compared with the one above, as ``find -xdev`` does (and by mount, not only by device: a
    bind mount of a folder of the same filesystem has its device)."""

    def __init__(self, fd: int, path: str, within_mount: bool = False) -> None:
        self.fd = fd
        self.path = path
        self.within_mount = within_mount

    @classmethod
    def at(cls, path: str) -> Folder:
        """The folder the user named (symlinks in the user's own path are the user's choice)."""
        return cls(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), path)

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def child(self, name: str, create: bool = False) -> Folder:
        """The folder ``name`` in this one (made first with ``create``); Escapes if it is a symlink
        or no folder, FileNotFoundError if it is not there."""
        path = os.path.join(self.path, name)
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=self.fd)
        try:
            found = Folder(os.open(name, _DIRECTORY, dir_fd=self.fd), path, self.within_mount)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Escapes(path) from None
            error.filename = path  # the name alone (a journal's id) says not where it is
            raise
        if self.within_mount and mount_of(found.fd) != mount_of(self.fd):
            found.close()
            raise Mounted(path)
        return found

    def confined(self) -> Folder:
        """A new descriptor on this folder, ``within_mount`` (the caller closes it)."""
        return Folder(os.dup(self.fd), self.path, within_mount=True)

    def reach(self, relative: str, create: bool = False) -> tuple[Folder, str]:
        """The open folder holding ``relative``'s last name, and that name (the caller closes the
        folder); Escapes if a folder on the way is a symlink or ``relative`` is not plain."""
        if not plain(relative):
            raise Escapes(os.path.join(self.path, relative))
        *folders, name = relative.split(os.sep)
        return self.descend(folders, create), name

    def descend(self, names: list[str], create: bool = False) -> Folder:
        """A new descriptor on the folder ``names`` lead to from this one, opened one name at a
        time (made on the way with ``create``); Escapes or FileNotFoundError as ``child``."""
        current = Folder(os.dup(self.fd), self.path, self.within_mount)
        try:
            for name in names:
                deeper = current.child(name, create)
                current.close()
                current = deeper
        except BaseException:
            current.close()
            raise
        return current

    @contextlib.contextmanager
    def about(self, name: str | None = None) -> Iterator[None]:
        """An OSError raised within names the path it is about (``name`` in this folder, or the
        folder): relative to a descriptor, the system names only ``name``, or the descriptor's
        number (a bare ``8:``)."""
        try:
            yield
        except OSError as error:
            error.filename = os.path.join(self.path, name) if name is not None else self.path
            raise

    def lstat(self, name: str) -> os.stat_result | None:
        """``name`` in this folder as it is (a symlink is a symlink), or None when it is not there."""
        try:
            with self.about(name):
                return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def look(self, relative: str) -> os.stat_result | None:
        """``relative`` below this folder, reached without following links; None when it is not
        there or cannot be reached that way."""
        try:
            parent, name = self.reach(relative)
        except (Escapes, OSError):
            return None
        with parent:
            return parent.lstat(name)

    def names(self) -> list[str]:
        with self.about():
            return sorted(os.listdir(self.fd))

    def folders(self) -> list[str]:
        """The names in this folder that are real folders: a symlink or a stray file is no entry."""
        found = []
        for name in self.names():
            info = self.lstat(name)
            if info is not None and stat.S_ISDIR(info.st_mode):
                found.append(name)
        return found

    def mounts(self) -> list[str]:
        """The names in this folder that are mount points (folders of another mount)."""
        here, found = mount_of(self.fd), []
        for name in self.folders():
            try:
                handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
            except OSError:
                continue
            try:
                if mount_of(handle) != here:
                    found.append(name)
            finally:
                os.close(handle)
        return found

    def fsync(self) -> None:
        """Make the renames in this folder durable (a crash could otherwise undo them)."""
        with self.about():
            os.fsync(self.fd)


def mount_of(fd: int) -> tuple[str, int]:
    """Which mount the open file ``fd`` is on: its mount id (``/proc/self/fdinfo``), else, where
    the system does not say, its device."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as handle:
            for line in handle.read().decode("ascii", "replace").splitlines():
                key, _, value = line.partition(":")
                if key == "mnt_id":
                    return ("mount", int(value))
    except (OSError, ValueError):
        pass
    return ("device", os.fstat(fd).st_dev)


_ANCHORS: contextvars.ContextVar[tuple[tuple[str, Folder], ...]] = contextvars.ContextVar("anchors", default=())


@contextlib.contextmanager
def anchored(paths: Iterable[str]) -> Iterator[None]:
    """Around a whole acting command, from before its scan: the folders the user named are opened
    once, here, and a run below one of them is reached from that open folder without following a
    link. A folder swapped for a symlink afterwards — the named one, or one on the way to the run
    (``/data/runs/u`` -> ``/elsewhere``) — then sends nothing, not even ckptdoctor's own folder,
    out of what the user named."""
    opened: list[tuple[str, Folder]] = []
    try:
        for path in sorted({os.path.abspath(path) for path in paths}, key=len, reverse=True):
            try:
                opened.append((path, Folder.at(path)))
            except OSError:
                continue  # not a folder, or gone: the scan says so
        token = _ANCHORS.set(tuple(opened))
        try:
            yield
        finally:
            _ANCHORS.reset(token)
    finally:
        for _, folder in opened:
            folder.close()


def changed_since_scan(root: str, entries: Iterable[Entry]) -> str | None:
    """The first of ``entries`` (of the run in ``root``) that is gone, or is another file than
    the scan saw (inode, size, modification time), reached from the folders the user named as
    every action is; None when all are as they were. A symlink is followed to what it names, as
    the scan followed it; a folder, or a link to nothing, only has to be there."""
    with open_run(root) as top:
        for entry in entries:
            try:
                parent, name = top.reach(os.path.relpath(entry.os_path, root))
                with parent:
                    if entry.dangling:  # a link to nothing, as it was: it only has to be there still
                        if parent.lstat(name) is None:
                            return entry.path
                        continue
                    now = os.stat(name, dir_fd=parent.fd)
            except (Escapes, OSError):
                return entry.path
            if entry.is_dir:
                continue
            if (entry.inode is not None and (now.st_dev, now.st_ino) != entry.inode) or (now.st_size, now.st_mtime) != (
                entry.size,
                entry.mtime,
            ):
                return entry.path
    return None


def open_run(path: str) -> Folder:
    """The folder ``path`` of a run (or the folder holding ckptdoctor's own), reached from the
    nearest folder the user named (see ``anchored``) one folder at a time; Escapes if a folder
    below that one is a symlink. Outside every named folder it is opened by its path."""
    absolute = os.path.abspath(path)
    for given, top in _ANCHORS.get():
        if absolute == given or absolute.startswith(given.rstrip(os.sep) + os.sep):
            below = os.path.relpath(absolute, given)
            found = top.descend([] if below == os.curdir else below.split(os.sep))
            found.path = path
            return found
    return Folder.at(path)


def confirm_run(root: str, entries: Iterable[Entry], sample: int = 64) -> None:
    """ActionError unless the folder ``root`` opens to (see ``open_run``) holds entries the scan
    saw there, by device and inode: the named folder swapped for another between opening it and
    scanning it is refused before anything, ckptdoctor's own folder included, is made in it."""
    checked = matched = 0
    with open_run(root) as top:
        for entry in entries:
            if entry.inode is None or entry.is_symlink:
                continue
            relative = os.path.relpath(entry.os_path, root)
            found = top.look(relative) if plain(relative) else None
            if found is None:
                continue
            checked += 1
            if (found.st_dev, found.st_ino) == entry.inode:
                matched += 1
                break
            if checked >= sample:
                break
    if not matched:
        raise ActionError(
            f"{root} is not the folder that was scanned a moment ago (it was replaced or swapped meanwhile): nothing was done"
        )


def between(step: str, path: str) -> None:
    """Called between an acting command's steps (``step`` just done, on ``path``). It does
    nothing; tests replace it to swap folders at the worst moment, as a racing attacker would."""


class Outcome(enum.Enum):
    DONE = "done"
    GONE = "gone"
    """Not there any more: someone removed it."""
    CHANGED = "changed"
    """Another entry (or the same one rewritten) now stands at its place: left alone."""
    FAILED = "failed"
    """A symlink on the way, or the system refused (an immutable file, EIO): left, and said why."""


def take(
    top: Folder, relative: str, expected: Identity | None, act: Callable[[Folder, str], None], same_inode: bool = False
) -> tuple[Outcome, str]:
    """Do ``act`` (with the entry's folder and name) on ``relative`` below ``top`` only if it is
    still the entry that was planned: the same inode, unchanged (or, ``same_inode``, the same
    inode however changed: one this command's journal says it began deleting); the outcome, and
    for FAILED one line saying why. A folder on the way that is a symlink is never followed; a link or new file
    swapped in at the very end is what ``act`` meets by name, never followed (rename and unlink
    act on the name, ``remove`` checks each folder again)."""
    try:
        parent, name = top.reach(relative)
    except FileNotFoundError:
        return Outcome.GONE, ""
    except Escapes as error:
        return Outcome.FAILED, f"{error}; left as it is"
    except OSError as error:
        return Outcome.FAILED, f"{explain(error, os.path.join(top.path, relative))}; left in the run"
    with parent:
        info = parent.lstat(name)
        if info is None:
            return Outcome.GONE, ""
        compared = 2 if same_inode else len(identity(info))
        if expected is None or identity(info)[:compared] != tuple(expected)[:compared]:
            return Outcome.CHANGED, ""
        try:
            act(parent, name)
        except OSError as error:
            return Outcome.FAILED, f"{explain(error, os.path.join(top.path, relative))}; left in the run"
    return Outcome.DONE, ""


_MOUNTS = "/proc/self/mountinfo"


def mount_points() -> frozenset[str] | None:
    """Where filesystems are mounted (None where the system does not say)."""
    try:
        with open(_MOUNTS, "rb") as handle:
            lines = handle.read().decode("utf-8", "surrogateescape").splitlines()
    except OSError:
        return None
    # the fifth field, with spaces and the like written as octal escapes (\040)
    return frozenset(
        re.sub(r"\\([0-7]{3})", lambda code: chr(int(code.group(1), 8)), line.split()[4]) for line in lines if len(line.split()) > 4
    )


def mounted_in(folder: Folder, name: str, mounts: frozenset[str] | None) -> str | None:
    """A mount point inside the folder ``name`` (itself included), or None: a bind mount of
    someone's data into a checkpoint folder is another filesystem, never deleted with it."""
    info = folder.lstat(name)
    if info is None or not stat.S_ISDIR(info.st_mode):
        return None
    if info.st_dev != os.fstat(folder.fd).st_dev:
        return os.path.join(folder.path, name)
    for below, _, _, fd in os.fwalk(name, dir_fd=folder.fd):
        if below.count(os.sep) > DEEPEST:  # the walk recurses: what lies deeper is not known free of mounts
            return f"{os.path.join(folder.path, below)} (folders nested more than {DEEPEST} levels deep)"
        here = os.fstat(fd)
        where = os.readlink(f"/proc/self/fd/{fd}") if mounts is not None else os.path.join(folder.path, below)
        if here.st_dev != info.st_dev or (mounts is not None and where in mounts):
            return where
    return None


def remove(folder: Folder, name: str, mounts: frozenset[str] | None = None) -> list[str]:
    """Delete ``name`` in ``folder``, a whole tree for a folder (never following a link in it, never
    below a mount point: such a tree is left whole); what could not be deleted, each with why."""
    failed: list[str] = []
    info = folder.lstat(name)
    if info is None:
        return failed
    mount = mounted_in(folder, name, mount_points() if mounts is None else mounts)
    if mount is not None:
        return [f"{os.path.join(folder.path, name)}: holds the mount point {mount}; nothing in it was deleted"]

    def unlink(below: int, inner: str, path: str) -> None:
        try:
            os.unlink(inner, dir_fd=below)
        except FileNotFoundError:
            pass
        except OSError as error:
            failed.append(explain(error, path))

    if not stat.S_ISDIR(info.st_mode):
        unlink(folder.fd, name, os.path.join(folder.path, name))
        return failed

    def unreadable(error: OSError) -> None:
        failed.append(explain(error, os.path.join(folder.path, str(error.filename or name))))

    # bottom up, each folder opened without following a link and checked to be the one listed
    for below, folders, files, fd in os.fwalk(name, topdown=False, onerror=unreadable, dir_fd=folder.fd):
        for inner in files:
            unlink(fd, inner, os.path.join(folder.path, below, inner))
        for inner in folders:
            try:
                if stat.S_ISLNK(os.stat(inner, dir_fd=fd, follow_symlinks=False).st_mode):
                    os.unlink(inner, dir_fd=fd)  # a link to a folder: listed as one, never entered
                else:
                    os.rmdir(inner, dir_fd=fd)
            except FileNotFoundError:
                continue
            except OSError as error:
                failed.append(explain(error, os.path.join(folder.path, below, inner)))
    try:
        os.rmdir(name, dir_fd=folder.fd)
    except OSError as error:
        if not failed:
            failed.append(explain(error, os.path.join(folder.path, name)))
    return failed


def put_back(source: Folder, stored: str, target: Folder, name: str) -> bool:
    """Move ``stored`` (in ``source``) to ``name`` in ``target``, never over something that stands
    there: False (and nothing moved) when something does."""
    info = source.lstat(stored)
    if info is not None and not stat.S_ISDIR(info.st_mode):
        try:
            os.link(stored, name, src_dir_fd=source.fd, dst_dir_fd=target.fd, follow_symlinks=False)
        except FileExistsError:
            return False
        except OSError:
            pass  # no hard links here (some network filesystems): a rename, checked just before
        else:
            os.unlink(stored, dir_fd=source.fd)
            return True
    if target.lstat(name) is not None:
        return False
    os.rename(stored, name, src_dir_fd=source.fd, dst_dir_fd=target.fd)
    return True


def explain(error: OSError, path: str) -> str:
    """``path: reason (ECODE)``, one line."""
    code = errno.errorcode.get(error.errno or 0, "")
    return f"{path}: {error.strerror or error}{f' ({code})' if code else ''}"
