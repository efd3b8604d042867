"""torch.distributed.checkpoint (DCP): ``.metadata`` and the ``__<rank>_<n>.distcp`` files it names.

``.metadata`` is a pickle of torch's ``Metadata``; its storage entries carry the relative path,
offset and length of every item. They are read by walking the pickle, never by unpickling. Data
files hold each item as its own ``torch.save`` stream: tensors, which ``dcp.load`` reads with
``weights_only=True``, and any other object, which it reads with ``torch.load(weights_only=False)``
at the offset the metadata gives (:func:`byte_items` finds those ranges). A data file shorter than
its items reach, or whose last item does not end like a ``torch.save`` stream, was cut short.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers import _opcodes
from ckptdoctor.readers._registry import Naming, ReaderSpec
from ckptdoctor.readers.sample import MAX_HEADER, Sample
from ckptdoctor.readers.sniff import ZIP_LOCAL, Format
from ckptdoctor.readers.torchzip import END, END_SIGNATURE
from ckptdoctor.readers.unpickler import Call, Global, ObjectKey, Walk, walk

METADATA = ".metadata"
DATA_SUFFIX = ".distcp"
_DATA_FILE = re.compile(r"^__\d+_\d+\.distcp$")
EXTENTS = "extents"
"""A ``.metadata`` fact: for each data file it names, the byte where its last item ends (``name\tend`` lines)."""
FRAMING = "framing"
"""A data file fact: ``torch-save`` where it starts with a ``torch.save`` stream (DCP's default format)."""
READ_BESIDE = "read-beside"
"""A ``.metadata`` fact: the bytes ``verify`` reads of the data files beside it, as ``objects\tspans``:
the objects ``dcp.load`` unpickles (``objects_read``), and every item (``spans_read``, ``--deep``)."""
MAX_OBJECT = 256 * 1024 * 1024
"""A DCP object longer than this is not read: what it would run cannot be proven safe."""
ZIP_END = "zip-end"
"""A data file fact: ``yes`` where its last 22 bytes are a zip end record, as a ``torch.save`` stream
ends; ``zeros`` where they are zeros; else ``no``."""


def is_data_file(name: str) -> bool:
    return name.endswith(DATA_SUFFIX)


def read_data_file(sample: Sample) -> FileReport:
    """Raw item bytes, where zeros or any magic are fine; how it starts and ends is recorded for
    the layout, which knows from ``.metadata`` where its last item must end."""
    if sample.head(len(ZIP_LOCAL)) != ZIP_LOCAL:
        return FileReport(Format.DISTCP.value)
    ends = sample.tail(END.size)
    end = "yes" if len(ends) == END.size and ends.startswith(END_SIGNATURE) else "zeros" if not ends.strip(b"\0") else "no"
    return FileReport(Format.DISTCP.value, (), ((FRAMING, "torch-save"), (ZIP_END, end)))


def read_metadata(sample: Sample) -> FileReport:
    if sample.size > MAX_HEADER:
        return _report(Problem.MALFORMED, f"{sample.size} bytes: larger than ckptdoctor reads for metadata")
    data = sample.head(sample.size)
    walked = walk(data)
    items = storage_items(walked) if not (walked.error or walked.unproven) else None
    if not isinstance(items, list):
        return _named_in_opcodes(data)  # the names still show; where the items end cannot be told
    ends: dict[str, int] = {}
    for item in items:
        if _DATA_FILE.match(item.relative_path):
            ends[item.relative_path] = max(ends.get(item.relative_path, 0), item.offset + item.length)
    beside = f"{sum(i.length for i in objects_read(items))}\t{sum(i.length for i in spans_read(items))}"
    facts = (
        ("references", "\n".join(sorted(ends))),
        (EXTENTS, "\n".join(f"{name}\t{end}" for name, end in sorted(ends.items()))),
        (READ_BESIDE, beside),
    )
    return FileReport(Format.PICKLE.value, (), facts)


def _named_in_opcodes(data: bytes) -> FileReport:
    names: set[str] = set()
    try:
        for op in _opcodes.read(data):
            if isinstance(op.arg, str) and _DATA_FILE.match(op.arg):
                names.add(op.arg)
    except (_opcodes.StreamEnd, _opcodes.Unproven) as error:
        return _report(Problem.TRUNCATED, f"the metadata pickle breaks off ({error})")
    return FileReport(Format.PICKLE.value, (), (("references", "\n".join(sorted(names))),))


def extents(metadata: FileReport) -> dict[str, int]:
    """Where the last item of each data file ends, from a ``.metadata`` report (empty if unknown)."""
    recorded = metadata.fact(EXTENTS)
    return {name: int(end) for name, _, end in (line.partition("\t") for line in recorded.splitlines())} if recorded else {}


def shard_issue(data: FileReport, size: int, end: int) -> FileIssue | None:
    """What is wrong with a data file of ``size`` bytes whose last item ends at byte ``end``."""
    if size < end:
        return FileIssue(
            Problem.TRUNCATED,
            f"{size} bytes, but {METADATA} places its items up to byte {end}: the last {end - size} bytes are missing (dcp.load fails)",
        )
    ending = data.fact(ZIP_END)
    if size == end and data.fact(FRAMING) == "torch-save" and ending != "yes":
        why = (
            "its last bytes are zeros: the end of the save never reached the disk"
            if ending == "zeros"
            else "its end was cut or overwritten"
        )
        return FileIssue(
            Problem.TRUNCATED,
            f"its last item does not end with the zip end record every torch.save stream ends with; {why} "
            "(dcp.load: failed finding central directory)",
        )
    return None


class StoredItem(NamedTuple):
    """One entry of a DCP checkpoint's storage: ``length`` bytes at ``offset`` of ``relative_path``."""

    fqn: str
    chunk: tuple[int, ...]
    """Where the chunk starts in the tensor (empty for an object)."""
    relative_path: str
    offset: int
    length: int
    tensor: bool
    """A tensor, which dcp.load reads with ``weights_only=True``; else an object, which it unpickles
    (transformed objects, compressed for one, cannot be placed: their bytes are not the pickle)."""

    @property
    def key(self) -> str:
        """The item's name from one checkpoint to the next: its fqn, with the chunk's offsets where
        the tensor is sharded."""
        return f"{self.fqn}[{', '.join(map(str, self.chunk))}]" if any(self.chunk) else self.fqn


def storage_items(walked: Walk) -> list[StoredItem] | str:
    """Every item ``.metadata`` places in a data file, from a walk of it; or why the objects that
    ``dcp.load`` unpickles cannot be placed (then what it would unpickle cannot be proven safe). A
    tensor whose place is not literal is left out: it is never unpickled."""
    state = walked.state(walked.root)
    if not isinstance(state, dict):
        return "its Metadata is not a literal object"
    declared, storage = state.get("state_dict_metadata"), state.get("storage_data")
    if not isinstance(declared, dict) or not isinstance(storage, dict):
        return "its Metadata does not list its items and their storage literally"
    objects = {fqn for fqn, kind in declared.items() if not (isinstance(kind, Call) and kind.func == _TENSOR_METADATA)}
    items: list[StoredItem] = []
    for key, info in storage.items():
        index = walked.state(key.value) if isinstance(key, ObjectKey) else None
        fields = walked.state(info)
        if not isinstance(index, dict) or not isinstance(fields, dict):
            return "a storage entry is not a literal MetadataIndex and _StorageInfo"
        fqn = index.get("fqn")
        tensor = fqn not in objects
        path, offset, length = fields.get("relative_path"), fields.get("offset"), fields.get("length")
        if not (isinstance(path, str) and isinstance(offset, int) and isinstance(length, int)):
            if tensor:
                continue
            return f"the storage of {fqn!r} is not a literal path, offset and length"
        if not tensor and fields.get("transform_descriptors"):
            return f"the storage of {fqn!r} is transformed: its bytes are not the pickle dcp.load runs"
        chunk = index.get("offset")
        chunk = tuple(chunk) if isinstance(chunk, tuple) and all(isinstance(n, int) for n in chunk) else ()
        items.append(StoredItem(str(fqn), chunk, path, offset, length, tensor))
    return items


def in_folder(relative_path: str) -> bool:
    """Whether an item's file is one of the checkpoint folder's own (``dcp.load`` joins the path to it)."""
    return os.path.basename(relative_path) == relative_path and relative_path not in (".", "..")


def objects_read(items: list[StoredItem]) -> list[StoredItem]:
    """The objects ``dcp.load`` unpickles that ``verify`` reads from the data files, each once."""
    return [i for i in items if not i.tensor and in_folder(i.relative_path) and 0 <= i.length <= MAX_OBJECT and i.offset >= 0]


def spans_read(items: list[StoredItem]) -> list[StoredItem]:
    """The items ``verify --deep`` reads byte by byte from the data files, each once."""
    return [i for i in items if in_folder(i.relative_path) and i.offset >= 0 and i.length > 0]


def byte_items(walked: Walk) -> list[StoredItem] | str:
    """Where the objects that ``dcp.load`` unpickles lie, from a walk of ``.metadata``; or why that
    cannot be told (then what it would unpickle cannot be proven safe)."""
    items = storage_items(walked)
    return items if isinstance(items, str) else [item for item in items if not item.tensor]


_TENSOR_METADATA = Global("torch.distributed.checkpoint.metadata", "TensorStorageMetadata")


def _report(problem: Problem, detail: str) -> FileReport:
    return FileReport(Format.PICKLE.value, (FileIssue(problem, detail),))


SPECS = (ReaderSpec(Format.DISTCP, suffixes=((DATA_SUFFIX, Naming.CHECKPOINT_ONLY),)),)
"""Data files are told by name (``is_data_file``), whatever bytes they hold."""
