"""Lightning under DeepSpeed/FSDP (``.ckpt`` folders) and NeMo's exp_manager checkpoints.

Written from source, neither DeepSpeed nor NeMo installs beside Lightning here:
``lightning/pytorch/strategies/deepspeed.py`` and ``fsdp.py`` (``save_checkpoint``,
``_is_sharded_checkpoint``), DeepSpeed's ``engine.save_checkpoint`` names, DCP written by
``torch.distributed.checkpoint.save``; NeMo's ``nemo/utils/exp_manager.py``
(``configure_checkpointing``) and ``nemo/utils/callbacks/nemo_model_checkpoint.py``
(``-last`` copies, ``format_checkpoint_unfinished_marker_path``). Builders in ``tests/frameworks.py``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from frameworks import lightning_deepspeed_run, lightning_fsdp_run
from reports import codes


def statuses(report: dict) -> dict[int, str]:
    (run,) = report["runs"]
    return {c["index"]: c["status"] for c in run["checkpoints"]}


@pytest.mark.parametrize("build", [lightning_deepspeed_run, lightning_fsdp_run])
@pytest.mark.parametrize("last", ["link", "copy"])
def test_healthy_ckpt_folders_are_the_lightning_runs_checkpoints(tmp_path, inspect_json, cli, build, last):
    folder = build(tmp_path / "checkpoints", last=last)
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 0 and report["findings"] == []
    (run,) = report["runs"]
    assert (run["layout"], run["unit"]) == ("lightning", "step")
    assert statuses(report) == {2: "complete", 4: "complete"}
    newest = str(folder / "epoch=1-step=4.ckpt")
    assert run["resume"]["path"] == newest and f'ckpt_path="{newest}"' in run["resume"]["how"]
    assert [Path(f["path"]).name for f in run["loose_files"]] == ["last.ckpt"]
    assert cli("verify", "--deep", folder).exit_code == 0
    assert cli("inspect", "--resume-path", folder).stdout.strip() == newest


def test_a_deepspeed_folder_missing_an_optimizer_partition_is_incomplete(tmp_path, inspect_json):
    folder = lightning_deepspeed_run(tmp_path / "checkpoints", last=None)
    (folder / "epoch=1-step=4.ckpt" / "checkpoint" / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    report = inspect_json(folder).json
    assert statuses(report)[4] != "complete" and statuses(report)[2] == "complete"
    assert "CKD105" in codes(report)
    assert report["runs"][0]["resume"]["index"] == 2


def test_a_deepspeed_folder_without_its_latest_is_not_resumable(tmp_path, inspect_json):
    folder = lightning_deepspeed_run(tmp_path / "checkpoints", last=None)
    (folder / "epoch=1-step=4.ckpt" / "latest").unlink()
    report = inspect_json(folder).json
    assert statuses(report) == {2: "complete", 4: "incomplete"}
    assert report["runs"][0]["resume"]["index"] == 2


def test_a_cut_deepspeed_model_states_file_moves_the_resume_point(tmp_path, inspect_json):
    folder = lightning_deepspeed_run(tmp_path / "checkpoints", last=None)
    states = folder / "epoch=1-step=4.ckpt" / "checkpoint" / "mp_rank_00_model_states.pt"
    states.write_bytes(states.read_bytes()[:300])
    report = inspect_json(folder).json
    assert statuses(report)[4] in ("partial", "corrupt")
    assert report["runs"][0]["resume"]["index"] == 2


def test_an_fsdp_folder_killed_before_meta_pt_is_not_resumable(tmp_path, inspect_json):
    # `_atomic_save(meta.pt)` comes after the DCP files: a kill between leaves no meta.pt
    folder = lightning_fsdp_run(tmp_path / "checkpoints", last=None)
    (folder / "epoch=1-step=4.ckpt" / "meta.pt").unlink()
    report = inspect_json(folder).json
    assert statuses(report) == {2: "complete", 4: "incomplete"}
    assert report["runs"][0]["resume"]["index"] == 2


def test_an_fsdp_folder_with_a_cut_shard_is_partial(tmp_path, inspect_json):
    folder = lightning_fsdp_run(tmp_path / "checkpoints", last=None)
    shard = folder / "epoch=1-step=4.ckpt" / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    report = inspect_json(folder).json
    assert statuses(report)[4] == "partial"
    assert report["runs"][0]["resume"]["index"] == 2


def test_a_last_ckpt_link_to_a_cut_folder_is_ckd113_and_repair_repoints_it(tmp_path, inspect_json, cli):
    folder = lightning_fsdp_run(tmp_path / "checkpoints")
    (folder / "epoch=1-step=4.ckpt" / "meta.pt").unlink()
    report = inspect_json(folder).json
    assert "CKD113" in codes(report)
    assert cli("repair", "--min-age", "0", "--yes", folder).exit_code in (0, 1)
    assert os.readlink(folder / "last.ckpt") == "epoch=0-step=2.ckpt"
    assert "CKD113" not in codes(inspect_json(folder).json)


def test_prune_removes_whole_ckpt_folders(tmp_path, inspect_json, cli):
    folder = lightning_deepspeed_run(tmp_path / "checkpoints", saves=((0, 2), (1, 4), (2, 6)), last=None)
    assert cli("prune", "--keep-last", "1", "--min-age", "0", "--yes", folder).exit_code == 0
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".ckpt")) == ["epoch=2-step=6.ckpt"]
    assert statuses(inspect_json(folder).json) == {6: "complete"}


def test_a_plain_dcp_folder_and_a_deepspeed_save_dir_stay_theirs(tmp_path, inspect_json):
    # look-alikes: DCP folders named without `.ckpt`, a DeepSpeed tag folder of its own
    folder = lightning_fsdp_run(tmp_path / "dcp", last=None)
    for path in folder.iterdir():
        (path / "meta.pt").unlink()
        path.rename(folder / path.name.replace("epoch=", "ep").replace("-step=", "_step_").removesuffix(".ckpt"))
    assert inspect_json(folder).json["runs"][0]["layout"] == "dcp"
    ds = lightning_deepspeed_run(tmp_path / "ds", saves=((0, 2),), last=None)
    shutil.move(ds / "epoch=0-step=2.ckpt" / "checkpoint", ds / "global_step2")
    shutil.rmtree(ds / "epoch=0-step=2.ckpt")
    (ds / "latest").write_text("global_step2")
    assert inspect_json(ds).json["runs"][0]["layout"] == "deepspeed"


def test_a_folder_of_other_files_named_ckpt_is_not_a_checkpoint(tmp_path, inspect_json):
    folder = lightning_deepspeed_run(tmp_path / "checkpoints", last=None)
    (folder / "epoch=2-step=6.ckpt").mkdir()
    (folder / "epoch=2-step=6.ckpt" / "notes.txt").write_text("hello")
    report = inspect_json(folder).json
    assert statuses(report)[6] != "complete"
    assert report["runs"][0]["resume"]["index"] == 4


def test_lightning_loads_the_fsdp_folder_named_for_resume_and_not_the_cut_one(tmp_path, inspect_json):
    # Lightning's own loading path (`FSDPStrategy.load_checkpoint`): `_is_sharded_checkpoint`,
    # `_distributed_checkpoint_load` of the model, then `meta.pt`; FSDP itself needs a GPU here
    pytest.importorskip("lightning")
    torch = pytest.importorskip("torch")
    from lightning.fabric.strategies.fsdp import _distributed_checkpoint_load, _is_sharded_checkpoint
    from lightning.fabric.utilities.load import _METADATA_FILENAME

    folder = lightning_fsdp_run(tmp_path / "checkpoints", last=None)
    cut = folder / "epoch=1-step=4.ckpt"
    (cut / "meta.pt").unlink()
    assert not _is_sharded_checkpoint(cut)  # Lightning would take the folder for a file and fail
    resume = Path(inspect_json(folder).json["runs"][0]["resume"]["path"])
    assert _is_sharded_checkpoint(resume)
    model = torch.nn.Linear(4, 2)
    state = {"model": model.state_dict()}
    _distributed_checkpoint_load(state, resume)
    assert torch.load(resume / _METADATA_FILENAME, weights_only=True)["global_step"] == 2


def test_lightning_takes_the_deepspeed_folder_named_for_resume_for_a_deepspeed_checkpoint(tmp_path, inspect_json):
    pytest.importorskip("lightning")
    from lightning.fabric.strategies.deepspeed import _is_deepspeed_checkpoint

    folder = lightning_deepspeed_run(tmp_path / "checkpoints")
    resume = Path(inspect_json(folder).json["runs"][0]["resume"]["path"])
    assert _is_deepspeed_checkpoint(resume) and (resume / "latest").read_text() == "checkpoint"


@pytest.mark.parametrize("build", [lightning_deepspeed_run, lightning_fsdp_run])
def test_a_restart_into_the_same_folder_leaves_two_folders_of_one_step_named_and_no_command_fails(tmp_path, cli, build):
    """A fit started again from scratch under DeepSpeedStrategy or FSDPStrategy saves step 2 again:
    its name is taken, so ModelCheckpoint (``_get_metric_interpolated_filepath_name``) names the
    folder ``epoch=0-step=2-v1.ckpt``. Two checkpoints of one index made every command stop with an
    internal error (``RunContext.position`` placed a file by its index alone)."""
    folder = build(tmp_path / "checkpoints", last=None)
    shutil.copytree(folder / "epoch=0-step=2.ckpt", folder / "epoch=0-step=2-v1.ckpt")
    for command in ("inspect", "verify"):
        result = cli(command, "--json", folder)
        assert result.exit_code == 0, (command, result.stdout, result.stderr)
        (run,) = result.json["runs"]
        assert [(c["index"], Path(c["files"][0]["path"]).relative_to(folder).parts[0]) for c in run["checkpoints"]] == [
            (2, "epoch=0-step=2.ckpt"),
            (2, "epoch=0-step=2-v1.ckpt"),
            (4, "epoch=1-step=4.ckpt"),
        ]
        (twice,) = [f for f in result.json["findings"] if f["code"] == "CKD115"]
        assert "epoch=0-step=2.ckpt and epoch=0-step=2-v1.ckpt (step 2)" in twice["message"], command
        assert run["resume"]["path"] == str(folder / "epoch=1-step=4.ckpt")
    for command in (("repair", "--dry-run"), ("prune", "--keep-last", "1", "--min-age", "0", "--dry-run"), ("diskcheck",)):
        result = cli(*command, folder)
        assert result.exit_code == 0, (command, result.stdout, result.stderr)


def test_a_cut_later_save_of_the_resume_step_is_newer_than_it_and_repair_moves_it_alone(tmp_path, cli):
    """`epoch=1-step=4-v1.ckpt` (a restart's save of step 4) cut short: step 4's earlier save is the
    resume point and the cut one comes after it, so `repair` quarantines it as its CKD203 fix says,
    never its whole step; Lightning's own check still takes the resume point for DeepSpeed's."""
    pytest.importorskip("lightning")
    from lightning.fabric.strategies.deepspeed import _is_deepspeed_checkpoint
    from test_repair_frameworks import age

    folder = lightning_deepspeed_run(tmp_path / "checkpoints", last=None)
    shutil.copytree(folder / "epoch=1-step=4.ckpt", folder / "epoch=1-step=4-v1.ckpt")
    states = folder / "epoch=1-step=4-v1.ckpt" / "checkpoint" / "mp_rank_00_model_states.pt"
    states.write_bytes(states.read_bytes()[:300])
    age(folder)
    report = cli("inspect", "--json", folder).json
    (cut,) = [f for f in report["findings"] if f["code"] == "CKD203"]
    assert cut["path"] == str(states) and "`ckptdoctor repair" in cut["fixes"][0]
    resume = Path(report["runs"][0]["resume"]["path"])
    assert resume == folder / "epoch=1-step=4.ckpt" and _is_deepspeed_checkpoint(resume)
    plan = cli("repair", "--dry-run", "--json", folder).json["plan"]
    assert [(item["index"], item["action"], [Path(p).name for p in item["paths"]]) for item in plan if item["action"] != "keep"] == [
        (4, "quarantine", ["epoch=1-step=4-v1.ckpt"])
    ]
    assert cli("repair", "--yes", folder).exit_code == 0
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".ckpt")) == ["epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt"]
