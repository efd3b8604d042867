"""Byte counts for people (binary units, as ``du -h`` and disk quotas count them), and what a
plan touches, counted."""

from __future__ import annotations


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def files_or_folders(count: int, folders: int) -> str:
    """``6 files``, ``2 folders``, or ``5 entries`` where ``folders`` of ``count`` are folders
    and the rest files: a checkpoint is a folder in some frameworks (HF's ``checkpoint-N``)."""
    if folders == 0:
        return f"{count} file{'s' if count != 1 else ''}"
    if folders == count:
        return f"{count} folder{'s' if count != 1 else ''}"
    return f"{count} entries"
