"""Severity follows harm: a broken checkpoint that nothing will resume from is dead weight.

The checks word each finding at its rule's severity. A run whose epochs 1-200 are broken and
201-250 fine must not exit 1 with 200 errors while it says "Resume from epoch 250": only what
a resume would hit is an error — the resume point itself, anything newer that auto-resume would
pick, what a framework's pointer names, or a run with no resume point at all. A broken
checkpoint older than the resume point is lowered to the rule's ``behind_resume`` severity and
its fix becomes a prune that deletes it while keeping every complete checkpoint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from ckptdoctor.layouts.pointers import unfollowable
from ckptdoctor.model import Finding, Status
from ckptdoctor.rules.context import RunContext
from ckptdoctor.rules.rule import Rule


def by_harm(ctx: RunContext, findings: Iterable[Finding], rule_of: Callable[[str], Rule | None]) -> list[Finding]:
    """``findings`` of one run, those on dead-weight checkpoints lowered and given the prune fix."""
    behind = dead_weight(ctx)
    if not behind:
        return list(findings)
    run = ctx.run
    complete = sum(1 for c in run.checkpoints if c.status is Status.COMPLETE)
    resume = run.resume
    assert resume is not None  # dead weight exists only behind a resume point
    unit = run.unit.value
    # damage only a whole read sees (a CRC, NaN, a pickle) looks whole to prune's header read:
    # --verify makes prune read the checkpoints it keeps, so it keeps the right ones
    read_whole = any(f.report.tensors is not None for c in run.checkpoints if c.index in behind for f in c.files)
    policy = f"--keep-last {complete}{' --verify' if read_whole else ''}"
    fix = (
        f"Nothing resumes from a broken {unit} older than the resume point ({unit} {resume.index}): "
        f"`ckptdoctor prune {ctx.fix_context['this_run']} {policy} --dry-run` deletes them and keeps every complete {unit} and "
        "what the framework's pointers name (it shows the plan; run it again with `--yes` instead of `--dry-run`)."
    )
    lowered: list[Finding] = []
    for finding in findings:
        rule = rule_of(finding.code)
        if finding.index in behind and rule is not None and rule.behind_resume is not None:
            severity = min(finding.severity, rule.behind_resume, key=lambda level: level.rank)
            finding = dataclasses.replace(finding, severity=severity, fixes=(fix,))
        lowered.append(finding)
    return lowered


def dead_weight(ctx: RunContext) -> frozenset[int]:
    """Indices of broken checkpoints older than the resume point that nothing the framework
    follows (a pointer, its own "resume from the latest") would load."""
    run = ctx.run
    resume = run.resume
    if resume is None or run.single_file:
        return frozenset()
    # a pointer whose follower loads only what is whole there (HF's best model) hits nothing broken
    followed = {pointer.number for pointer in ctx.layout.pointers(run) if unfollowable(run, pointer) is not None}
    pick = ctx.layout.auto_resume_pick(run)
    if pick is not None:
        followed.add(pick.index)
    # an unreadable one is no dead weight for prune, which never deletes it (CKD215 words its own),
    # nor an archived one, which a restore reads (CKD217 words its own)
    return frozenset(
        c.index
        for c in run.checkpoints
        if c.index < resume.index and c.status not in (Status.COMPLETE, Status.UNREADABLE, Status.ARCHIVED) and c.index not in followed
    )
