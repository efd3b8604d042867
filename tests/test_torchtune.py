"""torchtune output folders, saved by torchtune's own checkpointers and resumed through them.

``frameworks.torchtune_run`` drives ``FullModelTorchTuneCheckpointer`` and ``FullModelHFCheckpointer``
of torchtune 0.6.1 (``torchtune/training/checkpointing/_checkpointer.py``) the way
``recipes/full_finetune_single_device.py`` does (``save_checkpoint(epoch=curr_epoch,
intermediate_checkpoint=epoch + 1 < total_epochs)``), and ``torchtune_resume`` loads what
ckptdoctor names with ``resume_from_checkpoint=True``. Main's layout (one ``recipe_state.pt`` in each
``epoch_N/``, unreleased) is written with ``torch.save`` as its ``save_checkpoint`` names it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from frameworks import torchtune_resume, torchtune_run
from test_repair_frameworks import age

from ckptdoctor.pipelines.scan import inspect

torch = pytest.importorskip("torch")
pytest.importorskip("torchtune")


def only(report: dict, code: str) -> dict:
    (finding,) = [f for f in report["findings"] if f["code"] == code]
    return finding


def resume_of(folder: Path):
    _, found = inspect([str(folder)])
    (run,) = found.runs
    return run


def shard_of(run, index: int) -> list[str]:
    (checkpoint,) = [c for c in run.checkpoints if c.index == index]
    return [f"{checkpoint.folder.name}/{f.entry.name}" for f in checkpoint.files if f.entry.name.startswith("model-")]


@pytest.mark.parametrize("hf", [False, True], ids=["torchtune-format", "hf-format"])
def test_a_run_killed_between_epochs_resumes_through_torchtune_from_the_epoch_its_recipe_state_commits(tmp_path, cli, hf):
    output, base = torchtune_run(tmp_path, epochs=2, total=4, hf=hf)
    result = cli("verify", "--deep", "--json", output)
    assert result.exit_code == 0 and result.json["findings"] == []
    (run,) = result.json["runs"]  # one run, not one per epoch folder
    assert (run["layout"], run["unit"], [c["index"] for c in run["checkpoints"]]) == ("torchtune", "epoch", [0, 1])
    scanned = resume_of(output)
    assert scanned.resume.index == 1 and scanned.resume_path == str(output / "epoch_1")
    assert "resume_from_checkpoint=True" in scanned.resume_how and "goes on at epoch 2" in scanned.resume_how
    loaded = torchtune_resume(output, base, shard_of(scanned, 1), hf=hf)
    assert loaded["epochs_run"] == 2
    saved = torchtune_resume(output, base, shard_of(scanned, 0), hf=hf)["model"]
    assert all(torch.equal(loaded["model"][name], saved[name] + 1) for name in saved)  # epoch 1's weights, not 0's


def test_a_finished_run_is_finished_not_damaged(tmp_path, cli):
    output, _ = torchtune_run(tmp_path, epochs=3, total=3)
    result = cli("verify", "--deep", "--json", output)
    assert result.exit_code == 0 and result.json["findings"] == []
    scanned = resume_of(output)
    assert scanned.resume.index == 2 and "training finished" in scanned.resume_how and "nothing to resume" in scanned.resume_how


def test_a_kill_mid_save_leaves_a_cut_epoch_and_repair_moves_it(tmp_path, cli, inspect_json):
    output, base = torchtune_run(tmp_path, epochs=3, total=5)
    # epoch 3's weights were being written when the job died: the recipe state still commits epoch 2
    (output / "epoch_3").mkdir()
    whole = (output / "epoch_2" / "model-00001-of-00001.bin").read_bytes()
    (output / "epoch_3" / "model-00001-of-00001.bin").write_bytes(whole[: len(whole) // 2])
    report = inspect_json(output).json
    (run,) = report["runs"]
    assert run["checkpoints"][-1]["status"] == "partial" and run["resume"]["index"] == 2
    age(output)
    assert cli("repair", "--yes", output).exit_code == 0
    assert not (output / "epoch_3").exists()
    scanned = resume_of(output)
    assert torchtune_resume(output, base, shard_of(scanned, scanned.resume.index))["epochs_run"] == 3


def test_weights_saved_without_their_recipe_state_never_finished_saving(tmp_path, inspect_json):
    output, base = torchtune_run(tmp_path, epochs=2, total=5)
    shutil.copytree(output / "epoch_1", output / "epoch_2")  # weights written, then killed before the recipe state
    report = inspect_json(output).json
    uncommitted = only(report, "CKD106")
    assert uncommitted["index"] == 2 and "recipe_state.pt" in uncommitted["message"]
    assert report["runs"][0]["resume"]["index"] == 1
    assert torchtune_resume(output, base, shard_of(resume_of(output), 1))["epochs_run"] == 2


def test_a_lost_recipe_state_is_a_missing_pointer_and_nothing_resumes(tmp_path, inspect_json):
    output, base = torchtune_run(tmp_path, epochs=2, total=5)
    shutil.rmtree(output / "recipe_state")
    report = inspect_json(output).json
    assert only(report, "CKD113")["message"].endswith("will not know which checkpoint to load")
    assert report["runs"][0]["resume"] is None and resume_of(output).resume is None
    nothing = only(report, "CKD110")  # whole weights, but no epoch torchtune resumes from
    assert nothing["index"] == 1 and "weights only" in nothing["message"] and "resume_from_checkpoint=False" in nothing["message"]
    for epoch in (0, 1):
        with pytest.raises(ValueError, match="recipe_checkpoint"):
            torchtune_resume(output, base, [f"epoch_{epoch}/model-00001-of-00001.bin"])  # what torchtune says


def test_a_cut_recipe_state_is_ckd203_and_no_epoch_resumes_with_it(tmp_path, inspect_json):
    output, base = torchtune_run(tmp_path, epochs=2, total=5)
    state = output / "recipe_state" / "recipe_state.pt"
    state.write_bytes(state.read_bytes()[:300])
    report = inspect_json(output).json
    assert only(report, "CKD203")["path"].endswith("recipe_state.pt")
    assert report["runs"][0]["resume"] is None
    assert "weights only: its recipe state cannot be read" in only(report, "CKD110")["message"]
    with pytest.raises(ValueError, match="Unable to load checkpoint"):
        torchtune_resume(output, base, ["epoch_1/model-00001-of-00001.bin"])


def test_a_shard_the_index_names_is_missing_and_the_older_epoch_is_weights_only(tmp_path, inspect_json):
    output, base = torchtune_run(tmp_path, epochs=2, total=5, hf=True)
    (output / "epoch_1" / "model-00001-of-00001.safetensors").unlink()
    report = inspect_json(output).json
    assert "model-00001-of-00001.safetensors" in only(report, "CKD105")["message"]
    assert only(report, "CKD113")["index"] == 1  # the recipe state's epoch cannot be resumed
    assert report["runs"][0]["resume"] is None
    older = only(report, "CKD110")
    assert older["index"] == 0 and "torchtune's recipe state is not epoch_0's" in older["message"]
    # torchtune would take epoch 0's weights on at epoch 2, with epoch 1's AdamW moments: epoch 1 skipped
    assert torchtune_resume(output, base, ["epoch_0/model-00001-of-00001.safetensors"], hf=True)["epochs_run"] == 2


def main_run(output: Path, epochs: int, total: int) -> Path:
    """Main's ``save_checkpoint`` (bd2a0fc7c): ``recipe_state.pt`` inside each intermediate ``epoch_N/``."""
    for epoch in range(epochs):
        folder = output / f"epoch_{epoch}"
        folder.mkdir(parents=True)
        torch.save({"tok_embeddings.weight": torch.full((8, 4), float(epoch))}, folder / "model-00001-of-00001.bin")
        if epoch + 1 < total:
            state = {"optimizer": {"state": {}, "param_groups": []}, "seed": 0, "epochs_run": epoch + 1, "total_epochs": total}
            torch.save(state, folder / "recipe_state.pt")
    return output


def test_main_keeps_a_recipe_state_in_each_folder(tmp_path, inspect_json):
    finished = main_run(tmp_path / "finished", 3, 3)
    report = inspect_json(finished).json
    assert report["findings"] == [] and report["runs"][0]["resume"]["index"] == 2
    assert "training finished" in resume_of(finished).resume_how
    going = main_run(tmp_path / "going", 3, 6)
    (going / "epoch_2" / "recipe_state.pt").unlink()
    report = inspect_json(going).json
    assert only(report, "CKD106")["index"] == 2 and report["runs"][0]["resume"]["index"] == 1
    assert "epoch_1/recipe_state.pt" in resume_of(going).resume_how


def test_one_epoch_folder_named_on_its_own_is_a_torchtune_save(tmp_path, inspect_json):
    output, _ = torchtune_run(tmp_path, epochs=2, total=5)
    (run,) = inspect_json(output / "epoch_1").json["runs"]
    assert (run["layout"], run["resume"]["index"]) == ("torchtune", 1)
    # the folder is the run: the fresh fine-tune the hint words starts from it, not from epoch_1/epoch_1
    how = resume_of(output / "epoch_1").resume_how
    assert f"`checkpointer.checkpoint_dir={output}/epoch_1` with `resume_from_checkpoint=False`" in how
    training = pytest.importorskip("torchtune.training")
    fresh = training.FullModelTorchTuneCheckpointer(str(output / "epoch_1"), ["model-00001-of-00001.bin"], "LLAMA3", str(tmp_path / "new"))
    assert set(fresh.load_checkpoint()["model"]) == {"tok_embeddings.weight", "norm.scale", "output.weight"}


def test_a_loops_epoch_folders_are_not_torchtune_and_torchtune_is_not_torch(tmp_path, inspect_json):
    loop = tmp_path / "loop"
    for epoch in (1, 2):
        (loop / f"epoch_{epoch}").mkdir(parents=True)
        torch.save({"model": {}, "optimizer": {}}, loop / f"epoch_{epoch}" / "model_1.pt")
    assert {run["layout"] for run in inspect_json(loop).json["runs"]} == {"torch"}
    output, _ = torchtune_run(tmp_path / "tt", epochs=2, total=5)
    assert [run["layout"] for run in inspect_json(output).json["runs"]] == ["torchtune"]


def test_prune_keeps_the_epoch_the_recipe_state_commits(tmp_path, cli):
    output, base = torchtune_run(tmp_path, epochs=4, total=6)
    age(output)
    assert cli("prune", "--keep-last", "1", "--yes", output).exit_code == 0
    assert sorted(p.name for p in output.iterdir() if not p.name.startswith(".")) == ["epoch_3", "recipe_state"]
    assert torchtune_resume(output, base, ["epoch_3/model-00001-of-00001.bin"])["epochs_run"] == 4


def main_step_run(output: Path, total_epochs: int, steps_per_epoch: int, every: int, steps: int | None = None) -> Path:
    """Main's step saves (bd2a0fc7c; 0.6.1 has none), ``steps`` optimizer steps of them (all by
    default): ``recipes/full_finetune_single_device.py`` (``train``) saves every
    ``save_every_n_steps`` steps and once more when training ends; ``_checkpoint_client.save_checkpoint``
    makes the recipe state (``TrainingProgress.state_dict``) and writes it only while
    ``steps_run < total_training_steps``; ``FullModelHFCheckpointer.save_checkpoint`` (``dir_prefix="step"``)
    writes ``step_{steps_run}/``: the base model's ``config.json`` (``copy_files``), the weights with
    huggingface_hub's own ``save_torch_state_dict`` (``model.safetensors``), then ``recipe_state.pt``."""
    from huggingface_hub import save_torch_state_dict

    total = total_epochs * steps_per_epoch

    def save(step: int, epoch: int) -> None:
        folder = output / f"step_{step}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text('{"hidden_size": 4}')
        save_torch_state_dict({"model.embed_tokens.weight": torch.full((8, 4), float(step))}, str(folder))
        if step < total:
            progress = {"seed": 0, "epochs_run": epoch + (step % steps_per_epoch == 0), "total_epochs": total_epochs}
            progress |= {"max_steps_per_epoch": None, "steps_run": step, "total_training_steps": total}
            progress |= {"dataloader": None, "val_dataloader": None}
            torch.save({"optimizer": {"state": {}, "param_groups": []}, **progress}, folder / "recipe_state.pt")

    for global_step in range(1, (steps or total) + 1):
        if global_step % every == 0:
            save(global_step, (global_step - 1) // steps_per_epoch)
    if steps is None:
        save(total, total_epochs - 1)
    return output


def main_hf_resume(output: Path, folder: str | None = None) -> dict:
    """Main's ``FullModelHFCheckpointer(..., should_load_recipe_state=True)``: from ``folder`` where
    ``checkpoint_dir`` names one, else from the newest non-empty ``step_N`` of ``output_dir``
    (``get_most_recent_checkpoint``); it asserts the folder's ``recipe_state.pt`` and loads the
    weights from the folder (``get_model_checkpoint_path``); the recipe then goes on at
    ``global_step = steps_run`` (``_update_recipe_state``)."""
    from safetensors.torch import load_file

    if folder is None:
        folder = max((p for p in output.glob("step_*") if any(p.iterdir())), key=lambda p: int(p.name.split("_")[-1])).name
    state = output / folder / "recipe_state.pt"
    assert state.exists(), f"recipe_state.pt not found in {output / folder}"
    return {"model": load_file(output / folder / "model.safetensors"), **torch.load(state)}


def test_main_step_saves_end_with_a_final_save_that_is_finished_not_unfinished(tmp_path, inspect_json):
    output = main_step_run(tmp_path / "out", total_epochs=2, steps_per_epoch=3, every=2)
    report = inspect_json(output).json
    (run,) = report["runs"]
    assert report["findings"] == [] and (run["layout"], run["unit"]) == ("torchtune", "step")
    assert [(c["index"], c["status"]) for c in run["checkpoints"]] == [(2, "complete"), (4, "complete"), (6, "complete")]
    scanned = resume_of(output)
    assert scanned.resume.index == 6 and "training finished" in scanned.resume_how and "nothing to resume" in scanned.resume_how
    with pytest.raises(AssertionError, match=r"recipe_state\.pt not found"):
        main_hf_resume(output)  # torchtune's own resume: step_6 is the newest, and it has nothing to go on from
    assert main_hf_resume(output, "step_4")["total_training_steps"] == 6  # the state before it names step 6 the last


def test_main_step_saves_killed_before_their_recipe_state_resume_from_the_step_before(tmp_path, inspect_json):
    output = main_step_run(tmp_path / "out", total_epochs=2, steps_per_epoch=3, every=2, steps=4)
    (output / "step_4" / "recipe_state.pt").unlink()  # the weights were written, the recipe state never was
    report = inspect_json(output).json
    assert only(report, "CKD106")["index"] == 4 and report["runs"][0]["resume"]["index"] == 2
    how = resume_of(output).resume_how
    assert f"checkpointer.checkpoint_dir={output}/step_2" in how and "checkpoint_files=[model.safetensors]" in how
    assert "after step 2" in how
    resumed = main_hf_resume(output, "step_2")
    assert resumed["steps_run"] == 2 and float(resumed["model"]["model.embed_tokens.weight"][0, 0]) == 2.0
