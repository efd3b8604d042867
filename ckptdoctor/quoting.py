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


_UNDECODED = re.compile("[\udc80-\udcff]")
"""A byte of a name that is not UTF-8, as ``os.fsdecode`` keeps it (a surrogate escape)."""
_SHOWN = re.compile(r"\\(\\|x[0-9a-f]{2})")


def shown(name: str) -> str:
    """A name (or path) as the OS gave it, as printed: each literal backslash doubled and each
    byte that is not UTF-8 as ``\\xNN``, so that two names never print alike (``a\\xff`` is
    the byte, ``a\\\\xff`` the four characters) and ``unshown`` gives back its bytes."""
    if "\\" in name:
        name = name.replace("\\", "\\\\")
    if name.isascii():
        return name
    return _UNDECODED.sub(lambda match: f"\\x{ord(match.group()) - 0xDC00:02x}", name)


def unshown(text: str) -> bytes:
    """The bytes of the name ``shown`` printed as ``text``."""
    parts = _SHOWN.split(text)
    raw = bytearray()
    for number, part in enumerate(parts):
        if number % 2 == 0:
            raw += part.encode("utf-8", "surrogateescape")
        else:
            raw += b"\\" if part == "\\" else bytes([int(part[1:], 16)])
    return bytes(raw)


def shell_word(text: str) -> str:
    """``text`` (a path as ``shown``) as one word of a POSIX shell command (bash, zsh, ksh) that
    names the file exactly: quoted where it needs it, in ``$'…'`` where it holds a control
    character or a byte that is not UTF-8 (each as ``\\xNN``), so that the command as printed,
    with no raw control character in it, still names the file, and after ``./`` where it starts
    with a dash, so that no command takes it for an option."""
    raw = unshown(text)
    if raw.startswith(b"-"):  # a relative path, not an option
        raw = b"./" + raw
    try:
        plain = raw.decode("utf-8")
    except UnicodeDecodeError:
        plain = None
    if plain is not None and not has_control(plain) and "\n" not in plain and "\t" not in plain:
        return shlex.quote(plain)
    word = []
    for char in raw.decode("utf-8", "surrogateescape"):
        if char in "\\'":
            word.append("\\" + char)
        elif _CONTROL.match(char) or char in "\n\t" or _UNDECODED.match(char):
            word += [f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogateescape")]  # C1: its two bytes
        else:
            word.append(char)
    return "$'" + "".join(word) + "'"
