"""safetensors: u64 header length N, N bytes of JSON, then the tensor buffer.

The file must be exactly ``8 + N + max(end)`` bytes (integrity reference §9.1); the library
itself reports both truncation and trailing bytes as ``MetadataIncompleteBuffer``.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers._sample import MAX_HEADER, Sample
from ckptdoctor.readers.sniff import SAFETENSORS_MAX_HEADER, Format

LENGTH = struct.Struct("<Q")


def read(sample: Sample) -> FileReport:
    head = sample.head(LENGTH.size)
    if len(head) < LENGTH.size:
        return _report(Problem.TRUNCATED, f"only {sample.size} bytes: shorter than the 8-byte header length")
    (length,) = LENGTH.unpack(head)
    if length > min(SAFETENSORS_MAX_HEADER, MAX_HEADER):
        return _report(Problem.NOT_A_CHECKPOINT, f"declares a {length}-byte header (HeaderTooLarge)")
    if sample.size < LENGTH.size + length:
        return _report(
            Problem.TRUNCATED,
            f"cut inside its header: {sample.size} of at least {LENGTH.size + length} bytes",
        )
    try:
        header = json.loads(sample.range(LENGTH.size, length), object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError) as error:
        return _report(Problem.MALFORMED, f"header is not valid JSON ({error})")
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
            f"{sample.size} bytes, but its header needs {expected} "
            f"({expected - sample.size} missing): the save was cut short",
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
