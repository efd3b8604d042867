"""NumPy ``.npy`` arrays (alone, or inside any zip): a header, then raw data or a pickle.

The header is read with NumPy's own parser (``numpy.lib.format``), so that what counts as an
array of Python objects is exactly what ``numpy.load`` decides: ``dtype.hasobject``, which
covers ``'O'``, ``'object'`` and object fields inside structured dtypes. Such an array is
stored as a pickle that ``numpy.load(allow_pickle=True)`` runs: it is walked like any other.
Every other valid array is plain data.
"""

from __future__ import annotations

import importlib
import io
import itertools
import math
import re
import struct
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from ckptdoctor.model import FileIssue, FileReport, Problem, Tensor
from ckptdoctor.readers.pickle_safety import judge
from ckptdoctor.readers.sample import Sample
from ckptdoctor.readers.sniff import Format
from ckptdoctor.readers.unpickler import walk, walk_chunks

MAGIC = b"\x93NUMPY"
MAX_HEADER = 1024 * 1024
"""A longer header is not parsed (``numpy.load`` refuses past 10,000 bytes unless allowed to unpickle)."""
MAX_OBJECTS = 256 * 1024 * 1024
_LENGTHS = {1: struct.Struct("<H"), 2: struct.Struct("<I"), 3: struct.Struct("<I")}
_KINDS = {"f": "float", "i": "int", "u": "uint", "b": "bool", "c": "complex"}


def read(sample: Sample) -> FileReport:
    """A ``.npy`` file: its header, and for object arrays the pickle after it (up to ``MAX_OBJECTS``)."""
    head = sample.head(min(sample.size, 4096))
    header = _header(head)
    if isinstance(header, _Cut) and sample.size > len(head):
        head = sample.range(0, min(sample.size, header.needed))
        header = _header(head)
    if isinstance(header, tuple) and header[1].hasobject:
        head = sample.range(0, min(sample.size, MAX_OBJECTS))
    return read_array(head, "array", sample.size)


def read_header(sample: Sample) -> FileReport:
    """``inspect``'s view: the header from the first bytes, and the size it implies; an array of
    objects is named, its pickle left to ``verify``."""
    header = _header(sample.head())
    if isinstance(header, tuple) and header[1].hasobject:
        return FileReport(Format.NUMPY.value, (_objects("array"),))
    if isinstance(header, _Cut) and sample.size > len(sample.head()):
        return FileReport(Format.NUMPY.value)  # a header longer than inspect reads: verify reads it
    return read_array(sample.head(), "array", sample.size)


def _objects(name: str) -> FileIssue:
    return FileIssue(
        Problem.NOT_A_CHECKPOINT,
        f"{name} is a NumPy array of Python objects: numpy.load needs allow_pickle=True, which runs the pickle inside",
    )


def read_array(data: bytes, name: str, size: int | None = None) -> FileReport:
    return _judged(_header(data), data, name, len(data) if size is None else size)


def _judged(header: tuple[int, Any, tuple[int, ...]] | FileIssue | _Cut, data: bytes, name: str, size: int) -> FileReport:
    """The report of an array of ``size`` bytes whose header parsed as ``header``, from its first bytes ``data``."""
    if isinstance(header, _Cut):
        return FileReport(Format.NUMPY.value, (FileIssue(Problem.TRUNCATED, f"{name}: cut inside its header"),))
    if isinstance(header, FileIssue):
        return FileReport(Format.NUMPY.value, (header,))
    start, dtype, shape = header
    if dtype.hasobject:
        issues = [_objects(name)]
        if size > len(data):
            issues.append(
                FileIssue(Problem.UNSAFE_PICKLE, f"the pickle in {name} is longer than ckptdoctor reads: it cannot be proven safe")
            )
        issues += judge(walk(data, start), f"the pickle in {name}")
        return FileReport(Format.NUMPY.value, tuple(issues))
    tensor_name = _dtype_name(dtype)
    if any(dimension < 0 for dimension in shape):  # its header parser takes it; reading the data fails
        return FileReport(
            Format.NUMPY.value, (FileIssue(Problem.MALFORMED, f"{name}: shape {shape} is negative; numpy.load fails to read it"),)
        )
    nbytes = math.prod(shape) * dtype.itemsize
    tensor = Tensor(name, tensor_name, shape, nbytes)
    issues = []
    if size < start + nbytes:
        issues.append(FileIssue(Problem.TRUNCATED, f"{name}: {size - start} of {nbytes} data bytes"))
    elif size > start + nbytes:
        issues.append(FileIssue(Problem.TRAILING_BYTES, f"{name}: {size - start - nbytes} bytes after the array"))
    return FileReport(Format.NUMPY.value, tuple(issues), (), (tensor,), (), nbytes)


def read_chunks(chunks: Iterable[bytes], name: str, size: int) -> FileReport:
    """An array of ``size`` bytes from its bytes as they arrive (an archive member as it
    inflates), taking no more of them than the question needs: the header of an array of numbers
    (its data is only counted), up to its pickle's end for an array of objects."""
    source = iter(chunks)
    head = b""
    header: tuple[int, Any, tuple[int, ...]] | FileIssue | _Cut = _Cut(8)
    while isinstance(header, _Cut) and (chunk := next(source, None)) is not None:
        head += chunk
        header = _header(head)
    if isinstance(header, tuple) and header[1].hasobject:
        walked = walk_chunks(itertools.chain((head,), source), header[0])
        return FileReport(Format.NUMPY.value, (_objects(name), *judge(walked, f"the pickle in {name}")))
    return _judged(header, head, name, size)


class _Cut:
    """The data ends inside the header; ``needed`` bytes would hold it."""

    def __init__(self, needed: int) -> None:
        self.needed = needed


def _header(data: bytes) -> tuple[int, Any, tuple[int, ...]] | FileIssue | _Cut:
    """(data offset, numpy dtype, shape) as ``numpy.load`` reads them, or why it cannot."""
    if len(data) < 8 or not data.startswith(MAGIC):
        return _Cut(8) if MAGIC.startswith(data[:6]) and len(data) < 8 else _malformed("not a NumPy array header")
    version = (data[6], data[7])
    layout = _LENGTHS.get(version[0])
    if layout is None or version[1] != 0:
        return _malformed(f"NumPy format version {version[0]}.{version[1]}, which numpy.load refuses")
    start = 8 + layout.size
    if len(data) < start:
        return _Cut(start)
    (length,) = layout.unpack_from(data, 8)
    if length > MAX_HEADER:
        return FileIssue(
            Problem.UNSAFE_PICKLE,
            f"its NumPy header is {length} bytes, more than ckptdoctor parses; numpy.load(allow_pickle=True) reads it "
            "and may unpickle what follows, so it cannot be proven safe",
        )
    if len(data) < start + length:
        return _Cut(start + length)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy warns on Python 2 headers, which it still reads
            shape, _, dtype = _read_array_header()(io.BytesIO(data[8 : start + length]), version, max_header_size=MAX_HEADER + 1)
    except (RecursionError, MemoryError):
        return FileIssue(Problem.UNSAFE_PICKLE, "its NumPy header is too deeply nested to parse: it cannot be proven safe")
    except Exception as error:  # numpy's own parser: whatever it raises, numpy.load raises too
        said = re.sub(r" at 0x[0-9a-fA-F]+", "", str(error))[:120]  # object addresses differ between runs
        return _malformed(f"numpy.load refuses its header ({type(error).__name__}: {said})")
    return start + length, dtype, tuple(shape)


def _read_array_header() -> Callable[..., tuple[Any, bool, Any]]:
    """NumPy's header parser (private, but the one ``numpy.load`` calls; it moved in NumPy 2)."""
    for module in ("numpy.lib._format_impl", "numpy.lib.format"):
        try:
            parser: Callable[..., tuple[Any, bool, Any]] = importlib.import_module(module)._read_array_header
        except (ImportError, AttributeError):
            continue
        return parser
    raise ImportError("numpy has no _read_array_header")


def _malformed(why: str) -> FileIssue:
    return FileIssue(Problem.MALFORMED, why)


def _dtype_name(dtype: Any) -> str:
    if dtype.names is not None:
        return "structured"
    base = _KINDS.get(dtype.kind)
    if base == "bool":
        return "bool"
    return f"{base}{dtype.itemsize * 8}" if base else str(dtype.str)
