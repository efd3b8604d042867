"""The shape of one rule of the rule table, and how its fixes are worded for a user.

A rule is data: the documentation that `ckptdoctor rules CODE` prints, SARIF help text and the
README table all come from the same record. Fixes are templates so that a finding can name
the user's own files ("Resume from epoch 4, ...") while `rules` prints the same advice in
general terms.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, ParamSpec, TypeVar

from ckptdoctor.model import Severity

GENERIC_CONTEXT: Mapping[str, str] = {
    "resume": "Resume from the newest complete checkpoint (`ckptdoctor inspect --resume RUN_DIR` prints its index)",
    "run": "RUN_DIR",
    "path": "the file",
    "name": "the file",
    "unit": "epoch",
    "index": "N",
    "expected": "the missing file",
    "prefix": "the prefix",
    "known": "the run's own prefix",
    "format": "the expected format",
    "ratio": "the usual ratio",
    "save_full": "HF, drop `save_only_model=True`; Lightning, `ModelCheckpoint(save_weights_only=False)`; your own loop, put `optimizer.state_dict()` and the scheduler's in the same `torch.save` as the weights",
}
"""What each fix placeholder says when no particular run is at hand (``ckptdoctor rules``)."""


@dataclass(frozen=True)
class Rule:
    """One row of the rule table (DESIGN §3.4) with the documentation that explains it."""

    code: str
    """``CKD`` + three digits; hundreds group families; never reused."""
    name: str
    """Kebab-case symbolic name, accepted wherever a code is."""
    severity: Severity
    """Default severity; a check may lower or raise it where the table says so."""
    summary: str
    """One line: what fired."""
    meaning: str
    """What it means for the run, in a paragraph."""
    causes: str
    """When it happens: the situations that produce it."""
    fixes: tuple[str, ...]
    """Concrete fixes, as templates over the placeholders of ``GENERIC_CONTEXT``."""
    messages: tuple[str, ...] = ()
    """Exact error messages of other tools that this rule explains."""
    related: tuple[str, ...] = ()
    """Codes of related rules."""

    @property
    def family(self) -> int:
        return int(self.code[3]) * 100

    @property
    def behind_resume(self) -> Severity | None:
        """The highest severity on a broken checkpoint older than the resume point: nothing
        resumes from it, so it is dead weight for ``prune``. None where the rule keeps its
        severity there (an unsafe file is not dead weight: whoever loads it runs its code)."""
        return Severity.WARNING if self.family in _LOWERED_BEHIND_RESUME else None

    @property
    def lowered_behind_resume(self) -> bool:
        """Whether a finding of this rule is less severe on a checkpoint nothing resumes from."""
        return self.behind_resume is not None and self.behind_resume.rank < self.severity.rank

    def fix_texts(self, context: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """The fixes worded for ``context`` (a run's own names), generic where it is silent."""
        values = _Context(context or {})
        return tuple(_FORMATTER.vformat(fix, (), values) for fix in self.fixes)

    def placeholders(self) -> frozenset[str]:
        """Every placeholder the fixes use (tests check each is known)."""
        names: set[str] = set()
        for fix in self.fixes:
            names.update(field for _, field, _, _ in _FORMATTER.parse(fix) if field)
        return frozenset(names)


P = ParamSpec("P")
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True)
class Check(Generic[P, R_co]):
    """A function that makes findings, with the rules it may fire: the registry's unit.

    Made by ``@fires(RULE, ...)`` on the function; calling it calls the function. The test
    suite holds every check to its word (a finding of a rule it does not declare fails the test
    that made it) and every rule to some check (tests/_fired_rules.py)."""

    run: Callable[P, R_co]
    fires: frozenset[Rule]

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co:
        return self.run(*args, **kwargs)

    @property
    def name(self) -> str:
        return f"{self.run.__module__}.{self.run.__qualname__}"


def fires(*rules: Rule) -> Callable[[Callable[P, R_co]], Check[P, R_co]]:
    """Declare the rules a check may fire: ``@fires(MISSING_MODEL, MISSING_OPTIMIZER)``."""

    def declare(run: Callable[P, R_co]) -> Check[P, R_co]:
        return Check(run, frozenset(rules))

    return declare


class _Context(dict[str, str]):
    def __init__(self, specific: Mapping[str, str]) -> None:
        super().__init__(GENERIC_CONTEXT)
        self.update(specific)


_FORMATTER = string.Formatter()
_LOWERED_BEHIND_RESUME = frozenset({100, 200, 300})
BEHIND_RESUME = "on a broken checkpoint older than the resume point: nothing resumes from it, and the fix is `prune`"
"""How the rule table and rule pages say what ``rules._harm.by_harm`` does."""
