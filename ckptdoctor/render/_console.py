"""The rich consoles text for people is printed on: stdout's (or a file's) and stderr's."""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

WIDTH_OFF_TERMINAL = 120
"""Pipes and files get wide lines rather than rich's 80 columns: logs are read in editors."""


def stdout_console(file: io.StringIO | None = None) -> Console:
    """The terminal's console (its colours and width), or a plain, wide one writing to ``file``."""
    from rich.console import Console  # rich only when something is rendered for people

    if file is not None:
        return Console(file=file, width=WIDTH_OFF_TERMINAL, no_color=True, highlight=False)
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = WIDTH_OFF_TERMINAL
    return console


def stderr_console() -> Console:
    # rich loads only when something is rendered for people
    from rich.console import Console

    # one message, one line: scripts grep stderr, and wrapped paths do not paste back
    return Console(stderr=True, highlight=False, soft_wrap=True)
