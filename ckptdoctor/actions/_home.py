"""ckptdoctor's own folder in a run: where it is, its lock, and reading and writing the records
it keeps there (encoded and decoded by ``ckptdoctor.records``).

The lock is an advisory ``flock`` on the folder itself: it needs no data, so it is taken on a
full disk too. A ``lock`` file beside it says who holds it, when there is room to say so.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import os
import stat
from collections.abc import Iterator

from ckptdoctor.actions._confine import ActionError, Escapes, Folder, Mounted, open_run
from ckptdoctor.actions._holder import Holder
from ckptdoctor.errors import LockedError
from ckptdoctor.places import OWN_FOLDER
from ckptdoctor.regular import read_regular

MAX_RECORD = 256 * 1024 * 1024
"""A journal or manifest longer than this is refused: ckptdoctor never wrote it."""
LOCK = "lock"
FULL = (errno.ENOSPC, errno.EDQUOT)
"""What a full filesystem (or quota) answers a write with."""


class Locked(LockedError):
    """Another ckptdoctor holds the run's lock."""

    def __init__(self, run: str, holder: str) -> None:
        super().__init__(f"{run} is locked by another ckptdoctor ({holder}); try again when it has finished")
        self.holder = holder


_SHUT: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("shut", default=None)
"""Inside ``reading_only``: own folders this user may not read, each passed over as if absent."""


@contextlib.contextmanager
def reading_only() -> Iterator[list[str]]:
    """A pass that only reads (a dry run, which another user or a read-only account may make):
    an own folder this user may not read is passed over as if absent, and named in the list."""
    shut: list[str] = []
    token = _SHUT.set(shut)
    try:
        yield shut
    finally:
        _SHUT.reset(token)


def open_home(home: str, create: bool) -> Folder | None:
    """``home`` opened below the folder that holds ckptdoctor's own folder, never through a
    symlink (ActionError); None when it is not there and not to be made, or, in a pass
    ``reading_only``, this user may not read it."""
    if os.path.basename(home) == OWN_FOLDER:
        base, names = os.path.dirname(home), [OWN_FOLDER]
    else:
        base, names = os.path.dirname(os.path.dirname(home)), [OWN_FOLDER, os.path.basename(home)]
    try:
        base_folder = open_run(base or ".")
    except OSError as error:
        raise ActionError(f"cannot open {base}: {error.strerror}") from error
    with base_folder, base_folder.confined() as own_base:  # no mount point crossed from here down
        try:
            return own_base.descend(names, create)
        except FileNotFoundError:
            if create:
                raise
            return None
        except PermissionError:
            shut = _SHUT.get()
            if create or shut is None:
                raise
            if home not in shut:
                shut.append(home)
            return None
        except Mounted:
            raise
        except Escapes as error:
            raise ActionError(
                f"{error.path} is a symlink or no folder; ckptdoctor keeps what it moves inside the run and will not follow it: replace it with a folder"
            ) from None


def own_folders(home: str, kind: str) -> Iterator[tuple[Folder, str, Folder]]:
    """(``kind`` folder, name, entry) for each real folder in ckptdoctor's trash or quarantine
    (``kind``), each opened without following a link: a symlink or a stray file is no entry."""
    own = open_home(home, create=False)
    if own is None:
        return
    with own:
        try:
            parent = own.child(kind)
        except (FileNotFoundError, Escapes):
            return
    with parent:
        for name in parent.folders():
            try:
                entry = parent.child(name)
            except (OSError, Escapes):
                continue
            with entry:
                yield parent, name, entry


_HOLDING: contextvars.ContextVar[frozenset[tuple[int, int]]] = contextvars.ContextVar("holding", default=frozenset())
"""The own folders (device, inode) this command holds locked: one reached again under another
path (a bind mount of the run's parent inside the run) is the lock it holds, not another's."""


@contextlib.contextmanager
def locked(home: str, run: str) -> Iterator[None]:
    """Hold the run's lock; raises Locked (naming the holder) or ActionError at once.

    Both the folder and its ``lock`` file are locked: the folder always (a full disk cannot stop
    it), the file where it exists or can be made (it is what other versions lock, and it says
    who holds the lock)."""
    try:
        own = open_home(home, create=True)
    except OSError as error:
        raise ActionError(f"cannot make {home}: {error.strerror}") from error
    assert own is not None  # made where it was not
    with own:  # closing releases the flocks (the kernel does it too, if we are killed)
        info = os.fstat(own.fd)
        folder = (info.st_dev, info.st_ino)
        holding = _HOLDING.get()
        if folder in holding:  # this command's own lock, reached through another path
            yield
            return
        try:
            fcntl.flock(own.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Locked(run, _holder(own)) from None
        handle = _lock_file(own)
        token = _HOLDING.set(holding | {folder})
        try:
            if handle is not None:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise Locked(run, _holder(own)) from None
                _sign(handle)
            yield
        finally:
            _HOLDING.reset(token)
            if handle is not None:
                os.close(handle)


def holder_now(home: str) -> str | None:
    """Who holds the run's lock now, found without taking it (a dry run takes no lock and writes
    nothing): the holder its ``lock`` file names, where the kernel's table of locks shows the
    folder locked; None when no one holds it, or where that cannot be told."""
    try:
        own = open_home(home, create=False)
    except (ActionError, OSError):
        return None  # a dry run reads the run as it is; the lock itself is not its business
    if own is None:
        return None
    with own:
        return _holder(own) if _flocked(os.fstat(own.fd)) else None


_LOCKS = "/proc/locks"


def _flocked(info: os.stat_result) -> bool:
    """Whether a ``flock`` is held on the file ``info`` describes (False where the system does
    not say)."""
    try:
        with open(_LOCKS, "rb") as handle:
            lines = handle.read().decode("ascii", "replace").splitlines()
    except OSError:
        return False
    # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF": the file as major:minor (hex):inode
    held = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    return any(fields[1:2] == ["FLOCK"] and fields[5:6] == [held] for fields in (line.split() for line in lines))


def _lock_file(own: Folder) -> int | None:
    """The ``lock`` file, opened (made where it is not); None when the disk is too full to make
    it. Never through a symlink: a planted link would have the lock's note written over the file
    it names."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        handle = os.open(LOCK, flags, 0o644, dir_fd=own.fd)
    except OSError as error:
        if error.errno in FULL:
            return None
        why = "it is a symlink, which ckptdoctor does not follow" if error.errno == errno.ELOOP else error.strerror
        raise ActionError(f"cannot use the lock {os.path.join(own.path, LOCK)}: {why}") from error
    info = os.fstat(handle)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(handle)
        why = (
            "it is not a regular file"
            if not stat.S_ISREG(info.st_mode)
            else "it is a hard link to a file elsewhere, which ckptdoctor does not write"
        )
        raise ActionError(f"cannot use the lock {os.path.join(own.path, LOCK)}: {why}")
    return handle


def _sign(handle: int) -> None:
    """Say who holds the lock, in a lock file of this user's; on a full disk, say nothing (the
    lock holds all the same)."""
    if os.fstat(handle).st_uid != os.geteuid():
        return  # someone else's file: it is locked, never written
    try:
        os.ftruncate(handle, 0)
        os.pwrite(handle, Holder.me().encode(), 0)
    except OSError as error:
        if error.errno not in FULL:
            raise


def _holder(own: Folder) -> str:
    try:
        holder = Holder.decode(read_regular(LOCK, 4096, dir_fd=own.fd) or b"")
    except OSError:
        holder = None
    return holder.said() if holder is not None else "holder unknown"


def strays(home: str) -> list[str]:
    """What ckptdoctor never made in its own folder, its trash or its quarantine (a
    ``.DS_Store``, someone's notes, a symlink): ignored, and said so."""
    own = open_home(home, create=False)
    if own is None:
        return []
    found = []
    with own:
        for name in own.names():
            path = os.path.join(own.path, name)
            info = own.lstat(name)
            if name in ("trash", "quarantine") and info is not None and stat.S_ISDIR(info.st_mode):
                with own.child(name) as inner:
                    found += [os.path.join(path, entry) for entry in inner.names() if entry not in inner.folders()]
                    found += [f"{os.path.join(path, entry)} (a mount point: never reached into)" for entry in inner.mounts()]
            elif name != LOCK and not (name.startswith("pointer-") and name.endswith(".tmp")):
                found.append(path)
    return found


def write_record(folder: Folder, name: str, data: bytes) -> None:
    """Write ``name`` (an encoded ``records`` journal or manifest) in ``folder`` so that a crash
    leaves the old version or the new, whole."""
    temporary = name + ".tmp"
    handle = create_new(folder, temporary, 0o644)
    try:
        with os.fdopen(handle, "wb", closefd=False) as stream:
            stream.write(data)
        os.fsync(handle)
    finally:
        os.close(handle)
    os.replace(temporary, name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
    folder.fsync()


def create_new(folder: Folder, name: str, mode: int) -> int:
    """A new file ``name`` in ``folder``, open for writing: whatever stood there (a leftover of a
    killed command, or a hard link someone planted to a file elsewhere) is unlinked first, never
    truncated or written through."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder.fd)
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder.fd)


def read_record(folder: Folder, name: str) -> bytes:
    """A journal or manifest, to decode with ``records``: a regular file, not through a symlink,
    never longer than ckptdoctor writes (OSError if it is not one)."""
    return read_regular(name, MAX_RECORD, dir_fd=folder.fd)
