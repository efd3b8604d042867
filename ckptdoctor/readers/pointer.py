"""Pointer files: a few bytes of text naming the checkpoint to load (DeepSpeed's ``latest``).

They are tiny and written after the checkpoint they name, so they are read whole. Which names
are pointer files is the layouts' knowledge (``Layout.named_files``), passed in to ``probe``.
"""

from __future__ import annotations

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers.sample import Sample
from ckptdoctor.readers.sniff import Format

LIMIT = 4096
TEXT = Format.TEXT.value
POINTS_TO = "points_to"
"""The fact that holds what the pointer names, as written."""


def read(sample: Sample) -> FileReport:
    if sample.size > LIMIT:
        return FileReport(TEXT, (FileIssue(Problem.MALFORMED, f"{sample.size} bytes: too long for a pointer file"),))
    try:
        text = sample.head(sample.size).decode("ascii").strip()
    except UnicodeDecodeError:
        return FileReport(TEXT, (FileIssue(Problem.MALFORMED, "not text: a pointer file names a checkpoint"),))
    if not text or "\n" in text:
        return FileReport(TEXT, (FileIssue(Problem.MALFORMED, f"does not name one checkpoint: {text[:60]!r}"),))
    return FileReport(TEXT, (), ((POINTS_TO, text),))
