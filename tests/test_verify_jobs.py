"""``verify --jobs N`` reads files in forked workers (``parallel.forked``): the same
reports as one process, every file read exactly once, a worker's failure raised in the parent,
a worker that dies never taken for a clean read, and no worker left behind.
"""

from __future__ import annotations

import os
import signal
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import ckptdoctor.pipelines.verify as verify_pipeline
from ckptdoctor.model import Entry, FileReport
from ckptdoctor.pipelines.verify import VerifyOptions, verify
from ckptdoctor.render.json import render

torch = pytest.importorskip("torch")


@pytest.fixture
def pool_for_few_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify_pipeline, "POOL_MIN_FILES", 2)


def _flip_first_tensor_byte(path: Path) -> None:
    with zipfile.ZipFile(path) as archive:
        member = next(info for info in archive.infolist() if "/data/" in info.filename)
    data = bytearray(path.read_bytes())
    start = member.header_offset + 30 + len(member.filename.encode()) + struct.unpack_from("<H", data, member.header_offset + 28)[0]
    data[start] ^= 0x01
    path.write_bytes(bytes(data))


def _run(folder: Path) -> Path:
    """Twelve epochs of weights in four float dtypes, some with NaN or Inf, one with a flipped byte."""
    folder.mkdir()
    dtypes = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
    for epoch in range(1, 13):
        weights = {f"layer{n}": torch.full((300 + 7 * epoch,), 0.5, dtype=dtypes[n]) for n in range(4)}
        if epoch % 3 == 0:
            weights[f"layer{epoch % 4}"][epoch] = float("nan") if epoch % 2 else float("inf")
        torch.save(weights, folder / f"model_{epoch}.pt")
    _flip_first_tensor_byte(folder / "model_5.pt")
    return folder


def _document(folder: Path, jobs: int) -> bytes:
    report, _ = verify([str(folder)], VerifyOptions(deep=True, jobs=jobs))
    return b"".join(render(report))


@pytest.mark.slow
@pytest.mark.usefixtures("pool_for_few_files")
def test_the_same_report_from_one_process_and_from_workers(tmp_path: Path) -> None:
    folder = _run(tmp_path / "run")
    one = _document(folder, 1)
    assert b"CKD206" in one and b"CKD304" in one
    assert _document(folder, 2) == one
    assert _document(folder, 3) == one


@pytest.mark.usefixtures("pool_for_few_files")
def test_every_file_is_read_once_and_its_report_comes_back(tmp_path: Path) -> None:
    folder = tmp_path / "files"
    folder.mkdir()
    for n in range(40):
        (folder / f"f{n}.pkl").write_bytes(b"\x80\x02}q\x00." + bytes(n))
    entries = [Entry(p.name, str(p), str(p), p.stat().st_size) for p in sorted(folder.iterdir())]
    reports = verify_pipeline._read_all(entries, deep=False, jobs=3, tally=None)
    assert sorted(reports) == sorted(e.os_path for e in entries)
    assert reports == verify_pipeline._read_all(entries, deep=False, jobs=1, tally=None)


class Boom(Exception):
    pass


@pytest.mark.usefixtures("pool_for_few_files")
def test_a_workers_exception_is_raised_in_the_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _run(tmp_path / "run")

    def fails_on_seven(entry: Entry, deep: int = 0) -> FileReport:
        if entry.name == "model_7.pt":
            raise Boom(entry.name)
        return FileReport("pickle")

    monkeypatch.setattr(verify_pipeline, "verify_file", fails_on_seven)
    with pytest.raises(Boom, match=r"model_7\.pt"):
        verify([str(folder)], VerifyOptions(deep=True, jobs=2))


@pytest.mark.usefixtures("pool_for_few_files")
def test_a_worker_that_dies_is_never_a_clean_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _run(tmp_path / "run")

    def killed_on_seven(entry: Entry, deep: int = 0) -> FileReport:
        if entry.name == "model_7.pt":
            os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer, say
        return FileReport("pickle")

    monkeypatch.setattr(verify_pipeline, "verify_file", killed_on_seven)
    with pytest.raises(RuntimeError, match="worker process died"):
        verify([str(folder)], VerifyOptions(deep=True, jobs=2))


def _children() -> set[int]:
    """This process's children, running or not yet reaped (zombies are listed too)."""
    return {child.pid for child in psutil.Process().children()}


@pytest.fixture(autouse=True)
def _no_children_left() -> Iterator[None]:
    """No worker outlives the test, dead or alive: the children after it are those before it
    (the session's long-lived workers, as the TensorFlow tests keep one, are not the pool's)."""
    before = _children()
    yield
    assert _children() <= before


@pytest.mark.usefixtures("pool_for_few_files")
def test_a_fork_that_fails_stops_the_workers_already_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _run(tmp_path / "run")
    real_fork = os.fork
    forks: list[int] = []

    def fork_once() -> int:
        if forks:
            raise BlockingIOError("Resource temporarily unavailable")
        forks.append(1)
        return real_fork()

    monkeypatch.setattr(os, "fork", fork_once)
    with pytest.raises(BlockingIOError):
        verify([str(folder)], VerifyOptions(deep=True, jobs=3))
