"""MosaicML Composer save folders, written the way Composer writes them, and resumed the way it resumes.

Composer cannot be installed here (every release pins torch < 2.7.1 and imports torchvision), so
``frameworks.composer_save`` does what ``CheckpointSaver._save_checkpoint``
(``composer/callbacks/checkpoint_saver.py``) and ``_save_checkpoint`` / ``_write_checkpoint_file``
(``composer/utils/checkpoint.py``) do, ``composer_load`` what ``_torch_load_with_validation`` and
``State.load_state_dict`` do, and ``composer_autoresume`` what ``Trainer._get_autoresume_checkpoint``
does, all at mosaicml/composer 6405188805a0054b4551ec49e4919c54c971d0e8: the same dict, names,
relative symlink and ``weights_only=True`` load with Composer's allowed globals.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from frameworks import (
    composer_autoresume,
    composer_load,
    composer_load_sharded,
    composer_run,
    composer_save,
    composer_sharded_save,
    composer_state,
)
from test_repair_frameworks import age

from ckptdoctor.pipelines.scan import inspect

torch = pytest.importorskip("torch")
CheckpointException = pytest.importorskip("torch.distributed.checkpoint").CheckpointException


def only(report: dict, code: str) -> dict:
    (finding,) = [f for f in report["findings"] if f["code"] == code]
    return finding


def test_a_healthy_save_folder_is_clean_under_deep_verify_and_resumes_where_it_says(tmp_path, cli, inspect_json):
    folder = composer_run(tmp_path / "tiny-run" / "checkpoints", ((1, 4), (2, 8), (3, 12)))
    result = cli("verify", "--deep", "--json", "--fail-on", "warning", folder)
    assert result.exit_code == 0, result.json["findings"]
    # the timestamp's wall-clock times and the numpy RNG state: Composer's own load allows them
    assert {(f["code"], f["severity"]) for f in result.json["findings"]} == {("CKD402", "info")}
    assert all("composer" in f["message"] for f in result.json["findings"])
    (run,) = inspect_json(folder).json["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("composer", "step", 12)
    assert [c["index"] for c in run["checkpoints"]] == [4, 8, 12]  # by batch, not by epoch
    report, found = inspect([str(folder)])
    assert report.findings == ()
    (scanned,) = found.runs
    assert scanned.resume_path == str(folder / "ep3-ba12-rank0.pt")
    assert "epoch 3, batch 12" in scanned.resume_how and "autoresume=True" in scanned.resume_how
    assert cli("inspect", "--resume-path", folder).stdout.strip() == str(folder / "ep3-ba12-rank0.pt")
    # Composer's load of what ckptdoctor names, and its autoresume, agree
    assert composer_load(scanned.resume_path)[0] == 12
    assert os.path.samefile(composer_autoresume(folder), scanned.resume_path)


def test_a_kill_mid_save_leaves_a_cut_file_and_latest_on_the_previous_save(tmp_path, cli, inspect_json):
    folder = composer_run(tmp_path / "checkpoints")
    cut = folder / "ep3-ba12-rank0.pt"
    with open(cut, "wb") as f:  # the save is written in place, and the link is made after it
        torch.save(composer_state(12, 3), f)
    cut.write_bytes(cut.read_bytes()[:900])
    report = inspect_json(folder).json
    (run,) = report["runs"]
    assert run["checkpoints"][-1]["status"] != "complete" and run["resume"]["index"] == 8
    assert only(report, "CKD203")["path"].endswith("ep3-ba12-rank0.pt")
    assert not [f for f in report["findings"] if f["code"] in ("CKD113", "CKD114")]  # latest still names batch 8
    age(folder)
    assert cli("repair", "--yes", folder).exit_code == 0
    assert not cut.exists()
    assert composer_load(composer_autoresume(folder))[0] == 8


def test_latest_naming_a_cut_save_is_stale_and_repair_points_it_back(tmp_path, cli, inspect_json):
    folder = composer_run(tmp_path / "checkpoints")
    newest = folder / "ep2-ba8-rank0.pt"
    newest.write_bytes(newest.read_bytes()[:-200])
    report = inspect_json(folder).json
    assert only(report, "CKD113")["index"] == 8
    assert only(report, "CKD114")["index"] == 8  # autoresume would load it
    assert report["runs"][0]["resume"]["index"] == 4
    age(folder)
    plan = cli("repair", "--dry-run", "--json", folder).json["plan"]
    assert any(item["action"] == "repoint" for item in plan)
    assert cli("repair", "--yes", folder).exit_code == 0
    assert os.readlink(folder / "latest-rank0.pt") == "ep1-ba4-rank0.pt"  # relative, as Composer makes it
    assert composer_load(composer_autoresume(folder))[0] == 4
    assert inspect_json(folder).json["findings"] == []


def test_a_dangling_latest_is_reported_and_repair_makes_autoresume_find_a_checkpoint(tmp_path, cli, inspect_json):
    folder = composer_run(tmp_path / "checkpoints")
    (folder / "ep2-ba8-rank0.pt").unlink()  # deleted by hand, or lost in a copy
    report = inspect_json(folder).json
    dangling = only(report, "CKD113")
    assert dangling["path"].endswith("latest-rank0.pt") and "symlink" in dangling["message"]
    assert composer_autoresume(folder) is None  # Composer sees no checkpoint: the run would start over
    age(folder)
    assert cli("repair", "--yes", folder).exit_code == 0
    assert os.readlink(folder / "latest-rank0.pt") == "ep1-ba4-rank0.pt"
    assert composer_load(composer_autoresume(folder))[0] == 4


def test_a_save_without_optimizer_state_is_incomplete(tmp_path, cli):
    folder = composer_run(tmp_path / "checkpoints")
    saved = composer_state(8, 2)
    del saved["state"]["optimizers"]  # save_ignore_keys=["state/optimizers"], or a cleanup script
    with open(folder / "ep2-ba8-rank0.pt", "wb") as f:
        torch.save(saved, f)
    report = cli("verify", "--json", folder).json
    assert only(report, "CKD101")["index"] == 8
    assert report["runs"][0]["resume"]["index"] == 4
    assert only(report, "CKD114")["index"] == 8


def test_a_weights_only_saver_is_weights_only_by_design(tmp_path, cli):
    folder = composer_run(tmp_path / "checkpoints", weights_only=True)
    report = cli("verify", "--json", folder).json
    assert {(f["code"], f["severity"]) for f in report["findings"]} == {("CKD107", "info"), ("CKD402", "info")}  # TorchVersion: allowed
    (run,) = report["runs"]
    assert run["resume"]["index"] == 8
    report, found = inspect([str(folder)])
    assert "load_weights_only=True" in found.runs[0].resume_how


def test_a_checkpoint_needs_every_rank_its_siblings_have(tmp_path, inspect_json):
    folder = composer_run(tmp_path / "checkpoints", ranks=2)
    (folder / "ep2-ba8-rank1.pt").unlink()
    report = inspect_json(folder).json
    absent = only(report, "CKD105")
    assert absent["index"] == 8 and "ep2-ba8-rank1.pt" in absent["message"]
    (run,) = report["runs"]
    assert run["checkpoints"][-1]["status"] == "incomplete" and run["resume"]["index"] == 4
    _, found = inspect([str(folder)])
    assert "rank{rank}.pt" in found.runs[0].resume_how  # Composer formats the placeholder per rank


def test_the_remote_symlink_object_in_a_copy_of_the_bucket_is_followed_and_repaired(tmp_path, cli, inspect_json):
    folder = composer_run(tmp_path / "bucket" / "tiny-run" / "checkpoints", latest=False)
    remote = folder / "latest-rank0.pt.symlink"
    remote.write_text("tiny-run/checkpoints/ep2-ba8-rank0.pt")  # create_symlink_file: the remote name, no newline
    report = inspect_json(folder).json
    assert report["findings"] == [] and report["runs"][0]["resume"]["index"] == 8
    (folder / "ep2-ba8-rank0.pt").write_bytes(b"")  # an upload cut short
    report = inspect_json(folder).json
    assert only(report, "CKD113")["index"] == 8
    age(folder)
    assert cli("repair", "--yes", folder).exit_code == 0
    assert remote.read_text() == "tiny-run/checkpoints/ep1-ba4-rank0.pt"


def test_prune_keeps_what_latest_names(tmp_path, cli):
    folder = composer_run(tmp_path / "checkpoints", ((1, 4), (2, 8), (3, 12), (4, 16)))
    age(folder)
    assert cli("prune", "--keep-last", "2", "--yes", folder).exit_code == 0
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == [
        "ep3-ba12-rank0.pt", "ep4-ba16-rank0.pt", "latest-rank0.pt",
    ]  # fmt: skip
    assert composer_load(composer_autoresume(folder))[0] == 16


def test_fsdp_sharded_saves_are_composers_folders_and_resume_through_latest(tmp_path, cli):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for epoch, batch in ((1, 4), (2, 8)):
        composer_sharded_save(folder, epoch, batch)
    result = cli("verify", "--deep", "--json", folder)
    assert result.exit_code == 0, result.json["findings"]
    (run,) = result.json["runs"]
    assert (run["layout"], run["unit"], [c["index"] for c in run["checkpoints"]]) == ("composer", "step", [4, 8])
    _, found = inspect([str(folder)])
    (scanned,) = found.runs
    assert scanned.resume_path == str(folder / "ep2-ba8")
    assert f'load_path="{folder / "ep2-ba8"}"' in scanned.resume_how and "autoresume=True" in scanned.resume_how
    assert os.path.samefile(composer_autoresume(folder), scanned.resume_path)  # latest-rank0.pt -> the folder
    assert composer_load_sharded(scanned.resume_path)[0] == 8


def test_a_sharded_save_damaged_after_latest_named_it_is_stale_and_repair_points_latest_back(tmp_path, cli, inspect_json):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for epoch, batch in ((1, 4), (2, 8)):
        composer_sharded_save(folder, epoch, batch)
    shard = folder / "ep2-ba8" / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:20000])  # a copy or sync of the run cut short
    report = inspect_json(folder).json
    assert only(report, "CKD113")["index"] == 8 and only(report, "CKD114")["index"] == 8
    assert report["runs"][0]["resume"]["index"] == 4
    with pytest.raises(CheckpointException):  # Composer's autoresume would load the cut folder, and fail
        composer_load_sharded(composer_autoresume(folder))
    age(folder)
    assert cli("repair", "--yes", folder).exit_code == 0
    assert os.readlink(folder / "latest-rank0.pt") == "ep1-ba4"  # relative, to the folder, as Composer makes it
    assert composer_load_sharded(composer_autoresume(folder))[0] == 4
    assert inspect_json(folder).json["findings"] == []


def test_a_hand_made_loop_is_not_composer_and_composer_is_not_torch(tmp_path, inspect_json):
    loop = tmp_path / "loop"
    loop.mkdir()
    for epoch in (1, 2):
        torch.save({"model": {}, "optimizer": {}}, loop / f"ep{epoch}.pt")
    (loop / "latest.pt").symlink_to("ep2.pt")
    assert inspect_json(loop).json["runs"][0]["layout"] == "torch"
    folder = composer_run(tmp_path / "composer")
    assert inspect_json(folder).json["runs"][0]["layout"] == "composer"


@pytest.mark.parametrize("name", ["latest-rank0.pt", "latest-rank0.pt.symlink"])
def test_a_latest_pointer_outside_the_run_names_nothing_of_it(tmp_path, inspect_json, name):
    folder = composer_run(tmp_path / "checkpoints", latest=False)
    other = composer_run(tmp_path / "other")
    if name.endswith(".symlink"):
        (folder / name).write_text("tiny-run/checkpoints/ep9-ba36-rank0.pt")
    else:
        (folder / name).symlink_to(os.path.relpath(other / "ep2-ba8-rank0.pt", folder))
    assert Path(folder / name).exists()
    stale = only(inspect_json(folder).json, "CKD113")
    assert stale["index"] is None or stale["index"] == 36


def test_a_save_killed_before_latest_moved_is_the_resume_point_and_autoresume_going_back_is_ckd116(tmp_path, cli, inspect_json):
    """The saver links ``latest-rank0.pt`` after the save: killed between the two, ``autoresume``
    loads the save before and trains its batches again (CKD116, a warning); ``repair`` links it on."""
    folder = composer_run(tmp_path / "checkpoints")
    composer_save(folder, 3, 12, latest=False)
    report = inspect_json(folder).json
    assert report["runs"][0]["resume"]["index"] == 12
    behind = only(report, "CKD116")
    assert behind["severity"] == "warning" and behind["path"].endswith("latest-rank0.pt") and "ep2-ba8-rank0.pt" in behind["message"]
    assert composer_load(composer_autoresume(folder))[0] == 8
    age(folder)
    assert cli("repair", "--yes", folder).exit_code == 0
    assert os.readlink(folder / "latest-rank0.pt") == "ep3-ba12-rank0.pt"
    assert composer_load(composer_autoresume(folder))[0] == 12
    assert inspect_json(folder).json["findings"] == []


def test_a_deleted_latest_is_ckd113_where_autoresume_starts_over_and_repair_links_it(tmp_path, cli, inspect_json):
    folder = composer_run(tmp_path / "checkpoints")
    (folder / "latest-rank0.pt").unlink()
    assert composer_autoresume(folder) is None  # autoresume=True: a fresh start
    missing = only(inspect_json(folder).json, "CKD113")
    assert missing["severity"] == "error" and "latest-rank0.pt" in missing["message"]
    age(folder)
    assert cli("repair", "--yes", folder).exit_code == 0
    assert os.readlink(folder / "latest-rank0.pt") == "ep2-ba8-rank0.pt"
    assert composer_load(composer_autoresume(folder))[0] == 8
    assert inspect_json(folder).json["findings"] == []
