"""JUnit XML, as CI systems show test results: a test suite per run, a test case per checkpoint
(and one for the run as a whole), a failure per error or warning; info findings go to the
case's output. A scan that finds no run still has one passing case, so dashboards show it ran."""

from __future__ import annotations

import re
from xml.etree import ElementTree as ET

from ckptdoctor.model import Finding, Report, Run, Severity
from ckptdoctor.render import PLAIN, RenderOptions

_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
"""What XML 1.0 cannot hold (control characters, and the surrogate escapes of undecodable names)."""


def _clean(text: str) -> str:
    return _ILLEGAL.sub(lambda match: f"\\x{ord(match[0]):02x}" if ord(match[0]) < 0x100 else f"\\u{ord(match[0]):04x}", text)


def render(report: Report, options: RenderOptions = PLAIN) -> str:
    suites = ET.Element("testsuites", name=f"ckptdoctor {report.command}")
    by_run: dict[str | None, list[Finding]] = {}
    for finding in report.findings:
        by_run.setdefault(finding.run, []).append(finding)
    for run in report.runs:
        _suite(suites, run.path, _cases(run, by_run.pop(run.path, [])))
    leftover = [f for findings in by_run.values() for f in findings]
    if leftover or not report.runs or report.errors:
        suite = _suite(suites, "ckptdoctor", {"scan": leftover})
        for failure in report.errors:  # a path that could not be scanned is an error, never a pass
            case = ET.SubElement(suite, "testcase", classname="ckptdoctor", name=_clean(failure.path))
            ET.SubElement(case, "error", type="scan", message=_clean(failure.message))
    _count(suites)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _cases(run: Run, findings: list[Finding]) -> dict[str, list[Finding]]:
    unit = run.unit.value
    cases: dict[str, list[Finding]] = {"run": []}
    cases.update({f"{unit} {checkpoint.index}": [] for checkpoint in run.checkpoints})
    for finding in findings:
        name = f"{unit} {finding.index}" if finding.index is not None else "run"
        cases.setdefault(name, []).append(finding)
    return cases


def _suite(parent: ET.Element, name: str, cases: dict[str, list[Finding]]) -> ET.Element:
    suite = ET.SubElement(parent, "testsuite", name=_clean(name))
    for case_name, findings in cases.items():
        case = ET.SubElement(suite, "testcase", classname=_clean(name), name=_clean(case_name))
        failing = [f for f in findings if f.severity is not Severity.INFO]
        notes = [f"{f.code} {f.name}: {f.message}" for f in findings if f.severity is Severity.INFO]
        if failing:  # one failure per case (the JUnit schema allows one), holding every finding
            first = failing[0]
            failure = ET.SubElement(
                case, "failure", type=_clean(", ".join(f"{f.code} {f.name}" for f in failing)), message=_clean(first.message)
            )
            failure.text = _clean(
                "\n\n".join(
                    "\n".join([f"{f.code} {f.name} ({f.severity.value}): {f.message}", *(f"fix: {fix}" for fix in f.fixes)])
                    for f in failing
                )
            )
        if notes:
            ET.SubElement(case, "system-out").text = _clean("\n".join(notes))
    return suite


def _count(suites: ET.Element) -> None:
    total = failed = broken = 0
    for suite in suites:
        cases = suite.findall("testcase")
        failures = sum(1 for case in cases if case.find("failure") is not None)
        errors = sum(1 for case in cases if case.find("error") is not None)
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(failures))
        suite.set("errors", str(errors))
        total += len(cases)
        failed += failures
        broken += errors
    suites.set("tests", str(total))
    suites.set("failures", str(failed))
    suites.set("errors", str(broken))
