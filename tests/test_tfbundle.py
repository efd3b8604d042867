"""TensorFlow bundle indexes built byte by byte, as ``third_party/xla/xla/tsl/lib/io/format.cc``,
``table_builder.cc`` and ``block_builder.cc`` lay them out and ``tensor_bundle.proto`` encodes their
entries, each bent the way a crafted or damaged index is: what ``readers.tfbundle`` says of each
is what TensorFlow's ``BundleReader`` says (its error strings are quoted in the findings).
A real index written by TensorFlow 2.21 (``tests/data/ckpt-2.index``) is read alongside.
"""

from __future__ import annotations

import struct
from pathlib import Path

import google_crc32c
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ckptdoctor.model import Problem
from ckptdoctor.readers import tfbundle
from ckptdoctor.readers.sample import BytesSample

REAL = Path(__file__).parent / "data" / "ckpt-2.index"


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, bytes):
        return varint(number << 3 | 2) + varint(len(value)) + value
    return varint(number << 3) + varint(value)


def header(shards: int = 1, endianness: int = 0, min_consumer: int = 0) -> bytes:
    version = field(1, 1) + (field(2, min_consumer) if min_consumer else b"")
    return field(1, shards) + (field(2, endianness) if endianness else b"") + field(3, version)


def entry(dtype: int, shape: tuple[int, ...], offset: int, size: int, shard: int = 0) -> bytes:
    dims = b"".join(field(2, field(1, n)) for n in shape)
    return field(1, dtype) + field(2, dims) + (field(3, shard) if shard else b"") + field(4, offset) + field(5, size)


def block(pairs: list[tuple[bytes, bytes]]) -> bytes:
    body = b"".join(varint(0) + varint(len(k)) + varint(len(v)) + k + v for k, v in pairs)
    return body + struct.pack("<I", 0) + struct.pack("<I", 1)


def index(pairs: list[tuple[bytes, bytes]], corrupt_crc: bool = False) -> bytes:
    """An SSTable of one data block, an empty metaindex and an index block, with its footer."""
    out = bytearray()

    def put(contents: bytes) -> tuple[int, int]:
        at = len(out)
        crc = google_crc32c.value(contents + b"\0")
        masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
        out.extend(contents + b"\0" + struct.pack("<I", masked ^ (1 if corrupt_crc else 0)))
        return at, len(contents)

    data_at, data_size = put(block(pairs))
    meta_at, meta_size = put(block([]))
    index_at, index_size = put(block([(pairs[-1][0] + b"\0", varint(data_at) + varint(data_size))]))
    footer = (varint(meta_at) + varint(meta_size) + varint(index_at) + varint(index_size)).ljust(40, b"\0")
    return bytes(out) + footer + tfbundle.MAGIC


FLOAT32, INT64 = 1, 9


def problems(data: bytes) -> list[Problem]:
    return [issue.problem for issue in tfbundle.read_index(BytesSample(data)).issues]


def test_a_built_index_reads_like_a_real_one() -> None:
    built = index([(b"", header()), (b"a", entry(FLOAT32, (4, 3), 0, 48)), (b"b", entry(INT64, (), 48, 8))])
    report = tfbundle.read_index(BytesSample(built))
    assert report.issues == ()
    assert tfbundle.extents(report) == {0: 56}
    assert tfbundle.read_index(BytesSample(REAL.read_bytes())).issues == ()


@pytest.mark.parametrize(
    ("pairs", "said"),
    [
        ([(b"", header()), (b"a", entry(FLOAT32, (4, 3), 0, 12))], "Invalid size in bundle entry"),
        ([(b"", header(endianness=1)), (b"a", entry(FLOAT32, (1,), 0, 4))], "big-endian"),
        ([(b"", header(min_consumer=99)), (b"a", entry(FLOAT32, (1,), 0, 4))], "Please upgrade TensorFlow"),
        ([(b"", header()), (b"b", entry(FLOAT32, (1,), 0, 4)), (b"a", entry(FLOAT32, (1,), 4, 4))], "out of order"),
        ([(b"", header()), (b"a", entry(FLOAT32, (1,), 0, 4, shard=3))], "shard 3 of a 1-shard bundle"),
        ([(b"a", entry(FLOAT32, (1,), 0, 4))], "no bundle header"),
    ],
)
def test_an_index_tensorflow_refuses_is_malformed_with_its_words(pairs: list[tuple[bytes, bytes]], said: str) -> None:
    report = tfbundle.read_index(BytesSample(index(pairs)))
    assert [issue.problem for issue in report.issues] == [Problem.MALFORMED]
    assert said in report.issues[0].detail


def test_a_block_that_fails_its_crc32c_is_a_crc_mismatch() -> None:
    assert problems(index([(b"", header()), (b"a", entry(FLOAT32, (1,), 0, 4))], corrupt_crc=True)) == [Problem.CRC_MISMATCH]


def test_a_shard_whose_tensor_bytes_changed_fails_the_crc_its_index_records() -> None:
    payload = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    crc = google_crc32c.value(payload)
    masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    value = entry(FLOAT32, (4,), 0, 16) + varint(6 << 3 | 5) + struct.pack("<I", masked)
    parsed = tfbundle.bundle_entries(index([(b"", header()), (b"w", value)]))
    assert parsed is not None
    _, entries = parsed
    assert tfbundle.shard_issues(BytesSample(payload), entries, "x.data-00000-of-00001", nonfinite=True) == []
    flipped = bytes([payload[0] ^ 1]) + payload[1:]
    found = tfbundle.shard_issues(BytesSample(flipped), entries, "x.data-00000-of-00001", nonfinite=False)
    assert [i.problem for i in found] == [Problem.CRC_MISMATCH]
    nan = struct.pack("<4f", 1.0, float("nan"), 3.0, 4.0)
    assert Problem.NONFINITE in [i.problem for i in tfbundle.shard_issues(BytesSample(nan), entries, "x", nonfinite=True)]
    assert Problem.NONFINITE not in [i.problem for i in tfbundle.shard_issues(BytesSample(nan), entries, "x", nonfinite=False)]


def test_an_entry_without_a_crc_is_held_to_zero_as_tensorflow_holds_it() -> None:
    """proto3 leaves ``crc32c = 0`` out of the entry; ``GetValue`` compares the bytes with it all the same."""
    parsed = tfbundle.bundle_entries(index([(b"", header()), (b"w", entry(FLOAT32, (1,), 0, 4))]))
    assert parsed is not None
    found = tfbundle.shard_issues(BytesSample(struct.pack("<f", 1.0)), parsed[1], "x", nonfinite=False)
    assert [i.problem for i in found] == [Problem.CRC_MISMATCH]


@given(data=st.binary(max_size=256), dtype=st.sampled_from([1, 7, 9, 21, 99]), dims=st.lists(st.integers(-2, 40), max_size=3))
@settings(max_examples=300, deadline=None)
@example(data=b"\x80" * 9 + b"\x02", dtype=7, dims=[])  # a string length past 64 bits: TensorFlow keeps its low 64
def test_shard_bytes_of_any_kind_never_raise(data: bytes, dtype: int, dims: list[int]) -> None:
    """String and variant tensors are walked as ``ReadStringTensor`` and ``ReadVariantTensor`` read
    them (lengths as varints, checksums between): any bytes under any shape give a verdict."""
    shape = b"".join(field(2, field(1, n & (2**64 - 1))) for n in dims)  # int64 on the wire
    value = field(1, dtype) + field(2, shape) + field(5, len(data))
    parsed = tfbundle.bundle_entries(index([(b"", header()), (b"t", value)]))
    assert parsed is not None
    for issue in tfbundle.shard_issues(BytesSample(data), parsed[1], "x", nonfinite=True):
        assert issue.problem in (Problem.CRC_MISMATCH, Problem.NONFINITE)


@pytest.mark.parametrize(
    "text",
    [
        '# written by hand\nmodel_checkpoint_path: "ckpt-3"\n',  # text format's comments
        'model_checkpoint_path: "ckpt-3"\nall_model_checkpoint_paths: "ckpt-3"\nlast_preserved_timestamp: 1.5e9\n',
    ],
)
def test_a_state_file_tensorflow_parses_names_its_prefix(text: str) -> None:
    assert tfbundle.read_state(BytesSample(text.encode())).fact("points_to") == "ckpt-3"


def test_a_state_file_that_is_not_one_is_not_echoed() -> None:
    """Its content may be anything a symlink reaches (a secret): the finding says where, not what."""
    report = tfbundle.read_state(BytesSample(b"SECRET_TOKEN=hunter2\n"))
    assert [i.problem for i in report.issues] == [Problem.MALFORMED]
    assert "hunter2" not in report.issues[0].detail
