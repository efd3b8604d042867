"""Opening a file that could be anything: only regular files are read, and nothing waits to write.

A FIFO named like a checkpoint, or ``/dev/zero`` given as an option file, would block ``open``
forever or feed memory without end. Every file ckptdoctor reads is opened without blocking and
checked with ``fstat`` before the first byte is read; anything but a regular file is refused
with an ``OSError`` that says what it is, which each caller reports its own way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
from collections.abc import Iterable

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


class NotRegular(OSError):
    """The path is a FIFO, socket, device or folder, not a regular file."""


def open_regular(path: str | bytes, flags: int = 0, dir_fd: int | None = None) -> int:
    """A read-only descriptor of the regular file at ``path`` (``flags`` added, e.g. O_NOATIME).
    Relative to ``dir_fd``, a symlink is refused too: ckptdoctor's own files are never links."""
    if dir_fd is not None:
        flags |= os.O_NOFOLLOW
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | flags, dir_fd=dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise NotRegular(errno.EINVAL, f"{what}, not a regular file: ckptdoctor does not read it", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_to_read(path: str | bytes) -> int:
    """``open_regular`` for a scan: access times left alone (``O_NOATIME``) where the user may ask
    for that, which only a file's owner may."""
    try:
        return open_regular(path, _NOATIME)
    except PermissionError:
        if not _NOATIME:
            raise
        return open_regular(path)


_NOATIME = getattr(os, "O_NOATIME", 0)


def read_regular(path: str, limit: int, dir_fd: int | None = None) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes."""
    fd = open_regular(path, dir_fd=dir_fd)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise OSError(errno.EFBIG, f"{size} bytes, more than the {limit} ckptdoctor reads of such a file", path)
        data = bytearray()
        while chunk := os.read(fd, limit + 1 - len(data)):
            data += chunk
            if len(data) > limit:  # it grew while being read
                raise OSError(errno.EFBIG, f"more than the {limit} bytes ckptdoctor reads of such a file", path)
        return bytes(data)
    finally:
        os.close(fd)


def write_whole(path: str, data: bytes | Iterable[bytes]) -> None:
    """``data`` (or its parts, in order) as the whole of ``path``, for a file the user named (a
    report, a baseline). A regular file, or a name not taken, gets it whole or not at all: it is
    written beside it under a temporary name and renamed over it, so that a failure part-way (a
    full disk, a size limit, a report that fails to render) leaves the file as it was. Anything
    else (a FIFO, a terminal, ``/dev/null``), or a folder where this user may not create a file, is
    written in place, opened without blocking: a FIFO no process reads is refused (OSError ENXIO
    saying so) instead of waiting forever; one a process reads gets the data."""
    parts = (data,) if isinstance(data, bytes) else data
    target = os.path.realpath(path)  # through a symlink: the link stays, what it leads to is written
    try:
        kept = os.stat(target)
    except FileNotFoundError:
        kept = None
    except OSError:  # nothing known of it: written in place, where opening it says what it is
        kept = None
        target = ""
    if target and (kept is None or stat.S_ISREG(kept.st_mode)):
        try:
            temporary = _beside(target, kept)
        except OSError:  # a folder this user may not write: the file itself may still be
            pass
        else:
            try:
                with os.fdopen(temporary[0], "wb") as stream:
                    for part in parts:
                        stream.write(part)
                    stream.flush()
                    os.fsync(stream.fileno())
                os.replace(temporary[1], target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary[1])
                raise
            return
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as error:
        if error.errno == errno.ENXIO:
            raise OSError(errno.ENXIO, "a FIFO no process reads", path) from error
        raise
    os.set_blocking(handle, True)
    with os.fdopen(handle, "wb") as stream:
        for part in parts:
            stream.write(part)


def _beside(target: str, kept: os.stat_result | None) -> tuple[int, str]:
    """A new file beside ``target`` (its descriptor and path), with the mode of the file it will
    replace, else the one a new file gets (the umask applies as it would to ``target``)."""
    folder, name = os.path.split(target)
    while True:
        temporary = os.path.join(folder, f".{name}.{os.urandom(4).hex()}.partial")
        try:
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
        break
    if kept is not None:
        try:
            os.fchmod(handle, stat.S_IMODE(kept.st_mode))
        except OSError:
            os.close(handle)
            os.unlink(temporary)
            raise
    return handle, temporary


DENIED = frozenset({errno.EACCES, errno.EPERM})
"""The errors that say this user may not look, not that anything is wrong with what is there."""


def owner(path: str) -> str:
    """Who owns ``path`` (a user name, else the uid), or failing a look at it (a folder that may
    be read but not searched hides its entries), the folder nearest above it that can be looked
    at: who can say what this user cannot. '' where nothing can be looked at."""
    while True:
        try:
            uid = os.lstat(path).st_uid
        except OSError:
            parent = os.path.dirname(path)
            if not parent or parent == path:
                return ""
            path = parent
            continue
        return user_name(uid)


def user_name(uid: int) -> str:
    """The name of user ``uid``, else the number."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
