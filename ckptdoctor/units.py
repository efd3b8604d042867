"""Byte counts for people (binary units, as ``du -h`` and disk quotas count them), and what a
plan touches, counted."""

from __future__ import annotations

from ckptdoctor.errors import InvalidValue


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def counted(n: int, one: str, many: str | None = None) -> str:
    """``1 checkpoint``, ``3 checkpoints``: ``n`` of ``one``, in its plural (``many``, else ``one``
    and an s) unless there is exactly one."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def files_or_folders(count: int, folders: int) -> str:
    """``6 files``, ``2 folders``, or ``5 entries`` where ``folders`` of ``count`` are folders
    and the rest files: a checkpoint is a folder in some frameworks (HF's ``checkpoint-N``)."""
    if folders == 0:
        return counted(count, "file")
    if folders == count:
        return counted(count, "folder")
    return counted(count, "entry", "entries")


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
}


def duration(seconds: float) -> str:
    """``90061`` -> ``1.0d``: a span of time in the unit that suits it."""
    for length, suffix in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= length:
            value = seconds / length
            return f"{value:.0f}{suffix}" if value >= 10 or value == int(value) else f"{value:.1f}{suffix}"
    return f"{seconds:.0f}s"


CLOCK_DRIFT = 300.0
"""Seconds a file's time may run ahead of the clock that judges it before it counts as dated in the
future (CKD214): clocks kept by NTP agree within milliseconds, and an NFS client's and server's
drift apart by seconds to a minute or two where it stopped; five minutes is the skew Kerberos allows
by default (``clockskew`` in krb5.conf), which NFSv4 with Kerberos already holds machines to."""


def ahead(when: float, now: float) -> float:
    """How far ``when`` lies in the future of ``now``, where that is beyond ``CLOCK_DRIFT``; 0 otherwise."""
    return when - now if when - now > CLOCK_DRIFT else 0.0


def parse_size(text: str, what: str) -> int:
    """``1.5GiB``, ``800MiB``, ``7G`` (binary, as ``du -h``), ``800MB`` (decimal, as a disk's label), or bytes; InvalidValue (a ValueError) otherwise."""
    cleaned = text.strip().lower().replace(" ", "")
    number = cleaned.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = cleaned[len(number) :]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in _UNITS or not 0 <= value * _UNITS[unit] < 2**63:  # also rejects nan and inf
        raise InvalidValue(f"{what}: not a size: {text!r} (use e.g. 1.5GiB, 800MiB or a number of bytes)")
    return int(value * _UNITS[unit])
