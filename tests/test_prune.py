"""``ckptdoctor prune`` end to end: plan, preview, --dry-run, --yes, locking, config, metric
sources, and crash safety (SIGKILL at random moments loses nothing that was to be kept)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckptdoctor.testing import write_burn_run, write_hf_checkpoints

pytestmark = pytest.mark.usefixtures("fake_machine")  # the process table and clock are the test's (conftest)

DAY = 86400


def age(folder: Path, seconds: float = DAY) -> None:
    when = time.time() - seconds
    for path in folder.rglob("*"):
        os.utime(path, (when, when), follow_symlinks=False)


def burn_run(tmp_path: Path, epochs: range = range(1, 8)) -> Path:
    folder = tmp_path / "run" / "checkpoint"
    write_burn_run(folder, epochs)
    age(folder)
    return folder


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()}


def epochs_left(folder: Path) -> list[int]:
    return sorted({int(p.stem.split("-")[1]) for p in folder.glob("model-*.bpk")})


def prune_json(cli, *args):
    return cli("prune", "--json", *args)


def test_dry_run_changes_nothing_and_shows_the_plan(tmp_path, cli):
    folder = burn_run(tmp_path)
    before = digests(folder)
    result = prune_json(cli, "--keep-last", "2", "--dry-run", folder)
    assert result.exit_code == 0
    assert digests(folder) == before
    body = result.json
    assert body["dry_run"] is True and body["command"] == "prune"
    plan = {item["index"]: item for item in body["plan"]}
    assert [i for i, item in plan.items() if item["action"] == "keep"] == [6, 7]
    assert plan[7]["reasons"] == ["resume point (newest complete)", "keep-last #1"]
    assert body["freed_bytes"] == sum(item["bytes"] for item in plan.values() if item["action"] == "delete")
    human = cli("prune", "--keep-last", "2", "--dry-run", folder)
    assert "About to delete 5 checkpoints (15 files) totalling" in human.stdout and "keeping 2." in human.stdout
    assert "Dry run: no files were deleted." in human.stderr


def test_off_a_terminal_without_yes_nothing_is_deleted(tmp_path, cli):
    folder = burn_run(tmp_path)
    before = digests(folder)
    result = cli("prune", "--keep-last", "2", folder)
    assert result.exit_code == 2 and "--yes" in result.stderr
    assert digests(folder) == before


def test_yes_deletes_exactly_the_plan_and_keeps_the_rest_byte_for_byte(tmp_path, cli):
    folder = burn_run(tmp_path)
    before = digests(folder)
    result = cli("prune", "--keep-last", "2", "--keep-every", "3", "--yes", folder)
    assert result.exit_code == 0, result.stderr
    assert epochs_left(folder) == [3, 6, 7]
    assert {name: digest for name, digest in before.items() if name in digests(folder)} == digests(folder)
    assert "deleted 4 checkpoints (12 files)" in result.stderr
    assert not any((folder / ".ckptdoctor" / "trash").iterdir())
    after = cli("inspect", "--json", folder).json
    assert after["runs"][0]["resume"]["index"] == 7 and after["findings"] == []


def test_quiet_prints_nothing_on_success(tmp_path, cli):
    folder = burn_run(tmp_path)
    result = cli("prune", "-q", "--yes", "--keep-last", "3", folder)
    assert result.exit_code == 0 and result.stdout == "" and only_process_notes(result.stderr)
    assert epochs_left(folder) == [5, 6, 7]


def only_process_notes(said: str) -> bool:
    """All that -q still says on success, by design: processes whose open files this user cannot
    read (a container's init holds privileges its root lacks)."""
    return all(line.startswith("note: the open and mapped files of process") for line in said.splitlines())


def test_an_empty_policy_is_refused(tmp_path, cli):
    folder = burn_run(tmp_path)
    result = cli("prune", "--yes", folder)
    assert result.exit_code == 2 and "empty policy" in result.stderr
    assert epochs_left(folder) == list(range(1, 8))


def test_recent_files_are_kept_whatever_the_policy(tmp_path, cli):
    folder = burn_run(tmp_path)
    os.utime(folder / "model-2.bpk")  # written just now: maybe still being written
    cli("prune", "--yes", "--keep-last", "1", folder)
    assert epochs_left(folder) == [2, 7]


def test_the_process_table_and_clock_prune_asks_are_the_tests_own(tmp_path, cli, fake_machine):
    """Hermetic: what holds a file and what time it is come from the fake machine (conftest), never
    from this machine's /proc and clock, so an unrelated process cannot change the outcome."""
    folder = burn_run(tmp_path)
    fake_machine.held[str(folder / "model-3.bpk")] = 4242
    os.utime(folder / "model-2.bpk")  # written just now, by the real clock
    fake_machine.now = time.time() + DAY  # a day later, by the test's: older than --min-age
    result = cli("prune", "--json", "--yes", "--keep-last", "1", folder)
    assert result.exit_code == 0, result.stderr
    assert epochs_left(folder) == [3, 7]
    reasons = {item["index"]: item["reasons"] for item in result.json["plan"]}
    assert any("4242" in reason for reason in reasons[3])


@pytest.mark.real_processes
def test_a_file_held_open_by_a_live_process_is_not_deleted(tmp_path, cli):
    folder = burn_run(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time; f=open(sys.argv[1],'rb'); print('ok', flush=True); time.sleep(60)",
            str(folder / "optim-3.bpk"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        result = prune_json(cli, "--yes", "--keep-last", "1", folder)
        reasons = {item["index"]: item["reasons"] for item in result.json["plan"]}
        assert reasons[3] == [f"open in process {holder.pid}"]
        assert epochs_left(folder) == [3, 7]
    finally:
        holder.kill()
        holder.wait()


def test_a_symlink_out_of_the_run_is_removed_not_followed(tmp_path, cli):
    folder = burn_run(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (folder / "model-1.bpk").rename(outside / "model-1.bpk")
    (folder / "model-1.bpk").symlink_to(outside / "model-1.bpk")
    age(folder)
    assert cli("prune", "--yes", "--keep-last", "2", folder).exit_code == 0
    assert not os.path.lexists(folder / "model-1.bpk")
    assert (outside / "model-1.bpk").is_file(), "the target outside the run is untouched"


def test_a_run_that_cannot_be_written_fails_clearly_with_nothing_lost(tmp_path, cli, monkeypatch):
    folder = burn_run(tmp_path)
    before = digests(folder)

    def refuse(source, target, *args, **kwargs):
        raise PermissionError(13, "Permission denied", source)

    monkeypatch.setattr(os, "rename", refuse)
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code == 1 and "permission denied" in result.stderr.lower()
    assert digests(folder) == before
    monkeypatch.undo()
    assert cli("prune", "--yes", "--keep-last", "2", folder).exit_code == 0  # the next prune plans them again
    assert epochs_left(folder) == [6, 7]


def test_a_locked_run_exits_3_naming_the_holder(tmp_path, cli):
    folder = burn_run(tmp_path)
    (folder / ".ckptdoctor").mkdir()
    code = (
        "import fcntl, json, os, sys, time; h = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
        "fcntl.flock(h, fcntl.LOCK_EX); os.write(h, json.dumps({'pid': os.getpid(), 'host': 'node7', 'user': 'ana', 'started': time.time()}).encode());"
        "print('locked', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder / ".ckptdoctor" / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        result = cli("prune", "--yes", "--keep-last", "1", folder)
        assert result.exit_code == 3
        assert f"pid {holder.pid} on node7 by ana" in result.stderr
        assert epochs_left(folder) == list(range(1, 8))
    finally:
        holder.kill()
        holder.wait()


def _prune_process(folder: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ckptdoctor", "prune", "--yes", "--keep-last", "3", "--keep-every", "7", *args, str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_two_prunes_at_once_one_waits_out_nothing_lost(tmp_path):
    folder = burn_run(tmp_path, range(1, 301))
    keep = {e for e in range(1, 301) if e > 297 or e % 7 == 0}
    wanted = {name: digest for name, digest in digests(folder).items() if int(name.split("-")[1].split(".")[0]) in keep}
    first, second = _prune_process(folder), _prune_process(folder)
    said = [first.communicate(timeout=120)[1], second.communicate(timeout=120)[1]]
    codes = sorted([first.returncode, second.returncode])
    assert codes in ([0, 0], [0, 3]), (codes, said)
    # nothing to keep is lost; a file the other prune held open at the last check stays (files a
    # live process holds open are never deleted), and running prune again finishes the job
    assert keep <= set(epochs_left(folder))
    assert {name: digests(folder)[name] for name in wanted} == wanted
    again = _prune_process(folder)
    again.communicate(timeout=120)
    assert again.returncode == 0
    assert set(epochs_left(folder)) == keep
    assert {name: digests(folder)[name] for name in wanted} == wanted


def _kill_when_deleting(process: subprocess.Popen[str], folder: Path, rng: random.Random, trash: Path | None = None) -> None:
    """SIGKILL inside the deletion itself: once a journal exists (in ``trash``, by default the
    run's own), after a random few milliseconds."""
    trash = trash or folder / ".ckptdoctor" / "trash"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        if trash.is_dir() and any(trash.glob("*/journal.json")):
            time.sleep(rng.uniform(0, 0.02))
            break
        time.sleep(0.0005)
    process.send_signal(signal.SIGKILL)
    process.wait()


def kill_once(folder: Path, wanted: dict[str, str], keep: set[int], rng: random.Random, when_deleting=None) -> set[int]:
    """One prune SIGKILLed — after ``when_deleting`` says it is deleting, else at a random moment —
    then the check that nothing to keep changed or vanished; the epochs left."""
    process = _prune_process(folder)
    if when_deleting is not None:
        when_deleting(process, folder, rng)
    else:
        time.sleep(rng.uniform(0.05, 0.8))
        process.send_signal(signal.SIGKILL)
        process.wait()
    current = digests(folder)
    assert {name: current.get(name) for name in wanted} == wanted, "a kept file changed or vanished"
    left = set(epochs_left(folder))
    assert keep <= left
    return left


@pytest.mark.slow
def test_sigkill_at_any_moment_loses_nothing_that_was_to_be_kept(tmp_path):
    folder = burn_run(tmp_path, range(1, 601))
    keep = {e for e in range(1, 601) if e > 597 or e % 7 == 0}
    wanted = {name: digest for name, digest in digests(folder).items() if int(name.split("-")[1].split(".")[0]) in keep}
    rng = random.Random(4)
    partial = 0
    attempt = 0
    while attempt < 16 or (not partial and attempt < 48):  # a slow machine lands kills in the scan: try on
        attempt += 1
        left = kill_once(folder, wanted, keep, rng, _kill_when_deleting if attempt % 2 else None)
        partial += keep < left < set(range(1, 601))
        if left == keep:  # a run finished the job: start again with more to delete
            write_burn_run(folder, sorted(set(range(1, 601)) - keep))
            age(folder)
    assert partial, "no kill landed in the middle of a deletion"
    finished = _prune_process(folder)
    assert finished.wait(timeout=120) == 0
    assert set(epochs_left(folder)) == keep
    assert not any((folder / ".ckptdoctor" / "trash").iterdir())
    assert {name: digests(folder)[name] for name in wanted} == wanted


# --- where the policy and the metric come from ------------------------------------------------------------


def test_the_policy_can_come_from_pyproject(tmp_path, cli, monkeypatch):
    folder = burn_run(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.ckptdoctor.prune]\nkeep-last = 2\nkeep = [1]\n")
    monkeypatch.chdir(tmp_path)
    result = prune_json(cli, "--dry-run", folder)
    assert [item["index"] for item in result.json["plan"] if item["action"] == "keep"] == [1, 6, 7]
    overridden = prune_json(cli, "--dry-run", "--keep-last", "3", folder)
    assert [item["index"] for item in overridden.json["plan"] if item["action"] == "keep"] == [1, 5, 6, 7]


def test_an_unknown_config_key_is_a_usage_error_naming_it(tmp_path, cli, monkeypatch):
    folder = burn_run(tmp_path)
    (tmp_path / "ckptdoctor.toml").write_text("[prune]\nkeep_last = 2\n")
    monkeypatch.chdir(tmp_path)
    result = cli("prune", "--dry-run", folder)
    assert result.exit_code == 2 and "'keep_last'" in result.stderr


def test_keep_best_reads_burn_validation_logs(tmp_path, cli):
    folder = burn_run(tmp_path)
    for epoch in range(1, 8):
        log = tmp_path / "run" / "valid" / f"epoch-{epoch}" / "Loss.log"
        log.parent.mkdir(parents=True)
        loss = abs(epoch - 3) + 1.0
        log.write_text(f"{loss + 1}\n{loss - 1},2\n" if epoch != 5 else "9.0\n0.1,final\n")
    result = prune_json(cli, "--dry-run", "--keep-best", "2", "--metric", "Loss", folder)
    plan = {item["index"]: item["reasons"] for item in result.json["plan"]}
    assert plan[5][0].startswith("keep-best #1 (Loss 0.1)")
    assert plan[3][0].startswith("keep-best #2")
    assert [i for i, reasons in plan.items() if reasons != ["matches no keep rule"]] == [3, 5, 7]


def test_keep_best_reads_lightning_file_names(tmp_path, cli):
    folder = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    folder.mkdir(parents=True)
    for epoch, loss in ((0, 0.9), (1, 0.4), (2, 0.6), (3, 0.7)):
        (folder / f"epoch={epoch}-step={(epoch + 1) * 10}-val_loss={loss}.ckpt").write_bytes(_lightning_bytes())
    age(folder)
    result = prune_json(cli, "--dry-run", "--keep-best", "1", "--metric", "val_loss", folder)
    kept = {item["index"]: item["reasons"] for item in result.json["plan"] if item["action"] == "keep"}
    assert kept == {20: ["keep-best #1 (val_loss 0.4)"], 40: ["resume point (newest complete)"]}  # indexed by step


def _lightning_bytes() -> bytes:
    import io

    torch = pytest.importorskip("torch")
    buffer = io.BytesIO()
    torch.save({"state_dict": {"w": torch.ones(1)}, "optimizer_states": [{}], "lr_schedulers": [], "epoch": 0}, buffer)
    return buffer.getvalue()


def test_a_metrics_file_gives_the_values(tmp_path, cli):
    folder = burn_run(tmp_path)
    table = tmp_path / "metrics.csv"
    table.write_text("index,accuracy\n1,0.5\n2,0.9\n3,0.7\n")
    result = prune_json(cli, "--dry-run", "--keep-best", "1", "--metric", "accuracy", "--mode", "max", "--metrics-file", table, folder)
    kept = [item["index"] for item in result.json["plan"] if item["action"] == "keep"]
    assert kept == [2, 7]
    (tmp_path / "metrics.json").write_text(json.dumps({"4": 0.1}))
    result = prune_json(cli, "--dry-run", "--keep-best", "1", "--metric", "loss", "--metrics-file", tmp_path / "metrics.json", folder)
    assert [item["index"] for item in result.json["plan"] if item["action"] == "keep"] == [4, 7]


def test_keep_best_without_values_is_a_usage_error(tmp_path, cli):
    folder = burn_run(tmp_path)
    result = cli("prune", "--dry-run", "--keep-best", "1", "--metric", "Loss", folder)
    assert result.exit_code == 2 and "no values of Loss" in result.stderr


def test_a_parent_folder_prunes_each_run_under_its_own_lock(tmp_path, cli):
    first = tmp_path / "exp1" / "checkpoint"
    second = tmp_path / "exp2" / "checkpoint"
    write_burn_run(first, range(1, 6))
    write_burn_run(second, range(1, 4))
    age(tmp_path)
    result = prune_json(cli, "--yes", "--keep-last", "1", tmp_path)
    assert result.exit_code == 0, result.stderr
    assert {item["run"] for item in result.json["plan"]} == {str(first), str(second)}
    assert epochs_left(first) == [5] and epochs_left(second) == [3]
    assert (first / ".ckptdoctor" / "lock").is_file() and (second / ".ckptdoctor" / "lock").is_file()


def test_hf_checkpoint_folders_are_deleted_whole(tmp_path, cli):
    write_hf_checkpoints(tmp_path, (10, 20, 30))
    for step in (10, 20, 30):
        (tmp_path / f"checkpoint-{step}" / "notes.txt").write_text("a file no layout claims, inside the checkpoint folder")
    (tmp_path / "runs.log").write_text("beside the checkpoints: never touched")
    age(tmp_path)
    planned = cli("prune", "--dry-run", "--keep-last", "1", tmp_path)
    assert "About to delete 2 checkpoints (2 folders)" in planned.stdout  # folders, not "files"
    result = cli("prune", "--yes", "--keep-last", "1", tmp_path)
    assert result.exit_code == 0, result.stderr
    assert "deleted 2 checkpoints (2 folders)" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ckptdoctor", "checkpoint-30", "runs.log"]


# --- journals left by a killed prune: finished only as meant ----------------------------------------------


def _journal(folder: Path, entries: list[str], written: float) -> Path:
    trash = folder / ".ckptdoctor" / "trash" / "20260101-000000-deadbeef"
    trash.mkdir(parents=True)
    journal = trash / "journal.json"
    journal.write_text(json.dumps({"run": str(folder), "entries": entries}))
    os.utime(journal, (written, written))
    return journal


def test_a_dry_run_never_finishes_a_journal(tmp_path, cli):
    folder = burn_run(tmp_path)
    _journal(folder, ["model-1.bpk", "optim-1.bpk", "scheduler-1.bpk"], time.time())
    result = cli("prune", "--dry-run", "--keep-last", "5", folder)
    assert result.exit_code == 0 and "interrupted prune left" in result.stderr
    assert epochs_left(folder) == list(range(1, 8))


def test_a_journal_does_not_reach_files_written_after_it_or_outside_the_run(tmp_path, cli):
    folder = burn_run(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("not the run's")
    # the journal is a day older than the run's files: the run was restarted since
    _journal(folder, ["model-1.bpk", "optim-1.bpk", "scheduler-1.bpk", "../../outside.txt"], time.time() - 2 * DAY)
    result = cli("prune", "--yes", "--keep-last", "7", folder)
    assert result.exit_code == 0, result.stderr
    assert epochs_left(folder) == list(range(1, 8)) and outside.read_text() == "not the run's"
    assert not any((folder / ".ckptdoctor" / "trash").iterdir())


def test_a_journal_that_cannot_be_read_stops_prune_with_a_clear_message(tmp_path, cli):
    folder = burn_run(tmp_path)
    journal = _journal(folder, [], time.time())
    journal.write_text("{not json")
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code == 1 and "interrupted prune left" in result.stderr and "Traceback" not in result.stderr
    assert epochs_left(folder) == list(range(1, 8))


def test_the_same_run_named_twice_is_pruned_once(tmp_path, cli, monkeypatch):
    folder = burn_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = cli("prune", "--yes", "--keep-last", "2", folder, "run/checkpoint")
    assert result.exit_code == 0, result.stderr
    assert epochs_left(folder) == [6, 7]


def test_a_fresh_file_anywhere_in_a_checkpoint_folder_keeps_it(tmp_path, cli):
    write_hf_checkpoints(tmp_path, (10, 20, 30))
    age(tmp_path)
    (tmp_path / "checkpoint-10" / "global_step10").mkdir()
    (tmp_path / "checkpoint-10" / "global_step10" / "model_states.pt").write_bytes(b"being written")
    result = prune_json(cli, "--yes", "--keep-last", "1", tmp_path)
    reasons = {item["index"]: item["reasons"] for item in result.json["plan"]}
    assert reasons[10][0].startswith("modified") and (tmp_path / "checkpoint-10").is_dir()
    assert not (tmp_path / "checkpoint-20").exists()


def test_files_written_while_the_prompt_waited_are_left(tmp_path, cli, monkeypatch):
    import ckptdoctor.actions

    folder = burn_run(tmp_path)
    real_delete = ckptdoctor.actions.delete

    def trainer_writes_first(plan, since, busy=frozenset(), seen=None):
        time.sleep(0.01)
        (folder / "optim-2.bpk").write_bytes((folder / "optim-2.bpk").read_bytes())  # rewritten after the plan
        return real_delete(plan, since, busy, seen)

    monkeypatch.setattr(ckptdoctor.actions, "delete", trainer_writes_first)
    result = cli("prune", "--yes", "--keep-last", "2", folder)
    assert result.exit_code == 0, result.stderr
    assert "left 1 entry written, opened or replaced since the plan was made" in result.stderr
    assert (folder / "optim-2.bpk").is_file()
    assert not (folder / "model-2.bpk").exists() and not (folder / "model-1.bpk").exists()
