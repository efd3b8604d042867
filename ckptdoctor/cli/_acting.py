"""What the commands that change a run (``prune``, ``repair``) share: options, the scan, the
locks, the world around the run (fresh and open files), the confirmation, and error messages."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from ckptdoctor.cli._output import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    rendered,
    say,
    stdout_console,
    write,
)
from ckptdoctor.render import HUMAN, JSON

if TYPE_CHECKING:
    from ckptdoctor.actions import Pending
    from ckptdoctor.config import Settings
    from ckptdoctor.model import Plan, Report, Run
    from ckptdoctor.retention import Circumstances

EXIT_LOCKED = 3
"""Another ckptdoctor is acting on the run (cli-conventions §2)."""

MinAge = Annotated[str | None, typer.Option("--min-age", help="Never touch files modified more recently (default 10min).", metavar="DURATION")]
DryRun = Annotated[bool, typer.Option("--dry-run", "-n", help="Print the plan and change nothing.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (required off a terminal).")]


def scan_runs(paths: list[str] | None, command: str) -> tuple[Report, list[Run]]:
    """The report over ``paths`` and the distinct runs in it that an acting command can change;
    exit 2 when a path cannot be scanned."""
    import dataclasses

    from ckptdoctor.retention import run_root
    from ckptdoctor.scan import inspect as inspect_paths

    for path in paths or ["."]:
        if os.path.realpath(path) in _NEVER_WHOLE:
            say(f"ckptdoctor: error: {path} is {_NEVER_WHOLE[os.path.realpath(path)]}; {command} acts on runs: name the run folders (or a folder that holds only runs)")
            raise typer.Exit(EXIT_USAGE)
    report, found = inspect_paths(paths or ["."])
    for path in paths or ["."]:
        real = os.path.realpath(path)
        if os.path.ismount(real) and {os.path.realpath(run_root(run)) for run in report.runs if run.checkpoints} - {real}:
            say(f"ckptdoctor: error: {path} is the root of a filesystem holding runs below it; {command} acts on runs: name the run folders")
            raise typer.Exit(EXIT_USAGE)
    for failure in report.errors:
        say(f"ckptdoctor: error: {failure.path}: {failure.message}")
    if report.errors:
        raise typer.Exit(EXIT_USAGE)
    for path in found.empty:
        say(f"No checkpoints found in {path}")
    single = [run.path for run in report.runs if run.single_file]
    for path in single:
        say(f"ckptdoctor: error: {path} is one file; {command} acts on whole runs: give the folder that holds it")
    if single:
        raise typer.Exit(EXIT_USAGE)
    return dataclasses.replace(report, command=command), distinct([run for run in report.runs if run.checkpoints])


_NEVER_WHOLE = {"/": "the root folder", os.path.realpath(os.path.expanduser("~")): "your home folder"}
"""Folders an acting command never takes whole: what rm refuses, and a home full of other things."""


def distinct(runs: list[Run]) -> list[Run]:
    """Runs with distinct real folders, in order: one run named twice (./run and $PWD/run) is one
    run, with one lock."""
    from ckptdoctor.retention import run_root

    seen: set[str] = set()
    kept = []
    for run in runs:
        real = os.path.realpath(run_root(run))
        if real not in seen:
            seen.add(real)
            kept.append(run)
    return kept


def lock_all(held: contextlib.ExitStack, runs: list[Run], dry_run: bool, more: Iterable[tuple[str, str]] = ()) -> None:
    """Take the lock of every run (and of every (home, shown path) in ``more``), in one order (no
    deadlocks between two commands), held to the end. A dry run creates nothing: it waits on a
    lock that exists, and takes none where there is none."""
    from ckptdoctor.actions import confirm_run, locked, strays
    from ckptdoctor.retention import home, run_root

    if not dry_run:  # before ckptdoctor's own folder is made in it
        for run in runs:
            confirm_run(run_root(run), (f.entry for c in run.checkpoints for f in c.files))
    for place, shown in sorted({*((home(run), run.path) for run in runs), *more}):
        held.enter_context(locked(place, shown, create=not dry_run))
        for stray in strays(place):
            say(f"note: {stray} is not ckptdoctor's: ignored")


def circumstances(run: Run, now: float, note: bool = True) -> Circumstances:
    """The world around ``run``: what is inside its folders, and which of its files live
    processes hold open. What cannot be known is said on stderr (with ``note``, even under
    --quiet: a prune that could not check open files is never silent)."""
    from ckptdoctor.processes import open_by
    from ckptdoctor.retention import Circumstances

    inside = folder_contents(run)
    busy, said = open_by(files_of(run, inside))
    if said and note:
        say(f"note: {said}")
    return Circumstances(now, open_by=busy, inside=inside)


def folder_contents(run: Run) -> dict[str, tuple[tuple[str, float, int], ...]]:
    """Every file inside each checkpoint folder and staging folder of ``run``, by the folder's
    os path: moving or deleting the folder takes them all (symlinked folders are not followed)."""
    from ckptdoctor.model import Role

    folders = [c.folder for c in run.checkpoints if c.folder is not None]
    folders += [f.entry for f in run.loose_files if f.entry.is_dir and Role.TEMP in f.roles]
    inside: dict[str, tuple[tuple[str, float, int], ...]] = {}
    for entry in folders:
        if entry.is_symlink:
            continue
        found = []
        for folder, _, names in os.walk(entry.os_path):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                found.append((path, info.st_mtime, info.st_size))
        inside[entry.os_path] = tuple(found)
    return inside


def files_of(run: Run, inside: dict[str, tuple[tuple[str, float, int], ...]]) -> list[str]:
    """Every file an acting command could touch in ``run`` (for the open-files scan)."""
    files = [f.entry.os_path for c in run.checkpoints for f in c.files]
    files += [f.entry.os_path for f in run.loose_files if not f.entry.is_dir]
    return files + [path for contents in inside.values() for path, _, _ in contents]


def show_plans(
    plans: list[tuple[Plan, str]],
    report: Report,
    settings: Settings,
    *,
    dry_run: bool,
    fmt: str,
    quiet: bool,
    output: str | None,
    show_all: bool,
    repair: bool = False,
    pending: Sequence[Pending] = (),
) -> None:
    """Each (plan, unit) as a table, or the JSON document with every plan; in another format the
    scan's findings (as configured), which is what a CI system reads. ``pending``: what killed
    prunes' journals would still do, which the same confirmation finishes."""
    import dataclasses

    if fmt == JSON:
        from ckptdoctor.render.json import plan_document

        write(plan_document(report, tuple(plan for plan, _ in plans), dry_run, tuple(pending)), output)
        return
    for found in pending:  # on stderr beside a machine format, with the tables otherwise
        say(pending_line(found))
    if fmt != HUMAN:
        write(rendered(dataclasses.replace(report, findings=settings.apply(report.findings)), fmt), output)
        return
    if quiet:
        return
    from ckptdoctor.render.human import plan_block, repair_summary

    console = stdout_console()
    for plan, unit in plans:  # a repair's table also says what it acts on, and sums up otherwise
        console.print(plan_block(plan, unit, show_all, repair_summary if repair else None))


def pending_line(found: Pending) -> str:
    """What one killed prune's journal would still do."""
    shown = ", ".join(found.in_run[:5]) + (f" and {len(found.in_run) - 5} more" if len(found.in_run) > 5 else "")
    deletes = f"{len(found.in_run)} entries still in the run ({shown})" if found.in_run else "no entry still in the run"
    spares = f"; it spares {len(found.spared)} it listed that changed, are open or are kept now" if found.spared else ""
    return (
        f"pending: an interrupted prune left {found.journal}; finishing it deletes {deletes} and "
        f"{found.in_trash} it had moved into its trash{spares} (--discard-journal drops it instead)"
    )


def confirm(question: str, human: bool, refused: str) -> None:
    """Ask on a terminal; off one (or in JSON mode) fail, naming --yes. ``refused`` says what
    was not done ("nothing was deleted")."""
    if human and sys.stdin.isatty() and sys.stdout.isatty():
        if typer.confirm(question, default=False):
            return
        say(f"{refused[0].upper()}{refused[1:]}.")
        raise typer.Exit(EXIT_OK)
    say(f"ckptdoctor: error: not on a terminal: pass --yes to go ahead (or --dry-run to only see the plan); {refused}")
    raise typer.Exit(EXIT_USAGE)


@contextlib.contextmanager
def failures_explained(command: str) -> Iterator[None]:
    """Turn what stops an acting command into a message and its exit code: 3 for a lock held
    elsewhere, 1 for a run that cannot be changed."""
    from ckptdoctor.actions import ActionError, Locked

    try:
        yield
    except Locked as locked:
        say(f"ckptdoctor: error: {locked}")
        raise typer.Exit(EXIT_LOCKED) from locked
    except ActionError as error:
        say(f"ckptdoctor: error: {error}")
        raise typer.Exit(EXIT_FINDINGS) from error
    except OSError as error:  # EIO, ENOSPC, EROFS, EACCES in the middle of acting: no usage error, no bug
        where = f"{error.filename}: " if error.filename else ""
        why = error.strerror or type(error).__name__
        code = errno.errorcode.get(error.errno or 0, "")
        say(
            f"ckptdoctor: error: {where}{why}{f' ({code})' if code else ''}; nothing that was to be kept was touched, "
            f"and the next {command} finishes the job"
        )
        raise typer.Exit(EXIT_FINDINGS) from error
