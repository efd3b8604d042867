"""Fuzzing the readers: pure functions of a Sample must never raise, and never call a cut file clean.

``read_header(BytesSample(data), name)`` is what ``inspect`` runs on every file's head and tail.
It gets arbitrary bytes under every checkpoint suffix, and mutations (byte flips, truncations,
appended bytes) of real files: a burnpack from the spec writer, a real ``torch.save`` archive, a
real ``safetensors`` file and a gzip-compressed burn MessagePack record.
"""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
import zipfile
from functools import cache
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from shared_corpus import mnist_model

from ckptdoctor.model import FileReport, Problem
from ckptdoctor.readers.files import BytesSample, read_header
from ckptdoctor.readers.sample import HEAD, TAIL, EdgeSample, Sample
from ckptdoctor.testing import SMALL_MODEL, BurnModel

NAMES = ("x.bpk", "x.safetensors", "x.pt", "x.mpk", "x.mpk.gz", "x.json", "x.bin", "x.keras", "x.weights.h5", "x.index")
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- valid files ----------------------------------------------------------------------------


@cache
def burnpack_file() -> bytes:
    model = BurnModel({"conv.weight": (8, 3, 3, 3), "conv.bias": (8,), "fc.weight": (10, 32), "fc.bias": (10,)})
    return model.optimizer_record()


@cache
def burnpack_model_file() -> bytes:
    return SMALL_MODEL.model_record()


@cache
def _torch_saved(zipped: bool) -> bytes:
    torch = pytest.importorskip("torch")
    buffer = io.BytesIO()
    torch.save(
        {"model": {"fc.weight": torch.randn(16, 8), "fc.bias": torch.zeros(16)}, "epoch": 3},
        buffer,
        _use_new_zipfile_serialization=zipped,
    )
    return buffer.getvalue()


def torch_zip_file() -> bytes:
    return _torch_saved(zipped=True)


def torch_legacy_file() -> bytes:
    """The same object saved in torch's legacy (non-zip) format."""
    return _torch_saved(zipped=False)


@cache
def torch_zip_saves(width: int) -> tuple[bytes, bytes]:
    """Two saves of one training loop a step apart: the same layout, other values."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Linear(width, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    saves = []
    for step in (8, 9):
        model(torch.randn(2, width)).sum().backward()
        optimizer.step()
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, buffer)
        saves.append(buffer.getvalue())
    return saves[0], saves[1]


@cache
def safetensors_file() -> bytes:
    import numpy as np
    from safetensors.numpy import save

    return save(
        {"fc.weight": np.ones((16, 8), dtype=np.float32), "fc.bias": np.arange(16, dtype=np.int64)},
        metadata={"format": "np"},
    )


@cache
def msgpack_gz_file() -> bytes:
    record = {
        "metadata": {
            "float": "f32",
            "int": "i32",
            "format": "burn_core::record::file::NamedMpkGzFileRecorder<burn_core::record::settings::FullPrecisionSettings>",
            "version": "0.21.0",
            "settings": "FullPrecisionSettings",
        },
        "item": {
            "fc": {
                "weight": {"id": "72d17eukbtkma", "param": {"bytes": bytes(range(256)) * 4, "shape": [16, 16], "dtype": "F32"}},
                "bias": {"id": "0a9fqk2b3c4dm", "param": {"bytes": bytes(64), "shape": [16], "dtype": "F32"}},
            }
        },
        "_b": [],
    }
    return gzip.compress(msgpack.packb(record))


@cache
def hdf5_file() -> bytes:
    """Laid out as Keras' ``H5IOStore`` writes ``.weights.h5`` (libhdf5 through h5py)."""
    h5py = pytest.importorskip("h5py")
    import numpy as np

    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        f.create_dataset("layers/dense/vars/0", data=np.ones((4, 8), "float32"))
        f.create_dataset("optimizer/vars/0", data=np.int64(12))
    return buffer.getvalue()


@cache
def keras_file() -> bytes:
    """A ``.keras`` archive as ``saving_lib._save_model_to_fileobj`` lays it out."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("metadata.json", b'{"keras_version": "3.15.1"}')
        archive.writestr("config.json", b'{"class_name": "Sequential", "config": {}}')
        archive.writestr("model.weights.h5", hdf5_file())
    return buffer.getvalue()


def tf_index_file() -> bytes:
    """A real TensorFlow 2.21 index (``CheckpointManager.save`` of a small Keras model)."""
    return (Path(__file__).parent / "data" / "ckpt-2.index").read_bytes()


def nemo_file() -> bytes:
    """A ``.nemo`` as NeMo's ``_make_nemo_file_from_folder`` tars it (``arcname="."``)."""
    torch = pytest.importorskip("torch")
    weights = io.BytesIO()
    torch.save({"fc.weight": torch.randn(16, 8)}, weights)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:") as archive:
        folder = tarfile.TarInfo(".")
        folder.type = tarfile.DIRTYPE
        archive.addfile(folder)
        for name, data in (("./model_config.yaml", b"target: x\n"), ("./model_weights.ckpt", weights.getvalue())):
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


VALID = {
    "burnpack": (burnpack_file, "model-3.bpk"),
    "hdf5": (hdf5_file, "ep03.weights.h5"),
    "keras": (keras_file, "ep03.keras"),
    "tf-index": (tf_index_file, "ckpt-2.index"),
    "torch-zip": (torch_zip_file, "model_3.pt"),
    "torch-legacy": (torch_legacy_file, "model_3.pt"),
    "safetensors": (safetensors_file, "model_3.safetensors"),
    "msgpack.gz": (msgpack_gz_file, "model-3.mpk.gz"),
    "tar": (nemo_file, "megatron_gpt.nemo"),
}


def _report(data: bytes, name: str) -> FileReport:
    report = read_header(BytesSample(data), name)
    assert isinstance(report, FileReport)
    assert isinstance(report.format, str) and report.format
    for issue in report.issues:
        assert isinstance(issue.problem, Problem)
        assert isinstance(issue.detail, str) and issue.detail
    return report


def _is_flagged(report: FileReport) -> bool:
    """A problem that keeps the file from being clean (legacy-format alone is only advice)."""
    return bool(report.problems - {Problem.LEGACY})


@pytest.mark.parametrize("kind", sorted(VALID))
def test_valid_files_are_clean(kind: str) -> None:
    """The base files really are valid: otherwise the mutation properties below prove nothing."""
    make, name = VALID[kind]
    report = _report(make(), name)
    assert report.format == kind
    if kind == "torch-legacy":  # valid, and told it is the old format
        assert [issue.problem for issue in report.issues] == [Problem.LEGACY]
    else:
        assert report.issues == ()


# --- arbitrary bytes ------------------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=2048), name=st.sampled_from(NAMES))
@example(data=b"", name="x.bpk")
@example(data=b"NRUB\x01\x00\xff\xff\xff\xff", name="x.bpk")
@example(data=b"NRUB\x01\x00\x05\x00\x00\x00\xbf\xff", name="x.bpk")
@example(data=struct.pack("<Q", 2**63) + b"{}", name="x.safetensors")
@example(data=struct.pack("<Q", 4) + b'{"a"', name="x.safetensors")
@example(data=struct.pack("<Q", 2) + b"[]", name="x.safetensors")
@example(data=b"PK\x05\x06" + bytes(18), name="x.pt")
@example(data=b"PK\x03\x04" + bytes(26) + b"PK\x06\x07" + bytes(16) + b"PK\x05\x06" + bytes(18), name="x.pt")
@example(data=b"\x1f\x8b", name="x.mpk.gz")
@example(data=b"\x83\xa8metadata\xc1", name="x.mpk")
@example(data=b"\x80\x02", name="x.bin")
def test_arbitrary_bytes_never_raise(data: bytes, name: str) -> None:
    report = _report(data, name)
    if not data:
        assert report.problems == {Problem.EMPTY}


@FUZZ
@given(
    prefix=st.sampled_from([b"NRUB\x01\x00", b"PK\x03\x04", b"\x1f\x8b\x08\x00", b"\x80\x02", b"\x83", b"{", b""]),
    body=st.binary(max_size=1024),
    name=st.sampled_from(NAMES),
)
def test_bytes_behind_a_magic_never_raise(prefix: bytes, body: bytes, name: str) -> None:
    """Random bytes reach far deeper into a reader when they start with its magic."""
    _report(prefix + body, name)


@FUZZ
@given(
    length=st.integers(min_value=0, max_value=2**64 - 1),
    body=st.binary(max_size=512),
    name=st.sampled_from(("x.safetensors", "x.pt", "x.bin")),
)
def test_safetensors_header_lengths_never_raise(length: int, body: bytes, name: str) -> None:
    _report(struct.pack("<Q", length) + body, name)


@FUZZ
@given(
    version=st.integers(min_value=0, max_value=2**16 - 1),
    size=st.integers(min_value=0, max_value=2**32 - 1),
    body=st.binary(max_size=512),
)
def test_burnpack_header_fields_never_raise(version: int, size: int, body: bytes) -> None:
    report = _report(struct.pack("<4sHI", b"NRUB", version, size) + body, "x.bpk")
    if size > len(body):
        assert _is_flagged(report), report


# --- mutations of valid files ---------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    data = bytearray(original)
    for _ in range(draw(st.integers(min_value=0, max_value=8))):
        if not data:
            break
        position = draw(st.integers(min_value=0, max_value=len(data) - 1))
        data[position] ^= draw(st.integers(min_value=1, max_value=255))
    if draw(st.booleans()):
        del data[draw(st.integers(min_value=0, max_value=len(data))) :]
    if draw(st.booleans()):
        data += draw(st.binary(min_size=1, max_size=64))
    return bytes(data)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(VALID))
@FUZZ
@given(data=st.data(), name=st.sampled_from(NAMES))
def test_mutations_never_raise(kind: str, data: st.DataObject, name: str) -> None:
    make, own_name = VALID[kind]
    mutant = data.draw(mutated(make()))
    _report(mutant, name)
    _report(mutant, own_name)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(VALID))
@FUZZ
@given(data=st.data())
def test_byte_flips_in_the_header_never_raise(kind: str, data: st.DataObject) -> None:
    """Flips concentrated in the first bytes, where lengths, offsets and magic numbers live."""
    make, name = VALID[kind]
    original = bytearray(make())
    span = min(len(original), 64)
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        position = data.draw(st.integers(min_value=0, max_value=span - 1))
        original[position] = data.draw(st.integers(min_value=0, max_value=255))
    _report(bytes(original), name)


def _padding_cut(record: bytes) -> int:
    """How many bytes a burnpack loses when cut by exactly its metadata padding."""
    (metadata_size,) = struct.unpack_from("<I", record, 6)
    start = -(-(10 + metadata_size) // 256) * 256
    return start - (10 + metadata_size)


@pytest.mark.parametrize("kind", ["burnpack", "torch-zip", "torch-legacy", "safetensors", "msgpack.gz", "hdf5", "keras", "tf-index"])
@FUZZ
@given(data=st.data())
def test_truncations_are_never_clean(kind: str, data: st.DataObject) -> None:
    make, name = VALID[kind]
    original = make()
    cut = data.draw(st.integers(min_value=1, max_value=len(original)), label="cut")
    report = _report(original[:-cut], name)
    assert _is_flagged(report), (cut, report)
    if cut < len(original):
        assert Problem.TRUNCATED in report.problems or Problem.NOT_A_CHECKPOINT in report.problems, report


@pytest.mark.parametrize("record", [burnpack_file, burnpack_model_file], ids=["optimizer", "model"])
def test_burnpack_cut_by_its_padding_is_truncated(record) -> None:
    """burn >= 0.20 aligns tensors to 256 bytes; a file missing exactly the padding's length of
    its end is not an unaligned pre-0.20 file (its tensor offsets are all multiples of 256)."""
    original = record()
    cut = _padding_cut(original)
    assert 0 < cut < 256
    report = _report(original[:-cut], "model-3.bpk")
    assert Problem.TRUNCATED in report.problems, report


@pytest.mark.parametrize("kind", ["burnpack", "torch-zip", "torch-legacy", "safetensors", "msgpack.gz", "hdf5", "keras", "tf-index"])
@FUZZ
@given(extra=st.binary(min_size=1, max_size=256))
def test_appended_bytes_are_never_clean(kind: str, extra: bytes) -> None:
    make, name = VALID[kind]
    report = _report(make() + extra, name)
    assert _is_flagged(report), report


@FUZZ
@given(data=st.data())
def test_a_torch_zip_spliced_from_two_saves_is_never_clean(data: st.DataObject) -> None:
    """What an in-place copy cut off leaves: one save's start before the other's end. Where inspect
    holds the whole file, every member is held to the central directory: only a splice that equals
    one of the saves is clean."""
    first, second = torch_zip_saves(8)
    assert len(first) == len(second) <= HEAD + TAIL
    cut = data.draw(st.integers(min_value=0, max_value=len(first)), label="cut")
    start, end = data.draw(st.permutations([first, second]), label="order")
    spliced = start[:cut] + end[cut:]
    report = _report(spliced, "model_9.pt")
    assert spliced in (first, second) or _is_flagged(report), (cut, report)


@FUZZ
@given(data=st.data())
def test_a_longer_torch_zip_spliced_from_two_saves_is_judged_from_its_head_and_tail_alone(data: st.DataObject) -> None:
    """Longer than inspect's head and tail: only what those hold is compared, and nothing else is
    read (``EdgeSample`` refuses any other read)."""
    first, second = torch_zip_saves(512)
    assert len(first) > HEAD + TAIL
    cut = data.draw(st.integers(min_value=0, max_value=len(first)), label="cut")
    spliced = first[:cut] + second[cut:]
    report = read_header(EdgeSample(spliced[:HEAD], spliced[-TAIL:], len(spliced)), "model_9.pt")
    if HEAD <= cut <= len(first) - TAIL - 24:  # the start of one save and the end of the other, both in hand
        assert _is_flagged(report), (cut, report)


def test_a_legacy_file_is_judged_from_its_head_and_tail_alone() -> None:
    torch = pytest.importorskip("torch")
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(128, 64)}, buffer, _use_new_zipfile_serialization=False)
    whole = buffer.getvalue()
    assert len(whole) > HEAD + TAIL
    for data in (whole, whole[:-1], whole + b"\0"):
        report = read_header(EdgeSample(data[:HEAD], data[-TAIL:], len(data)), "model_9.pt")
        assert report.problems == {Problem.LEGACY} if data == whole else _is_flagged(report), report


# --- the real burn-written file ---------------------------------------------------------------


class _Prefix(Sample):
    """The first ``size`` bytes of ``data``, without copying the rest (a cut file, cheaply)."""

    def __init__(self, data: bytes, size: int) -> None:
        self._data = data
        self.size = size

    def range(self, offset: int, n: int) -> bytes:
        return self._data[offset : min(self.size, offset + max(0, n))]


@pytest.fixture(scope="module")
def mnist() -> bytes:
    return mnist_model()


def test_real_burnpack_is_clean(mnist: bytes) -> None:
    report = _report(mnist, "model-1.bpk")
    assert report.format == "burnpack"
    assert report.issues == ()


def test_real_burnpack_cut_anywhere_near_its_ends_is_truncated(mnist: bytes) -> None:
    """Every cut of up to 4 KiB off the end, every 64th byte below that, and inside the header."""
    cuts = [*range(1, 4097), *range(4097, len(mnist) - 4096, 4099), *range(len(mnist) - 4096, len(mnist))]
    clean = []
    for cut in cuts:
        report = read_header(_Prefix(mnist, len(mnist) - cut), "model-1.bpk")
        if not _is_flagged(report):
            clean.append(cut)
    assert clean == [], f"cutting these many bytes off mnist-model.bpk looks clean: {clean[:20]}"


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_real_burnpack_mutations_never_raise(mnist: bytes, data: st.DataObject) -> None:
    head = bytearray(mnist[:4096])
    for _ in range(data.draw(st.integers(min_value=1, max_value=6))):
        position = data.draw(st.integers(min_value=0, max_value=len(head) - 1))
        head[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(mnist) - 1))
    sample = _Prefix(bytes(head) + mnist[4096:], len(mnist) - cut)
    read_header(sample, data.draw(st.sampled_from(NAMES)))


@FUZZ
@given(body=st.binary(max_size=512), header=st.booleans())
@example(body=b"", header=False)
@example(body=b"\x00\x01\x28\xb5\x2f\xfd", header=True)
def test_an_ocdbt_manifest_of_any_bytes_never_raises_and_is_never_clean(body: bytes, header: bool) -> None:
    """Bytes under the name ``manifest.ocdbt``, bare or behind a header whose magic and length
    are right: the OCDBT reader names a problem (its CRC-32C fails), never raises."""
    from ckptdoctor.readers import ocdbt

    class Nothing:
        def size(self, path: str) -> int | None:
            return None

        def read(self, path: str, offset: int, length: int) -> bytes:
            return b""

    data = struct.pack(">I", ocdbt.MANIFEST_MAGIC) + struct.pack("<Q", 12 + len(body)) + body if header else body
    report = ocdbt.walk(data, Nothing())
    assert report.issues
