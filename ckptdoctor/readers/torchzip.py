"""torch's zip archives (``torch.save`` since 1.6), and zips that only look like them.

``read`` judges an archive from its tail: torch writes member data, the central directory, a
ZIP64 end record and locator (always, even for tiny files) and the classic end record, with no
comment (integrity reference §3.2). Any truncation removes the end record: torch then fails
with ``failed finding central directory``.

``verify`` reads the central directory and every local header itself (never through
``zipfile``, which skips or refuses what torch still loads), walks every pickle with torch's
own opcode set, checks each storage against its ``data/<key>`` member, and lists the tensors.
"""

from __future__ import annotations

import itertools
import math
import struct
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from ckptdoctor.bundles import PATH_KEYS
from ckptdoctor.model import RECORDED_PATH, TOP_LEVEL_NUMBER, FileIssue, FileReport, Problem, Tensor
from ckptdoctor.readers import deep_scan, npy
from ckptdoctor.readers._registry import Library, Naming, Rank, ReaderSpec, Sniff
from ckptdoctor.readers._skim import Skimmed
from ckptdoctor.readers._skim import top_level as skim
from ckptdoctor.readers.dtypes import NONFINITE_SCANNED, TORCH_SIZES
from ckptdoctor.readers.pickle import TORCH_SAVE_SUFFIXES
from ckptdoctor.readers.pickle_safety import judge, weights_only_refusal
from ckptdoctor.readers.sample import TAIL, Sample, SampleReader, held
from ckptdoctor.readers.sniff import ZIP_LOCAL, Format, begins, sniff_payload
from ckptdoctor.readers.unpickler import (
    TORCH_OPCODES,
    Budget,
    OverBudget,
    Storage,
    TensorRef,
    Walk,
    current_budget,
    masks,
    one_budget,
    outside_weights,
    recorded_paths,
    tensors,
    top_keys,
    top_numbers,
    walk,
    walk_chunks,
)

END = struct.Struct("<4sHHHHIIH")
END_SIGNATURE = b"PK\x05\x06"
ZIP64_LOCATOR = struct.Struct("<4sIQI")
ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"
ZIP64_END = struct.Struct("<4sQHHIIQQQQ")
ZIP64_END_SIGNATURE = b"PK\x06\x06"
CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
CENTRAL_SIGNATURE = b"PK\x01\x02"
LOCAL = struct.Struct("<4sHHHHHIIIHH")
LOCAL_SIGNATURE = b"PK\x03\x04"
ZIP64_EXTRA = 0x0001
TORCH_FLAGS = 0x0808
"""Sizes in a data descriptor (bit 3) and UTF-8 names (bit 11): all torch ever sets."""
MAX_PICKLE = 256 * 1024 * 1024
"""A pickle member longer than this is not read (``data.pkl`` of 20,000 tensors is 2 MB)."""
MAX_DIRECTORY = 256 * 1024 * 1024


class Directory(NamedTuple):
    """Where the central directory is, from the end records."""

    entries: int
    offset: int
    size: int
    record: int
    """Offset of the classic end record."""
    end: int
    """Offset just past the classic end record and its comment."""
    first: bytes
    """The central directory's first ``_FIRST_ENTRY`` bytes: its first entry, read with the check that it starts there."""


class Member(NamedTuple):
    name: str
    flags: int
    method: int
    crc: int
    compressed: int
    size: int
    header: int
    data: int
    """Offset of the member's bytes, from its local header (-1 when that header is bad)."""


def probe(sample: Sample) -> FileReport:
    located = locate(sample)
    if isinstance(located, FileIssue):
        return FileReport(Format.TORCH_ZIP.value, (located,))
    facts = (("members", str(located.entries)),)
    issues = []
    if located.end < sample.size:
        issues.append(FileIssue(Problem.TRAILING_BYTES, f"{sample.size - located.end} bytes after the archive's end record"))
    issues += _held_member_issues(sample, located, held(sample))
    return FileReport(Format.TORCH_ZIP.value, tuple(issues), facts)


def locate(sample: Sample) -> Directory | FileIssue:
    """The central directory's place, or what about the end records is wrong."""
    tail = sample.tail(TAIL)
    tail_start = sample.size - len(tail)
    position = _find_end(tail)
    if position is None:
        return FileIssue(
            Problem.TRUNCATED,
            "no end-of-central-directory record at its end: the archive was cut short (torch: failed finding central directory)",
        )
    fields = END.unpack_from(tail, position)
    entries, cd_size, cd_offset, comment_length = fields[4], fields[5], fields[6], fields[7]
    end_at = tail_start + position
    cd_limit = end_at
    locator_at = end_at - ZIP64_LOCATOR.size
    if locator_at >= 0 and sample.range(locator_at, 4) == ZIP64_LOCATOR_SIGNATURE:
        zip64_at = ZIP64_LOCATOR.unpack(sample.range(locator_at, ZIP64_LOCATOR.size))[2]
        record = sample.range(zip64_at, ZIP64_END.size)
        if len(record) < ZIP64_END.size or not record.startswith(ZIP64_END_SIGNATURE):
            return FileIssue(Problem.MALFORMED, "its ZIP64 end record is missing or damaged")
        zip64 = ZIP64_END.unpack(record)
        entries, cd_size, cd_offset = zip64[7], zip64[8], zip64[9]
        cd_limit = zip64_at
    if cd_offset + cd_size != cd_limit:
        return FileIssue(
            Problem.MALFORMED,
            f"its central directory (at {cd_offset}, {cd_size} bytes) does not end where the "
            f"end record is ({cd_limit}): the archive was altered or spliced",
        )
    first = sample.range(cd_offset, min(cd_size, _FIRST_ENTRY)) if entries else b""
    if entries and not first.startswith(CENTRAL_SIGNATURE):
        return FileIssue(Problem.MALFORMED, "its central directory does not start where the end record says")
    return Directory(entries, cd_offset, cd_size, end_at, end_at + END.size + comment_length, first)


_FIRST_ENTRY = 1024
"""Bytes read at the central directory's start: its first entry whole, whatever name torch gives it
(one read, as long as the four bytes of its signature)."""


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


def _end_anomaly(sample: Sample, located: Directory) -> FileIssue | None:
    """Zip readers disagree on which end record counts: torch's takes the last signature even when
    its comment runs past the end of the file. A later end record than the one that fits, or zip
    records hidden in the comment, mean two tools read two different archives."""
    tail = sample.tail(TAIL)
    last = sample.size - len(tail) + tail.rfind(END_SIGNATURE)
    comment = sample.range(located.record + END.size, located.end - located.record - END.size)
    if last != located.record or b"PK\x01\x02" in comment or b"PK\x05\x06" in comment:
        return FileIssue(
            Problem.ZIP_ANOMALY,
            "it holds a second end-of-central-directory record (hidden in a comment, or past the end): torch "
            "reads one archive, zip tools and scanners another",
        )
    return None


def read_whole(sample: Sample, deep: int = 0) -> FileReport:
    """Everything about the archive; ``deep`` > 0 also reads every byte with that many threads."""
    located = locate(sample)
    if isinstance(located, FileIssue):
        return FileReport(Format.TORCH_ZIP.value, (located, *_salvage(sample), *_zipfile_view(sample)))
    if located.size > MAX_DIRECTORY:
        return _report(Problem.MALFORMED, f"declares a {located.size}-byte central directory, too large to be real")
    members, issues = list_members(sample, located)
    read, shared = distinct(members)
    issues += shared
    end_anomaly = _end_anomaly(sample, located)
    if end_anomaly:
        issues.append(end_anomaly)
    if located.end < sample.size:
        issues.append(FileIssue(Problem.TRAILING_BYTES, f"{sample.size - located.end} bytes after the archive's end record"))
    prefix = members[0].name.partition("/")[0] if members and "/" in members[0].name else None
    # torch (miniz) looks names up without regard to case: so does ckptdoctor
    by_name = {member.name.lower(): member for member in reversed(members)}
    pickle_member = by_name.get(f"{prefix}/data.pkl".lower()) if prefix else None
    if pickle_member is None:
        return _other_zip(sample, read, issues, deep)
    # list_members says where a header is missing; --deep checks every member's CRC, verify data.pkl's as inspect does
    disagreed = _disagreements(sample, [m for m in members if m.data >= 0], sample.size, None if deep else pickle_member)
    issues += [i for i in disagreed if not deep or i.problem is Problem.MALFORMED]
    script = f"{prefix}/constants.pkl" in {m.name for m in members}
    issues += _torch_anomalies(members, prefix or "", script)
    issues += _numpy_members(sample, read)
    walked = _walk_member(sample, pickle_member)
    if isinstance(walked, FileIssue):
        return FileReport(Format.TORCH_ZIP.value, (*issues, walked))
    resolved = _torchscript_type if script else None
    issues += judge(walked, "data.pkl", resolved)
    issues += weights_only_refusal(walked, "data.pkl")
    for member in read:
        if member.name.lower().endswith((".pkl", ".debug_pkl")) and member is not pickle_member:
            extra = _walk_member(sample, member)
            if isinstance(extra, FileIssue):
                issues.append(extra)
            else:
                issues += judge(extra, member.name.partition("/")[2], resolved)
    if script:
        issues.append(
            FileIssue(
                Problem.NON_WEIGHTS,
                "a TorchScript program (torch.jit.save): torch.load hands it to torch.jit.load, which compiles the "
                "TorchScript code in its code/ folder; it holds a model's code, not only its weights",
            )
        )
    byteorder = by_name.get(f"{prefix}/byteorder".lower())
    if byteorder is not None:
        order = member_bytes(sample, byteorder)
        if isinstance(order, bytes) and order not in (b"little", b"big"):
            issues.append(FileIssue(Problem.MALFORMED, f"its byteorder record says {order[:16]!r}; torch reads only little or big"))
    found = list(tensors(walked.root))
    listed, storage_issues, regions, tensor_bytes = _storages(found, walked.storages, by_name, prefix or "")
    issues += storage_issues
    if deep and not any(i.problem in (Problem.TRUNCATED, Problem.MALFORMED) for i in issues):
        issues += crc_issues(sample, read, regions, deep)
    numbers = tuple((f"{TOP_LEVEL_NUMBER}{key}", str(value)) for key, value in top_numbers(walked.root))
    paths = tuple((f"{RECORDED_PATH}{key}", value) for key, value in recorded_paths(walked.root, PATH_KEYS))
    facts = (("members", str(len(members))), *numbers, *paths)
    return FileReport(Format.TORCH_ZIP.value, tuple(issues), facts, listed, top_keys(walked.root), tensor_bytes)


def list_members(sample: Sample, directory: Directory) -> tuple[list[Member], list[FileIssue]]:
    blob = sample.range(directory.offset, directory.size)
    members: list[Member] = []
    issues: list[FileIssue] = []
    position = 0
    while position + CENTRAL.size <= len(blob) and len(members) < directory.entries:
        entry = _central_entry(sample, blob, position, len(members))
        issues += entry.issues
        if entry.member is None:
            break
        members.append(entry.member)
        position = entry.end
    if len(members) < directory.entries:
        issues.append(FileIssue(Problem.MALFORMED, f"the central directory lists {len(members)} of {directory.entries} members"))
    for member in members:
        if member.method == 0 and member.size != member.compressed:
            issues.append(
                FileIssue(Problem.MALFORMED, f"stored member {member.name} declares {member.size} bytes but occupies {member.compressed}")
            )
        elif member.data >= 0 and member.data + member.compressed > directory.offset:
            issues.append(FileIssue(Problem.MALFORMED, f"member {member.name} runs into the central directory"))
    return members, _at_most(issues, _SAID_PER_PROBLEM)


_SAID_PER_PROBLEM = 3
"""Entries' issues of one kind told one by one; the rest are counted (a bomb has thousands)."""


def _at_most(issues: list[FileIssue], count: int) -> list[FileIssue]:
    """``issues`` with no more than ``count`` of each problem, and a count of those left out."""
    kept: list[FileIssue] = []
    left_out: Counter[Problem] = Counter()
    for issue in issues:
        if sum(i.problem is issue.problem for i in kept) < count:
            kept.append(issue)
        else:
            left_out[issue.problem] += 1
    return kept + [FileIssue(problem, f"and {n} more entries of its central directory like these") for problem, n in left_out.items()]


class _CentralEntry(NamedTuple):
    member: Member | None
    """None where the entry is damaged past reading."""
    end: int
    issues: list[FileIssue]


def _central_entry(sample: Sample, blob: bytes, position: int, number: int) -> _CentralEntry:
    """The central directory entry at ``position`` of ``blob``, with its local header checked."""
    recorded = _recorded(blob, position)
    if recorded is None:
        return _CentralEntry(None, position, [FileIssue(Problem.MALFORMED, f"central directory entry {number} is damaged")])
    issues: list[FileIssue] = []
    if not recorded.zip64_read:
        issues.append(FileIssue(Problem.MALFORMED, f"member {recorded.member.name} has a damaged ZIP64 extra field"))
    member, local_issue = _located(sample, recorded)
    if local_issue:
        issues.append(local_issue)
    return _CentralEntry(member, recorded.end, issues)


class _Recorded(NamedTuple):
    """A central directory entry as it reads, its ZIP64 values in place of their sentinels."""

    member: Member
    """Its data offset still unknown (-1): the local header gives it."""
    raw_name: bytes
    end: int
    """Where in its blob the entry ends."""
    zip64_read: bool
    """False where its ZIP64 extra field claims more bytes than it has (the 32-bit values stand)."""


def _recorded(blob: bytes, position: int) -> _Recorded | None:
    """The central directory entry at ``position`` of ``blob``; None where no entry starts there."""
    fields = CENTRAL.unpack_from(blob, position)
    if fields[0] != CENTRAL_SIGNATURE:
        return None
    flags, method, crc, compressed, size = fields[3], fields[4], fields[7], fields[8], fields[9]
    name_length, extra_length, comment_length, header = fields[10], fields[11], fields[12], fields[16]
    start = position + CENTRAL.size
    raw_name = blob[start : start + name_length]
    zip64 = _zip64(blob[start + name_length : start + name_length + extra_length], size, compressed, header)
    if zip64 is not None:
        size, compressed, header = zip64
    member = Member(raw_name.decode("utf-8", "replace"), flags, method, crc, compressed, size, header, -1)
    return _Recorded(member, raw_name, start + name_length + extra_length + comment_length, zip64 is not None)


def _located(sample: Sample, recorded: _Recorded) -> tuple[Member, FileIssue | None]:
    """The member with its data offset from its local header, and what is wrong with that header."""
    data, issue = _local(sample, recorded.member.header, recorded.raw_name, recorded.member.name)
    return Member(*recorded.member[:-1], data), issue


_DESCRIPTOR_SIGNATURE = b"PK\x07\x08"
_DESCRIPTOR_LONGEST = 24
"""A data descriptor with its signature and 64-bit sizes (ZIP64)."""


def _held_member_issues(sample: Sample, directory: Directory, reach: int) -> list[FileIssue]:
    """The members whose local headers ``inspect`` holds already (the file's first ``reach`` bytes
    and its tail), against their entries in the central directory at the archive's end, as far as
    it holds that directory (see ``_disagreements``); a member whose name differs is a zip trick."""
    whole = _in_hand(sample, directory.offset, directory.size, reach)
    blob = sample.range(directory.offset, directory.size) if whole else directory.first
    members: list[Member] = []
    renamed: list[FileIssue] = []
    position = 0
    for _ in range(directory.entries):
        fields = CENTRAL.unpack_from(blob, position) if position + CENTRAL.size <= len(blob) else None
        if fields is None or fields[0] != CENTRAL_SIGNATURE:
            break  # verify reads the directory whole and says what is wrong with it
        end = position + CENTRAL.size + fields[10] + fields[11] + fields[12]
        # a header past 4 GiB is in the ZIP64 extra field: read every entry that may be in hand
        if end <= len(blob) and (fields[16] == 0xFFFFFFFF or _in_hand(sample, fields[16], LOCAL.size + fields[10], reach)):
            recorded = _recorded(blob, position)
            if recorded is not None and recorded.zip64_read and _in_hand(sample, recorded.member.header, LOCAL.size + fields[10], reach):
                member, named_otherwise = _located(sample, recorded)
                members.append(member)
                renamed += [named_otherwise] if named_otherwise else []
        position = end
    # the bytes of the first member alone (torch's data.pkl) against its CRC-32: tensors' under --deep
    found = _disagreements(sample, members, reach, members[0] if members and members[0].header == 0 else None)
    return found if any(i.problem is Problem.MALFORMED for i in found) else [*renamed, *found]


def disagreements(sample: Sample, members: list[Member], reach: int, loader: str) -> list[FileIssue]:
    """The members whose own record (local header, data descriptor) lies within ``reach`` (or the
    tail) and is not as the central directory describes it (see ``_disagreements``), worded for
    ``loader``: a torn file whose start is one save's and whose end, directory and CRCs another's."""
    return _disagreements(sample, [m for m in members if m.data >= 0], reach, None, loader)


def _disagreements(
    sample: Sample, members: list[Member], reach: int, checked: Member | None, loader: str = "torch.load"
) -> list[FileIssue]:
    """Members whose bytes the central directory does not describe, looking no further than
    ``reach`` (and the file's tail): no local header where it places one, or a data descriptor
    that is not where its size says (CKD207); a descriptor that records another CRC-32, or bytes
    of ``checked`` (within ``reach`` or the tail) that do not match it (CKD206).
    An in-place copy or a write cut off over an older file (``rsync --inplace``) leaves one save's
    start before another's end, and torch reads the start through the end's directory, never
    checking a CRC: a pickle cut short, a header not where it looks, or silently a mix of both
    saves' tensors."""
    torn: list[str] = []
    changed: list[str] = []
    for member in members:
        recorded = _recorded_crc(sample, member, reach)
        if recorded is None:
            torn.append(member.name)
        elif recorded not in (member.crc, _UNRECORDED) or (member is checked and _crc_differs(sample, member, reach)):
            changed.append(member.name)
    if torn:
        return [
            FileIssue(
                Problem.MALFORMED,
                f"the central directory at its end does not place or size {_some(torn)} as {'they lie' if len(torn) > 1 else 'it lies'} "
                "at its start: its start and its end are from two saves (an in-place copy or a write cut off over an older file: "
                f"rsync --inplace); {loader} fails on it or reads a mix of both saves",
            )
        ]
    if changed:
        return [
            FileIssue(
                Problem.CRC_MISMATCH,
                f"{_some(changed)} {'do' if len(changed) > 1 else 'does'} not match the CRC-32 its central directory records: "
                f"the bytes changed after saving, or its start and end are from two saves (a copy cut off); {loader} does "
                "not check and would read them as they are",
            )
        ]
    return []


_UNRECORDED = -1
"""What ``_recorded_crc`` gives where the member's own record is not in hand, or holds no CRC."""


def _recorded_crc(sample: Sample, member: Member, reach: int) -> int | None:
    """The CRC-32 the member's own record holds (its data descriptor, or its local header), where
    that record gives the directory's sizes; None where it does not, or there is no local header."""
    if member.data < 0:
        return None
    if member.flags & 0x8:  # CRC and sizes in a data descriptor after the member's bytes
        end = member.data + member.compressed
        if not _in_hand(sample, end, _DESCRIPTOR_LONGEST, reach):
            return _UNRECORDED
        return _descriptor(sample.range(end, _DESCRIPTOR_LONGEST), member)
    if not _in_hand(sample, member.header, LOCAL.size, reach):
        return _UNRECORDED
    crc, *sizes = LOCAL.unpack(sample.range(member.header, LOCAL.size))[6:9]
    if any(own not in (wanted, 0xFFFFFFFF) for own, wanted in zip(sizes, (member.compressed, member.size), strict=True)):
        return None
    return _UNRECORDED if crc == 0xFFFFFFFF else int(crc)


def _crc_differs(sample: Sample, member: Member, reach: int) -> bool:
    """Whether a stored member within ``reach`` (or the tail) does not match the CRC-32 the
    directory records (one of 0: saved with CRCs off)."""
    if member.method != 0 or not member.crc or not _in_hand(sample, member.data, member.compressed, reach):
        return False
    return zlib.crc32(sample.range(member.data, member.compressed)) != member.crc


def _some(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _in_hand(sample: Sample, offset: int, length: int, reach: int) -> bool:
    """Whether ``length`` bytes at ``offset`` lie within the file's first ``reach`` bytes or its tail."""
    return offset >= 0 and offset + length <= sample.size and (offset + length <= reach or offset >= sample.size - TAIL)


def _descriptor(record: bytes, member: Member) -> int | None:
    """The CRC-32 a data descriptor records (its signature optional; sizes of 32 or 64 bits), where
    it records the member's sizes; None where it does not."""
    body = record[len(_DESCRIPTOR_SIGNATURE) :] if record.startswith(_DESCRIPTOR_SIGNATURE) else record
    for layout in _DESCRIPTOR_LAYOUTS:
        if len(body) >= layout.size:
            crc, compressed, size = layout.unpack_from(body)
            if compressed == member.compressed and size == member.size:
                return int(crc)
    return None


_DESCRIPTOR_LAYOUTS = (struct.Struct("<III"), struct.Struct("<IQQ"))


SKIM_LIMIT = 4 * 1024 * 1024
"""The longest ``data.pkl`` whose keys ``inspect`` skims (20,000 tensors take about 2 MB)."""


def top_level(sample: Sample) -> Skimmed | None:
    """The top-level keys of the object a torch archive holds, skimmed from its ``data.pkl``;
    None where that cannot be done cheaply."""
    data = first_pickle(sample)
    return None if data is None else skim(data)


def first_pickle(sample: Sample) -> bytes | None:
    """The archive's ``data.pkl``, read where torch writes it (first, and stored) when it is no
    longer than ``SKIM_LIMIT``; None otherwise."""
    member = pickle_record(sample)
    if member is None or member.size > SKIM_LIMIT:
        return None
    data = sample.range(member.data, member.size)
    return data if len(data) == member.size else None


def pickle_record(sample: Sample) -> Member | None:
    """The archive's ``data.pkl`` as its central directory records it (its CRC-32 and size: the
    pickle holds a save's counters, so it tells one save from another), where torch writes it:
    first, and stored. None where the directory cannot be read or begins otherwise."""
    located = locate(sample)
    if isinstance(located, FileIssue) or len(located.first) < CENTRAL.size:
        return None
    first = _central_entry(sample, located.first, 0, 0)
    member = first.member
    if first.issues or member is None or not member.name.endswith("/data.pkl") or member.name.count("/") != 1:
        return None
    return member if member.method == 0 and member.data >= 0 else None


def holds_pickle(sample: Sample, crc: int, size: int) -> bool:
    """Whether the archive's ``data.pkl`` has this CRC-32 and size: as its own central directory
    records them, or, where that directory is cut off or damaged (a save killed or truncated),
    as the bytes after its first local header hold them (torch writes ``data.pkl`` first, with
    its CRC in a data descriptor, so only the bytes themselves tell it there)."""
    member = pickle_record(sample)
    if member is not None:
        return (member.crc, member.size) == (crc, size)
    header = sample.range(0, LOCAL.size)
    if len(header) < LOCAL.size or not header.startswith(LOCAL_SIGNATURE):
        return False
    name_length, extra_length = LOCAL.unpack(header)[9:11]
    name = sample.range(LOCAL.size, name_length)
    if not name.endswith(b"/data.pkl") or name.count(b"/") != 1:
        return False
    data = sample.range(LOCAL.size + name_length + extra_length, size)
    return len(data) == size and zlib.crc32(data) == crc


def _zip64(extra: bytes, size: int, compressed: int, header: int) -> tuple[int, int, int] | None:
    """Sizes and offset with ZIP64's 64-bit values in place of the 32-bit sentinels; None when the
    extra field claims more bytes than it has."""
    position = 0
    while position + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, position)
        if kind == ZIP64_EXTRA:
            if position + 4 + length > len(extra):
                return None
            values = list(struct.unpack_from(f"<{min(length, 24) // 8}Q", extra, position + 4))
            if size == 0xFFFFFFFF and values:
                size = values.pop(0)
            if compressed == 0xFFFFFFFF and values:
                compressed = values.pop(0)
            if header == 0xFFFFFFFF and values:
                header = values.pop(0)
        position += 4 + length
    return size, compressed, header


def _local(sample: Sample, header: int, raw_name: bytes, name: str) -> tuple[int, FileIssue | None]:
    fields = sample.range(header, LOCAL.size)
    if len(fields) < LOCAL.size or not fields.startswith(LOCAL_SIGNATURE):
        return -1, FileIssue(Problem.MALFORMED, f"member {name} has no local header where the directory says")
    name_length, extra_length = LOCAL.unpack(fields)[9:11]
    local_name = sample.range(header + LOCAL.size, name_length)
    data = header + LOCAL.size + name_length + extra_length
    if local_name != raw_name:
        shown = local_name.decode("utf-8", "replace")
        return data, FileIssue(
            Problem.ZIP_ANOMALY,
            f"member {name} is called {shown} in its local header: scanners that read one name and loaders "
            "that read the other see different files",
        )
    return data, None


def _numpy_members(sample: Sample, members: list[Member]) -> list[FileIssue]:
    """What ``numpy.load(allow_pickle=True)`` would run of the archive's members: it reads any
    member that starts with the NumPy magic as an array, whatever its name."""
    issues: list[FileIssue] = []
    for member in members:
        if member.data < 0 or member.flags & 0x1:
            continue
        try:
            with one_budget(_inflated_budget(member.compressed, member.method)) as budget:
                if not _first_bytes(sample, member, len(npy.MAGIC), budget).startswith(npy.MAGIC):
                    continue
                found = npy.read_chunks(member_chunks(sample, member, budget), member.name, member.size).issues
        except Damaged:
            continue  # damaged members are the archive's own findings; numpy.load stops at them
        except OverBudget as spent:
            found = (unchecked(member.name, spent),)
        issues += [i for i in found if i.problem is Problem.UNSAFE_PICKLE]
    return issues


def _zipfile_view(sample: Sample) -> list[FileIssue]:
    """What Python's ``zipfile`` (``numpy.load`` of an ``.npz``) finds where torch's reader finds no
    archive: zipfile shifts every offset by bytes prepended to the archive or left before its
    end record, so it may read members that torch cannot."""
    # imported when a file needs it: start-up stays lean
    import zipfile

    issues: list[FileIssue] = []
    try:
        with zipfile.ZipFile(SampleReader(sample)) as archive:
            seen: set[int] = set()
            for info in archive.infolist()[:MAX_VIEWED]:
                if info.header_offset in seen:
                    continue  # one local header under many entries: read once
                seen.add(info.header_offset)
                with archive.open(info) as handle, one_budget(_inflated_budget(info.compress_size, info.compress_type)) as budget:
                    first = handle.read(len(npy.MAGIC))
                    if first != npy.MAGIC:
                        continue
                    chunks = charged(itertools.chain((first,), iter(lambda: handle.read(INFLATED_CHUNK), b"")), budget)
                    try:
                        found = npy.read_chunks(chunks, info.filename, info.file_size).issues
                    except OverBudget as spent:
                        found = (unchecked(info.filename, spent),)
                issues += [i for i in found if i.problem is Problem.UNSAFE_PICKLE]
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError, RuntimeError, zlib.error):
        pass  # zipfile refuses it too: numpy.load stops
    return issues


MAX_VIEWED = 100_000
"""Members of a zip looked at through ``zipfile``."""


def _inflated_budget(compressed: int, method: int) -> Budget:
    """A compressed member's pickle may take opcodes in proportion to its compressed size: a few
    KiB that inflate into millions of opcodes are a bomb (stored members share the file's budget,
    and every member's spending is the file's too)."""
    if method == 0:
        return current_budget()
    return Budget(steps=16 * compressed + 65_536, parent=current_budget(), scope="one compressed member")


def _torchscript_type(dotted: str) -> bool:
    """Globals TorchScript's own unpickler resolves without importing Python: the archive's compiled
    classes (``__torch__.*``) and its list and type-tag helpers."""
    return dotted.startswith(("__torch__.", "torch.jit._pickle."))


_SCRIPT_COMPRESSED = ("code/", ".debug_pkl")
"""Members ``torch.jit.save`` deflates: TorchScript source and its debug tables."""


def _torch_anomalies(members: list[Member], prefix: str, script: bool) -> list[FileIssue]:
    issues: list[FileIssue] = []
    duplicates = [name for name, count in Counter(m.name.lower() for m in members).items() if count > 1]
    if duplicates:
        issues.append(
            FileIssue(
                Problem.ZIP_ANOMALY,
                f"members stored twice, or in two spellings torch does not tell apart ({', '.join(duplicates[:3])}): "
                "loaders and scanners may each read a different copy",
            )
        )
    each: list[FileIssue] = []
    for member in members:
        relative = member.name.partition("/")[2]
        scripted = (
            script and member.method == 8 and (relative.startswith(_SCRIPT_COMPRESSED[0]) or relative.endswith(_SCRIPT_COMPRESSED[1]))
        )
        anomaly = _flag_anomaly(member) or (
            f"member {member.name} is compressed (method {member.method}); torch never compresses, and torch.load(mmap=True) fails on it"
            if member.method != 0 and not scripted
            else None
        )
        if anomaly:
            each.append(FileIssue(Problem.ZIP_ANOMALY, anomaly))
    issues += _at_most(each, _SAID_PER_PROBLEM)
    outside = [m.name for m in members if not m.name.startswith(f"{prefix}/")]
    if outside:
        issues.append(
            FileIssue(
                Problem.ZIP_ANOMALY,
                f"members outside the archive's {prefix}/ folder ({', '.join(outside[:3])}): torch refuses them "
                "(file in archive is not in a subdirectory)",
            )
        )
    return issues


_LZMA_END_MARKER = 0x0002
"""Bit 1 of an LZMA member: its stream ends with an end marker (what zipfile writes)."""


def _flag_anomaly(member: Member) -> str | None:
    odd = member.flags & ~TORCH_FLAGS & ~(_LZMA_END_MARKER if member.method == 14 else 0)
    if not odd:
        return None
    what = "is marked encrypted" if odd & 0x1 else f"has flag bits {odd:#x} set"
    return f"member {member.name} {what}: torch ignores these bits, while zip libraries and scanners refuse the member"


def member_bytes(sample: Sample, member: Member) -> bytes | FileIssue:
    """A member's bytes whole (a small record: ``byteorder``, a Keras config), or why not."""
    if member.size > MAX_PICKLE or member.compressed > MAX_PICKLE:
        return FileIssue(Problem.MALFORMED, f"member {member.name} is {member.size} bytes: too large to analyse")
    try:
        if member.method == 0 and member.data >= 0:
            raw = sample.range(member.data, member.compressed)
            if len(raw) < member.compressed:
                raise Damaged(FileIssue(Problem.TRUNCATED, f"member {member.name} is cut short"))
            return raw
        return b"".join(member_chunks(sample, member))
    except Damaged as damaged:
        return damaged.issue
    except OverBudget as spent:
        return unchecked(member.name, spent)


class Damaged(Exception):
    """A member that cannot be located, is cut short or does not decompress: ``issue`` says which."""

    def __init__(self, issue: FileIssue) -> None:
        super().__init__(issue.detail)
        self.issue = issue


def unchecked(name: str, spent: OverBudget) -> FileIssue:
    """The error-level finding for a member a budget stopped: never clean."""
    return FileIssue(Problem.UNSAFE_PICKLE, f"cannot check member {name} fully: {spent}; a loader would read on")


INFLATED_CHUNK = 1024 * 1024
"""The most bytes a member inflates to at once: a reader that needs a header holds no more."""
_FIRST_CHUNK = 64 * 1024
"""A member's first chunk, read or inflated: an ``.npy`` header is in it, and no more is inflated."""


def member_chunks(sample: Sample, member: Member, budget: Budget | None = None) -> Iterator[bytes]:
    """A member's bytes a chunk at a time, inflated as they are asked for, so that a reader stops
    inflating where its question is answered (a bomb inflates to no more than it reads); each
    inflated chunk is charged to ``budget`` (``OverBudget`` past it). Raises ``Damaged`` where the
    member cannot be located, is cut short or does not decompress."""
    if member.data < 0:
        raise Damaged(FileIssue(Problem.MALFORMED, f"member {member.name} cannot be located"))
    end = member.data + member.compressed
    if end > sample.size:
        raise Damaged(FileIssue(Problem.TRUNCATED, f"member {member.name} is cut short"))
    raw = _raw(sample, member)
    if member.method == 0:
        yield from raw
        return
    if member.method not in _INFLATERS:
        raise Damaged(
            FileIssue(
                Problem.UNSAFE_PICKLE,
                f"member {member.name} uses compression method {member.method}, which ckptdoctor cannot open: what a loader "
                "would read from it cannot be proven safe",
            )
        )
    yield from charged(_inflating(member, raw), budget or current_budget())


def _raw(sample: Sample, member: Member) -> Iterator[bytes]:
    """A member's bytes as stored, a block at a time (a small one first: a header is near)."""
    offset, end, size = member.data, member.data + member.compressed, _FIRST_CHUNK
    while offset < end:
        yield sample.range(offset, min(size, end - offset))
        offset, size = offset + size, deep_scan.BLOCK


def charged(chunks: Iterable[bytes], budget: Budget) -> Iterator[bytes]:
    """``chunks`` of decompressed bytes, each charged to ``budget`` before it is handed on."""
    for chunk in chunks:
        budget.inflate(len(chunk))
        yield chunk


def _inflating(member: Member, raw: Iterator[bytes]) -> Iterator[bytes]:
    try:
        yield from _INFLATERS[member.method](raw)
    except Exception as error:  # zlib.error, OSError, lzma.LZMAError, EOFError, struct.error: it is damaged
        raise Damaged(FileIssue(Problem.MALFORMED, f"member {member.name} does not decompress ({error})")) from None


def _deflated(raw: Iterator[bytes]) -> Iterator[bytes]:
    inflater = zlib.decompressobj(-15)
    size = _FIRST_CHUNK
    for data in raw:
        while data and not inflater.eof:
            yield inflater.decompress(data, size)
            data, size = inflater.unconsumed_tail, INFLATED_CHUNK
    yield inflater.flush()


def _bzip2(raw: Iterator[bytes]) -> Iterator[bytes]:
    """bzip2: zipfile (numpy.load) reads it, torch does not."""
    # imported when a file needs it: start-up stays lean
    import bz2

    yield from _unbounded(bz2.BZ2Decompressor(), raw)


def _lzma(raw: Iterator[bytes]) -> Iterator[bytes]:
    """LZMA: a 4-byte version and properties length, the properties, a raw stream."""
    # imported when a file needs it: start-up stays lean
    import lzma

    first = next(raw, b"")
    (properties,) = struct.unpack_from("<H", first, 2)
    decoder = lzma._decode_filter_properties(lzma.FILTER_LZMA1, first[4 : 4 + properties])  # type: ignore[attr-defined]
    decompressor = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[decoder])
    yield from _unbounded(decompressor, itertools.chain((first[4 + properties :],), raw))


def _unbounded(decompressor: Any, raw: Iterator[bytes]) -> Iterator[bytes]:
    """Output of a bz2 or LZMA decompressor, a bounded chunk at a time."""
    size = _FIRST_CHUNK
    for data in raw:
        if decompressor.eof:
            return
        yield decompressor.decompress(data, size)
        size = INFLATED_CHUNK
        while not decompressor.needs_input and not decompressor.eof:
            yield decompressor.decompress(b"", size)


_INFLATERS: dict[int, Callable[[Iterator[bytes]], Iterator[bytes]]] = {8: _deflated, 12: _bzip2, 14: _lzma}


def _first_bytes(sample: Sample, member: Member, count: int, budget: Budget) -> bytes:
    """A member's first ``count`` bytes (fewer where it is shorter), inflating no more than needed."""
    if member.method == 0:
        return sample.range(member.data, min(member.compressed, count))
    if member.method == 8:  # a few compressed bytes hold the first few inflated ones
        try:
            return zlib.decompressobj(-15).decompress(sample.range(member.data, min(member.compressed, 4096)), count)
        except zlib.error:
            return b""
    first = b""
    for chunk in member_chunks(sample, member, budget):
        first += chunk[: count - len(first)]
        if len(first) >= count:
            break
    return first


def _walk_member(sample: Sample, member: Member) -> Walk | FileIssue:
    """A pickle member walked with torch's opcodes: a stored one read whole, a compressed one
    inflated no further than its STOP, within a budget in proportion to its compressed size."""
    if member.method == 0:
        data = member_bytes(sample, member)
        return data if isinstance(data, FileIssue) else walk(data, opcodes=TORCH_OPCODES)
    try:
        with one_budget(_inflated_budget(member.compressed, member.method)) as budget:
            return walk_chunks(member_chunks(sample, member, budget), opcodes=TORCH_OPCODES)
    except Damaged as damaged:
        return damaged.issue


def distinct(members: list[Member]) -> tuple[list[Member], list[FileIssue]]:
    """The members to read, each stream of bytes once, and the zip trick where entries share
    bytes: central directory entries that point at one local header (under one name or many), or
    whose ranges overlap. No writer does this; a bomb does, to make a scanner inflate one stream
    thousands of times, and so does a file showing loaders and scanners two names for one content."""
    shared: list[str] = []
    overlapped: set[int] = set()
    reach = -1
    for number, member in sorted(enumerate(members), key=lambda pair: pair[1].header):
        if member.data < 0:
            continue  # no local header: list_members reports it
        if member.header < reach:
            shared.append(member.name)
            overlapped.add(number)
        reach = max(reach, member.data + member.compressed)
    if not shared:
        return members, []
    kept = [member for number, member in enumerate(members) if number not in overlapped]
    issue = FileIssue(
        Problem.ZIP_ANOMALY,
        f"{len(shared)} central directory entr{'ies' if len(shared) > 1 else 'y'} ({_some(shared)}) point at bytes "
        "another entry holds (one local header, or overlapping ranges): a zip trick no writer uses, one stream read as "
        "many members (a zip bomb), or one content under two names; ckptdoctor read each stream once",
    )
    return kept, [issue]


def _storages(
    found: list[tuple[str, TensorRef]], storages: list[Storage], by_name: dict[str, Member], prefix: str
) -> tuple[tuple[Tensor, ...], list[FileIssue], list[deep_scan.Region], int]:
    """Tensors as listed, what is wrong with them and with every storage (each against its
    ``data/<key>`` member), the float storages to scan, and the bytes of all storages."""
    listed: list[Tensor] = []
    issues: list[FileIssue] = []
    dtype_of: dict[str, str] = {}
    for name, ref in found:
        element = TORCH_SIZES.get(ref.dtype)
        if element is None or min((*ref.size, *ref.stride, ref.offset), default=0) < 0:
            issues.append(FileIssue(Problem.MALFORMED, f"tensor {name} has an unknown dtype or a negative size, stride or offset"))
            continue
        storage = ref.storage
        listed.append(Tensor(name, ref.dtype, ref.size, math.prod(ref.size) * element, storage.location if storage else "meta"))
        if storage is None:
            continue
        dtype_of.setdefault(storage.key, ref.dtype)
        storage_bytes = _storage_bytes(storage)
        extent = _extent(ref) * element
        if storage_bytes is not None and extent > storage_bytes:
            issues.append(FileIssue(Problem.MALFORMED, f"tensor {name} reaches byte {extent} of a {storage_bytes}-byte storage"))
    regions: list[deep_scan.Region] = []
    total = 0
    seen: set[str] = set()
    not_weights = outside_weights(found)
    masked = masks(found)
    for storage in storages:
        if storage.key in seen:
            continue
        seen.add(storage.key)
        member = by_name.get(f"{prefix}/data/{storage.key}".lower())
        expected = _storage_bytes(storage)
        if member is None:
            issues.append(
                FileIssue(
                    Problem.MALFORMED,
                    f"storage {storage.key} has no member data/{storage.key} (torch: failed locating file data/{storage.key})",
                )
            )
        elif expected is None:
            issues.append(FileIssue(Problem.MALFORMED, f"storage {storage.key} is of an unknown type ({storage.dtype})"))
        elif member.size != expected:
            issues.append(
                FileIssue(
                    Problem.MALFORMED,
                    f"member data/{storage.key} holds {member.size} bytes but its storage needs {expected} "
                    "(torch: record size does not match expected size)",
                )
            )
        else:
            total += member.size
            dtype = storage.dtype or dtype_of.get(storage.key)
            if dtype in NONFINITE_SCANNED and member.method == 0 and member.data >= 0 and storage.key not in not_weights:
                regions.append(deep_scan.Region(member.data, member.size, dtype, infinite=storage.key in masked))
    return tuple(listed), issues, regions, total


def _storage_bytes(storage: Storage) -> int | None:
    if storage.dtype is None:
        return storage.numel  # untyped: counted in bytes
    element = TORCH_SIZES.get(storage.dtype)
    return None if element is None or storage.numel < 0 else storage.numel * element


def _extent(ref: TensorRef) -> int:
    if any(dim == 0 for dim in ref.size):
        return 0
    return ref.offset + sum((dim - 1) * stride for dim, stride in zip(ref.size, ref.stride, strict=False)) + 1


TORCH_IGNORES_CRC = "torch.load would return wrong values silently"


def crc_issues(
    sample: Sample, members: list[Member], floats: list[deep_scan.Region], threads: int, loader: str = TORCH_IGNORES_CRC
) -> list[FileIssue]:
    """Members whose bytes do not match their CRC-32, and storages that hold NaN or Inf;
    ``loader`` says what the archive's loader makes of a mismatch."""
    stored = [m for m in members if m.method == 0 and m.data >= 0]
    recorded = any(m.crc for m in stored if m.size)
    by_offset = {region.offset: region for region in floats}
    regions = [
        by_offset[m.data]._replace(crc=recorded) if m.data in by_offset else deep_scan.Region(m.data, m.size, crc=recorded) for m in stored
    ]
    try:
        results = deep_scan.check(sample, regions, threads)
    except deep_scan.FileChanged as changed:
        return [FileIssue(Problem.UNREADABLE, str(changed))]
    issues: list[FileIssue] = []
    bad = [m.name for m, r in zip(stored, results, strict=True) if r.crc is not None and r.crc != m.crc]
    bad += [m.name for m in members if m.method == 8 and m.data >= 0 and _inflated_crc(sample, m) != m.crc]
    if bad:
        issues.append(
            FileIssue(
                Problem.CRC_MISMATCH,
                f"{len(bad)} member{'s' if len(bad) > 1 else ''} ({', '.join(bad[:3])}) do not match their recorded CRC-32: "
                f"the bytes changed after saving, and {loader}",
            )
        )
    nonfinite = [(m.name, r.nonfinite) for m, r in zip(stored, results, strict=True) if r.nonfinite]
    if nonfinite:
        total = sum(count for _, count in nonfinite)
        names = ", ".join(name.partition("/")[2] for name, _ in nonfinite[:3])
        issues.append(FileIssue(Problem.NONFINITE, f"{total} NaN or Inf values in {len(nonfinite)} storages ({names})"))
    return issues


def _inflated_crc(sample: Sample, member: Member) -> int | None:
    """CRC-32 of a DEFLATE member's inflated bytes, streamed (a chunk in memory at a time, the
    output zlib still holds at the end included); None when it does not inflate to the size the
    directory records."""
    crc = 0
    size = 0
    try:
        for out in _deflated(_raw(sample, member)):
            crc = zlib.crc32(out, crc)
            size += len(out)
            if size > member.size:
                return None
    except zlib.error:
        return None
    return crc if size == member.size else None


def _salvage(sample: Sample) -> list[FileIssue]:
    """A cut archive still starts with ``data.pkl``: check what loading it would run."""
    head = sample.range(0, LOCAL.size)
    if len(head) < LOCAL.size or not head.startswith(LOCAL_SIGNATURE):
        return []
    name_length, extra_length = LOCAL.unpack(head)[9:11]
    name = sample.range(LOCAL.size, name_length)
    if not name.endswith(b"/data.pkl"):
        return []
    start = LOCAL.size + name_length + extra_length
    walked = walk(sample.range(start, min(sample.size - start, MAX_PICKLE)), opcodes=TORCH_OPCODES)
    walked.error = None  # the cut is already reported; only what it imports matters here
    return judge(walked, "data.pkl")


def _other_zip(sample: Sample, members: list[Member], issues: list[FileIssue], deep: int) -> FileReport:
    """A zip that is not a torch archive: NumPy's ``.npz``, pandas' ``.pkl.zip`` (one pickle), or
    pickles wrapped to pass for one (a torch name's promise is the name check's, ``files._judge_content``)."""
    arrays: list[Tensor] = []
    contents: list[str] = []
    for member in members:
        anomaly = _flag_anomaly(member)
        if anomaly:
            issues.append(FileIssue(Problem.ZIP_ANOMALY, anomaly))
        if member.flags & 0x1 and member.method != 0:
            issues.append(FileIssue(Problem.ZIP_ANOMALY, f"member {member.name} is encrypted: it cannot be checked"))
            continue
        try:
            with one_budget(_inflated_budget(member.compressed, member.method)) as budget:
                first = _first_bytes(sample, member, 64, budget) if member.data >= 0 else b""
                kind = sniff_payload(first) if first else Format.EMPTY
                if kind is Format.NUMPY or member.name.endswith(".npy"):
                    report = npy.read_chunks(member_chunks(sample, member, budget), member.name.removesuffix(".npy"), member.size)
                    arrays += report.tensors or ()
                    issues += report.issues
                    contents.append("numpy")
                elif kind is Format.PICKLE or member.name.endswith((".pkl", ".pickle")):
                    issues += judge(walk_chunks(member_chunks(sample, member, budget)), member.name)
                    contents.append("pickle")
        except Damaged as damaged:
            issues.append(damaged.issue)
        except OverBudget as spent:
            issues.append(unchecked(member.name, spent))
    if deep and not any(i.problem in (Problem.TRUNCATED, Problem.MALFORMED) for i in issues):
        issues += crc_issues(sample, members, [], deep)
    # pandas' to_pickle to a `.zip` writes one member, which its read_pickle unpickles: that zip is what it reads
    if not contents or ("pickle" in contents and len(members) > 1):
        issues.insert(0, FileIssue(Problem.NOT_A_CHECKPOINT, "a zip archive, not a torch checkpoint: it has no <folder>/data.pkl"))
    fmt = Format.NUMPY.value if contents and set(contents) == {"numpy"} else Format.ZIP.value
    return FileReport(fmt, tuple(issues), (), tuple(arrays), (), sum(t.nbytes for t in arrays))


def _report(problem: Problem, detail: str) -> FileReport:
    return FileReport(Format.TORCH_ZIP.value, (FileIssue(problem, detail),))


_TORCH_MEMBERS = (b"data.pkl", b"version", b".format_version", b"byteorder", b"constants.pkl")
_TORCH_FOLDERS = (b"data/", b".data/", b"code/", b"extra/")


def first_member(head: bytes) -> bytes:
    name_length: int = struct.unpack_from("<H", head, 26)[0]
    return head[30 : 30 + name_length]


def _torch_archive(head: bytes, sample: Sample) -> bool:
    """torch's archives put every member under one ``<prefix>/``; ``torch.save`` writes
    ``data.pkl`` first, TorchScript may lead with ``extra/`` or ``code/``. A head cut inside the
    first header is judged as one, by this reader."""
    if not begins(head, ZIP_LOCAL):
        return False
    if len(head) < 30:
        return True
    _, slash, member = first_member(head).partition(b"/")
    return bool(slash) and (member in _TORCH_MEMBERS or member.startswith(_TORCH_FOLDERS))


def _npz(head: bytes, sample: Sample) -> bool:
    """A zip of ``.npy`` members (``numpy.savez``)."""
    if len(head) < 30 or not head.startswith(ZIP_LOCAL):
        return False
    return first_member(head).endswith(b".npy")


def _probe_numpy(sample: Sample) -> FileReport:
    """An ``.npy`` file's header; an ``.npz`` archive is read by ``verify`` only."""
    return npy.read_header(sample) if sample.head(len(npy.MAGIC)) == npy.MAGIC else FileReport(Format.NUMPY.value)


def _read_whole_numpy(sample: Sample, deep: int = 0) -> FileReport:
    return read_whole(sample, deep) if sample.head(len(ZIP_LOCAL)) == ZIP_LOCAL else npy.read(sample)


SPECS = (
    ReaderSpec(
        Format.TORCH_ZIP,
        (Sniff(Rank.MAGIC, _torch_archive),),
        TORCH_SAVE_SUFFIXES,
        probe,
        read_whole,
        read_any_name=True,
        loaded_by=Library.TORCH_MMAP,
    ),
    ReaderSpec(
        Format.NUMPY,
        (Sniff(Rank.MAGIC + 1, _npz), Sniff(Rank.PAYLOAD, lambda head, sample: head.startswith(npy.MAGIC))),
        ((".npy", Naming.CONTENT), (".npz", Naming.CONTENT)),
        _probe_numpy,
        _read_whole_numpy,
        read_any_name=True,
    ),
    ReaderSpec(
        Format.ZIP,
        (Sniff(Rank.MAGIC + 2, lambda head, sample: head.startswith(ZIP_LOCAL)),),
        ((".npz", Naming.CONTENT),),
        read_whole=read_whole,
        read_any_name=True,
    ),
)
