"""``verify --deep``'s scan (``readers/_deep.py``) is exact: every NaN and Inf of every float
dtype ckptdoctor scans is counted wherever it lies (the first value, the last, either side of a
block's or a part's edge), finite values never are, zeros and CRC-32s come out as the bytes say,
one thread or several, and a file cut while it is read is reported, never a crash.

The reference is torch: each dtype is widened to float64 (or split into its complex parts) and
asked ``isnan`` / ``isfinite``, a computation independent of the one-pass test the scan makes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from ckptdoctor.model import Problem
from ckptdoctor.readers import _deep
from ckptdoctor.readers._dtypes import NONFINITE_SCANNED
from ckptdoctor.readers._sample import BytesSample, FileSample, Sample
from ckptdoctor.readers.files import verify_sample

torch = pytest.importorskip("torch")
np = _deep.numpy()

PREFIX = 7
"""Bytes before the tensor in each test file: a region need not start on an aligned offset."""
SMALL_PART = _deep.BLOCK + 4096
"""A part size that splits the test regions off the block grid (a multiple of every element size)."""


def _finite(dtype: str, count: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(count)
    if dtype.startswith("complex"):
        return torch.randn(count, dtype=getattr(torch, dtype), generator=generator)
    values = torch.randn(count, generator=generator)
    if dtype == "float8_e8m0fnu":  # powers of two only, no sign
        values = values.abs() + 0.5
    return values.to(getattr(torch, dtype))


def _specials(dtype: str) -> list[complex]:
    """The non-finite values to write in this dtype (where it has no Inf, torch makes it NaN or
    saturates it: ``_special``)."""
    if dtype.startswith("complex"):
        nan, inf = float("nan"), float("inf")
        return [complex(nan, 0), complex(0, inf), complex(-inf, nan), complex(1, -inf)]
    return [float("nan"), float("inf"), float("-inf")]


def _special(dtype: str, value: complex) -> torch.Tensor:
    """One value of ``dtype``: NaN where the dtype has no Inf (torch's own conversion), or its
    largest finite value (float8_e4m3fn saturates)."""
    kind = getattr(torch, dtype)
    return torch.tensor([value], dtype=kind) if kind.is_complex else torch.tensor([float(value.real)]).to(kind)


def _set(tensor: torch.Tensor, position: int, value: complex) -> None:
    tensor[position] = _special(str(tensor.dtype).removeprefix("torch."), value)[0]


def _expected(tensor: torch.Tensor, nan_only: bool) -> int:
    """Non-finite floats, counted by torch: each part of a complex number counts."""
    parts = torch.view_as_real(tensor) if tensor.is_complex() else tensor.double()
    bad = torch.isnan(parts) if nan_only else ~torch.isfinite(parts)
    return int(bad.sum())


def _bytes(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().view(torch.uint8).numpy().tobytes()


def _counted(sample: Sample, length: int, dtype: str, threads: int, nan_only: bool = False) -> int:
    (result,) = _deep.check(sample, [_deep.Region(PREFIX, length, dtype, infinite=nan_only)], threads)
    return result.nonfinite


def _positions(count: int, element: int) -> list[int]:
    """The first and last values, each lane of a BLAS kernel's unrolled loop, and both sides of
    every block's and every small part's edge."""
    per_block = _deep.BLOCK // element
    per_part = SMALL_PART // element
    edges = [per_block * n + d for n in (1, 2) for d in (-1, 0, 1)] + [per_part + d for d in (-1, 0, 1)]
    return sorted({p for p in [*range(40), *edges, count // 2, count - 2, count - 1] if 0 <= p < count})


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_deep, "PART", SMALL_PART)


@pytest.mark.usefixtures("small_parts")
@pytest.mark.parametrize("dtype", sorted(NONFINITE_SCANNED))
def test_every_nonfinite_value_is_counted_wherever_it_lies(dtype: str) -> None:
    element = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    count = (2 * _deep.BLOCK + 8192) // element + 3  # three blocks, the last one short
    clean = bytearray(b"\x01" * PREFIX + _bytes(_finite(dtype, count)))
    assert _counted(BytesSample(bytes(clean)), count * element, dtype, 1) == 0
    specials = [_special(dtype, value) for value in _specials(dtype)]
    specials = [special for special in specials if _expected(special, False)]  # Inf where the dtype has one
    assert specials
    for special in specials:
        raw = _bytes(special)
        for position in _positions(count, element):
            at = PREFIX + position * element
            dirty = bytearray(clean)
            dirty[at : at + element] = raw
            sample = BytesSample(bytes(dirty))
            for nan_only in (False, True):
                expected = _expected(special, nan_only)
                assert _counted(sample, count * element, dtype, 1, nan_only) == expected, (special, position, nan_only)


@pytest.mark.usefixtures("small_parts")
@pytest.mark.parametrize("dtype", sorted(NONFINITE_SCANNED))
@pytest.mark.parametrize("threads", [1, 3])
def test_many_scattered_values_are_counted_alike_in_a_file_by_any_number_of_threads(tmp_path: Path, dtype: str, threads: int) -> None:
    element = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    count = (4 * SMALL_PART) // element + 5  # four parts and a bit: the threads share them
    tensor = _finite(dtype, count)
    generator = torch.Generator().manual_seed(17)
    specials = _specials(dtype)
    for n, position in enumerate(torch.randint(0, count, (200,), generator=generator).tolist()):
        _set(tensor, position, specials[n % len(specials)])
    _set(tensor, 0, specials[0])
    _set(tensor, count - 1, specials[-1])
    path = tmp_path / "tensor.bin"
    path.write_bytes(b"\x01" * PREFIX + _bytes(tensor))
    with FileSample.open(str(path)) as sample:
        for nan_only in (False, True):
            assert _counted(sample, count * element, dtype, threads, nan_only) == _expected(tensor, nan_only)


@pytest.mark.parametrize("dtype", sorted(NONFINITE_SCANNED))
def test_finite_extremes_are_never_counted(dtype: str) -> None:
    """The largest and smallest finite values, negative zero and subnormals: a product with zero
    is zero, however large the value; a square that overflows is Inf, never NaN."""
    kind = getattr(torch, dtype)
    if dtype.startswith("complex"):
        info = torch.finfo(torch.float32 if dtype == "complex64" else torch.float64)
        parts = [info.max, -info.max, info.tiny, info.tiny / 4, -0.0, 1.0]
        tensor = torch.tensor([complex(a, b) for a in parts for b in parts], dtype=kind)
    else:
        info = torch.finfo(kind)
        tensor = torch.tensor([info.max, -info.max, info.tiny, info.tiny / 4, -0.0, 0.0, 1.0] * 9000, dtype=torch.float64).to(kind)
    assert bool(torch.isfinite(torch.view_as_real(tensor) if tensor.is_complex() else tensor.double()).all())
    data = b"\x01" * PREFIX + _bytes(tensor)
    for nan_only in (False, True):
        assert _counted(BytesSample(data), len(data) - PREFIX, dtype, 1, nan_only) == 0


@pytest.mark.parametrize("kind", ["float32", "float64"])
def test_a_product_with_zeros_is_nan_exactly_where_a_value_is_not_finite(kind: str) -> None:
    """The one-pass test itself, on the BLAS numpy uses, for every length up to a few unrolled
    loops and for a whole block: NaN * 0 and Inf * 0 are NaN and survive the sum; finite values,
    however large, give zero. A sum of squares is NaN exactly where a NaN is (Inf squared is Inf)."""
    dtype = np.dtype(kind)
    largest = np.finfo(dtype).max
    for length in [*range(1, 70), _deep.BLOCK // dtype.itemsize]:
        zeros = np.zeros(length, dtype)
        values = np.full(length, largest, dtype)
        values[::2] = -largest
        with np.errstate(invalid="ignore", over="ignore"):
            assert values.dot(zeros) == 0
            assert not np.isnan(values.dot(values))
            for position in {0, length // 3, length - 1}:
                for bad, nan in ((np.nan, True), (np.inf, False), (-np.inf, False)):
                    dirty = values.copy()
                    dirty[position] = bad
                    assert np.isnan(dirty.dot(zeros)), (length, position, bad)
                    assert bool(np.isnan(dirty.dot(dirty))) is nan, (length, position, bad)


@pytest.mark.usefixtures("small_parts")
@pytest.mark.parametrize("threads", [1, 3])
def test_zeros_and_crcs_as_the_bytes_say(threads: int) -> None:
    length = 3 * SMALL_PART + 13  # not a whole number of blocks, parts or words
    data = bytearray(os.urandom(PREFIX + length))
    regions = [_deep.Region(PREFIX, length, crc=True, zeros=True)]
    ((crc, _, zero),) = _deep.check(BytesSample(bytes(data)), regions, threads)
    assert crc == zlib.crc32(data[PREFIX:]) and zero is False
    data[PREFIX:] = bytes(length)
    ((crc, _, zero),) = _deep.check(BytesSample(bytes(data)), regions, threads)
    assert crc == zlib.crc32(data[PREFIX:]) and zero is True
    for position in (0, 1, _deep.BLOCK - 1, _deep.BLOCK, SMALL_PART, length - 9, length - 1):
        one = bytearray(data)
        one[PREFIX + position] = 1
        ((crc, _, zero),) = _deep.check(BytesSample(bytes(one)), regions, threads)
        assert crc == zlib.crc32(one[PREFIX:]) and zero is False, position


@pytest.mark.usefixtures("small_parts")
def test_one_thread_and_many_give_the_same_results(tmp_path: Path) -> None:
    """Regions of every kind in one file, many of them split into parts: the same list of
    results, in the same order, whatever the number of threads."""
    generator = torch.Generator().manual_seed(3)
    chunks: list[bytes] = [b"\x02" * PREFIX]
    regions: list[_deep.Region] = []
    for n, dtype in enumerate(sorted(NONFINITE_SCANNED) * 2):
        count = int(torch.randint(1, 3 * SMALL_PART // 16, (1,), generator=generator))
        tensor = _finite(dtype, count)
        if n % 3 == 0:
            _set(tensor, count // 2, _specials(dtype)[n % 3])
        raw = _bytes(tensor)
        offset = sum(map(len, chunks))
        regions.append(_deep.Region(offset, len(raw), dtype, crc=n % 2 == 0, zeros=n % 5 == 0, infinite=n % 4 == 0))
        chunks.append(raw)
    chunks.append(bytes(SMALL_PART * 2))
    regions.append(_deep.Region(sum(map(len, chunks[:-1])), SMALL_PART * 2, crc=True, zeros=True))
    path = tmp_path / "mixed.bin"
    path.write_bytes(b"".join(chunks))
    with FileSample.open(str(path)) as sample:
        one = _deep.check(sample, regions, 1)
        assert _deep.check(sample, regions, 2) == one
        assert _deep.check(sample, regions, 5) == one
    assert any(r.nonfinite for r in one) and one[-1].zero is True


class _CutWhileRead(FileSample):
    """A file truncated by someone else just after ckptdoctor's first read of it."""

    path = ""
    cut = 0

    def readinto(self, offset: int, buffer: memoryview) -> int:
        got = super().readinto(offset, buffer)
        if os.stat(self.path).st_size > self.cut:
            os.truncate(self.path, self.cut)
        return got


@pytest.mark.usefixtures("small_parts")
@pytest.mark.parametrize("threads", [1, 3])
def test_a_file_cut_while_it_is_read_is_reported(tmp_path: Path, threads: int) -> None:
    path = tmp_path / "cut.bin"
    length = 4 * SMALL_PART
    path.write_bytes(np.ones(length // 4, np.float32).tobytes())
    regions = [_deep.Region(0, length, "float32", crc=True)]
    with _CutWhileRead.open(str(path)) as sample:
        sample.path, sample.cut = str(path), SMALL_PART + 100
        issues, checked = _deep.scan(sample, regions, threads)
    assert checked == []
    ((problem, detail),) = [(issue.problem, issue.detail) for issue in issues]
    assert problem is Problem.UNREADABLE and "while it was being read" in detail


@pytest.mark.parametrize("threads", [1, 2])
def test_a_torch_file_cut_during_verify_deep_is_reported(tmp_path: Path, threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_deep, "PART", SMALL_PART)
    path = tmp_path / "model.pt"
    torch.save({f"w{n}": torch.ones(SMALL_PART // 4) for n in range(4)}, path)
    with _CutWhileRead.open(str(path)) as sample:
        sample.path, sample.cut = str(path), path.stat().st_size // 2
        report = verify_sample(sample, "model.pt", deep=threads)
    assert Problem.UNREADABLE in report.problems


def test_burn_records_count_in_memory_alike() -> None:
    """Tensor bytes already in memory (burn records) go through the same counters, block by block."""
    tensor = torch.ones(_deep.BLOCK // 2 + 3, dtype=torch.bfloat16)
    for position in (0, _deep.BLOCK // 2 - 1, _deep.BLOCK // 2, _deep.BLOCK // 2 + 2):
        tensor[position] = float("nan")
    assert _deep.count_nonfinite(_bytes(tensor), "bfloat16") == 4
    assert _deep.count_nonfinite(_bytes(tensor), "int8") == 0


_BLAS_PROBE = """
import ctypes, os, sys
from ckptdoctor.readers._deep import BLAS_THREADS, numpy
np = numpy()
print(sorted(name for name in BLAS_THREADS if name in os.environ))
with open("/proc/self/maps") as maps:
    libraries = {line.split()[-1] for line in maps if "openblas" in line.lower() and line.rstrip().endswith(".so")}
threads = None
for library in libraries:
    for symbol in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads"):
        function = getattr(ctypes.CDLL(library), symbol, None)
        if function is not None:
            threads = function()
print(threads)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_numpy_loads_with_one_blas_thread_and_leaves_the_environment_as_it_was() -> None:
    env = {k: v for k, v in os.environ.items() if k not in _deep.BLAS_THREADS}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", _BLAS_PROBE], env=env, capture_output=True, text=True, check=True)
    names, threads = done.stdout.split("\n")[:2]
    assert names == "[]", "the thread counts are set for the import only"
    if threads == "None":
        pytest.skip("numpy's BLAS here is not OpenBLAS")
    assert threads == "1"
    # a count the user set is theirs
    done = subprocess.run(
        [sys.executable, "-c", _BLAS_PROBE], env={**env, "OMP_NUM_THREADS": "2"}, capture_output=True, text=True, check=True
    )
    names, threads = done.stdout.split("\n")[:2]
    assert names == "['OMP_NUM_THREADS']" and threads == "2"
