"""Bare pickles and torch's pre-zip formats, judged without unpickling anything.

A pickle ends with the STOP opcode (``.``), so a pickle cut short is visible from its last
byte. torch's legacy (non-zip) and tar formats are only recognised here; they are still
loadable by some torch versions but are obsolete (CKD210).
"""

from __future__ import annotations

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers._sample import HEAD, TAIL, Sample
from ckptdoctor.readers.sniff import Format

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
    import pickletools  # only small bare pickles are walked: kept off every other start-up

    position: int | None = 0
    try:
        for opcode, _, position in pickletools.genops(data):
            if opcode.name == "STOP" and position is not None:
                end = position + 1
                return None if end == len(data) else f"{len(data) - end} bytes after the pickle's STOP opcode"
    except (ValueError, KeyError, IndexError, EOFError, UnicodeDecodeError) as error:
        return f"the pickle cannot be parsed near byte {position} ({error})"
    return "the pickle has no STOP opcode"


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
