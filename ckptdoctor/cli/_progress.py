"""The status line of a long scan: on stderr, on a terminal only, once the scan has taken about a
second, and gone when it ends (nothing left in the scrollback, nothing on stdout).

The pipelines count what they see in a :class:`~ckptdoctor.progress.Tally`; this module draws
it, from rich's refresh thread, a few times a second. A scan that ends within the delay shows
nothing at all."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from ckptdoctor.api import Tally, size
from ckptdoctor.cli._output import stderr_console

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live
    from rich.spinner import Spinner

PROGRESS_AFTER = 1.0
"""Seconds of scanning after which the status line appears."""
_DELAY = "CKPTDOCTOR_PROGRESS_AFTER"
"""Private: the tests set it (0 shows the line at once, whatever the scan) instead of waiting."""
_ETA_AFTER = 2.0
"""Seconds of reading after which the rate is steady enough to say what is left."""


def delay() -> float:
    """The delay before the line appears (:data:`PROGRESS_AFTER`, unless the tests lower it)."""
    try:
        return max(0.0, float(os.environ.get(_DELAY, PROGRESS_AFTER)))
    except ValueError:
        return PROGRESS_AFTER


class ScanStatus:
    """A transient status line while the work inside ``with`` runs; ``tally`` is what the
    pipeline counts into (None where no line can be shown: the pipeline then counts nothing).
    :meth:`stop` ends it early, before anything else is printed."""

    def __init__(self, quiet: bool) -> None:
        shown = not quiet and sys.stderr.isatty()
        self.tally: Tally | None = Tally() if shown else None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._live: Live | None = None
        self._spinner: Spinner | None = None
        self._console: Console | None = None
        self._stopped = False
        self._reading_since: tuple[float, int] | None = None

    def __enter__(self) -> ScanStatus:
        if self.tally is None:
            return self
        wait = delay()
        if wait <= 0:
            self._start()
        else:
            self._timer = threading.Timer(wait, self._start)
            self._timer.daemon = True  # never keeps a finished command alive
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Erase the line (if it was shown) and show it no more."""
        with self._lock:
            self._stopped = True
            if self._timer is not None:
                self._timer.cancel()
            if self._live is not None:
                self._live.stop()  # transient: the line is erased
                self._live = None

    def _start(self) -> None:
        # rich loads only when the line is shown
        from rich.live import Live
        from rich.spinner import Spinner

        with self._lock:
            if self._stopped:
                return
            self._spinner = Spinner("dots", style="cyan")
            self._console = stderr_console()
            live = Live(
                get_renderable=self._render, console=self._console, transient=True, refresh_per_second=8,
                redirect_stdout=False, redirect_stderr=False,
            )  # fmt: skip
            live.start(refresh=True)
            self._live = live

    def _render(self) -> Spinner:
        # rich loads only when the line is shown
        from rich.text import Text

        assert self._spinner is not None and self._console is not None and self.tally is not None
        # the spinner's frame and a space take two columns
        self._spinner.update(text=Text(shortened(self.line(self.tally), self._console.width - 2)))
        return self._spinner

    def line(self, tally: Tally) -> str:
        """``scanning: 1,204 folders · 503,112 files · 3 runs``, then, while ``verify`` reads,
        ``reading: 312 of 4,000 files · 1.2 GiB of 9.8 GiB · about 2 min left``."""
        if not tally.to_read:
            return f"scanning: {_count(tally.folders, 'folder')} · {_count(tally.files, 'file')} · {_count(tally.runs, 'run')}"
        now = time.monotonic()
        if self._reading_since is None:
            self._reading_since = (now, tally.bytes_read)
        began, at_first = self._reading_since
        left = ""
        rate = (tally.bytes_read - at_first) / (now - began) if now - began >= _ETA_AFTER else 0
        if rate > 0:
            left = f" · about {_duration((tally.bytes_to_read - tally.bytes_read) / rate)} left"
        return f"reading: {tally.read:,} of {_count(tally.to_read, 'file')} · {size(tally.bytes_read)} of {size(tally.bytes_to_read)}{left}"


def shortened(line: str, width: int) -> str:
    """``line`` with as many of its parts (`` · ``-separated) as fit in ``width``: those that do
    not are left out whole, never cut mid-number at the screen's edge. The first is always kept
    (a terminal narrower than it crops it)."""
    parts = line.split(_PART)
    kept = 1
    while kept < len(parts) and len(_PART.join(parts[: kept + 1])) <= width:
        kept += 1
    return _PART.join(parts[:kept])


_PART = " · "


def _count(n: int, one: str) -> str:
    return f"{n:,} {one}{'' if n == 1 else 's'}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"
