"""``inspect --resume-path``: the path to hand the framework's own resume, and the framework
resumes from it (HF ``resume_from_checkpoint``, Lightning ``ckpt_path``, accelerate
``load_state``, safetensors for a split torch save)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from frameworks import accelerator_for, copy_run, deepspeed_run, hf_trainer, lightning_fit
from test_dcp import dcp_load, dcp_run

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "runs"


def printed(cli: Any, *args: str | os.PathLike[str]) -> str:
    result = cli("inspect", "--resume-path", *args)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, "one line, for a job script"
    return lines[0]


def test_a_burn_run_names_the_artifact_folder_its_learner_resumes_in(cli, monkeypatch) -> None:
    run = EXAMPLES / "burn-healthy" / "checkpoint"
    assert printed(cli, run) == str(run.parent)
    assert cli("inspect", "--resume", run).stdout.strip() == "5"
    assert (run.parent / "checkpoint" / "model-5.bpk").is_file(), "`.checkpoint(5)` in that folder finds its files"
    monkeypatch.chdir(run)
    assert printed(cli) == "..", "from inside the checkpoint folder too"


def test_burn_files_outside_a_checkpoint_folder_name_their_model_file(cli, tmp_path: Path) -> None:
    moved = shutil.copytree(EXAMPLES / "burn-healthy" / "checkpoint", tmp_path / "saved")
    assert printed(cli, moved) == str(moved / "model-5.bpk")


def test_a_split_torch_save_names_its_weights_and_they_load(cli) -> None:
    safetensors = pytest.importorskip("safetensors.torch")
    run = EXAMPLES / "torch-split"
    path = printed(cli, run)
    assert path == str(run / "model_2.safetensors"), "epoch 3 lacks files: epoch 2 is the resume point"
    assert safetensors.load_file(path)


def test_hf_trainer_resumes_from_the_folder_printed(cli, hf_trained: Path, tmp_path: Path) -> None:
    assert printed(cli, hf_trained) == str(hf_trained / "checkpoint-6")
    run = copy_run(hf_trained, tmp_path / "out")
    (run / "checkpoint-6" / "optimizer.pt").unlink()  # the newest is incomplete: step 4 is the resume point
    path = printed(cli, run)
    assert path == str(run / "checkpoint-4")
    assert hf_resumed(path, 6, tmp_path / "again") == (6, 2), "went on from step 4"


def hf_resumed(path: str, max_steps: int, output: Path) -> tuple[int, int]:
    """HF Trainer's ``train(resume_from_checkpoint=path)``: the global step it ends at, and how
    many steps it took to get there."""
    import transformers

    class Steps(transformers.TrainerCallback):  # type: ignore[misc]
        taken = 0

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            Steps.taken += 1

    trainer = hf_trainer(output, max_steps, [Steps()])
    trainer.train(resume_from_checkpoint=path)
    return trainer.state.global_step, Steps.taken


def test_lightning_resumes_from_the_file_printed(cli, lightning_saved: dict[str, Path], tmp_path: Path) -> None:
    folder = copy_run(lightning_saved["copy"], tmp_path / "pl")
    path = printed(cli, folder)
    assert Path(path).parent == folder and path.endswith(".ckpt")
    trainer = lightning_fit(tmp_path / "again", 4, ckpt_path=path, save_top_k=0)
    assert trainer.current_epoch == 4 and trainer.global_step == 16, "one more epoch after the 3 saved"


def test_accelerate_loads_the_folder_printed(cli, accelerate_saved: Path, tmp_path: Path) -> None:
    path = printed(cli, accelerate_saved)
    assert path == str(accelerate_saved / "checkpoints" / "checkpoint_3")
    accelerator, *_ = accelerator_for(tmp_path / "fresh")
    accelerator.load_state(path)


def test_dcp_loads_the_step_folder_printed(cli, tmp_path: Path) -> None:
    run = dcp_run(tmp_path / "dcp")
    path = printed(cli, run)
    assert path == str(run / "step-20")
    assert dcp_load(Path(path)) is None, "`dcp.load(checkpoint_id=...)` loads it"


def test_deepspeed_names_the_tag_folder(cli, tmp_path: Path) -> None:
    run = deepspeed_run(tmp_path / "ds")
    path = printed(cli, run)
    assert path == str(run / "global_step200")
    assert Path(path).name == (run / "latest").read_text(), "its name is the tag `load_checkpoint` takes"


def test_no_resume_point_exits_1_and_both_flags_are_refused(cli, tmp_path: Path) -> None:
    run = shutil.copytree(EXAMPLES / "burn-healthy" / "checkpoint", tmp_path / "run" / "checkpoint")
    for optimizer in run.glob("optim-*"):
        optimizer.unlink()
    none = cli("inspect", "--resume-path", run)
    assert none.exit_code == 1 and none.stdout == "" and "No checkpoint to resume from" in none.stderr
    both = cli("inspect", "--resume", "--resume-path", run)
    assert both.exit_code == 2 and both.stdout == ""
    several = cli("inspect", "--resume-path", EXAMPLES)
    assert several.exit_code == 2 and "--resume-path needs one run" in several.stderr


def test_a_copy_of_a_checkpoint_below_the_run_does_not_hide_the_runs_resume_point(cli, hf_trained: Path, tmp_path: Path) -> None:
    """An HF ``output_dir`` that also holds a copied checkpoint folder (``best/``, a run of its
    own below it): the run in the folder named is the one the job resumes, so the recipe
    ``--resume_from_checkpoint "$(ckptdoctor inspect --resume-path out)"`` still works."""
    run = copy_run(hf_trained, tmp_path / "out")
    shutil.copytree(run / "checkpoint-4", run / "best" / "checkpoint-4")
    assert len(json.loads(cli("inspect", "--json", run).stdout)["runs"]) == 2
    assert printed(cli, run) == str(run / "checkpoint-6")
    several = cli("inspect", "--resume-path", tmp_path)  # no run in the folder named itself: which one is meant is unknown
    assert several.exit_code == 2 and "--resume-path needs one run" in several.stderr


def test_one_file_is_refused_never_printed_as_none_or_0_and_the_command_it_suggests_works(cli, hf_trained: Path, tmp_path: Path) -> None:
    """A lone file says nothing of the checkpoint it belongs to: ``--resume-path`` printed
    ``None`` for it and ``--resume`` printed ``0`` for ``checkpoint-6/model.safetensors``, both
    with exit 0, so ``$(ckptdoctor inspect --resume-path …)`` handed the trainer ``None``. Now both
    refuse (exit 2, nothing on stdout) and name the command to ask of its run, which HF resumes from."""
    weights = hf_trained / "checkpoint-6" / "model.safetensors"
    for flag in ("--resume-path", "--resume"):
        refused = cli("inspect", flag, weights)
        assert (refused.exit_code, refused.stdout) == (2, ""), refused.stdout
        assert f"{weights} is one file of a run" in refused.stderr
        suggested = refused.stderr.split("ask of its run: ")[1].split()
        assert suggested[:3] == ["ckptdoctor", "inspect", flag]
        if flag == "--resume-path":
            path = printed(cli, *suggested[3:])
            assert path == str(hf_trained / "checkpoint-6")
            assert hf_resumed(path, 8, tmp_path / "again") == (8, 2), "went on from step 6"
    for flag in ("--resume-path", "--resume"):  # a file named like an epoch of a split run, too
        refused = cli("inspect", flag, EXAMPLES / "torch-split" / "model_2.safetensors")
        assert (refused.exit_code, refused.stdout) == (2, "") and f"inspect {flag} {EXAMPLES / 'torch-split'}" in refused.stderr
    report = json.loads(cli("inspect", "--json", weights).stdout)
    assert report["runs"][0]["resume"] is None, "a file judged alone is no resume point in the JSON report either"
