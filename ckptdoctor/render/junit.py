"""JUnit XML, as CI systems show test results: a test suite per run, a test case per checkpoint
(and one for the run as a whole), a failure per error or warning; info findings go to the
case's output. A scan that finds no run still has one passing case, so dashboards show it ran."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from ckptdoctor.model import Finding, Report, Run, Severity


def render(report: Report) -> str:
    suites = ET.Element("testsuites", name=f"ckptdoctor {report.command}")
    by_run: dict[str | None, list[Finding]] = {}
    for finding in report.findings:
        by_run.setdefault(finding.run, []).append(finding)
    for run in report.runs:
        _suite(suites, run.path, _cases(run, by_run.pop(run.path, [])))
    leftover = [f for findings in by_run.values() for f in findings]
    if leftover or not report.runs:
        _suite(suites, "ckptdoctor", {"scan": leftover})
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


def _suite(parent: ET.Element, name: str, cases: dict[str, list[Finding]]) -> None:
    suite = ET.SubElement(parent, "testsuite", name=name)
    for case_name, findings in cases.items():
        case = ET.SubElement(suite, "testcase", classname=name, name=case_name)
        notes = []
        for finding in findings:
            if finding.severity is Severity.INFO:
                notes.append(f"{finding.code} {finding.name}: {finding.message}")
                continue
            failure = ET.SubElement(case, "failure", type=f"{finding.code} {finding.name}", message=finding.message)
            failure.text = "\n".join([f"{finding.severity.value}: {finding.message}", *(f"fix: {fix}" for fix in finding.fixes)])
        if notes:
            ET.SubElement(case, "system-out").text = "\n".join(notes)


def _count(suites: ET.Element) -> None:
    total = failed = 0
    for suite in suites:
        cases = suite.findall("testcase")
        failures = sum(1 for case in cases if case.find("failure") is not None)
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(failures))
        suite.set("errors", "0")
        total += len(cases)
        failed += failures
    suites.set("tests", str(total))
    suites.set("failures", str(failed))
