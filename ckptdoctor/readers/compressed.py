"""Compressed pickles as ``joblib.load`` reads them: decompressed, then unpickled.

``joblib.load`` tells the compressor from the first bytes, whatever the file is called (zlib,
gzip, bz2, lzma, xz, lz4, and its old ``ZF`` format), and reads every stream of a multi-stream
file. What comes out is decompressed as far as the walk needs it and walked with joblib's own
reading of array wrappers, within a budget of opcodes proportional to the compressed size (a few
KiB that inflate into millions of opcodes are a bomb). A payload larger than ``MAX_OUTPUT``, or
one that needs a decompressor this machine lacks, cannot be proven safe (CKD401).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import NamedTuple, Protocol

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers._pickle_safety import judge
from ckptdoctor.readers._sample import CHUNK, Sample
from ckptdoctor.readers._unpickler import Budget, top_keys, walk
from ckptdoctor.readers.sniff import Format, sniff_payload

MAX_OUTPUT = 256 * 1024 * 1024
_COMPRESSED_SUFFIXES = (".gz", ".z", ".bz2", ".xz", ".lzma", ".lz4")
_PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib", ".sav", ".dill", ".pt", ".pth", ".bin", ".ckpt")
_ZF_PREFIX = b"ZF"
_ZF_HEADER = 2 + 19
"""joblib < 0.10: ``ZF``, the payload length as 19 hexadecimal characters, then a zlib stream."""


class _Decompressor(Protocol):
    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int = ..., /) -> bytes: ...


def _gzip() -> _Decompressor:
    return zlib.decompressobj(31)


def _zlib() -> _Decompressor:
    return zlib.decompressobj()


def _bz2() -> _Decompressor:
    import bz2  # imported when a file needs it: start-up stays lean

    return bz2.BZ2Decompressor()


def _lzma() -> _Decompressor:
    # imported when a file needs it: start-up stays lean
    import lzma

    return lzma.LZMADecompressor()


_COMPRESSORS: tuple[tuple[bytes, str, Callable[[], _Decompressor]], ...] = (
    (b"\x1f\x8b", "gzip", _gzip),
    (b"\x78", "zlib", _zlib),
    (b"BZh", "bz2", _bz2),
    (b"\xfd7zXZ", "xz", _lzma),
    (b"\x5d\x00", "lzma", _lzma),
)
_LZ4 = b"\x04\x22\x4d\x18"


def named_as_pickle(name: str) -> bool:
    """A name under which a compressed pickle is what users expect (joblib's own files)."""
    lowered = name.lower()
    return pickled_name(lowered) or lowered.endswith(_JOBLIB_NAMES)


_JOBLIB_NAMES = (".pkl", ".pickle", ".joblib", ".sav", ".dill")


def pickled_name(name: str) -> bool:
    """A compressed file named like a pickle (``model.pkl.gz``, ``x.joblib.xz``)."""
    lowered = name.lower()
    for suffix in _COMPRESSED_SUFFIXES:
        if lowered.endswith(suffix):
            return lowered[: -len(suffix)].endswith(_PICKLE_SUFFIXES)
    return False


class _Stream(NamedTuple):
    name: str
    start: int
    make: Callable[[], _Decompressor]


def _stream(head: bytes) -> _Stream | None:
    """The compressor joblib tells from the first bytes, whatever the file is called."""
    if head.startswith(_ZF_PREFIX):
        # joblib skips one space after the header (old files wrote the length one character wider)
        return _Stream("joblib ZF", _ZF_HEADER + (head[_ZF_HEADER : _ZF_HEADER + 1] == b" "), _zlib)
    if head.startswith(_LZ4):
        return _Stream("lz4", 0, _lz4)
    return next((_Stream(name, 0, make) for magic, name, make in _COMPRESSORS if head.startswith(magic)), None)


def compressed(sample: Sample) -> bool:
    return _stream(sample.head(32)) is not None


def read_header(sample: Sample) -> FileReport | None:
    """``inspect``'s view: a compressed pickle (from the first bytes of what comes out), or None."""
    stream = _stream(sample.head(32))
    if stream is None:
        return None
    try:
        first = stream.make().decompress(sample.head()[stream.start :], 64)
    except Exception:  # damaged, or a decompressor this machine lacks: verify says which
        return None
    return FileReport(Format.PICKLE.value) if sniff_payload(first) is Format.PICKLE else None


def read(sample: Sample) -> FileReport | None:
    """What ``joblib.load`` would run of a compressed file, as a report on the pickle inside; None
    when the file is not compressed, or what comes out is no pickle and runs nothing (burn's
    ``.mpk.gz``: every unpickler stops at its first byte)."""
    stream = _stream(sample.head(32))
    if stream is None:
        return None
    where = f"the pickle inside its {stream.name} stream"
    try:
        inflater = _Inflater(sample, stream)
    except ImportError:
        return FileReport(
            Format.UNKNOWN.value,
            (
                FileIssue(
                    Problem.UNSAFE_PICKLE,
                    f"it is an {stream.name} stream, which joblib.load unpickles after decompressing it; without the lz4 "
                    "package ckptdoctor cannot look inside, so it cannot be proven safe (pip install lz4)",
                ),
            ),
        )
    # opcodes per compressed byte stay small in real files; a few KiB that inflate to millions
    # of opcodes are a bomb, and stop being followed long before the file's own budget
    budget = Budget(steps=_STEPS_PER_BYTE * sample.size + _STEPS_BASE)
    limit = _FIRST_OUTPUT
    while True:
        payload = inflater.take(limit)
        walked = walk(payload, arrays=True, budget=budget)
        if not walked.truncated or inflater.done:
            break
        if limit > MAX_OUTPUT:
            return FileReport(
                Format.PICKLE.value,
                (
                    FileIssue(
                        Problem.UNSAFE_PICKLE,
                        f"its {stream.name} stream holds a pickle longer than the {MAX_OUTPUT} bytes ckptdoctor "
                        "decompresses: what joblib.load would unpickle cannot be proven safe",
                    ),
                ),
            )
        limit *= 8
    issues = judge(walked, where)
    # what an unpickler could act on: a whole pickle, a pickle's start, or an import before it stops
    # (burn's gzipped MessagePack reads as an unregistered extension code, which only fails)
    pickled = walked.error is None or walked.globals or sniff_payload(payload[:64]) is Format.PICKLE
    if not pickled:
        return None
    return FileReport(Format.PICKLE.value, tuple(issues), (), (), top_keys(walked.root))


_FIRST_OUTPUT = 1024 * 1024
_STEPS_PER_BYTE = 16
_STEPS_BASE = 65_536


class _Inflater:
    """Every stream of the file, decompressed on demand (gzip members, bz2 and xz streams follow
    one another); a damaged stream ends the output, as it ends joblib's reading."""

    def __init__(self, sample: Sample, stream: _Stream) -> None:
        self.sample = sample
        self.stream = stream
        self.decompressor = stream.make()
        self.offset = stream.start
        self.pending = b""
        self.out = bytearray()
        self.done = False

    def take(self, limit: int) -> bytes:
        """At least ``limit`` bytes of output (fewer when the streams end), up to ``MAX_OUTPUT`` + 1."""
        try:
            while len(self.out) < limit and not self.done:
                if not self.pending and getattr(self.decompressor, "needs_input", True):
                    if self.offset >= self.sample.size:
                        self.done = True
                        break
                    self.pending = self.sample.range(self.offset, CHUNK)
                    self.offset += len(self.pending)
                data, self.pending = self.pending, b""
                self.out += self.decompressor.decompress(data, limit - len(self.out) + 1)
                if self.decompressor.eof:
                    rest = self.decompressor.unused_data.lstrip(b"\0")  # gzip skips zero padding
                    if rest or self.offset < self.sample.size:
                        self.decompressor, self.pending = self.stream.make(), rest
                    else:
                        self.done = True
                else:
                    self.pending = getattr(self.decompressor, "unconsumed_tail", b"")
        except Exception:  # zlib.error, OSError, EOFError, lzma.LZMAError, lz4's errors: damaged
            self.done = True
        return bytes(self.out)


def _lz4() -> _Decompressor:
    import lz4.frame  # type: ignore[import-not-found,unused-ignore]

    decompressor: _Decompressor = lz4.frame.LZ4FrameDecompressor()
    return decompressor
