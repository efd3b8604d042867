"""Baselines: today's findings recorded, so that CI fails on new ones and not on history.

A baseline holds each finding's fingerprint (``Finding.fingerprint``: the rule, run, checkpoint
and file, never the wording) and, for the people who read it, the finding itself.
"""

from __future__ import annotations

import dataclasses
import json

from ckptdoctor.errors import InvalidValue
from ckptdoctor.model import Report, detached, standing
from ckptdoctor.regular import read_regular, write_whole

SCHEMA = "ckptdoctor.baseline.v1"


class BaselineError(InvalidValue):
    """A baseline file that cannot be read or written (exit 2)."""


def write(report: Report, path: str) -> int:
    """Record every finding of ``report`` in ``path``; returns how many, one per cause (the parts
    of a finding, recorded too, count with it)."""
    entries = [
        {"fingerprint": f.fingerprint, "code": f.code, "run": f.run, "index": f.index, "path": f.path, "message": f.message}
        for f in sorted(report.findings, key=lambda finding: finding.fingerprint)
    ]
    try:
        write_whole(path, (json.dumps({"schema": SCHEMA, "findings": entries}, indent=1) + "\n").encode("utf-8"))
    except OSError as error:
        raise BaselineError(f"cannot write the baseline {path}: {error.strerror}") from error
    return len(standing(report.findings))


MAX_BASELINE = 64 * 1024 * 1024
"""A baseline longer than this is refused (a device or a wrong path, not a baseline)."""


def load(path: str) -> frozenset[str]:
    """The fingerprints recorded in ``path``."""
    try:
        document = json.loads(read_regular(path, MAX_BASELINE))
    except OSError as error:
        raise BaselineError(f"cannot read the baseline {path}: {error.strerror}") from error
    except ValueError as error:
        raise BaselineError(f"{path} is not a ckptdoctor baseline ({error})") from error
    if not isinstance(document, dict) or document.get("schema") != SCHEMA or not isinstance(document.get("findings"), list):
        raise BaselineError(f"{path} is not a ckptdoctor baseline (schema {SCHEMA})")
    return frozenset(str(entry.get("fingerprint")) for entry in document["findings"] if isinstance(entry, dict))


def new_only(report: Report, known: frozenset[str]) -> tuple[Report, int]:
    """``report`` without the findings ``known`` records, and how many were left out."""
    new = {(f.run, *f.part_of) for f in report.findings if f.part_of is not None and f.fingerprint not in known}
    # a finding that stands for others (CKD117) is new only with one of them: a baseline made
    # before it stood for them records its parts alone
    kept = detached([f for f in report.findings if f.fingerprint not in known and (not f.stands_for or (f.run, f.code, f.index) in new)])
    return dataclasses.replace(report, findings=kept), len(standing(report.findings)) - len(standing(kept))
