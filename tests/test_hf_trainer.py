"""HF Trainer runs: a real `Trainer` on a tiny model, then broken the way real saves break."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckptdoctor.discover import discover
from ckptdoctor.layouts import LAYOUTS
from ckptdoctor.layouts._base import claim_all
from ckptdoctor.layouts.hf_trainer import HfTrainerLayout
from ckptdoctor.testing import write_burn_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """`output_dir` of a real Trainer: steps 2, 4 and 6 saved, save_total_limit=3."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    output = tmp_path_factory.mktemp("hf") / "out"
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32)
    )

    class Tokens(torch.utils.data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return 32

        def __getitem__(self, index: int) -> dict[str, object]:
            ids = torch.randint(0, 64, (16,))
            return {"input_ids": ids, "labels": ids}

    args = transformers.TrainingArguments(
        output_dir=str(output),
        max_steps=6,
        save_steps=2,
        save_total_limit=3,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    transformers.Trainer(model=model, args=args, train_dataset=Tokens()).train()
    return output


@pytest.fixture
def run(trained: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "out"
    shutil.copytree(trained, copy, symlinks=True)
    return copy


def codes(report: dict) -> list[str]:
    return [f["code"] for f in report["findings"]]


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
    assert f'resume_from_checkpoint="{run}/checkpoint-4"' in auto["fixes"][0]
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
    assert result.stdout.rstrip().splitlines()[-1] == f"Resume from step 6: {run}/checkpoint-6"


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
            claimed = claim_all(layout, listing.entries)
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
