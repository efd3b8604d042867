"""Compressed files as their loaders read them: decompressed, then unpickled or loaded.

``joblib.load`` tells the compressor from the first bytes, whatever the file is called (zlib,
gzip, bz2, lzma, xz, lz4, and its old ``ZF`` format), and reads every stream of a multi-stream
file. ``pandas.read_pickle`` infers one from the name (``.gz``, ``.bz2``, ``.xz``, ``.zst``, and
``.zip``/``.tar``, read by their own readers), and Composer's ``load_checkpoint`` pipes a
``*.pt.<ext>`` save through the command-line tool of its suffix (``gzip``, ``bzip2``, ``xz``,
``lzma``, ``zstd``, ``lz4``, ``lzop``: ``composer/utils/compression.py``) before ``torch.load``.
Every stream is told here by its magic, whichever loader reads it.

What comes out is decompressed as far as the question needs it: a pickle is walked with joblib's
own reading of array wrappers, as far as its end, within a budget of opcodes proportional to the
compressed size and never above ``MAX_STEPS`` (a few KiB that inflate into millions of opcodes are
a bomb); any other content a loader reads (a ``torch.save`` zip, a tar) is inflated into a
temporary file, no more than ``MAX_RATIO`` times the compressed size, and judged as the file it is.
A payload larger than those bounds, or one that needs a decompressor this machine lacks, cannot be
checked, so it cannot be proven safe (CKD401).
"""

from __future__ import annotations

import dataclasses
import tempfile
import zlib
from collections.abc import Callable, Iterator
from typing import NamedTuple, Protocol

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers.pickle_safety import judge
from ckptdoctor.readers.sample import CHUNK, BytesSample, FileSample, Sample
from ckptdoctor.readers.sniff import Format, sniff, sniff_payload
from ckptdoctor.readers.unpickler import Budget, current_budget, top_keys, walk

MAX_OUTPUT = 128 * 1024 * 1024
"""The most of a compressed pickle held in memory to be walked."""
MAX_STEPS = 300_000
"""The most opcodes a compressed pickle's walk follows (about half a second), whatever its size."""
MAX_RATIO = 64
"""Other compressed content is inflated to at most this many times its compressed size (real
checkpoints compress by less than 2: their weights are close to random bits) or to ``MAX_OUTPUT``,
whichever is more: it goes to a temporary file, not to memory."""
COMPRESSION_SUFFIXES = (".gz", ".z", ".bz2", ".xz", ".lzma", ".lz4", ".zst", ".lzo")
"""Names under which a loader decompresses a file before reading it (joblib, pandas, Composer)."""
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


def _zstd() -> _Decompressor:
    try:
        from compression.zstd import ZstdDecompressor  # type: ignore[import-not-found,unused-ignore]  # Python 3.14
    except ImportError:
        from backports.zstd import ZstdDecompressor  # type: ignore[import-not-found,unused-ignore]  # a dependency before 3.14
    decompressor: _Decompressor = ZstdDecompressor()
    return decompressor


def _lzo() -> _Decompressor:
    raise ImportError("lzop")  # no Python package reads lzop's files


_ZSTD = b"\x28\xb5\x2f\xfd"
_COMPRESSORS: tuple[tuple[bytes, str, Callable[[], _Decompressor]], ...] = (
    (b"\x1f\x8b", "gzip", _gzip),
    (b"\x78", "zlib", _zlib),
    (b"BZh", "bz2", _bz2),
    (b"\xfd7zXZ", "xz", _lzma),
    (b"\x5d\x00", "lzma", _lzma),
    (_ZSTD, "zstd", _zstd),
    (b"\x89LZO\x00\r\n\x1a\n", "lzop", _lzo),
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
    for suffix in COMPRESSION_SUFFIXES:
        if lowered.endswith(suffix):
            return lowered[: -len(suffix)].endswith(_PICKLE_SUFFIXES)
    return False


class _Stream(NamedTuple):
    name: str
    start: int
    make: Callable[[], _Decompressor]


def _stream(sample: Sample) -> _Stream | None:
    """The compressor joblib tells from the first bytes, whatever the file is called; zstd and lz4
    frames may follow skippable frames, which their tools and libraries pass over."""
    start = _past_skippable(sample)
    head = sample.range(start, 32) if start else sample.head(32)
    if start and not head.startswith((_ZSTD, _LZ4)):
        return None
    if head.startswith(_ZF_PREFIX):
        # joblib skips one space after the header (old files wrote the length one character wider)
        return _Stream("joblib ZF", _ZF_HEADER + (head[_ZF_HEADER : _ZF_HEADER + 1] == b" "), _zlib)
    if head.startswith(_LZ4):
        return _Stream("lz4", start, _lz4)
    return next((_Stream(name, start, make) for magic, name, make in _COMPRESSORS if head.startswith(magic)), None)


_SKIPPABLE = b"\x2a\x4d\x18"
"""The last three bytes of a skippable frame's magic (0x184D2A50 to 0x184D2A5F, little-endian),
which a 4-byte little-endian length follows: zstd's and lz4's frame formats both define it."""


def _past_skippable(sample: Sample) -> int:
    """Where the first frame that is not a skippable one starts (0 where none leads)."""
    offset = 0
    while (frame := sample.range(offset, 8)) and len(frame) == 8 and frame[0] & 0xF0 == 0x50 and frame[1:4] == _SKIPPABLE:
        offset += 8 + int.from_bytes(frame[4:], "little")
    return offset


_BY_NAME: tuple[tuple[str, str, Callable[[], _Decompressor]], ...] = (
    (".gz", "gzip", _gzip),
    (".z", "zlib", _zlib),
    (".bz2", "bz2", _bz2),
    (".xz", "xz", _lzma),
    (".lzma", "lzma", _lzma),
    (".lz4", "lz4", lambda: _lz4()),
    (".zst", "zstd", _zstd),
    (".lzo", "lzop", _lzo),
)
"""The decompressor a loader picks by the name's suffix: pandas (``.gz``, ``.bz2``, ``.xz``,
``.zst``), joblib (and ``.z``, ``.lzma``, ``.lz4``), Composer's command-line tools (and ``.lzo``).
``xz``, ``lzma`` and pandas' ``LZMAFile`` read both xz and LZMA-alone streams, as ``lzma``'s
``FORMAT_AUTO`` does, whatever an LZMA-alone header's properties byte."""


def _named(sample: Sample, name: str) -> _Stream | None:
    """The stream a loader decompresses because of the file's name, where its first bytes say none."""
    lowered = name.lower()
    return next((_Stream(kind, _past_skippable(sample), make) for suffix, kind, make in _BY_NAME if lowered.endswith(suffix)), None)


def compressed(sample: Sample) -> bool:
    return _stream(sample) is not None


def read_header(sample: Sample, name: str = "") -> FileReport | None:
    """``inspect``'s view: a compressed pickle, or other content a loader reads (a ``torch.save``
    zip, a tar), from the first bytes of what comes out; None for anything else."""
    stream = _stream(sample) or _named(sample, name)
    if stream is None:
        return None
    try:
        first = stream.make().decompress(sample.range(stream.start, CHUNK), _SNIFFED)
    except Exception:  # damaged, or a decompressor this machine lacks: verify says which
        return None
    if sniff_payload(first[:64]) is Format.PICKLE:
        return FileReport(Format.PICKLE.value)
    kind = _loaded_content(first)
    return FileReport(kind.value, facts=((COMPRESSION, stream.name),)) if kind is not None else None


COMPRESSION = "compression"
"""A fact: the compressor of a file whose content is judged inside it."""
_SNIFFED = 4096
"""What is inflated to tell the content: a zip's first member header, a tar's first block."""


def _loaded_content(first: bytes) -> Format | None:
    """Content a loader reads after decompressing it other than a pickle: a ``torch.save`` zip
    (Composer's ``*.pt.<ext>``), a zip or a tar (pandas' ``.tar.xz``)."""
    kind = sniff(BytesSample(first))
    return kind if kind.value in _LOADED else None


def inner_name(name: str) -> str:
    """The name a loader reads a compressed file's content under: without its compression suffix."""
    lowered = name.lower()
    return next((name[: -len(suffix)] for suffix in COMPRESSION_SUFFIXES if lowered.endswith(suffix)), name)


def read(sample: Sample, judge: Callable[[Sample], FileReport], name: str = "") -> FileReport | None:
    """What a loader would run of a compressed file: a report on the pickle inside, or ``judge``'s
    of other content a loader reads, inflated into a temporary file; None when the file is not
    compressed, or what comes out is neither and runs nothing (burn's ``.mpk.gz``: every
    unpickler stops at its first byte). A file whose ``name`` says a loader decompresses it but
    that cannot be decompressed here cannot be checked (a format unknown would pass for clean)."""
    by_magic = _stream(sample)
    stream = by_magic or _named(sample, name)
    if stream is None:
        return None
    try:
        inflater = _Inflater(sample, stream)
    except ImportError:
        return _cannot_check(
            f"{_said(stream, by_magic is not None, name)}, which loaders decompress before they unpickle or load it, and "
            f"ckptdoctor has no {stream.name} decompressor here ({_INSTALL.get(stream.name, 'pip install ' + stream.name)})"
        )
    head = inflater.take(_SNIFFED) or b""
    if not head and inflater.error is not None and by_magic is None:
        return _cannot_check(
            f"{_said(stream, False, name)}, which pandas, joblib or Composer decompress before they load it, "
            f"but it is no {stream.name} stream ckptdoctor can open ({inflater.error})"
        )
    kind = None if sniff_payload(head[:64]) is Format.PICKLE else _loaded_content(head)
    if kind is not None:
        return _judged_inside(sample, stream, kind, judge)
    return _read_pickle(sample, stream, inflater)


def _said(stream: _Stream, by_magic: bool, name: str) -> str:
    """Why the file is read as that compression: its first bytes, or only its name."""
    return f"it is compressed with {stream.name}" if by_magic else f"its name says {stream.name} ({name})"


_INSTALL = {
    "lz4": "pip install lz4",
    "zstd": "pip install backports.zstd",
    "lzop": "no Python package reads lzop's files: decompress it with `lzop -d` and check what comes out",
    **dict.fromkeys(("xz", "lzma"), "this Python was built without its lzma module: use one built with liblzma"),
    "bz2": "this Python was built without its bz2 module: use one built with libbz2",
}
_LOADED = frozenset({Format.TORCH_ZIP.value, Format.ZIP.value, Format.TORCH_TAR.value, Format.TORCH_LEGACY.value, "tar"})
"""What loaders read after decompressing besides a pickle (the tar archive reader declares ``tar``)."""


_ARCHIVES = (
    (".zip", frozenset({Format.ZIP.value, Format.TORCH_ZIP.value, Format.NUMPY.value})),
    (".tar", frozenset({"tar", Format.TORCH_TAR.value})),
)
"""The archives pandas' ``read_pickle`` opens by a name's suffix (``zipfile``, ``tarfile`` with any
compression), and what ckptdoctor reads as each (the tar archive reader declares ``tar``)."""
_PANDAS_PICKLES = (".pkl", ".pickle")
"""Names ``to_pickle`` writes (``checkpoint.pth.tar`` is a ``torch.save`` file, never a tar)."""


def gzip_parts(sample: Sample) -> Iterator[bytes | FileIssue]:
    """A gzip file's inflated bytes, in chunks, then a problem of its stream, if any: damaged,
    cut short, bytes after its end, or inflating past ``MAX_RATIO`` times its size (at least
    ``MAX_OUTPUT``): a bomb, not inflated further, and what it holds cannot be checked."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    read, inflated = 0, 0
    bound = max(MAX_RATIO * sample.size, MAX_OUTPUT)
    try:
        for chunk in sample.chunks():
            read += len(chunk)
            data = chunk
            while data and not inflater.eof:
                part = inflater.decompress(data, CHUNK)
                inflated += len(part)
                if inflated > bound:
                    yield FileIssue(
                        Problem.UNSAFE_PICKLE,
                        f"cannot check: its gzip stream inflates to more than {bound:,} bytes ({MAX_RATIO} times its size or "
                        f"{MAX_OUTPUT:,} bytes): not inflated further, so what a loader reads of it cannot be proven safe",
                    )
                    return
                yield part
                data = inflater.unconsumed_tail
            if inflater.eof:
                break
    except zlib.error as error:
        yield FileIssue(Problem.MALFORMED, f"the gzip stream is damaged ({error})")
        return
    if not inflater.eof:
        yield FileIssue(Problem.TRUNCATED, "the gzip stream ends before its trailer: cut short")
    elif inflater.unused_data:
        yield FileIssue(Problem.TRAILING_BYTES, f"{sample.size - read + len(inflater.unused_data)} bytes after the end of the gzip stream")


def pandas_archive(name: str) -> bool:
    """Whether ``name`` is one ``to_pickle`` writes as an archive of one pickle (``x.pkl.zip``,
    ``x.pkl.tar``, ``x.pkl.tar.gz``), which ``read_pickle`` unpacks by that name."""
    stem, dot, suffix = inner_name(name).lower().rpartition(".")
    return dot + suffix in dict(_ARCHIVES) and stem.endswith(_PANDAS_PICKLES)


def unopened_archive(name: str, read_as: str) -> tuple[FileIssue, ...]:
    """Why a pandas archive (``x.pkl.zip``, ``x.pkl.tar``) that ckptdoctor did not read as that
    archive cannot be checked: ``zipfile`` finds a zip behind any bytes and ``tarfile`` reads
    archives without the ustar magic, so what ``read_pickle`` would unpickle stays unseen."""
    suffix = name.lower().rpartition(".")[2]
    if not pandas_archive(name) or read_as in dict(_ARCHIVES)[f".{suffix}"]:
        return ()
    return _cannot_check(
        f"its name says {suffix} ({name}), which pandas' read_pickle opens and unpickles the one member of, "
        f"but ckptdoctor cannot open it as a {suffix} archive"
    ).issues


def _cannot_check(why: str) -> FileReport:
    return FileReport(Format.UNKNOWN.value, (FileIssue(Problem.UNSAFE_PICKLE, f"cannot check: {why}, so it cannot be proven safe"),))


def _read_pickle(sample: Sample, stream: _Stream, inflater: _Inflater) -> FileReport | None:
    where = f"the pickle inside its {stream.name} stream"
    # opcodes per compressed byte stay small in real files; a few KiB that inflate to millions
    # of opcodes are a bomb, and stop being followed long before the file's own budget
    budget = Budget(
        steps=min(_STEPS_PER_BYTE * sample.size + _STEPS_BASE, MAX_STEPS), parent=current_budget(), scope="one compressed stream"
    )
    limit = _FIRST_OUTPUT
    while True:
        payload = inflater.take(limit)
        if payload is None:
            return FileReport(
                Format.PICKLE.value,
                (
                    FileIssue(
                        Problem.UNSAFE_PICKLE,
                        f"cannot check: its {stream.name} stream holds a pickle longer than the {MAX_OUTPUT} bytes ckptdoctor "
                        "decompresses, so what a loader would unpickle cannot be proven safe",
                    ),
                ),
            )
        walked = walk(payload, arrays=True, budget=budget)
        if not walked.truncated or inflater.done:
            break
        limit *= 8
    issues = judge(walked, where)
    # what an unpickler could act on: a whole pickle, a pickle's start, or an import before it stops
    # (burn's gzipped MessagePack reads as an unregistered extension code, which only fails)
    pickled = walked.error is None or walked.globals or sniff_payload(payload[:64]) is Format.PICKLE
    if not pickled:
        return None
    return FileReport(Format.PICKLE.value, tuple(issues), (), (), top_keys(walked.root))


def _judged_inside(sample: Sample, stream: _Stream, kind: Format, judge: Callable[[Sample], FileReport]) -> FileReport:
    """The content inflated whole into a temporary file and judged as the file it is; a bomb
    stops at ``MAX_RATIO`` times the compressed size (or ``MAX_OUTPUT``, whichever is larger:
    on disk, not in memory). A damaged or cut stream ends the content, as it ends the loader's."""
    bound = max(MAX_RATIO * sample.size, MAX_OUTPUT)
    with tempfile.TemporaryFile(prefix="ckptdoctor-") as inflated:
        written = 0
        for part in _Inflater(sample, stream).parts(CHUNK):
            inflated.write(part)
            written += len(part)
            if written > bound:
                return _cannot_check(
                    f"its {stream.name} stream inflates to more than {bound} bytes ({MAX_RATIO} times its size or "
                    f"{MAX_OUTPUT} bytes): the {kind.value} a loader would read inside is not decompressed further"
                )
        inflated.flush()
        report = judge(FileSample(inflated.fileno()))
    return dataclasses.replace(report, facts=(*report.facts, (COMPRESSION, stream.name)))


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
        self.out = b""
        self.done = False
        self.error: str | None = None
        """Why decompression stopped before the streams' end, if it did."""

    def take(self, limit: int) -> bytes | None:
        """At least ``limit`` bytes of output (fewer when the streams end), or None past
        ``MAX_OUTPUT``: the output is held once (the walk reads the very bytes kept here), and what
        would pass the bound is dropped before it is joined."""
        parts, have = [self.out], len(self.out)
        for part in self.parts(limit + 1 - have):
            parts.append(part)
            have += len(part)
            if have > MAX_OUTPUT:
                return None
            if have > limit:
                break
        self.out = b"".join(parts)
        return self.out

    def parts(self, most: int) -> Iterator[bytes]:
        """The output from where it stands, in pieces of at most ``most`` bytes (and ``CHUNK``),
        until the streams end."""
        try:
            while not self.done:
                if not self.pending and getattr(self.decompressor, "needs_input", True):
                    if self.offset >= self.sample.size:
                        self.done = True
                        break
                    self.pending = self.sample.range(self.offset, CHUNK)
                    self.offset += len(self.pending)
                data, self.pending = self.pending, b""
                part = self.decompressor.decompress(data, max(1, min(CHUNK, most)))
                if self.decompressor.eof:
                    rest = self.decompressor.unused_data.lstrip(b"\0")  # gzip skips zero padding
                    if rest or self.offset < self.sample.size:
                        self.decompressor, self.pending = self.stream.make(), rest
                    else:
                        self.done = True
                else:
                    self.pending = getattr(self.decompressor, "unconsumed_tail", b"")
                if part:
                    yield part
        except Exception as error:  # zlib.error, OSError, EOFError, lzma.LZMAError, lz4's errors: damaged
            self.done = True
            self.error = str(error) or type(error).__name__


def _lz4() -> _Decompressor:
    import lz4.frame  # type: ignore[import-not-found,unused-ignore]

    decompressor: _Decompressor = lz4.frame.LZ4FrameDecompressor()
    return decompressor
