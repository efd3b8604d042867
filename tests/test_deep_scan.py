"""``verify --deep``'s scan (``readers/deep_scan.py``) is exact: every NaN and Inf of every float
dtype ckptdoctor scans is counted wherever it lies (the first value, the last, either side of a
block's or a part's edge), finite values never are, zeros and CRC-32s come out as the bytes say,
one thread or several, and a file cut while it is read is reported, never a crash.

The reference is torch: each dtype is widened to float64 (or split into its complex parts) and
asked ``isnan`` / ``isfinite``, a computation independent of the one-pass test the scan makes.
These run through whichever block tests the module chose: the compiled ones where the extension is
built, numpy's under ``CKPTDOCTOR_NO_CEDGES=1``. The two are also compared directly, byte pattern
by byte pattern, at every alignment, and through a whole ``verify --deep`` report.
"""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from _leaks import assert_nothing_left_behind

from ckptdoctor.model import Problem
from ckptdoctor.readers import deep_scan
from ckptdoctor.readers.dtypes import NONFINITE_SCANNED
from ckptdoctor.readers.files import verify_sample
from ckptdoctor.readers.sample import BytesSample, FileSample, Sample

torch = pytest.importorskip("torch")
np = deep_scan.numpy()
ROOT = Path(__file__).resolve().parents[1]

PREFIX = 7
"""Bytes before the tensor in each test file: a region need not start on an aligned offset."""
SMALL_PART = deep_scan.BLOCK + 4096
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
    (result,) = deep_scan.check(sample, [deep_scan.Region(PREFIX, length, dtype, infinite=nan_only)], threads)
    return result.nonfinite


def _positions(count: int, element: int) -> list[int]:
    """The first and last values, each lane of a BLAS kernel's unrolled loop, and both sides of
    every block's and every small part's edge."""
    per_block = deep_scan.BLOCK // element
    per_part = SMALL_PART // element
    edges = [per_block * n + d for n in (1, 2) for d in (-1, 0, 1)] + [per_part + d for d in (-1, 0, 1)]
    return sorted({p for p in [*range(40), *edges, count // 2, count - 2, count - 1] if 0 <= p < count})


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deep_scan, "PART", SMALL_PART)


@pytest.mark.usefixtures("small_parts")
@pytest.mark.parametrize("dtype", sorted(NONFINITE_SCANNED))
def test_every_nonfinite_value_is_counted_wherever_it_lies(dtype: str) -> None:
    element = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    count = (2 * deep_scan.BLOCK + 8192) // element + 3  # three blocks, the last one short
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
    for length in [*range(1, 70), deep_scan.BLOCK // dtype.itemsize]:
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
    regions = [deep_scan.Region(PREFIX, length, crc=True, zeros=True)]
    ((crc, _, zero),) = deep_scan.check(BytesSample(bytes(data)), regions, threads)
    assert crc == zlib.crc32(data[PREFIX:]) and zero is False
    data[PREFIX:] = bytes(length)
    ((crc, _, zero),) = deep_scan.check(BytesSample(bytes(data)), regions, threads)
    assert crc == zlib.crc32(data[PREFIX:]) and zero is True
    for position in (0, 1, deep_scan.BLOCK - 1, deep_scan.BLOCK, SMALL_PART, length - 9, length - 1):
        one = bytearray(data)
        one[PREFIX + position] = 1
        ((crc, _, zero),) = deep_scan.check(BytesSample(bytes(one)), regions, threads)
        assert crc == zlib.crc32(one[PREFIX:]) and zero is False, position


@pytest.mark.usefixtures("small_parts")
def test_one_thread_and_many_give_the_same_results(tmp_path: Path) -> None:
    """Regions of every kind in one file, many of them split into parts: the same list of
    results, in the same order, whatever the number of threads."""
    generator = torch.Generator().manual_seed(3)
    chunks: list[bytes] = [b"\x02" * PREFIX]
    regions: list[deep_scan.Region] = []
    for n, dtype in enumerate(sorted(NONFINITE_SCANNED) * 2):
        count = int(torch.randint(1, 3 * SMALL_PART // 16, (1,), generator=generator))
        tensor = _finite(dtype, count)
        if n % 3 == 0:
            _set(tensor, count // 2, _specials(dtype)[n % 3])
        raw = _bytes(tensor)
        offset = sum(map(len, chunks))
        regions.append(deep_scan.Region(offset, len(raw), dtype, crc=n % 2 == 0, zeros=n % 5 == 0, infinite=n % 4 == 0))
        chunks.append(raw)
    chunks.append(bytes(SMALL_PART * 2))
    regions.append(deep_scan.Region(sum(map(len, chunks[:-1])), SMALL_PART * 2, crc=True, zeros=True))
    path = tmp_path / "mixed.bin"
    path.write_bytes(b"".join(chunks))
    with FileSample.open(str(path)) as sample:
        one = deep_scan.check(sample, regions, 1)
        assert deep_scan.check(sample, regions, 2) == one
        assert deep_scan.check(sample, regions, 5) == one
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
    regions = [deep_scan.Region(0, length, "float32", crc=True)]
    with _CutWhileRead.open(str(path)) as sample:
        sample.path, sample.cut = str(path), SMALL_PART + 100
        issues, checked = deep_scan.scan(sample, regions, threads)
    assert checked == []
    ((problem, detail),) = [(issue.problem, issue.detail) for issue in issues]
    assert problem is Problem.UNREADABLE and "while it was being read" in detail


@pytest.mark.parametrize("threads", [1, 2])
def test_a_torch_file_cut_during_verify_deep_is_reported(tmp_path: Path, threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deep_scan, "PART", SMALL_PART)
    path = tmp_path / "model.pt"
    torch.save({f"w{n}": torch.ones(SMALL_PART // 4) for n in range(4)}, path)
    with _CutWhileRead.open(str(path)) as sample:
        sample.path, sample.cut = str(path), path.stat().st_size // 2
        report = verify_sample(sample, "model.pt", deep=threads)
    assert Problem.UNREADABLE in report.problems


def test_burn_records_count_in_memory_alike() -> None:
    """Tensor bytes already in memory (burn records) go through the same counters, block by block."""
    tensor = torch.ones(deep_scan.BLOCK // 2 + 3, dtype=torch.bfloat16)
    for position in (0, deep_scan.BLOCK // 2 - 1, deep_scan.BLOCK // 2, deep_scan.BLOCK // 2 + 2):
        tensor[position] = float("nan")
    assert deep_scan.count_nonfinite(_bytes(tensor), "bfloat16") == 4
    assert deep_scan.count_nonfinite(_bytes(tensor), "int8") == 0


_BLAS_PROBE = """
import ctypes, os, sys
from ckptdoctor.readers.deep_scan import BLAS_THREADS, numpy
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
    env = {k: v for k, v in os.environ.items() if k not in deep_scan.BLAS_THREADS}
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


# The compiled block tests against numpy's


def test_one_table_names_every_scanned_float() -> None:
    assert set(deep_scan.FLOAT_BITS) == NONFINITE_SCANNED


@pytest.fixture
def scan_block() -> deep_scan.ScanBlock:
    """The compiled test, whether or not the module chose it (``CKPTDOCTOR_NO_CEDGES``)."""
    cedges = pytest.importorskip("ckptdoctor.readers._cedges", reason="the extension is not built: numpy's tests alone run")
    compiled: deep_scan.ScanBlock = cedges.scan_block
    return compiled


def _patterns(bits: deep_scan.FloatBits) -> list[int]:
    """Bit patterns either side of every boundary the table draws, with the sign bit and without:
    zero and negative zero, the smallest subnormals, the largest finite value, Inf, quiet and
    signalling NaN with payloads, and (float8 fnuz, e8m0) the one NaN pattern."""
    top = (1 << (8 * bits.size)) - 1
    sign = top & ~bits.mask
    near = {0, 1, 2, bits.least - 1, bits.least, bits.least + 1, bits.least + 2, bits.most - 1, bits.most, bits.mask}
    near |= {bits.least | (bits.least + 1) >> 1 & ~bits.least, bits.least | 0x5A5A5A5A5A5A5A5A & bits.mask & ~bits.least}
    return sorted({(value | extra) & top for value in near for extra in (0, sign) if value >= 0})


def _buffers(size: int) -> list[bytes]:
    """Random bytes and every crafted pattern of each float type of this size, at lengths that are
    and are not whole elements (a trailing partial element is not counted)."""
    generator = random.Random(size)
    crafted = b"".join(p.to_bytes(size, "little") for bits in deep_scan.FLOAT_BITS.values() if bits.size == size for p in _patterns(bits))
    noise = generator.randbytes(deep_scan.BLOCK)
    lengths = [0, 1, 3, 5, 7, 8, 9, 13, 4095, 4096, 4097, deep_scan.BLOCK - 1]
    every = b"\xff" * (deep_scan.BLOCK - 5)  # NaN in every type: every element counts, more than a byte or a 16-bit lane can hold
    return [b"", crafted, crafted[:-1], crafted * 3 + b"\xff" * 3, every, noise, noise[: deep_scan.BLOCK // 3 + 1]] + [
        noise[:n] for n in lengths
    ]


def _numpy_found(dtype: str | None, nan_only: bool, data: bytes) -> tuple[int, bool]:
    scratch = deep_scan._Scratch()
    scratch.view[: len(data)] = data
    with np.errstate(invalid="ignore", over="ignore"):
        return deep_scan._numpy_test(dtype, nan_only)(scratch, len(data), True)


@pytest.mark.parametrize("dtype", [*sorted(NONFINITE_SCANNED), None])
def test_compiled_and_numpy_tests_agree_at_every_alignment(scan_block: deep_scan.ScanBlock, dtype: str | None) -> None:
    bits = deep_scan.FLOAT_BITS[dtype] if dtype else None
    for data in _buffers(bits.size if bits else 1):
        for nan_only in (False, True):
            expected = _numpy_found(dtype, nan_only, data)
            test = deep_scan._compiled_test(scan_block, dtype, nan_only)
            scratch = deep_scan._Scratch()
            scratch.view[: len(data)] = data
            assert test(scratch, len(data), True) == expected, (dtype, nan_only, len(data))
            assert test(scratch, len(data), False) == (expected[0], False)
            args = (bits.size, bits.mask, bits.first(nan_only), bits.most) if bits else (0, 0, 0, 0)
            for offset in range(8):  # a region starts anywhere in a file, a burn payload anywhere in memory
                unaligned = bytearray(offset) + data + b"\xff"
                assert scan_block(memoryview(unaligned)[offset:], len(data), *args, True) == expected, (dtype, offset)


def test_the_crafted_patterns_are_what_numpy_says() -> None:
    """The table itself, for the types numpy computes with: a pattern counts exactly where
    ``isfinite`` (``isnan``) says it is not finite (NaN)."""
    for dtype, kind in (("float16", np.float16), ("float32", np.float32), ("float64", np.float64)):
        bits = deep_scan.FLOAT_BITS[dtype]
        values = np.frombuffer(b"".join(p.to_bytes(bits.size, "little") for p in _patterns(bits)), kind)
        assert _numpy_found(dtype, False, values.tobytes())[0] == int((~np.isfinite(values)).sum()) > 0
        assert _numpy_found(dtype, True, values.tobytes())[0] == int(np.isnan(values).sum()) > 0


def test_the_compiled_zero_test_stops_at_any_byte(scan_block: deep_scan.ScanBlock) -> None:
    for length in (0, 1, 7, 8, 4095, 4096, 4097, 8193, deep_scan.BLOCK):
        data = bytearray(length + 1)
        assert scan_block(data, length, 0, 0, 0, 0, True) == (0, True)
        for position in {0, length // 2, 4095, 4096, length - 8, length - 1} - {-1}:
            if 0 <= position < length:
                data[position] = 0x10
                assert scan_block(data, length, 0, 0, 0, 0, True) == (0, False), (length, position)
                data[position] = 0
        data[length] = 1  # past the length: not looked at
        assert scan_block(data, length, 0, 0, 0, 0, True) == (0, True)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((bytearray(8), 9, 4, 1, 0, 1, False), ValueError),  # longer than the buffer
        ((bytearray(8), -1, 4, 1, 0, 1, False), ValueError),
        ((bytearray(8), 8, 3, 1, 0, 1, False), ValueError),  # no such element size
        ((bytearray(8), 8, 1, 0x100, 0, 1, False), ValueError),  # a mask wider than the element
        ((bytearray(8), 8, 2, 0xFF, 2, 1, False), ValueError),  # an empty range
        ((bytearray(8), 8, 4, -1, 0, 1, False), OverflowError),
        (("text", 4, 4, 1, 0, 1, False), TypeError),  # no buffer
        ((memoryview(bytearray(16))[::2], 4, 4, 1, 0, 1, False), BufferError),  # not contiguous
    ],
)
def test_the_compiled_test_refuses_what_it_cannot_read(
    scan_block: deep_scan.ScanBlock, args: tuple[object, ...], error: type[Exception]
) -> None:
    with pytest.raises(error):
        scan_block(*args)  # type: ignore[arg-type]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_the_compiled_test_keeps_nothing(scan_block: deep_scan.ScanBlock) -> None:
    data = bytearray(os.urandom(4096))

    def calls() -> None:
        for _ in range(20):
            scan_block(data, len(data), 4, 0x7FFF_FFFF, 0x7F80_0000, 0x7FFF_FFFF, True)
            try:
                scan_block(data, len(data) + 1, 4, 0x7FFF_FFFF, 0x7F80_0000, 0x7FFF_FFFF, True)
            except ValueError:
                pass
            else:
                raise AssertionError("a length past the buffer was read")
        data.extend(b"")  # resizable again: every buffer export was released

    assert_nothing_left_behind(calls, 20)
    data.append(0)


@pytest.mark.skipif(
    os.environ.get("CKPTDOCTOR_REQUIRE_CEDGES") != "1", reason="CKPTDOCTOR_REQUIRE_CEDGES=1 asks for the compiled extensions"
)
def test_the_compiled_tests_are_chosen_where_built() -> None:
    assert (deep_scan.compiled_scan_block is not None) == (os.environ.get("CKPTDOCTOR_NO_CEDGES") != "1")


def _deep_run(folder: Path) -> Path:
    """Safetensors saves of three epochs (NaN and Inf in the second; the last one's tail zeroed, its
    last tensor whole) and a torch.save of every scanned float type with NaN, Inf, and an all-zero
    tensor."""
    from safetensors.torch import save_file  # the library writes the real format; only these tests need it

    folder.mkdir()
    generator = torch.Generator().manual_seed(5)
    for epoch in (1, 2, 3):
        weights = {"a": torch.randn(3000, generator=generator), "b": torch.randn(70_000, generator=generator), "z": torch.ones(2048)}
        if epoch == 2:
            weights["a"][[0, 17, 2999]] = torch.tensor([float("nan"), float("inf"), float("-inf")])
        save_file(weights, str(folder / f"model-{epoch}.safetensors"))
    path = folder / "model-3.safetensors"
    with path.open("r+b") as data:
        data.seek(path.stat().st_size - 8192 - 64)
        data.write(bytes(8192 + 64))
    state = {}
    for dtype in sorted(NONFINITE_SCANNED):
        tensor = _finite(dtype, 50_000)
        for position, value in zip((1, 25_000, 49_999), _specials(dtype), strict=False):
            _set(tensor, position, value)
        state[dtype] = tensor
    state["zeros"] = torch.zeros(10_000)
    torch.save(state, folder / "extra.pt")
    return folder


@pytest.mark.slow
def test_verify_deep_reports_alike_with_and_without_the_compiled_tests(scan_block: deep_scan.ScanBlock, tmp_path: Path) -> None:
    del scan_block  # only where the extension is built
    run = _deep_run(tmp_path / "run")
    outputs = []
    for off in ("0", "1"):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "CKPTDOCTOR_NO_CEDGES": off}
        command = [sys.executable, "-m", "ckptdoctor", "verify", "--deep", "--format", "json", str(run)]
        done = subprocess.run(command, env=env, capture_output=True, timeout=120, check=False)
        assert done.returncode == 1, done.stderr[-2000:]
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    assert b"CKD212" in outputs[0] and b"nonfinite-values" in outputs[0]


class _CheckedHereTaskByTask:
    """A fan-out (``verify --deep --ray``'s seam) that checks each part here as a task of its own,
    and notes the tally's bytes each time one finishes."""

    def __init__(self, tally: object) -> None:
        self.tally = tally
        self.seen: list[int] = []
        self._counted: dict[str, int] = {}
        self._read: Callable[[int], None] = lambda size: None
        self._lock = threading.Lock()

    def check_parts(self, address: deep_scan.Address, parts: Sequence[deep_scan.Region]) -> list[deep_scan.Checked]:
        results: list[deep_scan.Checked] = []
        for part in parts:
            results += deep_scan.check_at(address, [part])
            with self._lock:  # the files' threads finish tasks one at a time: what each saw is in order
                self._counted[address.path] = self._counted.get(address.path, 0) + part.length
                self._read(part.length)
                self.seen.append(self.tally.bytes_read)  # type: ignore[attr-defined]
        return results

    def cancel(self) -> None:
        pass

    def counting(self, read: Callable[[int], None]) -> None:
        self._read = read

    def settled(self, path: str) -> int:
        return self._counted.pop(path, 0)


def test_a_fanned_out_check_counts_its_bytes_as_each_task_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The progress of ``verify --deep --ray`` moves as the cluster's tasks finish, not only as
    whole files do, and ends at the bytes of the files, each counted once."""
    from safetensors.torch import save_file

    from ckptdoctor.pipelines.verify import VerifyOptions, verify
    from ckptdoctor.progress import Tally

    monkeypatch.setattr(deep_scan, "PART", 1024 * 1024)
    for name in ("a", "b"):
        save_file({"w": torch.ones(1024, 1024)}, tmp_path / f"{name}.safetensors")  # 4 MiB: 4 parts each
    sizes = [(tmp_path / f"{name}.safetensors").stat().st_size for name in ("a", "b")]
    tally = Tally()
    fanout = _CheckedHereTaskByTask(tally)
    with deep_scan.fanned_out(fanout):
        report, _ = verify([str(tmp_path)], VerifyOptions(deep=True), tally=tally)
    assert report.ok and len(fanout.seen) == 8
    # every task moved it, the first before any file was done
    assert all(later > earlier for earlier, later in itertools.pairwise(fanout.seen)) and 0 < fanout.seen[0] < min(sizes), fanout.seen
    assert (tally.read, tally.bytes_read) == (2, sum(sizes))
