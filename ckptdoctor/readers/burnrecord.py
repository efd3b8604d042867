"""burn's recorder-era records (burn <= 0.21): named MessagePack, JSON, and their gzip forms.

A record is a map ``{"metadata": {...}, "item": ..., "_b": []}`` (burn-format reference §10).
Its metadata comes first, so the head tells the precision and burn version; its last field
``_b`` is an empty array, so a complete MessagePack record ends in the bytes ``a2 5f 62 90``.
A gzip stream carries no length up front and its trailer cannot be found from the end, so a
gzip record is inflated (streamed, in constant memory) to tell whether it is whole.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers._sample import CHUNK, HEAD, TAIL, EdgeSample, Sample
from ckptdoctor.readers.sniff import Format, sniff_payload

RECORD_END = b"\xa2_b\x90"
METADATA_KEYS = ("float", "int", "format", "version", "settings")
_JSON_METADATA = re.compile(rb'"(float|int|format|version|settings)"\s*:\s*"([^"]*)"')
_GZIP_WBITS = 16 + zlib.MAX_WBITS


def read_msgpack(sample: Sample, format: Format = Format.MSGPACK) -> FileReport:
    import msgpack  # only burn's recorder-era runs need it: kept off every other start-up

    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(sample.head(HEAD))
    facts: list[tuple[str, str]] = []
    try:
        fields = unpacker.read_map_header()
        first_key = unpacker.unpack()
        if first_key == "metadata":
            metadata = unpacker.unpack()
            if isinstance(metadata, Mapping):
                facts = [(key, str(metadata[key])) for key in METADATA_KEYS if key in metadata]
    except msgpack.OutOfData:
        fields, first_key = 0, None  # a metadata map longer than the head: nothing to tell
    except (msgpack.UnpackValueError, msgpack.ExtraData, ValueError, TypeError) as error:
        return _report(format, Problem.MALFORMED, f"not a valid MessagePack record ({error})")
    issues: tuple[FileIssue, ...] = ()
    if first_key == "metadata" and fields == 3 and sample.tail(len(RECORD_END)) != RECORD_END:
        issues = (FileIssue(Problem.TRUNCATED, "the record does not end with its closing `_b` field: cut short"),)
    return FileReport(format.value, issues, tuple(facts))


def read_json(sample: Sample, format: Format = Format.JSON) -> FileReport:
    facts = tuple((key.decode(), value.decode("utf-8", "replace")) for key, value in _JSON_METADATA.findall(sample.head(HEAD)))
    closing = b"}" if sample.head(64).lstrip().startswith(b"{") else b"]"
    if not sample.tail(TAIL).rstrip().endswith(closing):
        issue = FileIssue(Problem.TRUNCATED, f"the JSON document does not end with {closing.decode()!r}: cut short")
        return FileReport(format.value, (issue,), facts)
    return FileReport(format.value, (), facts)


def read_gzip(sample: Sample) -> FileReport:
    inflater = zlib.decompressobj(_GZIP_WBITS)
    head = bytearray()
    tail = b""
    size = 0
    read = 0
    try:
        for chunk in sample.chunks():
            read += len(chunk)
            data = chunk
            while data and not inflater.eof:
                out = inflater.decompress(data, CHUNK)
                data = inflater.unconsumed_tail
                size += len(out)
                if len(head) < HEAD:
                    head += out[: HEAD - len(head)]
                tail = (tail + out)[-TAIL:]
            if inflater.eof:
                break
    except zlib.error as error:
        return _report(Format.GZIP, Problem.MALFORMED, f"the gzip stream is damaged ({error})")
    payload = EdgeSample(bytes(head), tail, size)
    inner = _inner_report(payload)
    if not inflater.eof:
        issue = FileIssue(Problem.TRUNCATED, "the gzip stream ends before its trailer: cut short")
        return FileReport(inner.format, (issue,), inner.facts)
    if inflater.unused_data:
        extra = sample.size - read + len(inflater.unused_data)
        issue = FileIssue(Problem.TRAILING_BYTES, f"{extra} bytes after the end of the gzip stream")
        return FileReport(inner.format, (issue, *inner.issues), inner.facts)
    return inner


def _inner_report(payload: Sample) -> FileReport:
    kind = sniff_payload(payload.head())
    if kind is Format.MSGPACK:
        return read_msgpack(payload, Format.MSGPACK_GZ)
    if kind is Format.JSON:
        return read_json(payload, Format.JSON_GZ)
    if kind is Format.BINCODE:
        return FileReport(Format.BINCODE_GZ.value)
    return FileReport(Format.GZIP.value)


def _report(format: Format, problem: Problem, detail: str) -> FileReport:
    return FileReport(format.value, (FileIssue(problem, detail),))
