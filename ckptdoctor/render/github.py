"""GitHub Actions: a workflow annotation per finding (``::error file=…,title=CKD101
missing-optimizer::…``), and a Markdown summary for the job page (``$GITHUB_STEP_SUMMARY``)."""

from __future__ import annotations

from ckptdoctor.model import Finding, Report, Severity
from ckptdoctor.quoting import printable
from ckptdoctor.render import PLAIN, RenderOptions
from ckptdoctor.units import counted

_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def render(report: Report, options: RenderOptions = PLAIN) -> str:
    """The annotations, one line each (what the runner reads from stdout)."""
    return "".join(_annotation(finding) + "\n" for finding in report.findings)


def summary(report: Report) -> str:
    """The Markdown summary appended to ``$GITHUB_STEP_SUMMARY``."""
    counts = {severity: report.count(severity) for severity in Severity}
    lines = [
        f"### ckptdoctor {report.command}",
        "",
        f"{counted(counts[Severity.ERROR], 'error')}, {counted(counts[Severity.WARNING], 'warning')}, {counts[Severity.INFO]} info "
        f"in {counted(len(report.runs), 'run')}.",
        "",
    ]
    if report.runs:
        lines += ["| run | layout | checkpoints | resume from |", "| --- | --- | --- | --- |"]
        for run in report.runs:
            resume = f"{run.unit.value} {run.resume.index}" if run.resume is not None else "**none**"
            lines.append(f"| `{_cell(run.path)}` | {run.layout} | {len(run.checkpoints)} | {resume} |")
        lines.append("")
    if report.findings:
        lines += ["| | rule | where | message |", "| --- | --- | --- | --- |"]
        icon = {Severity.ERROR: "❌", Severity.WARNING: "⚠️", Severity.INFO: "ℹ️"}
        for finding in report.findings:
            where = finding.path or finding.run or ""
            lines.append(f"| {icon[finding.severity]} | {finding.code} {finding.name} | `{_cell(where)}` | {_cell(finding.message)} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _annotation(finding: Finding) -> str:
    properties = [f"title={_property(f'{finding.code} {finding.name}')}"]
    where = finding.path or finding.run
    if where:
        properties.insert(0, f"file={_property(where)}")
    return f"::{_COMMAND[finding.severity]} {','.join(properties)}::{_data(finding.message)}"


def _data(text: str) -> str:
    """``text`` as a workflow command's data: the runner escapes only ``%``, CR and LF, and shows
    the rest as it is, so a file name's other control characters (an ESC sequence) are written
    escaped (``\\x1b``), as every other format writes them."""
    return printable(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _cell(text: str) -> str:
    return printable(text, line=True).replace("|", "\\|")
