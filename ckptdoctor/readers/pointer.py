"""Pointer files: a few bytes of text naming the checkpoint to load (DeepSpeed's ``latest``).

They are tiny and written after the checkpoint they name, so they are read whole.
"""

from __future__ import annotations

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers._sample import Sample
from ckptdoctor.readers.sniff import Format

NAMES = frozenset({"latest", "latest_universal", "latest_checkpointed_iteration.txt"})
LIMIT = 4096
TEXT = Format.TEXT.value


def is_pointer(name: str) -> bool:
    return name in NAMES


def read(sample: Sample) -> FileReport:
    if sample.size > LIMIT:
        return FileReport(TEXT, (FileIssue(Problem.MALFORMED, f"{sample.size} bytes: too long for a pointer file"),))
    try:
        text = sample.head(sample.size).decode("ascii").strip()
    except UnicodeDecodeError:
        return FileReport(TEXT, (FileIssue(Problem.MALFORMED, "not text: a pointer file names a checkpoint"),))
    if not text or "\n" in text:
        return FileReport(TEXT, (FileIssue(Problem.MALFORMED, f"does not name one checkpoint: {text[:60]!r}"),))
    return FileReport(TEXT, (), (("points_to", text),))
