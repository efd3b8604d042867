"""What a checkpoint file holds, as the layouts judge it: what a framework's own save code
pickles (``OwnObjects``), the roles a bundle's keys show, and reading a batch of files at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from ckptdoctor.bundles import OPTIMIZER_STATE, ROLE_KEYS
from ckptdoctor.model import TOP_LEVEL_TENSORS, Entry, FileIssue, FileReport, Problem, Rebuilt, Role, Severity
from ckptdoctor.parallel import map_chunks
from ckptdoctor.readers.files import HeaderReads, ReadAhead
from ckptdoctor.readers.trust import Trusted


@dataclasses.dataclass(frozen=True)
class OwnObjects:
    """What a framework's own save code pickles beyond torch's ``weights_only`` set, and how its
    own loader loads its files back, both read from the framework's source. In a run of its
    layout, a file whose pickles need nothing more is loaded as the framework wrote it: CKD402
    (info, or a warning where the resume needs a step of the user's, which ``loader`` names),
    never CKD401. Its classes are vouched for only as the reader saw them rebuilt (``Rebuilt``:
    plain objects, enum members, lookups of their own methods); a pickle that uses them any other
    way, or imports anything else, stays unsafe, and so do they in any other framework's run."""

    loader: str = ""
    """How the framework's own loader loads its files, said in the finding; empty: it vouches
    for nothing."""
    allows: frozenset[str] = frozenset()
    """Harmless globals (the readers' ``KNOWN_BENIGN``) that its loader allows by name (timm
    passes ``argparse.Namespace`` to ``safe_globals``)."""
    unrestricted: bool = False
    """Its loader passes ``weights_only=False`` (or the resume must, as ``loader`` says): every
    harmless global loads, and whatever else a file holds runs, which CKD401 then says too."""
    classes: frozenset[str] = frozenset()
    """Its own classes its save code pickles as plain objects: ``cls.__new__(cls)``, then their
    fields set (each one's ``__new__`` and ``__setstate__`` read: they run nothing else)."""
    called_empty: frozenset[str] = frozenset()
    """Its own classes its save code pickles as ``cls()``, then their fields set (a
    ``SimpleNamespace``'s ``__reduce__``; each one's ``__init__`` and ``__new__`` read: with no
    argument they run nothing else)."""
    enums: frozenset[str] = frozenset()
    """Its own enums its save code pickles as members, ``cls(value)``."""
    methods: frozenset[str] = frozenset()
    """``class.name`` of its classes' own methods that its objects keep, pickled as
    ``getattr(cls, name)`` lookups (mmengine's ``HistoryBuffer`` keeps ``min``, ``max``...)."""
    kept: frozenset[str] = frozenset()
    """Globals its save code pickles as bare values, referenced, not rebuilt (OmegaConf keeps
    ``typing.Any`` as a node's type): vouched for however the pickle uses them, so only names
    whose every use is harmless (``typing.Any`` cannot be called)."""
    as_written: bool = True
    """Its loader loads them unaided (the finding is info); False: only after the step
    ``loader`` names (a warning: the resume fails without it)."""

    @property
    def runs_anything(self) -> bool:
        """Whether its loader, as the framework calls it, runs whatever a file holds."""
        return self.unrestricted and self.as_written

    def writes(self, rebuilt: Rebuilt, trusted: Trusted | None = None) -> bool:
        """Whether its save code writes exactly what ``rebuilt`` says the pickle does, the globals
        the user declared ``trusted`` aside (used any way, as torch's ``add_safe_globals``, where
        they are the user's own; a library's only where rebuilt, never called with arguments)."""
        declared = trusted.covers if trusted else lambda _name, called=False: False
        return (
            all(name in self.classes or declared(name) for name in rebuilt.instances)
            and all(name in self.enums or declared(name, called=True) for name in rebuilt.values)
            and rebuilt.methods <= self.methods
            and all(name in self.called_empty or declared(name) for name in rebuilt.called)
            and all(name in self.kept or declared(name, called=True) for name in rebuilt.other)
        )

    def vouched(self, report: FileReport, trusted: Trusted | None = None) -> FileReport:
        """``report`` as this framework's own loader sees the file: where its pickles are unsafe
        only because they rebuild this framework's own objects or globals the user declared
        ``trusted``, one CKD402 that names them with the harmless globals beside them, and
        harmless globals this loader allows, CKD402 that says how it loads them; every other
        issue as the reader found it (CKD401 stands where any pickle does more)."""
        if not report.issues or not (self.loader or (trusted and trusted.source)):
            return report
        unsafe = [i for i in report.issues if i.problem is Problem.UNSAFE_PICKLE]
        allowed = [i for i in report.issues if i.problem is Problem.NON_WEIGHTS and i.needs and self._allows(i.needs)]
        rebuilt = [i.rebuilt for i in unsafe if i.rebuilt is not None and self.writes(i.rebuilt, trusted)]
        if unsafe and len(rebuilt) == len(unsafe):
            names = tuple(dict.fromkeys(name for r in rebuilt for name in r.names))
            declared = tuple(name for name in names if trusted and trusted.covers(name))
            own = tuple(name for name in names if name not in declared)
            benign = tuple(dict.fromkeys(name for i in allowed for name in i.needs))
            said = [f"{', '.join(own)}, rebuilt only as the framework that wrote it does"] if own else []
            said += [f"{', '.join(declared)}, declared trusted in {trusted.source}"] if trusted and declared else []
            said += [f"the harmless {', '.join(benign)}"] if benign else []
            loaders = [self.loader] if own and self.loader else []
            listed = ", ".join((*names, *benign))
            loaders.append(f"torch.load(weights_only=True) loads it within torch.serialization.safe_globals([{listed}])")
            detail = f"{rebuilt[0].where} needs {'; and '.join(said)}; {' or '.join(loaders)}"
            # the framework's own loader loads its own objects unaided; a declared class needs the user's safe_globals
            unaided = self.as_written and (self.unrestricted or not declared)
            merged = FileIssue(
                Problem.NON_WEIGHTS, detail, (*names, *benign), severity=Severity.INFO if unaided and own else Severity.WARNING
            )
            return dataclasses.replace(report, issues=(merged, *(i for i in report.issues if i not in unsafe and i not in allowed)))
        if not self.loader:
            return report
        severity = Severity.INFO if self.as_written else Severity.WARNING
        if not allowed:
            return report
        issues = tuple(
            dataclasses.replace(i, detail=f"{i.detail}; {self.loader}", severity=severity) if i in allowed else i for i in report.issues
        )
        return dataclasses.replace(report, issues=issues)

    def _allows(self, needs: tuple[str, ...]) -> bool:
        return self.unrestricted or self.allows.issuperset(needs)


NO_OWN_OBJECTS = OwnObjects()


def confirmed_roles(roles: tuple[Role, ...], report: FileReport) -> tuple[Role, ...]:
    """A bundled file's roles as its top-level keys show them once they were read (``verify``,
    or the skim ``inspect`` does); before that (or for a file of one role) as its name says."""
    if len(roles) < 2:
        return roles
    found = roles_in(report)
    if found is None:
        return roles
    return found + tuple(role for role in roles if role not in (Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER))


def roles_in(report: FileReport) -> tuple[Role, ...] | None:
    """The roles a file's top-level keys show; None where they were not read or tell none."""
    if not report.keys_read or not report.keys:
        return None
    found = tuple(role for role, keys in ROLE_KEYS if any(key in report.keys for key in keys))
    if found:
        return found
    if all(key in report.keys for key in OPTIMIZER_STATE):
        return (Role.OPTIMIZER,)
    if report.tensors or report.fact(TOP_LEVEL_TENSORS) == str(len(report.keys)):
        return (Role.MODEL,)  # a bare state dict: its keys are tensor names
    return None


MARKER = FileReport("marker")
"""A marker file's report: its presence is what it says, its bytes are never read."""


def file_report(entry: Entry, probe: Callable[[Entry], FileReport]) -> FileReport:
    """``entry``'s report: a folder or a dangling link where a file belongs says so, unread."""
    if entry.is_dir:
        return FileReport("folder", (FileIssue(Problem.NOT_A_CHECKPOINT, "a folder where a checkpoint file belongs"),))
    if entry.dangling:
        return FileReport("symlink", (FileIssue(Problem.DANGLING, "a symlink whose target is missing"),))
    return probe(entry)


def probe_batch(batch: Sequence[Entry], probe: Callable[[Entry], FileReport]) -> Callable[[Entry], FileReport]:
    """Probe ``batch`` at once (on every core for big runs); a probe that serves from the results."""
    if isinstance(probe, ReadAhead):
        return probe  # read already: sending its reports between processes would cost more
    if isinstance(probe, HeaderReads):
        read = probe.many(batch)
    else:
        read = [r for chunk in map_chunks(lambda start, stop: [probe(entry) for entry in batch[start:stop]], len(batch)) for r in chunk]
    reports = dict(zip((entry.os_path for entry in batch), read, strict=True))

    def cached(entry: Entry) -> FileReport:
        report = reports.get(entry.os_path)
        if report is None:
            report = reports[entry.os_path] = probe(entry)
        return report

    return cached
