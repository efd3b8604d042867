"""``verify --deep``: every byte of a file, read once: CRC-32 of zip members, non-finite floats,
regions that hold only zero bytes.

Files are read with ``preadv`` into one reusable buffer per thread (never mapped: a file cut
while mapped kills the process with SIGBUS), so memory stays flat whatever the file size. With
several threads, each takes the next part of the file and reads and checks it: while one copies
from the page cache, in the kernel, another checks the block it read (zlib-ng, numpy and the
reads release the GIL). A block is a quarter of a core's L2 cache, so that it is still there
when the checks read it. Big regions are split into parts that threads share, and the CRCs of
the parts are combined.

The NaN/Inf count and the zero test of each block are made by ``scan_block`` of the compiled
extension (``readers/_cedges.c``) where it is built and chosen (``_edges.COMPILED``: the same
``CKPTDOCTOR_NO_CEDGES=1`` turns both to Python), with the GIL released; numpy is then never
imported. Otherwise numpy makes them, imported only here, with its BLAS on one thread
(``numpy``). Both read the same table of float bit patterns (``FLOAT_BITS``) and give the same
counts (``tests/test_deep_scan.py``).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import os
import sys
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import NamedTuple, Protocol

from ckptdoctor.model import FileIssue, Problem
from ckptdoctor.readers._edges import COMPILED
from ckptdoctor.readers.sample import Address, ObjectAddress, Sample, opened_at

ScanBlock = Callable[[bytearray | bytes | memoryview, int, int, int, int, int, bool], tuple[int, bool]]
compiled_scan_block: ScanBlock | None = None
if COMPILED:  # the extension loaded and CKPTDOCTOR_NO_CEDGES does not turn it off
    with contextlib.suppress(ImportError):  # an extension built before scan_block: numpy's tests
        from ckptdoctor.readers._cedges import scan_block as compiled_scan_block

BLOCK = 256 * 1024
"""Bytes read at a time by each thread: small enough to stay in a core's L2 cache between the
read and the checks, large enough that a syscall per block costs nothing."""
PART = 64 * 1024 * 1024
"""Regions longer than this are split so that threads share them."""

_Crc = Callable[[memoryview, int], int]

BLAS_THREADS = (
    "OPENBLAS_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
"""What BLAS libraries (OpenBLAS, MKL, BLIS, Accelerate, any OpenMP one) read their thread count from."""


@functools.cache
def numpy() -> ModuleType:
    """numpy, for the deep check alone. Imported here first, its BLAS (which computes the dot
    products of the NaN test) is told to run one thread: OpenBLAS would otherwise split each
    block's dot product over every core, against the threads that already check one block each,
    and spin its idle threads on the cores they need. The thread counts are read when the library
    loads, so they are set for the import and removed after it: a library loaded later in this
    process (torch for ``verify --load``, a caller's own) gets its usual threads. A count set by
    the user (any of ``BLAS_THREADS``) is theirs: then none is set."""
    if "numpy" not in sys.modules and not any(name in os.environ for name in BLAS_THREADS):
        for name in BLAS_THREADS:
            os.environ[name] = "1"
        try:
            import numpy as np  # only --deep pays for numpy
        finally:
            for name in BLAS_THREADS:
                os.environ.pop(name, None)
        return np
    import numpy as np  # only --deep pays for numpy

    return np


def prepare() -> None:
    """Load what the block tests use: numpy, unless the compiled tests make them. Called before
    threads start, and before a fork (the workers then share its pages)."""
    if compiled_scan_block is None:
        numpy()


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
    """The file became shorter while it was read, or its bytes could not all be read."""


class Fanout(Protocol):
    """Where the parts of a deep check are read and checked when not in this process: tasks on
    other machines that read the file at its address themselves (``fanout/``)."""

    def check_parts(self, address: Address, parts: Sequence[Region]) -> list[Checked]:
        """What :func:`check_parts` finds of each of ``parts`` of the file at ``address``, in the
        same order; :class:`FileChanged` where some could not be read."""
        ...

    def cancel(self) -> None:
        """Stop every check still under way (Ctrl-C): those waiting for it then fail at once."""
        ...

    def counting(self, read: Callable[[int], None]) -> None:
        """Call ``read(n)`` each time ``n`` more bytes have been checked elsewhere (a task done), from any thread."""
        ...

    def settled(self, path: str) -> int:
        """The bytes of the file at ``path`` (an address's ``path``) counted so far, then forgotten: its read is done."""
        ...


_fanout: contextvars.ContextVar[Fanout | None] = contextvars.ContextVar("fanout", default=None)


@contextlib.contextmanager
def fanned_out(fanout: Fanout) -> Iterator[None]:
    """Within this (and in threads started with a copy of its context), the deep check of every
    sample that has an address goes to ``fanout``."""
    token = _fanout.set(fanout)
    try:
        yield
    finally:
        _fanout.reset(token)


def fanout() -> Fanout | None:
    """Where deep checks go here, if not to this process."""
    return _fanout.get()


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
    elsewhere = _fanout.get()
    address = sample.address() if elsewhere is not None and regions else None
    if elsewhere is not None and address is not None:
        results = elsewhere.check_parts(address, [part for _, part in parts])
    else:
        results = check_parts(sample, [part for _, part in parts], threads)
    combined: list[Checked] = [Checked(0 if r.crc else None, 0, r.zeros or None) for r in regions]
    for (number, part), result in zip(parts, results, strict=True):
        before = combined[number]
        crc = before.crc
        if crc is not None and result.crc is not None:
            crc = result.crc if part.offset == regions[number].offset else _combine(crc, result.crc, part.length)
        zero = before.zero and result.zero if before.zero is not None else None
        combined[number] = Checked(crc, before.nonfinite + result.nonfinite, zero)
    return combined


def check_parts(sample: Sample, parts: Sequence[Region], threads: int = 1) -> list[Checked]:
    """Each of ``parts`` read and checked in this process, by ``threads`` threads where they are
    worth it; results in the same order. The parts are no longer than ``PART``, so their CRCs
    combine (``check``)."""
    sample.read_in_order()
    prepare()  # by this thread, before any other needs it
    if threads > 1 and sum(part.length for part in parts) > PART:
        return _shared(list(parts), sample, threads)
    scratch = _scratch()
    return [_check_part(sample, part, scratch) for part in parts]


OBJECT_READS = 4
"""Parts of an object a task reads at once: one GET stream is bounded by its round trips, not
by the node's network."""


def check_at(address: Address, parts: Sequence[Region]) -> list[Checked]:
    """:func:`check_parts` of the file or object at ``address``, opened here: what a task on
    another machine runs. :class:`FileChanged` where what is there is not the one meant."""
    try:
        with opened_at(address) as sample:
            return check_parts(sample, parts, OBJECT_READS if isinstance(address, ObjectAddress) else 1)
    except LookupError as other:
        raise FileChanged(str(other)) from None
    except OSError as error:
        if error.errno == errno.ESTALE:  # another write's object: no retry reads this one
            raise FileChanged(error.strerror or str(error)) from None
        raise


def _shared(parts: list[Region], sample: Sample, threads: int) -> list[Checked]:
    """``parts`` checked by ``threads`` threads, each taking the next part as it finishes one
    (the parts are in file order: the threads read near each other, ahead of the kernel's
    read-ahead for the file); results in the same order. A failure in any thread (the file
    cut meanwhile) stops the others at their next part and is raised here."""
    results: list[Checked | None] = [None] * len(parts)
    numbers = iter(range(len(parts)))
    lock = threading.Lock()
    failures: list[BaseException] = []

    def work() -> None:
        scratch = _scratch()
        try:
            while not failures:
                with lock:
                    number = next(numbers, None)
                if number is None:
                    return
                results[number] = _check_part(sample, parts[number], scratch)
        except BaseException as error:  # Ctrl-C or a cut file: handed to the caller's thread
            failures.append(error)

    workers = [threading.Thread(target=work, name=f"ckptdoctor-deep-{n}", daemon=True) for n in range(threads - 1)]
    for worker in workers:
        worker.start()
    work()  # this thread is one of them
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]
    return [result for result in results if result is not None]


def _combine(first: int, second: int, second_length: int) -> int:
    combine = _crc()[1]
    assert combine is not None
    return int(combine(first, second, second_length))


class _Scratch:
    """One thread's read buffer, made once per thread: a fresh buffer per block costs a page
    fault per 4 KiB."""

    def __init__(self) -> None:
        self.buffer = bytearray(BLOCK)
        self.view = memoryview(self.buffer)

    @functools.cached_property
    def arrays(self) -> _Arrays:
        """numpy's views of the buffer, made at its first numpy test: never where the compiled
        tests run, which read the buffer itself."""
        return _Arrays(self.buffer)


class _Arrays:
    """The arrays that view one scratch buffer, with the zeros the NaN test multiplies by, made
    once per thread: an array per block costs a few microseconds."""

    def __init__(self, buffer: bytearray) -> None:
        np = numpy()
        self.words = np.frombuffer(buffer, np.uint64)
        self.halves = np.frombuffer(buffer, np.uint16)
        self.octets = np.frombuffer(buffer, np.uint8)
        self.floats = {4: np.frombuffer(buffer, np.float32), 8: np.frombuffer(buffer, np.float64)}
        self.zeros = {4: np.zeros(BLOCK // 4, np.float32), 8: np.zeros(BLOCK // 8, np.float64)}
        self.magnitudes = np.empty(BLOCK // 2, np.uint16)


_scratches = threading.local()


def _scratch() -> _Scratch:
    """This thread's scratch, reused from file to file."""
    scratch: _Scratch | None = getattr(_scratches, "scratch", None)
    if scratch is None:
        scratch = _scratches.scratch = _Scratch()
    return scratch


class FloatBits(NamedTuple):
    """Which bit patterns of a float type are NaN or Inf: those that, with ``mask`` applied (the
    sign dropped where there is one), lie from ``least`` to ``most``. This is what numpy's
    ``isfinite`` and ``isnan`` say, by bits, whatever the floating-point environment."""

    size: int
    """Bytes of one float (a complex number is a pair of them, each checked)."""
    mask: int
    least: int
    most: int
    inf: bool
    """``least`` is Inf, and NaN lies above it (where there is no Inf, every pattern is NaN)."""

    def first(self, nan_only: bool) -> int:
        """The least pattern counted: one above Inf when only NaN counts."""
        return self.least + (nan_only and self.inf)


_F32 = FloatBits(4, 0x7FFF_FFFF, 0x7F80_0000, 0x7FFF_FFFF, True)  # exponent all ones: Inf, or NaN with a mantissa
_F64 = FloatBits(8, 0x7FFF_FFFF_FFFF_FFFF, 0x7FF0_0000_0000_0000, 0x7FFF_FFFF_FFFF_FFFF, True)
FLOAT_BITS = {
    "float32": _F32,
    "complex64": _F32,
    "float64": _F64,
    "complex128": _F64,
    "float16": FloatBits(2, 0x7FFF, 0x7C00, 0x7FFF, True),
    "bfloat16": FloatBits(2, 0x7FFF, 0x7F80, 0x7FFF, True),
    "float8_e4m3fn": FloatBits(1, 0x7F, 0x7F, 0x7F, False),  # S.1111.111 is NaN; no Inf
    "float8_e5m2": FloatBits(1, 0x7F, 0x7C, 0x7F, True),  # exponent all ones: S.11111.00 is Inf, the rest NaN
    "float8_e4m3fnuz": FloatBits(1, 0xFF, 0x80, 0x80, False),  # only 1.0000.000 ("negative zero") is NaN
    "float8_e5m2fnuz": FloatBits(1, 0xFF, 0x80, 0x80, False),
    "float8_e8m0fnu": FloatBits(1, 0xFF, 0xFF, 0xFF, False),  # only 0xFF is NaN
}
"""Every float type the deep check scans, for the compiled tests and numpy's alike."""

_Test = Callable[[_Scratch, int, bool], tuple[int, bool]]
"""Among the first ``n`` bytes of a scratch buffer: how many values are NaN or Inf, and (when
asked; else False) whether every byte is zero."""


def _check_part(sample: Sample, region: Region, scratch: _Scratch) -> Checked:
    crc32 = _crc()[0]
    scanned = region.dtype in FLOAT_BITS
    test = _block_test(region.dtype if scanned else None, region.infinite)
    crc = 0
    nonfinite = 0
    zero = region.zeros  # until a byte that is not: then no longer looked at
    position, end = region.offset, region.offset + region.length
    with _quiet():
        while position < end:
            got = _fill(sample, position, scratch.view[: min(BLOCK, end - position)])
            if region.crc:
                crc = crc32(scratch.view[:got], crc)
            if scanned or zero:
                found, zero = test(scratch, got, zero)
                nonfinite += found
            position += got
    return Checked(crc if region.crc else None, nonfinite, zero if region.zeros else None)


def _quiet() -> contextlib.AbstractContextManager[object]:
    """No numpy warning per block (NaN in, NaN out); nothing to silence in the compiled tests."""
    if compiled_scan_block is not None:
        return contextlib.nullcontext()
    return numpy().errstate(invalid="ignore", over="ignore")  # type: ignore[no-any-return]


def _fill(sample: Sample, position: int, view: memoryview) -> int:
    """Read ``view`` full from ``position``: a block that ends inside an element would split it
    across two checks. Raises FileChanged where the file ends first."""
    got = 0
    while got < len(view):
        more = sample.readinto(position + got, view[got:])
        if more <= 0:
            raise FileChanged(f"the file ended at byte {position + got} while it was being read")
        got += more
    return got


def _block_test(dtype: str | None, nan_only: bool) -> _Test:
    """The compiled test where it is chosen, else numpy's."""
    if compiled_scan_block is not None:
        return _compiled_test(compiled_scan_block, dtype, nan_only)
    return _numpy_test(dtype, nan_only)


@functools.cache
def _compiled_test(scan: ScanBlock, dtype: str | None, nan_only: bool) -> _Test:
    """One pass of C over the buffer (the GIL released); ``dtype`` None: the zero test alone."""
    bits = FLOAT_BITS.get(dtype) if dtype else None
    size, mask, least, most = (bits.size, bits.mask, bits.first(nan_only), bits.most) if bits else (0, 0, 0, 0)

    def compiled(scratch: _Scratch, length: int, zeros: bool) -> tuple[int, bool]:
        return scan(scratch.buffer, length, size, mask, least, most, zeros)

    return compiled


@functools.cache
def _numpy_test(dtype: str | None, nan_only: bool) -> _Test:
    count = _nonfinite_counter(dtype, nan_only) if dtype else None

    def with_numpy(scratch: _Scratch, length: int, zeros: bool) -> tuple[int, bool]:
        arrays = scratch.arrays
        return (count(arrays, length) if count is not None else 0), zeros and _all_zero(arrays, length)

    return with_numpy


def _all_zero(arrays: _Arrays, length: int) -> bool:
    words = length // 8  # eight bytes at a time, then the odd end
    return not (arrays.words[:words].any() or arrays.octets[words * 8 : length].any())


_Count = Callable[[_Arrays, int], int]
"""Non-finite values among the first ``n`` bytes of a scratch buffer, counted by numpy."""


@functools.cache
def _nonfinite_counter(dtype: str, nan_only: bool = False) -> _Count | None:
    """A counter of NaN and Inf (``nan_only``: of NaN) in one float dtype's bytes, made once
    (threads share it: it keeps no state)."""
    bits = FLOAT_BITS.get(dtype)
    if bits is None:
        return None
    np = numpy()
    if bits.size == 1:
        mask, least, most = bits.mask, bits.first(nan_only), bits.most

        def count_bytes(arrays: _Arrays, length: int) -> int:
            kept = arrays.octets[:length] & mask
            return int(np.count_nonzero(kept == least if least == most else (kept >= least) & (kept <= most)))

        return count_bytes
    size = bits.size
    if size > 2:  # floats numpy (and its BLAS) computes with

        def count_wide(arrays: _Arrays, length: int) -> int:
            values = arrays.floats[size][: length // size]
            # One pass over the block, in BLAS: a NaN or an Inf times zero is NaN, a finite value
            # times zero is zero, and NaN survives a sum; only NaN survives a sum of squares (Inf
            # squared stays Inf, an overflow too). The exact count is made only when it fires.
            if nan_only:
                test = values.dot(values)
                return 0 if test == test else int(np.count_nonzero(np.isnan(values)))
            test = values.dot(arrays.zeros[size][: values.size])
            return 0 if test == test else int(values.size - np.count_nonzero(np.isfinite(values)))

        return count_wide
    mask, least = bits.mask, bits.first(nan_only)  # all exponent bits and a zero mantissa is Inf: NaN lies above it

    def count_narrow(arrays: _Arrays, length: int) -> int:
        # numpy has no arithmetic on bfloat16: compare the bits, sign aside, with Inf's
        magnitudes = arrays.magnitudes[: length // 2]
        np.bitwise_and(arrays.halves[: length // 2], mask, out=magnitudes)
        if not magnitudes.size or magnitudes.max() < least:
            return 0
        return int(np.count_nonzero(magnitudes >= least))

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
    if dtype not in FLOAT_BITS:
        return 0
    test = _block_test(dtype, False)
    scratch = _scratch()
    found = 0
    with _quiet():
        for start in range(0, len(data), BLOCK):  # through the scratch buffer, which the tests read
            chunk = memoryview(data)[start : start + BLOCK]
            scratch.view[: len(chunk)] = chunk
            found += test(scratch, len(chunk), False)[0]
    return found
