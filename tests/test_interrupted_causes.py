"""CKD117 on burn runs written by ``ckptdoctor.testing`` (burn's own file format, from its
source): which checkpoints are unfinished saves, the cause the machine shows (a process holding a
file, a full volume, neither), its parts, and how ``--select``, ``--ignore``, severities and
baselines treat a finding that stands for others. The real frameworks' kills are in
``test_interrupted_saves.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ckptdoctor import volumes
from ckptdoctor.model import Volume
from ckptdoctor.pipelines import interrupted
from ckptdoctor.testing import write_burn_run

OLD = time.time() - 3600
"""An hour ago: older than --min-age, as a save is once its crash is past."""


def _run(tmp_path: Path, epochs: range = range(1, 6)) -> Path:
    run = tmp_path / "run"
    write_burn_run(run, epochs)
    return run


def _dated(run: Path, when: float = OLD) -> None:
    for path in run.iterdir():
        os.utime(path, (when, when))


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _findings(cli, run: Path, *args: str) -> list[dict[str, object]]:
    return cli("inspect", "--json", *args, run).json["findings"]


def test_a_save_cut_short_is_one_error_standing_for_its_files(tmp_path, cli):
    run = _run(tmp_path)
    _cut(run / "optim-5.bpk")
    (run / "scheduler-5.bpk").unlink()
    _dated(run)
    result = cli("inspect", "--json", run)
    assert result.exit_code == 1
    findings = result.json["findings"]
    parent = [f for f in findings if f["code"] == "CKD117"]
    assert len(parent) == 1 and parent[0]["index"] == 5 and parent[0]["severity"] == "error"
    assert "cut short optim-5.bpk" in parent[0]["message"] and "never written scheduler-5.bpk" in parent[0]["message"]
    assert "likely killed" in parent[0]["message"]
    parts = [f for f in findings if f.get("part_of") == {"code": "CKD117", "index": 5}]
    assert {f["code"] for f in parts} >= {"CKD203", "CKD103"}
    assert result.json["summary"]["error"] == 1  # one per cause
    human = cli("inspect", run, env={"COLUMNS": "80"}).stdout
    assert human.count("✗ CKD") == 1 and "stands for CKD103, CKD203" in human
    assert human.rstrip().endswith("1 error, 0 warnings, 0 info in 1 run.")


def test_healthy_runs_have_no_interrupted_save(tmp_path, cli):
    run = _run(tmp_path)
    _dated(run)
    assert "CKD117" not in {f["code"] for f in _findings(cli, run)}
    assert cli("inspect", run).exit_code == 0


def test_files_missing_alone_are_not_called_a_kill(tmp_path, cli):
    run = _run(tmp_path)
    (run / "optim-5.bpk").unlink()
    (run / "scheduler-5.bpk").unlink()
    _dated(run)
    (parent,) = [f for f in _findings(cli, run) if f["code"] == "CKD117"]
    assert "killed" not in str(parent["message"]).split(":")[0] and "missing optim-5.bpk, scheduler-5.bpk" in str(parent["message"])
    assert "files deleted since" in str(parent["message"])


def test_a_save_that_left_one_finding_keeps_it_with_its_own_fixes(tmp_path, cli):
    """One finding is one per cause already: CKD101's fixes (burn's checkpointers, a backup) say
    more than CKD117's would, unless the world says more (a full disk, a live save: below)."""
    run = _run(tmp_path)
    (run / "optim-5.bpk").unlink()
    _dated(run)
    assert [f["code"] for f in _findings(cli, run)] == ["CKD101"]


def test_an_old_file_missing_behind_the_resume_point_is_no_interrupted_save(tmp_path, cli):
    """A cleanup's doing, more likely than a save's: left to CKD101 and prune."""
    run = _run(tmp_path)
    (run / "optim-2.bpk").unlink()
    _dated(run)
    codes = [f["code"] for f in _findings(cli, run)]
    assert "CKD101" in codes and "CKD117" not in codes


def test_an_old_save_cut_short_behind_the_resume_point_is_a_warning_prune_deletes(tmp_path, cli):
    run = _run(tmp_path)
    _cut(run / "model-2.bpk")
    (run / "scheduler-2.bpk").unlink()
    _dated(run)
    (parent,) = [f for f in _findings(cli, run) if f["code"] == "CKD117"]
    assert parent["severity"] == "warning" and parent["index"] == 2
    assert any("ckptdoctor prune" in fix for fix in parent["fixes"])


def test_a_save_being_written_is_a_warning_naming_the_process(tmp_path, cli):
    run = _run(tmp_path)
    _dated(run)
    half = (run / "model-5.bpk").read_bytes()
    for name in ("model-5.bpk", "optim-5.bpk", "scheduler-5.bpk"):
        (run / name).unlink()
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time\nf=open(sys.argv[1],'wb'); f.write(sys.stdin.buffer.read()); f.flush(); print(flush=True); time.sleep(60)",
            run / "model-5.bpk",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert writer.stdin is not None and writer.stdout is not None
        writer.stdin.write(half[: len(half) // 2])
        writer.stdin.close()
        writer.stdout.readline()  # written and held
        result = cli("inspect", "--json", run)
        (parent,) = [f for f in result.json["findings"] if f["code"] == "CKD117"]
        assert f"being written now, by pid {writer.pid} (" in parent["message"]
        assert parent["severity"] == "warning" and result.exit_code == 0
        assert all(f["severity"] != "error" for f in result.json["findings"])
        assert any("Let the save finish" in fix for fix in parent["fixes"]) and not any(
            "repair" in fix.split(":")[0] for fix in parent["fixes"]
        )
    finally:
        writer.kill()
        writer.wait(timeout=30)


def test_a_full_volume_is_named_as_the_cause(tmp_path, cli, monkeypatch):
    run = _run(tmp_path)
    _cut(run / "optim-5.bpk")
    _dated(run)
    monkeypatch.setattr(volumes, "volume", lambda path: Volume(str(run), "/data", "xfs", 100 * 2**30, 200 * 2**10, None))
    (parent,) = [f for f in _findings(cli, run) if f["code"] == "CKD117"]
    assert "the disk is full, 200.0 KiB free on xfs /data (100.0 GiB in all)" in str(parent["message"])
    assert any("Free space on xfs /data" in fix and "ckptdoctor diskcheck" in fix for fix in parent["fixes"])


def test_room_for_the_rest_of_the_save_is_judged_by_the_last_complete_one(tmp_path, cli, monkeypatch):
    """Free space short of what the save still needed (the last complete epoch less what it
    wrote) filled up, however much more than the floor it is."""
    run = _run(tmp_path)
    _cut(run / "optim-5.bpk")
    _dated(run)
    (run / "scheduler-5.bpk").unlink()  # two findings: CKD117 stands for them, full disk or not
    needed = sum(p.stat().st_size for p in run.glob("*-4.bpk")) - sum(p.stat().st_size for p in run.glob("*-5.bpk"))
    monkeypatch.setattr(interrupted, "FULL", 0)
    for free, full in ((needed - 1, True), (needed + 1, False)):
        monkeypatch.setattr(volumes, "volume", lambda path, free=free: Volume(str(run), "/", "ext4", 2**40, free, None))
        (parent,) = [f for f in _findings(cli, run) if f["code"] == "CKD117"]
        assert ("the disk is full" in str(parent["message"])) is full, (free, needed, parent["message"])


def test_a_fresh_crash_prints_the_repair_that_acts_now_and_it_does(tmp_path, cli):
    run = _run(tmp_path)
    _cut(run / "optim-5.bpk")
    (run / "scheduler-5.bpk").unlink()
    _dated(run)
    os.utime(run / "optim-5.bpk")  # the crash was a moment ago
    (parent,) = [f for f in _findings(cli, run) if f["code"] == "CKD117"]
    (fix,) = [fix for fix in parent["fixes"] if "ckptdoctor repair" in fix]
    assert f"`ckptdoctor repair {run}` quarantines it" in fix and "it acts from " in fix and "when its files are 10min old" in fix
    assert f"`ckptdoctor repair {run} --min-age 0` acts now, if no job is saving here" in fix
    done = cli("repair", run, "--min-age", "0", "--yes")
    assert done.exit_code == 0, done.stderr
    assert not (run / "optim-5.bpk").exists() and not (run / "model-5.bpk").exists() and cli("inspect", run).exit_code == 0


def test_ignoring_all_its_parts_ignores_it_and_selecting_a_part_shows_that_part(tmp_path, cli):
    run = _run(tmp_path)
    (run / "optim-5.bpk").unlink()
    (run / "scheduler-5.bpk").unlink()
    _dated(run)
    assert [f["code"] for f in _findings(cli, run)] == ["CKD117", "CKD101", "CKD103"]
    assert [f["code"] for f in _findings(cli, run, "--ignore", "CKD101,CKD103")] == []
    assert [f["code"] for f in _findings(cli, run, "--ignore", "CKD101")] == ["CKD117", "CKD103"]
    assert [f["code"] for f in _findings(cli, run, "--select", "CKD101")] == ["CKD101"]
    assert [f["code"] for f in _findings(cli, run, "--select", "CKD117")] == ["CKD117"]
    human = cli("inspect", "--select", "CKD101", run).stdout
    assert "CKD101 missing-optimizer" in human and "1 error" in human  # its finding left out, a part stands on its own


def test_a_baseline_made_before_keeps_a_known_interrupted_save_hidden(tmp_path, cli):
    run = _run(tmp_path)
    (run / "optim-5.bpk").unlink()
    (run / "scheduler-5.bpk").unlink()
    _dated(run)
    report = cli("inspect", "--json", run).json
    baseline = tmp_path / "baseline.json"
    cli("inspect", "--write-baseline", baseline, run)
    recorded = json.loads(baseline.read_text())
    recorded["findings"] = [f for f in recorded["findings"] if f["code"] != "CKD117"]  # as written before CKD117 existed
    baseline.write_text(json.dumps(recorded))
    again = cli("inspect", "--json", "--baseline", baseline, run)
    assert again.exit_code == 0 and again.json["findings"] == [], report


def _two_cut(tmp_path: Path) -> Path:
    """Epoch 5's save cut in its optimizer, its scheduler never written: two findings, one cause."""
    run = _run(tmp_path)
    _cut(run / "optim-5.bpk")
    (run / "scheduler-5.bpk").unlink()
    _dated(run)
    return run


def test_a_process_reading_a_cut_file_is_no_writer(tmp_path, cli):
    """rsync, a pager or a notebook holding the file to read it does not make a dead save live."""
    run = _two_cut(tmp_path)
    reader = subprocess.Popen(
        [sys.executable, "-c", "import sys,time\nf=open(sys.argv[1],'rb'); print(flush=True); time.sleep(60)", run / "optim-5.bpk"],
        stdout=subprocess.PIPE,
    )
    try:
        assert reader.stdout is not None
        reader.stdout.readline()
        result = cli("inspect", "--json", run)
        (parent,) = [f for f in result.json["findings"] if f["code"] == "CKD117"]
        assert parent["severity"] == "error" and result.exit_code == 1
        assert "being written" not in parent["message"] and f"{reader.pid} (" in parent["message"] and "reads them" in parent["message"]
        assert any(f"while {reader.pid} (" in fix for fix in parent["fixes"])  # repair waits for it: said
    finally:
        reader.kill()
        reader.wait(timeout=30)


def test_a_healthy_checkpoint_behind_a_link_is_no_interrupted_save(tmp_path, cli):
    run = _run(tmp_path, range(1, 5))
    _dated(run)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("model-4.bpk", "optim-4.bpk", "scheduler-4.bpk"):
        (run / name).rename(elsewhere / name)
        (run / name).symlink_to(elsewhere / name)
    assert "CKD117" not in {f["code"] for f in _findings(cli, run)}


def test_a_full_disk_prints_the_delete_that_frees_what_the_save_left(tmp_path, cli, monkeypatch):
    run = _two_cut(tmp_path)
    monkeypatch.setattr(volumes, "volume", lambda path: Volume(str(run), "/data", "xfs", 2**30, 0, None))
    (parent,) = [f for f in _findings(cli, run) if f["code"] == "CKD117"]
    (delete,) = [fix for fix in parent["fixes"] if "`rm -- " in fix]
    assert str(run / "model-5.bpk") in delete and str(run / "optim-5.bpk") in delete and "epoch 4 stays the resume point" in delete


def test_a_file_dated_ahead_of_the_clock_has_no_age(tmp_path, cli):
    run = _two_cut(tmp_path)
    ahead = time.time() + 3600
    os.utime(run / "model-5.bpk", (ahead, ahead))
    (parent,) = [f for f in _findings(cli, run) if f["code"] == "CKD117"]
    assert " ago" not in str(parent["message"]) and "0s" not in str(parent["message"])


def test_a_configured_severity_of_the_cause_bounds_its_parts_and_the_exit_code(tmp_path, cli):
    run = _two_cut(tmp_path)
    config = tmp_path / "ckptdoctor.toml"
    config.write_text('[severity]\ninterrupted-save = "info"\n')
    result = cli("inspect", "--json", "--config", config, run)
    assert result.json["summary"] == {"error": 0, "warning": 0, "info": 1}
    assert result.exit_code == 0 and {f["severity"] for f in result.json["findings"]} == {"info"}


def test_a_part_shown_without_its_finding_names_none(tmp_path, cli):
    run = _two_cut(tmp_path)
    (alone,) = _findings(cli, run, "--select", "CKD203")
    assert alone["code"] == "CKD203" and "part_of" not in alone


def test_a_path_with_spaces_is_never_broken(tmp_path, cli):
    run = tmp_path / "a folder name with several spaces in it" / "and another one here" / "my run"
    write_burn_run(run, range(1, 4))
    _dated(run)
    shown = cli("inspect", run, env={"COLUMNS": "60"}).stdout
    assert shown.splitlines()[0] == str(run)  # whole on a line of its own, though wider than the screen
