"""Which format a file holds, told from its first bytes, never from its name.

Each reader module declares how its formats are recognised (``SPECS``, see ``_registry``); this
module runs those tests in their declared order and declares what is never checkpoint content:
Git-LFS pointers, HTML pages, all-zero files. The order matters (integrity reference §2): zip
first; then those artefacts before the tar test, because an all-zero file also parses as an
empty tar.
"""

from __future__ import annotations

from typing import ClassVar, cast

from ckptdoctor.readers._registry import Rank, ReaderSpec, Sniff, current
from ckptdoctor.readers._sample import BytesSample, Sample


def _known(name: str) -> Format:
    """A name ckptdoctor has always known, a :class:`Format` constant: declared once the class exists (below it)."""
    return cast("Format", name)


class Format(str):
    """A file format's name, as reports carry it (part of the JSON report).

    One object per name: ``Format(name)`` is the declared format of that name (a ValueError for
    any other, as for an enum), and ``Format.declare(name)`` declares one: a new reader module
    declares its own format so. The constants below are the formats ckptdoctor has always known.
    """

    __slots__ = ()
    _declared: ClassVar[dict[str, Format]] = {}

    def __new__(cls, name: str) -> Format:
        try:
            return cls._declared[name]
        except KeyError:
            raise ValueError(f"{name!r} is not a format ckptdoctor reads") from None

    @classmethod
    def named(cls, name: str) -> Format | None:
        """The declared format of that name, if any."""
        return cls._declared.get(name)

    @classmethod
    def declare(cls, name: str) -> Format:
        return cls._declared.setdefault(name, str.__new__(cls, name))

    @property
    def value(self) -> str:
        """The name as a plain string (what a ``FileReport`` holds)."""
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"Format({str.__repr__(self)})"

    EMPTY: ClassVar[Format] = _known("empty")
    BURNPACK: ClassVar[Format] = _known("burnpack")
    MSGPACK: ClassVar[Format] = _known("msgpack")
    """burn recorder-era named MessagePack (``.mpk``)."""
    JSON: ClassVar[Format] = _known("json")
    GZIP: ClassVar[Format] = _known("gzip")
    """A gzip stream whose payload could not be told apart (see the ``.gz`` variants)."""
    BINCODE: ClassVar[Format] = _known("bincode")
    """burn recorder-era bincode (``.bin``): recognised by the recorder metadata it starts with."""
    MSGPACK_GZ: ClassVar[Format] = _known("msgpack.gz")
    JSON_GZ: ClassVar[Format] = _known("json.gz")
    BINCODE_GZ: ClassVar[Format] = _known("bincode.gz")
    TORCH_ZIP: ClassVar[Format] = _known("torch-zip")
    TORCH_LEGACY: ClassVar[Format] = _known("torch-legacy")
    TORCH_TAR: ClassVar[Format] = _known("torch-tar")
    TORCH_PREVIEW: ClassVar[Format] = _known("torch-preview")
    PICKLE: ClassVar[Format] = _known("pickle")
    SAFETENSORS: ClassVar[Format] = _known("safetensors")
    DISTCP: ClassVar[Format] = _known("distcp")
    """torch.distributed.checkpoint data: raw tensor bytes, told by name only."""
    OCDBT: ClassVar[Format] = _known("ocdbt")
    """TensorStore's OCDBT store (Orbax's arrays): a manifest, B+tree nodes and raw values."""
    TEXT: ClassVar[Format] = _known("text")
    """A pointer file's few bytes of text (DeepSpeed's ``latest``)."""
    ZIP: ClassVar[Format] = _known("zip")
    NUMPY: ClassVar[Format] = _known("numpy")
    SEVEN_ZIP: ClassVar[Format] = _known("7z")
    GIT_LFS_POINTER: ClassVar[Format] = _known("git-lfs-pointer")
    HTML: ClassVar[Format] = _known("html")
    ZEROS: ClassVar[Format] = _known("zeros")
    UNKNOWN: ClassVar[Format] = _known("unknown")


for _constant, _name in list(vars(Format).items()):
    if _constant.isupper() and isinstance(_name, str):
        setattr(Format, _constant, Format.declare(_name))


ZIP_LOCAL = b"PK\x03\x04"
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"


def sniff(sample: Sample) -> Format:
    if sample.size == 0:
        return Format.EMPTY
    head = sample.head()
    return next((kind for test, kind in current().sniffs if test(head, sample)), Format.UNKNOWN)


def sniff_payload(head: bytes) -> Format:
    """Formats that may also sit inside a gzip stream (burn's ``.gz`` recorders)."""
    sample = BytesSample(head)
    return next((kind for test, kind in current().payload_sniffs if test(head, sample)), Format.UNKNOWN)


def begins(head: bytes, magic: bytes) -> bool:
    """Whether ``head`` starts with ``magic``, or is cut before its magic was whole: still the
    format it began to be, and cut short (its reader says so)."""
    return head.startswith(magic) or (len(head) < len(magic) and magic.startswith(head))


def _is_html(head: bytes, sample: Sample) -> bool:
    start = head[:64].lstrip().lower()
    return start.startswith((b"<!doctype html", b"<html", b"<head", b"<?xml"))


def _zeros(head: bytes, sample: Sample) -> bool:
    return not head.strip(b"\0") and not sample.tail().strip(b"\0")


SPECS = (
    ReaderSpec(
        Format.GIT_LFS_POINTER,
        (Sniff(Rank.ARTEFACT, lambda head, sample: head.startswith(LFS_POINTER)),),
        not_a_checkpoint="a Git LFS pointer, not the weights: the file was never fetched (git lfs pull)",
    ),
    ReaderSpec(
        Format.HTML,
        (Sniff(Rank.ARTEFACT, _is_html),),
        not_a_checkpoint="an HTML page, not a checkpoint: a download saved an error or login page",
    ),
    ReaderSpec(
        Format.ZEROS,
        (Sniff(Rank.ARTEFACT, _zeros),),
        not_a_checkpoint="all zero bytes: space was allocated but the data never written",
    ),
)
"""What is never checkpoint content, whatever the file is called."""
