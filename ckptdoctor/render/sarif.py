"""SARIF 2.1.0 for code scanning (GitHub, GitLab, Azure DevOps): the rule table with its full
help, and one result per finding with its location and a stable fingerprint."""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import quote

from ckptdoctor.model import Finding, Report, Severity
from ckptdoctor.render import PLAIN, RenderOptions
from ckptdoctor.rules.registry import RULES, Rule
from ckptdoctor.rules.search import Match
from ckptdoctor.version import __version__

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def render(report: Report, options: RenderOptions = PLAIN) -> str:
    index = {rule.code: number for number, rule in enumerate(RULES)}
    return _document(RULES, [_result(finding, index) for finding in report.findings], report.command)


def render_rules(rules: tuple[Rule, ...], options: RenderOptions = PLAIN, matches: tuple[Match, ...] = ()) -> str:
    """``ckptdoctor rules --format sarif``: the rules alone, as a code-scanning tool describes itself
    (a search's ``matches`` have no place in SARIF: its rules come in their ranked order)."""
    return _document(rules, [], "rules")


def _document(rules: tuple[Rule, ...], results: list[dict[str, Any]], command: str) -> str:
    document = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "ckptdoctor", "version": __version__, "rules": [_rule(r) for r in rules]}},
                "automationDetails": {"id": f"ckptdoctor/{command}/"},
                "results": results,
            }
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def _rule(rule: Rule) -> dict[str, Any]:
    fixes = rule.fix_texts()
    markdown = "\n\n".join(
        [
            f"**{rule.code} {rule.name}**: {rule.summary}",
            f"**What it means.** {rule.meaning}",
            f"**When it happens.** {rule.causes}",
            "**How to fix it.**\n\n" + "\n".join(f"- {fix}" for fix in fixes),
            *(["**Messages it explains.**\n\n" + "\n".join(f"- `{m}`" for m in rule.messages)] if rule.messages else []),
        ]
    )
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.meaning},
        "help": {"text": "\n".join([rule.summary, *("Fix: " + fix for fix in fixes)]), "markdown": markdown},
        "defaultConfiguration": {"level": _LEVEL[rule.severity]},
        "properties": {"tags": ["checkpoint", rule.name]},
    }


def _result(finding: Finding, index: dict[str, int]) -> dict[str, Any]:
    where = finding.path or finding.run or "."
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "level": _LEVEL[finding.severity],
        "message": {"text": finding.message},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(where)}}}],
        "partialFingerprints": {"ckptdoctor/v1": finding.fingerprint},
    }
    if finding.code in index:
        result["ruleIndex"] = index[finding.code]
    if finding.fixes:
        result["properties"] = {"fixes": list(finding.fixes), **({"index": finding.index} if finding.index is not None else {})}
    return result


def _uri(path: str) -> str:
    """A URI reference code scanning can match to a file: relative to the working directory (the
    checkout) when the path is inside it, else an absolute ``file://`` URI; the name's own bytes
    percent-encoded (undecodable ones included)."""

    if "://" in path:  # an object in a store: its URL is the URI
        return path
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    if relative == os.curdir:
        return "."
    if relative.startswith(os.pardir):
        return "file://" + quote(os.fsencode(absolute), safe="/")
    return quote(os.fsencode(relative), safe="/")
