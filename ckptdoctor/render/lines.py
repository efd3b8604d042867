"""Text for people broken into lines that fit the screen: at spaces only, never inside a word, a
path or a command (a code span), which goes whole on a line of its own where it does not fit;
and how wide stderr is, if it has a width at all.

Loaded by every message on stderr, so it imports neither rich nor the core: the width of a
character is measured by whoever asks (rich's ``cell_len`` where rich is loaded, else ``len``)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence

WORD = re.compile(r"(?:`[^`]*`|\d[\d.,]* (?:[KMGT]iB|B)\b|[^\s`]|`)+")
"""What a line is never broken inside: a word (a path is one), a code span (a command) with its
spaces, and a size with its unit (``214.4 KiB``)."""
MIN_PROSE = 40
"""The narrowest prose is wrapped to, however narrow the screen."""
CONTINUED = 2
"""How far a message's continuation lines are indented."""


def pieces(
    plain: str, width: int, indent: int = 0, measure: Callable[[str], int] = len, whole: Sequence[str] = ()
) -> Iterator[tuple[str, int, int]]:
    """Each word of ``plain`` (its start and end) with what goes before it: the spaces as given,
    or a line break and ``indent`` spaces where the word would pass ``width``. A word longer than
    a line is never broken: it starts a line of its own and the next word starts the next. What
    follows the last word (trailing spaces) is left out. ``whole``: texts in ``plain`` that are
    one word however many spaces they hold (a path with spaces, which a break would cut in two)."""
    column = 0
    previous = 0
    for start, end in _words(plain, whole):
        word = plain[start:end]
        gap = plain[previous:start]
        if "\n" in gap or (previous and column + len(gap) + measure(word) > width):
            gap, column = "\n" + " " * indent, indent
        else:  # the next word on this line, or the first after the text's own indentation
            column += len(gap)
        yield gap, start, end
        column += measure(word)
        previous = end


def _words(plain: str, whole: Sequence[str]) -> Iterator[tuple[int, int]]:
    """The spans of ``plain``'s words, each text of ``whole`` (where it holds a space) one of them."""
    kept = sorted({(at, at + len(text)) for text in whole if " " in text for at in _found(plain, text)})
    end = 0
    for match in WORD.finditer(plain):
        start, stop = match.span()
        if start < end:  # inside a text kept whole, already given
            continue
        for first, last in kept:
            if first <= start < last or start <= first < stop:
                start, stop = min(start, first), max(stop, last)
        end = stop
        yield start, stop


def _found(plain: str, text: str) -> Iterator[int]:
    at = plain.find(text)
    while at >= 0:
        yield at
        at = plain.find(text, at + len(text))


def fill(plain: str, width: int | None, indent: int = CONTINUED) -> str:
    """``plain`` wrapped to ``width`` (at least :data:`MIN_PROSE`), continuation lines indented;
    None: no screen to fit, one line as it is (scripts grep stderr: one message, one line)."""
    if width is None:
        return plain
    return "".join(gap + plain[start:end] for gap, start, end in pieces(plain, max(width, MIN_PROSE), indent))


def stderr_width() -> int | None:
    """The width stderr's lines are wrapped to where stderr is a terminal: ``$COLUMNS`` where set
    (as rich takes it), else the terminal's. None where stderr is no terminal (a pipe, a file, a
    log), whatever ``$COLUMNS`` says: there a message stays one line, as scripts grep it."""
    try:
        if not sys.stderr.isatty():
            return None
        columns = os.environ.get("COLUMNS", "")
        width = int(columns) if columns.isdigit() else os.get_terminal_size(sys.stderr.fileno()).columns
    except (AttributeError, ValueError, OSError):  # closed, or not a real file
        return None
    return width or None  # a terminal that says no width (0) has none to fit
