"""torch.distributed.checkpoint (DCP): ``.metadata`` and the ``__<rank>_<n>.distcp`` files it names.

``.metadata`` is a pickle of torch's ``Metadata``; its storage entries carry the relative path of
every data file. The file names are read off the pickle's opcodes, never by unpickling. Data
files hold each item as its own ``torch.save`` stream: tensors, which ``dcp.load`` reads with
``weights_only=True``, and any other object, which it reads with ``torch.load(weights_only=False)``
at the offset the metadata gives (:func:`byte_items` finds those ranges).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers import _opcodes
from ckptdoctor.readers._sample import MAX_HEADER, Sample
from ckptdoctor.readers._unpickler import Call, Global, ObjectKey, Walk
from ckptdoctor.readers.sniff import Format

METADATA = ".metadata"
DATA_SUFFIX = ".distcp"
_DATA_FILE = re.compile(r"^__\d+_\d+\.distcp$")


def is_data_file(name: str) -> bool:
    return name.endswith(DATA_SUFFIX)


def read_data_file(sample: Sample) -> FileReport:
    return FileReport(Format.DISTCP.value)


def read_metadata(sample: Sample) -> FileReport:
    if sample.size > MAX_HEADER:
        return _report(Problem.MALFORMED, f"{sample.size} bytes: larger than ckptdoctor reads for metadata")
    names: set[str] = set()
    try:
        for op in _opcodes.read(sample.head(sample.size)):
            if isinstance(op.arg, str) and _DATA_FILE.match(op.arg):
                names.add(op.arg)
    except (_opcodes.StreamEnd, _opcodes.Unproven) as error:
        return _report(Problem.TRUNCATED, f"the metadata pickle breaks off ({error})")
    return FileReport(Format.PICKLE.value, (), (("references", "\n".join(sorted(names))),))


class ByteItem(NamedTuple):
    """A non-tensor object of a DCP checkpoint: ``length`` bytes at ``offset`` of ``relative_path``."""

    fqn: str
    relative_path: str
    offset: int
    length: int


def byte_items(walked: Walk) -> list[ByteItem] | str:
    """Where the objects that ``dcp.load`` unpickles lie, from a walk of ``.metadata``; or why that
    cannot be told (then what it would unpickle cannot be proven safe)."""
    state = walked.state(walked.root)
    if not isinstance(state, dict):
        return "its Metadata is not a literal object"
    declared, storage = state.get("state_dict_metadata"), state.get("storage_data")
    if not isinstance(declared, dict) or not isinstance(storage, dict):
        return "its Metadata does not list its items and their storage literally"
    objects = {fqn for fqn, kind in declared.items() if not (isinstance(kind, Call) and kind.func == _TENSOR_METADATA)}
    items: list[ByteItem] = []
    for key, info in storage.items():
        index = walked.state(key.value) if isinstance(key, ObjectKey) else None
        fields = walked.state(info)
        if not isinstance(index, dict) or not isinstance(fields, dict):
            return "a storage entry is not a literal MetadataIndex and _StorageInfo"
        if index.get("fqn") not in objects:
            continue
        path, offset, length = fields.get("relative_path"), fields.get("offset"), fields.get("length")
        if not (isinstance(path, str) and isinstance(offset, int) and isinstance(length, int)) or fields.get("transform_descriptors"):
            return f"the storage of {index.get('fqn')!r} is not a literal path, offset and length"
        items.append(ByteItem(str(index.get("fqn")), path, offset, length))
    return items


_TENSOR_METADATA = Global("torch.distributed.checkpoint.metadata", "TensorStorageMetadata")


def _report(problem: Problem, detail: str) -> FileReport:
    return FileReport(Format.PICKLE.value, (FileIssue(problem, detail),))
