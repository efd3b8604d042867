"""What this user may not read is unknown, never damage (issue 32, items 3, 4 and 10).

Each fault is made the way it happens: the run belongs to one user (``nobody``) and one of its
files or folders to another (``root``, mode 600 or 000), or a folder may be listed but not
searched (444); ckptdoctor then runs as ``nobody`` (``setpriv``), a real other user the kernel
holds to the modes (root bypasses them, so these tests need root to make the users, and skip
elsewhere). The process table ckptdoctor reads is faked empty in that child, so that nothing
else running on the machine changes what it does. Whether a checkpoint loads is asked of the
loop's own resume (``frameworks.loop_resume``) or of torch, as root, who can read it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from frameworks import copy_run, loop_resume, torch_loop
from other_user import NOBODY, require, shared_folder
from other_user import as_nobody as run_as_nobody

AN_HOUR = 3600.0


@pytest.fixture(scope="module")
def as_nobody() -> None:
    require()


class Ran:
    def __init__(self, done: subprocess.CompletedProcess[str]) -> None:
        self.code, self.stdout, self.stderr = done.returncode, done.stdout, done.stderr
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr


def ckptdoctor(as_nobody: None, where: Path, *args: str) -> Ran:
    """The ckptdoctor CLI run by ``nobody`` from ``where``, with an empty process table."""
    return Ran(run_as_nobody(*args, where=where))


@pytest.fixture
def shared() -> Iterator[Path]:
    with shared_folder() as folder:
        yield folder


def _give(run: Path, owner: int, below: tuple[str, ...] = ()) -> None:
    """Every entry of ``run`` (two levels down, and the paths ``below``) to ``owner``, an hour old
    (past --min-age)."""
    for path in [run, *run.glob("*"), *run.glob("*/*"), *map(Path, below)]:
        os.chown(path, owner, owner, follow_symlinks=False)
        stamp = os.lstat(path).st_mtime - AN_HOUR
        os.utime(path, (stamp, stamp), follow_symlinks=False)


def _shut(path: Path, mode: int) -> None:
    """``path`` root's, with ``mode``: another user's, to ``nobody``; its time left as it was."""
    before = os.lstat(path)
    os.chown(path, 0, 0)
    path.chmod(mode)
    os.utime(path, (before.st_atime, before.st_mtime))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def bundled_loop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hand-written loop's three epochs, each ``torch.save`` of the tutorial's dict."""
    folder = tmp_path_factory.mktemp("loop") / "run"
    torch_loop(folder, 3, "bundled")
    return folder


@pytest.fixture
def newest_shut(bundled_loop: Path, shared: Path) -> Path:
    """The loop's run, ``nobody``'s, with its newest epoch root's and mode 600."""
    run = copy_run(bundled_loop, shared / "run")
    _give(run, NOBODY)
    _shut(run / "ckpt_3.pt", 0o600)
    return run


@pytest.mark.slow
def test_a_file_of_another_user_leaves_the_resume_point_unknown_never_moved_back(as_nobody, newest_shut: Path) -> None:
    run = newest_shut
    # the loop itself, as root, resumes from epoch 3: it is whole, so epoch 2 would be a silent step back
    assert loop_resume(run / "ckpt_3.pt", "bundled")[3] == 3
    shown = ckptdoctor(as_nobody, run.parent, "inspect", run.name)
    assert shown.code == 1
    assert "CKD215" in shown.stdout and "owned by root" in shown.stdout and "sudo -u root ckptdoctor inspect" in shown.stdout
    assert "Resume point unknown: epoch 3 if it is whole, else epoch 2" in shown.stdout
    assert "Resume from epoch 2" not in shown.stdout and "corrupt" not in shown.stdout
    report = json.loads(ckptdoctor(as_nobody, run.parent, "inspect", "--json", run.name).stdout)
    (judged,) = report["runs"]
    assert [c["status"] for c in judged["checkpoints"]] == ["complete", "complete", "unreadable"]
    assert judged["resume_depends_on"] == [3]
    assert [f["code"] for f in report["findings"]] == ["CKD215"] and report["findings"][0]["severity"] == "error"
    for command in (("inspect", "--resume"), ("inspect", "--resume-path"), ("verify", "--resume"), ("verify", "--resume-path")):
        asked = ckptdoctor(as_nobody, run.parent, *command, run.name)
        assert (asked.code, asked.stdout) == (1, ""), command  # cannot be verified: no index or path a script would resume from
        assert "depends on epoch 3, which this user cannot read" in asked.stderr


def test_repair_by_another_user_leaves_the_file_it_cannot_read_in_place(as_nobody, newest_shut: Path) -> None:
    run = newest_shut
    before = _digest(run / "ckpt_3.pt")
    repaired = ckptdoctor(as_nobody, run.parent, "repair", "--yes", run.name)
    assert repaired.code == 0, repaired.stderr
    assert "quarantined" not in repaired.stdout + repaired.stderr
    assert "this user cannot read it: never deleted or moved" in repaired.stdout
    assert sorted(p.name for p in run.iterdir() if p.name != ".ckptdoctor") == ["ckpt_1.pt", "ckpt_2.pt", "ckpt_3.pt"]
    assert _digest(run / "ckpt_3.pt") == before and stat.S_IMODE(os.stat(run / "ckpt_3.pt").st_mode) == 0o600
    assert not list((run / ".ckptdoctor").rglob("*.pt"))
    assert loop_resume(run / "ckpt_3.pt", "bundled")[3] == 3  # still where the loop goes on


def test_a_repair_that_acts_beside_an_unreadable_checkpoint_says_the_resume_point_is_unknown(as_nobody, newest_shut: Path) -> None:
    """The attack on issue 32: a repair that quarantined a broken epoch beside one this user cannot
    read ended "Resume from epoch 1", and the plan had said "epoch 3 if it is whole"."""
    run = newest_shut
    data = (run / "ckpt_2.pt").read_bytes()
    (run / "ckpt_2.pt").write_bytes(data[: len(data) // 2])
    _give(run, NOBODY)
    _shut(run / "ckpt_3.pt", 0o600)
    repaired = ckptdoctor(as_nobody, run.parent, "repair", "--yes", run.name)
    assert repaired.code == 0, repaired.stderr
    assert "quarantined 1 entry" in repaired.stdout + repaired.stderr
    assert "Resume point unknown: epoch 3 if it is whole, else epoch 1" in repaired.stdout
    assert "Resume from epoch 1" not in repaired.stdout


def test_a_prune_by_another_user_never_deletes_what_it_cannot_read(as_nobody, bundled_loop: Path, shared: Path) -> None:
    run = copy_run(bundled_loop, shared / "run")
    _give(run, NOBODY)
    _shut(run / "ckpt_1.pt", 0o600)
    pruned = ckptdoctor(as_nobody, run.parent, "prune", "--yes", "--keep-last", "1", run.name)
    assert pruned.code == 1  # something was skipped
    assert "epoch 1 (run/ckpt_1.pt) is one this user cannot read: skipped, not deleted" in pruned.stderr
    assert "finishes the job" not in pruned.stderr and "tries them again" not in pruned.stderr
    assert sorted(p.name for p in run.iterdir() if p.name != ".ckptdoctor") == ["ckpt_1.pt", "ckpt_3.pt"]
    assert loop_resume(run / "ckpt_3.pt", "bundled")[3] == 3
    assert loop_resume(run / "ckpt_1.pt", "bundled")[3] == 1  # whole all along: only its owner may say it goes


@pytest.fixture
def hf_shared(hf_trained: Path, shared: Path) -> Path:
    """A real HF Trainer's ``output_dir`` (steps 2, 4, 6), ``nobody``'s."""
    run = copy_run(hf_trained, shared / "out")
    _give(run, NOBODY)
    return run


def _loads(checkpoint: Path) -> None:
    """The files the Trainer resumes from load (torch, weights only): model, optimizer, scheduler."""
    import torch
    from safetensors.torch import load_file

    assert load_file(str(checkpoint / "model.safetensors"))
    assert torch.load(checkpoint / "optimizer.pt", weights_only=True)["state"]
    assert torch.load(checkpoint / "scheduler.pt", weights_only=True)


@pytest.mark.slow
def test_a_folder_that_cannot_be_listed_is_skipped_and_the_rest_of_the_prune_is_done(as_nobody, hf_shared: Path) -> None:
    run = hf_shared
    _shut(run / "checkpoint-2", 0o000)
    for attempt in range(2):  # the next prune is no different, and says so: no promise it cannot keep
        pruned = ckptdoctor(as_nobody, run.parent, "prune", "--yes", "--keep-last", "1", run.name)
        assert pruned.code == 1, pruned.stderr
        assert "step 2 (out/checkpoint-2) is one this user cannot read: skipped, not deleted" in pruned.stderr
        assert "A prune by this user skips them again" in pruned.stderr
        assert "finishes the job" not in pruned.stderr
        assert ("deleted 1 checkpoint" in pruned.stdout + pruned.stderr) is (attempt == 0)
        assert sorted(p.name for p in run.iterdir() if p.name != ".ckptdoctor") == ["checkpoint-2", "checkpoint-6"]
    (run / "checkpoint-2").chmod(0o755)
    assert sorted(p.name for p in (run / "checkpoint-2").iterdir()) == sorted(p.name for p in (run / "checkpoint-6").iterdir())
    _loads(run / "checkpoint-6")
    _loads(run / "checkpoint-2")


def test_a_folder_that_can_be_listed_but_not_searched_is_unreadable_not_dangling(as_nobody, hf_shared: Path) -> None:
    run = hf_shared
    (run / "checkpoint-6").chmod(0o444)
    report = json.loads(ckptdoctor(as_nobody, run.parent, "inspect", "--json", run.name).stdout)
    codes = [f["code"] for f in report["findings"]]
    assert "CKD113" not in codes and codes == ["CKD215"]
    (finding,) = report["findings"]
    assert finding["path"] == "out/checkpoint-6" and "may not list or search it" in finding["message"]
    assert "the resume point depends on it: step 6 if it is whole, else step 4" in finding["message"]
    assert [c["status"] for c in report["runs"][0]["checkpoints"]] == ["complete", "complete", "unreadable"]
    (run / "checkpoint-6").chmod(0o755)
    _loads(run / "checkpoint-6")  # it was whole: a resume from step 4 would have lost a save


def test_a_folder_no_one_may_list_outside_the_checkpoints_names_its_own_fixes(as_nobody, hf_shared: Path) -> None:
    run = hf_shared
    (run / "logs").mkdir()
    _shut(run / "logs", 0o700)
    report = json.loads(ckptdoctor(as_nobody, run.parent, "inspect", "--json", run.name).stdout)
    (finding,) = [f for f in report["findings"] if f["path"] == "out/logs"]
    assert finding["code"] == "CKD215" and "owned by root" in finding["message"]
    assert not [fix for f in report["findings"] for fix in f["fixes"] if "RUN_DIR" in fix]
    assert "`sudo -u root ckptdoctor inspect out/logs`" in finding["fixes"][0]
    assert [c["status"] for c in report["runs"][0]["checkpoints"]] == ["complete"] * 3


def test_access_denied_is_quiet_on_a_run_this_user_reads(as_nobody, hf_shared: Path) -> None:
    report = json.loads(ckptdoctor(as_nobody, hf_shared.parent, "inspect", "--json", hf_shared.name).stdout)
    assert "CKD215" not in [f["code"] for f in report["findings"]]
    assert report["runs"][0]["resume"]["index"] == 6 and report["runs"][0]["resume_depends_on"] == []


# --- item 10: a tree nested deeper than any walk recurses -----------------------------------------


def _nest(folder: Path, depth: int) -> list[str]:
    """``depth`` folders one inside the other in ``folder``, a file at the bottom; their paths, outermost first."""
    paths, here = [], str(folder)
    for _ in range(depth):
        here = os.path.join(here, "d")
        os.mkdir(here)
        paths.append(here)
    Path(here, "deepest").write_bytes(b"x")
    return paths


@pytest.mark.slow
def test_a_tree_thousands_of_levels_deep_in_a_doomed_checkpoint_is_left_with_a_reason(hf_trained: Path, tmp_path: Path, cli) -> None:
    run = copy_run(hf_trained, tmp_path / "out")
    nested = _nest(run / "checkpoint-2", 1500)
    try:
        _give(run, os.geteuid(), (*nested, os.path.join(nested[-1], "deepest")))
        pruned = cli("prune", "--yes", "--keep-last", "1", str(run))
        said = pruned.stdout + pruned.stderr
        assert pruned.exit_code == 0, said
        assert "internal error" not in said
        assert "holds folders nested more than 256 levels deep: left as it is" in said
        assert sorted(p.name for p in run.iterdir() if p.name != ".ckptdoctor") == ["checkpoint-2", "checkpoint-6"]
        assert Path(nested[-1], "deepest").read_bytes() == b"x"
        _loads(run / "checkpoint-6")
        _loads(run / "checkpoint-2")
    finally:
        for path in reversed(nested):  # shutil.rmtree recurses too
            for name in os.listdir(path):
                if name != "d":
                    os.unlink(os.path.join(path, name))
            os.rmdir(path)


def test_a_deepspeed_tag_this_user_cannot_list_is_unreadable_not_missing_shards(as_nobody, deepspeed_zero2, shared: Path) -> None:
    """The attack on issue 32: `global_step*` of another user, mode 700, was CKD105 "lacks 2 files
    that the run's other checkpoints name" besides CKD215: they may all be there."""
    run = copy_run(deepspeed_zero2.path, shared / "ds")
    _give(run, NOBODY)
    newest = sorted(run.glob("global_step*"), key=lambda path: int(path.name.removeprefix("global_step")))[-1]
    _shut(newest, 0o700)
    report = json.loads(ckptdoctor(as_nobody, run.parent, "inspect", "--json", run.name).stdout)
    codes = [f["code"] for f in report["findings"]]
    assert "CKD215" in codes and "CKD105" not in codes, report["findings"]


@pytest.mark.slow
def test_dry_runs_by_another_user_preview_a_run_whose_own_folder_is_shut_to_them(as_nobody, newest_shut: Path) -> None:
    """The attack on issue 32: with the run's `.ckptdoctor/` its owner's, mode 700 (a lock taken
    once), every dry run by a colleague exited 1 "Permission denied" and showed no plan."""
    run = newest_shut
    (run / ".ckptdoctor").mkdir()
    (run / ".ckptdoctor" / "lock").touch()
    (run / ".ckptdoctor").chmod(0o700)
    for command in (("prune", "--keep-last", "1", "--dry-run"), ("repair", "--dry-run"), ("repair", "--undo", "--dry-run")):
        previewed = ckptdoctor(as_nobody, run.parent, *command, run.name)
        assert previewed.code == 0, (command, previewed.stderr)
        assert "this user may not read it, so what earlier passes left there is not shown" in previewed.stdout + previewed.stderr
    acted = ckptdoctor(as_nobody, run.parent, "prune", "--keep-last", "1", "--yes", run.name)
    assert acted.code == 1 and "Permission denied" in acted.stderr  # acting still needs its owner
    assert sorted(p.name for p in run.glob("ckpt_*.pt")) == ["ckpt_1.pt", "ckpt_2.pt", "ckpt_3.pt"]


@pytest.mark.slow
@pytest.mark.parametrize(("depth", "deleted"), [(256, True), (257, False)])
def test_a_tree_at_the_depth_bound_is_deleted_and_one_past_it_left(
    hf_trained: Path, tmp_path: Path, cli, depth: int, deleted: bool
) -> None:
    """The attack on issue 32: a tree exactly 256 levels deep was planned for deletion, then left
    as "written, opened or replaced since the plan", on every prune: the planner and the deleter
    counted the levels apart."""
    run = copy_run(hf_trained, tmp_path / "out")
    nested = _nest(run / "checkpoint-2", depth)
    _give(run, os.geteuid(), (*nested, os.path.join(nested[-1], "deepest")))
    pruned = cli("prune", "--yes", "--keep-last", "1", str(run))
    said = pruned.stdout + pruned.stderr
    assert pruned.exit_code == 0, said
    assert "since the plan was made" not in said
    assert (run / "checkpoint-2").exists() is not deleted
    assert ("nested more than 256 levels deep" in said) is not deleted


def test_a_repair_with_no_readable_complete_checkpoint_says_it_depends_on_what_this_user_cannot_read(as_nobody, newest_shut: Path) -> None:
    """The attack on issue 32: it said "no complete epoch (CKD110)", whose fixes say to restore
    from a backup, while the newest epoch may be whole: only its owner can tell."""
    run = newest_shut
    for name in ("ckpt_1.pt", "ckpt_2.pt"):
        data = (run / name).read_bytes()
        (run / name).write_bytes(data[: len(data) // 2])
    _give(run, NOBODY)
    _shut(run / "ckpt_3.pt", 0o600)
    repaired = ckptdoctor(as_nobody, run.parent, "repair", "--dry-run", run.name)
    said = repaired.stdout + repaired.stderr
    assert "may resume from epoch 3, which this user cannot read (CKD215" in said, said
    assert "CKD110" not in said


def test_a_shut_folder_inside_a_checkpoint_is_named_by_its_path_in_the_run(as_nobody, hf_shared: Path) -> None:
    """The attack on issue 32: CKD215 said "sub/ is shut to this user", not in which checkpoint."""
    run = hf_shared
    inner = run / "checkpoint-4" / "sub"
    inner.mkdir()
    (inner / "extra.bin").write_bytes(b"x")
    _shut(inner, 0o700)
    report = json.loads(ckptdoctor(as_nobody, run.parent, "inspect", "--json", run.name).stdout)
    (shut,) = [f for f in report["findings"] if f["code"] == "CKD215"]
    assert shut["message"].startswith("checkpoint-4/sub/ is shut to this user"), shut["message"]
