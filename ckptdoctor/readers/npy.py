"""NumPy ``.npy`` arrays (alone, or inside an ``.npz``): a header, then raw data or a pickle.

The header is a Python dict literal, read with ``ast.literal_eval`` (which evaluates literals
only). An array of Python objects is stored as a pickle, which ``numpy.load`` runs when given
``allow_pickle=True``: that pickle is walked like any other.
"""

from __future__ import annotations

import ast
import math
import struct

from ckptdoctor.model import FileIssue, FileReport, Problem, Tensor
from ckptdoctor.readers._pickle_safety import judge
from ckptdoctor.readers._sample import Sample
from ckptdoctor.readers._unpickler import walk
from ckptdoctor.readers.sniff import Format

MAGIC = b"\x93NUMPY"
MAX_HEADER = 1024 * 1024
MAX_OBJECTS = 256 * 1024 * 1024

_KINDS = {"f": "float", "i": "int", "u": "uint", "b": "bool", "c": "complex"}


def read(sample: Sample) -> FileReport:
    """A ``.npy`` file: its header, and for object arrays the pickle after it (up to ``MAX_OBJECTS``)."""
    head = sample.head(min(sample.size, 4096))
    header = _header(head)
    holds_objects = isinstance(header, tuple) and "O" in header[1]
    if holds_objects or (isinstance(header, str) and sample.size > len(head)):
        head = sample.range(0, min(sample.size, MAX_OBJECTS))  # a pickle, or a header past 4 KiB
    return read_array(head, "array", sample.size)


def read_array(data: bytes, name: str, size: int | None = None) -> FileReport:
    size = len(data) if size is None else size
    header = _header(data)
    if isinstance(header, str):
        return FileReport(Format.NUMPY.value, (FileIssue(Problem.MALFORMED, f"{name}: {header}"),))
    start, descr, shape = header
    if "O" in descr:
        issues = [FileIssue(
            Problem.NOT_A_CHECKPOINT,
            f"{name} is a NumPy array of Python objects: numpy.load needs allow_pickle=True, which runs the pickle inside",
        )]
        issues += judge(walk(data, start), f"the pickle in {name}")
        return FileReport(Format.NUMPY.value, tuple(issues))
    simple = _dtype(descr)
    if simple is None:  # a structured dtype: plain data, but no single element size to check
        return FileReport(Format.NUMPY.value, (), (), (Tensor(name, "structured", shape, 0),), (), 0)
    if isinstance(simple, str):
        return FileReport(Format.NUMPY.value, (FileIssue(Problem.MALFORMED, f"{name}: {simple}"),))
    dtype, itemsize = simple
    count = math.prod(shape)
    nbytes = count * itemsize
    tensor = Tensor(name, dtype, shape, nbytes)
    issues = []
    if size < start + nbytes:
        issues.append(FileIssue(Problem.TRUNCATED, f"{name}: {size - start} of {nbytes} data bytes"))
    elif size > start + nbytes:
        issues.append(FileIssue(Problem.TRAILING_BYTES, f"{name}: {size - start - nbytes} bytes after the array"))
    return FileReport(Format.NUMPY.value, tuple(issues), (), (tensor,), (), nbytes)


def _header(data: bytes) -> tuple[int, str, tuple[int, ...]] | str:
    if not data.startswith(MAGIC) or len(data) < 10:
        return "not a NumPy array header"
    major = data[6]
    if major == 1:
        (length,) = struct.unpack_from("<H", data, 8)
        start = 10 + length
    elif len(data) >= 12:
        (length,) = struct.unpack_from("<I", data, 8)
        start = 12 + length
    else:
        return "cut inside its header"
    if length > MAX_HEADER or start > len(data):
        return "cut inside its header"
    try:
        fields = ast.literal_eval(data[start - length : start].decode("latin-1"))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as error:
        return f"its header is not a literal ({type(error).__name__})"
    if not isinstance(fields, dict):
        return "its header is not a dict"
    descr, shape = fields.get("descr"), fields.get("shape")
    if not isinstance(shape, tuple) or not all(isinstance(d, int) and d >= 0 for d in shape):
        return "its header has no valid shape"
    return start, str(descr), shape


def _dtype(descr: str) -> tuple[str, int] | str | None:
    """(torch-style name, bytes per element) of a simple dtype, None for a structured one, or
    what is wrong with it."""
    if descr.startswith("["):
        return None
    kind, digits = descr[1:2], descr[2:]
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 6) or descr[:1] not in "<>|=":
        return f"its dtype {descr!r} is not one NumPy writes"
    itemsize = int(digits) * (4 if kind == "U" else 1)  # U counts UCS-4 characters
    base = _KINDS.get(kind)
    if base is None:
        return descr, itemsize
    if base == "bool":
        return "bool", 1
    return f"{base}{itemsize * 8}", itemsize
