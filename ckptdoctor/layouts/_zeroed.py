"""Zeros where the run's previous checkpoint held data (CKD212): what a full disk or a crash leaves.

Readers record facts about single files: whether a file's last 4 KiB are all zero (every read),
and under ``verify --deep`` which tensors or DCP items hold only zero bytes. Whether zeros are
damage takes the run: a bias initialised to zero and never trained is zero in every checkpoint,
while a tensor that held data in the previous checkpoint and is all zero now was lost. So each
tensor, DCP item and file tail is compared with the same one in the previous checkpoint that was
read cleanly (a file is the same when its name prefix, roles and format are).

Only the previous reading counts, as the rule states: zeros that were already zeros in the
previous checkpoint are taken as meant (a layer reset on purpose), so a deliberate reset costs one
checkpoint and not every later one. The price is that zeros written by two saves running are found
in the first of them only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

from ckptdoctor.model import CheckpointFile, FileReport, Problem, Role, Zeroed
from ckptdoctor.readers.sample import TAIL_ZERO

_READ_CLEANLY = frozenset({Problem.LEGACY})
"""Problems that leave a file's bytes worth comparing (the others have findings of their own)."""
_What = tuple[object, ...]


def find_zeroed(saves: Sequence[tuple[int, Sequence[CheckpointFile]]]) -> dict[int, tuple[Zeroed, ...]]:
    """For checkpoints in index order: the bytes of each that are all zero where the previous
    reading of the same tensor, item or file tail held data."""
    reports = {id(f.report): f.report for _, files in saves for f in files}.values()  # a big run's files share a few
    read_whole = any(report.spans for report in reports)
    if not read_whole and not any(_zero_tail(report) for report in reports):
        return {}  # no tail reads as zero: none can have lost data (a healthy run)
    tails: dict[int, bool | None] = {}
    previous: dict[_What, tuple[int, bool]] = {}  # what -> (index, all zero) where last read
    found: dict[int, tuple[Zeroed, ...]] = {}
    for index, files in saves:
        hits: dict[tuple[str, int], list[str]] = {}
        for what, zero, path, region in _readings(files) if read_whole else _tails(files, tails):
            before = previous.get(what)
            if zero and before is not None and not before[1]:
                hits.setdefault((path, before[0]), []).append(region)
            previous[what] = (index, zero)
        if hits:
            found[index] = tuple(Zeroed(path, tuple(r for r in regions if r), before) for (path, before), regions in hits.items())
    return found


def _tails(files: Sequence[CheckpointFile], tails: dict[int, bool | None]) -> Iterator[tuple[_What, bool, str, str]]:
    """``_readings`` after header reads, where each cleanly read file's tail is all there is:
    whether a report's tail is zero is looked up once (``tails``, by report; None where the file
    was not read cleanly or has no tail read), as a big run's clean files share a few reports."""
    for file in files:
        report = file.report
        if id(report) in tails:
            zero = tails[id(report)]
        else:
            zero = tails[id(report)] = _zero_tail(report)
        if zero is not None and Role.TEMP not in file.roles:
            yield ((file.prefix, file.roles, report.format), None), zero, file.path, ""


def _zero_tail(report: FileReport) -> bool | None:
    """Whether the tail a header read of a cleanly read file saw is all zero; None where there is
    no such reading."""
    tail = report.fact(TAIL_ZERO) if report.problems <= _READ_CLEANLY else None
    return None if tail is None else tail == "yes"


def _readings(files: Sequence[CheckpointFile]) -> Iterator[tuple[_What, bool, str, str]]:
    """(what was read, whether it is all zero, the path of the file that holds it, the tensor or
    item, empty for a file's tail) for one checkpoint's cleanly read files. A file whose bytes were
    read one by one (``--deep``) is judged by them, not by a guess from its tail."""
    clean = {f.entry.os_path: f for f in files if Role.TEMP not in f.roles and f.report.problems <= _READ_CLEANLY}
    read_whole = {_holder(f, span.file) for f in clean.values() for span in f.report.spans or ()}
    for path, file in clean.items():
        same = (file.prefix, file.roles, file.report.format)
        for span in file.report.spans or ():
            holder = clean.get(_holder(file, span.file))
            if holder is not None:
                yield (same, span.name), span.zero, holder.path, span.name
        tail = file.report.fact(TAIL_ZERO)
        if tail is not None and path not in read_whole:
            yield (same, None), tail == "yes", file.path, ""


def _holder(file: CheckpointFile, name: str) -> str:
    """Where a span lies: in ``file``, or in the file ``name`` beside it (a DCP data file)."""
    return os.path.join(os.path.dirname(file.entry.os_path), name) if name else file.entry.os_path
