"""Bare pickles and torch's pre-zip formats, judged without unpickling anything.

A pickle ends with the STOP opcode (``.``), so a pickle cut short is visible from its last
byte. torch's legacy (non-zip) and tar formats are only recognised here; they are still
loadable by some torch versions but are obsolete (CKD210).
"""

from __future__ import annotations

import math
import struct

from ckptdoctor.model import FileIssue, FileReport, Problem, Tensor
from ckptdoctor.readers import _deep
from ckptdoctor.readers._dtypes import FLOATS, TORCH_SIZES, TORCH_STORAGES
from ckptdoctor.readers._pickle_safety import judge
from ckptdoctor.readers._sample import HEAD, TAIL, Sample, SampleReader
from ckptdoctor.readers._unpickler import TORCH_OPCODES, Global, Walk, tensors, walk
from ckptdoctor.readers.sniff import TORCH_LEGACY_MAGIC, Format

STOP = b"."


def read_pickle(sample: Sample) -> FileReport:
    if sample.tail(1) != STOP:
        issue = FileIssue(Problem.TRUNCATED, "the pickle does not end with its STOP opcode: cut short")
        return FileReport(Format.PICKLE.value, (issue,))
    if sample.size <= HEAD + TAIL:
        # the whole file is in hand already: walk its opcodes (pickletools parses, never runs)
        problem = _opcode_problem(sample.head(sample.size))
        if problem:
            return FileReport(Format.PICKLE.value, (FileIssue(Problem.MALFORMED, problem),))
    return FileReport(Format.PICKLE.value)


def _opcode_problem(data: bytes) -> str | None:
    walked = walk(data)
    if walked.error:
        return f"the pickle {walked.error}"
    if walked.end != len(data):
        return f"{len(data) - walked.end} bytes after the pickle's STOP opcode"
    return None


def read_legacy(sample: Sample) -> FileReport:
    issue = FileIssue(
        Problem.LEGACY,
        "saved in torch's legacy non-zip format (_use_new_zipfile_serialization=False); "
        "it cannot be memory-mapped",
    )
    return FileReport(Format.TORCH_LEGACY.value, (issue,))


def read_tar(sample: Sample) -> FileReport:
    issue = FileIssue(
        Problem.LEGACY,
        "saved in torch's obsolete tar format; torch.load(weights_only=True) refuses it",
    )
    return FileReport(Format.TORCH_TAR.value, (issue,))


def read_preview(sample: Sample) -> FileReport:
    issue = FileIssue(
        Problem.MALFORMED,
        "a torch preview-release archive (PYTORCH1); torch refuses it as an unsupported archive format",
    )
    return FileReport(Format.TORCH_PREVIEW.value, (issue,))


MAX_PICKLE = 256 * 1024 * 1024
"""Pickles are read whole up to this size (a legacy torch file's pickles hold no tensor data)."""
_FIRST_READ = 4 * 1024 * 1024
MAX_PICKLES = 16
"""A file of more back-to-back pickles than this is not walked further (and says so)."""
_LEGACY_PROTOCOL = bytes.fromhex("80024de9032e")
_ELEMENT = struct.Struct("<Q")


def verify_pickle(sample: Sample, deep: int = 0) -> FileReport:
    """A bare pickle (``random_states_0.pkl``, ``training_args.bin``): every pickle in it, walked."""
    issues: list[FileIssue] = []
    position = 0
    keys: tuple[str, ...] = ()
    for number in range(MAX_PICKLES):
        walked = _walk_growing(sample, position, None)
        if number and walked.error and not walked.globals:
            issues.append(FileIssue(Problem.MALFORMED, f"{sample.size - position} bytes after the pickle's STOP opcode"))
            break
        issues += judge(walked, "the pickle" if number == 0 else f"pickle {number + 1} (from byte {position})")
        if number == 0 and isinstance(walked.root, dict):
            keys = _keys(walked.root)
        if walked.error:
            break
        position = walked.end
        if position >= sample.size:
            break
    else:
        issues.append(FileIssue(Problem.MALFORMED, f"more than {MAX_PICKLES} pickles back to back: the rest was not checked"))
    return FileReport(Format.PICKLE.value, tuple(issues), (), (), keys)


def verify_legacy(sample: Sample, deep: int = 0) -> FileReport:
    """torch's pre-zip format: five pickles (magic, protocol, sys_info, the object, storage keys)
    and then each storage as a u64 element count and its raw bytes (integrity reference §5.1)."""
    legacy = read_legacy(sample).issues
    if sample.range(len(TORCH_LEGACY_MAGIC), len(_LEGACY_PROTOCOL)) != _LEGACY_PROTOCOL:
        issue = FileIssue(Problem.UNSAFE_PICKLE, "its second pickle is not torch's literal protocol number: a crafted file")
        return FileReport(Format.TORCH_LEGACY.value, (*legacy, issue))
    issues = list(legacy)
    position = len(TORCH_LEGACY_MAGIC) + len(_LEGACY_PROTOCOL)
    walks = []
    for what in ("sys_info", "the object", "the storage list"):
        walked = _walk_growing(sample, position, TORCH_OPCODES)
        issues += judge(walked, f"{what} pickle")
        if walked.error:
            return FileReport(Format.TORCH_LEGACY.value, tuple(issues))
        walks.append(walked)
        position = walked.end
    found = list(tensors(walks[1].root))
    storages = {storage.key: storage for storage in walks[1].storages}
    keys = walks[2].root if isinstance(walks[2].root, list) else []
    listed = tuple(
        Tensor(name, ref.dtype, ref.size, math.prod(ref.size) * TORCH_SIZES.get(ref.dtype, 1), ref.storage.location if ref.storage else "meta")
        for name, ref in found
    )
    regions: list[_deep.Region] = []
    tensor_bytes = 0
    for key in keys:
        storage = storages.get(str(key))
        header = sample.range(position, _ELEMENT.size)
        element = TORCH_SIZES.get(storage.dtype) if storage is not None and storage.dtype else None
        if element is None or len(header) < _ELEMENT.size:
            why = "ends before" if len(header) < _ELEMENT.size else "cannot size"
            problem = Problem.TRUNCATED if len(header) < _ELEMENT.size else Problem.MALFORMED
            issues.append(FileIssue(problem, f"the file {why} storage {key}"))
            return FileReport(Format.TORCH_LEGACY.value, tuple(issues), (), listed, _keys(walks[1].root))
        assert storage is not None and storage.dtype is not None
        (count,) = _ELEMENT.unpack(header)
        if count != storage.numel:
            issues.append(FileIssue(
                Problem.MALFORMED,
                f"storage {key} records {count} elements where its pickle says {storage.numel} (torch: storage has wrong byte size)",
            ))
            return FileReport(Format.TORCH_LEGACY.value, tuple(issues), (), listed, _keys(walks[1].root))
        nbytes = count * element
        if storage.dtype in FLOATS:
            regions.append(_deep.Region(position + _ELEMENT.size, nbytes, storage.dtype))
        position += _ELEMENT.size + nbytes
        tensor_bytes += nbytes
    if sample.size < position:
        issues.append(FileIssue(Problem.TRUNCATED, f"{sample.size} bytes, but its storages need {position}: the save was cut short"))
    elif sample.size > position:
        issues.append(FileIssue(Problem.TRAILING_BYTES, f"{sample.size - position} bytes after its last storage"))
    elif deep and regions:
        issues += _deep.nonfinite_issues(sample, regions, deep)
    return FileReport(Format.TORCH_LEGACY.value, tuple(issues), (), listed, _keys(walks[1].root), tensor_bytes)


def verify_tar(sample: Sample, deep: int = 0) -> FileReport:
    """torch's oldest format: a tar of ``storages``, ``tensors`` and ``pickle``, each holding pickles
    that torch unpickles in that order (walked here, never loaded). A file that is not a readable tar
    is walked from its first byte too: torch falls back to reading it as a legacy pickle."""
    import tarfile

    issues = list(read_tar(sample).issues)
    try:
        with tarfile.open(fileobj=SampleReader(sample), mode="r:") as archive:
            members = {m.name: m for m in archive.getmembers()}
            for name in ("storages", "tensors", "pickle"):
                member = members.get(name)
                if member is None or not member.isfile():
                    if name == "pickle":  # the object itself; the others hold what it refers to
                        issues.append(FileIssue(Problem.MALFORMED, "the tar has no 'pickle' member"))
                elif member.size > MAX_PICKLE:
                    issues.append(FileIssue(Problem.MALFORMED, f"its {name} member is too large to analyse"))
                else:
                    handle = archive.extractfile(member)
                    issues += _tar_member(handle.read() if handle else b"", name)
    except Exception as error:  # tarfile raises many unrelated types on hostile headers
        issues.append(FileIssue(Problem.MALFORMED, f"the tar cannot be read ({error})"))
        walked = _walk_growing(sample, 0, None)
        issues += [i for i in judge(walked, "the pickle at its start") if i.problem is not Problem.MALFORMED]
    return FileReport(Format.TORCH_TAR.value, tuple(issues))


def is_tar(sample: Sample) -> bool:
    """Whether ``tarfile`` (which torch tries first) reads the file as a tar, magic or not."""
    import tarfile

    try:
        with tarfile.open(fileobj=SampleReader(sample), mode="r:") as archive:
            return archive.next() is not None
    except Exception:  # tarfile raises many unrelated types on what is not a tar
        return False


_TAR_TENSOR = struct.Struct("<ii")
MAX_RECORDS = 1_000_000


def _tar_member(data: bytes, name: str) -> list[FileIssue]:
    """Every pickle of a tar-format member: a count, then per item a pickle and raw bytes
    (storages: u64 count and elements; tensors: ndim, sizes, strides, offset), then (storages)
    the storage views."""
    if name == "pickle":
        return judge(walk(data), "its pickle member")
    issues: list[FileIssue] = []
    count_walk = walk(data)
    issues += judge(count_walk, f"the {name} member's count")
    count = count_walk.root if isinstance(count_walk.root, int) else 0
    position = count_walk.end
    if count > MAX_RECORDS:
        issues.append(FileIssue(Problem.MALFORMED, f"the {name} member claims {count} records: only the first {MAX_RECORDS} were checked"))
    try:
        for _ in range(min(count, MAX_RECORDS)):
            item = walk(data, position)
            issues += judge(item, f"a record of the {name} member")
            if item.error or not isinstance(item.root, tuple) or len(item.root) != 3:
                return issues
            position = item.end
            if name == "storages":
                kind = item.root[2]
                size = TORCH_SIZES.get(TORCH_STORAGES.get(kind.name, "") if isinstance(kind, Global) else "", 1)
                (elements,) = _ELEMENT.unpack_from(data, position)
                position += _ELEMENT.size + elements * size
            else:
                ndim, _ = _TAR_TENSOR.unpack_from(data, position)
                position += _TAR_TENSOR.size + 16 * ndim + 8
        if name == "storages" and position < len(data):
            issues += judge(walk(data, position), "the storages member's views")
    except struct.error:
        issues.append(FileIssue(Problem.MALFORMED, f"the {name} member ends inside a record"))
    return issues


def _walk_growing(sample: Sample, start: int, opcodes: frozenset[str] | None) -> Walk:
    """Walk the pickle at ``start``, reading more of the file only while the pickle needs it."""
    length = _FIRST_READ
    while True:
        available = min(length, sample.size - start, MAX_PICKLE)
        walked = walk(sample.range(start, available), 0, opcodes)
        if walked.error is None or available >= min(sample.size - start, MAX_PICKLE):
            walked.end += start
            if walked.error and available == MAX_PICKLE:
                walked.error = f"is longer than the {MAX_PICKLE} bytes ckptdoctor reads of one pickle: the rest was not checked"
            return walked
        length *= 8


def _keys(root: object) -> tuple[str, ...]:
    return tuple(str(key) for key in root) if isinstance(root, dict) else ()
