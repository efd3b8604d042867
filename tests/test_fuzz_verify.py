"""Fuzzing the whole-file readers: ``verify_sample`` must never raise, and never call a cut file clean.

``verify_sample(BytesSample(data), name, deep)`` is what ``verify`` runs on every file: it reads
all of it (central directory and every local header of a zip, every pickle, every descriptor),
and with ``deep`` > 0 every byte too (CRC-32 of zip members, the NaN/Inf scan). It gets real
files of every format it reads (torch zip archives, a legacy torch file, safetensors, burnpack
records, bare pickles, NumPy ``.npy`` and ``.npz``), mutated (cut, flipped, spliced), and
arbitrary bytes under every checkpoint suffix.
"""

from __future__ import annotations

import io
import pickle
import signal
import struct
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from functools import cache

import cbor2
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_fuzz_readers import burnpack_file, burnpack_model_file, safetensors_file

from ckptdoctor.model import FileReport, Problem
from ckptdoctor.readers.files import BytesSample, verify_sample
from ckptdoctor.readers.pickle import TORCH_LEGACY_MAGIC

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MANY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = ("x.pt", "x.pth", "x.bin", "x.pkl", "x.safetensors", "x.bpk", "x.npy", "x.npz", "x.ckpt", "x.mpk", "x.mpk.gz")
BROKEN = frozenset({
    Problem.TRUNCATED, Problem.MALFORMED, Problem.UNSAFE_PICKLE, Problem.ZIP_ANOMALY,
    Problem.NOT_A_CHECKPOINT, Problem.CRC_MISMATCH,
})  # fmt: skip
"""What a valid file must never be reported as."""

# --- valid files ----------------------------------------------------------------------------


@cache
def torch_state_dict_file() -> bytes:
    """Several dtypes, and a view that shares its storage with another tensor."""
    torch = pytest.importorskip("torch")
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    state = {
        "fc.weight": base,
        "fc.weight_view": base[1:3, 2:],
        "norm.weight": torch.ones(5, dtype=torch.float16),
        "emb.weight": torch.linspace(-1, 1, 7, dtype=torch.bfloat16),
        "fc.bias": torch.zeros(2, dtype=torch.float64),
        "steps": torch.arange(3),
        "mask": torch.tensor([True, False, True]),
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


@cache
def torch_adam_file() -> bytes:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    return buffer.getvalue()


@cache
def torch_legacy_file() -> bytes:
    torch = pytest.importorskip("torch")
    state = {"fc.weight": torch.ones(3, 2), "fc.bias": torch.zeros(3, dtype=torch.bfloat16), "epoch": 1}
    buffer = io.BytesIO()
    torch.save(state, buffer, _use_new_zipfile_serialization=False)
    return buffer.getvalue()


@cache
def safetensors_torch_file() -> bytes:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save

    return save({
        "fc.weight": torch.randn(8, 4, generator=torch.Generator().manual_seed(0)),
        "emb.weight": torch.ones(3, 5, dtype=torch.bfloat16),
        "norm.weight": torch.ones(6, dtype=torch.float16),
        "steps": torch.arange(4),
    })  # fmt: skip


@cache
def burn_mpk_file(compressed: bool) -> bytes:
    """burn's recorder-era NamedMpk(Gz)FileRecorder record, with finite float data."""
    import gzip

    import msgpack

    weight = struct.pack("<64f", *(i / 8 for i in range(64)))
    record = {
        "metadata": {
            "float": "f32",
            "int": "i32",
            "format": "burn_core::record::file::NamedMpkFileRecorder<burn_core::record::settings::FullPrecisionSettings>",
            "version": "0.21.0",
            "settings": "FullPrecisionSettings",
        },
        "item": {
            "fc": {
                "weight": {"id": "72d17eukbtkma", "param": {"bytes": weight, "shape": [8, 8], "dtype": "F32"}},
                "bias": {"id": "0a9fqk2b3c4dm", "param": {"bytes": bytes(32), "shape": [8], "dtype": "F32"}},
            }
        },
    }
    packed = msgpack.packb(record)
    return gzip.compress(packed, mtime=0) if compressed else packed


PICKLED = {"lists": [1, 2, [3, "four"], []], "epoch": 7, "name": "run-1", "neg": -3, "big": 2**70}


@cache
def pickle_file(protocol: int) -> bytes:
    return pickle.dumps(PICKLED, protocol=protocol)


@cache
def npy_file() -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.arange(24, dtype=np.float32).reshape(4, 6))
    return buffer.getvalue()


@cache
def npz_file(compressed: bool) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    save = np.savez_compressed if compressed else np.savez
    save(buffer, weight=np.ones((4, 3), dtype=np.float32), steps=np.arange(5), half=np.zeros(6, dtype=np.float16))
    return buffer.getvalue()


VALID: dict[str, tuple[Callable[[], bytes], str, str]] = {
    "torch-zip": (torch_state_dict_file, "model_3.pt", "torch-zip"),
    "torch-zip-adam": (torch_adam_file, "optimizer.pt", "torch-zip"),
    "torch-legacy": (torch_legacy_file, "model_3.pth", "torch-legacy"),
    "safetensors-np": (safetensors_file, "model_3.safetensors", "safetensors"),
    "safetensors-torch": (safetensors_torch_file, "model.safetensors", "safetensors"),
    "burnpack-model": (burnpack_model_file, "model-3.bpk", "burnpack"),
    "burnpack-optim": (burnpack_file, "optim-3.bpk", "burnpack"),
    "pickle-4": (lambda: pickle_file(4), "state.pkl", "pickle"),
    "pickle-0": (lambda: pickle_file(0), "state.pkl", "pickle"),
    "burn-mpk": (lambda: burn_mpk_file(False), "model-3.mpk", "msgpack"),
    "burn-mpk-gz": (lambda: burn_mpk_file(True), "model-3.mpk.gz", "msgpack.gz"),
    "npy": (npy_file, "weights.npy", "numpy"),
    "npz": (lambda: npz_file(False), "weights.npz", "numpy"),
    "npz-compressed": (lambda: npz_file(True), "weights.npz", "numpy"),
}
"""kind -> (builder, the name it is saved under, the format verify must call it)."""
KINDS = sorted(VALID)


def _verify(data: bytes, name: str, deep: int = 0) -> FileReport:
    report = verify_sample(BytesSample(data), name, deep=deep)
    assert isinstance(report, FileReport)
    assert isinstance(report.format, str) and report.format
    for issue in report.issues:
        assert isinstance(issue.problem, Problem)
        assert isinstance(issue.detail, str) and issue.detail
    assert report.tensors is None or isinstance(report.tensors, tuple)
    assert all(isinstance(key, str) for key in report.keys)
    assert isinstance(report.tensor_bytes, int)
    return report


def _is_flagged(report: FileReport) -> bool:
    """A problem that keeps the file from being clean (legacy-format alone is only advice)."""
    return bool(report.problems - {Problem.LEGACY})


@pytest.mark.parametrize("deep", [0, 1])
@pytest.mark.parametrize("kind", KINDS)
def test_valid_files_verify_clean(kind: str, deep: int) -> None:
    """The base files really are valid: otherwise the mutation properties below prove nothing."""
    make, name, fmt = VALID[kind]
    report = _verify(make(), name, deep)
    assert report.format == fmt
    assert not report.problems & BROKEN, report.issues
    if kind == "torch-legacy":
        assert report.problems == {Problem.LEGACY}
    else:
        assert report.issues == (), report.issues
    assert report.tensors or kind.startswith("pickle")


# --- mutations of valid files ---------------------------------------------------------------

MUTATIONS = ("truncate", "flip", "insert", "delete", "duplicate", "append")


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    """One to three edits: a cut, a flipped byte, inserted, deleted or duplicated bytes, a tail."""
    data = bytearray(original)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        kind = draw(st.sampled_from(MUTATIONS))
        position = draw(st.integers(min_value=0, max_value=len(data)))
        if kind == "truncate":
            del data[position:]
        elif kind == "flip" and position < len(data):
            data[position] ^= draw(st.integers(min_value=1, max_value=255))
        elif kind == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=64))
        elif kind == "delete":
            del data[position : position + draw(st.integers(min_value=1, max_value=256))]
        elif kind == "duplicate":
            start = draw(st.integers(min_value=0, max_value=position))
            data[position:position] = data[start:position]
        elif kind == "append":
            data += draw(st.binary(min_size=1, max_size=64))
    return bytes(data)


@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(data=st.data(), deep=st.sampled_from([0, 1]))
def test_mutations_never_raise(kind: str, data: st.DataObject, deep: int) -> None:
    make, name, _ = VALID[kind]
    _verify(data.draw(mutated(make())), name, deep)


@pytest.mark.parametrize("kind", KINDS)
@FEW
@given(data=st.data())
def test_mutations_never_raise_threaded(kind: str, data: st.DataObject) -> None:
    make, name, _ = VALID[kind]
    _verify(data.draw(mutated(make())), name, deep=2)


@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(data=st.data(), deep=st.sampled_from([0, 1]))
def test_truncated_files_are_never_clean(kind: str, data: st.DataObject, deep: int) -> None:
    make, name, _ = VALID[kind]
    original = make()
    length = data.draw(st.integers(min_value=1, max_value=len(original) - 1), label="length")
    report = _verify(original[:length], name, deep)
    assert _is_flagged(report), (length, report)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_every_cut_is_flagged(kind: str) -> None:
    """The truncation property above, for every cut length of every file (they are small)."""
    make, name, _ = VALID[kind]
    original = make()
    clean = [length for length in range(1, len(original)) if not _is_flagged(_verify(original[:length], name))]
    assert not clean, f"{kind} ({len(original)} bytes) cut to these lengths reads as clean: {clean[:20]}"


@cache
def tensor_regions(kind: str) -> tuple[tuple[str, int, int], ...]:
    """(member, start, length) of each ``*/data/<key>`` member's bytes, from its local header."""
    data = VALID[kind][0]()
    regions = []
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            folder, _, key = info.filename.rpartition("/")
            if folder.endswith("/data") and key.isdigit() and info.file_size:
                assert info.compress_type == zipfile.ZIP_STORED
                name_length, extra_length = struct.unpack_from("<HH", data, info.header_offset + 26)
                start = info.header_offset + 30 + name_length + extra_length
                regions.append((info.filename, start, info.file_size))
    assert any(member.endswith("/data/0") for member, _, _ in regions)
    return tuple(regions)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["torch-zip", "torch-zip-adam"])
@FUZZ
@given(data=st.data(), flip=st.integers(min_value=1, max_value=255))
def test_flipped_tensor_byte_is_a_crc_mismatch(kind: str, data: st.DataObject, flip: int) -> None:
    make, name, _ = VALID[kind]
    member, start, length = data.draw(st.sampled_from(tensor_regions(kind)), label="member")
    position = start + data.draw(st.integers(min_value=0, max_value=length - 1), label="offset")
    mutant = bytearray(make())
    mutant[position] ^= flip
    assert not _verify(bytes(mutant), name, deep=0).problems & {Problem.TRUNCATED, Problem.MALFORMED}
    report = _verify(bytes(mutant), name, deep=1)
    assert Problem.CRC_MISMATCH in report.problems, (member, position, report.issues)
    assert any(member in issue.detail for issue in report.issues if issue.problem is Problem.CRC_MISMATCH)


def test_one_bit_flip_in_an_npz_dtype() -> None:
    """A single bit flip in a real ``np.savez`` file turns the ``'<f2'`` of a float16 member
    into ``'<f\xb2'``: ``'\xb2'`` (superscript two) passes ``str.isdigit`` but not ``int``."""
    original = npz_file(False)
    position = original.index(b"'<f2'") + 3
    mutant = bytearray(original)
    mutant[position] ^= 0x80
    for deep in (0, 1):
        assert _is_flagged(_verify(bytes(mutant), "weights.npz", deep))


def test_data_0_flip_is_a_crc_mismatch() -> None:
    """The plain case: the first byte of ``data/0``, the storage of the first tensor."""
    _, start, _ = next(r for r in tensor_regions("torch-zip") if r[0].endswith("/data/0"))
    mutant = bytearray(torch_state_dict_file())
    mutant[start] ^= 0x01
    assert Problem.CRC_MISMATCH in _verify(bytes(mutant), "model_3.pt", deep=1).problems


# --- arbitrary bytes ------------------------------------------------------------------------


@MANY
@given(data=st.binary(max_size=2048), name=st.sampled_from(NAMES), deep=st.sampled_from([0, 1]))
@example(data=b"", name="x.pt", deep=1)
@example(data=b"PK\x05\x06" + bytes(18), name="x.pt", deep=1)
@example(data=b"PK\x03\x04" + bytes(26) + b"PK\x05\x06" + bytes(18), name="x.npz", deep=1)
@example(data=TORCH_LEGACY_MAGIC, name="x.pt", deep=1)
@example(data=b"\x93NUMPY\x01\x00\x00\x00", name="x.npy", deep=0)
@example(data=b"\x80\x04.", name="x.pkl", deep=0)
@example(data=b"(.", name="x.pkl", deep=0)
def test_arbitrary_bytes_never_raise(data: bytes, name: str, deep: int) -> None:
    report = _verify(data, name, deep)
    if not data:
        assert report.problems == {Problem.EMPTY}


PREFIXES = (
    b"PK\x03\x04",
    b"PK\x03\x04\x14\x00\x08\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00archive/data.pkl",
    b"NRUB\x01\x00",
    TORCH_LEGACY_MAGIC,
    TORCH_LEGACY_MAGIC + bytes.fromhex("80024de9032e"),
    b"\x80\x02",
    b"\x80\x04\x95",
    b"(",
    b"\x93NUMPY\x01\x00",
    b"\x93NUMPY\x02\x00",
    struct.pack("<Q", 2) + b"{}",
    b"\x1f\x8b\x08\x00",
)  # fmt: skip


@MANY
@given(prefix=st.sampled_from(PREFIXES), body=st.binary(max_size=1024), name=st.sampled_from(NAMES), deep=st.sampled_from([0, 1]))
def test_bytes_behind_a_magic_never_raise(prefix: bytes, body: bytes, name: str, deep: int) -> None:
    """Random bytes reach far deeper into a reader when they start with its magic."""
    _verify(prefix + body, name, deep)


# --- crafted inputs (each found by reading the readers, reduced to a few bytes) ---------------


def _npy(header: str) -> bytes:
    encoded = header.encode("latin-1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(encoded)) + encoded


def _safetensors(header: dict[str, object]) -> bytes:
    import json

    encoded = json.dumps(header).encode()
    return struct.pack("<Q", len(encoded)) + encoded


def _burnpack(metadata: dict[str, object], data: bytes) -> bytes:
    encoded = cbor2.dumps(metadata)
    header = struct.pack("<4sHI", b"NRUB", 1, len(encoded)) + encoded
    return header + bytes(-len(header) % 256) + data


def _zip_with_central_extra(extra: bytes) -> bytes:
    """A one-member torch-like zip whose central directory entry carries ``extra``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({}, protocol=2))
    data = bytearray(buffer.getvalue())
    central = data.index(b"PK\x01\x02")
    name_length = struct.unpack_from("<H", data, central + 28)[0]
    at = central + 46 + name_length
    data[at:at] = extra
    struct.pack_into("<H", data, central + 30, len(extra))
    end = data.index(b"PK\x05\x06")
    struct.pack_into("<I", data, end + 12, struct.unpack_from("<I", data, end + 12)[0] + len(extra))
    return bytes(data)


_BURN_METADATA = {
    "float": "f32",
    "int": "i32",
    "format": "burn_core::record::file::NamedMpkFileRecorder<burn_core::record::settings::FullPrecisionSettings>",
    "version": "0.21.0",
    "settings": "FullPrecisionSettings",
}


def _burn_mpk(item: object) -> bytes:
    import msgpack

    return msgpack.packb({"metadata": _BURN_METADATA, "item": item})


def _burn_json(item: object) -> bytes:
    import json

    recorder = "burn_core::record::file::PrettyJsonFileRecorder<burn_core::record::settings::FullPrecisionSettings>"
    return json.dumps({"metadata": {**_BURN_METADATA, "format": recorder}, "item": item}).encode()


def _burn_mpk_nested(depth: int) -> bytes:
    """A record whose one tensor sits ``depth`` maps deep (msgpack decodes up to 1024 levels)."""
    import msgpack

    leaf = msgpack.packb({"bytes": bytes(4), "shape": [1], "dtype": "F32"})
    head = msgpack.packb("metadata") + msgpack.packb(_BURN_METADATA) + msgpack.packb("item")
    return b"\x82" + head + b"\x81\xa1a" * depth + leaf


def _tar_with_pax(headers: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    payload = pickle.dumps({}, protocol=2)
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo("pickle")
        info.size = len(payload)
        info.pax_headers = headers
        archive.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


CRAFTED = {
    # a burnpack cut inside its CBOR metadata: the header read says truncated, verify parses on
    "burnpack-cut-inside-metadata": (b"NRUB\x01\x00\x01\x00\x00\x00", "x.bpk"),
    "burnpack-bool-dtype-list": (
        _burnpack({"tensors": {"a": {"dtype": {"Bool": []}, "shape": [1], "data_offsets": [0, 1], "param_id": 1}}}, b"\x01"),
        "x.bpk",
    ),
    # burn recorder-era records: tensor bytes as a list of ints, a dtype map, deep nesting
    "burn-mpk-bytes-out-of-range": (_burn_mpk({"w": {"id": "a", "param": {"bytes": [256], "shape": [1], "dtype": "U8"}}}), "x.mpk"),
    "burn-json-bytes-not-ints": (_burn_json({"w": {"id": "a", "param": {"bytes": ["x"], "shape": [1], "dtype": "U8"}}}), "x.json"),
    "burn-mpk-bool-dtype-list": (_burn_mpk({"w": {"id": "a", "param": {"bytes": b"\x01", "shape": [1], "dtype": {"Bool": []}}}}), "x.mpk"),
    "burn-mpk-1000-deep-item": (_burn_mpk_nested(1000), "x.mpk"),
    # npy headers are literals: a dict with an unhashable key, a dtype size that is not a number
    "npy-unhashable-key": (_npy("{'descr': '<f4', 'shape': (1,), []: 0}"), "x.npy"),
    "npy-superscript-itemsize": (_npy("{'descr': '<f\xb2', 'shape': (1,)}"), "x.npy"),
    "npy-5000-digit-itemsize": (_npy("{'descr': '<f" + "9" * 5000 + "', 'shape': (1,)}"), "x.npy"),
    "safetensors-huge-shape": (
        _safetensors({"a": {"dtype": "F32", "shape": [10**200, 10**200], "data_offsets": [0, 0]}}),
        "x.safetensors",
    ),
    "safetensors-deeply-nested-header": (
        struct.pack("<Q", 2002) + b'{"a":' + b"[" * 998 + b"]" * 998 + b"}",
        "x.safetensors",
    ),
    "zip64-extra-longer-than-entry": (_zip_with_central_extra(b"\x01\x00\x18\x00" + bytes(8)), "x.pt"),
    "tar-bad-gnu-sparse-map": (_tar_with_pax({"GNU.sparse.map": "a,b", "GNU.sparse.size": "1"}), "x.pt"),
    # a dict keyed by a 1,000-deep tuple or list: its repr (and str) overflow the recursion limit
    "pickle-deep-tuple-key": (b"\x80\x02}" + b"(" * 1000 + b"t" * 1000 + b"K\x01s.", "x.pkl"),
    "pickle-deep-list-key": (b"\x80\x02}" + b"(" * 1000 + b"l" * 1000 + b"K\x01s.", "x.pkl"),
}


@pytest.mark.parametrize("deep", [0, 1])
@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_inputs_never_raise(case: str, deep: int) -> None:
    data, name = CRAFTED[case]
    report = _verify(data, name, deep)
    assert _is_flagged(report), report


def _zip64_sized_member(size: int) -> bytes:
    """A torch-like zip whose stored ``archive/version`` claims ``size`` bytes (by a ZIP64
    extra), while its compressed size and its bytes stay 2: nothing else in it is wrong."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({}, protocol=2))
        archive.writestr("archive/version", b"3\n")
    data = bytearray(buffer.getvalue())
    central = data.index(b"PK\x01\x02", data.index(b"PK\x01\x02") + 4)
    name_length = struct.unpack_from("<H", data, central + 28)[0]
    extra = struct.pack("<HHQ", 1, 8, size)
    at = central + 46 + name_length
    data[at:at] = extra
    struct.pack_into("<H", data, central + 30, len(extra))
    struct.pack_into("<I", data, central + 24, 0xFFFFFFFF)
    end = data.index(b"PK\x05\x06")
    struct.pack_into("<I", data, end + 12, struct.unpack_from("<I", data, end + 12)[0] + len(extra))
    return bytes(data)


_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
resource.setrlimit(resource.RLIMIT_CPU, (int(sys.argv[3]), int(sys.argv[3]) + 5))
from ckptdoctor.readers.files import BytesSample, verify_sample
report = verify_sample(BytesSample(sys.stdin.buffer.read()), sys.argv[1], deep=int(sys.argv[2]))
print(report.format, sorted(p.value for p in report.problems))
"""

IN_A_CHILD = {
    # hashing a tuple nested 500,000 deep recurses in C with no recursion check: a segfault
    "pickle-500k-deep-tuple-key": (b"\x80\x02}" + b"(" * 500_000 + b"t" * 500_000 + b"K\x01s.", "x.pkl", 0, 20),
    # --deep splits a member into 64 MiB parts before reading any: 2**36 parts for a 254-byte file
    "zip64-member-of-4-exbibytes-deep": (_zip64_sized_member(2**62), "x.pt", 1, 5),
}
"""case -> (bytes, name, deep, CPU seconds): inputs that kill or hang the process, run in a child."""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="resource limits are POSIX")
@pytest.mark.parametrize("case", sorted(IN_A_CHILD))
def test_crafted_inputs_finish_in_a_child(case: str) -> None:
    data, name, deep, cpu_seconds = IN_A_CHILD[case]
    command = [sys.executable, "-c", _CHILD, name, str(deep), str(cpu_seconds)]
    child = subprocess.run(command, input=data, capture_output=True, timeout=cpu_seconds * 3)
    died = f"killed by {signal.Signals(-child.returncode).name}" if child.returncode < 0 else f"exit {child.returncode}"
    assert child.returncode == 0, (died, child.stderr.decode(errors="replace")[-2000:])
