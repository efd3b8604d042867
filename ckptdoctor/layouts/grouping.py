"""How a layout of flat files turns the names it claims into a run: its files grouped by the
index each name carries, staging leftovers and markers given to the save they belong to, and
each file's content judged against what the framework writes (``ContentCheck``).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from ckptdoctor.discover import Listing
from ckptdoctor.layouts._zeroed import find_zeroed
from ckptdoctor.layouts.content import MARKER, confirmed_roles, file_report, roles_in
from ckptdoctor.layouts.context import trusted_globals
from ckptdoctor.layouts.copies import stand_ins
from ckptdoctor.layouts.hooks import LayoutHooks
from ckptdoctor.layouts.judging import Verdicts, checkpoint_of, without_training_state
from ckptdoctor.layouts.naming import Claim, common_unit, sifted, temp_base
from ckptdoctor.model import Checkpoint, CheckpointFile, Entry, FileIssue, FileReport, Problem, Role, Run
from ckptdoctor.readers.compressed import pandas_archive
from ckptdoctor.readers.files import expected_formats, with_keys
from ckptdoctor.readers.sniff import Format
from ckptdoctor.readers.tararchive import TAR


def group(listing: Listing, layout: LayoutHooks, probe: Callable[[Entry], FileReport], claims: dict[str, Claim]) -> Run | None:
    """Build the run ``layout`` sees in ``listing`` from the names it ``claims`` there; None when
    it claims none."""
    if not claims:
        return None
    found = _sort_entries(listing, layout, probe, claims)
    required = layout.required(list(claims.values()))
    saves = sorted(((index, layout.measured(files)) for index, files in found.by_index.items()), key=lambda save: save[0])
    saved = [files for _, files in saves]
    weights_only = layout.weights_only(saved) or _bundles_hold_weights_only(found.bundles, saved)
    if weights_only:
        required = without_training_state(required)
    zeros = find_zeroed(saves)
    verdicts: Verdicts = {}
    unit = common_unit(claims.values(), layout.default_unit)

    def judge_save(index: int, files: Sequence[CheckpointFile], copies: tuple[CheckpointFile, ...] = ()) -> Checkpoint:
        return checkpoint_of(
            index,
            (*files, *copies),
            required,
            listing.single_file,
            absent=() if listing.single_file else layout.absent(files, saved),
            zeroed=zeros.get(index, ()),
            whole_saves=layout.resaved if layout.whole_saves or copies else None,
            verdicts=verdicts,
        )

    loose, checkpoints = found.loose, [judge_save(index, files) for index, files in saves]
    if not listing.single_file:
        loose, checkpoints = stand_ins(layout.whole_copy, layout.index_keys.get(unit), loose, saves, checkpoints, judge_save)
    return Run(
        path=listing.path,
        layout=layout.name,
        unit=unit,
        checkpoints=tuple(checkpoints),
        required=required,
        other_files=tuple(found.others),
        loose_files=tuple(loose),
        single_file=listing.single_file,
        weights_only=weights_only,
    )


class _Sorted(NamedTuple):
    """A run's entries, sorted: each checkpoint's files by index, the run's own files (pointers,
    staging), the others, and the bundles among the checkpoints' files as first judged."""

    by_index: defaultdict[int, list[CheckpointFile]]
    loose: list[CheckpointFile]
    others: list[Entry]
    bundles: list[CheckpointFile]


def _sort_entries(listing: Listing, layout: LayoutHooks, probe: Callable[[Entry], FileReport], claims: dict[str, Claim]) -> _Sorted:
    """Where each of ``listing``'s entries belongs."""
    judge = ContentCheck(layout, probe)
    found = _Sorted(defaultdict(list), [], [], [])
    for entry in listing.entries:
        claim = claims.get(entry.name)
        if claim is not None:
            found.by_index[claim.number].append(_claimed(entry, claim, judge(entry), found.bundles))
            continue
        placed = _unclaimed(entry, layout, judge, probe, claims)
        if placed is None:
            found.others.append(entry)
        else:
            index, file = placed
            (found.loose if index is None else found.by_index[index]).append(file)
    return found


def _claimed(entry: Entry, claim: Claim, report: FileReport, bundles: list[CheckpointFile]) -> CheckpointFile:
    """A claimed file with its roles; a bundle (a file of several roles) joins ``bundles`` as its
    name tells them, and counts with the roles its keys show once they were read."""
    roles, prefix = claim.roles, sys.intern(claim.prefix)  # one string for a run's many files
    if len(roles) > 1:
        report = with_keys(entry, report)
        bundles.append(CheckpointFile(entry, roles, prefix, report))
        roles = confirmed_roles(roles, report)
    return CheckpointFile(entry, roles, prefix, report)


def _unclaimed(
    entry: Entry, layout: LayoutHooks, judge: ContentCheck, probe: Callable[[Entry], FileReport], claims: dict[str, Claim]
) -> tuple[int | None, CheckpointFile] | None:
    """What an entry the layout claims no checkpoint by is to the run: a file of the checkpoint
    of that index, or of the run itself (index None); None where it is neither."""
    base = temp_base(entry.name)
    target = layout.claim(base) if base is not None else None
    if base is not None and (target is not None or expected_formats(base) is not None):
        # a staging file of a save that never finished: it makes that checkpoint partial
        staged = CheckpointFile(entry, (Role.TEMP,), target.prefix if target else "", file_report(entry, probe))
        return (target.number if target else None), staged
    marked = layout.unfinished(entry.name)
    if marked is not None and (target := claims.get(marked)) is not None:
        # the framework's "save in progress" marker beside the checkpoint it names: that save never finished
        return target.number, CheckpointFile(entry, (Role.TEMP,), target.prefix, MARKER)
    staged_by_name = layout.staging(entry.name)
    if staged_by_name is not None:
        return None, CheckpointFile(entry, (Role.TEMP,), staged_by_name.prefix, file_report(entry, probe))
    pointer = layout.pointer(entry.name)
    if pointer is not None:
        return None, CheckpointFile(entry, pointer.roles, pointer.prefix, judge(entry))
    stray = layout.stray(entry.name)
    if stray is not None and not entry.is_dir:
        return None, CheckpointFile(entry, stray.roles, stray.prefix, judge(entry))
    return None


def _bundles_hold_weights_only(bundles: Sequence[CheckpointFile], saved: Sequence[Sequence[CheckpointFile]]) -> str | None:
    """Why a run of bundled files saves weights alone: every bundle's keys were read and show
    weights, none shows optimizer or scheduler state, and no other file of the run holds one (a
    framework told to save weights alone saves neither: a scheduler without its optimizer is
    what a cleanup leaves)."""
    training = (Role.OPTIMIZER, Role.SCHEDULER)
    if not bundles or any(role in file.roles for files in saved for file in files for role in training):
        return None
    for bundle in bundles:
        found = roles_in(bundle.report)
        if found is None or Role.MODEL not in found or any(role in found for role in training):
            return None
    example = bundles[-1]
    return f"no checkpoint holds optimizer state: the top-level keys of {example.name} are {', '.join(example.report.keys[:8])}"


class ContentCheck:
    """Whether ``layout``'s framework writes what each file holds, and what of the objects it
    needs that framework vouches for (``OwnObjects``); judged once per shared report."""

    def __init__(self, layout: LayoutHooks, probe: Callable[[Entry], FileReport]) -> None:
        self.layout = layout
        self.probe = probe
        self.judged: dict[int, tuple[FileReport, FileReport]] = {}

    def __call__(self, entry: Entry) -> FileReport:
        report = file_report(entry, self.probe)
        held = self.judged.get(id(report))
        if held is not None and held[0] is report:
            return held[1]
        judged = self._judge(report, entry.name)
        # the report is kept with its judgement: a folder's or a dangling link's, made afresh
        # for each entry, cannot leave its id to another
        self.judged[id(report)] = (report, judged)
        return judged

    def _judge(self, report: FileReport, name: str) -> FileReport:
        if report.issues:
            return self.layout.own_objects.vouched(report, trusted_globals())
        try:
            content = Format(report.format)
        except ValueError:
            content = Format.UNKNOWN
        if self.layout.accepts(content) or (content is Format.NUMPY and report.tensors):
            return report  # arrays no framework writes as checkpoints, but read and found to be plain data
        if report.format in (Format.ZIP.value, TAR.value) and pandas_archive(name):
            return report  # pandas' pickle archive, its pickle read as read_pickle reads it and found plain data
        what = "no checkpoint format ckptdoctor knows" if content is Format.UNKNOWN else f"{content.value} data"
        writer = f", which {self.layout.name} does not write" if self.layout.content else ""
        return FileReport(report.format, (FileIssue(Problem.NOT_A_CHECKPOINT, f"holds {what}{writer}"),), report.facts)


def claim_names(layout: LayoutHooks, listing: Listing) -> dict[str, Claim]:
    """The names in ``listing`` that ``layout`` claims (``claim``, else ``recorded``), each with its claim."""
    names: Iterable[str] = listing.names
    if layout.claimable is not None:
        names = sifted(listing, layout.claimable)
    claims: dict[str, Claim] = {}
    claim_of, recorded = layout.claim, layout.recorded
    for name in names:
        claim = claim_of(name) or recorded(name)
        if claim is not None:
            claims[name] = claim
    return claims
