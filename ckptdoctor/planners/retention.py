"""Retention: a run and a policy -> the plan of what ``prune`` keeps and deletes, and why.

Pure functions, no I/O: what the world says (the time, metric values, files live processes hold
open) comes in as :class:`Circumstances`, so every decision can be tested and explained. A
checkpoint is kept if any rule keeps it (restic's "ORed" policy), and some reasons keep it
whatever the policy says (DESIGN §4, invariant 3).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import NamedTuple

from ckptdoctor.errors import InvalidValue
from ckptdoctor.layouts.registry import Layout, home
from ckptdoctor.model import MIN_AGE as MIN_AGE
from ckptdoctor.model import Action, Checkpoint, Entry, Plan, PlanItem, Run, Status
from ckptdoctor.places import DEEPEST, run_root
from ckptdoctor.quoting import shell_word
from ckptdoctor.readers.files import ends_unchecked
from ckptdoctor.units import CLOCK_DRIFT, ahead, duration

Contents = tuple[tuple[str, float, int], ...]
"""The files inside a folder: (os path, mtime, size)."""


class PolicyError(InvalidValue):
    """A policy that cannot be applied (empty, or keep-best without metric values)."""


@dataclass(frozen=True)
class PruneSettings:
    """What a prune is asked for, as ``[tool.ckptdoctor.prune]``, the command line or the Python
    API gives it: each None was not given (:meth:`over` lays one source over another). Checked
    here, once, whoever builds it: PolicyError names the key and the value it cannot use."""

    keep_last: int | None = None
    keep_best: int | None = None
    metric: str | None = None
    mode: str | None = None
    keep_every: int | None = None
    keep_within: str | None = None
    """A duration (``7d``), as given."""
    keep: tuple[int, ...] | None = None
    min_age: str | None = None
    metrics_file: str | None = None
    verify: bool | None = None
    max_runs: int | None = None
    abort_uploads: str | None = None

    def __post_init__(self) -> None:
        for key, least in (("keep-last", 0), ("keep-best", 0), ("keep-every", 0), ("max-runs", 1)):  # a count of 0 keeps none by its rule
            value = getattr(self, key.replace("-", "_"))
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < least):
                raise PolicyError(f"{key} must be a whole number of at least {least}, not {value!r}")
        if self.metrics_file is not None and not isinstance(self.metrics_file, str):
            raise PolicyError("metrics-file must be a path")
        if self.keep is not None and (not isinstance(self.keep, tuple) or not all(isinstance(i, int) for i in self.keep)):
            raise PolicyError("keep must be a list of checkpoint indices")
        if self.verify is not None and not isinstance(self.verify, bool):
            raise PolicyError(f"verify must be true or false, not {self.verify!r}")
        for key in ("metric", "mode", "keep-within", "min-age", "abort-uploads"):
            value = getattr(self, key.replace("-", "_"))
            if value is not None and not isinstance(value, str):
                raise PolicyError(f"{key} must be text, not {value!r}")
        for key in ("keep-within", "min-age", "abort-uploads"):
            if (value := getattr(self, key.replace("-", "_"))) is not None:
                try:
                    parse_duration(value)
                except InvalidValue as error:
                    raise PolicyError(f"{key}: {error}") from error
        if self.mode is not None and self.mode not in ("min", "max"):
            raise PolicyError(f"mode must be min or max, not {self.mode!r}")

    @classmethod
    def read(cls, table: Mapping[str, object]) -> PruneSettings:
        """The settings of a ``[tool.ckptdoctor.prune]`` table (its keys spelt as there): a
        duration may be a number of seconds, and ``keep`` a list."""
        values = {key.replace("-", "_"): value for key, value in table.items()}
        for key in ("keep_within", "min_age", "abort_uploads"):
            if isinstance(values.get(key), int | float) and not isinstance(values.get(key), bool):
                values[key] = str(values[key])
        if isinstance(values.get("keep"), list):
            values["keep"] = tuple(values["keep"])  # type: ignore[arg-type]
        return cls(**values)  # type: ignore[arg-type]

    def over(self, base: PruneSettings) -> PruneSettings:
        """These settings, with ``base``'s where these give none (the command line over the file)."""
        given = {field.name: getattr(self, field.name) for field in fields(self) if getattr(self, field.name) is not None}
        return replace(base, **given)


@dataclass(frozen=True)
class Policy:
    """Which checkpoints to keep; ``prune`` deletes the rest (never what an invariant keeps)."""

    keep_last: int = 0
    """The N newest complete checkpoints."""
    keep_best: int = 0
    """The N best by ``metric`` (lowest with ``mode`` min, highest with max)."""
    metric: str | None = None
    mode: str = "min"
    keep_every: int = 0
    """Checkpoints whose index is a multiple of this."""
    keep_within: float = 0.0
    """Seconds back from now (the store's clock for a bucket), never from the newest file's time:
    one file dated in the future would empty the window."""
    keep: frozenset[int] = frozenset()
    """Pinned indices."""
    min_age: float = MIN_AGE

    @property
    def empty(self) -> bool:
        """No rule keeps anything: every checkpoint the invariants do not keep would go."""
        return not (self.keep_last or self.keep_best or self.keep_every or self.keep_within or self.keep)

    def check(self, discarding: bool = False) -> None:
        """Raise PolicyError where the policy cannot be used; an empty one only ``discarding`` a
        killed prune's journal, which then plans nothing."""
        if self.empty and not discarding:
            raise PolicyError(
                "an empty policy would delete every checkpoint the invariants do not keep: give at least one of "
                "--keep-last, --keep-best, --keep-every, --keep-within or --keep"
            )
        if min(self.keep_last, self.keep_best, self.keep_every) < 0 or self.keep_within < 0 or self.min_age < 0:
            raise PolicyError("retention counts and durations cannot be negative")
        if self.keep_best and not self.metric:
            raise PolicyError("--keep-best needs --metric NAME")
        if self.mode not in ("min", "max"):
            raise PolicyError(f"--mode must be min or max, not {self.mode!r}")

    def describe(self, unit: str) -> str:
        parts = []
        if self.keep_last:
            parts.append(f"the last {self.keep_last} complete {unit}s" if self.keep_last != 1 else f"the last complete {unit}")
        if self.keep_best:
            parts.append(f"the best {self.keep_best} by {self.metric} ({'lowest' if self.mode == 'min' else 'highest'})")
        if self.keep_every:
            parts.append(f"every {unit} divisible by {self.keep_every}")
        if self.keep_within:
            parts.append(f"everything saved in the last {duration(self.keep_within)}")
        if self.keep:
            parts.append(f"{unit}{'s' if len(self.keep) != 1 else ''} {', '.join(str(i) for i in sorted(self.keep))}")
        return "keep " + "; ".join(parts)


@dataclass(frozen=True)
class Circumstances:
    """What retention needs to know about the world, gathered by the caller."""

    now: float
    metrics: Mapping[int, float] = field(default_factory=dict)
    """Metric value per checkpoint index (``--keep-best``)."""
    open_by: Mapping[str, int | str] = field(default_factory=dict)
    """Files (OS paths) a live process holds open, with its pid; or objects (URLs) a multipart
    upload is still writing, with what that upload is."""
    inside: Mapping[str, Contents] = field(default_factory=dict)
    """Every file inside each folder of the run (by the folder's os path), claimed by a layout or
    not: moving or deleting the folder takes them all, so they all count for --min-age and open
    files."""
    not_whole: tuple[int, ...] = ()
    """Checkpoints a header read took for complete and a whole read did not (``prune --verify``, or
    the read ``unproven`` asks for): the resume point is the newest that reads whole, and says so."""
    too_deep: frozenset[str] = frozenset()
    """Folders of the run (os paths) whose trees go deeper than ``places.DEEPEST``: left as they are."""


def plan(run: Run, layout: Layout, policy: Policy, circumstances: Circumstances) -> Plan:
    """Keep or delete each checkpoint of ``run``, with the reasons; raises PolicyError."""
    policy.check()
    if policy.keep_best and not circumstances.metrics:
        raise PolicyError(f"no values of {policy.metric} were found for {run.path}: --keep-best cannot rank its checkpoints")
    unit = run.unit.value
    reasons: dict[int, list[str]] = {c.index: [] for c in run.checkpoints}
    resume = run.resume
    if resume is not None:
        reasons[resume.index].append("resume point (newest complete)")
        newer = [index for index in circumstances.not_whole if index > resume.index]
        if newer:
            one = len(newer) == 1
            reasons[resume.index].append(
                f"the newest that reads whole ({unit}{'' if one else 's'} {', '.join(map(str, newer))} after it do{'es' if one else ''} not: "
                "`ckptdoctor verify` says why)"
            )
    for pointer in layout.pointers(run):
        if pointer.number in reasons:
            reasons[pointer.number].append(f"named by {pointer.meaning}")
    for checkpoint in run.checkpoints:
        if (why := layout.left_in_place(checkpoint)) is not None:
            reasons[checkpoint.index].append(why)
    saved, sizes, tangled = measure(run, circumstances)
    depends = {c.index for c in run.resume_depends_on}
    for checkpoint in run.checkpoints:
        if checkpoint.index in depends:
            reasons[checkpoint.index].append(DEPENDS)
        elif checkpoint.status is Status.ARCHIVED:
            if resume is None or checkpoint.index > resume.index:
                reasons[checkpoint.index].append(RESTORE_FIRST)
        elif checkpoint.status is not Status.COMPLETE:
            if resume is not None and checkpoint.index > resume.index:
                reasons[checkpoint.index].append(
                    f"{checkpoint.status.value} and newer than the resume point: may be in progress (see repair)"
                )
            elif resume is None:
                reasons[checkpoint.index].append(f"{checkpoint.status.value}, and no complete {unit} exists: left to repair")
        reasons[checkpoint.index] += held_back(checkpoint, saved[checkpoint.index], circumstances, policy.min_age, deleting=True)
    _apply_policy(run, policy, circumstances, reasons, saved)
    _keep_link_targets(run, reasons, tangled)
    for checkpoint in run.checkpoints:  # after the policy: a skip is what it would have deleted
        if checkpoint.shut:
            reasons[checkpoint.index].append(SHUT if reasons[checkpoint.index] else SKIPPED)
    items = tuple(_item(c, reasons[c.index], sizes[c.index]) for c in run.checkpoints)
    freed = _freed(run, items, sizes, tangled, circumstances.inside)
    return Plan(run.path, run_root(run), home(run), items, freed, policy.describe(unit))


def unproven(run: Run, planned: Plan) -> bool:
    """Whether ``planned`` deletes a complete checkpoint of ``run`` and keeps none whose files a
    header read proves whole (each of a format whose end it checks): then only a whole read of the
    newest it keeps tells whether the run is left a checkpoint that loads (a legacy ``torch.save``
    file cut in half looks complete to ``inspect``)."""
    deleted = {item.number for item in planned.items if item.action is Action.DELETE}
    complete = [c for c in run.checkpoints if c.status is Status.COMPLETE]
    if not any(c.index in deleted for c in complete):
        return False
    unchecked = ends_unchecked()
    return not any(c.index not in deleted and all(f.report.format not in unchecked for f in c.files) for c in complete)


SHUT = "this user cannot read it: never deleted or moved"
SKIPPED = f"{SHUT}: skipped (CKD215 says who can)"
"""The reason of an item the policy would have deleted but this user cannot read: a prune that
skips one exits 1 (``skipped``)."""
DEPENDS = "the resume point depends on it"
RESTORE_FIRST = "archived, newer than the resume point: restore it to resume from it (CKD217); never deleted or moved"
"""The reason that keeps an archived checkpoint a resume could go on from, once restored: ``prune``
and ``repair`` both leave it."""


def skipped(plan: Plan) -> tuple[PlanItem, ...]:
    """The items of ``plan`` kept only because this user cannot read them."""
    return tuple(item for item in plan.items if SKIPPED in item.reasons)


class Measured(NamedTuple):
    saved: dict[int, float]
    """When each checkpoint was last written (its folder's contents included)."""
    sizes: dict[int, int]
    """Its bytes, each inode once."""
    tangled: set[int]
    """Checkpoints with a symlink or a hard-linked file: their bytes may be shared."""


def measure(run: Run, circumstances: Circumstances) -> Measured:
    """When each checkpoint was last written, its bytes, and whether they may be shared."""
    sizes: dict[int, int] = {}
    saved: dict[int, float] = {}
    tangled: set[int] = set()
    for checkpoint in run.checkpoints:  # one pass over the files: big runs have 100,000s
        saved[checkpoint.index], sizes[checkpoint.index], shared = _measure(checkpoint)
        if shared:
            tangled.add(checkpoint.index)
    for checkpoint in run.checkpoints:
        if checkpoint.folder is not None and checkpoint.folder.os_path in circumstances.inside:
            contents = circumstances.inside[checkpoint.folder.os_path]
            saved[checkpoint.index] = max([saved[checkpoint.index], *(mtime for _, mtime, _ in contents)])
    return Measured(saved, sizes, tangled)


def held_back(checkpoint: Checkpoint, saved: float, circumstances: Circumstances, min_age: float, *, deleting: bool = False) -> list[str]:
    """Why no command may touch ``checkpoint`` now, whatever it is asked: a file was written
    within ``min_age`` (the save may still be going on), a file is dated in the future (its age is
    not known: a repair, which can be undone, moves it with --min-age 0; ``deleting`` never), a
    live process holds one open, or its folders nest deeper than ``places.DEEPEST``."""
    deep = (
        [_too_deep(checkpoint.folder.path)] if checkpoint.folder is not None and checkpoint.folder.os_path in circumstances.too_deep else []
    )
    recent = min_age > 0 and circumstances.now - saved < min_age
    if not circumstances.open_by and not (checkpoint.files and (recent or (deleting and ahead(saved, circumstances.now)))):
        return deep  # the common case, without building the list of paths: big runs ask 100,000s of times
    paths = [f.entry.os_path for f in checkpoint.files] + [p for p, _, _ in contents_of(checkpoint.folder, circumstances)]
    return deep + _held(paths, saved if checkpoint.files else None, circumstances, min_age, deleting)


def _too_deep(path: str) -> str:
    return f"holds folders nested more than {DEEPEST} levels deep: left as it is (`rm -rf {shell_word(path)}` deletes it by hand)"


def entry_held_back(entry: Entry, circumstances: Circumstances, min_age: float) -> list[str]:
    """``held_back`` for one entry outside every checkpoint (a staging folder, a pointer)."""
    contents = circumstances.inside.get(entry.os_path, ())
    newest = max([entry.mtime, *(mtime for _, mtime, _ in contents)])
    deep = [_too_deep(entry.path)] if entry.os_path in circumstances.too_deep else []
    return deep + _held([entry.os_path, *(path for path, _, _ in contents)], newest, circumstances, min_age)


def _held(paths: list[str], saved: float | None, circumstances: Circumstances, min_age: float, deleting: bool = False) -> list[str]:
    reasons = []
    age = circumstances.now - saved if saved is not None else None
    skew = ahead(saved, circumstances.now) if saved is not None else 0.0
    if skew and deleting:
        # a clock ahead of this one's stamped it: how long ago it was written is not known, and a
        # delete cannot be undone, so --min-age 0 does not reach it
        reasons.append(
            f"dated {duration(skew)} in the future (another machine's clock? CKD214): its age is not known, so no prune deletes it "
            "(`touch` its files once the clock is right)"
        )
    elif skew and min_age > 0:
        reasons.append(
            f"dated {duration(skew)} in the future (another machine's clock? CKD214): whether it is still being written cannot be told from its time (--min-age 0 acts on it)"
        )
    elif age is not None and min_age > 0 and age < 0:  # ahead, but within the drift clocks are allowed
        reasons.append(f"dated {duration(-age)} ahead of this machine's clock {_by_min_age(min_age)}")
    elif age is not None and min_age > 0 and age < min_age:
        reasons.append(f"modified {duration(age)} ago {_by_min_age(min_age)}")
    holder = next((circumstances.open_by[p] for p in paths if p in circumstances.open_by), None)
    if isinstance(holder, int):
        reasons.append(f"open in process {holder}")
    elif holder is not None:
        reasons.append(holder)
    return reasons


def _by_min_age(min_age: float) -> str:
    return f"(--min-age {duration(min_age)})"


@dataclass(frozen=True)
class Spared:
    """What a plan leaves alone only for --min-age or for a live process holding a file, and
    would act on otherwise: in a crash's first minutes its fixes meet both, and say so."""

    young: tuple[PlanItem, ...]
    """Left for --min-age alone: the same command with --min-age 0 acts on them."""
    held: tuple[tuple[PlanItem, int | str], ...]
    """Left for a live process holding one of their files: its pid (or why none can be told)."""
    newest: float
    """When the newest of ``young`` was written (0 with none)."""


Replan = Callable[[float, Circumstances], Plan]
"""The same plan at another --min-age, in another world (``spared`` asks how it changes)."""


def spared(planned: Plan, replan: Replan, circumstances: Circumstances, min_age: float, acts_on: tuple[Action, ...]) -> Spared | None:
    """What ``planned`` leaves only for ``min_age`` or for a process holding a file: what the plan
    at --min-age 0 acts on and it does not, then what that one acts on once no process holds
    anything. None where nothing is spared so (the common case, planned once)."""
    said = _by_min_age(min_age)
    aged = min_age > 0 and any(said in why or "--min-age 0" in why for item in planned.items for why in item.reasons)
    if not aged and not circumstances.open_by:
        return None
    bare = replan(0.0, circumstances) if aged else planned
    young = _gained(planned, bare, acts_on)
    held: tuple[tuple[PlanItem, int | str], ...] = ()
    if circumstances.open_by:
        unheld = _gained(bare, replan(0.0, replace(circumstances, open_by={})), acts_on)
        held = tuple((item, holder) for item in unheld if (holder := _holder(item, circumstances)) is not None)
    if not young and not held:
        return None
    return Spared(young, held, max((_written(item, circumstances) for item in young), default=0.0))


def _gained(planned: Plan, other: Plan, acts_on: tuple[Action, ...]) -> tuple[PlanItem, ...]:
    """The items ``other`` acts on that ``planned`` does not (by action and what they touch)."""
    acting = {(item.action, item.paths) for item in planned.items if item.action in acts_on}
    return tuple(item for item in other.items if item.action in acts_on and (item.action, item.paths) not in acting)


def _touched(item: PlanItem, circumstances: Circumstances) -> list[tuple[str, float]]:
    """(os path, mtime) of everything ``item`` touches, its folders' contents included."""
    found = [(entry.os_path, entry.mtime) for entry in item.entries]
    return found + [(path, mtime) for entry in item.entries for path, mtime, _ in contents_of(entry, circumstances)]


def _holder(item: PlanItem, circumstances: Circumstances) -> int | str | None:
    return next((circumstances.open_by[path] for path, _ in _touched(item, circumstances) if path in circumstances.open_by), None)


def _written(item: PlanItem, circumstances: Circumstances) -> float:
    return max((mtime for _, mtime in _touched(item, circumstances)), default=0.0)


def spared_notes(run: str, unit: str, spared: Spared, min_age: float, now: float, verb: str, at_min_age_0: str) -> list[str]:
    """What ``spared`` leaves, why, and the command that acts on it now, or when one will:
    ``verb`` is what the command does to them (``deletes``), ``at_min_age_0`` the same command
    with --min-age 0."""
    notes = []
    if spared.young:
        one = len(spared.young) == 1
        age, wait = max(0.0, now - spared.newest), max(0.0, spared.newest + min_age - now)
        notes.append(
            f"{run}: {_named(spared.young, unit)} {'is' if one else 'are'} younger than --min-age {duration(min_age)} "
            f"(the newest written {duration(age)} ago), so {'it is' if one else 'they are'} left as {'it is' if one else 'they are'}: "
            f"no live process holds {'its' if one else 'their'} files, so if no job is saving here, `{at_min_age_0}` {verb} "
            f"{'it' if one else 'them'} now; without --min-age 0, the same command does after {_clock(now + wait)} (in {duration(wait)})."
        )
    for holder in dict.fromkeys(holder for _, holder in spared.held):
        items = tuple(item for item, held in spared.held if held == holder)
        one = len(items) == 1
        it, left = ("it", "is left as it is") if one else ("them", "are left as they are")
        if isinstance(holder, int):
            why = f"because a file of {'it' if one else 'theirs'} is open in process {holder}: nothing acts on {it} while that process runs"
            after = "once it has ended"
        else:  # an upload still arriving, or a process table that cannot be read
            why, after = f"({holder})", "once that is no longer so"
        notes.append(f"{run}: {_named(items, unit)} {left} {why}; {after}, `{at_min_age_0}` {verb} {it}.")
    return notes


def _named(items: tuple[PlanItem, ...], unit: str) -> str:
    """``epochs 1, 2 and 5``, ``epoch 5``, or the names of what belongs to no checkpoint."""
    numbers = sorted({item.number for item in items if item.number is not None})
    names = [entry.name for item in items if item.number is None for entry in item.entries]
    said = [f"{unit} {numbers[0]}" if len(numbers) == 1 else f"{unit}s {', '.join(map(str, numbers))}"] if numbers else []
    return " and ".join(said + names)


def _clock(when: float) -> str:
    """``04:52 UTC``, with the date where it is not today's."""
    shown = time.gmtime(when)
    return time.strftime("%H:%M UTC" if shown[:3] == time.gmtime()[:3] else "%Y-%m-%d %H:%M UTC", shown)


def contents_of(folder: Entry | None, circumstances: Circumstances) -> Contents:
    return circumstances.inside.get(folder.os_path, ()) if folder is not None else ()


def _keep_link_targets(run: Run, reasons: dict[int, list[str]], tangled: set[int]) -> None:
    """A kept checkpoint whose file is a symlink into another checkpoint keeps that one too
    (deleting it would leave the kept one dangling); followed until nothing changes. Only
    ``tangled`` checkpoints (see ``measure``) hold symlinks."""
    links = [
        (checkpoint.index, file)
        for checkpoint in run.checkpoints
        if checkpoint.index in tangled
        for file in checkpoint.files
        if file.entry.is_symlink and file.entry.link
    ]
    if not links:
        return
    owner: dict[str, int] = {}
    for checkpoint in run.checkpoints:
        if checkpoint.folder is not None:
            owner[os.path.abspath(checkpoint.folder.os_path)] = checkpoint.index
        for file in checkpoint.files:
            owner[os.path.abspath(file.entry.os_path)] = checkpoint.index
    changed = True
    while changed:
        changed = False
        for index, file in links:
            if not reasons[index]:
                continue
            target = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(file.entry.os_path)), str(file.entry.link)))
            held = next((owner[p] for p in (target, *_parents(target)) if p in owner), None)
            if held is not None and held != index and not reasons[held]:
                reasons[held].append(f"holds the target of {file.name}, a symlink in kept {run.unit.value} {index}")
                changed = True


def _parents(path: str) -> list[str]:
    parents = []
    while (parent := os.path.dirname(path)) != path:
        parents.append(parent)
        path = parent
    return parents


def _apply_policy(run: Run, policy: Policy, circumstances: Circumstances, reasons: dict[int, list[str]], saved: dict[int, float]) -> None:
    complete = [c for c in run.checkpoints if c.status is Status.COMPLETE]
    for rank, checkpoint in enumerate(reversed(complete[-policy.keep_last :] if policy.keep_last else []), 1):
        reasons[checkpoint.index].append(f"keep-last #{rank}")
    if policy.keep_best:
        ranked = sorted(
            (c for c in complete if c.index in circumstances.metrics and not math.isnan(circumstances.metrics[c.index])),
            key=lambda c: circumstances.metrics[c.index] * (1 if policy.mode == "min" else -1),
        )
        for rank, checkpoint in enumerate(ranked[: policy.keep_best], 1):
            reasons[checkpoint.index].append(f"keep-best #{rank} ({policy.metric} {circumstances.metrics[checkpoint.index]:g})")
    if policy.keep_every:
        reason = f"keep-every {policy.keep_every}"
        for checkpoint in run.checkpoints:
            if checkpoint.index % policy.keep_every == 0:
                reasons[checkpoint.index].append(reason)
    if policy.keep_within:  # back from now: a time in the future is no save's, and keeps its checkpoint for itself
        since, until = circumstances.now - policy.keep_within, circumstances.now + CLOCK_DRIFT
        reason = f"keep-within {duration(policy.keep_within)}"
        for index, when in saved.items():
            if since <= when <= until:
                reasons[index].append(reason)
    for index in policy.keep & reasons.keys():
        reasons[index].append("pinned (--keep)")


_NO_RULE = ("matches no keep rule",)


def _item(checkpoint: Checkpoint, reasons: list[str], size: int) -> PlanItem:
    entries = targets(checkpoint)
    if reasons:
        return PlanItem(checkpoint.index, Action.KEEP, tuple(reasons), entries, size)
    why = _NO_RULE
    if checkpoint.status is Status.ARCHIVED:  # the user's policy deletes old checkpoints, archived or not
        why = ("archived (CKD217), older than the resume point: matches no keep rule",)
    elif checkpoint.status is not Status.COMPLETE:
        why = (f"{checkpoint.status.value} and older than the resume point: it can never be resumed",)
    return PlanItem(checkpoint.index, Action.DELETE, why, entries, size)


def targets(checkpoint: Checkpoint) -> tuple[Entry, ...]:
    """What deleting a checkpoint removes: its folder, or its own files (a symlink as the link)."""
    if checkpoint.folder is not None:
        return (checkpoint.folder,)
    return tuple([f[0] for f in checkpoint.files])  # f.entry, read by position: called per checkpoint


def _freed(run: Run, items: tuple[PlanItem, ...], sizes: dict[int, int], tangled: set[int], inside: Mapping[str, Contents]) -> int:
    """Bytes the deletions free: each file once (hard links share an inode), none that a kept
    checkpoint also holds, and nothing for a symlink (the link goes, its target stays)."""
    deleted = {item.number for item in items if item.action is Action.DELETE}
    doomed: dict[tuple[int, int] | str, int] = {}
    names: dict[tuple[int, int] | str, list[int]] = {}  # per inode: [links found deleted, st_nlink]
    alone = 0  # bytes of deleted checkpoints that can share none: no symlink, no hard link
    kept: list[Entry] = []
    for checkpoint in run.checkpoints:
        if checkpoint.index in deleted and checkpoint.index not in tangled:
            alone += sizes[checkpoint.index]
        elif checkpoint.index in deleted:
            for file in checkpoint.files:
                _, _, os_path, size, is_dir, is_symlink, _, inode, _, _, links, _ = file[0]
                if not (is_symlink or is_dir):
                    doomed[inode or os_path] = size
                    names.setdefault(inode or os_path, [0, links])[0] += 1
        if (
            checkpoint.index in deleted and checkpoint.folder is not None and checkpoint.folder.os_path in inside
        ):  # what else the folder holds
            claimed = {file.entry.os_path for file in checkpoint.files}
            doomed.update((path, size) for path, _, size in inside[checkpoint.folder.os_path] if path not in claimed)
        if checkpoint.index not in deleted:
            kept.extend(file.entry for file in checkpoint.files)
    kept += [file.entry for file in run.loose_files] + list(run.other_files)
    for entry in kept:  # few: what a kept checkpoint (or a file beside them) holds is not freed
        if entry.inode is not None:
            doomed.pop(entry.inode, None)
    for key, (deleted_links, all_links) in names.items():  # a link left elsewhere (outside the run) keeps the bytes
        if deleted_links < all_links:
            doomed.pop(key, None)
    return alone + sum(doomed.values())


def _measure(checkpoint: Checkpoint) -> tuple[float, int, bool]:
    """When the checkpoint's newest file was written (0 with no files), its bytes (each inode
    once, as ``Checkpoint.bytes`` counts them), and whether any may be shared with another."""
    newest = 0.0
    total = 0
    shared = False
    for file in checkpoint.files:
        # unpacked rather than read by name: a plan of a big run passes here 100,000s of times
        _, _, _, size, is_dir, is_symlink, _, _, mtime, _, links, _ = file[0]
        if mtime > newest:
            newest = mtime
        if is_symlink or is_dir or links > 1:
            shared = True
        total += size
    if shared:  # a hard link or a symlink may repeat an inode: count each once
        total = checkpoint.bytes
    return newest, total, shared


def parse_duration(text: str) -> float:
    """``7d``, ``36h``, ``90min``, ``45s`` or plain seconds -> seconds; InvalidValue (a ValueError) otherwise."""
    text = text.strip().lower()
    for suffix, size in (("min", 60), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if text.endswith(suffix) and text[: -len(suffix)].replace(".", "", 1).isdigit():
            return float(text[: -len(suffix)]) * size
    if text.replace(".", "", 1).isdigit():
        return float(text)
    raise InvalidValue(f"not a duration: {text!r} (use e.g. 7d, 36h, 90min)")
