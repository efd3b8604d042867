"""7z archives: recognised so that ``verify`` says what it cannot check inside them."""

from __future__ import annotations

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers._registry import Rank, ReaderSpec, Sniff
from ckptdoctor.readers.sample import Sample
from ckptdoctor.readers.sniff import Format

MAGIC = b"7z\xbc\xaf\x27\x1c"


def read_whole(sample: Sample, deep: int = 0) -> FileReport:
    return FileReport(
        Format.SEVEN_ZIP.value,
        (FileIssue(Problem.NOT_A_CHECKPOINT, "a 7z archive: what it holds cannot be checked; extract it and verify the files"),),
    )


SPECS = (
    ReaderSpec(
        Format.SEVEN_ZIP,
        (Sniff(Rank.PAYLOAD + 10, lambda head, sample: head.startswith(MAGIC)),),
        read_whole=read_whole,
        read_any_name=True,
    ),
)
