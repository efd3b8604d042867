"""The ``Executor`` of runs on a local disk: ``_confine``, ``_home``, ``_trash`` and
``_quarantine`` behind the one interface ``ckptdoctor.acting`` acts through. Each is called by its
name in ``ckptdoctor.actions``, the package's own interface to them."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ckptdoctor import actions
from ckptdoctor.actions import executor
from ckptdoctor.actions.executor import Acted, Inside, Machine, Said, World, deleted, finished, kept_paths
from ckptdoctor.model import Action, Entry, Plan, Role, Run, Seen
from ckptdoctor.places import DEEPEST, home_of, relative, run_root
from ckptdoctor.records import Moved, Pending, Quarantine
from ckptdoctor.units import counted, files_or_folders, size


@dataclass
class DiskExecutor:
    """Acts on local runs, asking ``machine`` (``executor.MACHINE`` by default) which files are
    held and what time it is."""

    machine: Machine | None = None
    noun = "entry"
    reads_metrics = True
    has_trash = True
    partial_undo = True

    @property
    def _machine(self) -> Machine:
        return self.machine or executor.MACHINE  # looked up now: a test may have put a fake one there

    def opened(self, held: contextlib.ExitStack, paths: Sequence[str], dry_run: bool) -> list[str]:
        held.enter_context(actions.anchored(paths))  # before the scan: what it finds is acted on through these
        # anyone who may read the run may preview it, though ckptdoctor's folder in it be shut to them
        return held.enter_context(actions.reading_only()) if dry_run else []

    def refusals(self, places: Sequence[tuple[str, str]], command: str) -> list[str]:
        return []

    def notes(self) -> list[str]:
        return []

    def ready(self, runs: Sequence[Run], dry_run: bool) -> None:
        if not dry_run:  # before ckptdoctor's own folder is made in it
            for run in runs:
                actions.confirm_run(run_root(run), (f.entry for c in run.checkpoints for f in c.files))

    def locked(self, home: str, shown: str, tell: Callable[[str], None]) -> contextlib.AbstractContextManager[None]:
        return actions.locked(home, shown)  # an flock ends with its process: nothing to take over or to tell

    def holder_now(self, home: str) -> str | None:
        return actions.holder_now(home)

    def strays(self, home: str) -> list[str]:
        return actions.strays(home)

    def world(self, run: Run, tell: Callable[[str], None] | None = None, noted: set[str] | None = None) -> World:
        """What is inside ``run``'s folders, and which of its files live processes hold open.
        What cannot be known is told (even under --quiet: a prune that could not check open
        files is never silent), once per command: ``noted`` holds what was said before."""
        inside, deep = folder_contents(run)
        # the scan's identities: a file replaced since has another, but is kept anyway, as changed since the plan
        entries = [f.entry for c in run.checkpoints for f in c.files] + [f.entry for f in run.loose_files]
        machine = self._machine
        busy, said = machine.processes(files_of(run, inside), {e.os_path: e.inode for e in entries if e.inode is not None}, noted)
        if said and tell is not None:
            tell(f"note: {said}")
        return World(machine.clock(), busy, inside, deep)

    def busy_now(self, run: Run) -> frozenset[str]:
        return frozenset(self.world(run).open_by)

    def changed_since_scan(self, root: str, entries: Sequence[Entry]) -> str | None:
        return actions.changed_since_scan(root, entries)

    def leftovers(self, home: str, remove: bool) -> tuple[list[str], list[str]]:
        return actions.leftovers(home, remove)

    def journals(self, root: str, home: str) -> list[Pending]:
        return actions.pending(root, home)

    def pending(self, run: Run, plan: Plan, busy: frozenset[str], tell: Callable[[str], None] | None = None) -> list[Pending]:
        return actions.pending(plan.root, plan.home, busy, kept_paths(plan))

    def discard(self, root: str, home: str) -> tuple[int, list[str]]:
        return actions.discard(root, home)

    def finish_interrupted(self, run: Run, plan: Plan) -> Acted:
        done = actions.finish_interrupted(plan.root, plan.home, self.busy_now(run), kept_paths(plan))
        paths = set(done.paths)
        said = finished(plan.run, len(done.paths), plan, lambda entry: relative(entry.os_path, plan.root) in paths)
        return Acted([said], list(done.problems))

    def delete(self, run: Run, plan: Plan, since: float) -> Acted:
        done = actions.delete(plan, since, self.busy_now(run), seen(run, plan.root))
        acted = Acted(problems=list(done.problems))
        if done.journal_free:
            acted.said.append(
                Said(
                    f"{plan.run}: the disk is too full for a journal: deleted in place, one checkpoint after the other, oldest first "
                    "(a kill leaves at worst one old checkpoint incomplete, which the next prune deletes)."
                )
            )
        folders = all(entry.is_dir for item in plan.acting(Action.DELETE) for entry in item.entries)
        what = files_or_folders(done.files, done.files if folders else 0) if done.files else None
        left = f"{counted(done.left, 'entry', 'entries')} written, opened or replaced" if done.left else None
        acted.said += deleted(plan.run, done.deleted, what, f"freed {size(done.freed_bytes)}", left)
        return acted

    def prune_notes(self, run: Run, plan: Plan, abort_uploads: float | None, dry_run: bool) -> list[str]:
        return []

    def chores(self, run: Run, abort_uploads: float | None) -> bool:
        return False

    def do_chores(self, run: Run, abort_uploads: float | None) -> Acted:
        return Acted()

    def sweep(self, home: str) -> None:
        actions.sweep(home)

    def close_repairs(self, root: str, home: str) -> tuple[list[str], list[str]]:
        return actions.close_repairs(root, home)

    def quarantine(self, run: Run, plan: Plan, since: float) -> Moved:
        return actions.quarantine(plan, since, self.busy_now(run), seen(run, plan.root))

    def quarantine_homes(self, path: str) -> list[str]:
        return [home_of(path, beside) for beside in (False, True) if os.path.isdir(os.path.join(home_of(path, beside), actions.QUARANTINE))]

    def quarantines(self, root: str, home: str) -> list[Quarantine]:
        return actions.quarantines(root, home)

    def restore(self, found: Quarantine, root: str) -> tuple[int, list[str]]:
        return actions.restore(found, root)


def seen(run: Run, root: str) -> Seen:
    """Every file of ``run`` as its scan saw it, by path in its folder (``root``)."""
    files = [f for c in run.checkpoints for f in c.files] + [*run.loose_files, *run.extra_files]
    return {relative(f.entry.os_path, root): f.entry for f in files if not f.entry.is_dir and not f.entry.is_symlink}


def folder_contents(run: Run) -> tuple[Inside, frozenset[str]]:
    """Every file inside each checkpoint folder and staging folder of ``run``, by the folder's
    os path: moving or deleting the folder takes them all (symlinked folders are not followed);
    and the folders whose trees go deeper than ``places.DEEPEST`` (walked no further: no command
    acts on them)."""
    folders = [c.folder for c in run.checkpoints if c.folder is not None]
    folders += [f.entry for f in run.loose_files if f.entry.is_dir and Role.TEMP in f.roles]
    inside: Inside = {}
    deep: set[str] = set()
    for entry in folders:
        if entry.is_symlink:
            continue
        found = []
        pending = [(entry.os_path, 0)]  # a stack, not os.walk's recursion: a tree may be thousands of levels deep
        while pending:
            folder, depth = pending.pop()
            if depth > DEEPEST:
                deep.add(entry.os_path)
                continue
            try:
                with os.scandir(folder) as listing:
                    items = list(listing)
            except OSError:
                continue
            for item in items:
                try:
                    info = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    pending.append((item.path, depth + 1))
                else:
                    found.append((item.path, info.st_mtime, info.st_size))
        inside[entry.os_path] = tuple(found)
    return inside, frozenset(deep)


def files_of(run: Run, inside: Inside) -> list[str]:
    """Every file an acting command could touch in ``run`` (for the open-files scan)."""
    files = [f.entry.os_path for c in run.checkpoints for f in c.files]
    files += [f.entry.os_path for f in run.loose_files if not f.entry.is_dir]
    return files + [path for contents in inside.values() for path, _, _ in contents]
