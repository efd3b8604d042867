"""Which format a file holds, told from its first bytes, never from its name.

The order matters (integrity reference §2): zip first; then the artefacts that are not
checkpoints at all (Git-LFS pointers, HTML pages, all-zero files) before the tar test, because
an all-zero file also parses as an empty tar.
"""

from __future__ import annotations

import enum
import struct

from ckptdoctor.readers._sample import Sample


class Format(str, enum.Enum):
    EMPTY = "empty"
    BURNPACK = "burnpack"
    MSGPACK = "msgpack"
    """burn recorder-era named MessagePack (``.mpk``)."""
    JSON = "json"
    GZIP = "gzip"
    """A gzip stream whose payload could not be told apart (see the ``.gz`` variants)."""
    BINCODE = "bincode"
    """burn recorder-era bincode (``.bin``): recognised by the recorder metadata it starts with."""
    MSGPACK_GZ = "msgpack.gz"
    JSON_GZ = "json.gz"
    BINCODE_GZ = "bincode.gz"
    TORCH_ZIP = "torch-zip"
    TORCH_LEGACY = "torch-legacy"
    TORCH_TAR = "torch-tar"
    TORCH_PREVIEW = "torch-preview"
    PICKLE = "pickle"
    SAFETENSORS = "safetensors"
    DISTCP = "distcp"
    """torch.distributed.checkpoint data: raw tensor bytes, told by name only."""
    OCDBT = "ocdbt"
    """TensorStore's OCDBT store (Orbax's arrays): a manifest, B+tree nodes and raw values."""
    TEXT = "text"
    """A pointer file's few bytes of text (DeepSpeed's ``latest``)."""
    ZIP = "zip"
    NUMPY = "numpy"
    SEVEN_ZIP = "7z"
    GIT_LFS_POINTER = "git-lfs-pointer"
    HTML = "html"
    ZEROS = "zeros"
    UNKNOWN = "unknown"


NOT_CHECKPOINTS = frozenset({Format.GIT_LFS_POINTER, Format.HTML, Format.ZEROS})
"""Formats that are never checkpoint content, whatever the file is called."""

TORCH_LEGACY_MAGIC = bytes.fromhex("80028a0a6cfc9c46f9206aa850192e")
"""torch's legacy magic number pickled at protocol 2 (the default); other protocols frame it or
write it as text, see :data:`TORCH_LEGACY_MAGICS`."""
_MAGIC_LONG1 = TORCH_LEGACY_MAGIC[2:]
TORCH_LEGACY_MAGICS = (
    TORCH_LEGACY_MAGIC,
    b"\x80\x03" + _MAGIC_LONG1,
    *(b"\x80" + bytes([protocol]) + b"\x95\r" + bytes(7) + _MAGIC_LONG1 for protocol in (4, 5)),
    b"L119547037146038801333356L\n.",
)
ZIP_LOCAL = b"PK\x03\x04"
BURNPACK_MAGIC = b"NRUB"
GZIP_MAGIC = b"\x1f\x8b"
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
SAFETENSORS_MAX_HEADER = 100_000_000


def sniff(sample: Sample) -> Format:
    if sample.size == 0:
        return Format.EMPTY
    head = sample.head()
    magic = _MAGIC.get(head[:4])
    if magic is None and len(head) < 4:
        # cut before its magic was whole: still the format it began to be, and cut short
        magic = next((kind for prefix, kind in _MAGIC.items() if prefix.startswith(head)), None)
    if magic is not None:
        return _zip_kind(head) if magic is Format.TORCH_ZIP else magic
    if head.startswith(b"PYTORCH1"):
        return Format.TORCH_PREVIEW
    if head.startswith(TORCH_LEGACY_MAGICS):
        return Format.TORCH_LEGACY
    if head.startswith(GZIP_MAGIC):
        return Format.GZIP
    if head.startswith(LFS_POINTER):
        return Format.GIT_LFS_POINTER
    if _is_html(head):
        return Format.HTML
    if not head.strip(b"\0") and not sample.tail().strip(b"\0"):
        return Format.ZEROS
    if len(head) > 262 and head[257:262] == b"ustar":
        return Format.TORCH_TAR
    if _is_safetensors(head, sample.size):
        return Format.SAFETENSORS
    return sniff_payload(head)


_MAGIC = {BURNPACK_MAGIC: Format.BURNPACK, ZIP_LOCAL: Format.TORCH_ZIP}
"""Four-byte magics that no text artefact (LFS pointer, HTML) can start with: checked first."""


def sniff_payload(head: bytes) -> Format:
    """Formats that may also sit inside a gzip stream (burn's ``.gz`` recorders)."""
    if head.startswith(b"\x93NUMPY"):
        return Format.NUMPY
    if head.startswith(b"7z\xbc\xaf\x27\x1c"):
        return Format.SEVEN_ZIP
    if len(head) >= 2 and head[0] == 0x80 and head[1] <= 5:
        return Format.PICKLE
    if head[:1] in (b"\x81", b"\x82", b"\x83", b"\x84", b"\xde", b"\xdf"):
        return Format.MSGPACK
    stripped = head.lstrip()
    if stripped.startswith((b"{", b"[")):
        return Format.JSON
    if _is_burn_bincode(head):
        return Format.BINCODE
    if head[:1] in (b"(", b"c", b"]", b"}") and head.rstrip().endswith(b"."):
        # pickle protocols 0 and 1 carry no magic; a short text that ends in STOP is one
        return Format.PICKLE
    return Format.UNKNOWN


_TORCH_MEMBERS = (b"data.pkl", b"version", b".format_version", b"byteorder", b"constants.pkl")
_TORCH_FOLDERS = (b"data/", b".data/", b"code/", b"extra/")


def _zip_kind(head: bytes) -> Format:
    """torch's archives put every member under one ``<prefix>/``; ``torch.save`` writes
    ``data.pkl`` first, TorchScript may lead with ``extra/`` or ``code/``. Anything else is another zip."""
    if len(head) < 30:
        return Format.TORCH_ZIP  # cut inside the first header: judged by the zip reader
    name_length = struct.unpack_from("<H", head, 26)[0]
    _, slash, member = head[30 : 30 + name_length].partition(b"/")
    if slash and (member in _TORCH_MEMBERS or member.startswith(_TORCH_FOLDERS)):
        return Format.TORCH_ZIP
    if member.endswith(b".npy") or head[30 : 30 + name_length].endswith(b".npy"):
        return Format.NUMPY
    return Format.ZIP


def _is_burn_bincode(head: bytes) -> bool:
    """burn's bincode records start with three length-prefixed strings: float type, int type and
    the recorder's type name (``burn_core::record::file::BinFileRecorder<...>``)."""
    position = 0
    strings = []
    for _ in range(3):
        if position >= len(head) or head[position] >= 251:  # a longer varint: not these short names
            return False
        length = head[position]
        strings.append(head[position + 1 : position + 1 + length])
        position += 1 + length
    return b"burn" in strings[2] and strings[0].isascii() and strings[1].isascii()


def _is_html(head: bytes) -> bool:
    start = head[:64].lstrip().lower()
    return start.startswith((b"<!doctype html", b"<html", b"<head", b"<?xml"))


def _is_safetensors(head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    (length,) = struct.unpack_from("<Q", head)
    if length > SAFETENSORS_MAX_HEADER or length < 2:
        return False
    first = head[8:9]
    return first == b"{" or (first in (b" ", b"\t", b"\n", b"\r") and b"{" in head[8:64])
