"""The rich consoles text for people is printed on: stdout's (or a file's) and stderr's, styled
(colour, bold, dim) or not as :func:`use_colour` was told."""

from __future__ import annotations

import io
import os
import sys
from typing import TYPE_CHECKING, Any, Literal, TextIO

from ckptdoctor.render.lines import stderr_width

if TYPE_CHECKING:
    from rich.console import Console

UNBOUNDED = 10_000
"""The width of text with no screen to fit (a file, a pipe with no terminal beside it and no
``$COLUMNS``): lines as long as they are, neither padded nor wrapped; a pager or editor wraps them."""

AUTO, ALWAYS, NEVER = "auto", "always", "never"
COLOUR_CHOICES = (AUTO, ALWAYS, NEVER)
"""What ``--color`` takes."""

_colour = {"asked": AUTO}
"""The program's ``--color``: one command a process, told once, as it starts (:func:`use_colour`)."""


def use_colour(choice: str) -> None:
    """Style the text of the consoles made from now on as ``choice`` says (``--color``)."""
    if choice not in COLOUR_CHOICES:
        raise ValueError(f"--color is one of {', '.join(COLOUR_CHOICES)}, not {choice!r}")
    _colour["asked"] = choice


def styled(stream: TextIO | None) -> bool:
    """Whether text for ``stream`` is styled: ``--color always`` or ``never``, else none at all
    where ``NO_COLOR`` is set (https://no-color.org: rich's own would keep bold and dim), else
    styles where ``FORCE_COLOR`` is (https://force-color.org), else where ``stream`` is a terminal."""
    asked = _colour["asked"]
    if asked != AUTO:
        return asked == ALWAYS
    if os.environ.get("NO_COLOR", ""):
        return False
    if os.environ.get("FORCE_COLOR", ""):
        return True
    return _is_terminal(stream)


def _is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a real file
        return False


def _console(stderr: bool, **settings: Any) -> Console:
    """stdout's console (stderr's), styled or not as :func:`styled` says (whatever rich reads in
    the environment), and a terminal's where the stream is one."""
    from rich.console import Console  # rich only when something is rendered for people

    stream = sys.stderr if stderr else sys.stdout
    styles = styled(stream)
    # a terminal rich calls dumb has no colours of its own: --color always, FORCE_COLOR style it still
    system: Literal["auto", "standard"] | None = None
    if styles:
        system = "standard" if os.environ.get("TERM", "").lower() in ("dumb", "unknown") else "auto"
    # emoji=False on every console: no `:name:` in a string (a file's name) becomes an emoji, and
    # rich's table of emoji names (3,600 of them, ~2 ms) is never loaded
    console = Console(
        stderr=stderr, force_terminal=styles or _is_terminal(stream), no_color=False, color_system=system, highlight=False,
        emoji=False, **settings,
    )  # fmt: skip
    return _shows_controls(console)


def stdout_console(file: io.StringIO | None = None) -> Console:
    """The terminal's console (its colours and width), or a plain, unbounded one writing to ``file``.

    Piped, stdout takes ``$COLUMNS`` if set, else the width of the terminal the user reads on
    (stderr's or stdin's: ``| less`` shows there), else no width at all: never rich's 80 columns
    padded out, nor a fixed width that a narrower pager wraps row by row."""
    if file is not None:  # a file is plain text, whatever --color says
        from rich.console import Console  # rich only when something is rendered for people

        return _shows_controls(Console(file=file, width=UNBOUNDED, force_terminal=False, color_system=None, highlight=False, emoji=False))
    console = _console(stderr=False)
    if not _is_terminal(sys.stdout) and "COLUMNS" not in os.environ and _terminal_width() is None:
        console.width = UNBOUNDED
    return console


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
    # with no width (a pipe, a file), one message, one line: scripts grep stderr
    return _console(stderr=True, soft_wrap=stderr_width() is None)


def _shows_controls(console: Console) -> Console:
    # loaded with rich: the hook is a rich class
    from ckptdoctor.render._printable import ShowControls

    console.push_render_hook(ShowControls())
    return console
