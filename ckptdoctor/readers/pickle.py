"""Bare pickles and torch's legacy (pre-zip) format, judged without unpickling anything.

A pickle ends with the STOP opcode (``.``), so a pickle cut short is visible from its last
byte. torch's legacy format is still loadable but obsolete (CKD210).
"""

from __future__ import annotations

import math
import re
import struct

from ckptdoctor.model import FileIssue, FileReport, Problem, Tensor
from ckptdoctor.readers import deep_scan
from ckptdoctor.readers._registry import Library, Naming, Rank, ReaderSpec, Sniff
from ckptdoctor.readers.dtypes import NONFINITE_SCANNED, TORCH_SIZES
from ckptdoctor.readers.pickle_safety import judge, weights_only_refusal
from ckptdoctor.readers.sample import HEAD, TAIL, BytesSample, Sample, held
from ckptdoctor.readers.sniff import Format
from ckptdoctor.readers.unpickler import (
    JOBLIB_WRAPPERS,
    TORCH_OPCODES,
    Storage,
    Walk,
    masks,
    outside_weights,
    tensors,
    top_keys,
    walk,
)

STOP = b"."
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
TORCH_SAVE_SUFFIXES = (
    (".pt", Naming.CHECKPOINT_ONLY),
    (".pth", Naming.CHECKPOINT_ONLY),
    (".pth.tar", Naming.CHECKPOINT_ONLY),
    (".ckpt", Naming.CHECKPOINT_ONLY),
    (".bin", Naming.CHECKPOINT),  # torch's pytorch_model.bin, among others' (burn's bincode records)
    (".tar", Naming.CHECKPOINT),
    (".pkl", Naming.CONTENT),  # accelerate torch.save()s its random_states_N.pkl
    (".pickle", Naming.CONTENT),
)
"""Names ``torch.save`` output goes by: any of its formats (zip, legacy, tar, a bare pickle) may be behind each."""


def probe_pickle(sample: Sample) -> FileReport:
    if sample.size <= HEAD + TAIL:
        # the whole file is in hand already: walk it (never run), and judge it as verify does
        data = sample.head(sample.size)
        walked = walk(data)
        issues = [i for i in judge(walked, "the pickle") if i.problem is not Problem.NON_WEIGHTS]
        if not walked.error and not walked.unproven and walked.end != len(data):
            issues.append(FileIssue(Problem.MALFORMED, f"{len(data) - walked.end} bytes after the pickle's STOP opcode"))
        return FileReport(Format.PICKLE.value, tuple(issues))
    if sample.tail(1) != STOP:
        issue = FileIssue(Problem.TRUNCATED, "the pickle does not end with its STOP opcode: cut short")
        return FileReport(Format.PICKLE.value, (issue,))
    return FileReport(Format.PICKLE.value)


def probe_legacy(sample: Sample) -> FileReport:
    """The legacy format's notice, and its length against where its storages end, where the
    pickles that say so lie in what ``inspect`` holds of the file (see ``_legacy_end``)."""
    end = _legacy_end(sample)
    cut = end if isinstance(end, FileIssue) else _length_issue(sample.size, end) if end is not None else None
    return FileReport(Format.TORCH_LEGACY.value, (LEGACY_NOTICE, cut) if cut else (LEGACY_NOTICE,))


LEGACY_NOTICE = FileIssue(
    Problem.LEGACY,
    "saved in torch's legacy non-zip format (_use_new_zipfile_serialization=False); it cannot be memory-mapped",
)


def _legacy_end(sample: Sample) -> int | FileIssue | None:
    """Where a legacy file must end: after its five pickles, each storage the key list names as a
    u64 element count and its bytes (sized by the object pickle); walked within what every sample
    holds (its head, or all of a small file). What ends them there is cut short; None where they
    run past it or are not as torch writes them (``verify`` reads them whole and says why)."""
    reach = held(sample)
    data = sample.range(0, reach)
    if reach < sample.size and not _key_list_held(data):
        return None  # the object pickle runs past what is held: walking it would tell nothing
    held_bytes = BytesSample(data)
    position = 0
    walks: list[Walk] = []
    for what, expected in _LEGACY_PICKLES:
        walked = walk_sample(held_bytes, position, TORCH_OPCODES)
        if walked.truncated and reach == sample.size:
            return FileIssue(Problem.TRUNCATED, f"{sample.size} bytes: it ends inside {what} pickle, so the save was cut short")
        if walked.error or walked.unproven or (expected is not None and walked.root != expected):
            return None
        walks.append(walked)
        position = walked.end
    keys = walks[4].root
    storages = {storage.key: storage for storage in walks[3].storages}
    if not isinstance(keys, list):
        return None
    for key in keys:
        sized = _sized(key, storages)
        if sized is None:
            return None
        position += _ELEMENT.size + sized[0].numel * sized[1]
    return position


def _key_list_held(data: bytes) -> bool:
    """Whether the storage key list may begin in ``data``: pickled at protocol 2 or above, like the
    four pickles before it, it starts with PROTO (framed at 4 and 5) and an empty list, which of
    the others only an object that is a list does. A cheap test before a walk of the pickles, which
    a long object pickle would spend on nothing."""
    if not data.startswith(b"\x80") or len(data) < 2:
        return True  # protocol 0 or 1: no such mark to look for
    mark = re.compile(re.escape(data[:2]) + rb"(?:\x95.{8})?\]", re.DOTALL)
    return mark.search(data, 2) is not None


def _sized(key: object, storages: dict[str, Storage]) -> tuple[Storage, int] | None:
    """The storage a legacy file's key list names, and the size of its elements; None where torch
    could not size it."""
    storage = storages.get(str(key))
    element = TORCH_SIZES.get(storage.dtype) if storage is not None and storage.dtype else None
    return None if storage is None or element is None else (storage, element)


def _length_issue(size: int, end: int) -> FileIssue | None:
    """A legacy file of ``size`` bytes whose last storage ends at ``end``."""
    if size < end:
        return FileIssue(Problem.TRUNCATED, f"{size} bytes, but its storages need {end}: the save was cut short")
    if size > end:
        return FileIssue(Problem.TRAILING_BYTES, f"{size - end} bytes after its last storage")
    return None


def probe_preview(sample: Sample) -> FileReport:
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
_ELEMENT = struct.Struct("<Q")


def read_whole_pickle(sample: Sample, deep: int = 0) -> FileReport:
    """A bare pickle (``random_states_0.pkl``, ``training_args.bin``): every pickle in it, walked.
    A joblib file (its array wrappers are followed by raw array bytes) is walked as joblib reads it,
    and what ``pickle.load`` would run of it is added."""
    # pickle.load's reading; of a joblib file, up to its first array of objects (see walk)
    first = walk_sample(sample, 0, None, objects_end=True)
    if first.root == MAGIC_NUMBER and not first.error and not first.unproven:
        return read_whole_legacy(sample, deep)  # torch's legacy format, its magic number framed or spelled otherwise
    if any(g in JOBLIB_WRAPPERS for g in first.globals):
        as_joblib = walk_sample(sample, 0, None, arrays=True)
        plain = [i for i in judge(first, "the pickle read by pickle.load") if i.problem is Problem.UNSAFE_PICKLE]
        return FileReport(
            Format.PICKLE.value, (*judge(as_joblib, "the pickle read by joblib.load"), *plain), (), (), top_keys(as_joblib.root)
        )
    issues: list[FileIssue] = []
    position = 0
    walked = first
    for number in range(MAX_PICKLES):
        if number:
            walked = walk_sample(sample, position, None)
            if walked.error and not walked.globals:
                issues.append(FileIssue(Problem.MALFORMED, f"{sample.size - position} bytes after the pickle's STOP opcode"))
                break
        issues += judge(walked, "the pickle" if number == 0 else f"pickle {number + 1} (from byte {position})")
        if walked.error or walked.unproven:
            break
        position = walked.end
        if position >= sample.size:
            break
    else:
        issues.append(FileIssue(Problem.UNSAFE_PICKLE, f"more than {MAX_PICKLES} pickles back to back: the rest cannot be proven safe"))
    return FileReport(Format.PICKLE.value, tuple(issues), (), (), top_keys(first.root))


MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
_LEGACY_PICKLES = (
    ("the magic number", MAGIC_NUMBER),
    ("the protocol", PROTOCOL_VERSION),
    ("sys_info", None),
    ("the object", None),
    ("the storage list", None),
)


def read_whole_legacy(sample: Sample, deep: int = 0) -> FileReport:
    """torch's pre-zip format: five pickles (magic, protocol, sys_info, the object, storage keys)
    and then each storage as a u64 element count and its raw bytes (integrity reference §5.1).
    torch compares the first two with its numbers and stops where they differ."""
    issues = [LEGACY_NOTICE]
    position = 0
    walks = []
    for what, expected in _LEGACY_PICKLES:
        walked = walk_sample(sample, position, TORCH_OPCODES)
        issues += judge(walked, f"{what} pickle") + weights_only_refusal(walked, f"{what} pickle")
        if walked.error or walked.unproven:
            return FileReport(Format.TORCH_LEGACY.value, tuple(issues))
        if expected is not None and walked.root != expected:
            if isinstance(walked.root, int):  # torch: Invalid magic number / protocol version
                issues.append(FileIssue(Problem.MALFORMED, f"{what} pickle holds {walked.root}, not torch's {expected}: torch.load stops"))
            else:
                issues.append(
                    FileIssue(
                        Problem.UNSAFE_PICKLE,
                        f"{what} pickle is not a literal number: whether torch.load reads on is only known when it runs",
                    )
                )
            return FileReport(Format.TORCH_LEGACY.value, tuple(issues))
        walks.append(walked)
        position = walked.end
    walks = walks[2:]
    found = list(tensors(walks[1].root))
    storages = {storage.key: storage for storage in walks[1].storages}
    keys = walks[2].root if isinstance(walks[2].root, list) else []
    listed = tuple(
        Tensor(
            name, ref.dtype, ref.size, math.prod(ref.size) * TORCH_SIZES.get(ref.dtype, 1), ref.storage.location if ref.storage else "meta"
        )
        for name, ref in found
    )
    regions: list[deep_scan.Region] = []
    tensor_bytes = 0
    not_weights = outside_weights(found)
    masked = masks(found)
    for key in keys:
        sized = _sized(key, storages)
        header = sample.range(position, _ELEMENT.size)
        if sized is None or len(header) < _ELEMENT.size:
            why = "ends before" if len(header) < _ELEMENT.size else "cannot size"
            problem = Problem.TRUNCATED if len(header) < _ELEMENT.size else Problem.MALFORMED
            issues.append(FileIssue(problem, f"the file {why} storage {key}"))
            return FileReport(Format.TORCH_LEGACY.value, tuple(issues), (), listed, top_keys(walks[1].root))
        storage, element = sized
        (count,) = _ELEMENT.unpack(header)
        if count != storage.numel:
            issues.append(
                FileIssue(
                    Problem.MALFORMED,
                    f"storage {key} records {count} elements where its pickle says {storage.numel} (torch: storage has wrong byte size)",
                )
            )
            return FileReport(Format.TORCH_LEGACY.value, tuple(issues), (), listed, top_keys(walks[1].root))
        nbytes = count * element
        if storage.dtype in NONFINITE_SCANNED and storage.key not in not_weights:
            regions.append(deep_scan.Region(position + _ELEMENT.size, nbytes, storage.dtype, infinite=storage.key in masked))
        position += _ELEMENT.size + nbytes
        tensor_bytes += nbytes
    cut = _length_issue(sample.size, position)
    if cut:
        issues.append(cut)
    elif deep and regions:
        issues += deep_scan.nonfinite_issues(sample, regions, deep)
    return FileReport(Format.TORCH_LEGACY.value, tuple(issues), (), listed, top_keys(walks[1].root), tensor_bytes)


def walk_sample(sample: Sample, start: int, opcodes: frozenset[str] | None, arrays: bool = False, objects_end: bool = False) -> Walk:
    """Walk the pickle at ``start``, reading more of the file only while the pickle needs it."""
    length = _FIRST_READ
    while True:
        available = min(length, sample.size - start, MAX_PICKLE)
        walked = walk(sample.range(start, available), 0, opcodes, arrays=arrays, objects_end=objects_end)
        if not walked.truncated or available >= sample.size - start:
            walked.end += start
            return walked
        if available >= MAX_PICKLE:
            walked.truncated, walked.error = False, None
            walked.unproven = f"it is longer than the {MAX_PICKLE} bytes ckptdoctor reads of one pickle"
            walked.end += start
            return walked
        length *= 8


def _protocol(head: bytes, sample: Sample) -> bool:
    """A protocol 2+ pickle's PROTO opcode."""
    return len(head) >= 2 and head[0] == 0x80 and head[1] <= 5


def _text(head: bytes, sample: Sample) -> bool:
    """Pickle protocols 0 and 1 carry no magic: a short text that ends in STOP is one (tried
    after the formats that may look like one)."""
    return head[:1] in (b"(", b"c", b"]", b"}") and head.rstrip().endswith(STOP)


SPECS = (
    ReaderSpec(
        Format.TORCH_PREVIEW,
        (Sniff(Rank.SIGNATURE, lambda head, sample: head.startswith(b"PYTORCH1")),),
        TORCH_SAVE_SUFFIXES,
        probe_preview,
        read_any_name=True,
    ),
    ReaderSpec(
        Format.TORCH_LEGACY,
        (Sniff(Rank.SIGNATURE, lambda head, sample: head.startswith(TORCH_LEGACY_MAGICS)),),
        TORCH_SAVE_SUFFIXES,
        probe_legacy,
        read_whole_legacy,
        read_any_name=True,
        loaded_by=Library.TORCH,
        end_checked=False,  # its end is known only where its pickles fit in the head (``_legacy_end``)
    ),
    ReaderSpec(
        Format.PICKLE,
        (Sniff(Rank.PAYLOAD + 20, _protocol), Sniff(Rank.PAYLOAD + 90, _text)),
        TORCH_SAVE_SUFFIXES,
        probe_pickle,
        read_whole_pickle,
        read_any_name=True,
    ),
)
