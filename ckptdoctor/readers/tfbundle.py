"""TensorFlow's checkpoint bundle: ``<prefix>.index``, its ``<prefix>.data-KKKKK-of-NNNNN`` shards,
and the ``checkpoint`` state file that names the newest prefix.

The index is an SSTable in LevelDB's format (``third_party/xla/xla/tsl/lib/io/format.{h,cc}``,
``table_builder.cc``, ``block_builder.cc``): data blocks, an empty metaindex block, an index block,
then a 48-byte footer (two block handles, zero-padded, and the magic ``0xdb4775248b80fb57``). Each
block is followed by a type byte and the masked CRC-32C of the block and that byte. Key ``""``
holds a ``BundleHeaderProto`` (the number of shards); every other key is a tensor's name and holds
a ``BundleEntryProto``: its dtype, shape, shard, offset, size and CRC-32C
(``tensorflow/core/util/tensor_bundle/tensor_bundle.{h,cc}``, ``tensor_bundle.proto``). So the
index alone says how long each data shard must be; the layout holds each shard to it.
``MergeV2Checkpoints`` writes the index after every shard is in place, under its final name: a
killed save leaves shards without an index, or an index cut short (no magic at its end).

The state file is a text-format ``CheckpointState`` proto written through
``checkpoint.tmp<hex>`` and a rename (``checkpoint_management.py``,
``update_checkpoint_state_internal``). Everything here is parsed, nothing is run.
"""

from __future__ import annotations

import codecs
import math
import re
import struct
from collections.abc import Iterator
from typing import NamedTuple

from ckptdoctor.model import FileIssue, FileReport, Problem, Tensor
from ckptdoctor.readers import deep_scan, pointer
from ckptdoctor.readers._registry import Library, Naming, Rank, ReaderSpec, Sniff
from ckptdoctor.readers.dtypes import TORCH_SIZES
from ckptdoctor.readers.sample import MAX_HEADER, Sample
from ckptdoctor.readers.sniff import Format

TF_INDEX = Format.declare("tf-index")
TF_DATA = Format.declare("tf-data")
TF_STATE = Format.declare("tf-checkpoint-state")
INDEX_SUFFIX = ".index"
_DATA = re.compile(r"\.data-([0-9]{5})-of-([0-9]{5})\Z")
MAGIC = struct.pack("<Q", 0xDB4775248B80FB57)
FOOTER = 48
SHARDS = "shards"
"""An index fact: how many data shards the bundle has."""
EXTENTS = "shard-extents"
"""An index fact: for each shard number, the byte where its last tensor ends (``shard\\tend`` lines)."""
ALL_CHECKPOINTS = "all-checkpoints"
"""A state-file fact: the prefixes ``all_model_checkpoint_paths`` lists, one per line."""
_DTYPES = {
    1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string", 8: "complex64",
    9: "int64", 10: "bool", 14: "bfloat16", 17: "uint16", 18: "complex128", 19: "float16", 20: "resource",
    21: "variant", 22: "uint32", 23: "uint64",
}  # fmt: skip
"""``DataType`` (tensorflow/core/framework/types.proto) in torch's spelling."""
_BLOCK_TRAILER = 5
_SIZES = {dtype: size for dtype, size in TORCH_SIZES.items() if dtype in set(_DTYPES.values())}
"""Element sizes of the plain dtypes: their entries' sizes are the shape's bytes (``BundleReader::GetValue``)."""


class Damage(Exception):
    """The index cannot be read past this point."""

    def __init__(self, problem: Problem, detail: str) -> None:
        super().__init__(detail)
        self.issue = FileIssue(problem, detail)


def is_data_file(name: str) -> bool:
    return _DATA.search(name) is not None


def data_file_name(prefix: str, shard: int, shards: int) -> str:
    """The name ``DataFilename`` (tensor_bundle/naming.cc) gives shard ``shard`` of ``shards``."""
    return f"{prefix}.data-{shard:05d}-of-{shards:05d}"


def shard_of(name: str) -> tuple[str, int, int] | None:
    """(prefix, shard, shards) of a data file's name, or None."""
    match = _DATA.search(name)
    return (name[: match.start()], int(match[1]), int(match[2])) if match else None


def read_data_file(sample: Sample) -> FileReport:
    """A data shard: tensors' raw bytes back to back, any content fine; its index says how long
    it must be, and the layout holds it to that."""
    return FileReport(TF_DATA.value)


def read_index(sample: Sample) -> FileReport:
    """The whole index, every block's checksum, and every entry."""
    if sample.size > MAX_HEADER:
        return FileReport(
            TF_INDEX.value, (FileIssue(Problem.MALFORMED, f"{sample.size} bytes: larger than ckptdoctor reads for an index"),)
        )
    data = sample.head(sample.size)
    try:
        return _report(_entries(data))
    except Damage as damage:
        return FileReport(TF_INDEX.value, (damage.issue,))


class Entry(NamedTuple):
    key: str
    dtype: str
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc: int | None = None
    """The masked CRC-32C of its bytes (``BundleWriter::Add``); None where the entry leaves it out, as proto3 leaves out a zero."""
    sliced: bool = False
    """A partitioned variable's whole: it holds no bytes, its slices are entries of their own."""


def bundle_entries(data: bytes) -> tuple[int, list[Entry]] | None:
    """The shard count and every entry of a whole index; None where it cannot be read (its own
    report says why)."""
    try:
        return _entries(data)
    except Damage:
        return None


def shard_issues(sample: Sample, entries: list[Entry], shard_name: str, nonfinite: bool) -> list[FileIssue]:
    """Every tensor of one data shard against the CRC-32C its index records, computed as
    ``BundleReader::GetValue`` computes it (TensorFlow checks it on every restore), and with
    ``nonfinite`` its float values for NaN and Inf; read block by block."""
    mismatched: list[str] = []
    found = 0
    for entry in entries:
        if entry.sliced or entry.offset + entry.size > sample.size:
            continue  # a partitioned variable's whole, read through its slices' entries; a cut shard: the layout reports it
        reader = _Forward(sample, entry.offset)
        if entry.dtype == "string":
            crc = _string_crc(reader, entry)
        elif entry.dtype == "variant":
            crc = _variant_crc(reader, entry)
        else:
            crc = 0
            for block in reader.blocks(entry.size):
                crc = _extend(crc, block)
                if nonfinite and entry.dtype in deep_scan.FLOAT_BITS:
                    found += deep_scan.count_nonfinite(block, entry.dtype)
        # proto3 leaves a zero CRC out of the entry: TensorFlow then compares with zero
        if crc != _unmask(entry.crc or 0):
            mismatched.append(entry.key)
    issues = []
    if mismatched:
        names = ", ".join(mismatched[:3]) + (f" and {len(mismatched) - 3} more" if len(mismatched) > 3 else "")
        issues.append(
            FileIssue(
                Problem.CRC_MISMATCH,
                f"{shard_name}: {len(mismatched)} tensor{'s' if len(mismatched) > 1 else ''} ({names}) do not match the CRC-32C "
                "the index records: the bytes changed after saving (tensorflow: Checksum does not match)",
            )
        )
    if found:
        issues.append(FileIssue(Problem.NONFINITE, f"{shard_name}: {found} NaN or Inf values"))
    return issues


def _string_crc(reader: _Forward, entry: Entry) -> int | None:
    """A string tensor's checksum as ``ReadStringTensor`` computes it: each element's length (a
    varint in the file) as a 32-bit word, or 64-bit past 4 GiB; then the masked checksum of those
    lengths, which must match them; then the strings' bytes. None where TensorFlow stops reading."""
    count = _elements(entry)
    if count is None:
        return None
    if entry.size == 0:
        return 0
    lengths: list[int] = []
    crc = 0
    for _ in range(count):
        length = reader.varint()
        if length is None:
            return None
        lengths.append(length)
        crc = _extend(crc, struct.pack("<I" if length <= 0xFFFFFFFF else "<Q", length))
    if reader.position > entry.offset + entry.size:
        return None  # tensorflow: String lengths longer than expected offset
    stored = reader.read(4)
    if len(stored) < 4 or _unmask(int.from_bytes(stored, "little")) != crc:
        return None  # tensorflow: The length checksum does not match
    crc = _extend(crc, stored)
    for length in lengths:
        for block in reader.blocks(length):
            crc = _extend(crc, block)
    return crc


def _variant_crc(reader: _Forward, entry: Entry) -> int | None:
    """A variant tensor's checksum as ``ReadVariantTensor`` computes it: for each element its length
    as a 64-bit word, its bytes, and the masked checksum so far, which must match. None where
    TensorFlow stops reading."""
    if entry.size == 0:
        return 0  # nothing read, as for a string tensor
    count = _elements(entry)
    if count is None:
        return None
    crc = 0
    for _ in range(count):
        length = reader.varint()
        if length is None:
            return None
        crc = _extend(crc, struct.pack("<Q", length))
        for block in reader.blocks(length):
            crc = _extend(crc, block)
        stored = reader.read(4)
        if len(stored) < 4 or _unmask(int.from_bytes(stored, "little")) != crc:
            return None  # tensorflow: The checksum after Variant … does not match
        crc = _extend(crc, stored)
    return crc


def _elements(entry: Entry) -> int | None:
    """How many elements a string or variant tensor holds; None where its shape is invalid or it
    claims more elements than its bytes can hold (each takes at least one)."""
    if any(n < 0 for n in entry.shape):
        return None
    count = math.prod(entry.shape)
    return count if count <= entry.size else None


def _extend(crc: int, data: bytes) -> int:
    # google-crc32c (a dependency) does it in C; imported when a bundle is read
    import google_crc32c

    return int(google_crc32c.extend(crc, data))


_UINT64 = (1 << 64) - 1


class _Forward:
    """A data shard read forward from ``offset``, a block at a time, as TensorFlow's ``InputBuffer``
    reads it: varints and byte runs, past the entry's own size when its lengths say so."""

    def __init__(self, sample: Sample, offset: int) -> None:
        self._sample = sample
        self.position = offset
        self._block = b""
        self._block_at = offset

    def _held(self) -> bytes:
        """The bytes from ``position`` on that are already read, reading the next block where none are."""
        start = self.position - self._block_at
        if start >= len(self._block):
            self._block = self._sample.range(self.position, _READ)
            self._block_at, start = self.position, 0
        return self._block[start:]

    def varint(self) -> int | None:
        value = shift = 0
        while shift <= 63:
            held = self._held()
            if not held:
                return None
            byte = held[0]
            self.position += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value & _UINT64  # TensorFlow's GetVarint64 keeps the low 64 bits of a tenth byte
            shift += 7
        return None

    def blocks(self, length: int) -> Iterator[bytes]:
        """The next ``length`` bytes, in blocks of at most ``_READ``; fewer where the shard ends."""
        while length > 0:
            held = self._held()[:length]
            if not held:
                return
            self.position += len(held)
            length -= len(held)
            yield held

    def read(self, length: int) -> bytes:
        return b"".join(self.blocks(length))


_READ = 4 * 1024 * 1024
"""Bytes of a shard read at a time (a multiple of every element's size)."""


def _report(parsed: tuple[int, list[Entry]]) -> FileReport:
    shards, entries = parsed
    ends: dict[int, int] = {}
    issues: list[FileIssue] = []
    for entry in entries:
        element = _SIZES.get(entry.dtype)
        if element is not None and all(n >= 0 for n in entry.shape) and entry.size != math.prod(entry.shape) * element:
            issues.append(
                FileIssue(
                    Problem.MALFORMED,
                    f"tensor {entry.key!r} is {entry.size} bytes, not the {math.prod(entry.shape) * element} its {entry.dtype} shape "
                    f"{list(entry.shape)} takes (tensorflow: Invalid size in bundle entry)",
                )
            )
        if entry.shard >= shards:
            issues.append(FileIssue(Problem.MALFORMED, f"tensor {entry.key!r} is placed in shard {entry.shard} of a {shards}-shard bundle"))
        ends[entry.shard] = max(ends.get(entry.shard, 0), entry.offset + entry.size)
    tensors = tuple(Tensor(e.key, e.dtype, e.shape, e.size) for e in entries)
    top = tuple(dict.fromkeys(e.key.split("/", 1)[0] for e in entries))
    facts = ((SHARDS, str(shards)), (EXTENTS, "\n".join(f"{shard}\t{end}" for shard, end in sorted(ends.items()))))
    return FileReport(TF_INDEX.value, tuple(issues), facts, tensors, top, sum(e.size for e in entries))


def extents(report: FileReport) -> dict[int, int]:
    """Shard number -> the byte where its last tensor ends, from an index's report."""
    recorded = report.fact(EXTENTS)
    return {int(shard): int(end) for shard, _, end in (line.partition("\t") for line in recorded.splitlines())} if recorded else {}


def _entries(data: bytes) -> tuple[int, list[Entry]]:
    if len(data) < FOOTER or not data.endswith(MAGIC):
        raise Damage(
            Problem.TRUNCATED,
            "no SSTable magic at its end: the index was cut short, or bytes were added after it (tensorflow: not an sstable (bad magic number))",
        )
    footer = data[-FOOTER:]
    _, position = _handle(footer, 0)
    (index_offset, index_size), _ = _handle(footer, position)
    shards: int | None = None
    entries: list[Entry] = []
    last: bytes | None = None
    for _, handle in _block(data, index_offset, index_size):
        (offset, size), _ = _handle(handle, 0)
        for key, value in _block(data, offset, size):
            if last is not None and key <= last:
                # lookups seek through sorted keys: one out of order is not found, and not restored
                raise Damage(Problem.MALFORMED, f"its keys are out of order at {key[:60]!r}: TensorFlow would not find some tensors")
            last = key
            if key == b"":
                shards = _header(value)
            else:
                entries.append(_entry(key, value))
    if shards is None:
        raise Damage(Problem.MALFORMED, "the index has no bundle header (its first key)")
    return shards, entries


def _block(data: bytes, offset: int, size: int) -> Iterator[tuple[bytes, bytes]]:
    """The (key, value) entries of the block at ``offset``, its checksum checked."""
    end = offset + size
    if end + _BLOCK_TRAILER > len(data):
        raise Damage(Problem.TRUNCATED, f"a block at {offset}+{size} lies past the index's end: the index was cut short")
    contents, kind = data[offset:end], data[end]
    (stored,) = struct.unpack_from("<I", data, end + 1)
    if kind != 0:
        raise Damage(Problem.MALFORMED, f"a block compressed with type {kind}: TensorFlow writes bundles uncompressed")
    if _crc32c(data[offset : end + 1]) != _unmask(stored):
        raise Damage(Problem.CRC_MISMATCH, f"the block at {offset} does not match its CRC-32C (tensorflow: block checksum mismatch)")
    if len(contents) < 4:
        raise Damage(Problem.MALFORMED, f"the block at {offset} is too short to hold its restart points")
    (restarts,) = struct.unpack_from("<I", contents, len(contents) - 4)
    limit = len(contents) - 4 - 4 * restarts
    if limit < 0:
        raise Damage(Problem.MALFORMED, f"the block at {offset} declares more restart points than it holds")
    key = b""
    position = 0
    while position < limit:
        shared, position = _varint(contents, position)
        unshared, position = _varint(contents, position)
        length, position = _varint(contents, position)
        if shared > len(key) or position + unshared + length > limit:
            raise Damage(Problem.MALFORMED, f"an entry of the block at {offset} runs past the block")
        key = key[:shared] + contents[position : position + unshared]
        position += unshared
        yield key, contents[position : position + length]
        position += length


def _handle(data: bytes, position: int) -> tuple[tuple[int, int], int]:
    offset, position = _varint(data, position)
    size, position = _varint(data, position)
    return (offset, size), position


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise Damage(Problem.MALFORMED, "a varint runs past its record")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


def _fields(message: bytes) -> Iterator[tuple[int, int | bytes]]:
    """A protobuf message's (field number, value) pairs: varints, fixed32s, fixed64s and bytes."""
    position = 0
    while position < len(message):
        tag, position = _varint(message, position)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, position = _varint(message, position)
            yield number, value
        elif wire == 1 or wire == 5:
            width = 8 if wire == 1 else 4
            if position + width > len(message):
                raise Damage(Problem.MALFORMED, "a fixed-width field runs past its record")
            yield number, int.from_bytes(message[position : position + width], "little")
            position += width
        elif wire == 2:
            length, position = _varint(message, position)
            if position + length > len(message):
                raise Damage(Problem.MALFORMED, "a field runs past its record")
            yield number, message[position : position + length]
            position += length
        else:
            raise Damage(Problem.MALFORMED, f"a field of wire type {wire}, which bundles never hold")


def _header(value: bytes) -> int:
    """The shard count of a ``BundleHeaderProto``; a bundle this TensorFlow cannot read raises."""
    shards = 1  # proto3: an absent field holds its default, and a bundle has at least one shard
    for number, field in _fields(value):
        if number == 1 and isinstance(field, int):
            shards = field
        elif number == 2 and field == 1:
            # BundleReader refuses the other byte order's tensors (their length checksums fail)
            raise Damage(Problem.MALFORMED, "the bundle header says big-endian: TensorFlow reads little-endian bundles only")
        elif number == 3 and isinstance(field, bytes):
            consumer = next((n for k, n in _fields(field) if k == 2 and isinstance(n, int)), 0)
            if consumer > _BUNDLE_VERSION:
                raise Damage(
                    Problem.MALFORMED,
                    f"the bundle needs a TensorFlow that reads version {consumer} (tensorflow: Please upgrade TensorFlow)",
                )
    return shards


_BUNDLE_VERSION = 1
"""``kTensorBundleVersion`` (tensor_bundle.h): a header whose ``min_consumer`` is above it is refused."""


def _entry(key: bytes, value: bytes) -> Entry:
    dtype, shard, offset, size = 0, 0, 0, 0
    crc: int | None = None
    sliced = False
    shape: tuple[int, ...] = ()
    for number, field in _fields(value):
        if number == 1 and isinstance(field, int):
            dtype = field
        elif number == 2 and isinstance(field, bytes):
            shape = _shape(field)
        elif number == 3 and isinstance(field, int):
            shard = field
        elif number == 4 and isinstance(field, int):
            offset = field
        elif number == 5 and isinstance(field, int):
            size = field
        elif number == 6 and isinstance(field, int):
            crc = field
        elif number == 7:
            sliced = True
    return Entry(key.decode("utf-8", "replace"), _DTYPES.get(dtype, f"tf-{dtype}"), shape, shard, offset, size, crc, sliced)


def _shape(value: bytes) -> tuple[int, ...]:
    dims: list[int] = []
    for number, field in _fields(value):
        if number == 2 and isinstance(field, bytes):
            size = next((n for k, n in _fields(field) if k == 1 and isinstance(n, int)), 0)
            dims.append(size - (1 << 64) if size >= 1 << 63 else size)  # int64 on the wire
    return tuple(dims)


def _unmask(masked: int) -> int:
    rotated = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF


def _crc32c(data: bytes) -> int:
    return _extend(0, data)


_STATE_FIELD = re.compile(r'^\s*(model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*"((?:[^"\\]|\\.)*)"\s*$')
_OTHER_FIELD = re.compile(r"^\s*(all_model_checkpoint_timestamps|last_preserved_timestamp)\s*:\s*[-+0-9.eE]+\s*$")


def read_state(sample: Sample) -> FileReport:
    """The ``checkpoint`` state file: the prefix ``tf.train.latest_checkpoint`` returns (``points_to``)
    and the prefixes the manager still keeps."""
    if sample.size > pointer.LIMIT * 64:
        return _state_issue(f"{sample.size} bytes: too long for a checkpoint state file")
    try:
        text = sample.head(sample.size).decode("utf-8")
    except UnicodeDecodeError:
        return _state_issue("not text: TensorFlow's checkpoint state file is a text proto")
    latest: str | None = None
    kept: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#") or _OTHER_FIELD.match(line):
            continue
        match = _STATE_FIELD.match(line)
        if match is None:
            return _state_issue(f"line {number} is not a CheckpointState field (tensorflow cannot parse it)")
        # text format escapes bytes (`\303\251`, `\"`): undo them, then read the bytes as UTF-8
        path = codecs.escape_decode(match[2].encode("utf-8"))[0].decode("utf-8", "replace")
        if match[1] == "model_checkpoint_path":
            latest = path
        else:
            kept.append(path)
    if not latest:
        return _state_issue("names no model_checkpoint_path: tf.train.latest_checkpoint returns None and a restore starts afresh")
    return FileReport(TF_STATE.value, (), ((pointer.POINTS_TO, latest), (ALL_CHECKPOINTS, "\n".join(kept))))


def _state_issue(detail: str) -> FileReport:
    return FileReport(TF_STATE.value, (FileIssue(Problem.MALFORMED, detail),))


def _index(head: bytes, sample: Sample) -> bool:
    return sample.size >= FOOTER and sample.tail(len(MAGIC)) == MAGIC


SPECS = (
    ReaderSpec(
        TF_INDEX,
        (Sniff(Rank.STRUCTURE, _index),),
        ((INDEX_SUFFIX, Naming.CHECKPOINT),),
        read_index,
        loaded_by=Library.TENSORFLOW,
    ),
    ReaderSpec(TF_DATA),
    ReaderSpec(TF_STATE),
)
"""Data shards are told by name (``is_data_file``), whatever bytes they hold; the state file by the
name its layout gives it."""
