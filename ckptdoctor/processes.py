"""Which files live processes hold open or mapped: ``prune`` and ``repair`` never touch those.

On Linux the process table is read from ``/proc`` directly: each process's descriptors
(``/proc/<pid>/fd``) and mapped files (``/proc/<pid>/maps``: ``safetensors`` and
``torch.load(mmap=True)`` keep a file mapped after closing it). There is no time limit: a check
cut short would let ``prune`` delete what a trainer holds. A file is held whatever name the
process reached it by: each descriptor's file and each mapping is known by its device and inode
too (a bind mount, another hard link), not only by its path. A mapping table's lines are matched
by path only where it names a folder of the run at all. Elsewhere psutil reads descriptors, by
path.

What cannot be read is said in a note: processes of other users, hidden from a user who is not
root (a root cron job sees them all). When the table cannot be read at all, or a process that
could be read fails part-way, every file is taken as open.
"""

from __future__ import annotations

import errno
import os
import pwd
from collections.abc import Iterable, Mapping

_PROC = "/proc"


Identity = tuple[int, int]
"""A file's (device, inode): the same file whatever path reaches it."""


def open_by(paths: Iterable[str], identities: Mapping[str, Identity] | None = None) -> tuple[dict[str, int], str | None]:
    """``{path: pid}`` for the given paths some process has open or mapped (every path, with pid
    0, when that cannot be known), and a note on what could not be read. A file counts as held
    when a process holds it under any name: through a bind mount (a trainer in a container
    sees ``/mnt/data`` where cron prunes ``/data``), a symlinked folder or another hard link.
    So on Linux a held file is matched by its device and inode as well as by its path;
    ``identities`` gives those the caller has (its scan's), and the rest are looked up."""
    paths = list(paths)
    wanted, folders = _resolved(paths)
    if not wanted:
        return {}, None
    if os.path.isdir(os.path.join(_PROC, "self", "fd")):
        return _from_proc(wanted, folders, _by_identity(paths, identities or {}))
    return _from_psutil(wanted)


def _by_identity(paths: list[str], known: Mapping[str, Identity]) -> dict[Identity, str]:
    """Each path by the identity of the file it names (looked up where ``known`` lacks it; a path
    that cannot be looked up is matched by its path alone)."""
    found: dict[Identity, str] = {}
    for path in paths:
        identity = known.get(path)
        if identity is None:
            try:
                info = os.stat(path)
            except OSError:
                continue
            identity = (info.st_dev, info.st_ino)
        found[identity] = path
    return found


def _from_proc(wanted: dict[str, str], folders: frozenset[str], identified: dict[Identity, str]) -> tuple[dict[str, int], str | None]:
    around = os.path.commonpath(list(folders))
    found: dict[str, int] = {}
    hidden: set[str] = set()
    try:
        pids = [int(name) for name in os.listdir(_PROC) if name.isdigit()]
    except OSError as error:
        return _everything(wanted), f"the process table cannot be read ({error.strerror}): every file is taken as open"
    me = os.getpid()
    for pid in pids:
        if pid == me:
            continue
        try:
            try:
                held, identities = _held(pid, folders, around)
            except PermissionError:
                held, identities = _held(pid, folders, around)  # again: a process in the middle of exec is briefly hidden
            for real in held:
                path = wanted.get(real)
                if path is not None:
                    found[path] = pid
            for identity in identities:
                path = identified.get(identity)
                if path is not None:
                    found[path] = pid
        except PermissionError:
            hidden.add(_named(pid))
        except (FileNotFoundError, ProcessLookupError):
            continue  # it exited meanwhile
        except OSError as error:
            if error.errno in (errno.ESRCH, errno.ENOENT):
                continue
            return _everything(wanted), f"process {pid}'s open files cannot be read ({error.strerror}): every file is taken as open"
    return found, _hidden_note(hidden)


def _held(pid: int, folders: frozenset[str], around: str) -> tuple[list[str], set[Identity]]:
    """The files process ``pid`` holds open or mapped that lie in one of ``folders`` (all of
    them below ``around``), by path; and the identities of every file it holds open or maps,
    wherever it reached them."""
    base = os.path.join(_PROC, str(pid))
    held = []
    identities: set[Identity] = set()
    descriptors = os.path.join(base, "fd")
    for fd in os.listdir(descriptors):
        link = os.path.join(descriptors, fd)
        try:
            target = os.readlink(link)
            if target.startswith("/"):  # a file, not a pipe, socket or anonymous inode
                info = os.stat(link)  # the open file itself, whatever its path says
                identities.add((info.st_dev, info.st_ino))
        except FileNotFoundError:
            continue  # closed meanwhile
        held.append(target)
    with open(os.path.join(base, "maps"), "rb") as handle:
        maps = handle.read().decode("utf-8", "surrogateescape")
    for line in maps.splitlines():
        # address, permissions, offset, device (major:minor, hex), inode, path: inode 0 is memory
        fields = line.split(None, 5)
        if len(fields) >= 5 and fields[4] != "0" and ":" in fields[3]:
            major, _, minor = fields[3].partition(":")
            identities.add((os.makedev(int(major, 16), int(minor, 16)), int(fields[4])))
            if len(fields) == 6 and around in fields[5]:
                held.append(fields[5].removesuffix(" (deleted)"))
    return [path for path in held if os.path.dirname(path) in folders], identities


def _named(pid: int) -> str:
    """``pid (command, user)``: the process table's own words, for a note."""

    base = os.path.join(_PROC, str(pid))
    try:
        with open(os.path.join(base, "comm"), "rb") as handle:
            command = handle.read().decode("utf-8", "replace").strip()
        uid = os.stat(base).st_uid
    except OSError:
        return str(pid)
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return f"{pid} ({command}, {user})"


def _hidden_note(hidden: set[str]) -> str | None:
    if not hidden:
        return None
    shown = sorted(hidden, key=lambda name: int(name.split()[0]))
    listed = ", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")
    return (
        f"the open and mapped files of process{'es' if len(shown) > 1 else ''} {listed} cannot be read by this user "
        "(another user's, or one with privileges this one lacks): files they hold were not checked"
    )


def _from_psutil(wanted: dict[str, str]) -> tuple[dict[str, int], str | None]:
    import psutil  # only the acting commands read the process table

    found: dict[str, int] = {}
    hidden = seen = 0
    try:
        processes = list(psutil.process_iter())
    except (psutil.Error, OSError) as error:
        return _everything(wanted), f"the process table cannot be read ({error}): every file is taken as open"
    for process in processes:
        seen += 1
        try:
            files = process.open_files()
        except psutil.AccessDenied:
            hidden += 1
            continue
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        for file in files:
            path = wanted.get(file.path)
            if path is not None:
                found[path] = process.pid
    if seen and hidden == seen:
        return _everything(wanted), "no process's open files could be read: every file is taken as open"
    return found, f"{hidden} processes' open files cannot be read by this user: files they hold were not checked" if hidden else None


def _everything(wanted: dict[str, str]) -> dict[str, int]:
    return dict.fromkeys(wanted.values(), 0)


def _resolved(paths: Iterable[str]) -> tuple[dict[str, str], frozenset[str]]:
    """Each path under its real name (what the process table shows), resolving each folder once
    (a run reached through a symlinked folder, ``/data`` -> ``/mnt/data``, still matches); and
    the real folders."""
    folders: dict[str, str] = {}  # as given -> the real folder, with its separator
    resolved: dict[str, str] = {}
    for path in paths:
        # not os.path.split and join: a big run has a hundred thousand paths, and these are
        # Python functions; "a//b" keys its folder as "a/", which resolves as "a" does
        head, separator, name = path.rpartition("/")
        folder = head or separator
        real = folders.get(folder)
        if real is None:
            real = os.path.realpath(folder or ".")
            real = folders[folder] = real if real.endswith("/") else real + "/"
        resolved[real + name] = path
    return resolved, frozenset(real if real == "/" else real[:-1] for real in folders.values())
