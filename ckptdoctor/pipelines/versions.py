"""The damaged files of a run in a versioned bucket, and the newest older version of each that is whole.

A save cut short over an existing object (a retention that rewrites ``last.ckpt``, a copy that
died) leaves the object damaged, yet a versioned bucket still holds what was there before. Each
older version of a damaged key, newest first, is read by the reader the scan read the current one
with (``readers.files.read_sample``: its header and trailer for ``inspect``, all of it for
``verify``) through a ranged view of that version (``ObjectSample`` with its ``versionId``); the
first that reads whole is named, with the checksum the store keeps of it where ``verify``
computed it. The versions come from the one ListObjectVersions the survey of the path made: no
listing per object, and no request at all on a bucket that is not versioned.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ckptdoctor.errors import StoreError
from ckptdoctor.layouts.registry import HARMLESS, NAMED_FILES
from ckptdoctor.model import CheckpointFile, FileReport, PreviousVersion, Problem, Run
from ckptdoctor.readers.files import ends_unchecked, read_sample
from ckptdoctor.readers.sample import IN_MEMORY, BytesSample, ObjectSample, Sample
from ckptdoctor.readers.sniff import Format
from ckptdoctor.stores import session
from ckptdoctor.stores.urls import Location

if TYPE_CHECKING:
    from ckptdoctor.stores.control_plane import Version

DAMAGE = frozenset(
    {Problem.EMPTY, Problem.TRUNCATED, Problem.NOT_A_CHECKPOINT, Problem.MALFORMED, Problem.CRC_MISMATCH, Problem.ZIP_ANOMALY}
)
"""What a reader finds of a file whose bytes are not what its format says: a file an older version
may replace. (A file that could not be read, or that is whole but unsafe, is no such file.)"""
NOT_WHOLE = frozenset({Problem.PARTLY_CHECKED, Problem.TRAILING_BYTES})
"""Problems that leave a checkpoint resumable, yet say its bytes were not all checked or are not
all its format's: a version with one is not called whole."""
COMPUTED = frozenset({"SHA256", "SHA1", "CRC32"})
"""The store's checksums that are computed here (CRC32C and CRC64NVME need libraries ckptdoctor lacks)."""


def previous_versions(
    run: Run, location: Location, older: Sequence[Version], whole: frozenset[str] | None = None
) -> tuple[PreviousVersion, ...]:
    """For each damaged file of ``run`` (objects under ``location``'s bucket), its newest older
    version among ``older`` that reads whole, or why there is none. ``whole``: the URLs of the
    files whose older versions ``verify`` said it would download (``announced``): each is read
    whole and the checksum the store keeps of it computed; the older versions of any other file
    are not read (the command downloads no more than it said). None: header reads, as ``inspect``."""
    damaged = [file for file in _files(run) if DAMAGE & file.report.problems]
    if not damaged:
        return ()
    by_key = _by_key(older)
    found = []
    for file in damaged:
        versions = by_key.get(location.key_of(file.entry.os_path), [])
        if whole is not None and versions and file.entry.os_path not in whole:
            found.append(PreviousVersion(file.path, location.bucket, location.key_of(file.entry.os_path), None, checked=UNANNOUNCED))
        else:
            found.append(_newest_whole(file, location, versions, whole is not None))
    return tuple(found)


UNANNOUNCED = (
    "its older versions were not read: reading it whole found the damage after verify had said what it would download; "
    "see them with the list-object-versions command below"
)


def announced(runs: Sequence[Run], location: Location, older: Sequence[Version]) -> dict[str, int]:
    """The files of ``runs`` (in ``location``'s bucket) that their header reads found damaged, by
    URL, each with the bytes of all its older versions: the most ``verify`` reads of them whole,
    said before it downloads anything."""
    by_key = _by_key(older)
    return {
        file.entry.os_path: sum(version.size for version in versions)
        for run in runs
        for file in _files(run)
        if DAMAGE & file.report.problems and (versions := by_key.get(location.key_of(file.entry.os_path)))
    }


def _by_key(older: Sequence[Version]) -> dict[str, list[Version]]:
    by_key: dict[str, list[Version]] = {}
    for version in older:
        by_key.setdefault(version.key, []).append(version)
    return by_key


def _files(run: Run) -> Iterator[CheckpointFile]:
    for checkpoint in run.checkpoints:
        yield from checkpoint.files
    yield from run.loose_files
    yield from run.extra_files


def _newest_whole(file: CheckpointFile, location: Location, versions: list[Version], whole: bool) -> PreviousVersion:
    key = location.key_of(file.entry.os_path)
    if not versions:
        return PreviousVersion(file.path, location.bucket, key, None, checked="no older version of it is kept")
    bucket = session.bucket(location)
    found: list[str] = []
    for version in versions:
        try:
            sample = _version_sample(bucket, version, whole)
            report = read_sample(sample, file.name, whole, NAMED_FILES, HARMLESS)
        except OSError as error:
            found.append(f"unreadable ({error.strerror or error})")
            continue
        why_not = _why_not_whole(report, whole)
        if why_not is not None:
            found.append(why_not)
            continue
        checked = _checksum(location, version, sample if whole else None)
        if checked is None:
            found.append("its checksum is not the one the store keeps")
            continue
        return PreviousVersion(file.path, location.bucket, key, version.version_id, version.size, version.modified, *checked)
    count = len(versions)
    said = "; ".join(dict.fromkeys(found))
    return PreviousVersion(
        file.path,
        location.bucket,
        key,
        None,
        checked=f"{'its older version is' if count == 1 else f'its {count} older versions are'} damaged too ({said})",
    )


def _version_sample(bucket: session.Bucket, version: Version, whole: bool) -> Sample:
    """A view of ``version``'s bytes: ranged GETs of it, or for a whole read, all of it at once
    where it fits in memory (as ``verify`` fetches the current objects)."""
    sample = ObjectSample(bucket, version.key, version.size, version=version.version_id)
    if whole and version.size <= IN_MEMORY:
        data = sample.range(0, version.size)
        if len(data) != version.size:
            raise OSError(f"{len(data):,} bytes where {version.size:,} were listed")
        return BytesSample(data)
    return sample


def _why_not_whole(report: FileReport, whole: bool) -> str | None:
    """Why a version's report does not show it whole (its problems), or None where it does. A
    header read of a format whose end it cannot check shows nothing of its length."""
    problems = sorted(problem.value for problem in report.problems if problem.status is not None or problem in NOT_WHOLE)
    if problems:
        return ", ".join(problems)
    if not whole and Format.named(report.format) in ends_unchecked():
        return f"its length cannot be told from a {report.format} header: `ckptdoctor verify` reads it whole"
    return None


def _checksum(location: Location, version: Version, sample: Sample | None) -> tuple[str, str] | None:
    """How a version found whole was checked, and what of it was not: the checksum the store
    keeps of it (one HeadObject) is computed over its bytes where they were read whole. None
    where the bytes are not the ones the store's checksum was made of."""
    try:
        kept = session.control(location).checksum(version.key, version.version_id)
    except StoreError as error:
        return "its length", f"whether the store keeps a checksum of it could not be asked ({error})"
    if kept is None:
        return "its length", ""
    if sample is None:
        return (
            "its length",
            f"its {kept.algorithm} checksum, which the store keeps, was not computed: `ckptdoctor verify` reads it whole and computes it",
        )
    if kept.algorithm not in COMPUTED:
        return "its length", f"its {kept.algorithm} checksum, which the store keeps, cannot be computed here"
    if _computed(kept.algorithm, sample) != kept.value:
        return None
    return f"its length and its {kept.algorithm} checksum", ""


def _computed(algorithm: str, sample: Sample) -> str:
    """The base64 checksum S3 would keep of ``sample``'s bytes, by ``algorithm`` (one of ``COMPUTED``)."""
    if algorithm == "CRC32":
        crc = 0
        for chunk in sample.chunks():
            crc = zlib.crc32(chunk, crc)
        digest = crc.to_bytes(4, "big")
    else:
        hashed = hashlib.new(algorithm.lower())
        for chunk in sample.chunks():
            hashed.update(chunk)
        digest = hashed.digest()
    return base64.b64encode(digest).decode()
