"""The rule table and its checks, one module per family (bandit-style: hundreds group families).

Each family module holds its rules' documentation (``RULES``) beside the checks that fire
them (``CHECKS``, each declaring its rules with ``@fires``); this package puts them together for
``rules``, the renderers and the scan.
"""

from __future__ import annotations

from collections.abc import Iterable

from ckptdoctor.discover import Unlisted
from ckptdoctor.layouts.registry import layout_named
from ckptdoctor.model import Finding, Run
from ckptdoctor.rules import completeness, consistency, disk, integrity, safety
from ckptdoctor.rules._harm import by_harm
from ckptdoctor.rules.context import RunContext, Thresholds, with_runs_below
from ckptdoctor.rules.rule import BEHIND_RESUME, Check, Rule

__all__ = ["BEHIND_RESUME", "CHECKS", "RULES", "Check", "Rule", "Thresholds", "check", "find_rule"]

_FAMILIES = (completeness, integrity, consistency, safety, disk)

RULES: tuple[Rule, ...] = tuple(sorted((r for family in _FAMILIES for r in family.RULES), key=lambda r: r.code))

CHECKS: tuple[Check[..., object], ...] = (
    *(run_check for family in _FAMILIES for run_check in family.CHECKS),
    integrity.unlisted_folders,
    completeness.interrupted_saves,
    disk.findings,
    disk.staging_space,
)
"""Every check, with the rules it declares: those run over each run (each family's ``CHECKS``),
and those that look at what is not a run (unlisted folders, the volume of ``diskcheck``)."""

_BY_KEY = {key: rule for rule in RULES for key in (rule.code.lower(), rule.name)}


def find_rule(key: str) -> Rule | None:
    """A rule by code (any case) or kebab-case name."""
    return _BY_KEY.get(key.strip().lower())


def check(
    runs: Iterable[Run], unlisted: Iterable[Unlisted], thresholds: Thresholds, *, whole: bool = False, now: float | None = None
) -> tuple[Finding, ...]:
    """Every finding for every run, in run order, then by checkpoint index; ``whole``: the runs'
    files were read whole (``verify``); ``now``: the clock the files' times are judged by."""
    unlisted = list(unlisted)
    findings: list[Finding] = list(integrity.unlisted_folders(unlisted))
    runs = list(runs)
    holding = with_runs_below(runs, (folder.path for folder in unlisted))
    for run in runs:
        context = RunContext(run, layout_named(run.layout), thresholds, below=run.path in holding, whole=whole, now=now)
        found = [finding for family in _FAMILIES for run_check in family.CHECKS for finding in run_check(context)]
        findings.extend(by_harm(context, completeness.interrupted_saves(context, found), find_rule))
    return tuple(findings)
