"""Renderers: one module per output format, declared once in :data:`RENDERERS`.

Each declaration names its module (``render/<name>.py``) and what it renders; the module gives
``render(report, options) -> str`` for a :class:`~ckptdoctor.model.Report` and, for the
:attr:`Kind.RULES` kind, ``render_rules(rules, options) -> str``. The formats each command's
``--format`` offers, and those ``format =`` in the configuration accepts, are read from here.

This module stays light (no renderer, rich or json is imported): the command line reads it to
build ``--help``; a renderer's module is imported only when something is rendered with it.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from ckptdoctor.model import Report
    from ckptdoctor.rules._rule import Rule


class Kind(enum.Enum):
    """What a renderer can be given."""

    REPORT = "report"
    """A :class:`~ckptdoctor.model.Report`: inspect, verify, diskcheck; prune and repair show
    their scan's findings in a format that has no plan (only human and json print plans)."""
    RULES = "rules"
    """The rule table, or the rules ``ckptdoctor rules QUERY`` explains."""


@dataclass(frozen=True)
class RenderOptions:
    """What a renderer is told beyond what it renders (most formats need none of it)."""

    show_all: bool = False
    """Every checkpoint of a run, not only the newest rows (human)."""
    to_file: bool = False
    """The text goes to a file, not the terminal: no colour, and wide lines (human)."""
    explain: bool = False
    """Rules asked about by code, name or message: each explained in full, not the table (human)."""


PLAIN = RenderOptions()


class _Module(Protocol):
    """A renderer's module: ``render_rules`` where it renders rules, ``summary`` where it has a job summary."""

    def render(self, report: Report, options: RenderOptions = PLAIN) -> str: ...

    def render_rules(self, rules: tuple[Rule, ...], options: RenderOptions = PLAIN) -> str: ...

    def summary(self, report: Report) -> str: ...


@dataclass(frozen=True)
class Renderer:
    """One output format: its name (that of its module under ``ckptdoctor.render``) and kinds."""

    name: str
    kinds: frozenset[Kind]
    for_people: bool = False
    """Nothing at all when the scan failed outright (the errors on stderr say it), and a count of
    findings on stderr after a report printed on stdout."""
    job_summary: bool = False
    """Also appends the module's ``summary(report)`` (Markdown) to ``$GITHUB_STEP_SUMMARY``
    when that is set, as GitHub Actions does."""

    def module(self) -> _Module:
        return cast("_Module", importlib.import_module(f"{__name__}.{self.name}"))


HUMAN = "human"
JSON = "json"
"""The formats prune and repair print their plans in (any other shows the scan's findings)."""

_BOTH = frozenset({Kind.REPORT, Kind.RULES})
RENDERERS = (
    Renderer(HUMAN, _BOTH, for_people=True),
    Renderer(JSON, _BOTH),
    Renderer("sarif", _BOTH),
    Renderer("junit", frozenset({Kind.REPORT})),
    Renderer("github", frozenset({Kind.REPORT}), job_summary=True),
)


def formats(kind: Kind = Kind.REPORT) -> tuple[str, ...]:
    """The names of the formats that render ``kind``, in the order of :data:`RENDERERS`."""
    return tuple(renderer.name for renderer in RENDERERS if kind in renderer.kinds)


def named(name: str, kind: Kind = Kind.REPORT) -> Renderer:
    """The renderer called ``name`` if it renders ``kind``; ValueError saying which do, else
    (one message for ``--format`` and ``format =`` in the configuration alike)."""
    for renderer in RENDERERS:
        if renderer.name == name and kind in renderer.kinds:
            return renderer
    raise ValueError(f"must be one of {_listed(formats(kind))}, not {name!r}")


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
