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


@pytest.mark.slow
def test_a_held_file_is_found_among_hundreds_of_processes_however_slow_the_table(tmp_path: Path, cli, crowd: None, monkeypatch) -> None:
    import time

    folder = burn_run(tmp_path)
    real_open_by, real_clock = processes.open_by, time.monotonic

    def slow_table(*args):  # every look at the clock while the table is read: 5 s later
        ticks = iter(range(10**9))
        monkeypatch.setattr(time, "monotonic", lambda: real_clock() + 5 * next(ticks))
        try:
            return real_open_by(*args)
        finally:
            monkeypatch.setattr(time, "monotonic", real_clock)

    monkeypatch.setattr(processes, "open_by", slow_table)
    with _holder("open", folder / "optim-4.bpk"):
        result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code == 0, result.stderr
    assert (folder / "optim-4.bpk").exists()
    assert "process table was read for" not in result.stderr


def test_a_process_that_cannot_be_read_part_way_keeps_everything_and_says_so(tmp_path: Path, cli, monkeypatch) -> None:
    """Said without -q; with -q, which prints nothing when the exit code is 0 (issue 35), not."""
    folder = burn_run(tmp_path)
    real_listdir = os.listdir
    with _holder("open", folder / "optim-4.bpk") as holder:

        def failing(path: object = ".") -> list[str]:
            if str(path) == f"/proc/{holder.pid}/fd":
                raise OSError(errno.EIO, "Input/output error", str(path))
            return real_listdir(path)  # type: ignore[arg-type]

        monkeypatch.setattr(processes.os, "listdir", failing)
        result = cli("prune", "--yes", "--keep-last", "2", folder)
        quiet = cli("prune", "-q", "--yes", "--keep-last", "2", folder)
        monkeypatch.undo()
    assert result.exit_code == 0, result.stderr
    assert "every file is taken as open" in result.stderr
    assert (quiet.exit_code, quiet.stderr) == (0, "")
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


# --- the process table read per descriptor (issue 32, item 5) -------------------------------------


def _fake_table(root: Path, holders: dict[int, dict[int, Path]], users: dict[int, int] | None = None) -> Path:
    """A process table in a folder, as ``/proc`` lays it out: each process's descriptors are links
    to what it holds (``stat`` of one reaches the file, as the kernel's own links do); each runs
    as ``users`` says (this user where it says nothing)."""
    table = root / "proc"
    (table / "self" / "fd").mkdir(parents=True)
    for pid, held in holders.items():
        (table / str(pid) / "fd").mkdir(parents=True)
        (table / str(pid) / "maps").write_text("")
        (table / str(pid) / "comm").write_text("trainer\n")
        uid = (users or {}).get(pid, os.geteuid())
        (table / str(pid) / "status").write_text(f"Name:\ttrainer\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        for fd, target in held.items():
            (table / str(pid) / "fd" / str(fd)).symlink_to(target)
    return table


def _unreadable_links(monkeypatch: pytest.MonkeyPatch, *links: Path) -> None:
    """``readlink`` of ``links`` fails as it does for a path longer than PATH_MAX."""
    real_readlink, refused = os.readlink, {str(link) for link in links}

    def readlink(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path) in refused:
            raise OSError(errno.ENAMETOOLONG, "File name too long", str(path))
        return real_readlink(path, *args, **kwargs)

    monkeypatch.setattr(processes.os, "readlink", readlink)


def _refused_listings(monkeypatch: pytest.MonkeyPatch, code: int, *folders: Path) -> None:
    """Listing ``folders`` fails with ``code``: ``EACCES`` for another user's process, ``EIO``."""
    real_listdir, refused = os.listdir, {str(folder) for folder in folders}

    def listdir(path: object = ".") -> list[str]:
        if str(path) in refused:
            raise OSError(code, os.strerror(code), str(path))
        return real_listdir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(processes.os, "listdir", listdir)


def test_an_unreadable_descriptor_affects_that_descriptor_only_and_notes_come_once(tmp_path: Path, cli, monkeypatch) -> None:
    """Two runs, one prune: a process whose other descriptor's path is too long to read still holds
    its run file; a file held only under a link that cannot be read is matched by its device and
    inode; every holder is named by its own pid; the note on a hidden process comes once, not once
    per run."""
    first, second = burn_run(tmp_path / "a"), burn_run(tmp_path / "b")
    unrelated = tmp_path / "elsewhere.bin"
    unrelated.write_bytes(b"x")
    table = _fake_table(
        tmp_path,
        {4100: {3: first / "model-3.bpk", 4: unrelated}, 4200: {5: second / "optim-2.bpk"}, 4300: {}, 4400: {7: unrelated}},
        users={4300: os.geteuid() + 1000},  # another user's: its files cannot be known, and it holds none of ours
    )
    _unreadable_links(monkeypatch, table / "4100" / "fd" / "4", table / "4200" / "fd" / "5", table / "4400" / "fd" / "7")
    _refused_listings(monkeypatch, errno.EACCES, table / "4300" / "fd")
    monkeypatch.setattr(processes, "PROC", str(table))
    result = cli("prune", "--yes", "--keep-last", "1", tmp_path)
    monkeypatch.undo()
    assert result.exit_code == 0, result.stderr
    assert epochs_left(first) == [3, 7] and epochs_left(second) == [2, 7]
    said = result.stdout + result.stderr
    assert "open in process 4100" in said and "open in process 4200" in said and "process 0" not in said
    assert said.count("cannot be read by this user") == 1 and "4300 (trainer, " in said
    assert "4400" not in said and "taken as open" not in said, "a process holding nothing of the runs is no note"


def test_a_descriptor_that_cannot_be_identified_holds_everything_under_its_own_pid(tmp_path: Path, monkeypatch) -> None:
    """A process whose descriptors cannot be read at all (EIO) may hold anything: every file is
    taken as open by that process, named, never by "process 0"."""
    target = tmp_path / "f"
    target.write_text("x")
    table = _fake_table(tmp_path, {4100: {}})
    monkeypatch.setattr(processes, "PROC", str(table))
    _refused_listings(monkeypatch, errno.EIO, table / "4100" / "fd")
    found, note = processes.open_by([str(target)])
    monkeypatch.undo()
    assert found == {str(target): 4100}
    assert note is not None and "process 4100 (trainer, " in note and "every file is taken as open by it" in note


def test_an_unreadable_table_names_no_pid(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "f"
    target.write_text("x")
    table = _fake_table(tmp_path, {})
    monkeypatch.setattr(processes, "PROC", str(table))
    _refused_listings(monkeypatch, errno.EIO, table)
    found, note = processes.open_by([str(target)])
    monkeypatch.undo()
    assert found == {str(target): processes.UNREAD_TABLE}
    assert note is not None and "the process table cannot be read" in note


_DEEP = "d" * 200
_DEPTH = 25
"""Folders of 200 characters, 25 deep: a path of over 5,000 characters, past PATH_MAX (4,096)."""

_HOLD_DEEP = (
    "import os, sys, time\n"
    "os.chdir(sys.argv[1])\n"
    f"for _ in range({_DEPTH}):\n"
    f"    os.chdir({_DEEP!r})\n"
    "deep = open('held-deep.bin', 'wb')\n"
    "run_file = open(sys.argv[2], 'rb')\n"
    "print('held', flush=True)\n"
    "time.sleep(120)\n"
)


def test_a_process_holding_a_path_longer_than_path_max_stops_no_prune(tmp_path: Path, cli) -> None:
    """A real process holds a file under a path longer than PATH_MAX (its link in /proc cannot be
    read: ENAMETOOLONG) and one of the run's files: the prune still deletes what no one holds and
    keeps what that process holds, naming its pid."""
    folder = burn_run(tmp_path)
    deep = tmp_path / "deep"
    deep.mkdir()
    parent = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(_DEPTH):  # each folder made relative to the one above: its path is too long for open()
            os.mkdir(_DEEP, dir_fd=parent)
            inner = os.open(_DEEP, os.O_RDONLY | os.O_DIRECTORY, dir_fd=parent)
            os.close(parent)
            parent = inner
    finally:
        os.close(parent)
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLD_DEEP, str(deep), str(folder / "optim-3.bpk")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "held"
        links = [os.path.join(f"/proc/{process.pid}/fd", fd) for fd in os.listdir(f"/proc/{process.pid}/fd")]
        too_long = 0
        for link in links:
            try:
                os.readlink(link)
            except OSError as error:
                too_long += error.errno == errno.ENAMETOOLONG
        assert too_long == 1, "the held file's path is past what the process table can say"
        result = cli("prune", "--yes", "--keep-last", "1", folder)
    finally:
        process.kill()
        process.wait()
    assert result.exit_code == 0, result.stderr
    assert epochs_left(folder) == [3, 7], "held: epoch 3; the rest deleted"
    said = result.stdout + result.stderr
    assert f"open in process {process.pid}" in said and "taken as open" not in said and "process 0" not in said


def test_a_process_of_this_user_that_hides_its_descriptors_is_named_first(tmp_path: Path, cli, monkeypatch) -> None:
    """The attack on issue 32: a process of the same user that made itself undumpable
    (`prctl(PR_SET_DUMPABLE, 0)`, as ssh-agent does: its /proc folder becomes root's) held a
    checkpoint open, and the note named it after 75 root processes. Only root can tell what it
    holds; the note names it first and says what to do."""
    run = burn_run(tmp_path / "run")
    table = _fake_table(tmp_path, {4500: {}, 4100: {}, 4200: {}}, users={4100: os.geteuid() + 1000, 4200: os.geteuid() + 1000})
    _refused_listings(monkeypatch, errno.EACCES, table / "4100" / "fd", table / "4200" / "fd", table / "4500" / "fd")
    monkeypatch.setattr(processes, "PROC", str(table))
    result = cli("prune", "--yes", "--keep-last", "1", run)
    monkeypatch.undo()
    said = result.stdout + result.stderr
    assert said.index("4500 (trainer, ") < said.index("4100 (trainer, "), said
    assert "this user's own" in said and "run as root, or stop it" in said
