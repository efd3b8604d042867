"""burn's recorder-era records (burn <= 0.21): named MessagePack, JSON, and their gzip forms.

A record is a map ``{"metadata": {...}, "item": ..., "_b": []}`` (burn-format reference §10).
Its metadata comes first, so the head tells the precision and burn version; its last field
``_b`` is an empty array, so a complete MessagePack record ends in the bytes ``a2 5f 62 90``.
A gzip stream carries no length up front and its trailer cannot be found from the end, so a
gzip record is inflated (streamed, in constant memory) to tell whether it is whole.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ckptdoctor.model import FileIssue, FileReport, Problem, Tensor
from ckptdoctor.readers import deep_scan
from ckptdoctor.readers._registry import Naming, Rank, ReaderSpec, Sniff
from ckptdoctor.readers.compressed import gzip_parts
from ckptdoctor.readers.dtypes import NONFINITE_SCANNED, burn_dtype
from ckptdoctor.readers.sample import HEAD, TAIL, EdgeSample, Sample
from ckptdoctor.readers.sniff import Format, sniff_payload

RECORD_END = b"\xa2_b\x90"
METADATA_KEYS = ("float", "int", "format", "version", "settings")
_JSON_METADATA = re.compile(rb'"(float|int|format|version|settings)"\s*:\s*"([^"]*)"')
_GZIP_WBITS = 16 + zlib.MAX_WBITS


def probe_msgpack(sample: Sample, format: Format = Format.MSGPACK) -> FileReport:
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


def probe_json(sample: Sample, format: Format = Format.JSON) -> FileReport:
    facts = tuple((key.decode(), value.decode("utf-8", "replace")) for key, value in _JSON_METADATA.findall(sample.head(HEAD)))
    closing = b"}" if sample.head(64).lstrip().startswith(b"{") else b"]"
    if not sample.tail(TAIL).rstrip().endswith(closing):
        issue = FileIssue(Problem.TRUNCATED, f"the JSON document does not end with {closing.decode()!r}: cut short")
        return FileReport(format.value, (issue,), facts)
    return FileReport(format.value, (), facts)


def probe_gzip(sample: Sample) -> FileReport:
    head = bytearray()
    tail = b""
    size = 0
    problem = None
    for part in gzip_parts(sample):
        if isinstance(part, FileIssue):
            problem = part
            break
        size += len(part)
        if len(head) < HEAD:
            head += part[: HEAD - len(head)]
        tail = (tail + part)[-TAIL:]
    if problem is not None and problem.problem in (Problem.MALFORMED, Problem.UNSAFE_PICKLE):
        return FileReport(Format.GZIP.value, (problem,))
    payload = EdgeSample(bytes(head), tail, size)
    inner = _inner_report(payload)
    inner = dataclasses.replace(inner, facts=(*inner.facts, (INFLATED, str(size))))
    if problem is None:
        return inner
    if problem.problem is Problem.TRUNCATED:
        return FileReport(inner.format, (problem,), inner.facts)
    return FileReport(inner.format, (problem, *inner.issues), inner.facts)


def _inner_report(payload: Sample) -> FileReport:
    kind = sniff_payload(payload.head())
    if kind is Format.MSGPACK:
        return probe_msgpack(payload, Format.MSGPACK_GZ)
    if kind is Format.JSON:
        return probe_json(payload, Format.JSON_GZ)
    if kind is Format.BINCODE:
        return FileReport(Format.BINCODE_GZ.value)
    return FileReport(Format.GZIP.value)


def _report(format: Format, problem: Problem, detail: str) -> FileReport:
    return FileReport(format.value, (FileIssue(problem, detail),))


MAX_RECORD = 512 * 1024 * 1024
"""Records are decoded whole (MessagePack and JSON have no index): a larger one is reported as
not read, rather than held in memory several times over (or, gzipped, inflated without end)."""
INFLATED = "inflated"
"""The fact a gzip record's header read leaves: its size once inflated."""
_RANK = re.compile(r"^Rank\d+$")


def read_whole_msgpack(sample: Sample, deep: int = 0) -> FileReport:
    return _verify_record(sample, probe_msgpack(sample), _unpack_msgpack, deep)


def read_whole_json(sample: Sample, deep: int = 0) -> FileReport:
    return _verify_record(sample, probe_json(sample), json.loads, deep)


def read_whole_gzip(sample: Sample, deep: int = 0) -> FileReport:
    header = probe_gzip(sample)
    if header.format not in (Format.MSGPACK_GZ.value, Format.JSON_GZ.value):
        return header
    decode = _unpack_msgpack if header.format == Format.MSGPACK_GZ.value else json.loads

    def inflated(data: bytes) -> object:
        return decode(zlib.decompress(data, _GZIP_WBITS))

    return _verify_record(sample, header, inflated, deep, int(header.fact(INFLATED) or 0))


def _unpack_msgpack(data: bytes) -> object:
    # imported when a file needs it: start-up stays lean
    import msgpack

    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def _verify_record(sample: Sample, header: FileReport, decode: Callable[[bytes], object], deep: int, decoded_size: int = 0) -> FileReport:
    """The record decoded whole: every tensor listed with its ParamId, each length checked."""
    if header.issues:
        return header
    if max(sample.size, decoded_size) > MAX_RECORD:
        issue = FileIssue(
            Problem.UNREADABLE,
            f"{max(sample.size, decoded_size)} bytes of record: more than ckptdoctor decodes whole ({MAX_RECORD}); "
            "only its header and ending were checked",
        )
        return dataclasses.replace(header, issues=(issue,))
    try:
        record = decode(sample.range(0, sample.size))
    except Exception as error:  # msgpack, json and zlib raise many unrelated types on bad input
        return dataclasses.replace(header, issues=(FileIssue(Problem.MALFORMED, f"the record cannot be decoded ({error})"),))
    item = record.get("item") if isinstance(record, Mapping) else None
    tensors: list[Tensor] = []
    issues: list[FileIssue] = []
    nonfinite = 0
    try:
        for name, param, data in _tensor_data(item, "", None):
            tensor, payload, problem = _tensor(name, param, data)
            if problem:
                issues.append(FileIssue(Problem.MALFORMED, problem))
            tensors.append(tensor)
            if deep and payload is not None and tensor.dtype in NONFINITE_SCANNED:
                nonfinite += deep_scan.count_nonfinite(payload, tensor.dtype)
    except RecursionError:
        issues.append(FileIssue(Problem.MALFORMED, "the record nests deeper than any burn module"))
    if nonfinite:
        issues.append(FileIssue(Problem.NONFINITE, f"{nonfinite} NaN or Inf values in its float tensors"))
    return dataclasses.replace(header, issues=tuple(issues), tensors=tuple(tensors), tensor_bytes=sum(t.nbytes for t in tensors))


def _tensor_data(value: object, path: str, param: str | None) -> Iterator[tuple[str, str | None, Mapping[Any, Any]]]:
    """(name, ParamId, TensorData map) for every tensor under ``value``; the optimizer's ``V1`` and
    ``Rank<D>`` wrappers are left out of names, and a map of ``{id: {"V1": ...}}`` gives ids."""
    if isinstance(value, Mapping):
        if "shape" in value and ("bytes" in value or "value" in value):
            yield path, param, value
            return
        if set(value) == {"id", "param"} and isinstance(value["id"], str):
            yield from _tensor_data(value["param"], path, value["id"])
            return
        for key, child in value.items():
            key = str(key)
            child_param = key if isinstance(child, Mapping) and set(child) == {"V1"} else param
            skip = key == "V1" or _RANK.match(key)
            yield from _tensor_data(child, path if skip else f"{path}.{key}".lstrip("."), child_param)
    elif isinstance(value, list):
        for number, child in enumerate(value):
            yield from _tensor_data(child, f"{path}.{number}".lstrip("."), param)


def _tensor(name: str, param: str | None, data: Mapping[Any, Any]) -> tuple[Tensor, bytes | None, str | None]:
    shape = data.get("shape")
    shape = tuple(shape) if isinstance(shape, list) and all(isinstance(d, int) for d in shape) else ()
    count = math.prod(shape)
    raw = data.get("bytes", data.get("value"))
    payload = _payload(raw) if "bytes" in data else None
    dtype = burn_dtype(data.get("dtype"))
    nbytes = len(raw) if isinstance(raw, (bytes, list)) else 0
    if dtype is None:
        quantized = isinstance(data.get("dtype"), Mapping) and "QFloat" in data["dtype"]
        problem = None if quantized or "value" in data else f"tensor {name} has an unknown dtype {data.get('dtype')!r}"
        return Tensor(name, "unknown", shape, nbytes, param=param), None, problem
    problem = None
    if "bytes" in data and payload is None:
        problem = f"tensor {name}'s bytes are not a byte string"
    elif "bytes" in data and nbytes != count * dtype[1]:
        problem = f"tensor {name} holds {nbytes} bytes but its {dtype[0]} shape {list(shape)} needs {count * dtype[1]}"
    return Tensor(name, dtype[0], shape, count * dtype[1], param=param), payload, problem


def _payload(raw: object) -> bytes | None:
    """A tensor's bytes: MessagePack ``bin``, or JSON's list of byte values."""
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, list):
        try:
            return bytes(raw)
        except (ValueError, TypeError):
            return None
    return None


GZIP_MAGIC = b"\x1f\x8b"


def _bincode(head: bytes, sample: Sample) -> bool:
    """burn's bincode records start with three length-prefixed strings: float type, int type and
    the recorder's type name (``burn_core::record::file::BinFileRecorder<...>``)."""
    position = 0
    strings = []
    for _ in range(3):
        if position >= len(head) or head[position] >= 251:  # a longer varint: not these short names
            return False
        length = head[position]
        strings.append(head[position + 1 : position + 1 + length])
        position += 1 + length
    return b"burn" in strings[2] and strings[0].isascii() and strings[1].isascii()


SPECS = (
    ReaderSpec(
        Format.GZIP,
        (Sniff(Rank.SIGNATURE, lambda head, sample: head.startswith(GZIP_MAGIC)),),
        probe=probe_gzip,
        read_whole=read_whole_gzip,
    ),
    ReaderSpec(
        Format.MSGPACK,
        (Sniff(Rank.PAYLOAD + 30, lambda head, sample: head[:1] in (b"\x81", b"\x82", b"\x83", b"\x84", b"\xde", b"\xdf")),),
        ((".mpk", Naming.CHECKPOINT_ONLY),),
        probe_msgpack,
        read_whole_msgpack,
    ),
    ReaderSpec(
        Format.JSON,
        (Sniff(Rank.PAYLOAD + 40, lambda head, sample: head.lstrip().startswith((b"{", b"["))),),
        ((".json", Naming.CHECKPOINT),),
        probe_json,
        read_whole_json,
    ),
    ReaderSpec(Format.BINCODE, (Sniff(Rank.PAYLOAD + 50, _bincode),), ((".bin", Naming.CHECKPOINT),), end_checked=False),  # no end record
    # the gzip forms are told by the gzip reader from what the stream holds
    ReaderSpec(Format.MSGPACK_GZ, suffixes=((".mpk.gz", Naming.CHECKPOINT_ONLY),)),
    ReaderSpec(Format.JSON_GZ, suffixes=((".json.gz", Naming.CHECKPOINT),)),
    ReaderSpec(Format.BINCODE_GZ, suffixes=((".bin.gz", Naming.CHECKPOINT),)),
)
