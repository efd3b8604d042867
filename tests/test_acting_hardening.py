"""prune and repair where a cron job meets a hostile or changed run (issue 13, items 1, 2, 5, 12).

A user who can write into a run can plant entries in `.ckptdoctor/`; a root cron job that prunes
the run must not follow them out of it. A journal a killed prune left must not delete what was
restored from a backup since.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_prune import burn_run, epochs_left

pytestmark = pytest.mark.usefixtures("fake_machine")  # the process table and clock are the test's (conftest)


def test_a_symlinked_trash_entry_is_not_followed(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (outside / "journal.json").write_text(json.dumps({"entries": [str(outside / "keep.txt")]}))
    trash = folder / ".ckptdoctor" / "trash"
    trash.mkdir(parents=True)
    (trash / "20260101-000000-deadbeef").symlink_to(outside, target_is_directory=True)
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert "Traceback" not in result.stderr
    assert (outside / "keep.txt").read_text() == "mine"
    assert (outside / "journal.json").exists()
    assert epochs_left(folder) == [6, 7]


def test_a_symlinked_lock_is_refused_and_its_target_untouched(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    target = tmp_path / "outside.txt"
    target.write_text("untouched")
    own = folder / ".ckptdoctor"
    own.mkdir()
    (own / "lock").symlink_to(target)
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code != 0
    assert "symlink" in result.stderr
    assert target.read_text() == "untouched"
    assert epochs_left(folder) == list(range(1, 8))


def test_a_dangling_lock_link_creates_nothing_outside(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    own = folder / ".ckptdoctor"
    own.mkdir()
    (own / "lock").symlink_to(tmp_path / "created-by-the-lock")
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code != 0
    assert not (tmp_path / "created-by-the-lock").exists()


def test_a_stray_file_in_the_quarantine_does_not_wedge_repair(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    (folder / "optim-7.bpk").unlink()
    quarantine = folder / ".ckptdoctor" / "quarantine"
    quarantine.mkdir(parents=True)
    (quarantine / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    result = cli("repair", "--yes", folder)
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert result.exit_code == 0, result.stderr
    assert not (folder / "model-7.bpk").exists()
    undo = cli("repair", "--undo", "--yes", folder)
    assert undo.exit_code == 0, undo.stderr
    assert (folder / "model-7.bpk").exists()


def _pending_journal(folder: Path, names: list[str]) -> Path:
    """The journal a prune killed right after writing it leaves (the format `actions.delete` writes);
    its trash folder."""
    from ckptdoctor.actions._confine import identity

    trash = folder / ".ckptdoctor" / "trash" / "20260101-000000-0badf00d"
    trash.mkdir(parents=True)
    identities = {name: list(identity(os.lstat(folder / name))) for name in names}
    (trash / "journal.json").write_text(json.dumps({"run": str(folder), "entries": names, "identities": identities}))
    return trash


def test_a_pending_journal_never_deletes_a_file_restored_since(tmp_path: Path, cli) -> None:
    """Issue 13, item 5: a restore from a backup keeps the mtime, never the inode or the ctime."""
    import shutil

    folder = burn_run(tmp_path)
    _pending_journal(folder, ["model-1.bpk", "optim-1.bpk", "scheduler-1.bpk"])
    for name in ("model-1.bpk", "optim-1.bpk", "scheduler-1.bpk"):  # restored from a backup
        backup = tmp_path / name
        shutil.copy2(folder / name, backup)
        (folder / name).unlink()
        shutil.copy2(backup, folder / name)
    result = cli("prune", "--yes", "--keep-last", "100", folder)
    assert result.exit_code == 0, result.stderr
    assert epochs_left(folder) == list(range(1, 8))


@pytest.mark.slow
def test_a_pending_journal_is_shown_in_the_plan_and_finished_only_when_confirmed(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    _pending_journal(folder, ["model-1.bpk", "optim-1.bpk", "scheduler-1.bpk"])
    dry = cli("prune", "--json", "--dry-run", "--keep-last", "6", folder)
    assert dry.exit_code == 0, dry.stderr
    assert [sorted(found["deletes"]) for found in dry.json["pending"]] == [["model-1.bpk", "optim-1.bpk", "scheduler-1.bpk"]]
    unconfirmed = cli("prune", "--keep-last", "6", folder)  # off a terminal, no --yes
    assert unconfirmed.exit_code == 2 and "pending: an interrupted prune left" in unconfirmed.stderr
    assert epochs_left(folder) == list(range(1, 8))
    result = cli("prune", "--yes", "--keep-last", "6", folder)
    assert result.exit_code == 0, result.stderr
    assert epochs_left(folder) == list(range(2, 8))
    assert not any((folder / ".ckptdoctor" / "trash").iterdir())


def test_a_pending_journal_spares_what_the_new_policy_keeps(tmp_path: Path, cli) -> None:
    """Issue 13, item 5: a killed prune's journal no longer deletes whatever the next prune's policy."""
    folder = burn_run(tmp_path)
    _pending_journal(folder, ["model-1.bpk", "optim-1.bpk", "scheduler-1.bpk"])
    result = cli("prune", "--yes", "--keep-last", "100", folder)
    assert result.exit_code == 0, result.stderr
    assert epochs_left(folder) == list(range(1, 8))
    assert not any((folder / ".ckptdoctor" / "trash").iterdir()), "the journal is done with"


def test_finishing_a_killed_prune_says_what_it_finished_not_deleted_0_checkpoints(tmp_path: Path, cli) -> None:
    """Issue 35, item 7: the rerun of a killed prune finished its deletions, then said "deleted 0
    checkpoints; freed 0 B" as its last line."""
    folder = burn_run(tmp_path)
    trash = _pending_journal(folder, [f"{kind}-{epoch}.bpk" for epoch in range(1, 6) for kind in ("model", "optim", "scheduler")])
    (folder / "model-1.bpk").rename(trash / "000000")  # killed after its first move
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code == 0, result.stderr
    assert epochs_left(folder) == [6, 7]
    lines = result.stderr.strip().splitlines()
    assert lines[-1].endswith(": finished 15 deletions a killed prune left pending (5 checkpoints, 24.9 KiB freed)."), lines
    assert "deleted 0" not in result.stderr


@pytest.mark.slow
def test_an_io_error_while_moving_is_a_one_line_error_not_an_internal_one(tmp_path: Path, cli, monkeypatch) -> None:
    """Issue 13, item 10: EIO (or ENOSPC, EROFS) in the move phase is exit 1 naming the path and errno."""
    import errno

    folder = burn_run(tmp_path)
    real_rename = os.rename

    def failing(source, target, *args, **kwargs):
        if str(source).endswith("model-2.bpk"):
            raise OSError(errno.EIO, "Input/output error", str(source))
        return real_rename(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "rename", failing)
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    monkeypatch.setattr(os, "rename", real_rename)
    assert result.exit_code == 1, result.stderr
    assert "internal error" not in result.stderr
    assert "model-2.bpk" in result.stderr and "EIO" in result.stderr
    assert set(epochs_left(folder)) >= {6, 7}
    again = cli("prune", "--yes", "--keep-last", "2", folder)
    assert again.exit_code == 0, again.stderr
    assert epochs_left(folder) == [6, 7]


def test_prune_refuses_the_root_folder_at_once(cli) -> None:
    """Issue 13, item 11: `prune --dry-run /` used to plan to delete every checkpoint-like file."""
    result = cli("prune", "--dry-run", "--keep-last", "1", "/")
    assert result.exit_code == 2
    assert "the root folder" in result.stderr


def test_repair_refuses_the_home_folder(cli) -> None:
    result = cli("repair", "--dry-run", str(Path.home()))
    assert result.exit_code == 2
    assert "home folder" in result.stderr


def test_a_mount_root_is_taken_only_as_a_single_run(tmp_path: Path, cli) -> None:
    import subprocess

    from test_diskcheck import mount_tmpfs

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    disk = tmp_path / "disk"
    mount_tmpfs(disk, "size=16m")
    try:
        burn_run(disk / "experiment")  # a run below the mount root
        refused = cli("prune", "--dry-run", "--keep-last", "1", disk)
        assert refused.exit_code == 2
        assert "root of a filesystem" in refused.stderr
        below = cli("prune", "--dry-run", "--keep-last", "1", disk / "experiment" / "run" / "checkpoint")
        assert below.exit_code == 0, below.stderr
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_freed_bytes_leave_out_files_linked_from_outside_the_run(tmp_path: Path, cli) -> None:
    """Issue 13, item 15: deleting one of two hard links frees nothing."""
    folder = burn_run(tmp_path)
    plain = json.loads(cli("prune", "--dry-run", "--json", "--keep-last", "2", folder).stdout)["freed_bytes"]
    os.link(folder / "model-1.bpk", tmp_path / "backup-model-1.bpk")
    linked = json.loads(cli("prune", "--dry-run", "--json", "--keep-last", "2", folder).stdout)["freed_bytes"]
    assert linked == plain - (folder / "model-1.bpk").stat().st_size
