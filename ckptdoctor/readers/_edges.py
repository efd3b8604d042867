"""The heads and tails of many files in one call: the bytes ``inspect`` judges, read in bulk.

On a big tree the reads cost more than the judging: one open, fstat, read and close per file,
18-22 µs in Python on a small VM, and Python threads do not share that out (the GIL). The
optional C extension ``ckptdoctor.readers._cedges`` makes the same calls with the GIL released,
on several threads, at about half the cost per file on one. It is built when a compiler is
there (``setup.py``); without it, :func:`python_read_edges` gives the same results.

``read_edges(paths, sizes, head, tail, threads=1)`` takes each path (bytes, as
``os.fsencode`` gives it) with the size its listing's stat saw, and gives, in order:

- ``bytes``: the whole file, when ``size <= head + tail`` (up to ``size`` bytes from the
  start: fewer if it shrank since, no more if it grew);
- ``(head bytes, tail bytes)``: its first ``head`` bytes and the ``tail`` bytes that end at
  ``size``, when it is longer (either shorter if it shrank);
- ``None``: it could not be opened, is not a regular file, or could not be read. The caller
  reads such a file the slow way, which says why.

Only regular files are read, as :mod:`ckptdoctor.regular` says: each is opened without
blocking (a FIFO does not hang it) and refused after ``fstat`` unless regular; a symlink is
followed as ``open`` follows it; nothing is mapped. Access times are left alone where the
user owns the files (``O_NOATIME``). ``threads`` is how many threads the compiled reader uses
(at most 64; 1 or less: the calling thread alone); the Python one reads in the calling thread
whatever it says. The caller passes a few thousand paths at a time: every result is held in
memory until the call returns.

``COMPILED`` says whether ``read_edges`` is the compiled one. ``CKPTDOCTOR_NO_CEDGES=1`` in
the environment when this module is first imported makes it the Python one (to compare whole
reports made both ways); tests call :func:`python_read_edges` and ``compiled_read_edges``
directly.
"""

from __future__ import annotations

import contextlib
import operator
import os
from collections.abc import Callable, Iterable
from typing import TypeAlias

from ckptdoctor.regular import open_to_read

Edges: TypeAlias = bytes | tuple[bytes, bytes] | None
ReadEdges: TypeAlias = Callable[[Iterable[bytes], Iterable[int], int, int, int], list[Edges]]


def python_read_edges(paths: Iterable[bytes], sizes: Iterable[int], head: int, tail: int, threads: int = 1) -> list[Edges]:
    """:func:`read_edges` in Python: the fallback, and the reference the compiled one matches."""
    head, tail, threads = operator.index(head), operator.index(tail), operator.index(threads)
    if head < 0 or tail < 0:
        raise ValueError("head and tail must not be negative")
    paths, sizes = tuple(paths), tuple(sizes)
    if len(paths) != len(sizes):
        raise ValueError("paths and sizes differ in length")
    for path, size in zip(paths, sizes, strict=True):  # all checked before any is read, as in C
        if not isinstance(path, bytes):
            raise TypeError(f"paths must be bytes, not {type(path).__name__}")
        if b"\0" in path:
            raise ValueError("embedded null byte")
        if not isinstance(size, int):
            raise TypeError(f"sizes must be int, not {type(size).__name__}")
        if size < 0:
            raise ValueError("a size must not be negative")
    found: list[Edges] = []
    for path, size in zip(paths, sizes, strict=True):
        try:
            fd = open_to_read(path)  # refused unless regular, as in C
        except OSError:
            found.append(None)
            continue
        try:
            if size <= head + tail:
                found.append(_read_full(fd, size, 0))
            else:
                found.append((_read_full(fd, head, 0), _read_full(fd, tail, size - tail)))
        except OSError:
            found.append(None)
        finally:
            # read-only: nothing is lost when close reports an error, and Linux frees the descriptor anyway
            with contextlib.suppress(OSError):
                os.close(fd)
    return found


def _read_full(fd: int, n: int, offset: int) -> bytes:
    """Up to ``n`` bytes at ``offset``, read on until ``n`` or the end of the file."""
    data = os.pread(fd, n, offset)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n and (more := os.pread(fd, n - got, offset + got)):
        parts.append(more)
        got += len(more)
    return b"".join(parts)


compiled_read_edges: ReadEdges | None
try:
    from ckptdoctor.readers._cedges import read_edges as compiled_read_edges
except ImportError:  # built without a compiler: the Python one reads
    compiled_read_edges = None

read_edges: ReadEdges = (
    compiled_read_edges if compiled_read_edges is not None and os.environ.get("CKPTDOCTOR_NO_CEDGES") != "1" else python_read_edges
)
COMPILED = read_edges is compiled_read_edges
