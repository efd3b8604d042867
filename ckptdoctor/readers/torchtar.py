"""torch's oldest format: a tar of ``storages``, ``tensors`` and ``pickle``, read as torch reads it.

``torch.load`` (``_legacy_load``) tries ``tarfile`` first on any file that is not a zip. It
extracts ``storages`` and ``tensors`` to a folder and opens them there, so a member that is a
link reads whatever the link names on the disk; ``pickle`` it reads with ``extractfile``, which
follows links inside the archive. Members of a type ``tarfile`` does not know are regular files,
and of two members of one name the last counts. Each member holds pickles back to back with raw
bytes between them; their counts and record shapes decide where the next pickle starts, so a
count or a record that is not a plain literal leaves the rest unproven (CKD401).

When ``tarfile`` raises a ``TarError`` part-way, torch reads the file from its first byte as
pickles instead: that reading is walked too.
"""

from __future__ import annotations

import os
import struct
from typing import IO, TYPE_CHECKING

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers._registry import Rank, ReaderSpec, Sniff
from ckptdoctor.readers.dtypes import TORCH_SIZES, TORCH_STORAGES
from ckptdoctor.readers.pickle import TORCH_SAVE_SUFFIXES, read_whole_pickle
from ckptdoctor.readers.pickle_safety import judge
from ckptdoctor.readers.sample import Sample, SampleReader
from ckptdoctor.readers.sniff import Format
from ckptdoctor.readers.unpickler import Global, walk

if TYPE_CHECKING:
    import tarfile

MAX_MEMBER = 256 * 1024 * 1024
"""A member longer than this is not read: the rest of it is unproven."""
MAX_RECORDS = 1_000_000
_COUNT = struct.Struct("<q")
_TENSOR_HEAD = struct.Struct("<ii")
_EXTRACTED = ("storages", "tensors")
"""The members torch extracts to disk, in that order, before it opens each."""


def probe(sample: Sample) -> FileReport:
    issue = FileIssue(
        Problem.LEGACY,
        "saved in torch's obsolete tar format; torch.load(weights_only=True) refuses it",
    )
    return FileReport(Format.TORCH_TAR.value, (issue,))


def is_tar(sample: Sample) -> bool:
    """Whether ``tarfile`` (which torch tries first) reads the file as a tar, magic or not."""
    import tarfile  # imported when a file needs it: start-up stays lean

    try:
        with tarfile.open(fileobj=SampleReader(sample), mode="r:") as archive:
            return archive.next() is not None
    except Exception:  # tarfile raises many unrelated types on what is not a tar
        return False


def read_whole(sample: Sample, deep: int = 0) -> FileReport:
    """Every pickle torch would read from the tar, and from the file read as pickles (torch's
    fallback when tarfile fails part-way)."""
    # imported when a file needs it: start-up stays lean
    import tarfile

    issues = list(probe(sample).issues)
    issues += [i for i in read_whole_pickle(sample).issues if i.problem is Problem.UNSAFE_PICKLE]
    try:
        with tarfile.open(fileobj=SampleReader(sample), mode="r:") as archive:
            archive.getmembers()  # torch reads every header on its first lookup
            extracted: dict[str, bytes] = {}
            for name in (*_EXTRACTED, "pickle"):
                data = _member(archive, name, extracted)
                if isinstance(data, FileIssue):
                    issues.append(data)
                    continue
                if name in _EXTRACTED:
                    extracted[name] = data
                issues += _records(data, name)
    except (tarfile.TarError, EOFError, OSError, ValueError, RecursionError) as error:
        issues.append(FileIssue(Problem.MALFORMED, f"the tar cannot be read ({error}); torch then reads the file as pickles"))
    return FileReport(Format.TORCH_TAR.value, tuple(issues))


def _member(archive: tarfile.TarFile, name: str, extracted: dict[str, bytes]) -> bytes | FileIssue:
    try:
        member = archive.getmember(name)
    except KeyError:
        return FileIssue(Problem.MALFORMED, f"the tar has no '{name}' member: torch.load fails (KeyError)")
    if name in _EXTRACTED and (member.islnk() or member.issym()):
        target = os.path.normpath(member.linkname)
        if os.path.isabs(member.linkname) or target.startswith(".."):
            return FileIssue(
                Problem.UNSAFE_PICKLE,
                f"its {name} member links to {member.linkname!r}, outside the archive: torch extracts the link and "
                "unpickles whatever that path holds on the loading machine, which cannot be proven safe",
            )
        if target in extracted:
            return extracted[target]
        if member.issym():
            return FileIssue(Problem.MALFORMED, f"its {name} member links to {member.linkname!r}, which torch has not extracted")
    if member.size > MAX_MEMBER:
        return FileIssue(
            Problem.UNSAFE_PICKLE, f"its {name} member is {member.size} bytes, more than ckptdoctor reads: it cannot be proven safe"
        )
    try:
        handle: IO[bytes] | None = archive.extractfile(member)  # follows links inside the archive
    except KeyError:  # tarfile's own words: a link to a member that is not there
        return FileIssue(
            Problem.MALFORMED, f"its {name} member links to {member.linkname!r}, which the archive does not hold: torch.load fails"
        )
    if handle is None:
        return FileIssue(Problem.MALFORMED, f"its {name} member is not a file")
    return handle.read()


def _records(data: bytes, name: str) -> list[FileIssue]:
    """Every pickle of one member: for ``pickle``, one; for ``storages`` and ``tensors``, a count,
    then per record a pickle and raw bytes (storages: an element count and the elements;
    tensors: ndim, sizes, strides, offset), then (storages) the storage views."""
    if name == "pickle":
        return judge(walk(data), "its pickle member")
    count_walk = walk(data)
    issues = judge(count_walk, f"the {name} member's count")
    if count_walk.error or count_walk.unproven:
        return issues
    count = count_walk.root
    if not isinstance(count, int):
        return [*issues, _unproven(f"the {name} member's record count is not a literal number")]
    if count > MAX_RECORDS:
        return [*issues, _unproven(f"the {name} member claims {count} records, more than ckptdoctor follows")]
    position = count_walk.end
    try:
        for _ in range(count):
            item = walk(data, position)
            issues += judge(item, f"a record of the {name} member")
            if item.error or item.unproven:
                return issues
            record = item.root
            if not isinstance(record, (tuple, list)) or len(record) != 3:
                if isinstance(record, (str, bytes, dict, int, float)) or record is None:
                    return issues  # torch fails to unpack it: loading stops here
                return [*issues, _unproven(f"a record of the {name} member is not a literal tuple")]
            position = item.end
            if name == "storages":
                kind = record[2]
                element = TORCH_SIZES.get(TORCH_STORAGES.get(kind.name, "")) if isinstance(kind, Global) else None
                if element is None:
                    return [*issues, _unproven(f"a record of the storages member names a storage type it cannot size ({kind!r:.60})")]
                (elements,) = _COUNT.unpack_from(data, position)
                if elements < 0:
                    return issues
                position += _COUNT.size + elements * element
            else:
                ndim, _ = _TENSOR_HEAD.unpack_from(data, position)
                if ndim < 0:
                    return issues
                position += _TENSOR_HEAD.size + 16 * ndim + 8
            if position > len(data):
                return [*issues, FileIssue(Problem.TRUNCATED, f"the {name} member ends inside a record")]
        if name == "storages" and position >= len(data):
            issues.append(
                FileIssue(Problem.MALFORMED, "the storages member ends before its storage views: torch.load fails (Ran out of input)")
            )
        elif name == "storages":
            issues += judge(walk(data, position), "the storages member's views")
    except struct.error:
        issues.append(FileIssue(Problem.TRUNCATED, f"the {name} member ends inside a record"))
    return issues


def _unproven(why: str) -> FileIssue:
    return FileIssue(
        Problem.UNSAFE_PICKLE, f"{why}: where the next pickle starts is only known when it runs, so the rest cannot be proven safe"
    )


SPECS = (
    ReaderSpec(
        Format.TORCH_TAR,
        (Sniff(Rank.STRUCTURE, lambda head, sample: len(head) > 262 and head[257:262] == b"ustar"),),
        TORCH_SAVE_SUFFIXES,
        probe,
        read_whole,
        read_any_name=True,
    ),
)
