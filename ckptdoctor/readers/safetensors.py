"""safetensors: u64 header length N, N bytes of JSON, then the tensor buffer.

The file must be exactly ``8 + N + max(end)`` bytes (integrity reference §9.1); the library
itself reports both truncation and trailing bytes as ``MetadataIncompleteBuffer``.

``verify`` also asks the library itself (``safetensors.deserialize``, its Rust parser) about every
header this module accepts: Python's JSON and serde's differ at the edges (``true`` is an int to
Python, not a size to serde), and the library is what loads the file.
"""

from __future__ import annotations

import functools
import json
import math
import re
import struct
from typing import Any

from ckptdoctor import bundles
from ckptdoctor.model import FileIssue, FileReport, Problem, Span, Tensor
from ckptdoctor.readers import deep_scan
from ckptdoctor.readers._registry import Library, Naming, Rank, ReaderSpec, Sniff
from ckptdoctor.readers.dtypes import NONFINITE_SCANNED, SAFETENSORS_BITS
from ckptdoctor.readers.sample import Sample
from ckptdoctor.readers.sniff import Format

LENGTH = struct.Struct("<Q")
SAFETENSORS_MAX_HEADER = 100_000_000


def probe(sample: Sample) -> FileReport:
    head = sample.head(LENGTH.size)
    if len(head) < LENGTH.size:
        return _report(Problem.TRUNCATED, f"only {sample.size} bytes: shorter than the 8-byte header length")
    (length,) = LENGTH.unpack(head)
    if length > SAFETENSORS_MAX_HEADER:
        return _report(Problem.NOT_A_CHECKPOINT, f"declares a {length}-byte header (HeaderTooLarge)")
    if sample.size < LENGTH.size + length:
        return _report(
            Problem.TRUNCATED,
            f"cut inside its header: {sample.size} of at least {LENGTH.size + length} bytes",
        )
    try:
        header = json.loads(sample.range(LENGTH.size, length), object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        return _report(Problem.MALFORMED, f"header is not valid JSON ({type(error).__name__}: {error})")
    if not isinstance(header, dict):
        return _report(Problem.MALFORMED, "header is not a JSON object")
    ends = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and o >= 0 for o in offsets)
            or offsets[1] < offsets[0]
        ):
            return _report(Problem.MALFORMED, f"tensor {name!r} has invalid data_offsets")
        ends.append(offsets[1])
    expected = LENGTH.size + length + max(ends, default=0)
    facts = (("tensors", str(len(ends))),)
    if sample.size < expected:
        issue = FileIssue(
            Problem.TRUNCATED,
            f"{sample.size} bytes, but its header needs {expected} ({expected - sample.size} missing): the save was cut short",
        )
        return FileReport(Format.SAFETENSORS.value, (issue,), facts)
    if sample.size > expected:
        issue = FileIssue(
            Problem.TRAILING_BYTES,
            f"{sample.size - expected} bytes beyond the {expected} its header accounts for",
        )
        return FileReport(Format.SAFETENSORS.value, (issue,), facts)
    return FileReport(Format.SAFETENSORS.value, (), facts)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _report(problem: Problem, detail: str) -> FileReport:
    return FileReport(Format.SAFETENSORS.value, (FileIssue(problem, detail),))


def read_whole(sample: Sample, deep: int = 0) -> FileReport:
    """The header checked more strictly than the library does (reference §9), tensors listed; with
    ``deep``, every tensor's bytes read: NaN and Inf in floats, and which tensors are all zero."""
    report = probe(sample)
    if report.problems & {Problem.MALFORMED, Problem.NOT_A_CHECKPOINT} or sample.size < LENGTH.size:
        return report
    (length,) = LENGTH.unpack(sample.head(LENGTH.size))
    if sample.size < LENGTH.size + length:
        return report
    header = json.loads(sample.range(LENGTH.size, length))
    issues = list(report.issues)
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        issues.append(FileIssue(Problem.MALFORMED, "__metadata__ is not a map of strings (InvalidHeaderDeserialization)"))
    listed: list[Tensor] = []
    regions: list[deep_scan.Region] = []
    named: list[str] = []
    extents: list[tuple[int, int, str]] = []
    data_start = LENGTH.size + length
    for name, info in header.items():
        dtype = SAFETENSORS_BITS.get(str(info.get("dtype"))) if isinstance(info, dict) else None
        shape = info.get("shape") if isinstance(info, dict) else None
        if dtype is None or not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            issues.append(FileIssue(Problem.MALFORMED, f"tensor {name!r} has an unknown dtype or an invalid shape"))
            continue
        start, end = info["data_offsets"]
        count = math.prod(shape)
        bits = count * dtype[1]
        if bits % 8 or end - start != bits // 8:
            issues.append(
                FileIssue(
                    Problem.MALFORMED,
                    f"tensor {name!r} spans {end - start} bytes but its {info['dtype']} shape {shape} needs "
                    f"{bits // 8 if bits % 8 == 0 else f'{bits}/8'} (TensorInvalidInfo)",
                )
            )
        extents.append((start, end, name))
        listed.append(Tensor(name, dtype[0], tuple(shape), end - start))
        if end > start:  # every tensor for zeros (no CRC guards this data), floats for NaN and Inf too
            scanned = dtype[0] if dtype[0] in NONFINITE_SCANNED else None
            regions.append(deep_scan.Region(data_start + start, end - start, scanned, zeros=True, infinite=bundles.may_be_infinite(name)))
            named.append(name)
    extents.sort()
    position = 0
    for start, end, name in extents:
        if start != position:
            what = "overlaps the tensor before it" if start < position else f"leaves a gap of {start - position} bytes before it"
            issues.append(FileIssue(Problem.MALFORMED, f"tensor {name!r} {what} (InvalidOffset)"))
            break
        position = end
    if not issues and (refusal := _refusal(sample.head(data_start))) is not None:
        issues.append(FileIssue(Problem.MALFORMED, f"the safetensors library refuses it: {refusal}"))
    spans = None
    if deep and regions and not issues:
        found, checked = deep_scan.scan(sample, regions, deep)
        issues += found
        spans = tuple(Span(name, bool(result.zero)) for name, result in zip(named, checked, strict=True)) if checked else None
    total = sum(t.nbytes for t in listed)
    return FileReport(Format.SAFETENSORS.value, tuple(issues), report.facts, tuple(listed), (), total, spans=spans)


def _refusal(head: bytes) -> str | None:
    """What the safetensors library says of a file whose header (``head``: the length and the
    JSON) this module accepted; None where it accepts it too.

    The library's checks are all of the header but one, that the file is as long as the header
    says, which ``probe`` has made already. Asked about the header alone, with no tensor bytes,
    the library runs every check up to that one (``safe_open`` runs the same ones, then imports
    numpy or torch to hand tensors to, and maps the file): its "file not fully covered" is then the
    only answer that means it accepts the header. Any other answer, whatever its type, is a
    refusal: fail closed."""
    # the library loads only when verify reads a safetensors file
    from safetensors import deserialize

    try:
        deserialize(head)  # type: ignore[no-untyped-call,unused-ignore]
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # whatever the library raises is its refusal, a Rust panic too
        message = str(error)
        return None if _without_numbers(message) == _without_numbers(_uncovered()) else message
    return None


@functools.cache
def _uncovered() -> str:
    """How this version of the library says that a file is shorter than its header needs: a
    header that declares one byte, asked about without it."""
    # the library loads only when verify reads a safetensors file
    from safetensors import deserialize

    header = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    try:
        deserialize(LENGTH.pack(len(header)) + header)  # type: ignore[no-untyped-call,unused-ignore]
    except Exception as error:  # the library's wording, whatever its type
        return str(error)
    return "\0"  # it accepts a file it cannot load: then no answer is taken for an acceptance


def _without_numbers(message: str) -> str:
    return re.sub(r"\d+", "#", message)


def _sniff(head: bytes, sample: Sample) -> bool:
    """An 8-byte little-endian header length, then the JSON header (the only way the format starts)."""
    if len(head) < 9:
        return False
    (length,) = LENGTH.unpack_from(head)
    if length > SAFETENSORS_MAX_HEADER or length < 2:
        return False
    first = head[8:9]
    return first == b"{" or (first in (b" ", b"\t", b"\n", b"\r") and b"{" in head[8:64])


SPECS = (
    ReaderSpec(
        Format.SAFETENSORS,
        (Sniff(Rank.STRUCTURE + 10, _sniff),),
        ((".safetensors", Naming.CHECKPOINT_ONLY),),
        probe,
        read_whole,
        read_any_name=True,
        loaded_by=Library.SAFETENSORS,
    ),
)
