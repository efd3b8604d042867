"""Which files live processes hold open or mapped: ``prune`` and ``repair`` never touch those.

On Linux the process table is read from ``/proc`` directly: each process's descriptors
(``/proc/<pid>/fd``) and mapped files (``/proc/<pid>/maps``: ``safetensors`` and
``torch.load(mmap=True)`` keep a file mapped after closing it). There is no time limit: a check
cut short would let ``prune`` delete what a trainer holds. A mapping table is searched only when
it names a folder of the run at all, which keeps thousands of processes cheap. Elsewhere psutil
reads descriptors.

What cannot be read is said in a note: processes of other users, hidden from a user who is not
root (a root cron job sees them all). When the table cannot be read at all, or a process that
could be read fails part-way, every file is taken as open.
"""

from __future__ import annotations

import errno
import os
import pwd
from collections.abc import Iterable

_PROC = "/proc"


def open_by(paths: Iterable[str]) -> tuple[dict[str, int], str | None]:
    """``{path: pid}`` for the given paths some process has open or mapped (every path, with pid
    0, when that cannot be known), and a note on what could not be read."""
    wanted, folders = _resolved(paths)
    if not wanted:
        return {}, None
    if os.path.isdir(os.path.join(_PROC, "self", "fd")):
        return _from_proc(wanted, folders)
    return _from_psutil(wanted)


def _from_proc(wanted: dict[str, str], folders: frozenset[str]) -> tuple[dict[str, int], str | None]:
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
                held = _held(pid, folders, around)
            except PermissionError:
                held = _held(pid, folders, around)  # again: a process in the middle of exec is briefly hidden
            for real in held:
                path = wanted.get(real)
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


def _held(pid: int, folders: frozenset[str], around: str) -> list[str]:
    """The files process ``pid`` holds open or mapped that lie in one of ``folders`` (all of
    them below ``around``)."""
    base = os.path.join(_PROC, str(pid))
    held = []
    descriptors = os.path.join(base, "fd")
    for fd in os.listdir(descriptors):
        try:
            held.append(os.readlink(os.path.join(descriptors, fd)))
        except FileNotFoundError:
            continue  # closed meanwhile
    with open(os.path.join(base, "maps"), "rb") as handle:
        maps = handle.read().decode("utf-8", "surrogateescape")
    if around in maps:  # one search of the whole table first: most processes map nothing of the run
        held += [line.split(None, 5)[5].removesuffix(" (deleted)") for line in maps.splitlines() if around in line and line.count(" ") >= 5]
    return [path for path in held if os.path.dirname(path) in folders]


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
