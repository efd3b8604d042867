"""Paths -> runs: discovery, layout recognition and header reads for every path the user gave."""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ckptdoctor.discover import Discovery, Listing, PathNotFound, Unlisted, discover, display, natural_key, remote
from ckptdoctor.errors import StoreError
from ckptdoctor.model import Entry, FileReport, Finding, Report, Run, ScanError, Status, StoreLeftovers, Transfer
from ckptdoctor.pipelines.interrupted import with_interruptions
from ckptdoctor.progress import Tally
from ckptdoctor.rules.context import Thresholds
from ckptdoctor.stores import leftovers, session, urls
from ckptdoctor.stores.listing import discover_store


@dataclass(frozen=True)
class Scan:
    runs: tuple[Run, ...]
    unlisted: tuple[Unlisted, ...]
    errors: tuple[ScanError, ...]
    empty: tuple[str, ...]
    """Paths that exist but hold no checkpoint any layout recognises."""
    unrecognised: tuple[str, ...] = ()
    """Files named like checkpoints (by suffix) in folders no layout recognises."""
    unclaimed: tuple[Listing, ...] = ()
    """Folders no layout recognises (their files are listed in ``unrecognised``)."""


@functools.cache
def header_read() -> Callable[[Entry], FileReport]:
    """A file's header read, with the files frameworks name read as the layouts say (and many at once)."""
    # loaded when first asked for: an empty folder reads nothing
    from ckptdoctor.layouts.registry import HARMLESS, NAMED_FILES
    from ckptdoctor.readers.files import HeaderReads

    return HeaderReads(NAMED_FILES, HARMLESS)


def scan(paths: Iterable[str], read: Callable[[Entry], FileReport] | None = None, tally: Tally | None = None) -> Scan:
    """Find the runs under ``paths``; ``read`` judges each file (a header read unless told).
    ``tally`` counts the folders, files and runs found, for a status line."""
    runs: list[Run] = []
    unlisted: list[Unlisted] = []
    errors: list[ScanError] = []
    empty: list[str] = []
    unrecognised: list[str] = []
    unclaimed: list[Listing] = []
    paths = tuple(paths)
    # folders an earlier path reached (`inspect runs runs/exp1`): each reported once (only one
    # path: no folder is reached twice, and no path is resolved)
    looked_at: set[str] | None = set() if len(paths) > 1 else None
    for path in paths:
        try:
            found = discovered(path, tally)
        except (PathNotFound, StoreError) as error:
            errors.append(ScanError(display(path), said_of(path, str(error))))
            continue
        left = [folder for folder in found.unlisted if _first_look(folder.os_path or folder.path, looked_at)]
        before, again = len(runs), False
        by_path = {listing.os_path: listing for listing in found.listings}
        taken: set[str] = set()  # checkpoint folders a run holds: not runs of their own
        for listing in found.listings:
            # a file given by itself is listed under its folder: it is the file that was reached
            if not _first_look(listing.entries[0].os_path if listing.single_file else listing.os_path, looked_at):
                again = True
                continue
            if _inside(listing.os_path, taken):
                continue
            run = _run_in(listing, read or header_read(), by_path) if listing.entries else None  # a folder holding nothing holds no run
            if run is not None:
                run, left = with_unlisted(run, left)
                runs.append(run)
                if tally is not None:
                    tally.runs += 1
                taken.update(c.folder.os_path for c in run.checkpoints if c.folder is not None)
                taken.update(f.entry.os_path for f in run.loose_files if f.entry.is_dir)
                # a run's file kept in a folder of its own beside the checkpoints (``FolderLayout.beside``)
                here = os.path.normpath(listing.os_path)
                taken.update(folder for f in run.loose_files if (folder := os.path.normpath(os.path.dirname(f.entry.os_path))) != here)
            else:
                unclaimed.append(listing)
                unrecognised.extend(_named_like_checkpoints(listing))
        unlisted.extend(left)
        if len(runs) == before and not again:
            empty.append(display(path))
    unrecognised.sort(key=natural_key)
    return Scan(tuple(runs), tuple(unlisted), tuple(errors), tuple(empty), tuple(unrecognised), tuple(unclaimed))


def _first_look(os_path: str, looked_at: set[str] | None) -> bool:
    """Whether no earlier path reached this folder (by where it really is: a path given twice, a
    run given beside the folder above it, a link to it); it is then noted as reached."""
    if looked_at is None:
        return True
    where = os_path if "://" in os_path else os.path.realpath(os_path)
    if where in looked_at:
        return False
    looked_at.add(where)
    return True


def _run_in(listing: Listing, read: Callable[[Entry], FileReport], by_path: dict[str, Listing]) -> Run | None:
    # the layouts load once a folder holds something: an empty folder needs none of them
    from ckptdoctor.layouts.registry import find_run

    return find_run(listing, read, functools.partial(_subfolder, by_path))


def _named_like_checkpoints(listing: Listing) -> list[str]:
    """The files of a folder no layout recognises that are named like checkpoints (by suffix)."""
    if not listing.entries:
        return []
    from ckptdoctor.readers.files import looks_like_checkpoint  # with the readers, once a folder holds something

    return [entry.path for entry in listing.entries if not entry.is_dir and looks_like_checkpoint(entry.name)]


def with_unlisted(run: Run, unlisted: Sequence[Unlisted]) -> tuple[Run, list[Unlisted]]:
    """``run`` with each folder this user may not list that is one of its checkpoint folders, or
    lies in one, told to that checkpoint (``Checkpoint.unlisted``), which is then unreadable
    unless what could be read shows it broken; and the folders of ``unlisted`` left over."""
    denied = [folder for folder in unlisted if folder.denied]
    if not denied:
        return run, list(unlisted)
    told: set[int] = set()
    checkpoints = []
    for checkpoint in run.checkpoints:
        inside = []
        if checkpoint.folder is not None:
            top = os.path.normpath(checkpoint.folder.os_path)
            for folder in denied:
                below = os.path.normpath(folder.os_path)
                if below == top or below.startswith(top + os.sep):
                    told.add(id(folder))
                    inside.append(Entry(os.path.basename(below), folder.path, folder.os_path, 0, is_dir=True, denied=True))
        if inside:
            status = Status.UNREADABLE if checkpoint.status in (Status.COMPLETE, Status.INCOMPLETE) else checkpoint.status
            # its roles were looked for in a folder this user may not list: nothing is known missing
            missing = () if status is Status.UNREADABLE else checkpoint.missing
            checkpoint = dataclasses.replace(checkpoint, status=status, missing=missing, unlisted=tuple(inside))
        checkpoints.append(checkpoint)
    if not told:
        return run, list(unlisted)
    return dataclasses.replace(run, checkpoints=tuple(checkpoints)), [folder for folder in unlisted if id(folder) not in told]


def said_of(path: str, message: str) -> str:
    """What a path's error says once the path is said before it (``path: message``): a store's
    message starts with the URL it is about (the path, the path with its slash, its bucket),
    which would otherwise be said twice."""
    named, sep, rest = message.partition(": ")
    if sep and "://" in named and (path.rstrip("/") + "/").startswith(named.rstrip("/") + "/"):
        return rest
    return message


def discovered(path: str, tally: Tally | None = None) -> Discovery:
    """The folders at or below ``path``: a local path (or ``file://`` URL) listed from disk, a
    store URL (``s3://``, ``gs://``, ``az://``) from one listing of its bucket."""
    try:
        local = urls.local_path(path)
    except urls.BadURL as error:
        raise PathNotFound(str(error)) from None
    if local is not None:
        return discover(local, tally)
    if remote(path):
        return discover_store(path, tally)
    return discover(path, tally)


def _subfolder(listings: dict[str, Listing], entry: Entry) -> Listing | None:
    return listings.get(entry.os_path)


def _inside(path: str, folders: set[str]) -> bool:
    """Whether ``path`` is one of ``folders`` or below one (checked up the path, not across folders)."""
    while folders:
        if path in folders:
            return True
        parent = os.path.dirname(path)
        if parent == path or not parent:
            return False
        path = parent
    return False


def inspect(paths: Iterable[str], thresholds: Thresholds | None = None, tally: Tally | None = None) -> tuple[Report, Scan]:
    """What ``ckptdoctor inspect`` reports: runs from headers and trailers, and cheap findings
    (``tally`` counts what the scan sees as it goes)."""
    paths = list(paths)
    before = session.traffic()
    result = scan(paths, tally=tally)
    now = time.time()
    runs = with_interruptions(with_leftovers(paths, result.runs), now)
    findings = _checked(runs, result.unlisted, thresholds or Thresholds(), now)
    report = Report("inspect", runs, findings, result.errors, unrecognised=result.unrecognised, transfer=transfer(paths, before))
    return report, result


def _checked(runs: Sequence[Run], unlisted: Sequence[Unlisted], thresholds: Thresholds, now: float) -> tuple[Finding, ...]:
    """Every finding of the rules; none where there is nothing to check (no run, no folder left
    unlisted), without loading the rules."""
    if not runs and not unlisted:
        return ()
    # the rule table loads every layout: an empty folder needs none of it
    from ckptdoctor.rules.registry import check

    return check(runs, unlisted, thresholds, now=now)


def transfer(paths: list[str], before: tuple[int, int]) -> Transfer | None:
    """What reading ``paths`` cost in requests and bytes since ``before`` (``session.traffic()``),
    where any of them is in a store."""
    if not any(remote(path) and urls.local_path(path) is None for path in paths):
        return None
    requests, received = session.traffic()
    return Transfer(requests - before[0], received - before[1])


def surveys(paths: list[str]) -> dict[str, leftovers.Surveyed]:
    """What the stores keep under each store path among ``paths`` besides its objects (incomplete
    uploads, older versions): asked once per path, not per run or object."""
    found: dict[str, leftovers.Surveyed] = {}
    for path in paths:
        if remote(path) and urls.local_path(path) is None and (surveyed := leftovers.survey(path)) is not None:
            found[path] = surveyed
    return found


def with_leftovers(
    paths: list[str], runs: Sequence[Run], whole: frozenset[str] | None = None, surveyed: dict[str, leftovers.Surveyed] | None = None
) -> tuple[Run, ...]:
    """``runs`` with what their stores keep under them besides their objects (``surveyed``, else
    asked now); on a versioned bucket, each damaged file's newest whole older version, read as
    ``inspect`` reads; or with ``whole`` (the URLs of the files whose older versions ``verify``
    said it would download), read whole as ``verify`` reads, and those of any other file not at all."""
    shares: dict[str, StoreLeftovers] = {}
    for survey in (surveys(paths) if surveyed is None else surveyed).values():
        under = survey.location.url
        held = [
            run.path
            for run in runs
            if not run.single_file and run.path not in shares and (run.path == under or run.path.startswith(under + "/"))
        ]
        if held:
            shared = leftovers.shared_out(survey, held)
            if survey.versioning:
                from ckptdoctor.pipelines.versions import previous_versions  # reads with the readers: only a versioned bucket's runs

                by_path = {run.path: run for run in runs}
                for path, kept in shared.items():
                    previous = previous_versions(by_path[path], survey.location, survey.older, whole)
                    shared[path] = dataclasses.replace(kept, previous=previous)
            shares.update(shared)
    if not shares:
        return tuple(runs)
    return tuple(dataclasses.replace(run, store=shares[run.path]) if run.path in shares else run for run in runs)
