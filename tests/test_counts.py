"""What the human report counts reads right for every count (issue 35, item 7): a run's title
counts its checkpoints and spans their indexes in the run's unit, and no count of one takes a
plural ("1 runs", "none of the 1 checkpoints")."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptdoctor.api import inspect
from ckptdoctor.render import github
from ckptdoctor.testing import write_burn_run, write_hf_checkpoints
from ckptdoctor.units import counted, files_or_folders


def test_a_count_of_one_is_singular_and_any_other_plural():
    assert [counted(n, "checkpoint") for n in (0, 1, 2)] == ["0 checkpoints", "1 checkpoint", "2 checkpoints"]
    assert [counted(n, "entry", "entries") for n in (1, 5)] == ["1 entry", "5 entries"]
    assert [files_or_folders(1, 0), files_or_folders(1, 1), files_or_folders(3, 1)] == ["1 file", "1 folder", "3 entries"]


@pytest.mark.parametrize("command", ["inspect", "diskcheck"])
def test_a_run_title_counts_checkpoints_and_spans_their_indexes(tmp_path: Path, cli, command: str):
    write_hf_checkpoints(tmp_path / "hf", (10, 20, 30))
    result = cli(command, tmp_path / "hf")
    assert "hf-trainer · 3 checkpoints (steps 10–30) · " in result.stdout, result.stdout
    assert "3 steps" not in result.stdout


def test_one_checkpoint_is_one_checkpoint_and_its_index(tmp_path: Path, cli):
    write_burn_run(tmp_path / "burn", range(4, 5))
    result = cli("inspect", tmp_path / "burn")
    assert "burn · 1 checkpoint (epoch 4) · " in result.stdout, result.stdout


def test_the_only_checkpoint_is_not_none_of_the_1_checkpoints(tmp_path: Path, cli):
    write_burn_run(tmp_path / "burn", range(4, 5))
    (tmp_path / "burn" / "model-4.bpk").unlink()
    messages = [f["message"] for f in cli("inspect", "--json", tmp_path / "burn").json["findings"] if f["code"] == "CKD110"]
    assert messages and messages[0].startswith("the only checkpoint in ") and " is not complete (1 incomplete)" in messages[0], messages
    assert not any("none of the 1 " in m for m in messages)


def test_the_github_step_summary_counts_one_run_as_one(tmp_path: Path):
    write_burn_run(tmp_path / "burn", range(1, 3))
    assert "0 errors, 0 warnings, 0 info in 1 run." in github.summary(inspect(tmp_path / "burn"))
