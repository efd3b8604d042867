"""The reader registry: each file format is declared once, by the reader module that reads it.

A reader module ends with ``SPECS``, one :class:`ReaderSpec` per format it reads: how its content
is recognised (sniffs, each with a rank), the file suffixes that promise it, its header read
(``probe``, for ``inspect``) and whole-file read (``read_whole``, for ``verify``), whether
``verify`` reads it whatever the file is called, and which library ``verify --load`` loads it
with. Everything that depends on the set of formats is derived from those declarations by
:class:`Registry`: the sniffing order, the readers ``readers/files.py`` dispatches to, the
formats each suffix promises, the suffixes layouts claim and the formats ``verify`` reads by
content. Adding a format is its module plus one line in ``_MODULES``.

This module imports no reader: the registry is built the first time it is asked for, once every
reader module has loaded (they import ``sniff``, which asks it).
"""

from __future__ import annotations

import enum
import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptdoctor.model import FileReport
from ckptdoctor.readers.sample import Sample

if TYPE_CHECKING:
    from ckptdoctor.readers.formats import Format

_MODULES = (
    "sniff",
    "burnpack",
    "hdf5",
    "keras",
    "torchzip",
    "pickle",
    "burnrecord",
    "safetensors",
    "tararchive",
    "torchtar",
    "sevenzip",
    "dcp",
    "tfbundle",
)
"""The modules that declare formats (``SPECS``): the one registration line a new reader adds."""


class Rank(enum.IntEnum):
    """Where a sniff runs, lowest first (integrity reference §2). Within a band, ``Rank.X + n``
    orders formats whose tests could both accept the same bytes; declaration order breaks ties."""

    MAGIC = 100
    """Four-byte magics no text artefact can start with (zip, burnpack): also a head cut inside one."""
    SIGNATURE = 200
    """Other leading signatures (torch's legacy magic number, ``PYTORCH1``, gzip)."""
    ARTEFACT = 300
    """What is never checkpoint content (Git-LFS pointers, HTML pages, zeros): before the tests
    below, since an all-zero file also parses as an empty tar."""
    STRUCTURE = 400
    """Formats told by structure past their first bytes (tar's ``ustar`` at 257, safetensors' length and JSON)."""
    PAYLOAD = 500
    """Formats that may also sit inside a gzip stream (burn's ``.gz`` recorders): ``sniff_payload`` tries these."""


class Naming(enum.Enum):
    """What a file suffix says about a file named with it."""

    CONTENT = "content"
    """It holds the format (``.pkl``, ``.npy``): holding another is CKD205."""
    CHECKPOINT = "checkpoint"
    """It holds the format, and frameworks name checkpoints so among other files (``.bin``, ``.json``)."""
    CHECKPOINT_ONLY = "checkpoint-only"
    """It holds the format and names checkpoints and little else (``.pt``, ``.safetensors``): such a
    file in a folder no layout recognises is worth saying so."""


class Library(enum.Enum):
    """The library ``verify --load`` loads a format with (``readers/library.py`` calls it)."""

    TORCH = "torch"
    """``torch.load(weights_only=True)``."""
    TORCH_MMAP = "torch-mmap"
    """The same, memory-mapped (zip archives allow it)."""
    SAFETENSORS = "safetensors"
    H5PY = "h5py"
    """Every dataset read with h5py (Keras' weights; a ``.keras`` archive's ``model.weights.h5``)."""
    TENSORFLOW = "tensorflow"
    """``tf.train.load_checkpoint`` of a bundle's prefix, and every tensor read."""


SniffTest = Callable[[bytes, Sample], bool]
"""Whether a file's head (its first KiB; the sample for what lies further, such as its tail) is this format."""


@dataclass(frozen=True)
class Sniff:
    rank: int
    test: SniffTest


@dataclass(frozen=True)
class ReaderSpec:
    """One format, as its reader module declares it."""

    format: Format
    sniffs: tuple[Sniff, ...] = ()
    """How its content is recognised; none: it is told by name, or by a reader of another format
    (the gzip reader tells ``msgpack.gz``)."""
    suffixes: tuple[tuple[str, Naming], ...] = ()
    """File suffixes (lower case, with the dot) that promise this format, and what else they say."""
    probe: Callable[[Sample], FileReport] | None = None
    """The header read (head, tail and any header a format declares) for ``inspect``; None: the
    format is named, nothing more is read."""
    read_whole: Callable[[Sample, int], FileReport] | None = None
    """The whole-file read for ``verify``, with ``deep`` threads checking every byte when > 0;
    None: the probe already reads all there is to check."""
    read_any_name: bool = False
    """``verify`` reads a file of this content whatever it is called: it can carry code or tensors."""
    loaded_by: Library | None = None
    """The library ``verify --load`` loads it with, if any."""
    not_a_checkpoint: str = ""
    """For content that is never a checkpoint: why, in the user's terms (CKD205 says it)."""
    end_checked: bool = True
    """Whether ``inspect``'s header read finds where a file of it must end (an end record in its
    tail, sizes in its header) and so sees it cut short. False: a cut can pass that read, and
    ``prune`` reads the newest checkpoint it keeps whole before it deletes the last one that a
    header read proves whole (``planners.retention.unproven``)."""


@dataclass(frozen=True)
class Registry:
    """Declared formats and the tables derived from them."""

    specs: tuple[ReaderSpec, ...]

    @functools.cached_property
    def by_format(self) -> dict[str, ReaderSpec]:
        return {spec.format: spec for spec in self.specs}

    @functools.cached_property
    def sniffs(self) -> tuple[tuple[SniffTest, Format], ...]:
        """Every sniff, lowest rank first; declaration order breaks ties."""
        return self._ranked(0)

    @functools.cached_property
    def payload_sniffs(self) -> tuple[tuple[SniffTest, Format], ...]:
        """The sniffs of what may sit inside a gzip stream."""
        return self._ranked(Rank.PAYLOAD)

    def _ranked(self, lowest: int) -> tuple[tuple[SniffTest, Format], ...]:
        ranked = sorted(
            ((sniff.rank, sniff.test, spec.format) for spec in self.specs for sniff in spec.sniffs if sniff.rank >= lowest),
            key=lambda item: item[0],
        )
        return tuple((test, kind) for _, test, kind in ranked)

    @functools.cached_property
    def by_suffix(self) -> dict[str, frozenset[Format]]:
        """What content each suffix admits: every format that declares it."""
        admitted: dict[str, set[Format]] = {}
        for spec in self.specs:
            for suffix, _ in spec.suffixes:
                admitted.setdefault(suffix, set()).add(spec.format)
        return {suffix: frozenset(formats) for suffix, formats in admitted.items()}

    def suffixes(self, formats: frozenset[Format], naming: frozenset[Naming]) -> tuple[str, ...]:
        """The suffixes that ``formats`` declare with one of ``naming``, longest first (``.pth.tar`` before ``.tar``)."""
        found = {suffix for spec in self.specs if spec.format in formats for suffix, named in spec.suffixes if named in naming}
        return tuple(sorted(found, key=lambda suffix: (-len(suffix), suffix)))

    @functools.cached_property
    def checkpoint_only(self) -> tuple[str, ...]:
        """Suffixes that name checkpoints and little else (``.json`` and ``.bin`` name many things)."""
        return self.suffixes(frozenset(spec.format for spec in self.specs), frozenset({Naming.CHECKPOINT_ONLY}))

    @functools.cached_property
    def read_any_name(self) -> frozenset[Format]:
        return frozenset(spec.format for spec in self.specs if spec.read_any_name)

    @functools.cached_property
    def ends_unchecked(self) -> frozenset[Format]:
        return frozenset(spec.format for spec in self.specs if not spec.end_checked)

    def with_spec(self, spec: ReaderSpec) -> Registry:
        """This registry and one more format (tests declare one without touching any table)."""
        return Registry((*self.specs, spec))


_current: list[Registry] = []
"""The registry, built on first use (a list, so that no ``global`` statement is needed)."""


def current() -> Registry:
    if not _current:
        _current.append(Registry(tuple(spec for name in _MODULES for spec in _declared(name))))
    return _current[0]


def _declared(module: str) -> tuple[ReaderSpec, ...]:
    specs: tuple[ReaderSpec, ...] = importlib.import_module(f"ckptdoctor.readers.{module}").SPECS
    return specs
