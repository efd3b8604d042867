"""``verify --deep``: every byte of a file, read once: CRC-32 of zip members, non-finite floats,
regions that hold only zero bytes.

Files are read with ``preadv`` into one reusable buffer per thread (never mapped: a file cut
while mapped kills the process with SIGBUS), so memory stays flat whatever the file size.
Big regions are split into parts that threads check at once; zlib, zlib-ng and numpy release
the GIL, and the CRCs of the parts are combined. numpy is imported only here.
"""

from __future__ import annotations

import functools
import threading
import zlib
from collections.abc import Callable
from typing import NamedTuple

from ckptdoctor.model import FileIssue, Problem
from ckptdoctor.readers._sample import Sample

BLOCK = 1024 * 1024
"""Bytes read at a time by each thread."""
PART = 64 * 1024 * 1024
"""Regions longer than this are split so that threads share them."""
_SLICE = 256 * 1024
"""Bytes compared at a time by the 16-bit scans, so that their scratch stays in cache."""

_Crc = Callable[[memoryview, int], int]


@functools.cache
def _crc() -> tuple[_Crc, Callable[[int, int, int], int] | None]:
    """CRC-32 and, where it can, the combination of two parts' CRCs: zlib-ng's (several times
    faster than zlib's), else zlib's, which cannot combine. Loaded at the first deep check."""
    try:
        from zlib_ng.zlib_ng import crc32, crc32_combine  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # pragma: no cover - zlib-ng ships wheels for every platform we test on
        return zlib.crc32, None
    return crc32, crc32_combine


class Region(NamedTuple):
    """Bytes of a file to check: a zip member's (``crc``), a float tensor's (``dtype``), whether
    they are all zero (``zeros``)."""

    offset: int
    length: int
    dtype: str | None = None
    """A float dtype to scan for NaN and Inf, or None."""
    crc: bool = False
    zeros: bool = False
    infinite: bool = False
    """Inf is by design here (an attention mask): only NaN counts."""


class Checked(NamedTuple):
    crc: int | None
    nonfinite: int
    """How many NaN or Inf values the region holds."""
    zero: bool | None = None
    """Whether every byte is zero (None where not asked)."""


class FileChanged(Exception):
    """The file became shorter while it was read."""


def check(sample: Sample, regions: list[Region], threads: int = 1) -> list[Checked]:
    """Check every region; results in the same order."""
    for region in regions:
        if region.offset + region.length > sample.size:
            raise FileChanged(f"bytes {region.offset}-{region.offset + region.length} lie past the end of the file")
    parts: list[tuple[int, Region]] = []
    for number, region in enumerate(regions):
        step = PART if _crc()[1] is not None or not region.crc else max(region.length, 1)
        start = 0
        while True:
            length = min(step, region.length - start)
            parts.append((number, region._replace(offset=region.offset + start, length=length)))
            start += length
            if start >= region.length:
                break
    total = sum(region.length for region in regions)
    if threads > 1 and total > PART:
        # only big files are shared between threads
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(lambda part: _check_part(sample, part[1]), parts))
    else:
        results = [_check_part(sample, part) for _, part in parts]
    combined: list[Checked] = [Checked(0 if r.crc else None, 0, r.zeros or None) for r in regions]
    for (number, part), result in zip(parts, results, strict=True):
        before = combined[number]
        crc = before.crc
        if crc is not None and result.crc is not None:
            crc = result.crc if part.offset == regions[number].offset else _combine(crc, result.crc, part.length)
        zero = before.zero and result.zero if before.zero is not None else None
        combined[number] = Checked(crc, before.nonfinite + result.nonfinite, zero)
    return combined


def _combine(first: int, second: int, second_length: int) -> int:
    combine = _crc()[1]
    assert combine is not None
    return int(combine(first, second, second_length))


_buffers = threading.local()


def _buffer() -> memoryview:
    """This thread's read buffer, reused: a fresh one per part costs a page fault per 4 KiB."""
    buffer: memoryview | None = getattr(_buffers, "buffer", None)
    if buffer is None:
        buffer = _buffers.buffer = memoryview(bytearray(BLOCK))
    return buffer


def _check_part(sample: Sample, region: Region) -> Checked:
    buffer = _buffer()
    crc32 = _crc()[0]
    count = _nonfinite_counter(region.dtype, region.infinite) if region.dtype else None
    crc = 0
    nonfinite = 0
    zero = region.zeros  # until a byte that is not: then no longer looked at
    position, end = region.offset, region.offset + region.length
    while position < end:
        view = buffer[: min(len(buffer), end - position)]
        got = sample.readinto(position, view)
        if got <= 0:
            raise FileChanged(f"the file ended at byte {position} while it was being read")
        view = view[:got]
        if region.crc:
            crc = crc32(view, crc)
        if count is not None:
            nonfinite += count(view)
        if zero:
            zero = _all_zero(view)
        position += got
    return Checked(crc if region.crc else None, nonfinite, zero if region.zeros else None)


def _all_zero(view: memoryview) -> bool:
    import numpy as np  # only --deep pays for numpy

    words = len(view) // 8  # eight bytes at a time, then the odd end
    return not (np.frombuffer(view, np.uint64, words).any() or any(view[words * 8 :]))


_FLOAT8_NONFINITE = {
    "float8_e4m3fn": (0x7F, 0x7F),  # S.1111.111 is NaN; no Inf
    "float8_e5m2": (0x7F, 0x7C),  # exponent all ones: S.11111.00 is Inf, the rest NaN
    "float8_e4m3fnuz": (0xFF, 0x80),  # only 1.0000.000 ("negative zero") is NaN
    "float8_e5m2fnuz": (0xFF, 0x80),
    "float8_e8m0fnu": (0xFF, 0xFF),  # only 0xFF is NaN
}
"""For each 8-bit float: (bits to keep, the least value of those bits that is NaN or Inf)."""


@functools.cache
def _nonfinite_counter(dtype: str, nan_only: bool = False) -> Callable[[memoryview], int] | None:
    """A counter of NaN and Inf (``nan_only``: of NaN) for one float dtype, made once (threads
    share it: no shared state)."""
    import numpy as np  # only --deep pays for numpy

    if dtype in _FLOAT8_NONFINITE:
        mask, least = _FLOAT8_NONFINITE[dtype]
        least += nan_only and dtype == "float8_e5m2"  # its only Inf pattern is the least one

        def count_bytes(view: memoryview) -> int:
            values = np.frombuffer(view, np.uint8, len(view))
            return int(np.count_nonzero((values & mask) >= least))

        return count_bytes
    if nan_only and dtype in ("float32", "float64", "complex64", "complex128"):
        real = np.float32 if dtype in ("float32", "complex64") else np.float64

        def count_nan(view: memoryview) -> int:
            return int(np.count_nonzero(np.isnan(np.frombuffer(view, real, len(view) // real().itemsize))))

        return count_nan
    if dtype in ("float32", "float64", "complex64", "complex128"):
        # a complex number is a pair of floats: each part is checked
        kind = np.float32 if dtype in ("float32", "complex64") else np.float64

        def count_wide(view: memoryview) -> int:
            values = np.frombuffer(view, kind, len(view) // kind().itemsize)
            if not values.size:
                return 0
            with np.errstate(invalid="ignore"):
                # NaN propagates through max/min and Inf is an extreme: both finite means all finite
                if np.isfinite(values.max()) and np.isfinite(values.min()):
                    return 0
            return int(values.size - np.count_nonzero(np.isfinite(values)))

        return count_wide
    exponent = {"float16": 0x7C00, "bfloat16": 0x7F80}.get(dtype)
    if exponent is None:
        return None
    exponent += nan_only  # all exponent bits and a zero mantissa is Inf: NaN lies above it

    def count_narrow(view: memoryview) -> int:
        # all exponent bits set means Inf or NaN: compare the magnitude bits against that
        values = np.frombuffer(view, np.uint16, len(view) // 2)
        scratch = np.empty(min(values.size, _SLICE // 2), np.uint16)
        found = 0
        for start in range(0, values.size, max(scratch.size, 1)):
            chunk = values[start : start + scratch.size]
            magnitudes = scratch[: chunk.size]
            np.bitwise_and(chunk, 0x7FFF, out=magnitudes)
            if magnitudes.size and magnitudes.max() >= exponent:
                found += int(np.count_nonzero(magnitudes >= exponent))
        return found

    return count_narrow


def nonfinite_issues(sample: Sample, regions: list[Region], threads: int) -> list[FileIssue]:
    return scan(sample, regions, threads)[0]


def scan(sample: Sample, regions: list[Region], threads: int) -> tuple[list[FileIssue], list[Checked]]:
    """What is wrong with the float tensors among ``regions`` (NaN, Inf, a file that changed),
    and what each region was found to be (none when the file changed)."""
    try:
        results = check(sample, regions, threads)
    except FileChanged as changed:
        return [FileIssue(Problem.UNREADABLE, str(changed))], []
    total = sum(result.nonfinite for result in results)
    if not total:
        return [], results
    hit = sum(1 for result in results if result.nonfinite)
    floats = sum(1 for region in regions if region.dtype)
    return [FileIssue(Problem.NONFINITE, f"{total} NaN or Inf values in {hit} of {floats} float tensors")], results


def count_nonfinite(data: bytes, dtype: str) -> int:
    """NaN and Inf values in tensor bytes already in memory (burn records decode whole)."""
    count = _nonfinite_counter(dtype)
    return count(memoryview(data)) if count else 0
