"""The ``ckptdoctor.report.v1`` JSON document (docs/commands.md, "The JSON report"): fields are only ever added."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from ckptdoctor.model import (
    BucketCheck,
    Checkpoint,
    CheckpointFile,
    DiskCheck,
    Entry,
    FileReport,
    Finding,
    Growth,
    Plan,
    PlanItem,
    Report,
    Role,
    Run,
    Severity,
    Status,
    StoreLeftovers,
)
from ckptdoctor.render import PLAIN, Chunks, Plans, RenderOptions
from ckptdoctor.rules.rule import Rule
from ckptdoctor.version import __version__

if TYPE_CHECKING:
    from ckptdoctor.rules.search import Match

SCHEMA = "ckptdoctor.report.v1"


def render(report: Report, options: RenderOptions = PLAIN) -> Chunks:
    return _streamed(report)


def encoded(body: dict[str, Any]) -> bytes:
    """``body`` as one compact line of JSON: what ``json.dumps(body, separators=(",", ":"),
    ensure_ascii=False)`` writes, in UTF-8 as the output writes it (``backslashreplace``), byte
    for byte, at a tenth of its time (reports of big runs are tens of MB)."""
    return _compact(body, orjson.OPT_APPEND_NEWLINE)


def _compact(value: dict[str, Any] | list[dict[str, Any]], option: int = 0) -> bytes:
    """``value`` in JSON by orjson. A string orjson refuses (a lone surrogate, which no name shown
    reaches: names are ``discover.display``-ed) goes to the standard library, whose ``\\udcxx``
    is then written as ``backslashreplace`` writes it, as before."""
    try:
        return orjson.dumps(value, option=option)
    except TypeError:  # orjson.JSONEncodeError is one
        # the standard library only where orjson refuses: it costs start-up time
        import json

        ending = "\n" if option & orjson.OPT_APPEND_NEWLINE else ""
        return (json.dumps(value, separators=(",", ":"), ensure_ascii=False) + ending).encode("utf-8", "backslashreplace")


_HOLE = orjson.Fragment(b"\0")
"""Where a run's checkpoints go in the document's skeleton: orjson escapes every control
character it writes in a string, so a raw NUL byte is nowhere else."""

BATCH = 512
"""Checkpoints encoded at a time: a run of 150,000 files is never held as JSON, nor as dicts."""


def _streamed(report: Report, more: Callable[[dict[str, Any]], None] = lambda body: None) -> Chunks:
    """The bytes of :func:`encoded` of the report's document (with ``more`` added to it), a part
    at a time: the skeleton, with each run's checkpoints encoded in its place as it is written."""
    shared: _Shared = {}
    body = document(report, shared, holes=True)
    more(body)
    try:
        skeleton = orjson.dumps(body, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # a string orjson refuses: the standard library writes the whole document
        whole = document(report)
        more(whole)
        yield encoded(whole)
        return
    parts = skeleton.split(b"\0")
    yield parts[0]
    for run, after in zip(report.runs, parts[1:], strict=True):
        checkpoints = run.checkpoints
        yield b"["
        for start in range(0, len(checkpoints), BATCH):
            batch = _compact([_checkpoint(c, shared) for c in checkpoints[start : start + BATCH]])
            yield (b"," if start else b"") + batch[1:-1]  # the list's items, without its brackets
        yield b"]"
        yield after


def document(report: Report, shared: _Shared | None = None, holes: bool = False) -> dict[str, Any]:
    """The report's document. ``holes``: each run's checkpoints left out, in their place a hole
    :func:`_streamed` fills as it writes (``shared``: the report fields it shares, which it
    goes on sharing)."""
    body: dict[str, Any] = {
        "schema": SCHEMA,
        "version": __version__,
        "command": report.command,
        "runs": [_run(run, {} if shared is None else shared, holes) for run in report.runs],
        "findings": [_finding(finding) for finding in report.findings],
        "summary": {severity.value: report.count(severity) for severity in reversed(Severity)},
        "unrecognised": list(report.unrecognised),
    }
    if report.errors:
        body["errors"] = [{"path": e.path, "message": e.message} for e in report.errors]
    if report.disk is not None:
        body["disk"] = disk_entry(report.disk)
    if report.transfer is not None:
        body["store"] = {"requests": report.transfer.requests, "bytes_read": report.transfer.received}
        kept = [(run.path, run.store) for run in report.runs if run.store is not None]
        if kept:
            body["store"]["leftovers"] = [_leftovers(path, store) for path, store in kept]
    if report.fanned is not None:
        body["executor"] = report.fanned._asdict()
    return body


def _leftovers(path: str, kept: StoreLeftovers) -> dict[str, Any]:
    """What the store keeps under one run besides its objects (None where it was not asked)."""
    checked = kept.unchecked is None
    return {
        "run": path,
        "checked": checked,
        "why_unchecked": kept.unchecked,
        "incomplete_uploads": [{"url": u.url, "parts_bytes": u.parts_bytes, "age_seconds": u.age} for u in kept.uploads]
        if checked
        else None,
        "versioning": kept.versioning if checked else None,
        "noncurrent_versions": kept.noncurrent if checked else None,
        "noncurrent_bytes": kept.noncurrent_bytes if checked else None,
        "delete_markers": kept.delete_markers if checked else None,
    }


def disk_entry(disk: DiskCheck) -> dict[str, Any]:
    """The report's ``disk`` block, and what the figures rest on."""
    volume, guess = disk.volume, disk.estimate
    return {
        "path": disk.path,
        "fstype": volume.fstype if volume else None,
        "mountpoint": volume.mountpoint if volume else None,
        "network": volume.network if volume else None,
        "total_bytes": volume.total_bytes if volume else None,
        "free_bytes": volume.free_bytes if volume else None,
        "free_inodes": volume.free_inodes if volume else None,
        "writable": disk.writable,
        "next_save_bytes": guess.bytes if guess else None,
        "next_save_files": guess.files if guess else None,
        "estimate_basis": guess.basis if guess else None,
        "needed_bytes": disk.needed_bytes if guess else None,
        "keep_last": disk.keep_last,
        "saves_until_full": disk.saves_until_full,
        **({"bucket": bucket_entry(disk.bucket), "growth": growth_entry(disk.growth)} if disk.bucket is not None else {}),
    }


def bucket_entry(bucket: BucketCheck) -> dict[str, Any]:
    """What the probes of a run's bucket found (``docs/commands.md``, diskcheck)."""
    return {
        "store": bucket.store,
        "probe": bucket.probe,
        "probe_left": bucket.probe_left,
        "permissions": [
            {"action": p.action, "permission": p.name, "access": p.access.value, "needed_by": list(p.needed_by), "detail": p.detail}
            for p in bucket.permissions
        ],
        "quota_bytes": bucket.quota_bytes,
        "quota": bucket.quota,
        "versioning": bucket.versioning,
        "lifecycle_rules": len(bucket.lifecycle) if bucket.lifecycle is not None else None,
        "aborts_incomplete_uploads": bucket.aborts_uploads,
        "expires_noncurrent_versions": bucket.expires_noncurrent,
        "not_checked": list(bucket.not_checked),
    }


def growth_entry(growth: Growth | None) -> dict[str, Any] | None:
    """How the run grows in its bucket; None before its first checkpoint."""
    if growth is None:
        return None
    return {
        "checkpoints": growth.checkpoints,
        "stored_bytes": growth.stored_bytes,
        "bytes_per_save": growth.bytes_per_save,
        "saves_per_month": growth.saves_per_month,
        "bytes_per_month": growth.bytes_per_month,
        "keep_last": growth.keep_last,
        "steady_bytes": growth.steady_bytes,
        "deletes_free_nothing": growth.deletes_free_nothing,
    }


def render_plans(plans: Plans, options: RenderOptions = PLAIN) -> Chunks:
    """``prune`` / ``repair``: the report plus the plan of every run, and what
    killed prunes' journals would still do."""

    def planned(body: dict[str, Any]) -> None:
        body["plan"] = [_plan_item(plan, item) for plan, _ in plans.plans for item in plan.items]
        if plans.pending:
            body["pending"] = [
                {"journal": found.journal, "deletes": list(found.in_run), "in_trash": found.in_trash, "spares": list(found.spared)}
                for found in plans.pending
            ]
        body["dry_run"] = plans.dry_run
        body["freed_bytes"] = sum(plan.freed_bytes for plan, _ in plans.plans)

    return _streamed(plans.report, planned)


def _plan_item(plan: Plan, item: PlanItem) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "run": plan.run,
        "index": item.number,
        "action": item.action.value,
        "reasons": list(item.reasons),
        "paths": list(item.paths),
        "bytes": item.bytes,
    }
    if item.write is not None:  # a repoint: what the pointer will say
        entry["writes"] = {"text": item.write.text, "kind": item.write.kind.value}
    return entry


def render_rules(rules: tuple[Rule, ...], options: RenderOptions = PLAIN, matches: tuple[Match, ...] = ()) -> str:
    """The rules in full; after a search, also ``matches``: each rule's code, name, score and why, best first."""
    document: dict[str, Any] = {"schema": "ckptdoctor.rules.v1", "version": __version__, "rules": [rule_entry(r) for r in rules]}
    if matches:
        document["matches"] = [{"code": m.rule.code, "name": m.rule.name, "score": m.score, "why": m.why} for m in matches]
    # the rule table is read by people too: the standard library's indented layout, kept as it was
    import json

    return json.dumps(document, indent=2) + "\n"


def rule_entry(rule: Rule) -> dict[str, Any]:
    return {
        "code": rule.code,
        "name": rule.name,
        "severity": rule.severity.value,
        "severity_behind_resume": rule.behind_resume.value if rule.behind_resume else rule.severity.value,
        "summary": rule.summary,
        "meaning": rule.meaning,
        "causes": rule.causes,
        "fixes": [text for generic, _ in rule.documented_fixes() for text in generic],
        "fixes_by_framework": _by_framework(rule),
        "messages": list(rule.messages),
        "related": list(rule.related),
    }


def _by_framework(rule: Rule) -> dict[str, list[str]]:
    """Each framework's own wording of the rule's fixes, in the rule's order."""
    by_framework: dict[str, list[str]] = {}
    for _, own in rule.documented_fixes():
        for key, text in own:
            by_framework.setdefault(key, []).append(text)
    return by_framework


def _run(run: Run, shared: _Shared, holes: bool) -> dict[str, Any]:
    resume = run.resume
    return {
        "path": run.path,
        "layout": run.layout,
        "unit": run.unit.value,
        "bytes": run.bytes,
        "required": [role.value for role in run.required],
        "checkpoints": _HOLE if holes else [_checkpoint(c, shared) for c in run.checkpoints],
        "resume": None
        if resume is None
        else {
            "index": resume.index,
            "paths": [f.path for f in resume.files],
            "weights_only": run.weights_only is not None,
            "path": run.resume_path,
            "how": run.resume_how,
        },
        # newer checkpoints this user cannot read: the framework resumes from the newest if it is whole (CKD215)
        "resume_depends_on": [c.index for c in run.resume_depends_on],
        "weights_only": run.weights_only,
        "loose_files": [_file(f, shared) for f in run.loose_files],
        "other_files": [_other(e) for e in run.other_files],
        "extra_files": [_file(f, shared) for f in run.extra_files],
    }


ROLES_UNREAD = "complete-roles-unread"
"""The status of a complete checkpoint whose bundled files' roles only their names tell."""


def status(checkpoint: Checkpoint) -> str:
    """``complete`` only where the roles were read from the content (or need no reading)."""
    if checkpoint.status is Status.COMPLETE and checkpoint.roles_unread:
        return ROLES_UNREAD
    return checkpoint.status.value


def _checkpoint(checkpoint: Checkpoint, shared: _Shared) -> dict[str, Any]:
    return {
        "index": checkpoint.index,
        "status": status(checkpoint),
        "bytes": checkpoint.bytes,
        "missing": [role.value for role in checkpoint.missing],
        "files": [_file(f, shared) for f in checkpoint.files],
    }


_Shared = dict[int, dict[str, Any]]
"""Report fields by the report's id, for one document (whose report holds every file report alive)."""


def _file(file: CheckpointFile, shared: _Shared) -> dict[str, Any]:
    role, roles = _roles(file.roles)
    entry = file.entry
    report = file.report
    fields = shared.get(id(report))
    if fields is None:
        fields = shared[id(report)] = _report_fields(report)
    return {"role": role, "roles": roles, "path": entry.path, "bytes": entry.size, **fields}


def _report_fields(report: FileReport) -> dict[str, Any]:
    """The fields of a file's entry that its report decides: worked out once per report (a big
    run's clean files share a few), and shared between entries, which the encoder only reads."""
    issues = report.issues
    fields: dict[str, Any] = {
        "format": report.format,
        "problems": [{"problem": i.problem.value, "detail": i.detail} for i in issues] if issues else [],
    }
    if report.tensors is not None:  # read whole (verify): what it holds
        fields["tensors"] = len(report.tensors)
        fields["tensor_bytes"] = report.tensor_bytes
        fields["dtypes"] = sorted({t.dtype for t in report.tensors})
        fields["devices"] = sorted({t.device for t in report.tensors})
    if report.keys_read:
        fields["keys"] = list(report.keys)
    return fields


@functools.cache
def _roles(roles: tuple[Role, ...]) -> tuple[str, list[str]]:
    """The ``role`` and ``roles`` fields; the few combinations a run has are built once.

    The list is shared between files: the encoder only reads it.
    """
    if not roles:
        return "other", []
    return ("bundled" if len(roles) > 1 else roles[0].value), [role.value for role in roles]


def _other(entry: Entry) -> dict[str, Any]:
    return {"path": entry.path, "bytes": entry.size, "kind": "folder" if entry.is_dir else "file"}


def _finding(finding: Finding) -> dict[str, Any]:
    return {
        "code": finding.code,
        "name": finding.name,
        "severity": finding.severity.value,
        "run": finding.run,
        "index": finding.index,
        "path": finding.path,
        "message": finding.message,
        "fixes": list(finding.fixes),
        **({"part_of": {"code": finding.part_of[0], "index": finding.part_of[1]}} if finding.part_of is not None else {}),
    }
