"""Repair: a run and its findings -> the plan that makes it resumable from its newest complete
checkpoint, and (``--undo``) a quarantine -> the plan that puts it back.

Pure functions, like ``retention``: what the world says comes in as ``Circumstances`` (or, for
an undo, as the quarantine's recorded state). Nothing is ever deleted: broken checkpoints newer
than the resume point, empty files and staging leftovers are moved into a quarantine, and
pointers the framework follows are rewritten to name the resume point. Every action names the
rules it fixes; whatever may still be being written is left alone.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Sequence

from ckptdoctor.errors import RefusedError
from ckptdoctor.layouts.base import behind_pointer
from ckptdoctor.layouts.pointers import UNKNOWN, Pointer, unfollowable
from ckptdoctor.layouts.registry import Layout, home
from ckptdoctor.model import (
    Action,
    Checkpoint,
    CheckpointFile,
    Entry,
    Finding,
    Plan,
    PlanItem,
    PointerKind,
    Problem,
    Role,
    Run,
    Severity,
    Status,
)
from ckptdoctor.places import run_root
from ckptdoctor.planners.retention import (
    DEPENDS,
    RESTORE_FIRST,
    SHUT,
    Circumstances,
    entry_held_back,
    held_back,
    measure,
    targets,
)
from ckptdoctor.records import Quarantine, StoredState
from ckptdoctor.rules.completeness import AUTO_RESUME_BEHIND, INTERRUPTED_SAVE, STALE_POINTER


class NotResumable(RefusedError):
    """Repair would not make the run resumable: there is no complete checkpoint to resume from."""


RESUME_POINT = "resume point (newest complete)"
ARCHIVED_KEPT = "archived (CKD217), older than the resume point: never moved"
"""The reason of the item that keeps the resume point: where the run goes on once repaired."""


def resume_kept(plan: Plan) -> int | None:
    """The index of the resume point a repair ``plan`` keeps (it may be older than the one a
    header read gives: ``repair --verify``)."""
    return next((item.number for item in plan.items if item.action is Action.KEEP and item.reasons[:1] == (RESUME_POINT,)), None)


def plan(run: Run, layout: Layout, findings: Sequence[Finding], circumstances: Circumstances, min_age: float) -> Plan:
    """What ``repair`` does to ``run``: quarantine, re-point, and the resume point it keeps."""
    resume = run.resume
    unit = run.unit.value
    if resume is None and run.resume_depends_on:
        shut = ", ".join(f"{unit} {c.index}" for c in run.resume_depends_on)
        raise NotResumable(
            f"{run.path} has no complete {unit} this user can read, and may resume from {shut}, which this user cannot "
            "read (CKD215 access-denied): nothing was moved; a repair by a user who can read them sees what it is"
        )
    if resume is None:
        raise NotResumable(
            f"{run.path} has no complete {unit} (CKD110 no-resumable-checkpoint): there is nothing to make it resumable "
            "from, so nothing was moved; `ckptdoctor rules CKD110` says what can still be saved"
        )
    labels = _Labels(findings)
    saved, sizes, _ = measure(run, circumstances)
    root = run_root(run)
    items: list[PlanItem] = []
    held: set[int] = set()
    newer = {id(c) for c in run.after_resume}  # by identity: a run may have thousands, each compared field by field
    depends = run.resume_depends_on
    for checkpoint in run.checkpoints:
        index = checkpoint.index
        if checkpoint is resume:
            # a staging leftover beside the whole files it was going to become goes; they stay
            spare = [f for f in checkpoint.files if Role.TEMP in f.roles and not entry_held_back(f.entry, circumstances, min_age)]
            kept = tuple(entry for entry in targets(checkpoint) if entry not in {f.entry for f in spare})
            items.append(PlanItem(index, Action.KEEP, (RESUME_POINT,), kept, sizes[index]))
            items += [PlanItem(None, Action.QUARANTINE, (_what([f]), *labels.of(paths=[f.path])), (f.entry,), f.entry.size) for f in spare]
            continue
        busy = held_back(checkpoint, saved[index], circumstances, min_age)
        if checkpoint.shut:  # what this user cannot read may be whole: a user who can read it can repair it
            said = (DEPENDS,) if checkpoint in depends else ()
            items.append(PlanItem(index, Action.KEEP, (*said, SHUT), targets(checkpoint), sizes[index]))
            continue
        if checkpoint.archived:  # no damage: a restore reads it, and a copy of it cannot be made before
            items.append(
                PlanItem(
                    index, Action.KEEP, (RESTORE_FIRST if id(checkpoint) in newer else ARCHIVED_KEPT,), targets(checkpoint), sizes[index]
                )
            )
            continue
        if (why := layout.left_in_place(checkpoint)) is not None and checkpoint.status is not Status.COMPLETE:
            items.append(
                PlanItem(index, Action.KEEP, (f"{checkpoint.status.value}: {why}: left as it is",), targets(checkpoint), sizes[index])
            )
            continue
        if id(checkpoint) in newer:
            why = f"{checkpoint.status.value} and newer than the resume point ({unit} {resume.index})"
            if busy:
                held.add(index)
                items.append(
                    PlanItem(index, Action.KEEP, (why, *busy, "may still be being saved: left as it is"), targets(checkpoint), sizes[index])
                )
            else:
                fixes = labels.of(index=index, paths=[f.path for f in checkpoint.files])
                items.append(PlanItem(index, Action.QUARANTINE, (why, *fixes), targets(checkpoint), sizes[index]))
            continue
        leftovers = [f for f in checkpoint.files if f.leftover]
        if leftovers and len(leftovers) == len(checkpoint.files) and not busy:
            # nothing but leftovers: the whole checkpoint goes, and every finding about it
            fixes = labels.of(index=index, paths=[f.path for f in leftovers])
            items.append(PlanItem(index, Action.QUARANTINE, (_what(leftovers), *fixes), targets(checkpoint), sizes[index]))
        elif leftovers and not busy and not (checkpoint.folder is not None and checkpoint.folder.is_symlink):
            fixes = labels.of(paths=[f.path for f in leftovers])
            entries = tuple(f.entry for f in leftovers)
            items.append(PlanItem(index, Action.QUARANTINE, (_what(leftovers), *fixes), entries, sum(e.size for e in entries)))
        elif checkpoint.status is not Status.COMPLETE:
            reason = f"{checkpoint.status.value}, older than the resume point: left as it is (prune deletes it)"
            items.append(PlanItem(index, Action.KEEP, (reason, *busy), targets(checkpoint), sizes[index]))
    broken = _broken_pointers(run, layout, labels)
    loose = _loose_leftovers(run, labels, circumstances, min_age, {source.path for source, _, _ in broken if source is not None})
    items += loose
    saving = ""
    if held:
        saving = f"{unit} {min(held)} may still be being saved"
    elif any(item.action is Action.KEEP for item in loose):
        saving = "a staging leftover is still being written"
    items += _repoints(run, layout, resume, broken, circumstances, min_age, saving, root)
    if depends:
        return Plan(
            run.path, root, home(run), tuple(items), 0, f"resume from {unit} {depends[-1].index} if it is whole, else {unit} {resume.index}"
        )
    return Plan(run.path, root, home(run), tuple(items), 0, f"resume from {unit} {resume.index}")


def undo_plan(found: Quarantine, run: str, root: str, home: str) -> Plan:
    """What ``repair --undo`` puts back from ``found``: everything still in it whose place in the
    run is free. Anything in its way is listed and nothing is overwritten (the caller refuses)."""
    items = []
    for stored in found.items:
        entry = Entry(os.path.basename(stored.path), os.path.join(run, stored.path), os.path.join(root, stored.path), stored.bytes)
        what = ("re-pointed: " if stored.write is not None else "quarantined: ") + (stored.reasons[0] if stored.reasons else "")
        if stored.state is StoredState.QUARANTINED:
            undo = "remove the pointer the repair created" if stored.write is not None and not stored.existed else "put back"
            items.append(PlanItem(stored.number, Action.RESTORE, (what, undo), (entry,), stored.bytes))
        elif stored.state is StoredState.CONFLICT:
            clash = "changed since the repair" if stored.write is not None else "exists again in the run"
            items.append(
                PlanItem(
                    stored.number,
                    Action.KEEP,
                    (
                        what,
                        f"{clash}: not overwritten",
                    ),
                    (entry,),
                    stored.bytes,
                )
            )
        elif stored.state is StoredState.REPLACED:
            items.append(
                PlanItem(stored.number, Action.KEEP, (what, "not shown to be what the repair moved: left in the quarantine"), (entry,), 0)
            )
        elif stored.state is StoredState.LOST:
            items.append(PlanItem(stored.number, Action.KEEP, (what, "no longer in the quarantine: cannot be put back"), (entry,), 0))
    return Plan(run, root, home, tuple(items), 0, f"undo repair {found.ident}")


def _what(files: Iterable[CheckpointFile]) -> str:
    kinds = sorted({"staging leftover" if Role.TEMP in f.roles else "empty file" for f in files})
    return " and ".join(kinds)


def _loose_leftovers(run: Run, labels: _Labels, circumstances: Circumstances, min_age: float, repointed: set[str]) -> list[PlanItem]:
    """Staging files and folders, and empty files, that belong to no checkpoint."""
    items = []
    for file in run.loose_files:
        if not file.leftover or file.path in repointed or file.report.problems & UNKNOWN:
            continue
        entry = file.entry
        size = entry.size + sum(size for _, _, size in circumstances.inside.get(entry.os_path, ()))
        busy = entry_held_back(entry, circumstances, min_age)
        if busy:
            items.append(PlanItem(None, Action.KEEP, (_what([file]), *busy, "may still be in use: left as it is"), (entry,), size))
        else:
            items.append(PlanItem(None, Action.QUARANTINE, (_what([file]), *labels.of(paths=[file.path])), (entry,), size))
    return items


_Broken = tuple[CheckpointFile | None, str, str]
"""A pointer the framework cannot follow: its file (None if missing), what is wrong, the rule."""


def _broken_pointers(run: Run, layout: Layout, labels: _Labels) -> list[_Broken]:
    """Pointers the framework follows that name nothing it can resume from, or cannot be read."""
    broken: list[_Broken] = []
    for pointer in layout.pointers(run):
        state = unfollowable(run, pointer)
        if state is not None:
            broken.append((pointer.source, _said(pointer, state), "CKD113 stale-pointer"))
    behind = behind_pointer(layout, run)
    left = behind[1] if behind is not None else None
    if left is not None and left.source is not None:
        # whole, but left on an older save than the resume point: the framework's own resume goes back
        label = f"{AUTO_RESUME_BEHIND.code} {AUTO_RESUME_BEHIND.name}"
        broken.append((left.source, f"{left.source.name} names {left.target!r}, an older {run.unit.value}", label))
    named = {id(source) for source, _, _ in broken}
    for file in run.loose_files:
        if Role.POINTER in file.roles and id(file) not in named and (file.entry.dangling or _damaged(file)):
            what = "dangles" if file.entry.dangling else "cannot be read"
            broken.append((file, f"{file.name} {what}", labels.first(file.path, "CKD113 stale-pointer")))
    return broken


def _repoints(
    run: Run,
    layout: Layout,
    resume: Checkpoint,
    broken: list[_Broken],
    circumstances: Circumstances,
    min_age: float,
    saving: str,
    root: str,
) -> list[PlanItem]:
    """``broken`` pointers written to name ``resume``, where the layout knows how to write them;
    none while a save may be in progress (``saving`` says which): frameworks rewrite their
    pointer when any save ends, and that one would be newer."""
    items = []
    for source, said, rule in broken:
        write = layout.repoint(source, resume)
        if write is None:
            continue
        entry = source.entry if source else _new_entry(run, root, write.name)
        held = saving or ("; ".join(entry_held_back(entry, circumstances, min_age)) if source is not None else "")
        if held:
            reasons = (f"{said} ({rule})", f"{held}: left as it is")
            items.append(PlanItem(resume.index, Action.KEEP, reasons, (entry,), 0))
            continue
        shown = {PointerKind.SYMLINK: f"-> {write.text}", PointerKind.COPY: f"a copy of {write.text}"}.get(
            write.kind, _first_line(write.text)
        )
        reasons = (f"{said}: fixes {rule}", f"will name {shown}, the resume point")
        items.append(PlanItem(resume.index, Action.REPOINT, reasons, (entry,), entry.size, write))
    return items


def _first_line(text: str) -> str:
    """A pointer's text as people read it: a state file of several lines by its first."""
    lines = text.splitlines() or [""]
    return repr(lines[0]) + (f" (and {len(lines) - 1} more line{'s' if len(lines) > 2 else ''})" if len(lines) > 1 else "")


def _said(pointer: Pointer, state: str) -> str:
    if pointer.source is None:
        return f"no `{pointer.meaning}` file"
    if not pointer.target:
        return f"{pointer.source.name} is {state}"
    return f"{pointer.source.name} names {pointer.target!r}, which is {state}"


def _damaged(file: CheckpointFile) -> bool:
    """Whether a reader found something wrong with ``file`` (what this user may not read, or no one
    before a restore, is unknown, not wrong)."""
    return any(issue.problem is not Problem.LEGACY and issue.problem not in UNKNOWN for issue in file.report.issues)


def _new_entry(run: Run, root: str, name: str) -> Entry:
    return Entry(name, os.path.join(run.path, name), os.path.join(root, name), 0)


class _Labels:
    """The rules a set of findings names, by checkpoint index and by path (``CKD101 missing-optimizer``)."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        self._by_index: dict[int, list[str]] = defaultdict(list)
        self._by_path: dict[str, list[str]] = defaultdict(list)
        for finding in findings:
            # a plan names what it moves by the findings of its files, not the one that stands for them (CKD117)
            if finding.severity is Severity.INFO or finding.code == INTERRUPTED_SAVE.code:
                continue
            label = f"{finding.code} {finding.name}"
            # 2xx (integrity) and 4xx (safety) rules are about one file, and CKD113 about one
            # pointer (its index is the checkpoint it names, which moving would not fix); the
            # others are about a whole checkpoint, whichever file they show
            pointed = finding.code in (STALE_POINTER.code, AUTO_RESUME_BEHIND.code)
            by_path = finding.code[3] in "24" or pointed
            if finding.index is not None and not pointed:
                self._by_index[finding.index].append(label)
            if finding.path is not None and by_path:
                self._by_path[finding.path].append(label)

    def of(self, index: int | None = None, paths: Iterable[str] = ()) -> tuple[str, ...]:
        """``("fixes CKD101 missing-optimizer, CKD202 temp-file",)``, or nothing."""
        found = list(self._by_index.get(index, ())) if index is not None else []
        for path in paths:
            found += self._by_path.get(path, ())
        return (f"fixes {', '.join(sorted(set(found)))}",) if found else ()

    def first(self, path: str, default: str) -> str:
        return next(iter(self._by_path.get(path, ())), default)
