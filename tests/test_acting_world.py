"""``prune`` and ``repair`` in the world a cluster has around a run (issue 32): other users and
read-only mounts (dry runs write nothing and take no lock), a mount inside ckptdoctor's own
folder (never reached into), the run's parent mounted inside the run (one run, one lock), and a
run whose checkpoint folder is its own filesystem (no cross-device move blocks a prune). Each is
made for real: a real other user, real tmpfs and bind mounts, always unmounted in teardown."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from other_user import as_nobody, shared_folder
from test_prune import _kill_when_deleting, age, burn_run, epochs_left

pytestmark = pytest.mark.usefixtures("fake_machine")  # the process table and clock are the test's (conftest)


def _tree(folder: Path) -> dict[str, tuple[str, int]]:
    """Every entry below ``folder`` (ckptdoctor's own folder included): its content's digest (or
    ``dir``) and its modification time, to show nothing at all was written."""
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        digest = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        found[str(path.relative_to(folder))] = (digest, info.st_mtime_ns)
    return found


@contextlib.contextmanager
def mounted(where: Path, *how: str) -> Iterator[Path]:
    """``mount *how where`` for the block, unmounted after it whatever happens; skips where
    mounting needs privileges this test lacks."""
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    done = subprocess.run(["mount", *how, str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.fixture
def shared() -> Iterator[Path]:
    with shared_folder() as folder:
        yield folder


def _as_nobody(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """``ckptdoctor *args`` run as ``nobody``, who sees the machine's process table as it is."""
    return as_nobody(*args, real_table=True)


def _holding_the_lock(folder: Path) -> subprocess.Popen[str]:
    """Another ckptdoctor's lock on ``folder``'s own folder: flocked, and its note written."""
    code = (
        "import fcntl, json, os, sys, time\n"
        "own = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY); fcntl.flock(own, fcntl.LOCK_EX)\n"
        "h = os.open(os.path.join(sys.argv[1], 'lock'), os.O_RDWR | os.O_CREAT, 0o644); fcntl.flock(h, fcntl.LOCK_EX)\n"
        "os.ftruncate(h, 0); os.write(h, json.dumps({'pid': os.getpid(), 'host': 'node7', 'user': 'ana', 'started': time.time()}).encode())\n"
        "print('locked', flush=True); time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder / ".ckptdoctor")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


# --- item 8: dry runs write nothing and take no lock ------------------------------------------------


@pytest.mark.slow
def test_a_dry_run_by_another_user_reads_a_run_whose_lock_exists(shared: Path, cli) -> None:
    """A colleague (or a read-only CI account) previews a prune and a repair of a run that
    ckptdoctor has acted on before, so that its lock exists, root's and not theirs: both show
    their plans, write nothing, and name who holds the lock while another ckptdoctor holds it."""
    folder = burn_run(shared)
    assert cli("prune", "--yes", "--keep-last", "5", folder).exit_code == 0
    assert (folder / ".ckptdoctor" / "lock").is_file()
    before = _tree(folder)
    for command in (["prune", "--keep-last", "2"], ["repair"]):
        result = _as_nobody(*command, "--dry-run", folder)
        assert result.returncode == 0, result.stderr
        assert "Permission denied" not in result.stderr and "lock" not in result.stderr
        assert _tree(folder) == before
    assert "About to delete 3 checkpoints" in _as_nobody("prune", "--keep-last", "2", "--dry-run", folder).stdout
    holder = _holding_the_lock(folder)
    try:
        result = _as_nobody("prune", "--keep-last", "2", "--dry-run", folder)
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 0, result.stderr
    assert f"is locked by another ckptdoctor (pid {holder.pid} on node7 by ana" in result.stderr
    assert "About to delete 3 checkpoints" in result.stdout
    assert epochs_left(folder) == [3, 4, 5, 6, 7]


@pytest.mark.slow
def test_a_dry_run_on_a_read_only_mount_writes_nothing_and_takes_no_lock(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    assert cli("prune", "--yes", "--keep-last", "5", folder).exit_code == 0
    view = tmp_path / "view"
    view.mkdir()
    with mounted(view, "--bind", str(tmp_path / "run")), mounted(view, "-o", "remount,ro,bind"):
        before = _tree(view)
        for command in (["prune", "--keep-last", "2"], ["repair"], ["repair", "--undo"]):
            result = cli(*command, "--dry-run", view / "checkpoint")
            assert result.exit_code == 0, result.stderr
            assert "Read-only" not in result.stderr
        assert _tree(view) == before
        acting = cli("prune", "--yes", "--keep-last", "2", view / "checkpoint")
        assert acting.exit_code == 1 and "Read-only file system" in acting.stderr, "acting on it still needs its lock"
    assert epochs_left(folder) == [3, 4, 5, 6, 7]


# --- item 9: no mount point is crossed inside ckptdoctor's own folder --------------------------------


def _outside(tmp_path: Path) -> Path:
    """Someone's data, named as ckptdoctor names what it moved into its trash."""
    outside = tmp_path / "outside"
    (outside / "000001").mkdir(parents=True)
    (outside / "000000").write_text("mine")
    (outside / "000001" / "precious.txt").write_text("mine too")
    return outside


@pytest.mark.slow
def test_a_folder_mounted_in_the_trash_is_never_reached_into(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    assert cli("prune", "--yes", "--keep-last", "5", folder).exit_code == 0
    outside = _outside(tmp_path)
    before = _tree(outside)
    slot = folder / ".ckptdoctor" / "trash" / "20260101-000000-deadbeef"
    slot.mkdir()
    with mounted(slot, "--bind", str(outside)):
        for command in (["prune", "--yes", "--keep-last", "2"], ["repair", "--yes"], ["prune", "--dry-run", "--keep-last", "1"]):
            result = cli(*command, folder)
            assert _tree(outside) == before, "what is mounted there is not ckptdoctor's"
            assert result.exit_code == 0, result.stderr
            assert f"{slot} (a mount point: never reached into)" in result.stderr
    assert epochs_left(folder) == [6, 7]
    assert _tree(outside) == before


@pytest.mark.slow
@pytest.mark.parametrize("mounted_at", [".ckptdoctor", ".ckptdoctor/trash", ".ckptdoctor/quarantine"])
def test_ckptdoctors_own_folder_on_another_filesystem_is_refused(tmp_path: Path, cli, mounted_at: str) -> None:
    folder = burn_run(tmp_path)
    assert cli("prune", "--yes", "--keep-last", "5", folder).exit_code == 0
    outside = _outside(tmp_path)
    before = _tree(outside)
    (folder / mounted_at).mkdir(exist_ok=True)
    with mounted(folder / mounted_at, "--bind", str(outside)):
        for command in (["prune", "--yes", "--keep-last", "2"], ["repair", "--yes"], ["repair", "--undo", "--yes"]):
            result = cli(*command, folder)
            assert result.exit_code == 1, result.stderr
            assert f"{folder / mounted_at} is a mount point (another filesystem) inside ckptdoctor's own folder" in result.stderr
        assert _tree(outside) == before
    assert epochs_left(folder) == [3, 4, 5, 6, 7]


# --- item 10: the run's parent mounted inside the run ------------------------------------------------


@pytest.mark.slow
def test_the_runs_parent_mounted_inside_the_run_is_one_run_under_one_lock(tmp_path: Path, cli) -> None:
    """The run is reached twice, once through a bind mount of its parent inside it: one run, one
    plan, and its lock is this command's own, never "another ckptdoctor"."""
    folder = burn_run(tmp_path)
    (folder / "parent").mkdir()
    with mounted(folder / "parent", "--bind", str(tmp_path / "run")):
        for _ in range(2):
            result = cli("prune", "--yes", "--keep-last", "2", folder)
            assert result.exit_code == 0, result.stderr
            assert "another ckptdoctor" not in result.stderr
        assert epochs_left(folder) == [6, 7]


def test_a_lock_reached_again_through_a_mount_is_this_commands_own(tmp_path: Path) -> None:
    from ckptdoctor import actions

    folder = burn_run(tmp_path)
    (folder / ".ckptdoctor").mkdir()
    view = tmp_path / "view"
    view.mkdir()
    with mounted(view, "--bind", str(folder)), actions.locked(str(folder / ".ckptdoctor"), str(folder)):
        with actions.locked(str(view / ".ckptdoctor"), str(view)):
            pass
        other = tmp_path / "other"
        (other / ".ckptdoctor").mkdir(parents=True)
        holder = _holding_the_lock(other)  # another's lock stays another's
        try:
            with pytest.raises(actions.Locked), actions.locked(str(other / ".ckptdoctor"), str(other)):
                pass
        finally:
            holder.kill()
            holder.wait()


# --- item 6: checkpoints on another filesystem than their trash -------------------------------------


@pytest.fixture
def own_filesystem(accelerate_saved: Path, tmp_path: Path) -> Iterator[Path]:
    """accelerate's project with its ``checkpoints/`` a filesystem of its own (a real tmpfs),
    holding real ``save_state()`` saves (checkpoint_1..3), a day old: ckptdoctor's own folder,
    beside it in the project, is on another filesystem."""
    checkpoints = tmp_path / "project" / "checkpoints"
    checkpoints.mkdir(parents=True)
    with mounted(checkpoints, "-t", "tmpfs", "-o", "size=64m", "tmpfs"):
        for save in sorted((accelerate_saved / "checkpoints").iterdir()):
            shutil.copytree(save, checkpoints / save.name)
        age(checkpoints)
        yield checkpoints


def _resumes_and_saves_on(project: Path, expected: list[str]) -> None:
    """accelerate itself, after the prune: ``load_state()`` finds the newest save by parsing every
    name in ``checkpoints/``, and ``save_state(total_limit=…)`` numbers and rotates on."""
    import accelerate
    import torch
    from accelerate.utils import ProjectConfiguration

    latest = max(int(name.split("_")[1]) for name in os.listdir(project / "checkpoints"))
    config = ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True, total_limit=2, iteration=latest + 1)
    accelerator = accelerate.Accelerator(project_config=config, cpu=True)
    accelerator.prepare(torch.nn.Linear(4, 2), torch.optim.AdamW(torch.nn.Linear(4, 2).parameters()))
    accelerator.load_state()
    accelerator.save_state()
    assert sorted(os.listdir(project / "checkpoints")) == expected


def test_checkpoints_on_their_own_filesystem_are_pruned_where_they_are(own_filesystem: Path, cli) -> None:
    """Every entry of the plan lies on another filesystem than the trash beside it: renaming one
    there fails with EXDEV, so each is deleted where it is, under the journal; nothing is left
    waiting, and accelerate resumes from what is kept and saves on."""
    project = own_filesystem.parent
    kept = _tree(own_filesystem / "checkpoint_3")
    result = cli("prune", "--yes", "--keep-last", "1", own_filesystem)
    assert result.exit_code == 0, result.stderr
    assert "cross-device" not in result.stderr
    assert sorted(os.listdir(own_filesystem)) == ["checkpoint_3"] and _tree(own_filesystem / "checkpoint_3") == kept
    assert list((project / ".ckptdoctor" / "checkpoints" / "trash").iterdir()) == [], "no journal left waiting"
    _resumes_and_saves_on(project, ["checkpoint_3", "checkpoint_4"])


def _copies(checkpoints: Path, count: int) -> None:
    """``count`` more saves (copies of checkpoint_1, numbered on), a day old: a prune with much to delete."""
    for number in range(4, 4 + count):
        shutil.copytree(checkpoints / "checkpoint_1", checkpoints / f"checkpoint_{number}")
    age(checkpoints)


def _killed_while_deleting(checkpoints: Path, rng: random.Random) -> None:
    """A prune of ``checkpoints`` SIGKILLed once its journal (beside it) exists, after a random few milliseconds."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ckptdoctor", "prune", "--yes", "--keep-last", "1", str(checkpoints)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    _kill_when_deleting(process, checkpoints, rng, checkpoints.parent / ".ckptdoctor" / "checkpoints" / "trash")


@pytest.mark.slow
def test_a_prune_deleting_in_place_killed_at_any_moment_loses_nothing_and_the_next_one_finishes(own_filesystem: Path, cli) -> None:
    project = own_filesystem.parent
    trash = project / ".ckptdoctor" / "checkpoints" / "trash"
    rng = random.Random(6)
    marked = 0
    for attempt in range(24):
        _copies(own_filesystem, 30)
        newest = f"checkpoint_{3 + 30}"
        before = {save.name: _tree(save) for save in own_filesystem.iterdir()}
        _killed_while_deleting(own_filesystem, rng)
        assert _tree(own_filesystem / newest) == before[newest], "the checkpoint kept changed or vanished"
        marks = list(trash.glob("*/*.in-place"))
        marked += bool(marks)
        partial = [save.name for save in own_filesystem.iterdir() if _tree(save) != before[save.name]]
        assert len(partial) <= 1, "a kill leaves at most the one being deleted partly deleted"
        assert not partial or marks, "what was partly deleted is marked in the journal"
        result = cli("prune", "--yes", "--keep-last", "1", own_filesystem)
        assert result.exit_code == 0, result.stderr
        assert sorted(os.listdir(own_filesystem)) == [newest], "the next prune finishes the job"
        assert list(trash.iterdir()) == []
        for name in os.listdir(own_filesystem):  # the next round counts on from checkpoint_4 again
            os.rename(own_filesystem / name, own_filesystem / "checkpoint_3")
        shutil.copytree(own_filesystem / "checkpoint_3", own_filesystem / "checkpoint_1")
        if marked >= 2 and attempt >= 5:
            break
    assert marked, "some kill landed while an entry was being deleted in place"
    _resumes_and_saves_on(project, ["checkpoint_3", "checkpoint_4"])


@pytest.mark.slow
def test_an_entry_a_killed_prune_began_deleting_in_place_is_finished_by_the_next(own_filesystem: Path, cli, monkeypatch) -> None:
    """Killed (here: interrupted) after deleting one file of a checkpoint folder it deletes in
    place: the mark in its journal says so, the kept checkpoint is whole, and the next prune,
    confirmed, finishes that folder (changed only by the deletion the journal began) and the rest."""
    from ckptdoctor.actions import _trash

    project = own_filesystem.parent
    kept = _tree(own_filesystem / "checkpoint_3")

    def killed_part_way(folder, name, mounts=None):  # type: ignore[no-untyped-def]
        for _, _, files, below in os.fwalk(name, dir_fd=folder.fd):
            os.unlink(files[0], dir_fd=below)
            break
        raise KeyboardInterrupt

    monkeypatch.setattr(_trash, "remove", killed_part_way)
    interrupted = cli("prune", "--yes", "--keep-last", "1", own_filesystem)
    monkeypatch.undo()
    assert interrupted.exit_code == 130 and "is pending" in interrupted.stderr
    (mark,) = (project / ".ckptdoctor" / "checkpoints" / "trash").glob("*/*.in-place")
    assert sorted(os.listdir(own_filesystem)) == ["checkpoint_1", "checkpoint_2", "checkpoint_3"]
    assert _tree(own_filesystem / "checkpoint_3") == kept
    preview = cli("prune", "--json", "--dry-run", "--keep-last", "1", own_filesystem)
    assert preview.exit_code == 0, preview.stderr
    (pending,) = preview.json["pending"]
    assert sorted(pending["deletes"]) == ["checkpoint_1", "checkpoint_2"] and pending["spares"] == [], "it finishes what it began"
    result = cli("prune", "--yes", "--keep-last", "1", own_filesystem)
    assert result.exit_code == 0, result.stderr
    assert sorted(os.listdir(own_filesystem)) == ["checkpoint_3"] and _tree(own_filesystem / "checkpoint_3") == kept
    assert not mark.exists() and list(mark.parent.parent.iterdir()) == []
    _resumes_and_saves_on(project, ["checkpoint_3", "checkpoint_4"])
