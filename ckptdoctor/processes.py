"""Which files live processes hold open or mapped: ``prune`` and ``repair`` never touch those.

On Linux the process table is read from ``/proc`` directly: each process's descriptors
(``/proc/<pid>/fd``) and mapped files (``/proc/<pid>/maps``: ``safetensors`` and
``torch.load(mmap=True)`` keep a file mapped after closing it). There is no time limit: a check
cut short would let ``prune`` delete what a trainer holds. A file is held whatever name the
process reached it by: each descriptor's file and each mapping is known by its device and inode
too (a bind mount, another hard link), not only by its path. A mapping table's lines are matched
by path only where it names a folder of the run at all. Elsewhere psutil reads descriptors, by
path.

Each descriptor is known by ``stat`` of ``/proc/<pid>/fd/<n>``, which reaches the open file
itself and needs no path: a process holding a path longer than ``PATH_MAX`` (whose link cannot be
read, ENAMETOOLONG) or one deleted since is still matched by its device and inode. Its path, where
the link can be read, matches too; where it cannot, that descriptor alone is matched by identity.

What cannot be read is said in a note, naming each process once per command (``said``): processes
of other users, hidden from a user who is not root (a root cron job sees them all). When the table
cannot be read at all, every file is taken as open; when one process's descriptors cannot be
identified, every file is taken as open by that process, under its pid.
"""

from __future__ import annotations

import errno
import os
import pwd
from collections.abc import Collection, Iterable, Mapping

PROC = "/proc"
"""Where the process table is read: tests point it at a fake one."""


Identity = tuple[int, int]
"""A file's (device, inode): the same file whatever path reaches it."""


Holder = int | str
"""Who holds a file: a process's pid, or why it is taken as held without one."""

UNREAD_TABLE = "taken as open: the process table cannot be read"


def open_by(
    paths: Iterable[str], identities: Mapping[str, Identity] | None = None, said: set[str] | None = None
) -> tuple[dict[str, Holder], str | None]:
    """``{path: holder}`` for the given paths some process has open or mapped (its pid; every
    path, with why, when that cannot be known), and a note on what could not be read. A file
    counts as held when a process holds it under any name: through a bind mount (a trainer in a
    container sees ``/mnt/data`` where cron prunes ``/data``), a symlinked folder or another hard
    link. So on Linux a held file is matched by its device and inode as well as by its path;
    ``identities`` gives those the caller has (its scan's), and the rest are looked up.
    ``said`` holds what this command's earlier notes said (a process named, a failure): the
    note says nothing twice, and adds what it says to it."""
    paths = list(paths)
    wanted, folders = _resolved(paths)
    if not wanted:
        return {}, None
    if os.path.isdir(os.path.join(PROC, "self", "fd")):
        found, hidden, failure = _from_proc(wanted, folders, _by_identity(paths, identities or {}))
    else:
        found, hidden, failure = _from_psutil(wanted)
    said = set() if said is None else said
    unsaid = sorted(hidden - said, key=lambda name: (not name.endswith(_OWN), int(name.split()[0])))
    said.update(hidden)
    notes = [_hidden_note(unsaid)] if unsaid else []
    if failure is not None and failure not in said:
        said.add(failure)
        notes.append(failure)
    return found, "; ".join(notes) or None


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


_Read = tuple[dict[str, Holder], set[str], str | None]
"""What a table held (``{path: holder}``), the processes it hid (named), and why it failed."""


def _from_proc(wanted: dict[str, str], folders: frozenset[str], identified: dict[Identity, str]) -> _Read:
    around = os.path.commonpath(list(folders))
    found: dict[str, Holder] = {}
    hidden: set[str] = set()
    try:
        pids = [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError as error:
        return (
            _everything(wanted, UNREAD_TABLE),
            hidden,
            f"the process table cannot be read ({error.strerror}): every file is taken as open",
        )
    me = os.getpid()
    for pid in pids:
        if pid == me:
            continue
        try:
            try:
                held, identities = _held(pid, folders, around)
            except PermissionError:
                held, identities = _held(pid, folders, around)  # again: a process in the middle of exec is briefly hidden
        except PermissionError:
            # this user's own too, where it made itself undumpable (ssh-agent does): named first
            hidden.add(named(pid) + (_OWN if os.geteuid() in _uids(pid) else ""))
            continue
        except OSError as error:
            if error.errno in (errno.ESRCH, errno.ENOENT):
                continue  # it exited meanwhile
            return (
                _everything(wanted, pid),
                hidden,
                f"the open files of process {named(pid)} cannot be read ({error.strerror}): every file is taken as open by it",
            )
        for real in held:
            path = wanted.get(real)
            if path is not None:
                found[path] = pid
        for identity in identities:
            path = identified.get(identity)
            if path is not None:
                found[path] = pid
    return found, hidden, None


def _held(pid: int, folders: frozenset[str], around: str) -> tuple[list[str], set[Identity]]:
    """The files process ``pid`` holds open or mapped that lie in one of ``folders`` (all of
    them below ``around``), by path; and the identities of every file it holds open or maps,
    wherever it reached them. A descriptor is known by ``stat`` of its link (the open file
    itself); its path only where the link can be read (not past ``PATH_MAX``)."""
    base = os.path.join(PROC, str(pid))
    held = []
    identities: set[Identity] = set()
    descriptors = os.path.join(base, "fd")
    for fd in os.listdir(descriptors):
        link = os.path.join(descriptors, fd)
        try:
            info = os.stat(link)  # the open file itself, whatever its path says, however long
        except FileNotFoundError:
            continue  # closed meanwhile
        identities.add((info.st_dev, info.st_ino))
        try:
            held.append(os.readlink(link))
        except OSError:
            continue  # a path too long to say (ENAMETOOLONG), or closed meanwhile: its identity stands for it
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


def writing(pid: int, identities: Collection[Identity]) -> bool:
    """Whether process ``pid`` holds one of the files ``identities`` name open for writing: a
    descriptor opened write-only or read-write, or a shared writable mapping. Where its table
    cannot be read, it is taken as writing (unknown is never "only reading")."""
    if not identities:  # files known by no identity cannot be told apart: taken as written
        return True
    base = os.path.join(PROC, str(pid))
    try:
        for fd in os.listdir(os.path.join(base, "fd")):
            try:
                info = os.stat(os.path.join(base, "fd", fd))
                if (info.st_dev, info.st_ino) not in identities:
                    continue
                with open(os.path.join(base, "fdinfo", fd), "rb") as handle:
                    flags = next((line.split()[1] for line in handle if line.startswith(b"flags:")), b"2")
            except FileNotFoundError:
                continue  # closed meanwhile
            if int(flags, 8) & os.O_ACCMODE != os.O_RDONLY:
                return True
        with open(os.path.join(base, "maps"), "rb") as handle:
            for line in handle:
                fields = line.split(None, 5)  # address, permissions, offset, device, inode, path
                if len(fields) >= 5 and fields[1].startswith(b"rw") and fields[1].endswith(b"s"):
                    major, _, minor = fields[3].partition(b":")
                    if (os.makedev(int(major, 16), int(minor, 16)), int(fields[4])) in identities:
                        return True
    except (OSError, ValueError):
        return True
    return False


def _uids(pid: int) -> frozenset[int]:
    """The users process ``pid`` runs as (real, effective, saved, filesystem), from its status,
    which anyone may read: its folder is root's once it made itself undumpable. Empty where
    neither tells."""
    base = os.path.join(PROC, str(pid))
    try:
        with open(os.path.join(base, "status"), "rb") as handle:
            line = next((line for line in handle if line.startswith(b"Uid:")), b"")
        return frozenset(int(field) for field in line.split()[1:])
    except (OSError, ValueError):
        pass
    try:
        return frozenset({os.stat(base).st_uid})
    except OSError:
        return frozenset()


def named(pid: int) -> str:
    """``pid (command, user)``: the process table's own words, for a note."""

    base = os.path.join(PROC, str(pid))
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


_OWN = " [this user's own, undumpable]"
"""Marks a hidden process that runs as this user: it hid its files (``prctl(PR_SET_DUMPABLE, 0)``),
so only root can tell what it holds."""


def _hidden_note(shown: list[str]) -> str:
    listed = ", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")
    return (
        f"the open and mapped files of process{'es' if len(shown) > 1 else ''} {listed} cannot be read by this user "
        "(another user's, or one with privileges this one lacks): files they hold were not checked"
        + ("; one of this user's own hides them: run as root, or stop it, if it may hold a checkpoint" if shown[0].endswith(_OWN) else "")
    )


def _from_psutil(wanted: dict[str, str]) -> _Read:
    import psutil  # only the acting commands read the process table

    found: dict[str, Holder] = {}
    hidden: set[str] = set()
    seen = 0
    try:
        processes = list(psutil.process_iter())
    except (psutil.Error, OSError) as error:
        return _everything(wanted, UNREAD_TABLE), hidden, f"the process table cannot be read ({error}): every file is taken as open"
    for process in processes:
        seen += 1
        try:
            files = process.open_files()
        except psutil.AccessDenied:
            hidden.add(str(process.pid))
            continue
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        for file in files:
            path = wanted.get(file.path)
            if path is not None:
                found[path] = process.pid
    if seen and len(hidden) == seen:
        return _everything(wanted, UNREAD_TABLE), set(), "no process's open files could be read: every file is taken as open"
    return found, hidden, None


def _everything(wanted: dict[str, str], holder: Holder) -> dict[str, Holder]:
    return dict.fromkeys(wanted.values(), holder)


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
