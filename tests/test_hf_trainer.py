"""HF Trainer runs: a real `Trainer` on a tiny model, then broken the way real saves break."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from frameworks import copy_run, hf_trainer
from reports import codes

from ckptdoctor.discover import discover
from ckptdoctor.layouts.base import claim_all
from ckptdoctor.layouts.hf_trainer import HfTrainerLayout
from ckptdoctor.layouts.registry import LAYOUTS
from ckptdoctor.testing import write_burn_run

pytestmark = pytest.mark.slow  # real framework runs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run(hf_trained: Path, tmp_path: Path) -> Path:
    """A copy of the shared Trainer run (steps 2, 4 and 6), for the test to break."""
    return copy_run(hf_trained, tmp_path / "out")


def finding(report: dict, code: str) -> dict:
    matches = [f for f in report["findings"] if f["code"] == code]
    assert len(matches) == 1, report["findings"]
    return matches[0]


def test_a_healthy_trainer_run_is_quiet(run, inspect_json):
    result = inspect_json(run)
    report = result.json
    assert result.exit_code == 0
    assert report["findings"] == []
    (only,) = report["runs"]
    assert (only["layout"], only["unit"]) == ("hf-trainer", "step")
    assert [c["index"] for c in only["checkpoints"]] == [2, 4, 6]
    assert {c["status"] for c in only["checkpoints"]} == {"complete"}
    assert only["resume"]["index"] == 6
    roles = {f["role"] for f in only["checkpoints"][-1]["files"]}
    assert {"model", "optimizer", "scheduler", "trainer-state", "rng-state", "training-args"} <= roles


def test_checkpoint_folders_are_not_runs_of_their_own(run, inspect_json):
    assert len(inspect_json(run).json["runs"]) == 1
    assert len(inspect_json(run.parent).json["runs"]) == 1


def test_missing_newest_optimizer_names_the_argument_that_resumes_safely(run, inspect_json):
    (run / "checkpoint-6" / "optimizer.pt").unlink()
    result = inspect_json(run)
    report = result.json
    assert result.exit_code == 1
    missing = finding(report, "CKD101")
    assert (missing["index"], missing["severity"]) == (6, "error")
    assert "optimizer.pt" in missing["message"]
    auto = finding(report, "CKD114")
    assert auto["index"] == 6 and "checkpoint-6" in auto["message"]
    assert f'resume_from_checkpoint="{run}/checkpoint-4"' in report["runs"][0]["resume"]["how"]
    assert "not `True`" in auto["fixes"][0]  # the fix says why the automatic resume is unsafe
    assert report["runs"][0]["resume"]["index"] == 4


def test_missing_trainer_state_is_ckd104(run, inspect_json):
    (run / "checkpoint-6" / "trainer_state.json").unlink()
    report = inspect_json(run).json
    assert finding(report, "CKD104")["index"] == 6
    assert "CKD114" in codes(report)
    assert report["runs"][0]["resume"]["index"] == 4


def test_an_older_incomplete_checkpoint_does_not_trouble_the_automatic_resume(run, inspect_json):
    (run / "checkpoint-2" / "scheduler.pt").unlink()
    report = inspect_json(run).json
    assert finding(report, "CKD103")["index"] == 2
    # HF drops the optimizer too without it, but nothing resumes from step 2: dead weight for prune
    assert finding(report, "CKD103")["severity"] == "warning"
    assert "ckptdoctor prune" in finding(report, "CKD103")["fixes"][0]
    assert "CKD114" not in codes(report)
    assert report["runs"][0]["resume"]["index"] == 6


def test_an_empty_scheduler_makes_the_checkpoint_partial(run, inspect_json):
    (run / "checkpoint-6" / "scheduler.pt").write_bytes(b"")
    report = inspect_json(run).json
    assert finding(report, "CKD201")["path"].endswith("checkpoint-6/scheduler.pt")
    assert report["runs"][0]["checkpoints"][-1]["status"] == "partial"
    assert report["runs"][0]["resume"]["index"] == 4


def test_a_truncated_model_is_ckd203(run, inspect_json):
    weights = run / "checkpoint-6" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    report = inspect_json(run).json
    assert finding(report, "CKD203")["index"] == 6
    assert report["runs"][0]["resume"]["index"] == 4


def test_a_staging_folder_is_ckd202(run, inspect_json):
    shutil.copytree(run / "checkpoint-6", run / "tmp-checkpoint-8")
    report = inspect_json(run).json
    staged = finding(report, "CKD202")
    assert staged["path"].endswith("tmp-checkpoint-8") and "folder" in staged["message"]
    assert report["runs"][0]["resume"]["index"] == 6
    assert len(report["runs"]) == 1


def test_best_model_checkpoint_naming_a_deleted_folder_is_ckd113(run, inspect_json):
    state_file = run / "checkpoint-6" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["best_model_checkpoint"] = str(run / "checkpoint-2")
    state_file.write_text(json.dumps(state))
    assert "CKD113" not in codes(inspect_json(run).json)
    shutil.rmtree(run / "checkpoint-2")
    stale = finding(inspect_json(run).json, "CKD113")
    assert "checkpoint-2" in stale["message"] and "not there" in stale["message"]


def test_a_best_checkpoint_without_its_optimizer_is_followable_because_hf_loads_its_weights(run, inspect_json):
    """load_best_model_at_end loads the weights from best_model_checkpoint, nothing else: a best
    folder whose optimizer.pt a cleanup removed is no stale pointer."""
    transformers = pytest.importorskip("transformers")
    state_file = run / "checkpoint-6" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["best_model_checkpoint"] = str(run / "checkpoint-2")
    state_file.write_text(json.dumps(state))
    (run / "checkpoint-2" / "optimizer.pt").unlink()
    report = inspect_json(run).json
    assert "CKD113" not in codes(report)
    assert finding(report, "CKD101")["severity"] == "warning"  # older than the resume point, and not loaded
    assert transformers.GPT2LMHeadModel.from_pretrained(run / "checkpoint-2") is not None  # what HF loads from it


def test_a_broken_trainer_state_is_malformed(run, inspect_json):
    (run / "checkpoint-6" / "trainer_state.json").write_text('{"global_step": 6, "log_history": [')
    report = inspect_json(run).json
    assert {"CKD203", "CKD207"} & set(codes(report))
    assert report["runs"][0]["resume"]["index"] == 4


def test_missing_shard_is_ckd105(tmp_path, inspect_json):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    folder = tmp_path / "out" / "checkpoint-10"
    folder.mkdir(parents=True)
    shards = {"model-00001-of-00002.safetensors": "a", "model-00002-of-00002.safetensors": "b"}
    for shard, name in shards.items():
        save_file({name: torch.zeros(4)}, str(folder / shard))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 32}, "weight_map": {name: shard for shard, name in shards.items()}})
    )
    for name in ("optimizer.pt", "scheduler.pt"):
        torch.save({"state": {}}, folder / name)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 10, "log_history": []}))
    assert inspect_json(tmp_path / "out").json["findings"] == []
    (folder / "model-00002-of-00002.safetensors").unlink()
    report = inspect_json(tmp_path / "out").json
    shard = finding(report, "CKD105")
    assert shard["index"] == 10 and "model-00002-of-00002.safetensors" in shard["message"]
    assert report["runs"][0]["checkpoints"][0]["status"] == "incomplete"


def test_human_table_has_a_trainer_state_column(run, cli):
    result = cli("inspect", run)
    assert "STEP" in result.stdout and "TRAINER-STATE" in result.stdout
    assert result.stdout.rstrip().splitlines()[-3] == f"Resume from step 6: {run}/checkpoint-6"  # then how, then the count


def test_layouts_do_not_claim_each_others_runs(run, tmp_path):
    """The HF recogniser claims nothing in burn or torch runs, and they claim no HF folder."""
    burn = tmp_path / "burn" / "checkpoint"
    write_burn_run(burn, (1, 2))
    trees = {
        "hf-trainer": discover(str(run)).listings[0],
        "burn": discover(str(burn)).listings[0],
        "torch": discover(str(ROOT / "examples" / "runs" / "torch-split")).listings[0],
    }
    for layout in LAYOUTS:
        for owner, listing in trees.items():
            claimed = claim_all(layout, listing)
            assert bool(claimed) == (layout.name == owner), (layout.name, owner)
    assert isinstance(LAYOUTS[0], HfTrainerLayout)


def test_a_trainer_run_under_deepspeed_needs_no_optimizer_pt(tmp_path, inspect_json):
    """HF + DeepSpeed: checkpoint-N/global_stepN/ and checkpoint-N/latest hold the engine state."""
    torch = pytest.importorskip("torch")
    for step in (5, 10):
        folder = tmp_path / "out" / f"checkpoint-{step}"
        tag = folder / f"global_step{step}"
        tag.mkdir(parents=True)
        torch.save({"module": {}}, tag / "mp_rank_00_model_states.pt")
        torch.save({}, tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
        (folder / "latest").write_text(f"global_step{step}")
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        torch.save({}, folder / "training_args.bin")
    report = inspect_json(tmp_path / "out").json
    assert report["findings"] == []
    assert [run["layout"] for run in report["runs"]] == ["hf-trainer"]
    assert report["runs"][0]["resume"]["index"] == 10
    (tmp_path / "out" / "checkpoint-10" / "trainer_state.json").unlink()
    assert "CKD104" in codes(inspect_json(tmp_path / "out").json)


# --- issue 14, item 7: Trainer checkpoints under other names -------------------------------------


def test_checkpoints_renamed_are_known_by_what_they_hold_and_the_trainer_resumes_from_the_one_named(run, tmp_path, inspect_json):
    """`checkpoint-N` copied to `step_N`: trainer_state.json beside weights and optimizer. HF's own
    `get_last_checkpoint` sees no such name, so no automatic resume is judged; the resume named
    is passed to `trainer.train()` and training goes on from its step."""
    import transformers

    renamed = tmp_path / "renamed"
    for step in (2, 4, 6):
        shutil.copytree(run / f"checkpoint-{step}", renamed / f"step_{step}")
    shutil.rmtree(renamed / "step_6")
    shutil.copytree(run / "checkpoint-6", renamed / "step_6", ignore=shutil.ignore_patterns("trainer_state.json"))
    report = inspect_json(renamed).json
    (found,) = report["runs"]
    assert (found["layout"], found["unit"]) == ("hf-trainer", "step")
    assert [(c["index"], c["status"]) for c in found["checkpoints"]] == [(2, "complete"), (4, "complete"), (6, "incomplete")]
    assert found["resume"]["index"] == 4
    assert "CKD104" in codes(report) and "CKD114" not in codes(report)
    fix = report["runs"][0]["resume"]["how"]
    assert f'resume_from_checkpoint="{renamed}/step_4"' in fix

    class Steps(transformers.TrainerCallback):  # type: ignore[misc]
        taken = 0

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            Steps.taken += 1

    trainer = hf_trainer(tmp_path / "again", 6, [Steps()], save_total_limit=3)
    trainer.train(resume_from_checkpoint=str(renamed / "step_4"))
    assert (trainer.state.global_step, Steps.taken) == (6, 2)


def test_a_copy_beside_the_trainer_checkpoints_is_a_run_of_its_own_that_prune_leaves(run, inspect_json, cli):
    """`best/`, copied out of checkpoint-4 by hand, is not one of the saves the Trainer rotates."""
    from test_repair_frameworks import age

    shutil.copytree(run / "checkpoint-4", run / "best")
    report = inspect_json(run).json
    assert report["findings"] == []
    runs = {Path(found["path"]).name: found for found in report["runs"]}
    assert [c["index"] for c in runs["out"]["checkpoints"]] == [2, 4, 6]
    (alone,) = runs["best"]["checkpoints"]
    assert (runs["best"]["layout"], alone["index"], alone["status"]) == ("hf-trainer", 0, "complete")
    age(run)
    assert cli("prune", "--yes", "--keep-last", "1", run).exit_code == 0
    assert sorted(p.name for p in run.iterdir() if p.is_dir()) == [".ckptdoctor", "best", "checkpoint-6"]


def test_a_checkpoint_folder_named_on_its_own_is_one_checkpoint(run, inspect_json):
    result = inspect_json(run / "checkpoint-6")
    assert result.exit_code == 0 and result.json["findings"] == []
    (found,) = result.json["runs"]
    assert (found["layout"], found["unit"], found["resume"]["index"]) == ("hf-trainer", "step", 6)


def test_the_final_export_is_not_taken_for_a_checkpoint(run, inspect_json):
    """`trainer.save_model()` + `trainer.save_state()`: weights and trainer_state.json, but no
    optimizer, scheduler or RNG state: nothing resumes training from it, and nothing is wrong."""
    final = run.parent / "final"
    shutil.copytree(run / "checkpoint-6", final, ignore=shutil.ignore_patterns("optimizer.pt", "scheduler.pt", "rng_state*.pth"))
    result = inspect_json(final)
    assert (result.exit_code, result.json["runs"], result.json["findings"]) == (0, [], [])


@pytest.mark.parametrize("written", ["safetensors", "json"])
def test_a_scheduler_of_another_format_is_told_what_the_trainer_loads(run, tmp_path, inspect_json, written):
    """``scheduler.pt`` holding safetensors (what converting it "properly" gives) or JSON: the
    Trainer loads it with ``torch.load`` (``_load_optimizer_and_scheduler``), so the fix is the
    scheduler's state saved with ``torch.save``, never a conversion to safetensors."""
    import safetensors.torch
    import torch

    scheduler = run / "checkpoint-6" / "scheduler.pt"
    state = torch.load(scheduler, weights_only=True)  # the test's own file, as the Trainer wrote it
    if written == "safetensors":
        safetensors.torch.save_file({"last_epoch": torch.tensor(state["last_epoch"])}, scheduler)
    else:
        scheduler.write_text(json.dumps(state))
    report = inspect_json(run).json
    found = finding(report, "CKD205")
    assert (found["index"], found["path"]) == (6, str(scheduler))
    fixes = " ".join(found["fixes"])
    assert "`scheduler.pt`" in fixes and "with `torch.load`" in fixes
    assert "safetensors.torch.save_file" not in fixes
    with pytest.raises(Exception, match="load"):  # the Trainer's own resume from it
        hf_trainer(run, 8).train(resume_from_checkpoint=str(run / "checkpoint-6"))
    torch.save(state, scheduler)  # what the fix says: the scheduler's state, as the Trainer saves it
    assert "CKD205" not in codes(inspect_json(run).json)
    trainer = hf_trainer(run, 8)
    trainer.train(resume_from_checkpoint=str(run / "checkpoint-6"))
    assert trainer.state.global_step == 8


def test_weights_saved_by_torch_under_the_safetensors_name_load_as_pytorch_model_bin(run, inspect_json):
    """The one rename the fix gives: a ``torch.save`` state dict under ``model.safetensors`` is
    what the Trainer loads as ``pytorch_model.bin`` (``_load_from_checkpoint``: ``torch.load``)."""
    import safetensors.torch
    import torch

    weights = run / "checkpoint-6" / "model.safetensors"
    torch.save(safetensors.torch.load(weights.read_bytes()), weights)  # read first: load_file maps the file it overwrites
    fixes = " ".join(finding(inspect_json(run).json, "CKD205")["fixes"])
    assert "load as `pytorch_model.bin`" in fixes
    weights.rename(weights.with_name("pytorch_model.bin"))
    assert "CKD205" not in codes(inspect_json(run).json)
    trainer = hf_trainer(run, 8)
    trainer.train(resume_from_checkpoint=str(run / "checkpoint-6"))
    assert trainer.state.global_step == 8


def test_a_checkpoint_folder_linked_out_of_the_run_says_so(run, tmp_path, inspect_json):
    """The second attack (issue 31): `checkpoint-8` linked to a folder elsewhere read "step 8 has
    nothing but no optimizer state". transformers' `get_last_checkpoint` follows the link, so the
    Trainer's own resume would load what the other folder holds."""
    from transformers.trainer_utils import get_last_checkpoint

    elsewhere = tmp_path / "elsewhere" / "checkpoint-8"
    shutil.copytree(run / "checkpoint-6", elsewhere)
    (run / "checkpoint-8").symlink_to(elsewhere, target_is_directory=True)
    assert get_last_checkpoint(str(run)) == str(run / "checkpoint-8")
    missing = [f for f in inspect_json(run).json["findings"] if f["code"] == "CKD101"]
    assert missing and all(f"is a link to {elsewhere}, which ckptdoctor does not follow" in f["message"] for f in missing)
    assert not any("has nothing" in f["message"] for f in missing)
