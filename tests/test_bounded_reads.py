"""Bounded work on archives (issue 31 item 4): a member is inflated no further than the question
needs (an ``.npy`` header; an array of objects up to its pickle's end), central directory entries
that share one stream are read once and reported as the zip trick they are, and every budget
(opcodes and decompressed bytes, per file, per run, per command) that runs out is an error-level
finding naming it: the file could not be fully checked, never clean.

The benign files are numpy's own (``numpy.savez``, ``numpy.savez_compressed``), and ``numpy.load``
reads each back in the test. The bombs' timings and peak memory are in ``test_fail_closed.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sample_set import _npy, _raw_zip, _RawMember

from ckptdoctor.model import Problem
from ckptdoctor.pipelines.verify import verify
from ckptdoctor.readers import torchzip
from ckptdoctor.readers.files import verify_sample
from ckptdoctor.readers.sample import BytesSample, FileSample
from ckptdoctor.readers.unpickler import Budget


def _verified(path: Path, deep: int = 0) -> list[tuple[Problem, str]]:
    with FileSample.open(str(path)) as sample:
        return [(issue.problem, issue.detail) for issue in verify_sample(sample, path.name, deep).issues]


@pytest.mark.slow
def test_an_npz_past_256_mib_is_read_by_its_headers(tmp_path: Path) -> None:
    """``numpy.savez`` stores a 280 MB array as one member: main called it "too large to analyse"
    (CKD207) though ``numpy.load`` reads it; its header answers every question ``verify`` asks."""
    path = tmp_path / "big.npz"
    np.savez(path, w=np.ones(70_000_000, dtype=np.float32))
    with np.load(path) as loaded:
        assert loaded["w"].shape == (70_000_000,)
    assert _verified(path) == []
    assert _verified(path, deep=1) == []


def test_entries_sharing_one_stream_are_read_once_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    array = np.arange(4096, dtype=np.float64)
    npy = _npy("'<f8'", "(4096,)", array.tobytes())
    members = [_RawMember.zeros("arr_0.npy", npy, 0), _RawMember.stored("arr_1.npy", npy)]
    data = _raw_zip(members, [(0, None), (0, "arr_2.npy"), (0, None), (1, None)])
    read: Counter[int] = Counter()
    chunks = torchzip.member_chunks

    def counted(sample: BytesSample, member: torchzip.Member, budget: Budget | None = None) -> Iterator[bytes]:
        read[member.header] += 1
        return chunks(sample, member, budget)

    monkeypatch.setattr(torchzip, "member_chunks", counted)
    issues = verify_sample(BytesSample(data), "arrays.npz").issues
    assert read and set(read.values()) == {1}, read
    shared = [i.detail for i in issues if i.problem is Problem.ZIP_ANOMALY and "point at bytes another entry holds" in i.detail]
    assert len(shared) == 1 and "2 central directory entries (arr_2.npy, arr_0.npy)" in shared[0], issues


def test_a_healthy_compressed_npz_shares_no_stream(tmp_path: Path) -> None:
    path = tmp_path / "arrays.npz"
    np.savez_compressed(path, a=np.zeros(1_000_000), b=np.arange(10), c=np.array(["x", {"k": 1}], dtype=object))
    with np.load(path, allow_pickle=True) as loaded:
        assert loaded["c"][1] == {"k": 1}
    found = _verified(path, deep=1)
    alarms = (Problem.ZIP_ANOMALY, Problem.UNSAFE_PICKLE, Problem.CRC_MISMATCH, Problem.MALFORMED, Problem.TRUNCATED)
    assert not [detail for problem, detail in found if problem in alarms], found


@pytest.mark.slow
def test_a_pickle_inflating_past_the_files_budget_is_not_fully_checked() -> None:
    """A compressed pickle member whose call lies past what a file may inflate: CKD401, naming
    the budget, never clean."""
    head = b"\x80\x02\x8e" + (64 << 20).to_bytes(8, "little")
    member = _RawMember.zeros("archive/extra.pkl", head, 64 << 20, b"0cposix\nsystem\n(S'true'\ntR.")
    data = _raw_zip([member], [(0, None)])
    unsafe = [i.detail for i in verify_sample(BytesSample(data), "extra.zip").issues if i.problem is Problem.UNSAFE_PICKLE]
    assert any("decompresses past the" in detail and "could not be fully checked" in detail for detail in unsafe), unsafe


def _object_npz(path: Path, seed: int) -> None:
    """An ``.npz`` whose array of objects pickles to about a MiB."""
    np.savez_compressed(path, o=np.array([f"{seed}-{i}" * 8 for i in range(20_000)], dtype=object))


def test_a_runs_budget_stops_its_later_files_with_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files each within a file's budget that together spend their run's: the ones read after it
    is spent are errors saying the run's budget ran out; none of them is clean."""
    for number in range(3):
        _object_npz(tmp_path / f"objects_{number}.npz", number)
        with np.load(tmp_path / f"objects_{number}.npz", allow_pickle=True) as loaded:
            assert len(loaded["o"]) == 20_000
    single = _verified(tmp_path / "objects_0.npz")
    assert not [detail for problem, detail in single if problem is Problem.UNSAFE_PICKLE], single
    monkeypatch.setattr(Budget, "for_run", lambda self: Budget(inflated=2 << 20, parent=self, scope="one run"))
    report, _ = verify([str(tmp_path)])
    spent = [f for f in report.findings if "in one run" in f.message]
    assert spent and all(f.severity.value == "error" and f.code == "CKD401" for f in spent), report.findings
    assert "could not be fully checked" in spent[0].message


def test_a_budget_charges_its_parents() -> None:
    command = Budget.for_command()
    run = command.for_run()
    file = run.for_file()
    file.spend(1000)
    file.inflate(4096)
    assert (command.steps, run.steps) == (Budget.for_command().steps - 1000, Budget.for_command().for_run().steps - 1000)
    assert command.inflated == Budget.for_command().inflated - 4096
