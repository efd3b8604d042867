"""Time from the clock, never from the files (issue 32, items 1 and 10): a file dated in the
future (another machine's clock, a restore with wrong times) is CKD214, keeps its checkpoint and
shifts no other decision; ``--keep-within`` and ``--min-age`` are measured back from now; and a
prune that ``--min-age`` holds back says so, with the command that acts.

Runs are written by a real hand-made torch loop (``frameworks.torch_loop``), their times set with
``os.utime`` as a skewed clock sets them, and the loop's own resume loads what is kept."""

from __future__ import annotations

import os
import re
import shlex
import time
from pathlib import Path

import pytest
from frameworks import loop_resume, loop_saves, split_files, torch_loop

pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("fake_machine")  # the process table and clock are the test's (conftest)

HOUR = 3600.0
IN_2030 = 1_900_000_000.0
"""2030-03-17: years ahead of any clock this suite runs under."""


def hourly_run(tmp_path: Path, epochs: int = 12) -> Path:
    """``epochs`` epochs saved by the loop one hour apart, the newest 20 minutes ago."""
    folder = tmp_path / "run"
    torch_loop(folder, epochs, "split")
    now = time.time()
    for epoch, weights in loop_saves(folder, "split").items():
        when = now - 1200 - (epochs - epoch) * HOUR
        for path in split_files(weights):
            os.utime(path, (when, when))
    return folder


def epochs_left(folder: Path) -> list[int]:
    return sorted(loop_saves(folder, "split"))


def dated(path: Path, when: float) -> None:
    os.utime(path, (when, when))


def clock_findings(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == "CKD214"]


def test_one_file_dated_in_2030_empties_no_keep_within_window(tmp_path, cli):
    """Issue 32 item 1: 12 hourly epochs and `optimizer_3.pt` dated 2030; `--keep-within 1d` once
    deleted 10 of the 12 (the window was measured back from the newest file's time)."""
    folder = hourly_run(tmp_path)
    dated(folder / "optimizer_3.pt", IN_2030)
    done = cli("prune", "--json", "--yes", "--keep-within", "1d", folder)
    assert done.exit_code == 0, done.stdout
    assert epochs_left(folder) == list(range(1, 13))
    plan = {item["index"]: item["reasons"] for item in done.json["plan"]}
    assert all("keep-within 1d" in plan[epoch] for epoch in range(1, 13) if epoch != 3)
    assert any("in the future" in why and "CKD214" in why for why in plan[3])
    assert not any("ago" in why for whys in plan.values() for why in whys)  # no age from a time ahead of the clock
    for epoch in range(1, 13):  # the loop's own resume loads every epoch kept
        assert loop_resume(folder / f"model_{epoch}.safetensors", "split")[3] == epoch


def test_keep_within_is_measured_back_from_now(tmp_path, cli):
    """A window of 5 hours keeps the epochs saved in the last 5 hours (the newest 20 minutes ago,
    then one an hour): 8 to 12; the rest go, however the newest file is dated."""
    folder = hourly_run(tmp_path)
    done = cli("prune", "--yes", "--keep-within", "5h", folder)
    assert done.exit_code == 0, done.stdout
    assert epochs_left(folder) == [8, 9, 10, 11, 12]


def test_a_checkpoint_dated_in_the_future_is_never_deleted_even_at_min_age_0(tmp_path, cli):
    """`--min-age 0` says that nothing writes here; it still does not make a time in the future an
    age: the checkpoint is kept, and every other decision is what it would be without it."""
    folder = hourly_run(tmp_path, 6)
    dated(folder / "model_2.safetensors", IN_2030)
    done = cli("prune", "--yes", "--keep-last", "1", "--min-age", "0", folder)
    assert done.exit_code == 0, done.stdout
    assert epochs_left(folder) == [2, 6]
    assert loop_resume(folder / "model_2.safetensors", "split")[3] == 2


def test_inspect_names_the_file_dated_in_the_future_and_by_how_much(tmp_path, inspect_json):
    folder = hourly_run(tmp_path, 4)
    dated(folder / "optimizer_3.pt", IN_2030)
    (finding,) = clock_findings(inspect_json(folder).json)
    assert (finding["severity"], finding["index"], finding["path"]) == ("warning", 3, str(folder / "optimizer_3.pt"))
    assert "optimizer_3.pt is dated 2030-03-17" in finding["message"]
    skew = re.search(r"(\d+)d in the future", finding["message"])
    assert skew is not None and abs(int(skew[1]) - (IN_2030 - time.time()) / 86400) < 1.5


def test_many_files_dated_ahead_are_one_finding_naming_the_most_skewed(tmp_path, inspect_json):
    """A restore that kept a wrong clock's times dates every file ahead: one finding per run."""
    folder = hourly_run(tmp_path, 3)
    ahead = time.time() + 2 * 86400
    for path in folder.iterdir():
        dated(path, ahead)
    dated(folder / "scheduler_2.pt", ahead + 86400)
    (finding,) = clock_findings(inspect_json(folder).json)
    assert finding["index"] is None and finding["path"] == str(folder / "scheduler_2.pt")
    assert finding["message"].startswith("9 files are dated in the future of this machine's clock, up to 3.0d ahead")


def test_clocks_within_the_drift_allowed_are_no_finding_and_hold_by_min_age(tmp_path, cli, inspect_json):
    """An NFS server a minute ahead is no skew (CKD214 is quiet, as it is on a healthy run); its
    file is taken as just written, which --min-age holds back."""
    folder = hourly_run(tmp_path, 3)
    assert clock_findings(inspect_json(folder).json) == []
    dated(folder / "optimizer_1.pt", time.time() + 60)
    assert clock_findings(inspect_json(folder).json) == []
    plan = {item["index"]: item for item in cli("prune", "--json", "--dry-run", "--keep-last", "1", folder).json["plan"]}
    # the attack on issue 32: it said "modified 0s ago"
    assert plan[1]["action"] == "keep" and re.match(r"dated \d+s ahead of this machine's clock \(--min-age 10min\)", plan[1]["reasons"][0])
    assert plan[2]["action"] == "delete"


def test_min_age_that_holds_everything_back_says_so_with_the_command_that_acts(tmp_path, cli):
    """Issue 32 item 10: minutes after a crash every checkpoint is younger than --min-age, and a
    prune printed "Nothing to delete" with the disk still full. It says how many were held back
    and the command that deletes them once no job writes there; that command, run as printed,
    does, and the loop resumes from what is kept."""
    folder = tmp_path / "run"
    torch_loop(folder, 5, "split")
    held = cli("prune", "--yes", "--keep-last", "1", folder)
    assert held.exit_code == 0 and epochs_left(folder) == [1, 2, 3, 4, 5]
    said = held.stdout + held.stderr
    assert "epochs 1, 2, 3, 4 are younger than --min-age 10min" in said
    command = re.search(r"`(ckptdoctor prune [^`]*)`", said)
    assert command is not None and command[1] == f"ckptdoctor prune --keep-last 1 --min-age 0 --no-recurse {shlex.quote(str(folder))}"
    done = cli(*shlex.split(command[1])[1:], "--yes")
    assert done.exit_code == 0, done.stdout
    assert epochs_left(folder) == [5]
    assert loop_resume(folder / "model_5.safetensors", "split")[3] == 5


def test_no_min_age_note_where_the_policy_keeps_the_young_checkpoints_anyway(tmp_path, cli):
    folder = tmp_path / "run"
    torch_loop(folder, 3, "split")
    kept = cli("prune", "--yes", "--keep-last", "3", folder)
    assert kept.exit_code == 0 and "--min-age 0" not in kept.stdout + kept.stderr
