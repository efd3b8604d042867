"""What every check needs about the run it looks at, and how it words a finding."""

from __future__ import annotations

import bisect
import functools
import os
import posixpath
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, cast

from ckptdoctor.model import Checkpoint, CheckpointFile, FileReport, Finding, PointerKind, Problem, Role, Run, Severity
from ckptdoctor.places import MOVED_ASIDE, run_root
from ckptdoctor.quoting import shell_word
from ckptdoctor.rules.rule import BUCKET, OTHERWISE, Rule
from ckptdoctor.stores import urls

if TYPE_CHECKING:
    from ckptdoctor.layouts.registry import Layout

_DIGITS = re.compile(r"\d+")

RUNWAY = 3
"""Fewer saves than this left before the disk is full is CKD502 (``rules/disk.py``)."""


@dataclass(frozen=True)
class Thresholds:
    """Where size outliers start (configurable later through ``[tool.ckptdoctor]``)."""

    undersized: float = 0.5
    """A file below this fraction of its role's median is undersized (CKD208)."""
    oversized: float = 2.0
    """A file above this multiple of its role's median is oversized (CKD209)."""
    optimizer_margin: float = 1.5
    """Optimizer state may exceed its kind's usual ratio to the model by this factor."""
    min_peers: int = 3
    """Medians need at least this many files of a role."""


class Kind(NamedTuple):
    """Files of a run that share one report, their roles and their name prefix."""

    report: FileReport
    roles: tuple[Role, ...]
    prefix: str
    files: list[tuple[int, CheckpointFile]]
    """With their checkpoints' indexes, in the run's order."""


@dataclass(frozen=True)
class RunContext:
    run: Run
    layout: Layout
    thresholds: Thresholds = field(default_factory=Thresholds)
    memo: dict[str, object] = field(default_factory=dict, compare=False, hash=False)
    """What one family's checks work out once and share (each family keys its own entries)."""
    below: bool = False
    """Other runs lie, or may lie, in folders below this run's (see ``with_runs_below``)."""
    whole: bool = False
    """Its files were read whole (``verify``): what its findings saw, a ``repair`` sees only so."""
    now: float | None = None
    """The clock when the files were listed, which their times are judged by (CKD214); None: not known."""

    @functools.cached_property
    def advisory(self) -> Mapping[Role, str]:
        """The roles the run's framework resumes without, where the run is (``Layout.advisory_at``)."""
        return self.layout.advisory_at(self.run.path)

    @functools.cached_property
    def files(self) -> list[tuple[int, CheckpointFile]]:
        """Every file of every checkpoint with its index, in order: what most checks walk."""
        return [(c.index, f) for c in self.run.checkpoints for f in c.files]

    @functools.cached_property
    def by_report(self) -> list[tuple[FileReport, list[Kind]]]:
        """The checkpoints' files by the report that judged them, and under each report by roles
        and prefix: the reports of a big run's clean files are a few shared objects, so a check
        that asks about content, or about one kind of file, asks once per group, not per file.
        Reports, kinds and each kind's files come in the order of the run's files (``files``);
        a report's first kind holds its first file."""
        groups: dict[int, tuple[FileReport, list[Kind]]] = {}
        kinds: dict[tuple[object, ...], Kind] = {}
        for checkpoint in self.run.checkpoints:
            index = checkpoint.index
            for file in checkpoint.files:
                report, roles = file.report, file.roles
                key: tuple[object, ...] = (id(report), file.prefix)
                kind = kinds.get(key)
                # roles compared, not hashed: hashing each Role is a Python call, and a prefix
                # nearly always has one set of roles (looked up by value where it has more)
                if kind is not None and kind.roles != roles:
                    key = (id(report), file.prefix, roles)
                    kind = kinds.get(key)
                if kind is None:
                    kind = kinds[key] = Kind(report, roles, file.prefix, [])
                    group = groups.get(id(report))
                    if group is None:
                        group = groups[id(report)] = (report, [])
                    group[1].append(kind)
                kind.files.append((index, file))
        return list(groups.values())

    @functools.cached_property
    def problems(self) -> frozenset[Problem]:
        """Every problem a report of the checkpoints' files holds: asked of the few shared
        reports (``by_report``), so that a check of one problem skips a run that has none."""
        return frozenset(problem for report, _ in self.by_report if report.issues for problem in report.problems)

    def position(self, file: tuple[int, CheckpointFile]) -> tuple[int, int]:
        """Where one of the run's files (with its index) comes in ``files``: a sort key."""
        index, found = file
        before = 0
        for checkpoint in self._by_index[index]:
            if found in checkpoint.files:
                return index, before + checkpoint.files.index(found)
            before += len(checkpoint.files)
        raise ValueError(f"{found.path} is no file of {self.run.unit.value} {index}")

    @functools.cached_property
    def _by_index(self) -> dict[int, list[Checkpoint]]:
        """The run's checkpoints by index, in the run's order: two folders may carry one index
        (a DeepSpeed universal copy beside its source, Lightning's ``-v1`` save of a step again)."""
        by_index: dict[int, list[Checkpoint]] = defaultdict(list)
        for checkpoint in self.run.checkpoints:
            by_index[checkpoint.index].append(checkpoint)
        return by_index

    @property
    def fix_context(self) -> dict[str, str]:
        return dict(self._fix_context)

    @functools.cached_property
    def _fix_context(self) -> dict[str, str]:
        values = run_context(self.run, self.below or self.run.single_file)
        values["repair"] = "ckptdoctor repair --verify" if self.whole else "ckptdoctor repair"
        written = self.layout.repoint(None, self.run.resume) if self.run.resume is not None else None
        if written is not None and written.kind is PointerKind.TEXT:
            values["resume_pointer"] = shell_word(written.text)
        return values

    def finding(
        self,
        rule: Rule,
        message: str,
        *,
        index: int | None = None,
        path: str | None = None,
        severity: Severity | None = None,
        context: Mapping[str, str] | None = None,
        extra_fixes: tuple[str, ...] = (),
        case: str | None = None,
        moves: tuple[str, ...] = (),
    ) -> Finding:
        """The finding, its fixes worded for this run; ``moves``: the files its ``{quarantine}``
        moves aside (``path`` unless told)."""
        values = self.fix_context
        if index is not None:
            values["index"] = str(index)
        if path is not None:
            values["path"] = shell_word(path)
            values["name"] = path.rsplit("/", 1)[-1]
            quarantine = self._quarantine(moves or (path,), values["this_run"])
            if quarantine is not None:
                values["quarantine"] = quarantine
        values.update(context or {})
        return make_finding(rule, message, self.run.path, index, path, severity, values, self.layout.fix_keys, case, extra_fixes)

    def _quarantine(self, paths: tuple[str, ...], this_run: str) -> str | None:
        """How to move the files at ``paths`` aside: ``repair`` of their run where the repair
        moves them (the files of checkpoints newer than the resume point, leftovers of a save),
        else by hand into a folder no scan enters (files of a run with nothing to resume from,
        which repair refuses; a broken checkpoint older than the resume point, which it leaves to
        prune; stray or damaged files that belong to no checkpoint, or to no run at all): never a
        command that would act on more than these files' run. None where the framework manages
        the files itself (``Layout.left_in_place``): moving one aside changes what it resumes
        from, so no fix offers it."""
        if self._left_in_place.intersection(paths):
            return None
        moved_whole, moved_alone = self._moved_by_repair
        if (moved_whole | moved_alone).issuperset(paths) and self._found_by_a_scan(paths):
            whole = "it and the rest of its checkpoint" if moved_whole.issuperset(paths) else "it"
            repair = "ckptdoctor repair --verify" if self.whole else "ckptdoctor repair"
            return f"`{repair} {this_run}` moves {whole} into a quarantine folder (`ckptdoctor repair --undo {this_run}` puts it back)"
        aside = self._aside()
        moves: dict[str, list[str]] = {}
        for path in paths:  # each file keeps its place in the run: two files of one name never meet
            inside = posixpath.relpath(posixpath.dirname(path) or ".", self.run.path)
            moves.setdefault(aside if inside == "." or inside.startswith("..") else posixpath.join(aside, inside), []).append(path)
        there = " ".join(shell_word(folder) for folder in moves)
        away = " && ".join(f"mv -n -- {' '.join(map(shell_word, given))} {shell_word(folder)}/" for folder, given in moves.items())
        back = " && ".join(
            f"mv -n -- {' '.join(shell_word(posixpath.join(folder, posixpath.basename(p))) for p in given)} {shell_word(posixpath.dirname(given[0]) or '.')}/"
            for folder, given in moves.items()
        )
        what, it = ("this file", "it") if len(paths) == 1 else ("these files", "them")
        return f"`mkdir -p {there} && {away}` moves only {what} aside, where no scan looks (`{back}` puts {it} back)"

    @functools.cached_property
    def _moved_by_repair(self) -> tuple[frozenset[str], frozenset[str]]:
        """What ``repair`` moves (``planners/repair.plan``), once per run (a run with thousands
        of broken files words a fix for each): the files of whole checkpoints, those newer than
        the resume point, and files it moves alone, leftovers of a save; nothing where the run
        has no resume point (it refuses) and nothing of a broken checkpoint the framework manages."""
        resume = self.run.resume
        if resume is None:
            return frozenset(), frozenset()
        whole: set[str] = set()
        alone = {f.path for f in self.run.loose_files if f.leftover}
        newer = {id(c) for c in self.run.after_resume}
        for checkpoint in self.run.checkpoints:
            if checkpoint is resume:
                alone.update(f.path for f in checkpoint.files if Role.TEMP in f.roles)
            elif id(checkpoint) in newer:
                whole.update(f.path for f in checkpoint.files)
            else:
                alone.update(f.path for f in checkpoint.files if f.leftover)
        return frozenset(whole - self._left_in_place), frozenset(alone - self._left_in_place)

    @functools.cached_property
    def _left_in_place(self) -> frozenset[str]:
        """The files of checkpoints the framework manages itself, which ``repair`` and ``prune`` leave."""
        return frozenset(f.path for c in self.run.checkpoints if self.layout.left_in_place(c) is not None for f in c.files)

    def _found_by_a_scan(self, paths: tuple[str, ...]) -> bool:
        """Whether ``repair`` of the run's folder would find these files: a file named on its own
        is judged by its content, and where its name is none the layout claims, a scan of its
        folder passes it by."""
        return not self.run.single_file or all(self.layout.claim(posixpath.basename(path)) is not None for path in paths)

    def _aside(self) -> str:
        """Where files are moved aside by hand: in the run's folder, as ckptdoctor's own folder is,
        or beside it for a framework that reads every name in it (a folder there would break
        its resume, as ckptdoctor's own would)."""
        if not self.layout.reads_every_name:
            return posixpath.join(self.run.path, MOVED_ASIDE)
        parent = posixpath.normpath(posixpath.join(self.run.path, ".."))
        return posixpath.join(parent, MOVED_ASIDE, os.path.basename(os.path.abspath(self.run.path)))

    def sibling_name(self, role: Role, index: int) -> str | None:
        """The name a missing file of ``role`` would have at ``index``, from the nearest
        checkpoint that has one (the lower index on a tie)."""
        saved = self._named(role)
        position = bisect.bisect_left(saved, (index, ""))
        nearby = [saved[i] for i in (position - 1, position) if 0 <= i < len(saved)]
        if not nearby:
            return self.layout.file_name(role, index)
        found, name = min(nearby, key=lambda pair: abs(pair[0] - index))
        return renumber(name, found, index)

    def _named(self, role: Role) -> list[tuple[int, str]]:
        """(index, name) of the first plain file of ``role`` in each checkpoint, by index: a run
        with a thousand broken checkpoints asks for a thousand names."""
        key = f"named:{role.value}"
        if key not in self.memo:
            named = []
            for checkpoint in self.run.checkpoints:
                name = next((f.name for f in checkpoint.files_for(role) if not f.bundled and Role.TEMP not in f.roles), None)
                if name is not None:
                    named.append((checkpoint.index, name))
            self.memo[key] = named
        return cast("list[tuple[int, str]]", self.memo[key])


def run_context(run: Run, below: bool) -> dict[str, str]:
    """The placeholders a run fills in every fix (``GENERIC_CONTEXT`` says what each means):
    paths quoted for a shell where they need it, since fixes name them in commands to copy."""
    path = shell_word(run.path)
    values = {"run": path, "unit": run.unit.value, "this_run": f"--no-recurse {path}" if below else path}
    if run.resume is not None:
        values["resume"] = str(run.resume.index)
    return values


def with_runs_below(runs: Iterable[Run], unlisted: Iterable[str] = ()) -> frozenset[str]:
    """The paths of those ``runs`` that hold another run, or a folder that could not be listed,
    in a folder below theirs: ``ckptdoctor repair RUN`` of one would act on those runs too, so
    its fixes name it with ``--no-recurse``."""
    runs = list(runs)
    holding: set[str] = set()
    for folder in [_absolute(run_root(run)) for run in runs] + [_absolute(path) for path in unlisted]:
        parent = os.path.dirname(folder)
        while parent not in holding and parent != folder:
            holding.add(parent)
            folder, parent = parent, os.path.dirname(parent)
    return frozenset(run.path for run in runs if _absolute(run_root(run)) in holding)


def _absolute(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


def make_finding(
    rule: Rule,
    message: str,
    run: str | None,
    index: int | None = None,
    path: str | None = None,
    severity: Severity | None = None,
    context: Mapping[str, str] | None = None,
    frameworks: tuple[str, ...] = (),
    case: str | None = None,
    extra_fixes: tuple[str, ...] = (),
) -> Finding:
    """Every finding is made here: its fixes for ``case``, in the words of ``frameworks`` (a
    layout's ``fix_keys``) where they have their own, else in general words."""
    case, context = _in_store(rule, case, path or run, context)
    return Finding(
        code=rule.code,
        name=rule.name,
        severity=severity or rule.severity,
        run=run,
        index=index,
        path=path,
        message=message,
        fixes=extra_fixes + rule.fix_texts(context, frameworks, case),
    )


def _in_store(
    rule: Rule, case: str | None, where: str | None, context: Mapping[str, str] | None
) -> tuple[str | None, Mapping[str, str] | None]:
    """A finding of a rule with bucket fixes (where no other case of the rule was chosen: a file's
    format is no case of CKD211's): on an object or prefix in a bucket, the bucket fixes, with
    the bucket and the key to name in ``aws s3api``; anywhere else the others (a folder's mode,
    ``dmesg``)."""
    if not rule.has_case(BUCKET) or (case is not None and rule.has_case(case)):
        return case, context
    try:
        location = urls.parse(where, listed=True) if where is not None and urls.in_store(where) else None
    except urls.BadURL:
        location = None
    if location is None:
        return OTHERWISE, context
    return BUCKET, {"bucket": location.bucket, "object_key": shell_word(location.prefix), **(context or {})}


def renumber(name: str, old: int, new: int) -> str:
    """``optim-4.bpk`` at index 4 -> ``optim-5.bpk``; zero padding is kept."""
    for match in reversed(list(_DIGITS.finditer(name))):
        if int(match.group()) == old:
            digits = str(new).zfill(len(match.group()))
            return name[: match.start()] + digits + name[match.end() :]
    return name
