"""``ckptdoctor repair`` end to end on burn and ``torch.save`` runs: the plan and its reasons,
--dry-run, --yes, what it never touches, pointers, --undo, locking, and crash safety (SIGKILL at
random moments loses nothing; the next repair or undo finishes the job)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import frameworks
import pytest
from test_prune import only_process_notes

from ckptdoctor.testing import write_burn_run

pytestmark = pytest.mark.usefixtures("fake_machine")  # the process table and clock are the test's (conftest)

DAY = 86400


def age(folder: Path, seconds: float = DAY) -> None:
    when = time.time() - seconds
    for path in [folder, *folder.rglob("*")]:
        if ".ckptdoctor" not in path.parts:
            os.utime(path, (when, when), follow_symlinks=False)


def tree(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` (outside ckptdoctor's own folder): file digests, link targets."""
    found = {}
    for path in sorted(folder.rglob("*")):
        relative = str(path.relative_to(folder))
        if relative.startswith(".ckptdoctor"):
            continue
        if path.is_symlink():
            found[relative] = "-> " + os.readlink(path)
        elif path.is_file():
            found[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[relative] = "dir"
    return found


def broken_burn_run(tmp_path: Path, epochs: range = range(1, 8)) -> Path:
    """Epochs 1..7 saved; the save of 7 lost its optimizer; 8 died while writing its model."""
    folder = tmp_path / "run" / "checkpoint"
    write_burn_run(folder, epochs)
    (folder / f"optim-{epochs[-1]}.bpk").unlink()
    (folder / f"model-{epochs[-1] + 1}.bpk.tmp").write_bytes(b"\0" * 100)
    age(folder)
    return folder


def quarantined(folder: Path) -> set[str]:
    return {
        str(p.relative_to(q / "files"))
        for q in (folder / ".ckptdoctor" / "quarantine").glob("*")
        for p in (q / "files").rglob("*")
        if p.is_file() or p.is_symlink()
    }


def plan_of(result) -> dict[tuple[str, ...], dict]:
    return {tuple(Path(p).name for p in item["paths"]): item for item in result.json["plan"]}


def errors(cli, folder: Path) -> list[dict]:
    return [f for f in cli("inspect", "--json", folder).json["findings"] if f["severity"] == "error"]


# --- the plan ---------------------------------------------------------------------------------------


def test_dry_run_shows_each_action_with_the_rules_it_fixes_and_changes_nothing(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    before = tree(folder)
    result = cli("repair", "--json", "--dry-run", folder)
    assert result.exit_code == 0, result.stderr
    assert result.json["dry_run"] is True and result.json["command"] == "repair"
    plan = plan_of(result)
    assert plan[("model-7.bpk", "scheduler-7.bpk")]["action"] == "quarantine"
    assert plan[("model-7.bpk", "scheduler-7.bpk")]["reasons"] == [
        "incomplete and newer than the resume point (epoch 6)",
        "fixes CKD101 missing-optimizer",
    ]
    temp = plan[("model-8.bpk.tmp",)]
    assert temp["action"] == "quarantine" and temp["index"] == 8
    assert "CKD202 temp-file" in temp["reasons"][-1]
    assert plan[("model-6.bpk", "optim-6.bpk", "scheduler-6.bpk")]["action"] == "keep"
    assert {item["action"] for item in result.json["plan"]} == {"keep", "quarantine"}
    assert tree(folder) == before
    assert not (folder / ".ckptdoctor" / "quarantine").exists()
    human = cli("repair", "--dry-run", folder)
    assert "About to quarantine 3 entries (from 2 epochs)" in human.stdout
    assert "then resume from epoch 6" in human.stdout
    assert "Dry run: nothing was moved." in human.stderr


def test_off_a_terminal_without_yes_nothing_is_moved(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    before = tree(folder)
    result = cli("repair", folder)
    assert result.exit_code == 2
    assert "--yes" in result.stderr and "nothing was moved" in result.stderr
    assert tree(folder) == before


def test_yes_quarantines_exactly_the_plan_and_inspect_is_then_clean(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    before = tree(folder)
    assert errors(cli, folder)
    result = cli("repair", "--yes", folder)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip().splitlines()[-2].startswith("Resume from epoch 6: model-6.bpk")
    assert result.stdout.strip().splitlines()[-1].startswith("  how: pass `.checkpoint(6)`")
    assert "repair --undo" in result.stderr
    moved = {"model-7.bpk", "scheduler-7.bpk", "model-8.bpk.tmp"}
    assert quarantined(folder) == moved
    after = tree(folder)
    assert after == {name: digest for name, digest in before.items() if name not in moved}
    assert errors(cli, folder) == []
    assert cli("inspect", "--json", folder).json["runs"][0]["resume"]["index"] == 6
    manifest = json.loads(next((folder / ".ckptdoctor" / "quarantine").glob("*/manifest.json")).read_text())
    assert manifest["state"] == "done" and {e["path"] for e in manifest["entries"]} == moved


def test_a_second_repair_has_nothing_to_do(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    cli("repair", "--yes", folder)
    again = cli("repair", "--json", "--yes", folder)
    assert again.exit_code == 0
    assert {item["action"] for item in again.json["plan"]} == {"keep"}
    third = cli("repair", folder)
    assert (third.stdout + third.stderr).count("Nothing to repair") == 1, "said once"
    assert "Nothing to repair" in cli("repair", "-o", tmp_path / "plan.txt", folder).stderr, "said on the terminal"


def test_a_healthy_run_is_left_alone(tmp_path, cli):
    folder = tmp_path / "run"
    write_burn_run(folder, range(1, 4))
    age(folder)
    before = tree(folder)
    result = cli("repair", "--json", "--yes", folder)
    assert result.exit_code == 0
    assert [(item["index"], item["action"]) for item in result.json["plan"]] == [(3, "keep")]
    assert tree(folder) == before and not (folder / ".ckptdoctor" / "quarantine").exists()


def test_no_complete_checkpoint_is_refused_and_nothing_moves(tmp_path, cli):
    folder = tmp_path / "run"
    write_burn_run(folder, range(1, 3))
    for optim in folder.glob("optim-*.bpk"):
        optim.unlink()
    (folder / "model-3.bpk.tmp").write_bytes(b"x")
    age(folder)
    before = tree(folder)
    result = cli("repair", "--yes", folder)
    assert result.exit_code == 1
    assert "CKD110" in result.stderr and "nothing was moved" in result.stderr
    assert tree(folder) == before


def test_older_broken_checkpoints_are_left_to_prune_but_their_leftovers_go(tmp_path, cli):
    folder = tmp_path / "run"
    write_burn_run(folder, range(1, 6))
    (folder / "optim-2.bpk").unlink()  # an old incomplete epoch: prune's business
    (folder / "scheduler-3.bpk").write_bytes(b"")  # an empty file in an old epoch
    (folder / "optim-4.bpk.tmp").write_bytes(b"\0" * 10)  # a leftover beside a complete epoch
    age(folder)
    result = cli("repair", "--json", "--yes", folder)
    plan = {item["index"]: item for item in result.json["plan"]}
    assert plan[2]["action"] == "keep" and "prune deletes it" in plan[2]["reasons"][0]
    assert plan[3]["action"] == "quarantine" and [Path(p).name for p in plan[3]["paths"]] == ["scheduler-3.bpk"]
    assert "CKD201 empty-file" in plan[3]["reasons"][-1]
    assert [Path(p).name for p in plan[4]["paths"]] == ["optim-4.bpk.tmp"]
    assert quarantined(folder) == {"scheduler-3.bpk", "optim-4.bpk.tmp"}
    remaining = {f["code"] for f in cli("inspect", "--json", folder).json["findings"]}
    assert "CKD201" not in remaining and "CKD202" not in remaining
    assert (folder / "optim-4.bpk").is_file() and (folder / "model-4.bpk").is_file()


# --- what repair never touches ----------------------------------------------------------------------


def test_a_checkpoint_written_within_min_age_is_left_alone(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    os.utime(folder / "model-7.bpk")  # just written: the save may still be going on
    result = cli("repair", "--json", "--yes", folder)
    plan = {item["index"]: item for item in result.json["plan"]}
    assert plan[7]["action"] == "keep"
    assert any(reason.startswith("modified ") and "--min-age 10min" in reason for reason in plan[7]["reasons"])
    assert (folder / "model-7.bpk").is_file() and (folder / "scheduler-7.bpk").is_file()
    assert quarantined(folder) == {"model-8.bpk.tmp"}
    zero = cli("repair", "--json", "--yes", "--min-age", "0", folder)
    assert {item["index"] for item in zero.json["plan"] if item["action"] == "quarantine"} == {7}


@pytest.mark.real_processes
def test_a_file_held_open_by_a_live_process_is_not_moved(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    code = "import sys,time; f=open(sys.argv[1],'rb'); print('ok', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder / "scheduler-7.bpk")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        result = cli("repair", "--json", "--yes", folder)
        plan = {item["index"]: item for item in result.json["plan"]}
        assert plan[7]["action"] == "keep" and f"open in process {holder.pid}" in plan[7]["reasons"]
        assert (folder / "scheduler-7.bpk").is_file()
    finally:
        holder.kill()
        holder.wait()


def test_a_symlink_out_of_the_run_is_moved_as_a_link_never_followed(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (folder / "model-7.bpk").rename(outside / "model-7.bpk")
    (folder / "model-7.bpk").symlink_to(outside / "model-7.bpk")
    target = hashlib.sha256((outside / "model-7.bpk").read_bytes()).hexdigest()
    age(folder)
    assert cli("repair", "--yes", folder).exit_code == 0
    assert not os.path.lexists(folder / "model-7.bpk")
    stored = next((folder / ".ckptdoctor" / "quarantine").glob("*/files/model-7.bpk"))
    assert stored.is_symlink() and os.readlink(stored) == str(outside / "model-7.bpk")
    assert hashlib.sha256((outside / "model-7.bpk").read_bytes()).hexdigest() == target


def test_a_run_that_cannot_be_written_fails_clearly_and_undo_puts_back_what_moved(tmp_path, cli, monkeypatch):
    folder = broken_burn_run(tmp_path)
    before = tree(folder)
    real_rename = os.rename
    calls = []

    def refuse_second(source, target, *args, **kwargs):
        calls.append(source)
        if len(calls) == 2:
            raise PermissionError(13, "Permission denied", source)
        real_rename(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "rename", refuse_second)
    result = cli("repair", "--yes", folder)
    assert result.exit_code == 1
    assert "Permission denied" in result.stderr and "repair --undo" in result.stderr
    # the entry that could not move stays in the run; the others moved, and are kept
    assert len(quarantined(folder)) == len(calls) - 1 >= 1
    monkeypatch.undo()
    assert cli("repair", "--undo", "--yes", folder).exit_code == 0
    assert tree(folder) == before


def test_a_read_only_run_fails_with_a_clear_message_and_nothing_half_done(tmp_path, cli, monkeypatch):
    folder = broken_burn_run(tmp_path)
    before = tree(folder)
    real_mkdir = os.mkdir

    def read_only(path, *args, **kwargs):
        if ".ckptdoctor" in str(path):
            raise OSError(30, "Read-only file system", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", read_only)
    result = cli("repair", "--yes", folder)
    assert result.exit_code == 1
    assert "Read-only file system" in result.stderr
    assert tree(folder) == before


def test_a_locked_run_exits_3_naming_the_holder(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    (folder / ".ckptdoctor").mkdir()
    code = (
        "import fcntl, json, os, sys, time; h = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
        "fcntl.flock(h, fcntl.LOCK_EX); os.write(h, json.dumps({'pid': os.getpid(), 'host': 'node3', 'user': 'bo', 'started': time.time()}).encode());"
        "print('locked', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder / ".ckptdoctor" / "lock")], stdout=subprocess.PIPE, text=True)
    before = tree(folder)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        for args in (("repair", "--yes"), ("repair", "--undo", "--yes")):
            result = cli(*args, folder)
            assert result.exit_code == 3
            assert f"pid {holder.pid} on node3 by bo" in result.stderr
        assert tree(folder) == before
    finally:
        holder.kill()
        holder.wait()


# --- pointers ----------------------------------------------------------------------------------------


def deepspeed_run(folder: Path, steps=(100, 200, 300), broken=300, latest: str | None = "global_step300") -> Path:
    """A DeepSpeed save_dir, aged, whose tag ``broken`` lost one rank's optimizer partition."""
    frameworks.deepspeed_run(folder, steps, latest=False if latest is None else latest)
    if broken is not None:
        (folder / f"global_step{broken}" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    age(folder)
    return folder


def test_deepspeed_latest_is_repointed_and_undo_restores_it(tmp_path, cli):
    folder = deepspeed_run(tmp_path / "ds")
    before = tree(folder)
    dry = cli("repair", "--json", "--dry-run", folder)
    repoint = next(item for item in dry.json["plan"] if item["action"] == "repoint")
    assert repoint["writes"] == {"text": "global_step200", "kind": "text"}
    assert "CKD113 stale-pointer" in repoint["reasons"][0]
    assert cli("repair", "--yes", folder).exit_code == 0
    assert (folder / "latest").read_bytes() == b"global_step200"
    assert not (folder / "global_step300").exists()
    assert errors(cli, folder) == []
    assert cli("repair", "--undo", "--yes", folder).exit_code == 0
    assert tree(folder) == before
    assert not any((folder / ".ckptdoctor" / "quarantine").iterdir())


def test_a_missing_latest_is_created_and_undo_removes_it(tmp_path, cli):
    folder = deepspeed_run(tmp_path / "ds", broken=None, latest=None)
    before = tree(folder)
    result = cli("repair", "--json", "--yes", folder)
    assert [item["action"] for item in result.json["plan"] if item["action"] != "keep"] == ["repoint"]
    assert (folder / "latest").read_text() == "global_step300"
    assert errors(cli, folder) == []
    assert cli("repair", "--undo", "--yes", folder).exit_code == 0
    assert tree(folder) == before and not (folder / "latest").exists()


def test_a_pointer_written_within_min_age_is_left_alone(tmp_path, cli):
    folder = deepspeed_run(tmp_path / "ds", broken=None, latest="global_step900")
    os.utime(folder / "latest")
    result = cli("repair", "--json", "--yes", folder)
    item = next(item for item in result.json["plan"] if item["paths"][0].endswith("latest"))
    assert item["action"] == "keep" and "(--min-age 10min): left as it is" in item["reasons"][-1]
    assert (folder / "latest").read_text() == "global_step900"


def test_undo_refuses_a_pointer_changed_since_and_a_file_that_exists_again(tmp_path, cli):
    folder = deepspeed_run(tmp_path / "ds")
    cli("repair", "--yes", folder)
    (folder / "latest").write_text("global_step100")  # the trainer wrote a new one since
    result = cli("repair", "--undo", "--yes", folder)
    assert result.exit_code == 1
    assert "latest" in result.stderr and "Nothing was restored" in result.stderr
    assert not (folder / "global_step300").exists(), "nothing is restored while anything is in the way"
    (folder / ".ckptdoctor" / "quarantine").glob("*")
    os.unlink(folder / "latest")
    (folder / "global_step300").mkdir()  # and a folder of the same name appeared
    result = cli("repair", "--undo", "--json", "--yes", folder)
    assert result.exit_code == 1
    blocked = [item for item in result.json["plan"] if item["action"] == "keep"]
    assert [Path(item["paths"][0]).name for item in blocked] == ["global_step300"]
    assert "exists again in the run: not overwritten" in blocked[0]["reasons"][-1]
    assert not any((folder / "global_step300").iterdir())


def megatron_run(folder: Path, iterations=(1000, 2000, 3000), partial=3000, tracker="3000") -> Path:
    """A Megatron save folder of one rank, aged, whose iteration ``partial`` was never written."""
    frameworks.megatron_run(folder, iterations, ranks=1, tracker=tracker)
    if partial is not None:
        (folder / f"iter_{partial:07d}" / "mp_rank_00" / "model_optim_rng.pt").unlink()
    age(folder)
    return folder


@pytest.mark.slow
def test_megatron_tracker_naming_a_partial_iteration_is_repointed(tmp_path, cli):
    folder = megatron_run(tmp_path / "mg")
    before = tree(folder)
    assert cli("repair", "--yes", folder).exit_code == 0
    assert (folder / "latest_checkpointed_iteration.txt").read_text() == "2000"
    assert not (folder / "iter_0003000").exists()
    assert errors(cli, folder) == []
    cli("repair", "--undo", "--yes", folder)
    assert tree(folder) == before


@pytest.mark.slow
def test_megatron_iteration_newer_than_the_tracker_is_quarantined_and_the_tracker_kept(tmp_path, cli):
    folder = megatron_run(tmp_path / "mg", partial=None, tracker="2000")
    result = cli("repair", "--json", "--yes", folder)
    plan = {Path(item["paths"][0]).name: item for item in result.json["plan"] if item["paths"]}
    assert plan["iter_0003000"]["action"] == "quarantine"
    assert "latest_checkpointed_iteration.txt" not in plan
    assert (folder / "latest_checkpointed_iteration.txt").read_text() == "2000"


def lightning_file(path: Path, epoch: int) -> None:
    import torch

    torch.save(
        {"epoch": epoch, "global_step": epoch * 10, "state_dict": {"w": torch.zeros(2)}, "optimizer_states": [{}], "lr_schedulers": [{}]},
        path,
    )


def test_a_dangling_last_ckpt_symlink_is_repointed_at_the_resume_point(tmp_path, cli):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for epoch in (1, 2):
        lightning_file(folder / f"epoch={epoch}-step={epoch * 10}.ckpt", epoch)
    (folder / "last.ckpt").symlink_to("epoch=3-step=30.ckpt")  # pruned by hand
    age(folder)
    before = tree(folder)
    assert "CKD113" in {f["code"] for f in errors(cli, folder)}
    result = cli("repair", "--yes", folder)
    assert result.exit_code == 0, result.stderr
    assert os.readlink(folder / "last.ckpt") == "epoch=2-step=20.ckpt"
    assert errors(cli, folder) == []
    cli("repair", "--undo", "--yes", folder)
    assert tree(folder) == before


# --- undo ---------------------------------------------------------------------------------------------


def test_undo_puts_back_the_latest_quarantine_or_the_one_named(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    before = tree(folder)
    cli("repair", "--yes", folder)
    (folder / "optim-3.bpk.partial").write_bytes(b"\0")
    age(folder)
    cli("repair", "--yes", folder)
    made = {json.loads((q / "manifest.json").read_text())["created"]: q.name for q in (folder / ".ckptdoctor" / "quarantine").iterdir()}
    first, second = (made[when] for when in sorted(made))
    undo = cli("repair", "--undo", "--json", "--dry-run", folder)
    assert [Path(p).name for item in undo.json["plan"] for p in item["paths"]] == ["optim-3.bpk.partial"]
    assert cli("repair", "--undo", "--id", first, "--yes", folder).exit_code == 0
    assert (folder / "model-7.bpk").is_file() and not (folder / "optim-3.bpk.partial").exists()
    assert cli("repair", "--undo", "--yes", folder).exit_code == 0
    assert tree(folder) == {**before, "optim-3.bpk.partial": tree(folder)["optim-3.bpk.partial"]}
    assert not any((folder / ".ckptdoctor" / "quarantine").iterdir())
    assert cli("repair", "--undo", "--id", second, folder).exit_code == 2
    nothing = cli("repair", "--undo", "--yes", folder)
    assert nothing.exit_code == 0 and "nothing to undo" in nothing.stderr


def test_id_without_undo_is_a_usage_error(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    result = cli("repair", "--id", "x", folder)
    assert result.exit_code == 2 and "--undo" in result.stderr


# --- crash safety ---------------------------------------------------------------------------------------


def _ckptdoctor(*args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ckptdoctor", *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def _kill_soon_after(process: subprocess.Popen[str], folder: Path, rng: random.Random, marker: str) -> None:
    """SIGKILL once the command has started acting (``marker`` exists), after a few random
    milliseconds; or at a random moment when ``marker`` is empty."""
    quarantine = folder / ".ckptdoctor" / "quarantine"
    deadline = time.monotonic() + 30
    if marker:
        while time.monotonic() < deadline and process.poll() is None:
            if quarantine.is_dir() and any(quarantine.glob(marker)):
                time.sleep(rng.uniform(0, 0.01))
                break
            time.sleep(0.0002)
    else:
        time.sleep(rng.uniform(0.05, 0.6))
    process.send_signal(signal.SIGKILL)
    process.wait()


def _crashing_run(tmp_path: Path) -> tuple[Path, set[str]]:
    """A burn run whose 200 newest epochs are broken (each missing its optimizer), with the
    names repair must quarantine."""
    folder = tmp_path / "run"
    write_burn_run(folder, range(1, 301))
    doomed = set()
    for epoch in range(101, 301):
        (folder / f"optim-{epoch}.bpk").unlink()
        doomed |= {f"model-{epoch}.bpk", f"scheduler-{epoch}.bpk"}
    age(folder)
    return folder, doomed


@pytest.mark.slow
def test_sigkill_during_repair_and_undo_loses_nothing_and_a_rerun_finishes(tmp_path):
    folder, doomed = _crashing_run(tmp_path)
    before = tree(folder)
    kept = {name: digest for name, digest in before.items() if name not in doomed}
    rng = random.Random(5)
    interrupted = 0
    attempt = -1
    while attempt < 11 or (not interrupted and attempt < 35):  # a loaded machine lands kills outside the moves: try on
        attempt += 1
        process = _ckptdoctor("repair", "--yes", folder)
        _kill_soon_after(process, folder, rng, "*/manifest.json" if attempt % 2 else "")
        now = tree(folder)
        assert {name: now.get(name) for name in kept} == kept, "a file that was to be kept changed or vanished"
        assert set(now) | quarantined(folder) == set(before), "every file is in the run or in the quarantine"
        interrupted += bool(quarantined(folder)) and bool(set(now) & doomed)
        if attempt % 3 == 2:  # sometimes undo (and kill that too) before repairing again
            process = _ckptdoctor("repair", "--undo", "--yes", folder)
            _kill_soon_after(process, folder, rng, "")
            assert set(tree(folder)) | quarantined(folder) == set(before)
            _undo_everything(folder)
            assert tree(folder) == before
    assert interrupted, "no kill landed in the middle of a repair"
    finishing = _ckptdoctor("repair", "--yes", folder)
    assert finishing.wait(timeout=120) == 0, finishing.stderr.read() if finishing.stderr else ""
    assert tree(folder) == kept
    assert quarantined(folder) == doomed
    for manifest in (folder / ".ckptdoctor" / "quarantine").glob("*/manifest.json"):
        assert json.loads(manifest.read_text())["state"] == "done"
    _undo_everything(folder)
    assert tree(folder) == before


def _undo_everything(folder: Path) -> None:
    """Undo every quarantine, newest first (each interrupted repair that a later one finished
    is a quarantine of its own)."""
    for _ in range(50):
        if not any((folder / ".ckptdoctor" / "quarantine").iterdir()):
            return
        assert _ckptdoctor("repair", "--undo", "--yes", folder).wait(timeout=120) == 0
    raise AssertionError("undo does not empty the quarantine")


def test_an_interrupted_repair_is_closed_with_what_it_moved_and_the_rest_is_asked_anew(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    plan = cli("repair", "--json", "--dry-run", folder)
    assert plan.exit_code == 0
    quarantine = folder / ".ckptdoctor" / "quarantine" / "20260101-000000-deadbeef"
    (quarantine / "files").mkdir(parents=True)
    entries = [_line(folder, name, 7) for name in ("model-7.bpk", "scheduler-7.bpk")]
    (quarantine / "manifest.json").write_text(
        json.dumps({"version": 1, "run": str(folder), "created": 0, "state": "repairing", "entries": entries, "pointers": []})
    )
    os.rename(folder / "model-7.bpk", quarantine / "files" / "model-7.bpk")  # killed after the first move
    dry = cli("repair", "--dry-run", folder)
    assert "an interrupted repair left" in dry.stderr and (folder / "scheduler-7.bpk").exists()
    unasked = cli("repair", folder)  # off a terminal, without --yes: nothing more moves
    assert unasked.exit_code == 2 and "closed an interrupted repair" in unasked.stderr
    assert (folder / "scheduler-7.bpk").exists(), "the manifest is a record, not an order: the rest waits for a yes"
    assert {p.name for p in (quarantine / "files").iterdir()} == {"model-7.bpk"}
    assert json.loads((quarantine / "manifest.json").read_text())["state"] == "done"
    result = cli("repair", "--yes", folder)
    assert result.exit_code == 0, result.stderr
    assert not (folder / "scheduler-7.bpk").exists() and not (folder / "model-8.bpk.tmp").exists(), "planned anew and moved"
    # the undo the closing note names puts back what the killed repair moved, not the newest quarantine
    (undo,) = re.findall(r"`(ckptdoctor repair --undo [^`]+)`", unasked.stderr)
    assert "--id 20260101-000000-deadbeef" in undo and "--no-recurse" in undo
    assert cli(*shlex.split(undo)[1:], "--yes").exit_code == 0
    assert (folder / "model-7.bpk").exists() and not (folder / "scheduler-7.bpk").exists()


def _line(folder: Path, name: str, index: int) -> dict:
    """A manifest line as ``repair`` writes it: the entry's identity (device, inode, size, times) as planned."""
    from ckptdoctor.actions._confine import identity

    return {"path": name, "index": index, "reasons": ["r"], "bytes": 1, "identity": list(identity(os.lstat(folder / name)))}


def _interrupted(folder: Path, entries: list[dict], pointers: list[dict] | None = None, written: float = 0.0) -> Path:
    """A quarantine as a repair killed part-way leaves it: manifest written at ``written``."""
    quarantine = folder / ".ckptdoctor" / "quarantine" / "20260101-000000-deadbeef"
    (quarantine / "files").mkdir(parents=True)
    manifest = {"version": 1, "run": str(folder), "created": written, "state": "repairing", "entries": entries, "pointers": pointers or []}
    (quarantine / "manifest.json").write_text(json.dumps(manifest))
    os.utime(quarantine / "manifest.json", (written, written))
    return quarantine


@pytest.mark.real_processes
def test_an_interrupted_repair_does_not_take_what_was_written_after_it(tmp_path, cli):
    folder = deepspeed_run(tmp_path / "ds")
    lines = [_line(folder, name, 300) for name in ("global_step300", "global_step100")]
    quarantine = _interrupted(folder, lines, written=time.time() - DAY / 2)
    os.utime(folder / "global_step300" / "mp_rank_00_model_states.pt")  # rewritten since, inside the folder
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys,time; f=open(sys.argv[1],'rb'); print('ok', flush=True); time.sleep(60)", str(folder / "global_step100" / "mp_rank_00_model_states.pt")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        result = cli("repair", "--json", "--yes", "--min-age", "0", folder)
        assert result.exit_code == 0, result.stderr
    finally:
        holder.kill()
        holder.wait()
    assert not any((quarantine / "files").iterdir()), "neither folder was still as the manifest found it"
    assert (folder / "global_step100" / "mp_rank_00_model_states.pt").is_file()


def test_a_manifest_naming_paths_outside_the_run_is_refused(tmp_path, cli):
    folder = deepspeed_run(tmp_path / "ds")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    _interrupted(
        folder,
        [],
        [{"path": "../../victim.txt", "index": 200, "reasons": ["r"], "text": "global_step200", "kind": "text", "existed": True}],
    )
    for args in (("repair", "--yes"), ("repair", "--undo", "--yes")):
        result = cli(*args, folder)
        assert result.exit_code == 1
        assert "not a path inside the run" in result.stderr
    assert victim.read_text() == "keep me"


def test_a_symlinked_own_folder_is_not_followed_out_of_the_run(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (folder / ".ckptdoctor").symlink_to(elsewhere)
    before = tree(folder)
    for args in (("repair", "--yes"), ("prune", "--yes", "--keep-last", "1")):
        result = cli(*args, folder)
        assert result.exit_code == 1
        assert "is a symlink" in result.stderr
    assert tree(folder) == before and not any(elsewhere.iterdir())


def test_an_undo_killed_between_link_and_unlink_is_finished_by_the_next(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    before = tree(folder)
    cli("repair", "--yes", folder)
    quarantine = next((folder / ".ckptdoctor" / "quarantine").iterdir())
    manifest = json.loads((quarantine / "manifest.json").read_text())
    (quarantine / "manifest.json").write_text(json.dumps({**manifest, "state": "undoing"}))
    os.link(quarantine / "files" / "model-7.bpk", folder / "model-7.bpk")  # linked back, not yet unlinked
    result = cli("repair", "--undo", "--yes", folder)
    assert result.exit_code == 0, result.stderr
    assert tree(folder) == before
    assert not quarantine.exists()


def test_undo_leaves_a_pointer_rewritten_after_its_plan(tmp_path, cli, monkeypatch):
    import ckptdoctor.actions

    folder = deepspeed_run(tmp_path / "ds")
    cli("repair", "--yes", folder)
    real_restore = ckptdoctor.actions.restore

    def trainer_writes_first(found, root):
        (folder / "latest").write_text("global_step400")  # while the prompt waited
        return real_restore(found, root)

    monkeypatch.setattr(ckptdoctor.actions, "restore", trainer_writes_first)
    result = cli("repair", "--undo", "--yes", folder)
    assert (folder / "latest").read_text() == "global_step400", "the trainer's newer pointer is kept"
    assert (folder / "global_step300").is_dir(), "what was moved is put back"
    assert result.exit_code == 1 and "latest changed in the run while undoing" in result.stderr
    kept = next((folder / ".ckptdoctor" / "quarantine").glob("*/files/latest"))
    assert kept.read_text() == "global_step300", "the old pointer stays in the quarantine"


def test_json_plan_is_the_whole_document(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    result = cli("repair", "--json", "--yes", folder)
    body = result.json
    assert body["schema"] == "ckptdoctor.report.v1" and body["dry_run"] is False
    assert body["runs"][0]["resume"]["index"] == 6
    assert {f["code"] for f in body["findings"]} >= {"CKD101", "CKD202"}, "the report is the one repair acted on"
    assert result.stderr.count("quarantined") == 1


@pytest.mark.parametrize("flag", ["--quiet", "-q"])
def test_quiet_prints_nothing_on_success(tmp_path, cli, flag):
    folder = broken_burn_run(tmp_path)
    result = cli("repair", "--yes", flag, folder)
    assert result.exit_code == 0 and result.stdout == "" and only_process_notes(result.stderr)
    assert quarantined(folder)


def test_what_a_repair_killed_before_its_manifest_left_is_swept_and_nothing_else(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    quarantine = folder / ".ckptdoctor" / "quarantine"
    (quarantine / "20260101-000000-aaaaaaaa" / "files").mkdir(parents=True)
    (quarantine / "20260101-000000-aaaaaaaa" / "manifest.json.tmp").write_text('{"vers')
    (quarantine / "20260101-000000-bbbbbbbb" / "files").mkdir(parents=True)
    (quarantine / "20260101-000000-bbbbbbbb" / "files" / "someone.bin").write_bytes(b"not ours to remove")
    (folder / ".ckptdoctor" / "pointer-0123abcd.tmp").write_text("global_step1")
    assert cli("repair", "--dry-run", folder).exit_code == 0
    assert (quarantine / "20260101-000000-aaaaaaaa").exists(), "a dry run changes nothing"
    assert cli("repair", "--yes", folder).exit_code == 0
    assert not (quarantine / "20260101-000000-aaaaaaaa").exists()
    assert not (folder / ".ckptdoctor" / "pointer-0123abcd.tmp").exists()
    assert (quarantine / "20260101-000000-bbbbbbbb" / "files" / "someone.bin").read_bytes() == b"not ours to remove"


@pytest.mark.parametrize("command", [("repair",), ("repair", "--undo"), ("prune", "--keep-last", "1")])
def test_a_single_file_is_refused_naming_its_folder(tmp_path, cli, command):
    folder = broken_burn_run(tmp_path)
    before = tree(folder)
    result = cli(*command, "--yes", folder / "model-7.bpk")
    assert result.exit_code == 2
    assert "is one file" in result.stderr and "give the folder that holds it" in result.stderr
    assert tree(folder) == before


def test_a_damaged_manifest_stops_repair_with_a_clear_message(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    cli("repair", "--yes", folder)
    manifest = next((folder / ".ckptdoctor" / "quarantine").glob("*/manifest.json"))
    manifest.write_text("{not json")
    for args in (("repair", "--yes"), ("repair", "--undo", "--yes")):
        result = cli(*args, folder)
        assert result.exit_code == 1
        assert str(manifest.relative_to(tmp_path)) in result.stderr.replace(str(tmp_path) + "/", "") and "cannot be read" in result.stderr
    assert quarantined(folder) == {"model-7.bpk", "scheduler-7.bpk", "model-8.bpk.tmp"}


def test_what_is_written_while_the_prompt_waited_is_left(tmp_path, cli, monkeypatch):
    import ckptdoctor.actions

    folder = broken_burn_run(tmp_path)
    real_quarantine = ckptdoctor.actions.quarantine

    def trainer_writes_first(plan, since, busy=frozenset(), seen=None):
        time.sleep(0.01)
        (folder / "model-7.bpk").write_bytes((folder / "model-7.bpk").read_bytes())
        return real_quarantine(plan, since, busy, seen)

    monkeypatch.setattr(ckptdoctor.actions, "quarantine", trainer_writes_first)
    result = cli("repair", "--yes", folder)
    assert result.exit_code == 0, result.stderr
    assert (folder / "model-7.bpk").is_file() and (folder / "scheduler-7.bpk").is_file(), "none of epoch 7 moves"
    assert quarantined(folder) == {"model-8.bpk.tmp"}
    assert "left 2 entries written, opened or replaced since the plan was made" in result.stderr
    manifest = json.loads(next((folder / ".ckptdoctor" / "quarantine").glob("*/manifest.json")).read_text())
    assert [line["path"] for line in manifest["entries"]] == ["model-8.bpk.tmp"], "the manifest lists what moved"


def test_undo_of_a_repair_killed_before_it_moved_anything_removes_its_quarantine(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    before = tree(folder)
    quarantine = _interrupted(folder, [_line(folder, "model-7.bpk", 7)], written=time.time())
    result = cli("repair", "--undo", "--yes", folder)
    assert result.exit_code == 0 and "Nothing to restore" in result.stderr
    assert not quarantine.exists() and tree(folder) == before


@pytest.mark.slow
def test_finishing_a_repair_keeps_in_its_manifest_what_had_moved(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    before = tree(folder)
    lines = [_line(folder, name, 7) for name in ("model-7.bpk", "scheduler-7.bpk")]
    quarantine = _interrupted(folder, lines, written=time.time())
    os.rename(folder / "model-7.bpk", quarantine / "files" / "model-7.bpk")  # moved before the kill
    assert cli("repair", "--yes", folder).exit_code == 0
    manifest = json.loads((quarantine / "manifest.json").read_text())
    assert {line["path"] for line in manifest["entries"]} == {"model-7.bpk"}, "what it had moved; the rest went to a new quarantine"
    _undo_everything(folder)
    assert tree(folder) == before


@pytest.mark.slow
def test_two_repairs_at_once_one_exits_3_and_the_run_ends_repaired(tmp_path):
    folder, doomed = _crashing_run(tmp_path)
    before = tree(folder)
    kept = {name: digest for name, digest in before.items() if name not in doomed}
    first, second = _ckptdoctor("repair", "--yes", folder), _ckptdoctor("repair", "--yes", folder)
    said = [first.communicate(timeout=120)[1], second.communicate(timeout=120)[1]]
    codes = sorted([first.returncode, second.returncode])
    assert codes in ([0, 0], [0, 3]), (codes, said)
    if codes == [0, 3]:
        assert "locked by another ckptdoctor" in "".join(said)
    now = tree(folder)
    assert {name: now.get(name) for name in kept} == kept, "a file that was to be kept changed or vanished"
    if now != kept:
        # the other repair was reading an epoch's files while this one looked for open files:
        # held open, they stay where they are (fail closed), and the next repair moves them
        assert "open" in "".join(said), said
        again = _ckptdoctor("repair", "--yes", folder)
        again.communicate(timeout=120)
        assert again.returncode == 0
    assert tree(folder) == kept
    assert quarantined(folder) == doomed


def test_a_staging_leftover_still_being_written_is_left_alone(tmp_path, cli):
    folder = broken_burn_run(tmp_path)
    os.utime(folder / "model-8.bpk.tmp")  # a save writing it right now
    result = cli("repair", "--json", "--yes", folder)
    item = next(item for item in result.json["plan"] if item["paths"][0].endswith("model-8.bpk.tmp"))
    assert item["action"] == "keep" and any("--min-age 10min" in reason for reason in item["reasons"])
    assert (folder / "model-8.bpk.tmp").exists()
    assert quarantined(folder) == {"model-7.bpk", "scheduler-7.bpk"}


def test_a_hand_written_repairing_manifest_moves_nothing(tmp_path, cli):
    """A manifest is a record of what a repair did, never an order: one that lists every healthy
    checkpoint, with their real identities, moves none of them."""
    folder = broken_burn_run(tmp_path)
    healthy = [f"{role}-{epoch}.bpk" for epoch in range(1, 7) for role in ("model", "optim", "scheduler")]
    lines = [_line(folder, name, int(name.split("-")[1].split(".")[0])) for name in healthy]
    _interrupted(folder, lines, written=time.time())
    result = cli("repair", "--yes", folder)
    assert result.exit_code == 0, result.stderr
    assert all((folder / name).is_file() for name in healthy)
    assert cli("inspect", "--resume", folder).stdout.strip() == "6"


@pytest.mark.parametrize("planted", ["a symlink out of the run", "another file"])
def test_undo_never_puts_back_what_was_planted_in_the_quarantine(tmp_path, cli, planted):
    """Only what the repair moved goes back: a link or file swapped into the quarantine stays there,
    named, and the rest goes back (issue 32: undo restores what matches, names what does not)."""
    folder = broken_burn_run(tmp_path)
    assert cli("repair", "--yes", folder).exit_code == 0
    (stored,) = (folder / ".ckptdoctor" / "quarantine").glob("*/files/model-7.bpk")
    victim = tmp_path / "victim"
    victim.write_bytes(b"outside the run")
    stored.unlink()
    if planted == "a symlink out of the run":
        stored.symlink_to(victim)
    else:
        stored.write_bytes(b"not what was moved")
    result = cli("repair", "--undo", "--yes", folder)
    assert result.exit_code == 1 and "model-7.bpk" in result.stderr and "is not what the repair moved there" in result.stderr
    assert not os.path.lexists(folder / "model-7.bpk"), "the planted one is not put back"
    assert os.path.islink(stored) if planted == "a symlink out of the run" else stored.read_bytes() == b"not what was moved"
    assert (folder / "scheduler-7.bpk").is_file(), "what the repair moved goes back"
    assert victim.read_bytes() == b"outside the run"
