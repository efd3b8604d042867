"""fairseq ``--save-dir`` folders, written as fairseq writes them and resumed as it resumes.

fairseq cannot be imported here (0.12.2 builds, but its dataclass configs fail on Python 3.11),
so ``frameworks.FairseqTrainer`` writes the files with ``torch.save`` from fairseq's own code
(``checkpoint_utils.save_checkpoint``, ``torch_persistent_save``, ``Trainer.state_dict`` at
facebookresearch/fairseq 3d262bb25690e4eb2e7d3c1309b1e9c406ca4b99) and ``frameworks.fairseq_resume``
loads what ``--restore-file`` names as ``load_checkpoint`` and ``Trainer.load_checkpoint`` do.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from frameworks import FairseqTrainer, fairseq_resume
from reports import codes

from ckptdoctor.layouts.registry import layout_named
from ckptdoctor.model import Unit
from ckptdoctor.pipelines.scan import scan

torch = pytest.importorskip("torch")


def only(report: dict, code: str) -> dict:
    (finding,) = [f for f in report["findings"] if f["code"] == code]
    return finding


def resumed_from(cli, folder: Path) -> dict:
    """What fairseq loads from the path ``inspect --resume-path`` prints (``--restore-file``)."""
    result = cli("inspect", "--resume-path", folder)
    assert result.exit_code in (0, 1), result.stdout + result.stderr
    return fairseq_resume(result.stdout.strip())


def cut(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


# --- healthy runs ------------------------------------------------------------------------------


def test_end_of_epoch_saves_are_indexed_by_epoch_and_clean_under_deep_verify(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints").epochs(3)
    result = cli("verify", "--deep", "--json", trainer.save_dir)
    assert result.exit_code == 0 and result.json["findings"] == []
    (run,) = result.json["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("fairseq", "epoch", 3)
    assert [c["index"] for c in run["checkpoints"]] == [1, 2, 3]
    assert sorted(Path(f["path"]).name for f in run["loose_files"]) == ["checkpoint_best.pt", "checkpoint_last.pt"]
    (scanned,) = scan([str(trainer.save_dir)]).runs
    assert f"`--restore-file {trainer.save_dir}/checkpoint3.pt`" in scanned.resume_how
    state = resumed_from(cli, trainer.save_dir)
    assert (state["epoch"], state["num_updates"]) == (4, 12)  # the iterator goes on at the next epoch
    assert torch.equal(state["model"].weight, trainer.model.weight)


def test_interval_saves_alone_are_indexed_by_updates(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints", save_interval_updates=3, no_epoch_checkpoints=True).epochs(3, updates=4)
    report = cli("verify", "--deep", "--json", trainer.save_dir).json
    assert report["findings"] == []
    (run,) = report["runs"]
    # fairseq's --keep-interval-updates orders them by updates too (checkpoint_paths on the second number)
    assert (run["unit"], [c["index"] for c in run["checkpoints"]]) == ("step", [3, 6, 9])
    assert run["resume"]["index"] == 9
    state = resumed_from(cli, trainer.save_dir)
    assert (state["epoch"], state["in_epoch"], state["num_updates"]) == (3, 1, 9)


def test_interval_saves_between_epochs_fill_their_epochs_place(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints", save_interval_updates=3).epochs(2, updates=4)
    trainer.update()  # epoch 3 is killed right after its interval save at 9 updates
    trainer.save(end_of_epoch=False)
    report = cli("verify", "--json", trainer.save_dir).json
    assert report["findings"] == []
    (run,) = report["runs"]
    assert (run["unit"], [c["index"] for c in run["checkpoints"]]) == ("epoch", [1, 2, 3])
    (newest,) = run["checkpoints"][-1]["files"]
    assert Path(newest["path"]).name == "checkpoint_3_9.pt"
    # the interval saves of finished epochs are copies beside the run, superseded by the epoch's end
    loose = sorted(Path(f["path"]).name for f in run["loose_files"])
    assert loose == ["checkpoint_1_3.pt", "checkpoint_2_6.pt", "checkpoint_best.pt", "checkpoint_last.pt"]
    (scanned,) = scan([str(trainer.save_dir)]).runs
    assert "saved inside epoch 3, after 9 updates" in scanned.resume_how
    state = resumed_from(cli, trainer.save_dir)
    assert (state["epoch"], state["in_epoch"], state["num_updates"]) == (3, 1, 9)
    assert torch.equal(state["model"].weight, trainer.model.weight)


def test_sharded_state_makes_one_checkpoint_of_every_ranks_file(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints", ranks=2).epochs(2)
    report = cli("verify", "--deep", "--json", trainer.save_dir).json
    assert report["findings"] == []
    (run,) = report["runs"]
    assert [len(c["files"]) for c in run["checkpoints"]] == [2, 2]
    # --restore-file takes the name without the rank suffix: each rank appends its own
    path = cli("inspect", "--resume-path", trainer.save_dir).stdout.strip()
    assert path == str(trainer.save_dir / "checkpoint2.pt")
    assert fairseq_resume(path.replace(".pt", "-shard1.pt"))["epoch"] == 3


def test_a_missing_rank_file_makes_its_checkpoint_incomplete(tmp_path, inspect_json):
    trainer = FairseqTrainer(tmp_path / "checkpoints", ranks=2).epochs(2)
    (trainer.save_dir / "checkpoint2-shard1.pt").unlink()
    report = inspect_json(trainer.save_dir).json
    assert "checkpoint2-shard1.pt" in only(report, "CKD105")["message"]
    assert report["runs"][0]["resume"]["index"] == 1


# --- the usual breaks --------------------------------------------------------------------------


def test_a_save_killed_while_writing_leaves_a_tmp_and_the_resume_is_the_previous_epoch(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints").epochs(3)
    last = (trainer.save_dir / "checkpoint_last.pt").read_bytes()
    trainer.update()
    torch.save(trainer.state_dict(1.0, True), trainer.save_dir / "checkpoint4.pt.tmp")
    cut(trainer.save_dir / "checkpoint4.pt.tmp")  # torch_persistent_save killed before its rename
    report = cli("inspect", "--json", trainer.save_dir).json
    (run,) = report["runs"]
    assert run["checkpoints"][-1]["index"] == 4 and run["checkpoints"][-1]["status"] == "partial"
    assert run["resume"]["index"] == 3
    assert only(report, "CKD202")["path"].endswith("checkpoint4.pt.tmp")
    assert resumed_from(cli, trainer.save_dir)["epoch"] == 4
    # the copies come after the rename: checkpoint_last.pt still holds epoch 3, as the resume point does
    assert (trainer.save_dir / "checkpoint_last.pt").read_bytes() == last


def test_a_cut_newest_checkpoint_whose_copy_is_whole_resumes_from_the_copy(tmp_path, cli):
    """checkpoint3.pt cut after its copies were made: checkpoint_last.pt (and checkpoint_best.pt)
    still hold epoch 3 whole, and fairseq's default --restore-file goes on from there: so does
    the resume point, through the copy."""
    trainer = FairseqTrainer(tmp_path / "checkpoints").epochs(3)
    cut(trainer.save_dir / "checkpoint3.pt")
    with pytest.raises(Exception):  # noqa: B017 - whatever torch.load raises on a cut archive
        fairseq_resume(trainer.save_dir / "checkpoint3.pt")
    for command in ("inspect", "verify"):
        report = cli(command, "--json", trainer.save_dir).json
        assert only(report, "CKD203")["path"].endswith("checkpoint3.pt"), command
        (run,) = report["runs"]
        assert (run["resume"]["index"], Path(run["resume"]["path"]).name) == (3, "checkpoint_last.pt"), command
    assert resumed_from(cli, trainer.save_dir)["epoch"] == 4  # epoch 3 kept
    assert fairseq_resume(trainer.save_dir / "checkpoint_last.pt")["epoch"] == 4  # the default agrees


def test_a_checkpoint_without_its_optimizer_state_is_ckd101(tmp_path, inspect_json):
    trainer = FairseqTrainer(tmp_path / "checkpoints").epochs(3)
    path = trainer.save_dir / "checkpoint3.pt"
    state = torch.load(path, weights_only=False)
    del state["last_optimizer_state"]
    torch.save(state, path)
    report = inspect_json(trainer.save_dir).json
    assert only(report, "CKD101")["index"] == 3
    assert report["runs"][0]["resume"]["index"] == 2
    # fairseq itself would load it and silently start a new optimizer at update 0
    assert fairseq_resume(path)["num_updates"] == 0


def test_no_save_optimizer_state_is_weights_only_by_design(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints", no_save_optimizer_state=True).epochs(2)
    report = cli("verify", "--json", trainer.save_dir).json
    assert codes(report) == ["CKD107"] and "last_optimizer_state" in report["findings"][0]["message"]
    assert report["runs"][0]["resume"]["index"] == 2
    (scanned,) = scan([str(trainer.save_dir)]).runs
    assert "counts updates from 0" in scanned.resume_how and "--reset-optimizer" in scanned.resume_how
    assert resumed_from(cli, trainer.save_dir)["num_updates"] == 0


def test_a_cut_interval_save_falls_back_to_the_epochs_previous_whole_one(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints", save_interval_updates=2).epochs(1, updates=4)
    for _ in range(2):  # epoch 2: interval saves at 6 and 8 updates, the second cut
        trainer.update()
        trainer.update()
        trainer.save(end_of_epoch=False)
    cut(trainer.save_dir / "checkpoint_2_8.pt")
    report = cli("inspect", "--json", trainer.save_dir).json
    (run,) = report["runs"]
    assert run["resume"]["index"] == 2
    (resume,) = [c for c in run["checkpoints"] if c["index"] == 2]
    assert Path(resume["files"][0]["path"]).name == "checkpoint_2_6.pt"
    assert only(report, "CKD203")["path"].endswith("checkpoint_2_8.pt")
    state = resumed_from(cli, trainer.save_dir)
    assert (state["epoch"], state["num_updates"]) == (2, 6)


def test_a_staging_file_of_an_interval_save_is_a_leftover_not_the_epochs_checkpoint(tmp_path, inspect_json):
    trainer = FairseqTrainer(tmp_path / "checkpoints", save_interval_updates=2).epochs(1, updates=4)
    trainer.update()
    trainer.update()
    trainer.save(end_of_epoch=False)
    trainer.update()
    trainer.update()
    torch.save(trainer.state_dict(None, False), trainer.save_dir / "checkpoint_2_8.pt.tmp")
    cut(trainer.save_dir / "checkpoint_2_8.pt.tmp")
    report = inspect_json(trainer.save_dir).json
    (run,) = report["runs"]
    assert run["resume"]["index"] == 2 and run["checkpoints"][-1]["status"] == "complete"
    assert only(report, "CKD202")["path"].endswith("checkpoint_2_8.pt.tmp")


# --- checkpoint_last.pt, and repair ------------------------------------------------------------


def test_a_cut_checkpoint_last_is_repaired_with_a_copy_of_the_resume_point(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints").epochs(3)
    cut(trainer.save_dir / "checkpoint_last.pt")  # killed while PathManager.copy wrote it
    report = cli("inspect", "--json", trainer.save_dir).json
    assert only(report, "CKD203")["path"].endswith("checkpoint_last.pt")
    assert report["runs"][0]["resume"]["index"] == 3
    with pytest.raises(Exception):  # noqa: B017 - fairseq's default resume would fail
        fairseq_resume(trainer.save_dir / "checkpoint_last.pt")
    plan = cli("repair", "--json", "--dry-run", "--min-age", "0s", trainer.save_dir)
    assert plan.exit_code == 0, plan.stdout + plan.stderr
    done = cli("repair", "--yes", "--min-age", "0s", trainer.save_dir)
    assert done.exit_code == 0, done.stdout + done.stderr
    last = trainer.save_dir / "checkpoint_last.pt"
    assert not last.is_symlink() and last.read_bytes() == (trainer.save_dir / "checkpoint3.pt").read_bytes()
    # fairseq's default --restore-file goes on from epoch 3's end
    assert fairseq_resume(last)["epoch"] == 4
    assert "CKD203" not in codes(cli("inspect", "--json", trainer.save_dir).json)
    undone = cli("repair", "--undo", "--yes", trainer.save_dir)
    assert undone.exit_code == 0, undone.stdout + undone.stderr


def test_a_stale_but_whole_checkpoint_last_is_not_the_resume_point_and_the_hint_says_the_default_goes_back(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints").epochs(2)
    for _ in range(4):
        trainer.update()
    trainer.save(1.0, end_of_epoch=True, copies=False)  # checkpoint3.pt renamed into place, killed before its copies
    last, newest = trainer.save_dir / "checkpoint_last.pt", trainer.save_dir / "checkpoint3.pt"
    report = cli("inspect", "--json", trainer.save_dir).json
    assert report["runs"][0]["resume"]["index"] == 3
    (behind,) = report["findings"]  # the default goes back a whole epoch: lost progress, no failure
    assert (behind["code"], behind["severity"], behind["path"]) == ("CKD116", "warning", str(last))
    assert "checkpoint2.pt" in behind["message"]
    assert resumed_from(cli, trainer.save_dir)["epoch"] == 4  # --restore-file checkpoint3.pt: epoch 3 is kept
    assert fairseq_resume(last)["epoch"] == 3  # fairseq's default: back to epoch 2's end, epoch 3 trained again
    (scanned,) = scan([str(trainer.save_dir)]).runs
    assert "Without `--restore-file`, fairseq would load checkpoint_last.pt" in scanned.resume_how
    assert f"`cp {newest} {last}`" in scanned.resume_how
    shutil.copyfile(newest, last)  # what the hint says to do: the copy save_checkpoint did not make
    assert fairseq_resume(last)["epoch"] == 4
    (scanned,) = scan([str(trainer.save_dir)]).runs
    assert "checkpoint_last.pt" not in scanned.resume_how
    assert cli("inspect", "--json", trainer.save_dir).json["findings"] == []


def test_repair_copies_the_resume_point_over_a_checkpoint_last_left_behind(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints").epochs(3)
    shutil.copyfile(trainer.save_dir / "checkpoint1.pt", trainer.save_dir / "checkpoint_last.pt")  # an old copy put back
    assert only(cli("inspect", "--json", trainer.save_dir).json, "CKD116")["index"] == 1
    done = cli("repair", "--yes", "--min-age", "0s", trainer.save_dir)
    assert done.exit_code == 0, done.stdout + done.stderr
    assert fairseq_resume(trainer.save_dir / "checkpoint_last.pt")["epoch"] == 4
    assert cli("inspect", "--json", trainer.save_dir).json["findings"] == []


@pytest.mark.parametrize("copied", [2, 3])
def test_a_checkpoint_last_with_the_newest_saves_very_time_is_told_by_its_bytes(tmp_path, copied):
    """A coarse file-system clock (seconds on some NFS and FAT mounts) gives a save and the copy
    written after it one time, and a killed save's file the time of the older copy before it: which
    save `checkpoint_last.pt` holds is then told by its bytes, never guessed from the tie."""
    trainer = FairseqTrainer(tmp_path / "checkpoints").epochs(2)
    for _ in range(4):
        trainer.update()
    trainer.save(1.0, end_of_epoch=True, copies=False)
    last = trainer.save_dir / "checkpoint_last.pt"
    shutil.copyfile(trainer.save_dir / f"checkpoint{copied}.pt", last)
    tick = (trainer.save_dir / "checkpoint3.pt").stat().st_mtime_ns
    os.utime(trainer.save_dir / "checkpoint3.pt", ns=(tick, tick))
    os.utime(last, ns=(tick, tick))
    (scanned,) = scan([str(trainer.save_dir)]).runs
    assert fairseq_resume(last)["epoch"] == copied + 1
    assert ("fairseq would load checkpoint_last.pt" in scanned.resume_how) is (copied == 2)


def test_a_missing_checkpoint_last_is_ckd113_and_repair_writes_it(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints").epochs(2)
    (trainer.save_dir / "checkpoint_last.pt").unlink()
    report = cli("inspect", "--json", trainer.save_dir).json
    assert "checkpoint_last.pt" in only(report, "CKD113")["message"]
    done = cli("repair", "--yes", "--min-age", "0s", trainer.save_dir)
    assert done.exit_code == 0, done.stdout + done.stderr
    assert fairseq_resume(trainer.save_dir / "checkpoint_last.pt")["epoch"] == 3
    assert "CKD113" not in codes(cli("inspect", "--json", trainer.save_dir).json)


def test_repair_quarantines_a_partial_newest_epoch(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints").epochs(3)
    cut(trainer.save_dir / "checkpoint3.pt")
    cut(trainer.save_dir / "checkpoint_last.pt")
    done = cli("repair", "--yes", "--min-age", "0s", trainer.save_dir)
    assert done.exit_code == 0, done.stdout + done.stderr
    assert not (trainer.save_dir / "checkpoint3.pt").exists()
    assert fairseq_resume(trainer.save_dir / "checkpoint_last.pt")["epoch"] == 3  # epoch 2's copy: goes on at 3
    report = cli("inspect", "--json", trainer.save_dir).json
    assert report["runs"][0]["resume"]["index"] == 2 and not [f for f in report["findings"] if f["severity"] == "error"]


# --- prune -------------------------------------------------------------------------------------


def test_prune_keeps_the_newest_and_leaves_fairseqs_copies(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints").epochs(4)
    result = cli("prune", "--keep-last", "1", "--yes", "--min-age", "0s", trainer.save_dir)
    assert result.exit_code == 0, result.stdout + result.stderr
    left = sorted(p.name for p in trainer.save_dir.iterdir() if not p.name.startswith("."))
    assert left == ["checkpoint4.pt", "checkpoint_best.pt", "checkpoint_last.pt"]
    assert fairseq_resume(trainer.save_dir / "checkpoint_last.pt")["epoch"] == 5


def test_keep_best_reads_the_values_fairseqs_best_copies_carry(tmp_path, cli):
    trainer = FairseqTrainer(tmp_path / "checkpoints", keep_best_checkpoints=2).epochs(5, losses=[3.0, 1.0, 2.0, 1.5, 2.5])
    kept = sorted(p.name for p in trainer.save_dir.glob("checkpoint.best_*"))
    assert kept == ["checkpoint.best_loss_1.0000.pt", "checkpoint.best_loss_1.5000.pt"]
    (run,) = scan([str(trainer.save_dir)]).runs
    values = layout_named("fairseq").metric_values(run, str(trainer.save_dir), "loss", lambda path: None)
    assert values == {2: 1.0, 4: 1.5}
    result = cli("prune", "--keep-last", "1", "--keep-best", "1", "--metric", "loss", "--yes", "--min-age", "0s", trainer.save_dir)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert sorted(p.name for p in trainer.save_dir.glob("checkpoint[0-9]*.pt")) == ["checkpoint2.pt", "checkpoint5.pt"]


def test_a_best_copy_is_placed_by_its_content_whatever_the_times_say(tmp_path):
    """Times and sizes placed it once, and a folder copied without its times lost the values; the
    pickle its archive records is the save's own, whatever the times."""
    trainer = FairseqTrainer(tmp_path / "checkpoints", keep_best_checkpoints=1).epochs(3, losses=[3.0, 1.0, 2.0])
    shutil.copystat(trainer.save_dir / "checkpoint1.pt", trainer.save_dir / "checkpoint3.pt")  # times no longer in save order
    (run,) = scan([str(trainer.save_dir)]).runs
    assert layout_named("fairseq").metric_values(run, str(trainer.save_dir), "loss", lambda path: None) == {2: 1.0}


# --- recognition -------------------------------------------------------------------------------


def test_a_hand_made_loop_with_fairseq_like_names_is_not_fairseq(tmp_path, inspect_json):
    folder = tmp_path / "loop"
    folder.mkdir()
    for updates in (500, 1000):
        torch.save({"model": {}, "optimizer": {}}, folder / f"checkpoint_1_{updates}.pt")
    (run,) = inspect_json(folder).json["runs"]
    assert run["layout"] == "torch"


def test_a_torch_run_beside_a_last_file_stays_torch(tmp_path, inspect_json):
    folder = tmp_path / "loop"
    folder.mkdir()
    for epoch in (1, 2):
        torch.save({"model": {}, "optimizer": {}}, folder / f"epoch_{epoch}.pt")
    torch.save({"model": {}}, folder / "checkpoint_last.pt")
    (run,) = inspect_json(folder).json["runs"]
    assert run["layout"] == "torch"


def test_a_fairseq_run_is_not_taken_for_a_torch_run(tmp_path):
    trainer = FairseqTrainer(tmp_path / "checkpoints", save_interval_updates=2, no_epoch_checkpoints=True).epochs(1)
    (run,) = scan([str(trainer.save_dir)]).runs
    assert (run.layout, run.unit) == ("fairseq", Unit.STEP)
