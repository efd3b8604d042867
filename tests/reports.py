"""What the tests read back from a report, whatever shape it comes in: the JSON report (a dict),
a CLI result whose stdout is that JSON, or the ``Report`` the api returns."""

from __future__ import annotations

import json
from typing import Any


def codes(report: Any, *, index: bool = False, severity: str | None = None) -> list[Any]:
    """The codes of ``report``'s findings, in its order (``set(codes(...))`` where the order is not
    the point). ``index``: ``(code, index)`` pairs instead; ``severity``: only findings of it."""
    found = [_fields(finding) for finding in _findings(report)]
    return [(code, at) if index else code for code, at, level in found if severity is None or level == severity]


def _findings(report: Any) -> list[Any]:
    if isinstance(report, dict):
        return list(report["findings"])
    if hasattr(report, "findings"):  # the api's Report
        return list(report.findings)
    return list(json.loads(report.stdout)["findings"])  # a CLI result


def _fields(finding: Any) -> tuple[str, int | None, str]:
    if isinstance(finding, dict):
        return finding["code"], finding.get("index"), finding["severity"]
    return finding.code, finding.index, finding.severity.value
