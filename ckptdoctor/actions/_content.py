"""What an entry a repair quarantines holds, told apart from any other without reading it whole.

An undo on the run it was made in knows a quarantined entry by its inode. A copy of the run
(``cp -a``, a restore from a backup, a move to another disk) has other inodes, so the manifest
also records a fingerprint of each entry's content, taken just before it moves: for a file its
size, modification time (ns) and the first and last MiB; for a folder, that of every file in it
with its relative path, every link's target and every inner folder's name.

Why not a hash of the whole file: a repair only renames, and never reads the checkpoints it
moves. Hashing a 10 GB checkpoint would read it whole twice (repair and undo), on a disk that is
often full and in a hurry. The head and tail are where the formats keep what names their
content (a zip's central directory holds every record's CRC-32, safetensors its header,
HDF5 its superblock), the size catches a truncated or half copy, and the time in ns catches a
file written again since (``cp -a``, ``rsync -a``, ``mv`` across disks and most backups keep it
to the ns). What this cannot see is a file whose middle bytes were rewritten and its time put
back on purpose: whoever can do that in the quarantine can write the run itself, so undo is no
defence against them, and treats the fingerprint as telling copies from other files.
"""

from __future__ import annotations

import hashlib
import os
import stat

from ckptdoctor.actions._confine import Escapes, Folder, mount_of
from ckptdoctor.regular import open_regular

SAMPLE = 1 << 20
"""Read from each end of a file."""
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def fingerprint(top: Folder, relative: str, expected: tuple[int, int] | None = None) -> str | None:
    """The content fingerprint (hex) of ``relative`` below ``top``, reached without following a
    link; with ``expected`` (device, inode), only while it is still that inode. None where it
    cannot be read whole this way (gone, unreadable, replaced): nothing is then proven by it."""
    try:
        parent, name = top.reach(relative)
    except (OSError, Escapes):
        return None
    digest = hashlib.sha256()
    try:
        with parent:
            info = os.stat(name, dir_fd=parent.fd, follow_symlinks=False)
            if expected is not None and (info.st_dev, info.st_ino) != expected:
                return None
            if not stat.S_ISDIR(info.st_mode):
                _describe(digest, parent.fd, name, info)
                return digest.hexdigest()
            _tree(digest, os.open(name, _DIRECTORY, dir_fd=parent.fd))
    except OSError:
        return None
    return digest.hexdigest()


def _tree(digest: hashlib._Hash, top: int) -> None:
    """Every entry below the folder open as ``top`` (closed here), in name order, one level at a
    time (no recursion: a tree thousands of levels deep is walked too), never crossing a link
    or a mount (a bind mount of the same filesystem included: ``mount_of``)."""
    pending: list[tuple[bytes, int]] = [(b"", top)]
    mount = mount_of(top)
    try:
        while pending:
            prefix, fd = pending.pop()
            try:
                inner = []
                for name in sorted(os.listdir(fd)):
                    found = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    digest.update(prefix + os.fsencode(name) + b"\0")
                    if stat.S_ISDIR(found.st_mode):
                        digest.update(b"folder\0")
                        below = os.open(name, _DIRECTORY, dir_fd=fd)
                        if mount_of(below) != mount:
                            os.close(below)
                            raise OSError(f"{name} is a mount point")
                        inner.append((prefix + os.fsencode(name) + b"/", below))
                    else:
                        _describe(digest, fd, name, found)
            except BaseException:
                for _, opened in inner:
                    os.close(opened)
                raise
            finally:
                os.close(fd)
            pending += reversed(inner)  # popped in name order
    finally:
        for _, fd in pending:
            os.close(fd)


def _describe(digest: hashlib._Hash, parent: int, name: str, info: os.stat_result) -> None:
    """Feed ``digest`` with one entry that is not a folder: a file's size, time and ends, a
    link's target, or another kind's type."""
    if stat.S_ISLNK(info.st_mode):
        digest.update(b"link\0" + os.fsencode(os.readlink(name, dir_fd=parent)) + b"\0")
        return
    if not stat.S_ISREG(info.st_mode):
        digest.update(b"special %o\0" % stat.S_IFMT(info.st_mode))
        return
    fd = open_regular(name, dir_fd=parent)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            raise OSError(f"{name} was replaced while it was read")
        digest.update(b"file %d %d\0" % (now.st_size, now.st_mtime_ns))
        digest.update(_read(fd, 0, min(SAMPLE, now.st_size)))
        tail = max(SAMPLE, now.st_size - SAMPLE)
        digest.update(_read(fd, tail, now.st_size - tail))
    finally:
        os.close(fd)


def _read(fd: int, offset: int, count: int) -> bytes:
    """``count`` bytes at ``offset``; OSError where the file is shorter now than it said."""
    data = bytearray()
    while len(data) < count:
        chunk = os.pread(fd, count - len(data), offset + len(data))
        if not chunk:
            raise OSError(f"it ended {count - len(data)} bytes early")
        data += chunk
    return bytes(data)
