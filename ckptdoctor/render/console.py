"""The rich consoles text for people is printed on: stdout's (or a file's) and stderr's."""

from __future__ import annotations

import io
import os
import sys
from typing import TYPE_CHECKING

from ckptdoctor.render.lines import stderr_width

if TYPE_CHECKING:
    from rich.console import Console

UNBOUNDED = 10_000
"""The width of text with no screen to fit (a file, a pipe with no terminal beside it and no
``$COLUMNS``): lines as long as they are, neither padded nor wrapped; a pager or editor wraps them."""


def stdout_console(file: io.StringIO | None = None) -> Console:
    """The terminal's console (its colours and width), or a plain, unbounded one writing to ``file``.

    Piped, stdout takes ``$COLUMNS`` if set, else the width of the terminal the user reads on
    (stderr's or stdin's: ``| less`` shows there), else no width at all: never rich's 80 columns
    padded out, nor a fixed width that a narrower pager wraps row by row."""
    from rich.console import Console  # rich only when something is rendered for people

    # emoji=False on every console: no `:name:` in a string (a file's name) becomes an emoji, and
    # rich's table of emoji names (3,600 of them, ~2 ms) is never loaded

    if file is not None:
        return _shows_controls(Console(file=file, width=UNBOUNDED, no_color=True, highlight=False, emoji=False))
    console = Console(highlight=False, emoji=False)
    if not console.is_terminal and "COLUMNS" not in os.environ and _terminal_width() is None:
        console.width = UNBOUNDED
    return _shows_controls(console)


def _terminal_width() -> int | None:
    """The width of a terminal on stderr or stdin, if either is one."""
    for stream in (sys.__stderr__, sys.__stdin__):
        try:
            if stream is not None and stream.isatty():
                return os.get_terminal_size(stream.fileno()).columns
        except (AttributeError, ValueError, OSError):  # closed, or not a real file
            continue
    return None


def stderr_console() -> Console:
    # rich loads only when something is rendered for people
    from rich.console import Console

    # with no width (a pipe, a file), one message, one line: scripts grep stderr
    return _shows_controls(Console(stderr=True, highlight=False, soft_wrap=stderr_width() is None, emoji=False))


def _shows_controls(console: Console) -> Console:
    # loaded with rich: the hook is a rich class
    from ckptdoctor.render._printable import ShowControls

    console.push_render_hook(ShowControls())
    return console
