"""The names of file formats, as reports carry them: the ones ckptdoctor has always known, and
those a reader module declares. The registry of readers and the sniffing that tells them apart
(``sniff``) both name formats, so the names live below both."""

from __future__ import annotations

from typing import ClassVar, cast


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
