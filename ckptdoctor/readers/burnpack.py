"""burn's burnpack (``.bpk``): 10-byte header, CBOR metadata, 256-aligned tensor data.

Layout (burn-format reference §11): ``NRUB``, u16 version, u32 metadata size M, M bytes of
CBOR, zero padding to D = ceil((10 + M) / 256) * 256, then tensors at ``D + data_offsets``.
The file is exactly ``D + max(end)`` bytes long; files from burn before 0.20 have no padding
and are exactly ``10 + M + max(end)``.
"""

from __future__ import annotations

import enum
import functools
import itertools
import math
import re
import struct
from collections.abc import Mapping
from typing import Any

from ckptdoctor.model import FileIssue, FileReport, Problem, Tensor
from ckptdoctor.readers import deep_scan
from ckptdoctor.readers._registry import Naming, Rank, ReaderSpec, Sniff
from ckptdoctor.readers.dtypes import NONFINITE_SCANNED, burn_dtype
from ckptdoctor.readers.sample import Sample
from ckptdoctor.readers.sniff import Format, begins

MAGIC = b"NRUB"
HEADER = struct.Struct("<4sHI")
ALIGNMENT = 256
MAX_METADATA = 104_857_600
SUPPORTED_VERSION = 1

_OPTIMIZER_TENSOR = re.compile(r"^\d+\.")


def _cbor() -> Any:
    """cbor2, which decodes a burnpack's metadata: loaded at the first burnpack read, so that a
    run of other formats never pays for it."""
    import cbor2  # the first burnpack read imports it; later ones find it in sys.modules

    return cbor2


OPTIMIZER_LEAVES: tuple[tuple[str, str], ...] = (
    (".momentum.max_moment_2", "adam-amsgrad"),
    (".momentum.moment_1", "adam"),
    (".momentum.exp_avg_diff", "adan"),
    (".momentum.velocity", "sgd-momentum"),
    (".lr_decay.sum", "adagrad"),
    (".square_avg.square_avg", "rmsprop"),
)
"""Tensor-name endings that reveal the optimizer (reference §11.6), most specific first."""


def probe(sample: Sample) -> FileReport:
    header = sample.head(HEADER.size)
    if len(header) < HEADER.size:
        return _report(Problem.TRUNCATED, f"only {sample.size} bytes: shorter than the 10-byte burnpack header")
    _magic, version, metadata_size = HEADER.unpack(header)
    if version > SUPPORTED_VERSION:
        return _report(Problem.MALFORMED, f"burnpack version {version}; this burn reads version {SUPPORTED_VERSION} at most")
    if metadata_size > MAX_METADATA:
        return _report(Problem.MALFORMED, f"declares {metadata_size} bytes of metadata, beyond burn's limit")
    metadata_end = HEADER.size + metadata_size
    if sample.size < metadata_end:
        return _report(
            Problem.TRUNCATED,
            f"cut inside its metadata: {sample.size} of at least {metadata_end} bytes",
        )
    parsed = _parse_metadata(sample.range(HEADER.size, metadata_size))
    if isinstance(parsed, str):
        return _report(Problem.MALFORMED, parsed)
    data_end, packing, facts = parsed
    data_start = -(-metadata_end // ALIGNMENT) * ALIGNMENT
    expected = data_start + data_end
    unaligned = metadata_end + data_end
    if sample.size == unaligned != expected and _unpadded(sample, packing, metadata_end, data_start):
        facts = (*facts, ("aligned", "no"))  # burn < 0.20 wrote no padding; still readable
        expected = unaligned
    issues: list[FileIssue] = []
    if sample.size < expected:
        issues.append(
            FileIssue(
                Problem.TRUNCATED,
                f"{sample.size} bytes, but its metadata needs {expected} ({expected - sample.size} missing): the save was cut short",
            )
        )
    elif sample.size > expected:
        issues.append(
            FileIssue(
                Problem.TRAILING_BYTES,
                f"{sample.size - expected} bytes beyond the {expected} its metadata accounts for",
            )
        )
    return FileReport(Format.BURNPACK.value, tuple(issues), facts)


def _parse_metadata(blob: bytes) -> tuple[int, _Packing, tuple[tuple[str, str], ...]] | str:
    """The end of the tensor data and the facts a metadata block gives, or what is wrong with it.

    Small blocks are cached on their bytes: every epoch of a run saves the same model, so the
    metadata of its files is byte-for-byte the same and is decoded once. Big ones (up to burn's
    100 MiB) are not kept.
    """
    return _parse_cached(blob) if len(blob) <= _CACHED_METADATA else _decode_metadata(blob)


_CACHED_METADATA = 1024 * 1024


@functools.lru_cache(maxsize=256)
def _parse_cached(blob: bytes) -> tuple[int, _Packing, tuple[tuple[str, str], ...]] | str:
    return _decode_metadata(blob)


def _decode_metadata(blob: bytes) -> tuple[int, _Packing, tuple[tuple[str, str], ...]] | str:
    try:
        metadata = _cbor().loads(blob)
    except Exception as error:  # cbor2 raises several unrelated types on bad input
        return f"metadata is not valid CBOR ({error})"
    tensors = metadata.get("tensors") if isinstance(metadata, Mapping) else None
    if not isinstance(tensors, Mapping):
        return "metadata has no 'tensors' map"
    try:
        extents = sorted(_extent(name, descriptor) for name, descriptor in tensors.items())
    except ValueError as error:
        return str(error)
    data_end = max((end for _, end in extents), default=0)
    return data_end, _packing(extents), tuple(_facts(tensors, metadata))


class _Packing(enum.Enum):
    """How the tensors lie: tells burn >= 0.20's padded files from older unpadded ones."""

    PADDED = "padded"
    """Gaps between tensors: only the aligned writer leaves them."""
    UNPADDED = "unpadded"
    """Back to back, and some tensor starts off a 256-byte boundary: only the old writer."""
    EITHER = "either"
    """Back to back on 256-byte boundaries: the bytes before the data must decide."""


def _packing(extents: list[tuple[int, int]]) -> _Packing:
    position = 0
    for start, end in extents:
        if start != position:
            return _Packing.PADDED
        position = end
    if any(start % ALIGNMENT for start, _ in extents):
        return _Packing.UNPADDED
    return _Packing.EITHER


def _unpadded(sample: Sample, packing: _Packing, metadata_end: int, data_start: int) -> bool:
    """Whether a file exactly ``10 + M + max(end)`` long is an old unpadded one, not a cut one.

    A padded file cut by exactly its padding length has that length too. Its padding bytes are
    zero; an old file has tensor data there. Zero tensor data is possible, so in that one case
    the file is called cut: a false alarm on an old file beats a cut file called whole.
    """
    if packing is _Packing.UNPADDED:
        return True
    if packing is _Packing.PADDED:
        return False
    return bool(sample.range(metadata_end, data_start - metadata_end).strip(b"\0"))


def _extent(name: object, descriptor: object) -> tuple[int, int]:
    if not isinstance(descriptor, Mapping):
        raise ValueError(f"tensor {name!r} has no descriptor map")
    offsets = descriptor.get("data_offsets")
    if not isinstance(offsets, (list, tuple)) or len(offsets) != 2 or not all(isinstance(o, int) and o >= 0 for o in offsets):
        raise ValueError(f"tensor {name!r} has no valid data_offsets")
    start, end = offsets
    if end < start:
        raise ValueError(f"tensor {name!r} has corrupted offset data: end {end} < start {start}")
    return start, end


def _facts(tensors: Mapping[Any, Any], metadata: Mapping[Any, Any]) -> list[tuple[str, str]]:
    names = [str(name) for name in tensors]
    scalars = metadata.get("scalars")
    facts = [("tensors", str(len(names)))]
    if names and all(_OPTIMIZER_TENSOR.match(name) for name in names):
        facts.append(("record", "optimizer"))
        facts.append(("optimizer", optimizer_kind(names)))
    elif not names and isinstance(scalars, Mapping) and any(str(k).endswith(".__rank") for k in scalars):
        facts.append(("record", "optimizer"))
        facts.append(("optimizer", "sgd"))  # plain SGD keeps no tensors, only ranks
    elif not names:
        facts.append(("record", "scheduler"))
    else:
        facts.append(("record", "model"))
    dtypes = sorted({str(d.get("dtype")) for d in tensors.values() if isinstance(d, Mapping)})
    floats = [d for d in dtypes if d in ("F64", "F32", "Flex32", "F16", "BF16")]
    if floats:
        facts.append(("precision", ",".join(floats)))
    return facts


def optimizer_kind(tensor_names: list[str]) -> str:
    for ending, kind in OPTIMIZER_LEAVES:
        if any(name.endswith(ending) for name in tensor_names):
            return kind
    return "unknown"


def _report(problem: Problem, detail: str) -> FileReport:
    return FileReport(Format.BURNPACK.value, (FileIssue(problem, detail),))


def read_whole(sample: Sample, deep: int = 0) -> FileReport:
    """Every descriptor checked against burn's writer (reference §11.4) and the tensors listed."""
    header = probe(sample)
    if header.problems & {Problem.MALFORMED, Problem.NOT_A_CHECKPOINT} or sample.size < HEADER.size:
        return header
    metadata_size = HEADER.unpack(sample.head(HEADER.size))[2]
    metadata_end = HEADER.size + metadata_size
    if sample.size < metadata_end:
        return header  # cut inside its metadata: nothing more to read
    aligned = header.fact("aligned") != "no"
    data_start = -(-metadata_end // ALIGNMENT) * ALIGNMENT if aligned else metadata_end
    blob = sample.range(HEADER.size, metadata_size)
    inventory = (
        _inventory_cached(blob, aligned, header.fact("record"))
        if len(blob) <= _CACHED_METADATA
        else _inventory(blob, aligned, header.fact("record"))
    )
    listed, found, floats = inventory
    issues = [*header.issues, *found]
    padding = sample.range(metadata_end, data_start - metadata_end)
    if padding.strip(b"\0"):
        issues.append(FileIssue(Problem.MALFORMED, "the padding between metadata and data is not zero"))
    if deep and floats and not header.issues:
        regions = [deep_scan.Region(data_start + start, length, dtype) for start, length, dtype in floats]
        issues += deep_scan.nonfinite_issues(sample, regions, deep)
    return FileReport(Format.BURNPACK.value, tuple(issues), header.facts, listed, (), sum(t.nbytes for t in listed))


_Inventory = tuple[tuple[Tensor, ...], tuple[FileIssue, ...], tuple[tuple[int, int, str], ...]]
"""Tensors listed, what is wrong with the descriptors, and the float tensors (offset from the data
start, length, dtype): all decided by the metadata block alone."""


@functools.lru_cache(maxsize=64)
def _inventory_cached(blob: bytes, aligned: bool, record: str | None) -> _Inventory:
    return _inventory(blob, aligned, record)  # the same model saved every epoch: one decode


def _inventory(blob: bytes, aligned: bool, record: str | None) -> _Inventory:
    metadata = _cbor().loads(blob)  # probe() decoded it already: it is valid
    issues: list[FileIssue] = []
    listed: list[Tensor] = []
    floats: list[tuple[int, int, str]] = []
    extents: list[tuple[int, int, str]] = []
    missing_ids: list[str] = []
    for name, descriptor in metadata["tensors"].items():
        start, end = descriptor["data_offsets"]
        shape = descriptor.get("shape")
        dtype = burn_dtype(descriptor.get("dtype"))
        if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) and d >= 0 for d in shape):
            issues.append(FileIssue(Problem.MALFORMED, f"tensor {name} has no valid shape"))
            continue
        param = descriptor.get("param_id")
        if param is None:
            missing_ids.append(str(name))
        if dtype is None:  # quantized: packed values and scales, no length to check against
            if not (isinstance(descriptor.get("dtype"), Mapping) and "QFloat" in descriptor["dtype"]):
                issues.append(FileIssue(Problem.MALFORMED, f"tensor {name} has an unknown dtype {descriptor.get('dtype')!r}"))
            listed.append(Tensor(str(name), _dtype_name(descriptor.get("dtype")), tuple(shape), end - start, param=_param(param)))
            continue
        needed = math.prod(shape) * dtype[1]
        if end - start != needed:
            issues.append(
                FileIssue(
                    Problem.MALFORMED,
                    f"tensor {name} spans {end - start} bytes but its {dtype[0]} shape {list(shape)} needs {needed}",
                )
            )
        if aligned and start % ALIGNMENT:
            issues.append(FileIssue(Problem.MALFORMED, f"tensor {name} starts at {start}, off burn's {ALIGNMENT}-byte alignment"))
        extents.append((start, end, str(name)))
        listed.append(Tensor(str(name), dtype[0], tuple(shape), end - start, param=_param(param)))
        if dtype[0] in NONFINITE_SCANNED:
            floats.append((start, end - start, dtype[0]))
    extents.sort()
    for (_, previous_end, previous), (start, _, name) in itertools.pairwise(extents):
        if start < previous_end:
            issues.append(FileIssue(Problem.MALFORMED, f"tensors {previous} and {name} overlap"))
            break
    if missing_ids and record in ("model", "optimizer"):
        issues.append(
            FileIssue(
                Problem.MALFORMED,
                f"{len(missing_ids)} tensors carry no param_id ({', '.join(missing_ids[:3])}): burn cannot match "
                "optimizer state to them (Optimizer record tensors should carry a parameter id.)",
            )
        )
    scalars = metadata.get("scalars", {})
    odd = [str(k) for k, v in scalars.items() if not _is_scalar(v)] if isinstance(scalars, Mapping) else ["scalars"]
    if odd:
        issues.append(FileIssue(Problem.MALFORMED, f"scalars {', '.join(odd[:3])} are not one of Int, UInt, Float or Bool"))
    return tuple(listed), tuple(issues), tuple(floats)


_SCALARS = {"Int": int, "UInt": int, "Float": float, "Bool": bool}


def _is_scalar(value: object) -> bool:
    """burn's ``Scalar``: a one-entry map such as ``{"UInt": 97}`` (CBOR floats may come back as ints)."""
    if not isinstance(value, Mapping) or len(value) != 1:
        return False
    ((kind, number),) = value.items()
    wanted = _SCALARS.get(str(kind))
    return wanted is not None and isinstance(number, (int, float) if wanted is float else wanted)


def _param(value: object) -> str | None:
    return str(value) if isinstance(value, int) else None


def _dtype_name(value: object) -> str:
    if isinstance(value, Mapping) and value:
        return str(next(iter(value))).lower()
    return str(value).lower()


SPECS = (
    ReaderSpec(
        Format.BURNPACK,
        (Sniff(Rank.MAGIC, lambda head, sample: begins(head, MAGIC)),),
        ((".bpk", Naming.CHECKPOINT_ONLY),),
        probe,
        read_whole,
        read_any_name=True,
    ),
)
