"""Compressed pickles as ``joblib.load`` reads them: decompressed, then unpickled.

``joblib.load`` tells the compressor from the first bytes, whatever the file is called (zlib,
gzip, bz2, lzma, xz, lz4, and its old ``ZF`` format), and reads every stream of a multi-stream
file. The payload is decompressed here in bounded steps and walked with joblib's own reading of
array wrappers; a payload larger than ``MAX_OUTPUT``, or one that needs a decompressor this
machine lacks, cannot be proven safe (CKD401).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Protocol

from ckptdoctor.model import FileIssue, Problem
from ckptdoctor.readers._pickle_safety import judge
from ckptdoctor.readers._sample import CHUNK, Sample
from ckptdoctor.readers._unpickler import walk

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


def pickled_name(name: str) -> bool:
    """A compressed file named like a pickle (``model.pkl.gz``, ``x.joblib.xz``)."""
    lowered = name.lower()
    for suffix in _COMPRESSED_SUFFIXES:
        if lowered.endswith(suffix):
            return lowered[: -len(suffix)].endswith(_PICKLE_SUFFIXES)
    return False


def issues(sample: Sample) -> list[FileIssue]:
    """What ``joblib.load`` would run of a compressed file; nothing for other content."""
    head = sample.head(8)
    if head.startswith(_LZ4):
        return _lz4(sample)
    if head.startswith(_ZF_PREFIX):
        payload = _inflate(sample, _ZF_HEADER, _zlib, "zlib")
        return payload if isinstance(payload, list) else judge(walk(payload, arrays=True), "the pickle in its joblib ZF stream")
    for magic, name, make in _COMPRESSORS:
        if head.startswith(magic):
            payload = _inflate(sample, 0, make, name)
            return payload if isinstance(payload, list) else judge(walk(payload, arrays=True), f"the pickle inside its {name} stream")
    return []


def _inflate(sample: Sample, start: int, make: Callable[[], _Decompressor], name: str) -> bytes | list[FileIssue]:
    """Every stream of the file, decompressed, up to ``MAX_OUTPUT``; or what stops that (a damaged
    stream stops joblib too: only what came out before it counts)."""
    out = bytearray()
    decompressor = make()
    offset = start
    try:
        while offset < sample.size:
            data = sample.range(offset, CHUNK)
            offset += len(data)
            while data:
                out += decompressor.decompress(data, MAX_OUTPUT + 1 - len(out))
                if len(out) > MAX_OUTPUT:
                    return [FileIssue(
                        Problem.UNSAFE_PICKLE,
                        f"its {name} stream decompresses to more than {MAX_OUTPUT} bytes, more than ckptdoctor "
                        "follows: what joblib.load would unpickle cannot be proven safe",
                    )]
                if decompressor.eof:  # another stream may follow (gzip members, bz2 and xz streams)
                    data = decompressor.unused_data
                    if not data.strip(b"\0"):
                        break
                    decompressor = make()
                else:
                    data = getattr(decompressor, "unconsumed_tail", b"")
    except Exception:  # zlib.error, OSError, EOFError, lzma.LZMAError, lz4's errors: the stream is damaged
        pass  # joblib stops at the damage; what was inflated before it is still unpickled
    return bytes(out)


def _lz4(sample: Sample) -> list[FileIssue]:
    try:
        import lz4.frame  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return [FileIssue(
            Problem.UNSAFE_PICKLE,
            "it is an LZ4 stream, which joblib.load unpickles after decompressing it; without the lz4 package "
            "ckptdoctor cannot look inside, so it cannot be proven safe (pip install lz4)",
        )]
    payload = _inflate(sample, 0, lz4.frame.LZ4FrameDecompressor, "lz4")
    return payload if isinstance(payload, list) else judge(walk(payload, arrays=True), "the pickle inside its lz4 stream")
