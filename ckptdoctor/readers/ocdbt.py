"""TensorStore's OCDBT key-value store, where Orbax keeps a PyTree item's arrays.

An item folder holds ``manifest.ocdbt``; it names the root B+tree node of the newest version,
which lies at an offset in a data file (``d/<32 hex>``, or ``ocdbt.process_<n>/d/<32 hex>`` where
Orbax merged the per-process stores). Interior nodes name their children the same way, and leaf
nodes hold each value inline or name the data file, offset and length it lies at. So the manifest
and the nodes below it say exactly which files a restore reads and how long each must be: data
files no node of the newest version names (the per-process stores' older versions) are not read.

The format (tensorstore ``kvstore/ocdbt/index.rst``): a manifest or node is a header (``uint32be``
magic, ``uint64le`` length of the whole, varint version 0, varint compression: 0 none, 1 zstd), a
body, and a CRC-32C (``uint32le``) of everything before it. Bodies are column-wise: each field for
every entry in turn. Nothing here touches a file: :func:`walk` asks a :class:`Store` for the
bytes, so that it can be tested and fuzzed on bytes.
"""

from __future__ import annotations

import itertools
import struct
import sys
from collections.abc import Iterable
from typing import NamedTuple, Protocol

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers.sample import CHUNK
from ckptdoctor.readers.sniff import Format

MANIFEST = "manifest.ocdbt"
MANIFEST_MAGIC = 0x0CDB3A2A
NODE_MAGIC = 0x0CDB20DE
MAX_TREE_BYTES = 1 << 30
"""The most bytes of B+tree nodes one walk reads: far beyond the keys of any model's arrays."""
MAX_NODE_BYTES = 256 * 1024 * 1024
"""The most one node may decode to (Orbax configures 100 MB): more is a decompression bomb."""
_HEADER = 12  # magic and length; the varints follow
_ZSTD_FRAME = b"\x28\xb5\x2f\xfd"
_MISSING = (1 << 64) - 1
"""Offset and length both at this value: TensorStore's reference to nothing."""
_MAX_RATIO = 1024
"""A value decoding to more than this many times its size is a bomb, not an array chunk."""
_FOOTER = 4
_MAX_PATH = 65535


class Store(Protocol):
    """The files beside a manifest, by path relative to its folder."""

    def size(self, path: str) -> int | None:
        """The file's length in bytes; None when it is not there."""

    def read(self, path: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (fewer where the file ends sooner)."""


class Damage(Exception):
    """What makes a manifest or node unreadable, as the problem it is."""

    def __init__(self, problem: Problem, detail: str) -> None:
        super().__init__(detail)
        self.problem = problem
        self.detail = detail


class Ref(NamedTuple):
    """Bytes of a data file that a restore reads."""

    path: str
    offset: int
    length: int

    @property
    def end(self) -> int:
        return self.offset + self.length


class _Version(NamedTuple):
    root: Ref | None
    """The root node of the newest version; None for a store that holds nothing."""
    height: int


def walk(manifest: bytes, store: Store, crc: bool = True, values: bool = False) -> FileReport:
    """Judge a manifest and everything the newest version reads through it.

    The nodes are read and decoded from the store; the values are measured against their files.
    ``crc`` checks each node's CRC-32C as well (the manifest's is always checked): a pure-Python
    CRC, so ``inspect`` leaves it to ``verify``. ``values`` (``verify --deep``) also reads every
    value and decompresses those that are zstd frames (zarr's compressor in Orbax): values carry
    no checksum, but a frame cut or zero-filled does not decode. Facts: ``missing``, the data files
    named but not there (one per line).
    """
    if not manifest:
        return _report((FileIssue(Problem.EMPTY, "0 bytes"),))
    try:
        version = _manifest(manifest)
    except Damage as damage:
        return _report((FileIssue(damage.problem, damage.detail),))
    seen = _Walk(store, crc)
    if version.root is not None:
        seen.node(version.root, "", version.height)
    missing = []
    sizes = {path: store.size(path) for path in seen.reads}
    for path, end in sorted(seen.reads.items()):
        size = sizes[path]
        if size is None:
            missing.append(path)
        elif size == 0:
            seen.issues.append(FileIssue(Problem.EMPTY, f"{path} is empty (0 bytes); a restore reads {end:,} bytes of it"))
        elif size < end:
            seen.issues.append(FileIssue(Problem.TRUNCATED, f"{path} holds {size:,} bytes; a restore reads up to byte {end:,}: cut short"))
    if values:
        whole = [value for value in seen.values if (sizes[value.path] or 0) >= value.end]
        seen.issues += filter(None, (_value(store, value) for value in whole))
    facts = (("missing", "\n".join(missing)),) if missing else ()
    return _report(tuple(seen.issues), facts)


def _report(issues: tuple[FileIssue, ...], facts: tuple[tuple[str, str], ...] = ()) -> FileReport:
    return FileReport(Format.OCDBT.value, issues, facts)


class _Walk:
    """What a walk down the B+tree has found so far."""

    def __init__(self, store: Store, crc: bool) -> None:
        self.store = store
        self.crc = crc
        self.reads: dict[str, int] = {}
        """Each data file a restore reads, and the end of the last bytes it reads there."""
        self.values: list[Ref] = []
        self.issues: list[FileIssue] = []
        self.budget = MAX_TREE_BYTES

    def read(self, ref: Ref) -> None:
        self.reads[ref.path] = max(self.reads.get(ref.path, 0), ref.end)

    def node(self, ref: Ref, transitive: str, height: int) -> None:
        """Read the node at ``ref`` and, below it, every node and value it names."""
        self.read(ref)
        if self.budget < ref.length:
            self.issues.append(
                FileIssue(
                    Problem.UNREADABLE,
                    f"its B+tree is larger than ckptdoctor reads ({MAX_TREE_BYTES:,} bytes): what a restore reads below {ref.path} is unchecked",
                )
            )
            return
        self.budget -= ref.length
        size = self.store.size(ref.path)
        if size is None or size < ref.end:
            return  # the file's own verdict (missing, cut short) says it
        try:
            body = _unwrap(self.store.read(ref.path, ref.offset, ref.length), NODE_MAGIC, "B+tree node", self.crc)
            node = _Reader(body)
            found = node.u8()
            if found != height:
                raise Damage(Problem.MALFORMED, f"has height {found}, its parent says {height}")
            files = node.table(transitive)
            count = node.varint()
            if count == 0:
                raise Damage(Problem.MALFORMED, "holds no entry")
            children, values = ([], _leaf(node, files, count)) if height == 0 else (_interior(node, files, count), [])
        except Damage as damage:
            self.issues.append(FileIssue(damage.problem, f"{ref.path}: the B+tree node at byte {ref.offset:,} {damage.detail}"))
            return
        for value in values:
            self.read(value)
        self.values += values
        for child, base in children:
            self.node(child, base, height - 1)


def _value(store: Store, ref: Ref) -> FileIssue | None:
    """What is wrong with one value's bytes, where they tell (a zstd frame decodes whole)."""
    if store.read(ref.path, ref.offset, 4) != _ZSTD_FRAME:
        return None  # raw or otherwise compressed: no structure to check
    pieces = (store.read(ref.path, offset, min(CHUNK, ref.end - offset)) for offset in range(ref.offset, ref.end, CHUNK))
    try:
        _inflate(pieces, ref.length * _MAX_RATIO, keep=False)
    except Damage as damage:
        return FileIssue(
            Problem.MALFORMED,
            f"{ref.path}: the value at bytes {ref.offset:,}–{ref.end:,} {damage.detail}: its bytes were damaged after it was written",
        )
    return None


def _leaf(node: _Reader, files: list[tuple[str, str]], count: int) -> list[Ref]:
    """The out-of-line values of a leaf node, where they lie."""
    node.keys(count, interior=False)
    lengths = [node.varint() for _ in range(count)]
    kinds = [node.u8() for _ in range(count)]
    if any(kind > 1 for kind in kinds):
        raise Damage(Problem.MALFORMED, "has a value kind other than inline (0) or out-of-line (1)")
    indirect = [length for length, kind in zip(lengths, kinds, strict=True) if kind == 1]
    ids = [node.file_id(files) for _ in indirect]
    offsets = [node.varint() for _ in indirect]
    node.skip(sum(length for length, kind in zip(lengths, kinds, strict=True) if kind == 0))
    return [_ref(path, offset, length) for path, offset, length in zip(ids, offsets, indirect, strict=True)]


def _interior(node: _Reader, files: list[tuple[str, str]], count: int) -> list[tuple[Ref, str]]:
    """The children of an interior node, each with the path prefix that applies below it."""
    node.keys(count, interior=True)
    ids = [node.file_entry(files) for _ in range(count)]
    offsets = [node.varint() for _ in range(count)]
    lengths = [node.varint() for _ in range(count)]
    for _ in range(3 * count):  # statistics: keys, tree bytes, value bytes
        node.varint()
    return [(_ref(path, offset, length), base) for (base, path), offset, length in zip(ids, offsets, lengths, strict=True)]


def _manifest(data: bytes) -> _Version:
    body = _Reader(_unwrap(data, MANIFEST_MAGIC, "manifest", True))
    body.skip(16)  # the database's uuid
    kind = body.varint()
    if kind != 0:
        raise Damage(
            Problem.UNREADABLE, "is a numbered manifest (its versions are in manifest.<n> files), which Orbax does not write: not read"
        )
    body.varint()  # max_inline_value_bytes
    body.varint()  # max_decoded_node_bytes
    body.u8()  # version_tree_arity_log2
    if body.varint() == 1:
        body.skip(4)  # zstd level
    files = body.table("")
    count = body.varint()
    generations = [body.varint() for _ in range(count)]
    heights = [body.u8() for _ in range(count)]
    ids = [body.file_id(files) for _ in range(count)]
    offsets = [body.varint() for _ in range(count)]
    lengths = [body.varint() for _ in range(count)]
    if any(a >= b for a, b in itertools.pairwise(generations)):
        raise Damage(Problem.MALFORMED, "lists its versions out of order")
    if not count:
        return _Version(None, 0)
    # the newest version is the last one inline; older ones (in version nodes) are never restored
    if lengths[-1] == 0 or (offsets[-1], lengths[-1]) == (_MISSING, _MISSING):
        return _Version(None, 0)  # a version whose tree holds no key
    return _Version(_ref(ids[-1], offsets[-1], lengths[-1]), heights[-1])


def _ref(path: str, offset: int, length: int) -> Ref:
    """A reference to bytes of a data file, which must lie inside the store's folder."""
    _confined(path)
    if offset + length > _MISSING:
        raise Damage(Problem.MALFORMED, f"names bytes past the largest offset a file can have in {path}")
    return Ref(path, offset, length)


def _unwrap(data: bytes, magic: int, what: str, crc: bool) -> bytes:
    """The body of an encoded manifest or node: its envelope checked, decompressed."""
    if len(data) < _HEADER + 2 + _FOOTER:
        raise Damage(Problem.TRUNCATED, f"holds {len(data)} bytes: cut short before its header ends")
    found, declared = struct.unpack_from(">I", data)[0], struct.unpack_from("<Q", data, 4)[0]
    if found != magic:
        raise Damage(Problem.MALFORMED, f"is not an OCDBT {what} (it starts with {data[:4].hex()}, not {magic:08x})")
    if declared > len(data):
        raise Damage(Problem.TRUNCATED, f"holds {len(data):,} of the {declared:,} bytes its header declares: cut short")
    if declared < len(data):
        raise Damage(Problem.MALFORMED, f"holds {len(data):,} bytes, more than the {declared:,} its header declares")
    if crc and crc32c(data[:-_FOOTER]) != struct.unpack_from("<I", data, len(data) - _FOOTER)[0]:
        raise Damage(Problem.CRC_MISMATCH, "does not match its CRC-32C: its bytes changed after it was written")
    header = _Reader(data[:-_FOOTER])
    header.skip(_HEADER)
    if header.varint() != 0:
        raise Damage(Problem.MALFORMED, "has a format version other than 0")
    compression = header.varint()
    body = data[header.position : -_FOOTER]
    if compression == 0:
        return body
    if compression == 1:
        return _unzstd(body)
    raise Damage(Problem.MALFORMED, f"uses an unknown compression ({compression})")


def _unzstd(data: bytes) -> bytes:
    """A node's or manifest's body: one zstd frame, decoded within :data:`MAX_NODE_BYTES`."""
    return b"".join(_inflate([data], MAX_NODE_BYTES, keep=True))


def _inflate(pieces: Iterable[bytes], limit: int, keep: bool) -> list[bytes]:
    """Decode one zstd frame fed in ``pieces`` (a value may be gigabytes: it is streamed and its
    output only counted unless ``keep``); more than ``limit`` bytes out is a bomb."""
    # the standard library's zstd (Python 3.14) or its backport, imported on first use only
    try:
        if sys.version_info >= (3, 14):
            from compression.zstd import ZstdDecompressor, ZstdError  # on first use: start-up stays lean
        else:
            from backports.zstd import ZstdDecompressor, ZstdError  # on first use: start-up stays lean
    except ImportError:
        raise Damage(Problem.UNREADABLE, "is zstd-compressed and this Python has no zstd module (install backports.zstd)") from None
    decompressor: ZstdDecompressor = ZstdDecompressor()
    kept: list[bytes] = []
    produced = 0
    try:
        for piece in pieces:
            if decompressor.eof:
                break
            out = decompressor.decompress(piece, max_length=CHUNK)
            while True:
                produced += len(out)
                if produced > limit:
                    raise Damage(Problem.MALFORMED, f"decompresses to more than {limit:,} bytes")
                if keep:
                    kept.append(out)
                if decompressor.needs_input or decompressor.eof:
                    break
                out = decompressor.decompress(b"", max_length=CHUNK)
    except ZstdError as error:
        raise Damage(Problem.MALFORMED, f"cannot be decompressed ({error})") from None
    if not decompressor.eof or decompressor.unused_data:
        raise Damage(Problem.MALFORMED, "is not one whole zstd frame")
    return kept


class _Reader:
    """A cursor over a decoded body; running past its end is a cut-short body."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def _take(self, n: int) -> bytes:
        end = self.position + n
        if n < 0 or end > len(self.data):
            raise Damage(Problem.MALFORMED, "ends inside a field: its body is cut short or garbled")
        chunk = self.data[self.position : end]
        self.position = end
        return chunk

    def skip(self, n: int) -> None:
        self._take(n)

    def u8(self) -> int:
        return self._take(1)[0]

    def varint(self) -> int:
        value = shift = 0
        while shift < 64:
            byte = self.u8()
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
        raise Damage(Problem.MALFORMED, "has a varint longer than 64 bits")

    def table(self, transitive: str) -> list[tuple[str, str]]:
        """A data file table: (base path, full path) of each file, relative to the store's folder."""
        count = self.varint()
        if count > len(self.data):
            raise Damage(Problem.MALFORMED, f"claims {count:,} data files in a body of {len(self.data):,} bytes")
        prefixes = [0, *(self.varint() for _ in range(count - 1))] if count else []
        suffixes = [self.varint() for _ in range(count)]
        bases = [self.varint() for _ in range(count)]
        files: list[tuple[str, str]] = []
        previous = b""
        for prefix, suffix, base in zip(prefixes, suffixes, bases, strict=True):
            if prefix > len(previous):
                raise Damage(Problem.MALFORMED, "has a data file path that shares more than the previous one holds")
            path = previous[:prefix] + self._take(suffix)
            if base > len(path) or len(path) > _MAX_PATH:
                raise Damage(Problem.MALFORMED, "has a data file path longer than the format allows")
            previous = path
            files.append((transitive + _text(path[:base]), transitive + _text(path)))
        return files

    def file_id(self, files: list[tuple[str, str]]) -> str:
        return self.file_entry(files)[1]

    def file_entry(self, files: list[tuple[str, str]]) -> tuple[str, str]:
        """A (base path, full path) from the table; the path is checked where a reference uses it
        (a version with no tree names the empty path)."""
        index = self.varint()
        if index >= len(files):
            raise Damage(Problem.MALFORMED, f"names data file {index}, and its table holds {len(files)}")
        return files[index]

    def keys(self, count: int, interior: bool) -> None:
        """Skip an entry array's keys (their order is tensorstore's to check)."""
        if count > len(self.data):
            raise Damage(Problem.MALFORMED, f"claims {count:,} entries in a body of {len(self.data):,} bytes")
        for _ in range(count - 1):
            self.varint()
        suffixes = [self.varint() for _ in range(count)]
        if interior:
            for _ in range(count):
                self.varint()
        self.skip(sum(suffixes))


def _text(path: bytes) -> str:
    try:
        return path.decode("utf-8")
    except UnicodeDecodeError:
        raise Damage(Problem.MALFORMED, "has a data file path that is not UTF-8") from None


def _confined(path: str) -> None:
    """A data file path must stay inside the store's folder: no absolute path, no ``..``."""
    parts = path.split("/")
    if path.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise Damage(Problem.MALFORMED, f"names a data file outside its folder ({path!r})")


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        value = byte
        for _ in range(8):
            value = (value >> 1) ^ 0x82F63B78 if value & 1 else value >> 1
        table.append(value)
    return tuple(table)


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as OCDBT checksums its manifests and nodes."""
    value = 0xFFFFFFFF
    table = _CRC32C
    for byte in data:
        value = table[(value ^ byte) & 0xFF] ^ (value >> 8)
    return value ^ 0xFFFFFFFF
