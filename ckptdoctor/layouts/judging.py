"""A checkpoint's verdict: its status and the roles it lacks, from its files' reports and what
the run's checkpoints need (worked out once per shape of checkpoint in a run).
"""

from __future__ import annotations

from collections.abc import Callable

from ckptdoctor.layouts.content import roles_in
from ckptdoctor.layouts.naming import temp_base
from ckptdoctor.model import Checkpoint, CheckpointFile, Entry, Problem, Role, Status, Zeroed

_ROLE_ORDER = {role: position for position, role in enumerate(Role)}
PARTIAL = frozenset(problem for problem in Problem if problem.status is Status.PARTIAL)
CORRUPT = frozenset(problem for problem in Problem if problem.status is Status.CORRUPT)
"""Problems that make a checkpoint no place to resume from (unsafe and NaN-filled files included):
each ``Problem`` says which status it gives."""
UNUSABLE = PARTIAL | CORRUPT
DENIED = frozenset(problem for problem in Problem if problem.status is Status.UNREADABLE)
ARCHIVED = frozenset(problem for problem in Problem if problem.status is Status.ARCHIVED)
UNKNOWN = DENIED | ARCHIVED
"""Problems that leave a file unknown, neither whole nor broken: this user may not read it, or no
one may before a restore."""


def checkpoint_of(
    index: int,
    files: tuple[CheckpointFile, ...],
    required: tuple[Role, ...],
    single: bool,
    folder: Entry | None = None,
    absent: tuple[str, ...] = (),
    advisory: frozenset[Role] = frozenset(),
    zeroed: tuple[Zeroed, ...] = (),
    whole_saves: Callable[[str], tuple[str, int] | None] | None = None,
    verdicts: Verdicts | None = None,
) -> Checkpoint:
    """The checkpoint ``files`` make, and its verdict. A run's checkpoints mostly repeat a few
    shapes (the same roles, with the same shared reports): ``verdicts``, kept for one run, holds
    each shape's verdict once it is worked out. A shape holds what the verdict depends on
    beyond the names, so only checkpoints whose names play no part are looked up there: none of
    their files is a staging file, and no two are whole saves of one index. ``whole_saves``: the
    layout's ``resaved`` where each of its files is a whole save (``Layout.whole_saves``)."""
    files = tuple(sorted(files, key=_file_order))
    staged = any(Role.TEMP in f.roles for f in files)
    several_saves = whole_saves if whole_saves is not None and sum(whole_save(f) for f in files) > 1 else None
    if verdicts is None or staged or several_saves is not None:
        return _judged(index, files, required, single, folder, absent, advisory, zeroed, staged, several_saves)
    # ids of reports the run's files hold alive: stable while ``verdicts`` is in use
    shape = (required, single, advisory, bool(absent), any(z.read_whole for z in zeroed), tuple((f.roles, id(f.report)) for f in files))
    verdict = verdicts.get(shape)
    if verdict is None:
        judged = _judged(index, files, required, single, folder, absent, advisory, zeroed, staged, several_saves)
        unread = tuple(_roles_unread(f) for f in files)
        verdict = verdicts[shape] = (judged.status, judged.missing, unread)
        return judged
    status, missing, unread = verdict
    roles_unread = tuple(f.name for f, skipped in zip(files, unread, strict=True) if skipped) if any(unread) else ()
    return Checkpoint(index, files, status, missing, absent, folder, roles_unread, zeroed)


Verdicts = dict[tuple[object, ...], tuple[Status, tuple[Role, ...], tuple[bool, ...]]]
"""Verdicts (status, missing roles, which files' roles are unread) by checkpoint shape, for one run."""


def _judged(
    index: int,
    files: tuple[CheckpointFile, ...],
    required: tuple[Role, ...],
    single: bool,
    folder: Entry | None,
    absent: tuple[str, ...],
    advisory: frozenset[Role],
    zeroed: tuple[Zeroed, ...],
    staged: bool,
    several_saves: Callable[[str], tuple[str, int] | None] | None,
) -> Checkpoint:
    counted = files
    if several_saves is not None:
        files, counted = _best_save_first(files, required, several_saves)
    present = {role for f in counted for role in f.roles}
    missing = () if single else tuple(role for role in required if role not in present)
    status = _status(files, counted, missing, absent, advisory, zeroed, staged)
    # only the saves that count tell the roles: a cut copy of another whole save tells nothing
    return Checkpoint(index, files, status, missing, absent, folder, tuple(f.name for f in counted if _roles_unread(f)), zeroed)


def _best_save_first(
    files: tuple[CheckpointFile, ...], required: tuple[Role, ...], resaved: Callable[[str], tuple[str, int] | None]
) -> tuple[tuple[CheckpointFile, ...], tuple[CheckpointFile, ...]]:
    """A checkpoint's files with the best of its whole saves first, and the files that count
    for its verdict: that save, and what is no save."""
    saves = [f for f in files if whole_save(f)]
    # each file that holds the model is a whole save of this index: the checkpoint is what the
    # best of them holds (of equals, the later save of one name), named first (the resume
    # names files[0]); the others are copies with findings of their own; what is no save (a
    # staging file, a progress record) counts as it is
    best = min(
        saves,
        key=lambda f: (
            bool(f.report.problems & UNUSABLE),
            -len(set(f.roles) & set(required)),
            -version(resaved, f.entry.name),
            f.entry.name,
        ),
    )
    files = (best, *(f for f in files if f is not best))
    return files, (best, *(f for f in files if not whole_save(f)))


def _status(
    files: tuple[CheckpointFile, ...],
    counted: tuple[CheckpointFile, ...],
    missing: tuple[Role, ...],
    absent: tuple[str, ...],
    advisory: frozenset[Role],
    zeroed: tuple[Zeroed, ...],
    staged: bool,
) -> Status:
    """A checkpoint's status, from the files that count for it (``counted``) and what it lacks."""
    # a staging file whose final name stands whole beside it is a leftover of an earlier (or a
    # repeated) save: its own finding (CKD202), not a checkpoint cut short
    whole = {f.entry.name for f in files if Role.TEMP not in f.roles} if staged else set()
    judged = [f for f in counted if (Role.TEMP not in f.roles or temp_base(f.entry.name) not in whole) and not advisory.issuperset(f.roles)]
    problems = {problem for f in judged if f.report.issues for problem in f.report.problems}
    if (staged and any(Role.TEMP in f.roles for f in judged)) or problems & PARTIAL:
        return Status.PARTIAL
    if problems & CORRUPT or any(z.read_whole for z in zeroed):
        # tensors read as zeros where the previous checkpoint held data: a resume would load them
        # as weights (the guess from a file's last 4 KiB only warns)
        return Status.CORRUPT
    if set(missing) - advisory or absent:
        return Status.INCOMPLETE
    if problems & DENIED:  # nothing else is wrong with it, and what this user may not read is unknown
        return Status.UNREADABLE
    if problems & ARCHIVED:  # nothing else is wrong with it, and what is archived is read only once restored
        return Status.ARCHIVED
    return Status.COMPLETE


def version(resaved: Callable[[str], tuple[str, int] | None], name: str) -> int:
    """The version the framework added to ``name`` because it was taken (``Layout.resaved``); 0 for none."""
    found = resaved(name)
    return found[1] if found is not None else 0


def whole_save(file: CheckpointFile) -> bool:
    """A file that is a save of its own where the framework's saves are whole (``whole_saves``)."""
    return Role.MODEL in file.roles and Role.TEMP not in file.roles


def _roles_unread(file: CheckpointFile) -> bool:
    """Whether ``file`` is bundled and only its name tells its roles."""
    return file.bundled and Role.POINTER not in file.roles and roles_in(file.report) is None


def _file_order(file: CheckpointFile) -> tuple[int, str]:
    """A checkpoint's files by role (the model first), then by name."""
    return _ROLE_ORDER[file.roles[0]], file.entry.name


def without_training_state(required: tuple[Role, ...]) -> tuple[Role, ...]:
    """What a checkpoint of a run that saves weights alone needs: no optimizer, no scheduler."""
    return tuple(role for role in required if role not in (Role.OPTIMIZER, Role.SCHEDULER))
