"""How a layout reads a name: ``Claim``, the words that tell roles and units, staging names,
numbered names, and sifting a big folder's names by a layout's ``claimable`` pattern.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

from ckptdoctor.discover import Listing
from ckptdoctor.model import Role, Unit


class Claim(NamedTuple):
    """A layout's reading of one file name (a NamedTuple: one is made per file)."""

    roles: tuple[Role, ...]
    number: int
    """The checkpoint index the name carries (``index`` is taken by tuple)."""
    prefix: str
    unit: Unit | None = None
    """The unit the name spells out (``epoch_3``, ``step-500``), if any."""


ROLE_WORDS: dict[str, Role] = {
    "model": Role.MODEL,
    "weights": Role.MODEL,
    "net": Role.MODEL,
    "optim": Role.OPTIMIZER,
    "optimizer": Role.OPTIMIZER,
    "sched": Role.SCHEDULER,
    "scheduler": Role.SCHEDULER,
}
"""Words that name a role in checkpoint file names (``lr_scheduler`` splits into ``scheduler``)."""


def guess_roles(prefix: str) -> tuple[Role, ...]:
    """What a file under an unfamiliar prefix most likely holds, judged from its name."""
    lowered = prefix.lower()
    for word in re.split(r"[-_.]+", lowered):
        if word in ROLE_WORDS:
            return (ROLE_WORDS[word],)
    if "optim" in lowered or "adam" in lowered or "sgd" in lowered:
        return (Role.OPTIMIZER,)
    if "sched" in lowered:
        return (Role.SCHEDULER,)
    return (Role.MODEL,)


TEMP_SUFFIX = re.compile(r"(?:\.[0-9]+-[0-9]+)?\.(?:tmp|temp|partial)\Z|\.tmp[0-9]*\Z", re.IGNORECASE)
"""``x.tmp``, ``x.partial`` and the atomic writers' ``x.<pid>-<n>.tmp`` scratch files."""


def temp_base(name: str) -> str | None:
    """The final name a staging file was going to become, or None if it is not one."""
    match = TEMP_SUFFIX.search(name)
    return name[: match.start()] if match and match.start() > 0 else None


def sifted(listing: Listing, claimable: re.Pattern[str]) -> Iterable[str]:
    r"""The names of ``listing`` that ``claimable`` matches, in order. A pattern anchored at the
    name's start (``^ep…``) is tried on every name, in C; any other ends the name and begins at a
    dot (``\.pth\Z``), so it matches a name exactly when it matches the name's suffix from its
    first dot, and is tried once per suffix: most names of a big folder share one
    (``tests/test_claims.py`` holds every layout's pattern to that)."""
    if claimable.pattern.startswith("^"):
        return filter(claimable.search, listing.names)
    groups = listing.by_suffix
    matched = [suffix for suffix in groups if claimable.search(suffix)]
    if len(matched) < 2:
        return groups[matched[0]] if matched else ()
    wanted = set(matched)
    return [name for name in listing.names if name[name.find(".") :] in wanted and "." in name]


def file_names(listing: Listing | None) -> frozenset[str]:
    """The names of the files (not folders) directly in ``listing``."""
    return listing.file_names if listing else frozenset()


UNIT_WORDS: dict[str, Unit] = {
    "epoch": Unit.EPOCH,
    "ep": Unit.EPOCH,
    "step": Unit.STEP,
    "steps": Unit.STEP,
    "iter": Unit.ITERATION,
    "iteration": Unit.ITERATION,
    "it": Unit.ITERATION,
}
"""Words that say what the number beside them counts (``epoch_3``, ``step-500``, ``iter5``)."""
CHECKPOINT_WORDS = frozenset({"checkpoint", "ckpt", "state", "snapshot"})
"""Words that call a numbered name a checkpoint (``checkpoint_3.pth``, ``ckpt-500/``)."""
SERIES_WORDS = frozenset(UNIT_WORDS) | CHECKPOINT_WORDS | {"save"}
_LETTERS = re.compile(r"[a-z]+")
_WORDS_AND_NUMBERS = re.compile(r"[a-z]+|[0-9]+")
_DIGITS = re.compile(r"[0-9]+")


def numbered(name: str) -> tuple[int, Unit | None] | None:
    """The index a folder's name carries (its last number) and the unit its words spell, if any:
    ``step_500`` -> (500, step), ``epoch_3`` -> (3, epoch), ``checkpoint-500`` -> (500, None)."""
    tokens = _WORDS_AND_NUMBERS.findall(name.lower())
    numbers = [token for token in tokens if token.isdigit()]
    if not numbers:
        return None
    return int(numbers[-1]), next((UNIT_WORDS[token] for token in tokens if token in UNIT_WORDS), None)


def numbers_a_series(name: str) -> bool:
    """Whether ``name``'s words (if any) number the saves of one loop (``step_500``, ``ckpt-3``),
    not experiments (``exp1``, ``seed42``)."""
    words = set(_LETTERS.findall(name.lower()))
    return not words or bool(words & SERIES_WORDS)


def series_pattern(name: str) -> str:
    """A name with its numbers blanked: saves of one loop share it (``step_#``)."""
    return _DIGITS.sub("#", name)


def common_unit(claims: Iterable[Claim], default: Unit) -> Unit:
    """The unit most of a run's names spell out; ``default`` where none does."""
    units = Counter(claim.unit for claim in claims if claim.unit is not None)
    return units.most_common(1)[0][0] if units else default
