"""Renderers: one module per output format, declared once in :data:`RENDERERS`.

Each declaration names its module (``render/<name>.py``) and what it renders; the module gives
``render(report, options)`` for a :class:`~ckptdoctor.model.Report`, for the
:attr:`Kind.RULES` kind ``render_rules(rules, options, matches) -> str`` (``matches``: why a
search chose each rule, when one did), and for :attr:`Kind.PLAN` ``render_plans(plans,
options)``. A report or plan renders as text, or as :data:`Chunks` where the format is made
as bytes (JSON: a big run's document is tens of MB, written as it is made, never held whole). The formats each command's
``--format`` offers, and those ``format =`` in the configuration accepts, are read from here.

This module stays light (no renderer, rich or json is imported): the command line reads it to
build ``--help``; a renderer's module is imported only when something is rendered with it. Its
records are NamedTuples: a frozen dataclass would cost every start ~1 ms to define.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

if TYPE_CHECKING:
    from ckptdoctor.model import Plan, Report
    from ckptdoctor.records import Pending
    from ckptdoctor.rules.rule import Rule
    from ckptdoctor.rules.search import Match


class Kind(enum.Enum):
    """What a renderer can be given."""

    REPORT = "report"
    """A :class:`~ckptdoctor.model.Report`: inspect, verify, diskcheck."""
    RULES = "rules"
    """The rule table, or the rules ``ckptdoctor rules QUERY`` explains."""
    PLAN = "plan"
    """What prune or repair will do (:class:`Plans`); in a format that renders no plan, prune and
    repair show their scan's findings, which is what a CI system reads."""


class RenderOptions(NamedTuple):
    """What a renderer is told beyond what it renders (most formats need none of it)."""

    show_all: bool = False
    """Every checkpoint of a run, not only the newest rows (human)."""
    to_file: bool = False
    """The text goes to a file, not the terminal: no colour, and lines as long as they are (human)."""
    explain: bool = False
    """Rules asked about by code, name or message: each explained in full, not the table (human)."""
    verbose: bool = False
    """Every finding in full: info findings too, each with its fixes (human)."""


PLAIN = RenderOptions()


class Plans(NamedTuple):
    """The plans of one prune or repair, with the scan they were made from."""

    report: Report
    plans: tuple[tuple[Plan, str], ...]
    """Each plan with the unit of its run's index (``epoch``, ``step``)."""
    dry_run: bool
    pending: tuple[Pending, ...] = ()
    """What killed prunes' journals would still do; the same confirmation finishes it."""
    repair: bool = False
    """A repair's plans: each table also says what it acts on, and sums up otherwise."""


Chunks = Iterator[bytes]
"""A rendering made a part at a time, already in UTF-8 (names that are not UTF-8 escaped),
written as it is made."""


class _Module(Protocol):
    """A renderer's module: ``render_rules`` where it renders rules, ``summary`` where it has a job summary."""

    def render(self, report: Report, options: RenderOptions = PLAIN) -> str | Chunks: ...

    def render_rules(self, rules: tuple[Rule, ...], options: RenderOptions = PLAIN, matches: tuple[Match, ...] = ()) -> str: ...

    def render_plans(self, plans: Plans, options: RenderOptions = PLAIN) -> str | Chunks: ...

    def summary(self, report: Report) -> str: ...


class Renderer(NamedTuple):
    """One output format: its name (that of its module under ``ckptdoctor.render``) and kinds."""

    name: str
    kinds: frozenset[Kind]
    for_people: bool = False
    """Nothing at all when the scan failed outright (the errors on stderr say it), and a count of
    findings as the report's last line (``cli._output.summed_up``)."""
    job_summary: bool = False
    """Also appends the module's ``summary(report)`` (Markdown) to ``$GITHUB_STEP_SUMMARY``
    when that is set, as GitHub Actions does."""

    def module(self) -> _Module:
        return cast("_Module", importlib.import_module(f"{__name__}.{self.name}"))


HUMAN = "human"
JSON = "json"
"""The default format, and the one ``--json`` is short for."""

_EVERY = frozenset(Kind)
RENDERERS = (
    Renderer(HUMAN, _EVERY, for_people=True),
    Renderer(JSON, _EVERY),
    Renderer("sarif", frozenset({Kind.REPORT, Kind.RULES})),
    Renderer("junit", frozenset({Kind.REPORT})),
    Renderer("github", frozenset({Kind.REPORT}), job_summary=True),
)


def formats(kind: Kind = Kind.REPORT) -> tuple[str, ...]:
    """The names of the formats that render ``kind``, in the order of :data:`RENDERERS`."""
    return tuple(renderer.name for renderer in RENDERERS if kind in renderer.kinds)


def named(name: str, kind: Kind = Kind.REPORT) -> Renderer:
    """The renderer called ``name`` (in any case) if it renders ``kind``; ValueError saying which
    do, else (one message for ``--format``, ``format =`` in the configuration and
    ``CKPTDOCTOR_FORMAT`` alike)."""
    wanted = name.lower() if isinstance(name, str) else name
    for renderer in RENDERERS:
        if renderer.name == wanted and kind in renderer.kinds:
            return renderer
    raise ValueError(f"must be one of {_listed(formats(kind))}, not {name!r}")


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
