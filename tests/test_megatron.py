"""Megatron-LM save folders, built by hand with Megatron's names (Megatron is too heavy here)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from frameworks import MEGATRON_TRACKER, MegatronTraining, megatron_load, megatron_release, megatron_run, megatron_tracker


def only(report: dict, code: str) -> dict:
    (finding,) = [f for f in report["findings"] if f["code"] == code]
    return finding


def test_a_healthy_save_folder_is_quiet(tmp_path, inspect_json):
    report = inspect_json(megatron_run(tmp_path / "save")).json
    assert report["findings"] == []
    (run,) = report["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("megatron", "iteration", 200)
    assert len(run["checkpoints"][0]["files"]) == 2
    assert len(report["runs"]) == 1  # rank folders are not runs of their own


def test_an_iteration_newer_than_the_tracker_never_finished(tmp_path, inspect_json):
    folder = megatron_run(tmp_path / "save", (100, 200, 300), tracker=200)
    report = inspect_json(folder).json
    uncommitted = only(report, "CKD106")
    assert uncommitted["index"] == 300 and "latest_checkpointed_iteration.txt" in uncommitted["message"]
    assert report["runs"][0]["checkpoints"][-1]["status"] == "incomplete"
    assert report["runs"][0]["resume"]["index"] == 200


def test_a_missing_rank_folder_is_ckd105_and_the_tracker_points_at_it(tmp_path, inspect_json):
    folder = megatron_run(tmp_path / "save")
    shutil.rmtree(folder / "iter_0000200" / "mp_rank_01")
    report = inspect_json(folder).json
    assert "mp_rank_01/model_optim_rng.pt" in only(report, "CKD105")["message"]
    assert only(report, "CKD114")["index"] == 200
    assert report["runs"][0]["resume"]["index"] == 100


def test_a_tracker_naming_a_missing_iteration_is_ckd113(tmp_path, inspect_json):
    folder = megatron_run(tmp_path / "save", tracker=400)
    assert "not there" in only(inspect_json(folder).json, "CKD113")["message"]


# --- release/ (megatron/training/checkpointing.py: get_checkpoint_name, read_metadata, load_checkpoint)


def test_a_release_alone_is_a_whole_checkpoint_resumed_with_finetune(tmp_path, inspect_json, cli):
    folder = megatron_release(tmp_path / "save")
    result = inspect_json(folder)
    assert result.exit_code == 0 and result.json["findings"] == []
    (run,) = result.json["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("megatron", "iteration", 0)
    assert f"--load {folder} --finetune" in run["resume"]["how"]
    assert run["resume"]["path"] == str(folder / "release")
    # the model alone: Megatron loads no optimizer or RNG state from a release
    deep = cli("verify", "--deep", "--json", folder)
    assert deep.exit_code == 0 and json.loads(deep.stdout)["findings"] == []
    assert cli("inspect", "--resume-path", folder).stdout.strip() == str(folder / "release")


def test_a_release_is_not_compared_with_the_iterations_saved_after_it(tmp_path, inspect_json):
    folder = megatron_release(tmp_path / "save", tracker="200", iterations=(100, 200))
    report = inspect_json(folder).json
    assert report["findings"] == []  # no distrib_optim.pt in release/: not missing
    (run,) = report["runs"]
    assert [c["index"] for c in run["checkpoints"]] == [0, 100, 200] and run["resume"]["index"] == 200


def test_iterations_newer_than_a_release_tracker_never_finished(tmp_path, inspect_json):
    folder = megatron_release(tmp_path / "save", iterations=(100,))
    report = inspect_json(folder).json
    assert only(report, "CKD106")["index"] == 100
    assert report["runs"][0]["resume"]["index"] == 0


def test_a_cut_release_is_partial_and_the_tracker_names_it(tmp_path, inspect_json):
    folder = megatron_release(tmp_path / "save")
    weights = folder / "release" / "mp_rank_01" / "model_optim_rng.pt"
    weights.write_bytes(weights.read_bytes()[:-100])
    report = inspect_json(folder).json
    assert report["runs"][0]["checkpoints"][0]["status"] == "partial"
    assert report["runs"][0]["resume"] is None
    assert only(report, "CKD113")["index"] == 0


def test_a_release_tracker_without_the_folder_names_nothing(tmp_path, inspect_json):
    folder = megatron_run(tmp_path / "save", tracker="release")
    report = inspect_json(folder).json
    assert "not there" in only(report, "CKD113")["message"]


@pytest.mark.parametrize(
    ("built", "resumes"),
    [
        (lambda folder: megatron_release(folder, tracker="300"), (0, True)),  # release/ alone: `release`, never 0
        (lambda folder: megatron_run(folder, tracker=400), (200, False)),
    ],
)
def test_the_fix_of_a_stale_tracker_writes_what_megatron_reads_back(tmp_path, inspect_json, built, resumes):
    folder = built(tmp_path / "save")
    fixes = only(inspect_json(folder).json, "CKD113")["fixes"]
    (command,) = [span for fix in fixes for span in re.findall(r"`(printf [^`]*)`", fix)]
    subprocess.run(command, shell=True, check=True)
    assert megatron_tracker(folder) == resumes
    assert inspect_json(folder).json["findings"] == []


def test_repair_points_the_tracker_back_at_the_release(tmp_path, cli):
    folder = megatron_release(tmp_path / "save", tracker="300")
    assert cli("repair", "--yes", "--min-age", "0", folder).exit_code == 0
    assert (folder / "latest_checkpointed_iteration.txt").read_text() == "release"
    assert cli("inspect", "--json", folder).exit_code == 0


def test_prune_keeps_a_lone_release(tmp_path, cli):
    folder = megatron_release(tmp_path / "save")
    cli("prune", "--keep-last", "1", "--min-age", "0", "--yes", folder)
    assert (folder / "release" / "mp_rank_00" / "model_optim_rng.pt").is_file()


@pytest.mark.parametrize("inside", [("notes.md",), ("model_optim_rng.pt",), ("mp_rank_00.txt",)])
def test_a_release_folder_of_something_else_is_no_megatron_run(tmp_path, inspect_json, inside):
    folder = tmp_path / "project"
    (folder / "release").mkdir(parents=True)
    for name in inside:
        (folder / "release" / name).write_bytes(b"not a checkpoint")
    runs = inspect_json(folder).json["runs"]
    assert all(run["layout"] != "megatron" for run in runs)


def saved_by_megatron(save: Path) -> MegatronTraining:
    """Three iterations written as ``save_checkpoint`` writes the legacy torch format (two ranks)."""
    training = MegatronTraining(save)
    for _ in range(3):
        training.train(2).save_checkpoint()
    return training


def test_megatrons_own_pickled_objects_are_info_as_its_own_load_allows_them(tmp_path, cli):
    """``args`` (an ``argparse.Namespace``) and the numpy RNG state in every ``model_optim_rng.pt``:
    megatron.core registers them (``SAFE_GLOBALS``), so its own ``torch.load`` loads them."""
    training = saved_by_megatron(tmp_path / "save")
    report = cli("verify", "--json", "--fail-on", "warning", training.save).json
    objects = [f for f in report["findings"] if f["code"] == "CKD402"]
    assert objects and {f["severity"] for f in objects} == {"info"}, objects
    assert all("SAFE_GLOBALS" in f["message"] for f in objects)
    assert [f for f in report["findings"] if f["code"] != "CKD402"] == []
    assert megatron_load(training.save).iteration == 6  # loaded with megatron.core's safe globals


def test_an_empty_tracker_is_ckd113_where_load_stops_and_repair_writes_it(tmp_path, cli, inspect_json):
    """Killed as ``iter_finalize_fn`` rewrote the tracker: ``read_metadata`` stops the job ("Invalid
    metadata file", ``sys.exit()`` with status 0); ``repair`` writes the iteration again."""
    training = saved_by_megatron(tmp_path / "save")
    (training.save / MEGATRON_TRACKER).write_text("")
    with pytest.raises(SystemExit, match="Invalid metadata file"):
        megatron_load(training.save)
    report = inspect_json(training.save).json
    stale = only(report, "CKD113")
    assert stale["severity"] == "error" and "is empty" in stale["message"] and report["runs"][0]["resume"]["index"] == 6
    assert cli("repair", "--yes", "--min-age", "0s", training.save).exit_code == 0
    assert (training.save / MEGATRON_TRACKER).read_text() == "6"
    assert megatron_load(training.save).iteration == 6
    assert "CKD113" not in {f["code"] for f in inspect_json(training.save).json["findings"]}
