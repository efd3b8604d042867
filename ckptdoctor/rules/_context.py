"""What every check needs about the run it looks at, and how it words a finding."""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from ckptdoctor.layouts.registry import Layout
from ckptdoctor.model import CheckpointFile, Finding, Role, Run, Severity
from ckptdoctor.rules._rule import Rule

_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class Thresholds:
    """Where size outliers start (configurable later through ``[tool.ckptdoctor]``)."""

    undersized: float = 0.5
    """A file below this fraction of its role's median is undersized (CKD208)."""
    oversized: float = 2.0
    """A file above this multiple of its role's median is oversized (CKD209)."""
    optimizer_margin: float = 1.5
    """Optimizer state may exceed its kind's usual ratio to the model by this factor."""
    min_peers: int = 3
    """Medians need at least this many files of a role."""


@dataclass(frozen=True)
class RunContext:
    run: Run
    layout: Layout
    thresholds: Thresholds = field(default_factory=Thresholds)
    memo: dict[str, object] = field(default_factory=dict, compare=False, hash=False)
    """What one family's checks work out once and share (each family keys its own entries)."""

    @functools.cached_property
    def files(self) -> list[tuple[int, CheckpointFile]]:
        """Every file of every checkpoint with its index, in order: what most checks walk."""
        return [(c.index, f) for c in self.run.checkpoints for f in c.files]

    @property
    def fix_context(self) -> dict[str, str]:
        return dict(self._fix_context)

    @functools.cached_property
    def _fix_context(self) -> dict[str, str]:
        return {"run": self.run.path, "unit": self.run.unit.value}

    def finding(
        self,
        rule: Rule,
        message: str,
        *,
        index: int | None = None,
        path: str | None = None,
        severity: Severity | None = None,
        context: Mapping[str, str] | None = None,
        extra_fixes: tuple[str, ...] = (),
        case: str | None = None,
    ) -> Finding:
        values = self.fix_context
        if index is not None:
            values["index"] = str(index)
        if path is not None:
            values["path"] = path
            values["name"] = path.rsplit("/", 1)[-1]
        values.update(context or {})
        return make_finding(rule, message, self.run.path, index, path, severity, values, self.layout.fix_keys, case, extra_fixes)

    def sibling_name(self, role: Role, index: int) -> str | None:
        """The name a missing file of ``role`` would have at ``index``, from the nearest
        checkpoint that has one (the lower index on a tie)."""
        saved = self._named(role)
        position = bisect.bisect_left(saved, (index, ""))
        nearby = [saved[i] for i in (position - 1, position) if 0 <= i < len(saved)]
        if not nearby:
            return self.layout.file_name(role, index)
        found, name = min(nearby, key=lambda pair: abs(pair[0] - index))
        return renumber(name, found, index)

    def _named(self, role: Role) -> list[tuple[int, str]]:
        """(index, name) of the first plain file of ``role`` in each checkpoint, by index: a run
        with a thousand broken checkpoints asks for a thousand names."""
        key = f"named:{role.value}"
        if key not in self.memo:
            named = []
            for checkpoint in self.run.checkpoints:
                name = next((f.name for f in checkpoint.files_for(role) if not f.bundled and Role.TEMP not in f.roles), None)
                if name is not None:
                    named.append((checkpoint.index, name))
            self.memo[key] = named
        return cast("list[tuple[int, str]]", self.memo[key])


def make_finding(
    rule: Rule,
    message: str,
    run: str | None,
    index: int | None = None,
    path: str | None = None,
    severity: Severity | None = None,
    context: Mapping[str, str] | None = None,
    frameworks: tuple[str, ...] = (),
    case: str | None = None,
    extra_fixes: tuple[str, ...] = (),
) -> Finding:
    """Every finding is made here: its fixes for ``case``, in the words of ``frameworks`` (a
    layout's ``fix_keys``) where they have their own, else in general words."""
    return Finding(
        code=rule.code,
        name=rule.name,
        severity=severity or rule.severity,
        run=run,
        index=index,
        path=path,
        message=message,
        fixes=extra_fixes + rule.fix_texts(context, frameworks, case),
    )


def renumber(name: str, old: int, new: int) -> str:
    """``optim-4.bpk`` at index 4 -> ``optim-5.bpk``; zero padding is kept."""
    for match in reversed(list(_DIGITS.finditer(name))):
        if int(match.group()) == old:
            digits = str(new).zfill(len(match.group()))
            return name[: match.start()] + digits + name[match.end() :]
    return name
