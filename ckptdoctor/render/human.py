"""The human report: a table per run, its findings with fixes, and the resume point last."""

from __future__ import annotations

import io
import textwrap
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from ckptdoctor.model import (
    Action,
    Checkpoint,
    CheckpointFile,
    DiskCheck,
    Finding,
    Plan,
    Problem,
    Report,
    Role,
    Run,
    Severity,
    Status,
)
from ckptdoctor.render import PLAIN, Plans, RenderOptions
from ckptdoctor.render._console import stdout_console
from ckptdoctor.rules._rule import BEHIND_RESUME, Rule
from ckptdoctor.units import size

if TYPE_CHECKING:
    from ckptdoctor.rules.search import Match

NEWEST_ROWS = 20
MAX_FIXES = 3
MAX_MESSAGES = 10
COLUMNS = (Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER, Role.TRAINER_STATE, Role.METADATA)

_STATUS_STYLE = {
    Status.COMPLETE: ("✓", "green"),
    Status.INCOMPLETE: ("✗", "red"),
    Status.PARTIAL: ("✗", "red"),
    Status.CORRUPT: ("✗", "red"),
}
_SEVERITY_STYLE = {Severity.ERROR: ("✗", "bold red"), Severity.WARNING: ("!", "yellow"), Severity.INFO: ("•", "cyan")}


def render(report: Report, options: RenderOptions = PLAIN) -> str:
    console = _console(options)
    with console.capture() as captured:
        _print(report, console, options.show_all)
    return captured.get()


def render_rules(rules: tuple[Rule, ...], options: RenderOptions = PLAIN, matches: tuple[Match, ...] = ()) -> str:
    """The rule table, each rule's page (``ckptdoctor rules CODE``), or a search's ranked matches."""
    console = _console(options)
    with console.capture() as captured:
        if matches and not options.explain:
            console.print(match_list(matches))
        elif options.explain:
            for position, rule in enumerate(rules):
                if position:
                    console.print()
                console.print(rule_page(rule, console.width))
        else:
            console.print(rule_table(rules))
    return captured.get()


def render_plans(plans: Plans, options: RenderOptions = PLAIN) -> str:
    console = _console(options)
    with console.capture() as captured:
        for plan, unit in plans.plans:
            console.print(plan_block(plan, unit, options.show_all, repair_summary if plans.repair else None))
    return captured.get()


def _console(options: RenderOptions) -> Console:
    # captured, not printed: the text is the terminal's (its colours, its width) all the same
    return stdout_console(io.StringIO() if options.to_file else None)


def _print(report: Report, console: Console, show_all: bool) -> None:
    if report.disk is not None:
        console.print(_disk_block(report, report.disk, show_all, console.width))
        return
    by_run: dict[str | None, list[Finding]] = {}
    for finding in report.findings:
        by_run.setdefault(finding.run, []).append(finding)
    outside = by_run.pop(None, [])
    if outside:
        console.print(_findings(outside, console.width))
    for run in report.runs:
        console.print(_run_block(run, by_run.get(run.path, []), show_all, console.width))
        console.print()


def resume_line(run: Run) -> Text:
    if run.layout == "unknown" and run.extra_files:
        n = len(run.extra_files)
        return Text(f"{n} file{'s' if n != 1 else ''} checked one by one: {run.path} follows no checkpoint layout.", style="dim")
    if run.single_file:
        return Text(f"One file checked; `ckptdoctor inspect {run.path}` shows the whole run and where to resume.", style="dim")
    checkpoint = run.resume
    if checkpoint is None:
        return Text.assemble(("No checkpoint to resume from", "bold red"), f" in {run.path} (CKD110).")
    where = checkpoint.path or ", ".join(f.name for f in checkpoint.files)
    only = " (weights only)" if run.weights_only else ""
    return Text.assemble(("Resume from ", "bold"), (f"{run.unit.value} {checkpoint.index}", "bold green"), f"{only}: {where}")


def rule_table(rules: Iterable[Rule]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("CODE", "NAME", "SEVERITY", "SUMMARY"):
        table.add_column(column, overflow="fold")
    for rule in rules:
        _glyph, style = _SEVERITY_STYLE[rule.severity]
        table.add_row(rule.code, rule.name, Text(rule.severity.value, style=style), rule.summary)
    return table


def match_list(matches: Iterable[Match]) -> RenderableType:
    """``ckptdoctor rules "<pasted error>"``: one line per rule, best first, then how to read one."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("CODE", "NAME", "WHY"):
        table.add_column(column, overflow="fold", no_wrap=column != "WHY")
    for match in matches:
        table.add_row(match.rule.code, match.rule.name, match.why)
    return Group(table, Text("`ckptdoctor rules CODE` explains one; --full explains them all.", style="dim"))


def rule_page(rule: Rule, width: int) -> RenderableType:
    """``ckptdoctor rules CODE``: everything the rule table knows, like an error-explanation page."""
    _, style = _SEVERITY_STYLE[rule.severity]
    parts: list[RenderableType] = [
        Text.assemble(
            (f"{rule.code} {rule.name}", "bold"),
            "  ",
            (rule.severity.value, style),
            f" ({rule.behind_resume.value} {BEHIND_RESUME})" if rule.behind_resume and rule.lowered_behind_resume else "",
        ),
        Text(rule.summary),
        Text(""),
        Text("What it means", style="bold"),
        Text(rule.meaning),
        Text(""),
        Text("When it happens", style="bold"),
        Text(rule.causes),
        Text(""),
        Text("How to fix it", style="bold"),
        *[_hanging("  •", "", f" {fix}", 4, width) for fix in rule.fix_texts()],
    ]
    if rule.messages:
        parts += [Text(""), Text("Messages it explains", style="bold")]
        parts += [Text(f"  {message}") for message in rule.messages]
    if rule.related:
        parts += [Text(""), Text.assemble(("Related: ", "bold"), ", ".join(rule.related))]
    return Group(*parts)


def _run_block(run: Run, findings: list[Finding], show_all: bool, width: int) -> RenderableType:
    count = len(run.checkpoints)
    plural = "s" if count != 1 else ""
    what = f"{run.layout} · {count} {run.unit.value}{plural}" if run.checkpoints or not run.extra_files else f"{len(run.extra_files)} files"
    title = Text.assemble((run.path, "bold"), f"  {what} · {size(run.bytes)}")
    parts: list[RenderableType] = [title]
    if run.checkpoints:
        parts.append(_table(run, show_all))
    if run.single_file:
        parts += [
            _contents(f) for f in (*[f for c in run.checkpoints for f in c.files], *run.extra_files)[:NEWEST_ROWS] if f.report.tensors
        ]
    if run.other_files:
        n = len(run.other_files)
        parts.append(Text(f"{n} other file{'s' if n != 1 else ''} not part of any checkpoint (see --json)", style="dim"))
    if findings:
        parts.append(_findings(findings, width))
    parts.append(resume_line(run))
    return Group(*parts)


BAR_WIDTH = 32


def _disk_block(report: Report, disk: DiskCheck, show_all: bool, width: int) -> RenderableType:
    """A bar per checkpoint of its size, then the next save, the free space and the runway in one line."""
    # rich loads only when something is rendered for people
    from rich.bar import Bar

    run = next((r for r in report.runs if r.checkpoints and (r.path == disk.path or disk.path.endswith(r.path))), None)
    run = run or next((r for r in report.runs if r.checkpoints), None)
    volume = disk.volume
    where = f"{volume.fstype} on {volume.mountpoint}" if volume else "volume unknown"
    title = f"{run.layout} · {len(run.checkpoints)} {run.unit.value}s · {where}" if run else where
    parts: list[RenderableType] = [Text.assemble(((run.path if run else disk.path), "bold"), f"  {title}")]
    sizes = disk.sizes if show_all else disk.sizes[-NEWEST_ROWS:]
    if sizes:
        table = Table(box=None, header_style="bold", pad_edge=False, show_edge=False)
        table.add_column((run.unit.value if run else "index").upper(), justify="right", no_wrap=True)
        table.add_column("SIZE", no_wrap=True)
        table.add_column("", justify="right", no_wrap=True)
        largest = max([b for _, b in sizes] + [disk.estimate.bytes if disk.estimate else 0]) or 1
        for index, nbytes in sizes:
            table.add_row(str(index), Bar(largest, 0, nbytes, width=BAR_WIDTH, color="cyan"), size(nbytes))
        if disk.estimate is not None:
            table.add_row("next", Bar(largest, 0, disk.estimate.bytes, width=BAR_WIDTH, color="yellow"), size(disk.estimate.bytes))
        parts.append(table)
        if len(sizes) < len(disk.sizes):
            parts.append(Text(f"… {len(disk.sizes) - len(sizes)} older not shown (--all shows them)", style="dim"))
    parts.append(Text(disk_line(disk)))
    if report.findings:
        parts.append(_findings(list(report.findings), width))
    return Group(*parts)


def disk_line(disk: DiskCheck) -> str:
    """``next save ≈ 2.1 GiB; 14.3 GiB free; room for 6 more saves at keep-last 3``."""
    volume, guess = disk.volume, disk.estimate
    free = f"{size(volume.free_bytes)} free" if volume else "free space unknown"
    if guess is None:
        return f"{free}; the next save cannot be estimated: the run has no complete checkpoint (give --model or --model-bytes, and --optimizer)"
    retention = f" at keep-last {disk.keep_last}" if disk.keep_last else ""
    if disk.saves_until_full is None:
        runway = f"keep-last {disk.keep_last} keeps the run within it" if disk.keep_last else "runway unknown"
    else:
        n = disk.saves_until_full
        runway = f"room for {n:,} more save{'s' if n != 1 else ''}{retention or ' (nothing deleted between saves)'}"
    return f"next save ≈ {size(guess.bytes)} ({guess.basis}); needs {size(disk.needed_bytes)} with headroom; {free}; {runway}"


def _contents(file: CheckpointFile) -> Text:
    """What a file read whole holds, in one line: ``model.pt: 250 tensors, 1000 MiB of float32 on cpu``."""
    tensors = file.report.tensors or ()
    dtypes = ", ".join(sorted({t.dtype for t in tensors}))
    devices = ", ".join(sorted({t.device for t in tensors}))
    count = len(tensors)
    return Text(
        f"{file.name}: {count} tensor{'s' if count != 1 else ''}, {size(file.report.tensor_bytes)} of {dtypes} on {devices}", style="dim"
    )


def _table(run: Run, show_all: bool) -> RenderableType:
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column(run.unit.value.upper(), justify="right", no_wrap=True)
    roles = [role for role in COLUMNS if role in run.required or any(role in c.roles for c in run.checkpoints)]
    for role in roles:
        table.add_column(role.value.upper(), no_wrap=True)
    table.add_column("SIZE", justify="right", no_wrap=True)
    table.add_column("STATUS", no_wrap=True)
    shown = run.checkpoints if show_all else run.checkpoints[-NEWEST_ROWS:]
    for checkpoint in shown:
        table.add_row(str(checkpoint.index), *(_cell(checkpoint, role) for role in roles), size(checkpoint.bytes), _status(checkpoint))
    hidden = len(run.checkpoints) - len(shown)
    parts: list[RenderableType] = [table]
    if hidden:
        parts.insert(0, Text(f"… {hidden} older checkpoint{'s' if hidden != 1 else ''} not shown (--all shows every one)", style="dim"))
    return Group(*parts)


def _cell(checkpoint: Checkpoint, role: Role) -> Text:
    files = checkpoint.files_for(role)
    if not files:
        return Text("missing", style="red") if role in checkpoint.missing else Text("—", style="dim")
    if len(files) > 2:  # shards: the count says enough, --json lists them
        broken = any(f.report.problems - _NOT_DAMAGE for f in files)
        return Text(f"{len(files)} files" + (" ✗" if broken else ""), style="red" if broken else "")
    return Text(" + ").join(_file_text(f, role) for f in files)


def _file_text(file: CheckpointFile, role: Role) -> Text:
    if file.bundled and file.roles[0] is not role:
        return Text("(bundled)", style="dim")
    if file.report.problems - _NOT_DAMAGE:
        return Text(f"{file.name} ✗", style="red")
    return Text(file.name)


_NOT_DAMAGE = frozenset({Problem.NON_WEIGHTS})
"""What a file may need without being damaged (CKD402: globals its own loader allows): no ✗."""


def _status(checkpoint: Checkpoint) -> Text:
    glyph, style = _STATUS_STYLE[checkpoint.status]
    text = Text(f"{glyph} {checkpoint.status.value}", style=style)
    if checkpoint.status is Status.COMPLETE and checkpoint.roles_unread:
        text.append(" (roles not read: run verify)", style="dim")
    staged = [f.name for f in checkpoint.files if Role.TEMP in f.roles]
    if staged:
        text.append(f" (leftover {', '.join(staged)})", style="dim")
    return text


def _findings(findings: list[Finding], width: int) -> RenderableType:
    """Findings of one rule together: each message, then the fixes once (worded for the first)."""
    groups: dict[str, list[Finding]] = {}
    for finding in sorted(findings, key=lambda f: (-f.severity.rank, f.code, f.index if f.index is not None else -1)):
        groups.setdefault(finding.code, []).append(finding)
    lines: list[RenderableType] = []
    for code, group in groups.items():
        first = group[0]
        glyph, style = _SEVERITY_STYLE[first.severity]
        heading = f"{glyph} {code} {first.name}"
        if len(group) == 1:
            lines.append(_hanging(heading, style, f"  {first.message}", 2, width))
        else:
            lines.append(Text.assemble((heading, style), (f"  ({len(group)})", "dim")))
            lines.extend(_hanging("  •", "", f" {f.message}", 4, width) for f in group[:MAX_MESSAGES])
            if len(group) > MAX_MESSAGES:
                lines.append(Text(f"  … and {len(group) - MAX_MESSAGES} more (--json lists them all)", style="dim"))
        for fix in first.fixes[:MAX_FIXES]:
            lines.append(_hanging("    fix:", "dim", f" {fix}", 6, width))
        if len(first.fixes) > MAX_FIXES:
            lines.append(Text(f"    more fixes: ckptdoctor rules {code}", style="dim"))
    return Group(*lines)


def _hanging(lead: str, style: str, body: str, indent: int, width: int) -> Text:
    """``lead`` + ``body`` wrapped to ``width`` with continuation lines indented (no trailing spaces)."""
    wrapped = textwrap.fill(lead + body, width=max(width, 40), subsequent_indent=" " * indent, break_on_hyphens=False)
    text = Text(wrapped)
    text.stylize(style, 0, len(lead))
    return text


_ACTION_STYLE = {
    Action.KEEP: "green",
    Action.DELETE: "red",
    Action.QUARANTINE: "yellow",
    Action.REPOINT: "cyan",
    Action.RESTORE: "cyan",
}


def plan_block(plan: Plan, unit: str, show_all: bool = False, summary: Callable[[Plan, str], str] | None = None) -> RenderableType:
    """A plan as a table (INDEX / ACTION / REASONS / SIZE, and WHAT for a repair) and the line
    that sums it up."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column(unit.upper(), justify="right", no_wrap=True)
    table.add_column("ACTION", no_wrap=True)
    named = summary is not None  # repair acts on files and pointers, not only whole checkpoints
    if named:
        table.add_column("WHAT", overflow="fold")
    table.add_column("REASONS", overflow="fold")
    table.add_column("SIZE", justify="right", no_wrap=True)
    items = plan.items if show_all or len(plan.items) <= NEWEST_ROWS * 2 else plan.items[-NEWEST_ROWS * 2 :]
    for item in items:
        cells: list[str | Text] = [
            str(item.number) if item.number is not None else "-",
            Text(item.action.value, style=_ACTION_STYLE[item.action]),
        ]
        if named:
            cells.append(", ".join(_relative(path, plan.run) for path in item.paths))
        table.add_row(*cells, "; ".join(item.reasons), size(item.bytes))
    parts: list[RenderableType] = [Text.assemble((plan.run, "bold"), f"  {plan.policy}"), table]
    if len(items) < len(plan.items):
        parts.append(Text(f"… {len(plan.items) - len(items)} older {unit}s not shown (--all shows them)", style="dim"))
    parts.append(Text((summary or plan_summary)(plan, unit)))
    return Group(*parts)


def _relative(path: str, run: str) -> str:
    return path[len(run) + 1 :] if path.startswith(run + "/") else path


def plan_summary(plan: Plan, unit: str) -> str:
    """A prune plan in one line."""
    doomed = plan.acting(Action.DELETE)
    if not doomed:
        return f"Nothing to delete; keeping {len(plan.items)} {unit}s."
    files = sum(len(item.entries) for item in doomed)
    kept = len(plan.items) - len(doomed)
    return (
        f"About to delete {len(doomed)} checkpoint{'s' if len(doomed) != 1 else ''} ({files} "
        f"{'files' if files != 1 else 'file'}) totalling {size(plan.freed_bytes)}; keeping {kept}."
    )


def repair_summary(plan: Plan, unit: str) -> str:
    """A repair (or undo) plan in one line."""
    moved, repointed, restored = plan.acting(Action.QUARANTINE), plan.acting(Action.REPOINT), plan.acting(Action.RESTORE)
    if restored:
        total = sum(item.bytes for item in restored)
        return f"About to put back {_count(len(restored), 'entry', 'entries')} totalling {size(total)} ({plan.policy})."
    if not (moved or repointed):
        return f"Nothing to repair; {plan.policy}."
    actions = []
    if moved:
        total = sum(item.bytes for item in moved)
        entries = sum(len(item.entries) for item in moved)
        where = []
        if numbered := len({item.number for item in moved if item.number is not None}):
            where.append(_count(numbered, unit, unit + "s"))
        if loose := sum(1 for item in moved if item.number is None):
            where.append(_count(loose, "leftover", "leftovers"))
        actions.append(f"quarantine {_count(entries, 'entry', 'entries')} (from {', '.join(where)}) totalling {size(total)}")
    if repointed:
        actions.append(f"re-point {_count(len(repointed), 'pointer', 'pointers')}")
    return f"About to {' and '.join(actions)}; then {plan.policy}."


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
