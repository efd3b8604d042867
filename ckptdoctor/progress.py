"""How far a long scan has got: counters the pipelines add to as they go, for a command line to
show (``cli/_progress.py`` draws them on a terminal). The core only counts; it never prints.

The pipelines add to a :class:`Tally` once per folder listed, run found and file read whole —
never once per entry of a folder — so counting costs nothing the listing loop would notice.
Whoever shows the figures reads them from another thread when it redraws: a figure read midway
is at worst one folder behind, which a status line can afford.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass(slots=True)
class Tally:
    """What a scan has seen and read so far (mutable: the one value in the core that is, being
    a running count)."""

    folders: int = 0
    """Folders listed."""
    files: int = 0
    """Entries of those folders that are not folders below them (files, links)."""
    runs: int = 0
    """Runs found."""
    to_read: int = 0
    """``verify``: files to read whole (0 until the reading starts)."""
    read: int = 0
    """``verify``: files read whole so far."""
    bytes_to_read: int = 0
    bytes_read: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_read(self, files: int, size: int) -> None:
        """Count ``files`` read whole and ``size`` more bytes read, from any thread (a cluster's
        tasks count their bytes as they finish, before their file is done: ``--ray``)."""
        with self._lock:
            self.read += files
            self.bytes_read += size
