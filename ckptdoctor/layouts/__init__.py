"""Recognise which framework wrote a folder, and turn its files into a run.

Each layout module knows one framework's names; when two claim the same names (burn's and
a hand-made loop's ``model-3.bin``), the content of the files decides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ckptdoctor.discover import Listing
from ckptdoctor.layouts._base import Claim, Layout, claim_all, group
from ckptdoctor.layouts.burn import BurnLayout
from ckptdoctor.layouts.torch import TorchLayout
from ckptdoctor.model import Entry, FileReport, Role, Run
from ckptdoctor.readers.sniff import Format

__all__ = ["LAYOUTS", "Layout", "find_run", "layout_named"]

LAYOUTS: tuple[Layout, ...] = (BurnLayout(), TorchLayout())
"""In order of preference when content cannot decide."""


def layout_named(name: str) -> Layout:
    for layout in LAYOUTS:
        if layout.name == name:
            return layout
    return _BY_CONTENT_ONLY


def find_run(listing: Listing, probe: Callable[[Entry], FileReport]) -> Run | None:
    """The run in ``listing``, if any layout recognises its files."""
    probe = _cached(probe)
    candidates = [(layout, claims) for layout in LAYOUTS if (claims := claim_all(layout, listing.entries))]
    if not candidates:
        return _lone_file(listing, probe) if listing.single_file else None
    if len(candidates) > 1:
        candidates.sort(key=lambda candidate: -_content_score(candidate, listing, probe))
    layout, claims = candidates[0]
    run = group(listing, layout, probe, claims)
    if run is not None and run.layout == "torch" and _all_safetensors(run):
        run = dataclasses.replace(run, layout="safetensors")
    return run


class _AnyFile(Layout):
    """A file the user named directly whose name follows no convention: judged by content."""

    name = "unknown"

    def claim(self, name: str) -> Claim | None:
        return Claim((Role.MODEL,), 0, "")


_BY_CONTENT_ONLY = _AnyFile()


def _lone_file(listing: Listing, probe: Callable[[Entry], FileReport]) -> Run | None:
    run = group(listing, _BY_CONTENT_ONLY, probe)
    if run is None:
        return None
    kinds = {_format(f.report) for c in run.checkpoints for f in c.files}
    for layout in LAYOUTS:
        if kinds and all(kind in layout.content for kind in kinds):
            return dataclasses.replace(run, layout=layout.name)
    return run


def _content_score(candidate: tuple[Layout, dict[str, Claim]], listing: Listing, probe: Callable[[Entry], FileReport]) -> int:
    layout, claims = candidate
    entries = [e for e in listing.entries if e.name in claims and not e.is_dir and not e.dangling]
    return sum(1 for e in entries if _format(probe(e)) in layout.content)


def _format(report: FileReport) -> Format | None:
    try:
        return Format(report.format)
    except ValueError:
        return None


def _all_safetensors(run: Run) -> bool:
    files = [f for c in run.checkpoints for f in c.files]
    return bool(files) and all(f.report.format == Format.SAFETENSORS.value for f in files)


def _cached(probe: Callable[[Entry], FileReport]) -> Callable[[Entry], FileReport]:
    reports: dict[str, FileReport] = {}

    def cached(entry: Entry) -> FileReport:
        report = reports.get(entry.os_path)
        if report is None:
            report = reports[entry.os_path] = probe(entry)
        return report

    return cached
