"""The fast paths of a big scan give the reports the plain paths give.

A scan of a big run judges each distinct small content once and serves the rest from a memo;
these tests hold the memo to what judging each file afresh says, on names whose suffixes change
the verdict (what the name promises, a name-picked reader, a suffix's case)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptdoctor.discover import discover
from ckptdoctor.layouts.registry import NAMED_FILES
from ckptdoctor.readers import files
from ckptdoctor.readers._sample import FileSample
from ckptdoctor.testing import SMALL_MODEL

BURNPACK = SMALL_MODEL.model_record()
NAMES = [
    "model-1.bpk",
    "model-2.bpk",
    "model-3.BPK",
    "model-1.pt",  # burnpack bytes under a name that promises torch: CKD205
    "model-1.safetensors",
    "__0_0.distcp",  # a DCP data file: read as raw bytes whatever they are
    "__0_0.DISTCP",
    "model.safetensors.index.json",
    "latest",  # a name a framework names (DeepSpeed's pointer)
    "trainer_state.json",
    "x.tmp",
    "noext",
]


def _fresh(path: Path) -> object:
    with FileSample.open(str(path)) as sample:
        return files.read_header(sample, path.name, NAMED_FILES)


@pytest.mark.parametrize("content", [BURNPACK, b"", b"\0" * 100, b'{"a": 1}', b"PK\x03\x04" + b"\0" * 40])
def test_memoised_judging_says_what_judging_afresh_says(tmp_path: Path, content: bytes) -> None:
    for name in NAMES:
        (tmp_path / name).write_bytes(content)
    files._BY_CONTENT.clear()
    entries = [e for listing in discover(str(tmp_path)).listings for e in listing.entries]
    for _ in range(2):  # the second pass is served from the memo
        for entry in entries:
            assert files.probe(entry, NAMED_FILES) == _fresh(tmp_path / entry.name), entry.name


def test_the_memo_stays_bounded(tmp_path: Path) -> None:
    files._BY_CONTENT.clear()
    for number in range(files._BY_CONTENT_MAX + 10):
        path = tmp_path / f"model-{number}.bpk"
        path.write_bytes(BURNPACK + number.to_bytes(4, "little"))
    for listing in discover(str(tmp_path)).listings:
        for entry in listing.entries:
            files.probe(entry, NAMED_FILES)
    assert 0 < len(files._BY_CONTENT) <= files._BY_CONTENT_MAX
