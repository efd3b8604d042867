"""Files live processes hold are never deleted, however long the process table takes to read, and a
table that cannot be read keeps everything, with a note even under -q (issue 13, item 13)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_prune import burn_run, epochs_left

from ckptdoctor import processes

_HOLD = (
    "import ctypes, mmap, os, sys, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.mmap.restype = ctypes.c_void_p\n"
    "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]\n"
    "for path in sys.argv[2:]:\n"
    "    fd = os.open(path, os.O_RDONLY)\n"
    "    if sys.argv[1] == 'mapped':  # as safetensors does: the mapping alone holds the file\n"
    "        assert libc.mmap(None, os.path.getsize(path), mmap.PROT_READ, mmap.MAP_SHARED, fd, 0) not in (None, 2**64 - 1)\n"
    "        os.close(fd)\n"
    "print('held', flush=True)\n"
    "time.sleep(120)\n"
)


@contextlib.contextmanager
def _holder(how: str, *paths: Path) -> Iterator[subprocess.Popen[str]]:
    """A live process holding ``paths`` open, or (``mapped``) only mapped, while the block runs."""
    process = subprocess.Popen([sys.executable, "-c", _HOLD, how, *map(str, paths)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "held"
        yield process
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def crowd() -> Iterator[None]:
    """Hundreds of live processes, each holding descriptors, before the one that matters."""
    sleepers = [subprocess.Popen(["sleep", "120"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL) for _ in range(300)]
    yield
    for sleeper in sleepers:
        sleeper.kill()
        sleeper.wait()


def test_a_file_only_mapped_by_a_live_process_is_kept(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    with _holder("mapped", folder / "model-2.bpk"):
        result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code == 0, result.stderr
    assert (folder / "model-2.bpk").exists(), "a mapped file is in use"
    assert not (folder / "model-3.bpk").exists()


def test_a_held_file_is_found_among_hundreds_of_processes_however_slow_the_table(tmp_path: Path, cli, crowd: None, monkeypatch) -> None:
    import time

    folder = burn_run(tmp_path)
    real_open_by, real_clock = processes.open_by, time.monotonic

    def slow_table(paths, identities=None):  # every look at the clock while the table is read: 5 s later
        ticks = iter(range(10**9))
        monkeypatch.setattr(time, "monotonic", lambda: real_clock() + 5 * next(ticks))
        try:
            return real_open_by(paths, identities)
        finally:
            monkeypatch.setattr(time, "monotonic", real_clock)

    monkeypatch.setattr(processes, "open_by", slow_table)
    with _holder("open", folder / "optim-4.bpk"):
        result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code == 0, result.stderr
    assert (folder / "optim-4.bpk").exists()
    assert "process table was read for" not in result.stderr


def test_a_process_that_cannot_be_read_part_way_keeps_everything_and_says_so_under_quiet(tmp_path: Path, cli, monkeypatch) -> None:
    folder = burn_run(tmp_path)
    real_listdir = os.listdir
    with _holder("open", folder / "optim-4.bpk") as holder:

        def failing(path: object = ".") -> list[str]:
            if str(path) == f"/proc/{holder.pid}/fd":
                raise OSError(errno.EIO, "Input/output error", str(path))
            return real_listdir(path)  # type: ignore[arg-type]

        monkeypatch.setattr(processes.os, "listdir", failing)
        result = cli("prune", "-q", "--yes", "--keep-last", "2", folder)
        monkeypatch.undo()
    assert result.exit_code == 0, result.stderr
    assert "every file is taken as open" in result.stderr
    assert epochs_left(folder) == list(range(1, 8)), "nothing is deleted that could be open"


def test_processes_of_other_users_are_noted(monkeypatch, tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("x")
    real_listdir = os.listdir
    other = os.getppid()

    def hidden(path: object = ".") -> list[str]:
        if str(path) == f"/proc/{other}/fd":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_listdir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(processes.os, "listdir", hidden)
    found, note = processes.open_by([str(target)])
    assert found == {}
    assert note is not None and "cannot be read by this user" in note and str(other) in note


def test_each_path_is_looked_up_under_its_real_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real name of each path, as the process table shows it, is its real folder joined with
    its name, whatever way the path was written: relative, absolute, doubled or trailing
    separators, through a symlinked folder, the root itself."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    given = ["f", "./f", "real/f", "real//f", "link/f", "real/", "link/sub/", f"{tmp_path}/link/f", "/etc", "//etc", "../x", ""]
    wanted, folders = processes._resolved(given)
    expected = {os.path.join(os.path.realpath(os.path.dirname(p) or "."), os.path.basename(p)): p for p in given}
    assert wanted == expected
    assert folders == {os.path.realpath(os.path.dirname(p) or ".") for p in given}


@pytest.mark.parametrize("how", ["open", "mapped"])
def test_a_file_held_under_another_name_is_kept(tmp_path: Path, cli, how: str) -> None:
    """A hard link elsewhere names the same file: the trainer that holds it through that name
    holds the run's file, which stays, as do the run's others the plan keeps."""
    folder = burn_run(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.link(folder / "model-2.bpk", elsewhere / "weights")
    with _holder(how, elsewhere / "weights"):
        result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code == 0, result.stderr
    assert (folder / "model-2.bpk").exists(), "held through its other name"
    assert not (folder / "model-3.bpk").exists()


def test_a_file_held_through_a_bind_mount_is_kept(tmp_path: Path, cli) -> None:
    """A trainer in a container sees the run under its own mount point (``/mnt/data``) while
    cron on the host prunes ``/data``: the same files, under paths that share nothing."""
    folder = burn_run(tmp_path)
    mount = tmp_path / "mnt"
    mount.mkdir()
    if subprocess.run(["mount", "--bind", str(tmp_path / "run"), str(mount)], capture_output=True).returncode != 0:
        pytest.skip("bind mounts need privileges this test lacks")
    try:
        with _holder("open", mount / "checkpoint" / "model-2.bpk"), _holder("mapped", mount / "checkpoint" / "optim-3.bpk"):
            result = cli("prune", "--yes", "--keep-last", "1", folder)
        assert result.exit_code == 0, result.stderr
        assert (folder / "model-2.bpk").exists(), "open through the bind mount"
        assert (folder / "optim-3.bpk").exists(), "mapped through the bind mount"
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    assert not (folder / "model-4.bpk").exists()
