"""prune and repair against folders swapped mid-operation, full disks and entries that cannot be
moved (issue 13, items 3, 4, 8 and 9).

Swaps happen at the worst moment through ``ckptdoctor.actions._confine.between``, the seam the
acting code calls between its steps: the window a racing attacker needs, opened without sleeps.
Full disks are real: a tmpfs, filled to the last byte (root only, else skipped). Entries that
cannot be deleted are made with ``chattr +i``, which stops root too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_acting_hardening import _pending_journal
from test_acting_world import mounted
from test_prune import _prune_process, age, burn_run, digests, epochs_left, kill_once
from test_repair import broken_burn_run, deepspeed_run, quarantined, tree

from ckptdoctor.actions import _confine
from ckptdoctor.testing import write_burn_run

pytestmark = pytest.mark.usefixtures("fake_machine")  # the process table and clock are the test's (conftest)


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("mine")
    return outside


def _contents(folder: Path) -> dict[str, str]:
    """Every entry below ``folder``: a file's text (or its bytes' digest), "dir", or where a link points."""

    def seen(path: Path) -> str:
        if path.is_symlink():
            return f"-> {os.readlink(path)}"
        if path.is_dir():
            return "dir"
        data = path.read_bytes()
        return data.decode() if data.isascii() else __import__("hashlib").sha256(data).hexdigest()

    return {str(p.relative_to(folder)): seen(p) for p in sorted(folder.rglob("*"))}


# --- item 3: ckptdoctor's own folder swapped for a symlink while prune acts ----------------------------


def test_own_folder_swapped_for_a_symlink_after_the_journal_reaches_nothing_outside(tmp_path: Path, cli, monkeypatch) -> None:
    folder = burn_run(tmp_path)
    outside = _outside(tmp_path)

    def swap(step: str, path: str) -> None:
        if step != "journal written":
            return
        # the attacker's copy of the trash folder prune is about to empty, full of someone's files
        fake = outside / "trash" / os.path.basename(path)
        fake.mkdir(parents=True)
        (fake / "000000").write_text("mine")
        (fake / "journal.json").write_text("mine")
        own = folder / ".ckptdoctor"
        own.rename(tmp_path / "moved-away")
        own.symlink_to(outside, target_is_directory=True)

    monkeypatch.setattr(_confine, "between", swap)
    before = None
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    before = _contents(outside)
    assert before["precious.txt"] == "mine"
    assert {name: text for name, text in before.items() if name.startswith("trash/") and text != "dir"} == {
        f"trash/{name}/{file}": "mine" for name in os.listdir(outside / "trash") for file in ("000000", "journal.json")
    }, "nothing outside the run was deleted, and nothing of the run was moved there"
    assert epochs_left(folder) == [6, 7]


def test_a_checkpoint_folder_swapped_for_a_symlink_is_not_followed_by_prune(tmp_path: Path, cli, monkeypatch) -> None:
    from ckptdoctor.testing import write_hf_checkpoints

    run = tmp_path / "hf"
    write_hf_checkpoints(run, (10, 20, 30))
    age(run)
    outside = _outside(tmp_path)
    (outside / "optimizer.pt").write_text("someone else's")

    def swap(step: str, path: str) -> None:
        if step == "journal written":
            (run / "checkpoint-10").rename(tmp_path / "checkpoint-10-aside")
            (run / "checkpoint-10").symlink_to(outside, target_is_directory=True)

    monkeypatch.setattr(_confine, "between", swap)
    result = cli("prune", "--yes", "--keep-last", "1", run)
    assert "Traceback" not in result.stderr
    assert _contents(outside) == {"optimizer.pt": "someone else's", "precious.txt": "mine"}
    assert os.path.islink(run / "checkpoint-10"), "the link that replaced the planned folder is left alone"
    assert "replaced since the plan" in result.stderr
    assert not (run / "checkpoint-20").exists(), "the rest of the plan went on"


def test_a_folder_on_the_way_swapped_for_a_symlink_is_refused(tmp_path: Path) -> None:
    """The walk below the run opens one folder at a time without following links."""
    from ckptdoctor.actions._confine import Folder, Outcome, take

    (tmp_path / "run" / "sub").mkdir(parents=True)
    (tmp_path / "run" / "sub" / "f").write_text("run's")
    outside = _outside(tmp_path)
    (outside / "f").write_text("mine")
    with Folder.at(str(tmp_path / "run")) as top:
        seen = top.look("sub/f")
        assert seen is not None
        (tmp_path / "run" / "sub").rename(tmp_path / "aside")
        (tmp_path / "run" / "sub").symlink_to(outside, target_is_directory=True)
        assert top.look("sub/f") is None
        outcome, why = take(top, "sub/f", _confine.identity(seen), lambda parent, name: os.unlink(name, dir_fd=parent.fd))
        assert outcome is Outcome.FAILED and "does not follow it" in why
        assert take(top, "sub", _confine.identity(seen), lambda parent, name: None)[0] is Outcome.CHANGED
    assert (outside / "f").read_text() == "mine"


# --- item 4: repair's moves re-confined after its manifest ------------------------------------------------


def test_a_quarantined_folder_swapped_for_a_symlink_after_the_manifest_stays_outside_the_quarantine(
    tmp_path: Path, cli, monkeypatch
) -> None:
    folder = deepspeed_run(tmp_path / "ds")
    outside = _outside(tmp_path)

    def swap(step: str, path: str) -> None:
        if step == "manifest written":
            (folder / "global_step300").rename(tmp_path / "aside")
            (folder / "global_step300").symlink_to(outside, target_is_directory=True)

    monkeypatch.setattr(_confine, "between", swap)
    result = cli("repair", "--yes", folder)
    assert "Traceback" not in result.stderr
    assert _contents(outside) == {"precious.txt": "mine"}
    assert os.path.islink(folder / "global_step300")
    assert not any("precious" in path for path in quarantined(folder))
    assert "replaced since the plan" in result.stderr


def test_a_quarantined_file_swapped_for_a_link_to_an_outside_file_is_left(tmp_path: Path, cli, monkeypatch) -> None:
    folder = broken_burn_run(tmp_path)
    secret = _outside(tmp_path) / "precious.txt"

    def swap(step: str, path: str) -> None:
        if step == "manifest written":
            (folder / "model-7.bpk").unlink()
            (folder / "model-7.bpk").symlink_to(secret)

    monkeypatch.setattr(_confine, "between", swap)
    result = cli("repair", "--yes", folder)
    assert secret.read_text() == "mine"
    assert os.path.islink(folder / "model-7.bpk") and "model-7.bpk" not in quarantined(folder)
    assert "scheduler-7.bpk" in quarantined(folder), "the rest of the plan went on"
    assert result.exit_code == 0, result.stderr


# --- item 8: a full disk -------------------------------------------------------------------------------


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    with mounted(where, "-t", "tmpfs", "-o", f"size={size}", "tmpfs"):
        yield where


def _fill(disk: Path, name: str = "filler") -> Path:
    """Fill ``disk`` to its last byte; the filler file, to free space with."""
    filler = disk / name
    handle = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(handle, b"\0" * 4096)
        with contextlib.suppress(OSError):
            while True:
                os.write(handle, b"\0")  # the last bytes of a page
    finally:
        os.close(handle)
    probe = os.open(disk / "probe", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(OSError) as full:
        os.write(probe, b"x")
    os.close(probe)
    assert full.value.errno == errno.ENOSPC
    (disk / "probe").unlink()
    assert os.statvfs(disk).f_bavail == 0
    return filler


def test_prune_frees_space_on_a_full_disk_without_a_journal(tmp_path: Path, cli) -> None:
    with _tmpfs(tmp_path / "disk", "4m") as disk:
        folder = disk / "run"
        write_burn_run(folder, range(1, 8))
        age(folder)
        kept = {name: text for name, text in digests(folder).items() if name.split("-")[1].startswith(("6", "7"))}
        _fill(disk)
        result = cli("prune", "--yes", "--keep-last", "2", folder)
        assert result.exit_code == 0, result.stderr
        assert "too full for a journal" in result.stderr
        assert epochs_left(folder) == [6, 7]
        assert {name: digests(folder)[name] for name in kept} == kept
        assert os.statvfs(disk).f_bavail > 0


@pytest.mark.slow
def test_a_prune_killed_in_its_journal_free_mode_loses_nothing_to_keep(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "disk", "16m") as disk:
        folder = disk / "run"
        epochs = range(1, 401)
        keep = {e for e in epochs if e > 397 or e % 7 == 0}
        write_burn_run(folder, epochs)
        age(folder)
        wanted = {name: digest for name, digest in digests(folder).items() if int(name.split("-")[1].split(".")[0]) in keep}
        _fill(disk)
        rng = random.Random(13)
        partial = 0
        for attempt in range(8):
            _fill(disk, f"filler-{attempt}")  # what the last kill freed is taken again: every prune runs on a full disk
            left = kill_once(folder, wanted, keep, rng, _kill_once_deleting if attempt % 2 else None)
            partial += keep < left < set(epochs)
            if left == keep:  # a run finished the job: start again with more to delete
                for filler in disk.glob("filler*"):
                    filler.unlink()
                write_burn_run(folder, sorted(set(epochs) - keep))
                age(folder)
        assert partial, "no kill landed in the middle of a deletion"
        assert not any((folder / ".ckptdoctor" / "trash").glob("*/journal.json")), "no journal fitted"
        _fill(disk, "filler-last")
        finished = _prune_process(folder)
        _, said = finished.communicate(timeout=120)
        assert finished.returncode == 0, said
        assert "deleted " not in said or "too full for a journal" in said, "it ran without a journal"
        assert set(epochs_left(folder)) == keep
        assert {name: digests(folder)[name] for name in wanted} == wanted


def _kill_once_deleting(process: subprocess.Popen[str], folder: Path, rng: random.Random) -> None:
    """SIGKILL inside the deletion: once the run has fewer files, after a random few milliseconds."""
    files = len(os.listdir(folder))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        if len(os.listdir(folder)) < files:
            time.sleep(rng.uniform(0, 0.01))
            break
        time.sleep(0.0005)  # polling, not spinning: the prune needs the CPU more than this loop
    process.send_signal(signal.SIGKILL)
    process.wait()


@pytest.mark.slow
def test_repair_on_a_full_disk_moves_nothing_and_says_why(tmp_path: Path, cli) -> None:
    with _tmpfs(tmp_path / "disk", "4m") as disk:
        folder = disk / "run"
        write_burn_run(folder, range(1, 8))
        (folder / "optim-7.bpk").unlink()
        age(folder)
        before = tree(folder)
        filler = _fill(disk)
        result = cli("repair", "--yes", folder)
        assert result.exit_code == 1
        assert "too full" in result.stderr and "Traceback" not in result.stderr
        assert tree(folder) == before
        filler.unlink()
        assert cli("repair", "--yes", folder).exit_code == 0
        assert "model-7.bpk" in quarantined(folder)


# --- item 9: an entry that cannot be deleted does not wedge later prunes ---------------------------------


@contextlib.contextmanager
def _immutable(path: Path) -> Iterator[None]:
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


@pytest.mark.slow
def test_an_immutable_file_is_reported_and_the_rest_of_the_plan_goes_on(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    with _immutable(folder / "model-2.bpk"):
        first = cli("prune", "--yes", "--keep-last", "2", folder)
        assert first.exit_code == 1
        assert "model-2.bpk" in first.stderr and "could not be deleted" in first.stderr and "Traceback" not in first.stderr
        assert epochs_left(folder) == [2, 6, 7]
        again = cli("prune", "-q", "--yes", "--keep-last", "2", folder)
        assert again.exit_code == 1 and "cannot be completed" not in again.stderr
    last = cli("prune", "--yes", "--keep-last", "2", folder)
    assert last.exit_code == 0, last.stderr
    assert epochs_left(folder) == [6, 7]


@pytest.mark.slow
def test_an_immutable_file_inside_a_deleted_folder_leaves_only_itself(tmp_path: Path, cli) -> None:
    from ckptdoctor.testing import write_hf_checkpoints

    run = tmp_path / "hf"
    write_hf_checkpoints(run, (10, 20, 30))
    age(run)
    stuck = run / "checkpoint-10" / "optimizer.pt"
    assert stuck.is_file()
    with _immutable(stuck):
        first = cli("prune", "--yes", "--keep-last", "1", run)
        assert first.exit_code == 1 and "optimizer.pt" in first.stderr
        # the attack on issue 32: named only by its path in ckptdoctor's trash
        assert f"(it was {run / 'checkpoint-10'}, and waits in ckptdoctor's trash" in first.stderr, first.stderr
        assert not (run / "checkpoint-10").exists() and not (run / "checkpoint-20").exists()
        again = cli("prune", "--yes", "--keep-last", "1", run)  # tries the trash again, is not wedged
        assert again.exit_code == 1 and "optimizer.pt" in again.stderr
        leftovers = [p for p in (run / ".ckptdoctor" / "trash").rglob("*") if p.is_file()]
        assert [p.name for p in leftovers] == ["optimizer.pt"]
        subprocess.run(["chattr", "-i", str(leftovers[0])], check=True)
    last = cli("prune", "--yes", "--keep-last", "1", run)
    assert last.exit_code == 0, last.stderr
    assert not any((run / ".ckptdoctor" / "trash").iterdir())


def test_a_trash_folder_holding_what_ckptdoctor_did_not_put_there_is_left_with_a_note(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    stray = folder / ".ckptdoctor" / "trash" / "20260101-000000-0000cafe"
    stray.mkdir(parents=True)
    (stray / "notes.txt").write_text("mine")
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert (stray / "notes.txt").read_text() == "mine"
    assert "did not put there" in result.stderr
    assert epochs_left(folder) == [6, 7]


def test_the_seam_is_a_no_op_outside_tests() -> None:
    assert _confine.between("journal written", "/nowhere") is None
    assert sys.modules["ckptdoctor.actions._confine"].between is _confine.between


# --- item 14: prune --verify reads the newest kept checkpoints whole -------------------------------------


def _torch_run(folder: Path, epochs: range) -> None:
    import torch

    folder.mkdir(parents=True)
    for epoch in epochs:
        model = torch.nn.Linear(256, 256)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, folder / f"epoch_{epoch}.pt")
    age(folder)


def _flip_the_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    path.write_bytes(bytes(data))
    os.utime(path, (time.time() - 86400, time.time() - 86400))


@pytest.mark.slow
def test_prune_verify_keeps_the_last_good_checkpoint_when_the_newest_has_flipped_bytes(tmp_path: Path, cli) -> None:
    import torch

    folder = tmp_path / "run"
    _torch_run(folder, range(1, 6))
    _flip_the_middle(folder / "epoch_5.pt")
    assert cli("verify", "--deep", "--json", folder).exit_code == 1, "the flipped bytes are damage verify sees"
    plain = cli("prune", "--dry-run", "--json", "--keep-last", "1", folder)
    assert {item["index"] for item in plain.json["plan"] if item["action"] == "keep"} == {5}, "from headers, 5 looks whole"
    result = cli("prune", "--yes", "--verify", "--json", "--keep-last", "1", folder)
    assert result.exit_code == 0, result.stderr
    assert "5 does not pass verify" in result.stderr
    assert sorted(p.name for p in folder.glob("*.pt")) == ["epoch_4.pt", "epoch_5.pt"]
    assert result.json["plan"][-2]["reasons"][0].startswith("resume point")
    assert torch.load(folder / "epoch_4.pt", weights_only=True)["epoch"] == 4, "torch resumes from what was kept"


@pytest.mark.slow
def test_prune_verify_comes_from_the_config_too(tmp_path: Path, cli, monkeypatch) -> None:
    folder = tmp_path / "run"
    _torch_run(folder, range(1, 4))
    _flip_the_middle(folder / "epoch_3.pt")
    (tmp_path / "ckptdoctor.toml").write_text("[prune]\nverify = true\nkeep-last = 1\n")
    monkeypatch.chdir(tmp_path)
    result = cli("prune", "--yes", folder)
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in folder.glob("*.pt")) == ["epoch_2.pt", "epoch_3.pt"]
    assert cli("prune", "--yes", "--no-verify", "--keep-last", "1", folder).exit_code == 0
    assert sorted(p.name for p in folder.glob("*.pt")) == ["epoch_3.pt"], "--no-verify trusts the headers again"


# --- scope: --max-runs ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_prune_over_more_runs_than_max_runs_is_refused_off_a_terminal(tmp_path: Path, cli) -> None:
    for name in ("a", "b", "c"):
        write_burn_run(tmp_path / "runs" / name, range(1, 5))
    age(tmp_path / "runs")
    refused = cli("prune", "--yes", "--keep-last", "1", "--max-runs", "2", tmp_path / "runs")
    assert refused.exit_code == 2 and "--max-runs 3" in refused.stderr
    assert all(epochs_left(tmp_path / "runs" / name) == [1, 2, 3, 4] for name in ("a", "b", "c"))
    assert cli("prune", "--yes", "--keep-last", "1", "--max-runs", "3", tmp_path / "runs").exit_code == 0
    assert all(epochs_left(tmp_path / "runs" / name) == [4] for name in ("a", "b", "c"))


def test_discard_journal_puts_back_what_a_killed_prune_had_moved(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    trash = _pending_journal(folder, ["model-1.bpk", "optim-1.bpk", "scheduler-1.bpk"])
    (folder / "model-1.bpk").rename(trash / "000000")  # killed after its first move
    before = digests(folder)
    result = cli("prune", "--yes", "--discard-journal", "--keep-last", "100", folder)
    assert result.exit_code == 0, result.stderr
    assert epochs_left(folder) == list(range(1, 8)) and set(digests(folder)) == set(before) | {"model-1.bpk"}
    assert not any((folder / ".ckptdoctor" / "trash").iterdir())


@pytest.mark.slow
def test_ctrl_c_while_deleting_names_the_pending_journal_and_both_ways_forward(tmp_path: Path, cli) -> None:
    """Both ways forward work as printed (the attack on issue 32: `prune --discard-journal` was
    refused, "an empty policy", and named no run)."""
    folder = burn_run(tmp_path, range(1, 801))
    trash = folder / ".ckptdoctor" / "trash"
    rng = random.Random(5)
    for _ in range(10):
        process = _prune_process(folder)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None and not any(trash.glob("*/journal.json")):
            time.sleep(0.0005)
        time.sleep(rng.uniform(0, 0.005))
        process.send_signal(signal.SIGINT)
        _, said = process.communicate(timeout=60)
        if any(trash.glob("*/journal.json")):
            break
        write_burn_run(folder, range(1, 801))
        age(folder)
    else:
        pytest.skip("Ctrl-C never landed while a journal was pending")
    assert process.returncode == 130, said
    assert "Interrupted." in said and "is pending" in said
    assert "ckptdoctor prune --discard-journal" in said and "finishes it when confirmed" in said
    assert "Traceback" not in said
    discard = re.search(r"`ckptdoctor (prune --discard-journal [^`]*)`", said)
    assert discard is not None and str(folder) in discard[1], said
    before = epochs_left(folder)
    discarded = cli(*shlex.split(discard[1]))
    assert discarded.exit_code == 0, discarded.stderr
    # nothing deleted by it, what was still in the trash back (Ctrl-C may land before a move, or after the last)
    assert set(epochs_left(folder)) >= set(before) and not list(trash.glob("*/journal.json"))
    assert "deletes nothing" in said


def test_diskcheck_on_a_full_disk_says_full_not_permission(tmp_path: Path, cli) -> None:
    """CKD503's message tells a full disk from a folder this user may not write; its fixes cover both."""
    from ckptdoctor.rules.disk import NOT_WRITABLE

    with _tmpfs(tmp_path / "disk", "4m") as disk:
        folder = disk / "run"
        write_burn_run(folder, range(1, 4))
        _fill(disk)
        result = cli("diskcheck", "--json", folder)
        found = [f for f in result.json["findings"] if f["code"] == "CKD503"]
        assert len(found) == 1 and "the disk is full" in found[0]["message"], result.stdout
    assert any("disk is full" in fix and "ckptdoctor prune" in fix for fix in NOT_WRITABLE.fix_texts())
    assert any("permission denied" in fix and "chown" in fix for fix in NOT_WRITABLE.fix_texts())


def test_stray_files_in_ckptdoctors_own_folders_are_ignored_with_a_note(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    own = folder / ".ckptdoctor"
    (own / "trash").mkdir(parents=True)
    (own / "quarantine").mkdir()
    for stray in (own / ".DS_Store", own / "trash" / ".DS_Store", own / "quarantine" / "notes.txt"):
        stray.write_text("not ckptdoctor's")
    (own / "trash" / "elsewhere").symlink_to(tmp_path, target_is_directory=True)
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code == 0, result.stderr
    for stray in (".DS_Store", "trash/.DS_Store", "quarantine/notes.txt", "trash/elsewhere"):
        assert f"{own / stray} is not ckptdoctor's: ignored" in result.stderr
    assert (own / ".DS_Store").read_text() == "not ckptdoctor's" and os.path.islink(own / "trash" / "elsewhere")
    assert epochs_left(folder) == [6, 7]


# --- a racing thread, its window widened by the seam -----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("command", [["prune", "--yes", "--keep-last", "2"], ["repair", "--yes"], ["repair", "--undo", "--yes"]])
def test_a_thread_swapping_ckptdoctors_folder_while_acting_reaches_nothing_outside(
    tmp_path: Path, cli, monkeypatch, command: list[str]
) -> None:
    import threading

    folder = broken_burn_run(tmp_path, range(1, 60))
    if command[1] == "--undo":
        assert cli("repair", "--yes", folder).exit_code == 0
    outside = _outside(tmp_path)
    (outside / "trash").mkdir()
    (outside / "quarantine").mkdir()
    (outside / "lock").write_text("someone's")
    before = _contents(outside)
    kept = {name: text for name, text in digests(folder).items() if name.endswith(("-57.bpk", "-58.bpk"))}
    own, aside = folder / ".ckptdoctor", tmp_path / "own-aside"
    stop, swapped = threading.Event(), threading.Event()

    def attacker() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                own.rename(aside)
                own.symlink_to(outside, target_is_directory=True)
                swapped.set()
                own.unlink()
                aside.rename(own)

    def widen(step: str, path: str) -> None:  # the worst moment: let the attacker swap at least once
        swapped.clear()
        swapped.wait(1)

    monkeypatch.setattr(_confine, "between", widen)
    racer = threading.Thread(target=attacker)
    racer.start()
    try:
        result = cli(*command, folder)
    finally:
        stop.set()
        racer.join()
        if not own.exists() and aside.exists():
            aside.rename(own)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert _contents(outside) == before, "nothing outside the run was created, moved or deleted"
    assert {name: digests(folder).get(name) for name in kept} == kept


def test_a_folder_between_the_named_path_and_the_run_swapped_for_a_symlink_is_refused(tmp_path: Path, cli, monkeypatch) -> None:
    """A user owning ``runs/u`` swaps it for a link to someone else's run while root's cron prunes ``runs``."""
    import ckptdoctor.actions

    runs = tmp_path / "runs"
    write_burn_run(runs / "u" / "exp", range(1, 8))
    elsewhere = tmp_path / "elsewhere"
    write_burn_run(elsewhere / "exp", range(1, 8))
    age(tmp_path)
    before = _contents(elsewhere)
    real_delete = ckptdoctor.actions.delete

    def swap_first(plan, since, busy=frozenset(), seen=None):
        (runs / "u").rename(tmp_path / "u-aside")
        (runs / "u").symlink_to(elsewhere, target_is_directory=True)
        return real_delete(plan, since, busy, seen)

    monkeypatch.setattr(ckptdoctor.actions, "delete", swap_first)
    result = cli("prune", "--yes", "--keep-last", "2", runs)
    assert result.exit_code == 1 and "is a symlink" in result.stderr and "Traceback" not in result.stderr
    assert _contents(elsewhere) == before, "nothing outside the named path was deleted or created"
    assert epochs_left(tmp_path / "u-aside" / "exp") == list(range(1, 8))


def test_undo_keeps_a_quarantine_that_holds_what_the_repair_did_not_put_there(tmp_path: Path, cli) -> None:
    folder = broken_burn_run(tmp_path)
    assert cli("repair", "--yes", folder).exit_code == 0
    quarantine = next((folder / ".ckptdoctor" / "quarantine").iterdir())
    (quarantine / "files").rename(quarantine / "set-aside")  # someone moved the quarantined files
    (quarantine / "NOTES.txt").write_text("mine")
    kept = {name: seen for name, seen in _contents(quarantine).items() if name != "manifest.json"}
    result = cli("repair", "--undo", "--yes", folder)
    assert result.exit_code == 1 and "is not what this repair put there" in result.stderr
    assert {name: seen for name, seen in _contents(quarantine).items() if name != "manifest.json"} == kept, "nothing in it was deleted"


def test_a_mount_inside_a_checkpoint_folder_is_never_deleted_through(tmp_path: Path, cli) -> None:
    """rm's --one-file-system: a bind mount of shared data inside a planned checkpoint folder."""
    from ckptdoctor.testing import write_hf_checkpoints

    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    run = tmp_path / "hf"
    write_hf_checkpoints(run, (10, 20, 30))
    shared = _outside(tmp_path)
    (run / "checkpoint-10" / "data").mkdir()
    age(tmp_path)
    mounted = subprocess.run(["mount", "--bind", str(shared), str(run / "checkpoint-10" / "data")], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.strip()}")
    try:
        result = cli("prune", "--yes", "--keep-last", "1", run)
        assert result.exit_code == 1 and "holds the mount point" in result.stderr
        assert (shared / "precious.txt").read_text() == "mine"
        assert (run / "checkpoint-10" / "data" / "precious.txt").exists() and not (run / "checkpoint-20").exists()
    finally:
        subprocess.run(["umount", "-l", str(run / "checkpoint-10" / "data")], check=False)


@pytest.mark.parametrize("command", [["prune", "--yes", "--keep-last", "2"], ["repair", "--yes"]])
def test_the_named_run_folder_swapped_after_the_scan_creates_nothing_outside(tmp_path: Path, cli, monkeypatch, command: list[str]) -> None:
    """The user names the run itself (``/data/runs/u/exp``); the owner of ``u`` swaps it for a link
    right after the scan. What the user named was opened before the scan: acting goes on there."""
    import ckptdoctor.acting.protocol as acting

    run = tmp_path / "runs" / "u" / "exp"
    write_burn_run(run, range(1, 8))
    (run / "optim-7.bpk").unlink()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "exp").mkdir(parents=True)
    (elsewhere / "exp" / "unrelated.txt").write_text("not a run")
    age(tmp_path)
    before = _contents(elsewhere)
    real_scan = acting.scan_runs

    def swap_after(*args):
        found = real_scan(*args)
        (tmp_path / "runs" / "u").rename(tmp_path / "u-aside")
        (tmp_path / "runs" / "u").symlink_to(elsewhere, target_is_directory=True)
        return found

    monkeypatch.setattr(acting, "scan_runs", swap_after)
    result = cli(*command, run)
    assert "Traceback" not in result.stderr
    assert _contents(elsewhere) == before, "nothing was created outside what the user named"
    acted_on = tmp_path / "u-aside" / "exp"
    assert result.exit_code == 0, result.stderr
    assert (epochs_left(acted_on) == [5, 6, 7]) if command[0] == "prune" else not (acted_on / "model-7.bpk").exists()


def test_a_named_folder_that_was_swapped_when_opened_and_back_when_scanned_is_refused(tmp_path: Path, cli, monkeypatch) -> None:
    """The other half of the race: the named path resolves elsewhere when it is opened, then to the
    run again when it is scanned. Nothing is made in the folder that was opened."""
    import ckptdoctor.acting.protocol as acting

    run = tmp_path / "runs" / "u" / "exp"
    write_burn_run(run, range(1, 8))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "exp").mkdir(parents=True)
    age(tmp_path)
    before, kept = _contents(elsewhere), digests(run)
    (tmp_path / "runs" / "u").rename(tmp_path / "u-real")
    (tmp_path / "runs" / "u").symlink_to(elsewhere, target_is_directory=True)
    real_scan = acting.scan_runs

    def swap_back_first(*args):
        (tmp_path / "runs" / "u").unlink()
        (tmp_path / "u-real").rename(tmp_path / "runs" / "u")
        return real_scan(*args)

    monkeypatch.setattr(acting, "scan_runs", swap_back_first)
    result = cli("prune", "--yes", "--keep-last", "2", run)
    assert result.exit_code == 1 and "is not the folder that was scanned" in result.stderr
    assert _contents(elsewhere) == before and digests(run) == kept


# --- found by the second attack: hard links planted where ckptdoctor writes; workers of a killed scan ----


def test_a_hard_linked_lock_is_refused_and_the_file_it_shares_untouched(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    victim = _outside(tmp_path) / "precious.txt"
    (folder / ".ckptdoctor").mkdir()
    os.link(victim, folder / ".ckptdoctor" / "lock")
    for command in (["prune", "--yes", "--keep-last", "2"], ["repair", "--yes"], ["repair", "--undo", "--yes"]):
        result = cli(*command, folder)
        assert result.exit_code == 1 and "hard link" in result.stderr, result.stderr
        assert victim.read_text() == "mine"
    assert epochs_left(folder) == list(range(1, 8))


def test_a_hard_link_planted_as_a_records_temporary_file_is_replaced_not_written_through(tmp_path: Path, cli) -> None:
    folder = broken_burn_run(tmp_path)
    victim = _outside(tmp_path) / "precious.txt"
    quarantine = folder / ".ckptdoctor" / "quarantine" / "20260101-000000-deadbeef"
    (quarantine / "files").mkdir(parents=True)
    (quarantine / "manifest.json").write_text(
        __import__("json").dumps({"version": 2, "run": str(folder), "created": 0, "state": "repairing", "entries": [], "pointers": []})
    )
    os.link(victim, quarantine / "manifest.json.tmp")
    os.link(victim, quarantine / "manifest.reserve")
    result = cli("repair", "--yes", folder)
    assert "Traceback" not in result.stderr
    assert victim.read_text() == "mine" and os.stat(victim).st_nlink == 1


@pytest.mark.slow
def test_workers_of_a_scan_killed_by_sigkill_die_with_it(tmp_path: Path) -> None:
    import psutil

    folder = tmp_path / "run"
    write_burn_run(folder, range(1, 3001))  # 9,000 files: the scan forks workers
    age(folder)
    # the compiled reader reads small files on threads of its own: the Python one forks, as
    # every scan does for files the compiled one does not read whole
    python_reads = {**os.environ, "CKPTDOCTOR_NO_CEDGES": "1"}
    seen = 0
    for delay in (0.0, 0.1, 0.3):
        process = subprocess.Popen(
            [sys.executable, "-m", "ckptdoctor", "prune", "--dry-run", "--keep-last", "5", str(folder)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=python_reads,
        )
        parent = psutil.Process(process.pid)
        deadline = time.monotonic() + 30
        workers: list[psutil.Process] = []
        while time.monotonic() < deadline and process.poll() is None and not workers:
            workers = parent.children()
            time.sleep(0.001)  # polling, not spinning: the scan needs the CPU more than this loop
        time.sleep(delay)  # at the first sight of the workers, or later: busy, idle, or handing back
        workers = parent.children() if process.poll() is None else workers
        process.send_signal(signal.SIGKILL)
        process.wait()
        seen += bool(workers)
        _, alive = psutil.wait_procs(workers, timeout=10)
        for orphan in alive:
            orphan.kill()
        assert not alive, f"workers outlived their parent, killed {delay} s after they started"
    assert seen, "no kill landed while the scan had workers"


@pytest.mark.slow
def test_entries_a_finished_journal_deleted_are_not_reported_as_left(tmp_path: Path, cli) -> None:
    folder = burn_run(tmp_path)
    _pending_journal(folder, ["model-1.bpk", "optim-1.bpk", "scheduler-1.bpk"])
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code == 0, result.stderr
    assert "finished 3 deletions a killed prune left pending (1 checkpoint, " in result.stderr
    assert "deleted 4 checkpoints (12 files)" in result.stderr and "written, opened or replaced" not in result.stderr
    assert epochs_left(folder) == [6, 7]
