"""The human report: a table per run, its findings with fixes, and the resume point last."""

from __future__ import annotations

import io
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console, Group, JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

from ckptdoctor.model import (
    Access,
    Action,
    BucketCheck,
    Checkpoint,
    CheckpointFile,
    DiskCheck,
    Finding,
    Growth,
    Plan,
    PlanItem,
    Problem,
    Report,
    Role,
    Run,
    Severity,
    Status,
    standing,
)
from ckptdoctor.quoting import shell_word
from ckptdoctor.render import PLAIN, Plans, RenderOptions
from ckptdoctor.render.console import stdout_console
from ckptdoctor.render.lines import MIN_PROSE, WORD, pieces
from ckptdoctor.rules.rule import BEHIND_RESUME, Rule
from ckptdoctor.units import counted, files_or_folders, size

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
    Status.UNREADABLE: ("?", "yellow"),
    Status.ARCHIVED: ("?", "cyan"),
}
_SEVERITY_STYLE = {Severity.ERROR: ("✗", "bold red"), Severity.WARNING: ("!", "yellow"), Severity.INFO: ("•", "cyan")}


def render(report: Report, options: RenderOptions = PLAIN) -> str:
    console = _console(options)
    with console.capture() as captured:
        _print(report, console, options)
    return _unpadded(captured.get())


_PADDING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


def _unpadded(text: str) -> str:
    """No line ends in spaces (a table pads its last column): a pager narrower than the padding
    would show each row followed by a blank one."""
    return _PADDING.sub(r"\1", text)


def render_rules(rules: tuple[Rule, ...], options: RenderOptions = PLAIN, matches: tuple[Match, ...] = ()) -> str:
    """The rule table, each rule's page (``ckptdoctor rules CODE``), or a search's ranked matches."""
    console = _console(options)
    with console.capture() as captured:
        if matches and not options.explain:
            console.print(match_list(matches, console.width), crop=False)
        elif options.explain:
            for position, rule in enumerate(rules):
                if position:
                    console.print()
                console.print(rule_page(rule, console.width), crop=False)
        else:
            console.print(rule_table(rules, console.width), crop=False)
    return _unpadded(captured.get())


def render_plans(plans: Plans, options: RenderOptions = PLAIN) -> str:
    console = _console(options)
    with console.capture() as captured:
        for plan, unit in plans.plans:
            console.print(plan_block(plan, unit, options.show_all, repair_summary if plans.repair else None, console.width), crop=False)
        if len(plans.plans) > 1:  # after every run's plan, before the one question: all of it in one table and one line
            console.print()
            console.print(plans_summary(plans, console.width), crop=False)
    return _unpadded(captured.get())


def _console(options: RenderOptions) -> Console:
    # captured, not printed: the text is the terminal's (its colours, its width) all the same
    return stdout_console(io.StringIO() if options.to_file else None)


def _print(report: Report, console: Console, options: RenderOptions) -> None:
    if report.disk is not None:
        console.print(_disk_block(report, report.disk, options.show_all, console.width), crop=False)
        return
    outside, per_run = _by_run(report)
    if outside:
        console.print(_findings(outside, console.width), crop=False)
    for position, (run, findings) in enumerate(zip(report.runs, per_run, strict=True)):
        if position:  # a blank line between runs; the count of findings follows the last at once
            console.print()
        console.print(_run_block(run, findings, options, console.width), crop=False)
    runs = [run for run in report.runs if not run.single_file]  # files checked one by one have no resume point to sum up
    if len(runs) > 1:
        console.print()
        console.print(runs_summary([(run.path, run, None) for run in runs], (), console.width), crop=False)


def _by_run(report: Report) -> tuple[list[Finding], list[list[Finding]]]:
    """The findings of no run, and each run's, each finding once: files given one by one in the
    same folder are runs of the same path, so a finding goes to the run that holds its file."""
    outside: list[Finding] = []
    per_run: list[list[Finding]] = [[] for _ in report.runs]
    held = [{f.path for f in (*(f for c in run.checkpoints for f in c.files), *run.extra_files)} for run in report.runs]
    for finding in report.findings:
        same = [i for i, run in enumerate(report.runs) if run.path == finding.run]
        holding = [i for i in same if finding.path in held[i]]
        if not same:
            outside.append(finding)
        else:
            per_run[(holding or same)[0]].append(finding)
    return outside, per_run


def resume_line(run: Run) -> Text:
    if run.layout == "unknown" and run.extra_files:
        n = len(run.extra_files)
        return Text(f"{n} file{'s' if n != 1 else ''} checked one by one: {run.path} follows no checkpoint layout.", style="dim")
    if run.single_file:
        return Text(f"One file checked; `ckptdoctor inspect {shell_word(run.path)}` shows the whole run and where to resume.", style="dim")
    checkpoint = run.resume
    if run.resume_depends_on:
        return unknown_resume(run)
    if checkpoint is None:
        return Text.assemble(("No checkpoint to resume from", "bold red"), f" in {run.path} (CKD110).")
    where = checkpoint.path or ", ".join(f.name for f in checkpoint.files)
    only = " (weights only)" if run.weights_only else ""
    return Text.assemble(("Resume from ", "bold"), (f"{run.unit.value} {checkpoint.index}", "bold green"), f"{only}: {where}")


def _paths(run: Run) -> tuple[str, ...]:
    """The run's paths a resume line names, each kept whole however many spaces it holds."""
    resume = run.resume
    if resume is None:
        return (run.path,)
    return (run.path, *(path for path in (resume.path,) if path), *(f.name for f in resume.files))


def unknown_resume(run: Run) -> Text:
    """Where a run resumes from when that depends on checkpoints this user cannot read (CKD215):
    the newest of them if it is whole, else the next; never the older one alone."""
    unit, newest = run.unit.value, run.resume_depends_on[-1]
    fallback = f"{unit} {run.resume.index}" if run.resume is not None else "no checkpoint this user can read"
    return Text.assemble(
        ("Resume point unknown", "bold yellow"),
        f": {unit} {newest.index} if it is whole, else {fallback}; this user cannot read {unit} {newest.index} (CKD215 says who can).",
    )


def resume_block(run: Run, width: int, named: bool = False) -> RenderableType:
    """The resume point, then how the run's framework resumes from it: said once per run, here
    at the end, not as a fix of every finding; ``named``: under the run's path, where several
    runs' resume points follow each other with no table between them."""
    lines: list[RenderableType] = [wrap(Text(run.path, style="bold"), width)] if named else []
    lines.append(wrap(resume_line(run), width, 2, _paths(run)))
    if run.resume_how and run.resume is not None and not run.resume_depends_on:
        lines.append(_hanging("  how:", "dim", f" {run.resume_how}", 4, width))
    return Group(*lines)


def rule_table(rules: Iterable[Rule], width: int) -> RenderableType:
    """CODE, NAME and SEVERITY whole, the summary wrapped in what is left, its code spans whole;
    where too little is left, each summary on the lines under its rule."""
    rows = [
        ((Text(rule.code), Text(rule.name), Text(rule.severity.value, style=_SEVERITY_STYLE[rule.severity][1])), rule.summary)
        for rule in rules
    ]
    return _prose_table(("CODE", "NAME", "SEVERITY", "SUMMARY"), rows, width)


def _prose_table(headers: Sequence[str], rows: Sequence[tuple[Sequence[Text], str]], width: int) -> RenderableType:
    """Each row's cells whole and its prose in the last column, wrapped at its words in what the
    cells leave of ``width``; where that is under :data:`MIN_SUMMARY`, each row's cells on a line
    and its prose on the lines under it, indented past the first cell. No word is ever split."""
    taken = [max([len(header), *(cells[column].cell_len for cells, _ in rows)]) for column, header in enumerate(headers[:-1])]
    left = width - sum(taken) - len(taken) * _GAP
    if left >= MIN_SUMMARY:
        table = Table(box=None, header_style="bold", pad_edge=False)
        for header in headers[:-1]:
            table.add_column(header, no_wrap=True)
        table.add_column(headers[-1])
        for cells, prose in rows:
            table.add_row(*cells, wrap(Text(prose), left))
        return table
    indent = taken[0] + _GAP
    lines: list[RenderableType] = []
    for (first, *others), prose in rows:
        lines.append(Text(" " * _GAP).join([Text.assemble(first, " " * (taken[0] - first.cell_len)), *others]))
        lines.append(wrap(Text(" " * indent + prose), width, indent))
    return Group(*lines)


MIN_SUMMARY = 40
"""The narrowest column a rule's summary is wrapped in beside its code, name and severity (no
narrower than :data:`MIN_PROSE`, which :func:`wrap` keeps to)."""


def match_list(matches: Iterable[Match], width: int) -> RenderableType:
    """``ckptdoctor rules "<pasted error>"``: one line per rule, best first (its WHY wrapped at
    words, or under the rule where the terminal is narrow), then how to read one."""
    rows = [((Text(match.rule.code), Text(match.rule.name)), match.why) for match in matches]
    hint = wrap(Text("`ckptdoctor rules CODE` explains one; --full explains them all.", style="dim"), width)
    return Group(_prose_table(("CODE", "NAME", "WHY"), rows, width), hint)


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
        wrap(Text(rule.summary), width),
        Text(""),
        Text("What it means", style="bold"),
        wrap(Text(rule.meaning), width),
        Text(""),
        Text("When it happens", style="bold"),
        wrap(Text(rule.causes), width),
        Text(""),
        Text("How to fix it", style="bold"),
        *_documented_fixes(rule, width),
    ]
    if rule.messages:
        parts += [Text(""), Text("Messages it explains", style="bold")]
        parts += [wrap(Text(f"  {message}"), width, 4) for message in rule.messages]
    if rule.related:
        parts += [Text(""), Text.assemble(("Related: ", "bold"), ", ".join(rule.related))]
    return Group(*parts)


def _documented_fixes(rule: Rule, width: int) -> Iterable[Text]:
    """Each fix in general words, its frameworks' own words indented under it."""
    for generic, own in rule.documented_fixes():
        for text in generic:
            yield _hanging("  •", "", f" {text}", 4, width)
        for key, text in own:
            yield _hanging("     " if generic else "  •", "", f" {key}: {text}", 8 if generic else 4, width)


def _run_block(run: Run, findings: list[Finding], options: RenderOptions, width: int) -> RenderableType:
    what = f"{run.layout} · {_checkpoints(run)}" if run.checkpoints or not run.extra_files else counted(len(run.extra_files), "file")
    title = Text.assemble((run.path, "bold"), f"  {what} · {size(run.bytes)}")
    parts: list[RenderableType] = [wrap(title, width, 2, (run.path,))]
    if run.checkpoints:
        parts.append(_table(run, options.show_all, width))
    if run.single_file:
        parts += [
            _contents(f) for f in (*[f for c in run.checkpoints for f in c.files], *run.extra_files)[:NEWEST_ROWS] if f.report.tensors
        ]
    if run.other_files:
        parts.append(Text(f"{counted(len(run.other_files), 'other file')} not part of any checkpoint (see --json)", style="dim"))
    if findings:
        parts.append(_findings(findings, width, run.unit.value, options.verbose))
    parts.append(resume_block(run, width))
    return Group(*parts)


def _checkpoints(run: Run) -> str:
    """``3 checkpoints (steps 10–30)``, ``1 checkpoint (epoch 3)``: how many the run has, and the
    indexes they span in the run's unit (a run's title: its unit alone would count steps)."""
    indexes = sorted({checkpoint.index for checkpoint in run.checkpoints})
    unit = run.unit.value
    if not indexes:
        return counted(0, "checkpoint")
    span = f"{unit} {indexes[0]}" if len(indexes) == 1 else f"{unit}s {indexes[0]}–{indexes[-1]}"
    return f"{counted(len(run.checkpoints), 'checkpoint')} ({span})"


BAR_WIDTH = 32


def _disk_block(report: Report, disk: DiskCheck, show_all: bool, width: int) -> RenderableType:
    """A bar per checkpoint of its size, then the next save, the free space and the runway in one line."""
    # rich loads only when something is rendered for people
    from rich.bar import Bar

    run = next((r for r in report.runs if r.checkpoints and (r.path == disk.path or disk.path.endswith(r.path))), None)
    run = run or next((r for r in report.runs if r.checkpoints), None)
    volume = disk.volume
    where = f"{volume.fstype} on {volume.mountpoint}" if volume else "volume unknown"
    if disk.bucket is not None:
        where = f"bucket ({disk.bucket.store}://), no free space to read"
    title = f"{run.layout} · {_checkpoints(run)} · {where}" if run else where
    parts: list[RenderableType] = [wrap(Text.assemble(((run.path if run else disk.path), "bold"), f"  {title}"), width, 2)]
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
    lines = bucket_lines(disk, disk.bucket) if disk.bucket is not None else [disk_line(disk)]
    parts.extend(wrap(Text(line), width, 2) for line in lines)
    if report.findings:
        parts.append(_findings(list(report.findings), width))
    return Group(*parts)


def disk_line(disk: DiskCheck) -> str:
    """``next save ≈ 2.1 GiB; 14.3 GiB free; room for 6 more saves at keep-last 3``."""
    volume, guess = disk.volume, disk.estimate
    free = f"{size(volume.free_bytes)} free" if volume else "free space unknown"
    if guess is None:
        empty = "the run has no complete checkpoint" if disk.exists else "the folder does not exist yet"
        return f"{free}; the next save cannot be estimated: {empty} (give --model or --model-bytes, and --optimizer)"
    retention = f" at keep-last {disk.keep_last}" if disk.keep_last else ""
    if disk.saves_until_full is None:
        runway = f"keep-last {disk.keep_last} keeps the run within it" if disk.keep_last else "runway unknown"
    else:
        n = disk.saves_until_full
        runway = f"room for {n:,} more save{'s' if n != 1 else ''}{retention or ' (nothing deleted between saves)'}"
    return f"next save ≈ {size(guess.bytes)} ({guess.basis}); needs {size(disk.needed_bytes)} with headroom; {free}; {runway}"


_MARKS = {Access.GRANTED: "granted", Access.DENIED: "REFUSED", Access.UNCHECKED: "not checked"}


def bucket_lines(disk: DiskCheck, bucket: BucketCheck) -> list[str]:
    """What ``diskcheck`` of a run in a bucket found, a line each: the write probe, the
    permissions, the quota, the growth at the retention, the lifecycle rules, what went unchecked."""
    if disk.writable:
        probe = (
            f"write probe: created and deleted {bucket.probe}"
            if not bucket.probe_left
            else f"write probe: created {bucket.probe}, and it is LEFT (the delete was refused)"
        )
    else:
        probe = f"write probe: refused: {disk.why_not_writable}"
    lines = [probe]
    for access in Access:
        named = [p for p in bucket.permissions if p.access is access]
        if named and access is Access.GRANTED:
            lines.append(f"permissions {_MARKS[access]}: " + ", ".join(f"{p.action} ({p.name})" for p in named))
        elif named:
            lines += [f"permission {_MARKS[access]}: {p.action} ({p.name}), needed by {', '.join(p.needed_by)}: {p.detail}" for p in named]
    lines.append(f"quota: {bucket.quota}")
    listed = bucket.access("list") is Access.GRANTED
    growth = _growth_line(disk.growth) if listed else "growth: unknown (the run's prefix could not be listed)"
    if bucket.versioning is None and disk.growth is not None and disk.growth.steady_bytes is not None:
        growth += " if deletes free space (versioning not checked: on a versioned bucket they free nothing)"
    lines.append(growth)
    if bucket.lifecycle is not None:
        aborts = "yes" if bucket.aborts_uploads else "none covers the run"
        rules = f"lifecycle: {len(bucket.lifecycle)} rule{'s' if len(bucket.lifecycle) != 1 else ''}; aborting incomplete uploads: {aborts}"
        if bucket.versioning is not None:
            rules += f"; versioning: {bucket.versioning}"
            if bucket.versioned:
                rules += f"; expiring noncurrent versions: {'yes' if bucket.expires_noncurrent else 'none covers the run'}"
        lines.append(rules)
    lines += [f"not checked: {note}" for note in bucket.not_checked]
    return lines


def _growth_line(growth: Growth | None) -> str:
    """``growth: 2.1 GiB a save, 30 saves a month (their times) = 63 GiB a month; …``."""
    if growth is None:
        return "growth: unknown (no checkpoint under the prefix yet)"
    per_save = f"{size(growth.bytes_per_save)} a save (the mean of {growth.checkpoints})"
    if growth.saves_per_month is None:
        rate = "saves a month unknown (fewer than two saves at different times)"
    else:
        rate = f"{growth.saves_per_month:,.1f} saves a month by their times = {size(growth.bytes_per_month or 0)} a month"
    if growth.steady_bytes is not None:
        held = f"at keep-last {growth.keep_last} it holds {size(growth.steady_bytes)} for good (now {size(growth.stored_bytes)})"
    elif growth.deletes_free_nothing:
        held = f"it grows for good ({size(growth.stored_bytes)} now): the bucket is versioned and deletes free nothing"
    else:
        held = f"with no retention it grows for good ({size(growth.stored_bytes)} now): Lightning and Composer never delete remote checkpoints (set --keep-last, or prune it)"
    return f"growth: {per_save}; {rate}; {held}"


def _contents(file: CheckpointFile) -> Text:
    """What a file read whole holds, in one line: ``model.pt: 250 tensors, 1000 MiB of float32 on cpu``."""
    tensors = file.report.tensors or ()
    dtypes = ", ".join(sorted({t.dtype for t in tensors}))
    devices = ", ".join(sorted({t.device for t in tensors}))
    count = len(tensors)
    return Text(
        f"{file.name}: {count} tensor{'s' if count != 1 else ''}, {size(file.report.tensor_bytes)} of {dtypes} on {devices}", style="dim"
    )


_GAP = 2
"""Spaces between two columns of a table with no box and no edge padding (rich's padding of 1 each side)."""


@dataclass(frozen=True)
class _Column:
    """A column of a checkpoint table, with what it can give up to fit the screen."""

    header: str
    cells: tuple[Text, ...]
    short: tuple[Text, ...] | None = None
    """The cells shortened (a file column: a mark for each file, the names said once below)."""
    justify: JustifyMethod = "left"
    drop: int | None = None
    """Its place in the order columns are dropped when even shortened they do not fit; None:
    never dropped nor shortened (the index and the status: what the table is for)."""

    def width(self, short: bool) -> int:
        cells = self.short if short and self.short is not None else self.cells
        return max([cell_len(self.header), *(cell.cell_len for cell in cells)])


def _fitted(columns: Sequence[_Column], width: int) -> tuple[list[_Column], bool, list[str]]:
    """The columns that fit in ``width``, whether file columns are shortened, and the headers of
    those dropped: file names give up their common part first, then whole columns go (the healthy
    first, then the size, then those that say what is missing or broken); no column is ever crushed."""
    shown = list(columns)
    short = _total_width(shown, False) > width and any(column.short is not None for column in shown)
    dropped: list[str] = []
    for column in sorted((c for c in columns if c.drop is not None), key=lambda c: c.drop or 0):
        if _total_width(shown, short) <= width:
            break
        shown.remove(column)
        dropped.append(column.header)
    return shown, short, dropped


def _total_width(columns: Sequence[_Column], short: bool) -> int:
    """The width of a table of ``columns`` (shortened where ``short``) with no column crushed."""
    return sum(column.width(short) for column in columns) + _GAP * (len(columns) - 1)


def _table(run: Run, show_all: bool, width: int) -> RenderableType:
    """The checkpoints, newest last, fitted to ``width``; notes on statuses and what the fitting
    left out go on lines under it."""
    shown = run.checkpoints if show_all else run.checkpoints[-NEWEST_ROWS:]
    roles = [role for role in COLUMNS if role in run.required or any(role in c.roles for c in run.checkpoints)]
    files = [[_role_cells(checkpoint, role) for checkpoint in shown] for role in roles]
    telling = [any(alarm for _, _, alarm in column) for column in files]
    order = len(roles)  # healthy file columns right to left, then SIZE, then the telling ones
    columns = [
        _Column(run.unit.value.upper(), tuple(Text(str(c.index)) for c in shown), justify="right"),
        *(
            _Column(
                role.value.upper(),
                tuple(full for full, _, _ in cells),
                tuple(short for _, short, _ in cells),
                drop=(position + order + 1 if alarm else order - 1 - position),
            )
            for position, (role, cells, alarm) in enumerate(zip(roles, files, telling, strict=True))
        ),
        _Column("SIZE", tuple(Text(size(c.bytes)) for c in shown), justify="right", drop=order),
        _Column("STATUS", tuple(_status(c) for c in shown)),
    ]
    fitted, short, dropped = _fitted(columns, width)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in fitted:
        table.add_column(column.header, justify=column.justify, no_wrap=True)
    for row in range(len(shown)):
        table.add_row(*((column.short if short and column.short is not None else column.cells)[row] for column in fitted))
    parts: list[RenderableType] = [table]
    hidden = len(run.checkpoints) - len(shown)
    if hidden:
        parts.insert(0, Text(f"… {hidden} older checkpoint{'s' if hidden != 1 else ''} not shown (--all shows every one)", style="dim"))
    notes = [*_status_notes(shown, run.unit.value)]
    if short:
        named = [_pattern(_names(shown, role)) for role in roles if _names(shown, role)]  # in the columns' order
        notes.append(f"files: {', '.join(named)}")
    if dropped:
        notes.append(f"not shown at this width: {', '.join(dropped)} (--json lists every file)")
    parts += [wrap(Text(note, style="dim"), width, 2) for note in notes]
    return Group(*parts)


def _role_cells(checkpoint: Checkpoint, role: Role) -> tuple[Text, Text, bool]:
    """A checkpoint's cell for one role, in full and shortened, and whether it says that something
    is missing or broken."""
    files = checkpoint.files_for(role)
    if not files:
        cell = Text("missing", style="red") if role in checkpoint.missing else Text("—", style="dim")
        return cell, cell, role in checkpoint.missing
    if len(files) > 2:  # shards: the count says enough, --json lists them
        broken = any(f.report.problems - _NOT_DAMAGE for f in files)
        cell = Text(f"{len(files)} files" + (" ✗" if broken else ""), style="red" if broken else "")
        return cell, cell, broken
    full = Text(" + ").join(_file_text(f, role) for f in files)
    short = Text(" + ").join(_file_mark(f, role) for f in files)
    return full, short, any(f.report.problems - _NOT_DAMAGE for f in files)


def _file_mark(file: CheckpointFile, role: Role) -> Text:
    if file.bundled and file.roles[0] is not role:
        return Text("(bundled)", style="dim")
    if file.report.problems - _NOT_DAMAGE:
        return Text("✗", style="red")
    return Text("✓")


def _names(checkpoints: Sequence[Checkpoint], role: Role) -> list[str]:
    """The names of the files that hold ``role`` themselves (not bundled in another role's file)."""
    found = [f.name for c in checkpoints for f in c.files_for(role) if not (f.bundled and f.roles[0] is not role)]
    return list(dict.fromkeys(found))


def _pattern(names: Sequence[str]) -> str:
    """The names as one: their common start and end around a ``*`` (``model_*.safetensors``)."""
    if len(names) == 1:
        return names[0]
    head = _common_start(names)
    tail = _common_start([name[len(head) :][::-1] for name in names])[::-1]
    return f"{head}*{tail}"


def _common_start(texts: Sequence[str]) -> str:
    """The characters every one of ``texts`` starts with."""
    length = 0
    while all(len(text) > length and text[length] == texts[0][length] for text in texts):
        length += 1
    return texts[0][:length]


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
    return Text(f"{glyph} {checkpoint.status.value}", style=style)


def _status_notes(checkpoints: Sequence[Checkpoint], unit: str) -> Iterable[str]:
    """What a status cell would not hold whole: which complete checkpoints had roles left unread,
    and which have leftovers of a save (one line each, under the table)."""
    unread = [str(c.index) for c in checkpoints if c.status is Status.COMPLETE and c.roles_unread]
    if unread:
        yield f"{unit}{'s' if len(unread) != 1 else ''} {', '.join(unread)}: complete (roles not read: run verify)"
    for checkpoint in checkpoints:
        staged = [f.name for f in checkpoint.files if Role.TEMP in f.roles]
        if staged:
            yield f"{unit} {checkpoint.index}: leftover {', '.join(staged)}"


def _findings(findings: list[Finding], width: int, unit: str | None = None, verbose: bool = True) -> RenderableType:
    """Findings of one rule together: each message, then the fixes once (worded for the first).
    Findings of a rule whose fixes differ beyond the file they name (a checkpoint's file that
    ``repair`` moves, a loose one moved by hand) are grouped apart: no finding loses its fixes.
    Unless ``verbose``, a rule's info findings are one line: what they are about, and how many.
    The parts of a finding (``Finding.part_of``) are named under it by code."""
    groups: dict[tuple[str, tuple[str, ...]], list[Finding]] = {}
    whole = standing(findings)
    parts: dict[tuple[str | None, str, int | None], list[str]] = {}
    for finding in findings:  # shown by the finding they are part of, by their codes alone
        if finding.part_of is not None and finding not in whole:
            parts.setdefault((finding.run, *finding.part_of), []).append(finding.code)
    for finding in sorted(whole, key=lambda f: (-f.severity.rank, f.code, f.index if f.index is not None else -1)):
        quiet = finding.severity is Severity.INFO and not verbose
        groups.setdefault((finding.code, () if quiet else _fix_shape(finding)), []).append(finding)
    lines: list[RenderableType] = []
    for (code, _), group in groups.items():
        first = group[0]
        glyph, style = _SEVERITY_STYLE[first.severity]
        heading = f"{glyph} {code} {first.name}"
        if first.severity is Severity.INFO and not verbose:
            lines.append(_hanging(heading, style, f"  {_in_short(group, unit)}", 2, width))
            continue
        if len(group) == 1:
            lines.append(_hanging(heading, style, f"  {_named(first, unit)}", 2, width))
            if codes := parts.get((first.run, first.code, first.index)):
                lines.append(wrap(Text(f"  stands for {', '.join(sorted(set(codes)))} (--json lists each)", style="dim"), width, 4))
        else:
            lines.append(Text.assemble((heading, style), (f"  ({len(group)})", "dim")))
            lines.extend(_hanging("  •", "", f" {_named(f, unit)}", 4, width) for f in group[:MAX_MESSAGES])
            if len(group) > MAX_MESSAGES:
                lines.append(Text(f"  … and {len(group) - MAX_MESSAGES} more (--json lists them all)", style="dim"))
        for fix in first.fixes[:MAX_FIXES]:
            lines.append(_hanging("    fix:", "dim", f" {fix}", 6, width))
        if len(first.fixes) > MAX_FIXES:
            lines.append(Text(f"    more fixes: ckptdoctor rules {code}", style="dim"))
    return Group(*lines)


def _named(finding: Finding, unit: str | None) -> str:
    """The finding's message, led by the checkpoint it is about where the message does not say."""
    if unit is None or finding.index is None or finding.message.startswith(f"{unit} {finding.index}"):
        return finding.message
    return f"{unit} {finding.index}: {finding.message}"


def _in_short(group: Sequence[Finding], unit: str | None) -> str:
    """Info findings of one rule in one line: the files and checkpoints they are about, how many,
    and how to see each: harmless by definition, they should not bury the rest."""
    names = list(dict.fromkeys(f.path.rsplit("/", 1)[-1] for f in group if f.path))
    indexes = sorted({f.index for f in group if f.index is not None})
    about = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    if indexes and unit is not None:
        shown = ", ".join(map(str, indexes[:6])) + (f" … {indexes[-1]}" if len(indexes) > 6 else "")
        about += f" in {unit if len(indexes) == 1 else unit + 's'} {shown}"
    if len(group) == 1:
        return f"{_named(group[0], unit)} (--verbose shows its fixes)"
    return f"{about}: {len(group)} info findings (--verbose lists them)"


def _fix_shape(finding: Finding) -> tuple[str, ...]:
    """The finding's fixes with its own file's path and name taken out."""
    if finding.path is None:
        return finding.fixes
    name = finding.path.rsplit("/", 1)[-1]
    own = sorted({shell_word(finding.path), finding.path, shell_word(name), name}, key=len, reverse=True)
    shaped = []
    for fix in finding.fixes:
        for text in own:
            fix = fix.replace(text, "\0")
        shaped.append(fix)
    return tuple(shaped)


def _hanging(lead: str, style: str, body: str, indent: int, width: int) -> Text:
    """``lead`` + ``body`` wrapped to ``width`` with continuation lines indented."""
    text = Text(lead + body)
    text.stylize(style, 0, len(lead))
    return wrap(text, width, indent)


def wrap(text: Text, width: int, indent: int = 0, whole: Sequence[str] = ()) -> Text:
    """``text`` wrapped at its spaces to ``width`` (at least :data:`MIN_PROSE`), continuation lines
    indented by ``indent``, its styles kept. A word, a path or a code span is never broken: one
    that does not fit goes on a line of its own, however long, so that it pastes back whole
    (rich is told not to wrap the result again); ``whole``: paths in it that hold spaces."""
    return _filled(text, max(width, MIN_PROSE), indent, whole)


def _filled(text: Text, width: int, indent: int = 0, whole: Sequence[str] = ()) -> Text:
    """``text`` wrapped to ``width`` exactly (a table's cell, narrower than prose may be)."""
    out = Text(style=text.style, end=text.end, no_wrap=True, overflow="ignore")
    for gap, start, end in pieces(text.plain, width, indent, cell_len, whole):
        out.append(gap)
        out.append_text(text[start:end])
    return out


_ACTION_STYLE = {
    Action.KEEP: "green",
    Action.DELETE: "red",
    Action.QUARANTINE: "yellow",
    Action.REPOINT: "cyan",
    Action.RESTORE: "cyan",
}


MIN_REASONS = 20
"""The narrowest a repair plan's REASONS column is wrapped in beside the paths it moves (WHAT);
narrower, each row's paths go on the lines under it instead."""


def plan_block(
    plan: Plan, unit: str, show_all: bool = False, summary: Callable[[Plan, str], str] | None = None, width: int = 80
) -> RenderableType:
    """A plan as a table (INDEX / ACTION / REASONS / SIZE, and WHAT for a repair) and the line
    that sums it up, fitted to ``width``: the reasons wrapped at their words; what a repair acts
    on are paths to paste, never broken: in the WHAT column where each fits beside the reasons,
    else under its row, each whole."""
    items = plan.items if show_all or len(plan.items) <= NEWEST_ROWS * 2 else plan.items[-NEWEST_ROWS * 2 :]
    named = summary is not None  # repair acts on files and pointers, not only whole checkpoints
    indexes = [str(item.number) if item.number is not None else "-" for item in items]
    reasons = ["; ".join(item.reasons) for item in items]
    sizes = [size(item.bytes) for item in items]
    what = [", ".join(_relative(path, plan.run) for path in item.paths) for item in items]
    fixed = [_widest(unit.upper(), indexes), _widest("ACTION", [item.action.value for item in items]), _widest("SIZE", sizes)]
    room = width - sum(fixed) - 3 * _GAP  # for the reasons, and the paths with their gap where they go beside them
    reasons_width = max(min(_widest("REASONS", reasons), room), _longest_word(reasons))
    beside = named and _longest_word(what, "WHAT") + _GAP + min(reasons_width, MIN_REASONS) <= room
    if beside:
        what_width = min(_widest("WHAT", what), max(_longest_word(what, "WHAT"), room - _GAP - reasons_width))
        reasons_width = max(min(reasons_width, room - _GAP - what_width), _longest_word(reasons))
    columns: list[tuple[str, JustifyMethod, int]] = [(unit.upper(), "right", fixed[0]), ("ACTION", "left", fixed[1])]
    if beside:
        columns.append(("WHAT", "left", what_width))
    columns += [("REASONS", "left", reasons_width), ("SIZE", "right", fixed[2])]
    rows = [
        [
            Text(index),
            Text(item.action.value, style=_ACTION_STYLE[item.action]),
            *([_filled(Text(paths), what_width)] if beside else []),
            _filled(Text(why), reasons_width),
            Text(bytes_),
        ]
        for item, index, paths, why, bytes_ in zip(items, indexes, what, reasons, sizes, strict=True)
    ]
    parts: list[RenderableType] = [wrap(Text.assemble((plan.run, "bold"), f"  {plan.policy}"), width, 2)]
    if named and not beside:  # each row's paths under it, as far in as its action
        under = fixed[0] + _GAP
        for position, (row, paths) in enumerate(zip(rows, what, strict=True)):
            parts += [_plan_table(columns, [row], header=not position), wrap(Text(" " * under + paths), width, under)]
    if beside or not named or not rows:
        parts.append(_plan_table(columns, rows, header=True))
    if len(items) < len(plan.items):
        hidden = len(plan.items) - len(items)
        parts.append(Text(f"… {hidden} older {unit if hidden == 1 else unit + 's'} not shown (--all shows them)", style="dim"))
    parts.append(wrap(Text((summary or plan_summary)(plan, unit)), width, 2))
    return Group(*parts)


def _plan_table(columns: Sequence[tuple[str, JustifyMethod, int]], rows: Sequence[Sequence[Text]], header: bool) -> Table:
    """Rows of a plan in columns of the widths given (so that the tables of a plan whose paths go
    under each row line up as one), their cells already wrapped to them."""
    table = Table(box=None, header_style="bold", pad_edge=False, show_header=header)
    for title, justify, column_width in columns:
        table.add_column(title, justify=justify, no_wrap=True, width=column_width)
    for row in rows:
        table.add_row(*row)
    return table


def _widest(header: str, cells: Sequence[str]) -> int:
    """The width of a column of ``cells`` under ``header``, each on one line."""
    return max([cell_len(header), *(cell_len(cell) for cell in cells)])


def _longest_word(texts: Sequence[str], header: str = "") -> int:
    """The width of the longest word, path or code span of ``texts``: the narrowest they wrap in."""
    return max([cell_len(header), *(cell_len(word) for text in texts for word in WORD.findall(text))])


def _relative(path: str, run: str) -> str:
    return path[len(run) + 1 :] if path.startswith(run + "/") else path


def plan_summary(plan: Plan, unit: str) -> str:
    """A prune plan in one line."""
    doomed = plan.acting(Action.DELETE)
    if not doomed:
        return f"Nothing to delete; keeping {counted(len(plan.items), unit, unit + 's')}."
    touched = [entry for item in doomed for entry in item.entries]
    kept = len(plan.items) - len(doomed)
    return (
        f"About to delete {len(doomed)} checkpoint{'s' if len(doomed) != 1 else ''} "
        f"({files_or_folders(len(touched), sum(e.is_dir for e in touched))}) totalling {size(plan.freed_bytes)}; keeping {kept}."
    )


def repair_summary(plan: Plan, unit: str) -> str:
    """A repair (or undo) plan in one line."""
    moved, repointed, restored = plan.acting(Action.QUARANTINE), plan.acting(Action.REPOINT), plan.acting(Action.RESTORE)
    if restored:
        total = sum(item.bytes for item in restored)
        return f"About to put back {counted(len(restored), 'entry', 'entries')} totalling {size(total)} ({plan.policy})."
    if not (moved or repointed):  # an undo with nothing to put back is no repair
        return f"Nothing to put back ({plan.policy})." if _undoes(plan) else f"Nothing to repair; {plan.policy}."
    actions = []
    if moved:
        total = sum(item.bytes for item in moved)
        entries = sum(len(item.entries) for item in moved)
        where = []
        if numbered := len({item.number for item in moved if item.number is not None}):
            where.append(counted(numbered, unit, unit + "s"))
        if loose := sum(1 for item in moved if item.number is None):
            where.append(counted(loose, "leftover", "leftovers"))
        actions.append(f"quarantine {counted(entries, 'entry', 'entries')} (from {', '.join(where)}) totalling {size(total)}")
    if repointed:
        actions.append(f"re-point {counted(len(repointed), 'pointer', 'pointers')}")
    return f"About to {' and '.join(actions)}; then {plan.policy}."


def _undoes(plan: Plan) -> bool:
    """Whether ``plan`` is a ``repair --undo``'s (whose items may all be kept: nothing to put back)."""
    return plan.policy.startswith("undo")


SummaryRow = tuple[str, Run | None, Plan | None]
"""A row of the runs' summary: the run's path, the run as scanned (None: a folder an undo puts
back into that no longer scans as a run) and its plan (None: a report's summary)."""
PlanColumn = tuple[str, Callable[[Plan], str], int]
"""A column of the runs' summary saying what each plan does: its header, its cell for a plan, and
its place in the order columns are dropped (after the layout, the count and the resume point: 3
goes first)."""


def runs_summary(rows: Sequence[SummaryRow], acting: Sequence[PlanColumn], width: int) -> RenderableType:
    """Several runs, one row each, for the end of a report or of the plans: the run (below the
    folder they share, named above), its layout, its checkpoints and how many have each status,
    where it resumes, and a column per ``acting``. Fitted to ``width``
    as a run's table is: the run and the status are never cut, columns are dropped before they
    are crushed (the layout first, then the count, the resume point, what the plans do)."""
    paths = [path for path, _, _ in rows]
    parent = _shared_folder(paths)
    runs = [run for _, run, _ in rows]
    columns = [
        _Column("RUN", tuple(Text(_below(path, parent)) for path in paths)),
        _Column("LAYOUT", tuple(Text(run.layout) if run else _NONE for run in runs), drop=0),
        _Column("CHECKPOINTS", tuple(Text(str(len(run.checkpoints))) if run else _NONE for run in runs), justify="right", drop=1),
        _Column("STATUS", tuple(_status_counts(run) for run in runs)),
        _Column("RESUME", tuple(_resume_cell(run) for run in runs), drop=2),
        *(
            _Column(header, tuple(Text(cell(plan)) if plan else _NONE for _, _, plan in rows), justify="right", drop=drop)
            for header, cell, drop in acting
        ),
    ]
    fitted, _, dropped = _fitted(columns, width)
    numbered = _total_width(fitted, False) > width
    if numbered:  # a path wider than the screen allows: a number in its row, the path whole under the table
        columns[0] = _Column("RUN", tuple(Text(str(number)) for number in range(1, len(rows) + 1)), justify="right")
        fitted, _, dropped = _fitted(columns, width)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in fitted:
        table.add_column(column.header, justify=column.justify, no_wrap=True)
    for row in range(len(rows)):
        table.add_row(*(column.cells[row] for column in fitted))
    title = Text.assemble((counted(len(rows), "run", "runs"), "bold"), f" in {parent}" if parent else "")
    parts: list[RenderableType] = [wrap(title, width, 2), table]
    if numbered:
        parts += [wrap(Text(f"{number}: {_below(path, parent)}"), width, 2) for number, path in enumerate(paths, 1)]
    if dropped:
        parts.append(wrap(Text(f"not shown at this width: {', '.join(dropped)}", style="dim"), width, 2))
    return Group(*parts)


_NONE = Text("—", style="dim")


def _shared_folder(paths: Sequence[str]) -> str:
    """The folder every one of ``paths`` is in (or is), as given; "" where they share none."""
    if any("://" in path for path in paths):  # URLs: their parts compared as they are (commonpath folds `//`)
        common: list[str] = []
        for part, *others in zip(*(path.split("/") for path in paths), strict=False):
            if any(other != part for other in others):
                break
            common.append(part)
        return "/".join(common) if len(common) >= 3 else ""
    try:
        shared = os.path.commonpath(paths)
    except ValueError:  # absolute and relative paths mixed
        return ""
    return "" if shared in ("", os.curdir) else shared


def _below(path: str, parent: str) -> str:
    return os.path.relpath(path, parent) if parent else path


def _status_counts(run: Run | None) -> Text:
    """``2 complete, 1 partial``: how many checkpoints have each status, the bad ones in red."""
    if run is None or not run.checkpoints:
        return Text("no checkpoints", style="red") if run else _NONE
    counts = Counter(checkpoint.status for checkpoint in run.checkpoints)
    return Text(", ").join(Text(f"{counts[status]} {status.value}", style=_STATUS_STYLE[status][1]) for status in Status if counts[status])


def _resume_cell(run: Run | None) -> Text:
    if run is None:
        return _NONE
    checkpoint = run.resume
    if run.resume_depends_on:
        return Text("unknown", style="bold yellow")
    if checkpoint is None:
        return Text("none", style="bold red")
    return Text(f"{run.unit.value} {checkpoint.index}{' (weights only)' if run.weights_only else ''}", style="green")


def plans_summary(plans: Plans, width: int) -> RenderableType:
    """The plans of several runs in one table (what each deletes and frees, or quarantines and
    re-points, or puts back), and their grand total in one line: what the one question asks."""
    scanned: dict[str, Run] = {}
    for run in plans.report.runs:
        scanned.setdefault(run.path, run)
    rows = [(plan.run, scanned.get(plan.run), plan) for plan, _ in plans.plans]
    acting: tuple[PlanColumn, ...]
    if not plans.repair:  # the bytes freed are what a prune is for: kept longest
        acting = (("DELETE", lambda plan: _number(len(plan.acting(Action.DELETE))), 3), ("FREES", _frees, 4))
    elif any(_undoes(plan) for plan, _ in plans.plans):
        acting = (("PUT BACK", lambda plan: _moved(plan.acting(Action.RESTORE)), 3),)
    else:
        acting = (("QUARANTINE", lambda plan: _moved(plan.acting(Action.QUARANTINE)), 4), ("RE-POINT", _repointed, 3))
    return Group(runs_summary(rows, acting, width), wrap(Text(grand_total(plans)), width, 2))


def _number(n: int) -> str:
    return str(n) if n else "—"


def _frees(plan: Plan) -> str:
    return size(plan.freed_bytes) if plan.acting(Action.DELETE) else "—"


def _repointed(plan: Plan) -> str:
    return _number(len(plan.acting(Action.REPOINT)))


def _moved(items: Sequence[PlanItem]) -> str:
    """``3 (5.3 KiB)``: the entries ``items`` move, and their bytes."""
    entries = sum(len(item.entries) for item in items)
    return f"{entries} ({size(sum(item.bytes for item in items))})" if entries else "—"


def grand_total(plans: Plans) -> str:
    """What the plans of every run do, together: ``About to delete 12 checkpoints from 3 runs,
    totalling 4.1 GiB.``"""
    every = [plan for plan, _ in plans.plans]
    runs = counted(len(every), "run", "runs")
    if not plans.repair:
        acting = [plan for plan in every if plan.acting(Action.DELETE)]
        if not acting:
            return f"Nothing to delete in {runs}."
        doomed = sum(len(plan.acting(Action.DELETE)) for plan in acting)
        freed = sum(plan.freed_bytes for plan in acting)
        return f"About to delete {counted(doomed, 'checkpoint', 'checkpoints')} from {counted(len(acting), 'run', 'runs')}, totalling {size(freed)}."
    if any(_undoes(plan) for plan in every):
        restored = [item for plan in every for item in plan.acting(Action.RESTORE)]
        if not restored:
            return f"Nothing to put back in {runs}."
        into = counted(len({plan.run for plan in every if plan.acting(Action.RESTORE)}), "run", "runs")
        entries = sum(len(item.entries) for item in restored)
        return f"About to put back {counted(entries, 'entry', 'entries')} totalling {size(sum(i.bytes for i in restored))} into {into}."
    acting = [plan for plan in every if plan.acting(Action.QUARANTINE) or plan.acting(Action.REPOINT)]
    if not acting:
        return f"Nothing to repair in {runs}."
    moved = [item for plan in acting for item in plan.acting(Action.QUARANTINE)]
    repointed = sum(len(plan.acting(Action.REPOINT)) for plan in acting)
    what = []
    if moved:
        entries = sum(len(item.entries) for item in moved)
        what.append(f"quarantine {counted(entries, 'entry', 'entries')} totalling {size(sum(item.bytes for item in moved))}")
    if repointed:
        what.append(f"re-point {counted(repointed, 'pointer', 'pointers')}")
    return f"About to {' and '.join(what)} in {counted(len(acting), 'run', 'runs')}."
