"""Which rules explain a pasted error message, ranked, each with why it matched.

A rule's ``messages`` are the exact words other tools print (``…`` stands for whatever they fill
in: a path, a key). A message matches when its words appear in the pasted text in order, as one
run of words per piece, after case and punctuation are dropped: ``Can save optimizer checkpoint.``
never matches ``Can load optimizer checkpoint.``, however many words the two share. A paste
that is itself part of a message (``optimizer_states``) matches it too, at a lower score. Rare
words weigh more than common ones, so the most specific message wins: the inner cause of a
wrapped error (``Unsupported operand 118`` inside ``Weights only load failed…``) rather than the
wrapper. Equal scores keep the rule table's order.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from ckptdoctor.rules.registry import RULES
from ckptdoctor.rules.rule import Rule

GAP = "…"
"""In a documented message, what the tool fills in (a path, a key): any words, or none."""

_PART = 0.5
"""A paste that is only part of a message says less than one that holds a whole message."""


class Match(NamedTuple):
    """One rule that explains a pasted message: how well, and why."""

    rule: Rule
    score: float
    """The summed weight of the words matched: rare words weigh more (higher is better)."""
    why: str
    """What matched, in words: ``says "…"`` or ``is part of "…"``."""


def rank(text: str, rules: Sequence[Rule] = RULES) -> tuple[Match, ...]:
    """The rules whose documented messages match ``text``, best first."""
    pasted = _words(text)
    if not pasted:
        return ()
    weight = _weights(rules)
    found: list[Match] = []
    for rule in rules:
        best: Match | None = None
        for message in rule.messages:
            match = _match(rule, message, pasted, weight)
            if match is not None and (best is None or match.score > best.score):
                best = match
        if best is not None:
            found.append(best)
    # sorted() is stable: equal scores keep the rule table's order
    return tuple(sorted(found, key=lambda match: -match.score))


def _match(rule: Rule, message: str, pasted: tuple[str, ...], weight: dict[str, float]) -> Match | None:
    pieces = [words for words in (_words(piece) for piece in message.split(GAP)) if words]
    if not pieces:
        return None
    if _in_order(pieces, pasted):
        return Match(rule, _score(weight, (w for piece in pieces for w in piece)), f'says "{message}"')
    if len(pasted) >= 2 and any(_find(pasted, piece, 0) >= 0 for piece in pieces):
        return Match(rule, round(_PART * _score(weight, pasted), 2), f'is part of "{message}"')
    return None


def _in_order(pieces: Sequence[tuple[str, ...]], words: tuple[str, ...]) -> bool:
    start = 0
    for piece in pieces:
        at = _find(piece, words, start)
        if at < 0:
            return False
        start = at + len(piece)
    return True


def _find(needle: tuple[str, ...], haystack: tuple[str, ...], start: int) -> int:
    """Where ``needle`` first occurs as a run of words in ``haystack`` at or after ``start``; -1 if not."""
    for at in range(start, len(haystack) - len(needle) + 1):
        if haystack[at : at + len(needle)] == needle:
            return at
    return -1


def _score(weight: dict[str, float], words: Iterable[str]) -> float:
    return round(sum(weight.get(word, weight[""]) for word in words), 2)


def _weights(rules: Sequence[Rule]) -> dict[str, float]:
    """Each word's inverse document frequency over every documented message; ``""`` for unseen words."""
    messages = [set(_words(message)) for rule in rules for message in rule.messages]
    counts = Counter(word for words in messages for word in words)
    total = len(messages)
    weight = {word: math.log(1 + total / count) for word, count in counts.items()}
    weight[""] = math.log(1 + total)
    return weight


def _words(text: str) -> tuple[str, ...]:
    return tuple(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())
