"""Names from a checkpoint folder, written for people and for shells.

A file's name is the user's data and may hold anything but ``/`` and NUL: control characters a
terminal obeys (``\\x1b]0;…`` retitles it), quotes, spaces, a leading dash. Shown, they are
escaped; in a command a fix prints, they are one shell word that names the file exactly.
"""

from __future__ import annotations

import re
import shlex

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Characters a terminal obeys rather than shows (tab and newline are shown as what they are)."""
_LINE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def has_control(text: str) -> bool:
    return _CONTROL.search(text) is not None


def printable(text: str, line: bool = False) -> str:
    """``text`` with each control character written as its escape (``\\x1b``): shown to whoever
    reads it, never obeyed by their terminal; ``line``: one line, its newlines escaped too."""
    return (_LINE if line else _CONTROL).sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def shell_word(text: str) -> str:
    """``text`` (a path) as one word of a POSIX shell command (bash, zsh, ksh): quoted where it
    needs it, in ``$'…'`` where it holds a control character, so that the command as printed,
    with no raw control character in it, still names the file, and after ``./`` where it starts
    with a dash, so that no command takes it for an option."""
    if text.startswith("-"):  # a relative path, not an option
        text = "./" + text
    if not has_control(text) and "\n" not in text and "\t" not in text:
        return shlex.quote(text)
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return "$'" + re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda match: f"\\x{ord(match.group()):02x}", escaped) + "'"
