"""torch's zip archives (``torch.save`` since 1.6), judged from the archive's tail.

torch writes member data, the central directory, a ZIP64 end record and locator (always, even
for tiny files) and the classic end record, with no comment (integrity reference §3.2). Any
truncation removes the end record: torch then fails with ``failed finding central directory``.
"""

from __future__ import annotations

import struct

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers._sample import TAIL, Sample
from ckptdoctor.readers.sniff import Format

END = struct.Struct("<4sHHHHIIH")
END_SIGNATURE = b"PK\x05\x06"
ZIP64_LOCATOR = struct.Struct("<4sIQI")
ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"
ZIP64_END = struct.Struct("<4sQHHIIQQQQ")
ZIP64_END_SIGNATURE = b"PK\x06\x06"
CENTRAL_SIGNATURE = b"PK\x01\x02"


def read(sample: Sample) -> FileReport:
    tail = sample.tail(TAIL)
    tail_start = sample.size - len(tail)
    position = _find_end(tail)
    if position is None:
        return _report(
            Problem.TRUNCATED,
            "no end-of-central-directory record at its end: the archive was cut short "
            "(torch: failed finding central directory)",
        )
    fields = END.unpack_from(tail, position)
    entries, cd_size, cd_offset, comment_length = fields[4], fields[5], fields[6], fields[7]
    end_at = tail_start + position
    record_end = end_at + END.size + comment_length
    cd_limit = end_at
    locator_at = end_at - ZIP64_LOCATOR.size
    if locator_at >= 0 and sample.range(locator_at, 4) == ZIP64_LOCATOR_SIGNATURE:
        zip64_at = ZIP64_LOCATOR.unpack(sample.range(locator_at, ZIP64_LOCATOR.size))[2]
        record = sample.range(zip64_at, ZIP64_END.size)
        if len(record) < ZIP64_END.size or not record.startswith(ZIP64_END_SIGNATURE):
            return _report(Problem.MALFORMED, "its ZIP64 end record is missing or damaged")
        zip64 = ZIP64_END.unpack(record)
        entries, cd_size, cd_offset = zip64[7], zip64[8], zip64[9]
        cd_limit = zip64_at
    if cd_offset + cd_size != cd_limit:
        return _report(
            Problem.MALFORMED,
            f"its central directory (at {cd_offset}, {cd_size} bytes) does not end where the "
            f"end record is ({cd_limit}): the archive was altered or spliced",
        )
    if entries and sample.range(cd_offset, 4) != CENTRAL_SIGNATURE:
        return _report(Problem.MALFORMED, "its central directory does not start where the end record says")
    facts = (("members", str(entries)),)
    if record_end < sample.size:
        issue = FileIssue(
            Problem.TRAILING_BYTES,
            f"{sample.size - record_end} bytes after the archive's end record",
        )
        return FileReport(Format.TORCH_ZIP.value, (issue,), facts)
    return FileReport(Format.TORCH_ZIP.value, (), facts)


def _find_end(tail: bytes) -> int | None:
    """The end record nearest the end whose comment fits inside the file."""
    position = tail.rfind(END_SIGNATURE)
    while position >= 0:
        if position + END.size <= len(tail):
            comment_length = END.unpack_from(tail, position)[7]
            if position + END.size + comment_length <= len(tail):
                return position
        position = tail.rfind(END_SIGNATURE, 0, position)
    return None


def _report(problem: Problem, detail: str) -> FileReport:
    return FileReport(Format.TORCH_ZIP.value, (FileIssue(problem, detail),))
