"""Who holds a lock: written into it (a file on disk, an object in a bucket) by whoever takes it,
read back by whoever finds it taken, and said in the "locked" message.

A lock in a bucket outlives its holder when the holder is killed; ``gone`` tells when that holder
was a process of this same machine that no longer runs, so that its lock is taken over at once
rather than at the end of its lease. A pid names one process only within one machine's boot (told
by the kernel's boot id: hostnames repeat across machines, and the first pid namespace has the same
number on every Linux host), within one pid namespace (a container has its own), and until it is
reused: the boot id, the namespace and the process's start time are written with it, and a lock
that does not say them all is never judged gone.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from dataclasses import asdict, dataclass, replace

import psutil

STARTED_WITHIN = 1.0
"""Seconds two readings of one process's start time may differ by (psutil rounds to clock ticks)."""


@dataclass(frozen=True)
class Holder:
    pid: int | None
    host: str | None
    user: str | None
    started: float | None
    """When the lock was taken, by the holder's clock."""
    born: float | None = None
    """When the holding process started: another process given the same pid later differs."""
    pidns: str | None = None
    """The holder's pid namespace (``/proc/self/ns/pid``): containers on one host each have one."""
    boot: str | None = None
    """The kernel's boot id (``/proc/sys/kernel/random/boot_id``): one machine, since it started."""
    nonce: str | None = None
    """Chosen by the holder for this lock: what tells its own write apart when an answer was lost."""
    lease: float | None = None
    """Seconds the lock holds without being renewed (buckets; None: the holder did not say)."""
    probe: bool = False
    """Written only to see whether the store honours ``If-None-Match``: never a lock to keep."""

    @classmethod
    def me(cls, nonce: str | None = None, lease: float | None = None) -> Holder:
        try:
            born: float | None = psutil.Process().create_time()
        except psutil.Error:
            born = None
        return cls(os.getpid(), socket.gethostname(), _user(), time.time(), born, _pid_namespace(), _boot_id(), nonce, lease)

    def probing(self) -> Holder:
        return replace(self, probe=True)

    def encode(self) -> bytes:
        return json.dumps({name: value for name, value in asdict(self).items() if value not in (None, False)}).encode()

    @classmethod
    def decode(cls, data: bytes) -> Holder | None:
        """The holder a lock names; None where it is not ckptdoctor's (not a JSON object)."""
        try:
            found = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(found, dict):
            return None

        def number(name: str) -> float | None:
            value = found.get(name)
            return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

        def text(name: str) -> str | None:
            value = found.get(name)
            return value[:200] if isinstance(value, str) and value.isprintable() else None

        pid = found.get("pid")
        return cls(
            pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
            text("host"), text("user"), number("started"), number("born"), text("pidns"), text("boot"), text("nonce"),
            number("lease"), found.get("probe") is True,
        )  # fmt: skip

    def said(self, since: bool = True) -> str:
        """``pid 2005 on node7 by ana, since 2026-12-07 01:02:03``: what is known of it, in words
        (``since``: when it was taken, by the holder's own clock, which a bucket's lock leaves out)."""
        who = " ".join(
            part
            for part in (
                f"pid {self.pid}" if self.pid is not None else "",
                f"on {self.host}" if self.host else "",
                f"by {self.user}" if self.user else "",
            )
            if part
        )
        taken = f", since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.started))}" if since and self.started is not None else ""
        return (who or "holder unknown") + taken

    def gone(self) -> bool:
        """Whether the holder was a process of this machine (and pid namespace) that no longer
        runs: its pid is free, or taken by a process started at another time."""
        if self.pid is None or self.pidns is None or self.born is None or self.boot is None:
            return False  # what it does not say cannot be judged: it waits for its lease
        if self.boot != _boot_id() or self.pidns != _pid_namespace() or self.host != socket.gethostname():
            return False
        try:
            return abs(psutil.Process(self.pid).create_time() - self.born) > STARTED_WITHIN
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:  # alive, and not ours to look at
            return False


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid with no name (a container's), no USER either
        return None


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read(64).strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
