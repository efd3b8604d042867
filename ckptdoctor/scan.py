"""Paths -> runs: discovery, layout recognition and header reads for every path the user gave."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass

from ckptdoctor.discover import Listing, PathNotFound, Unlisted, discover, display, natural_key
from ckptdoctor.layouts import find_run
from ckptdoctor.model import Entry, Report, Run, ScanError
from ckptdoctor.readers import expected_formats, probe
from ckptdoctor.rules import check
from ckptdoctor.rules._context import Thresholds


@dataclass(frozen=True)
class Scan:
    runs: tuple[Run, ...]
    unlisted: tuple[Unlisted, ...]
    errors: tuple[ScanError, ...]
    empty: tuple[str, ...]
    """Paths that exist but hold no checkpoint any layout recognises."""
    unrecognised: tuple[str, ...] = ()
    """Files named like checkpoints (by suffix) in folders no layout recognises."""


def scan(paths: Iterable[str]) -> Scan:
    runs: list[Run] = []
    unlisted: list[Unlisted] = []
    errors: list[ScanError] = []
    empty: list[str] = []
    unrecognised: list[str] = []
    for path in paths:
        try:
            found = discover(path)
        except PathNotFound as error:
            errors.append(ScanError(display(path), str(error)))
            continue
        unlisted.extend(found.unlisted)
        before = len(runs)
        by_path = {listing.os_path: listing for listing in found.listings}
        taken: list[str] = []  # checkpoint folders a run holds: not runs of their own
        for listing in found.listings:
            if _inside(listing.os_path, taken):
                continue
            run = find_run(listing, probe, functools.partial(_subfolder, by_path))
            if run is not None:
                runs.append(run)
                taken.extend(c.folder.os_path for c in run.checkpoints if c.folder is not None)
                taken.extend(f.entry.os_path for f in run.loose_files if f.entry.is_dir)
            else:
                unrecognised.extend(
                    e.path for e in listing.entries if not e.is_dir and expected_formats(e.name) is not None
                )
        if len(runs) == before:
            empty.append(display(path))
    unrecognised.sort(key=natural_key)
    return Scan(tuple(runs), tuple(unlisted), tuple(errors), tuple(empty), tuple(unrecognised))


def _subfolder(listings: dict[str, Listing], entry: Entry) -> Listing | None:
    return listings.get(entry.os_path)


def _inside(path: str, folders: list[str]) -> bool:
    return any(path == folder or path.startswith(folder + os.sep) for folder in folders)


def inspect(paths: Iterable[str], thresholds: Thresholds | None = None) -> tuple[Report, Scan]:
    """What ``ckptdoctor inspect`` reports: runs from headers and trailers, and cheap findings."""
    result = scan(paths)
    findings = check(result.runs, result.unlisted, thresholds or Thresholds())
    report = Report("inspect", result.runs, findings, result.errors, unrecognised=result.unrecognised)
    return report, result
