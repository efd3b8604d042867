"""``inspect --resume-path``: the path to hand the framework's own resume, and the framework
resumes from it (HF ``resume_from_checkpoint``, Lightning ``ckpt_path``, accelerate
``load_state``, safetensors for a split torch save)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Result
from frameworks import accelerator_for, copy_run, deepspeed_run, hf_trainer, lightning_fit, loop_resume, torch_loop
from sample_set import Sample, _replace_member, _splice_after_proto, _stmt, fire
from test_dcp import dcp_load, dcp_run

import ckptdoctor.api as ckd
from ckptdoctor.pipelines.verify import RESUME_TRIES, verify_resume
from ckptdoctor.progress import Tally

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


@pytest.mark.slow
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


@pytest.mark.slow
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


# --- verify --resume, --resume-path: the resume point read whole first (issue 31, item 9) ---------
# ``inspect`` reads headers, so it names a checkpoint whose optimizer file carries a payload;
# ``path=$(ckptdoctor verify --resume-path RUN) && train --resume "$path"`` must never hand that
# file to the trainer. Each payload is proven live by ``torch.load(weights_only=False)`` in a child
# process (its canary appears); under ckptdoctor the canary never does.

Cli = Callable[..., Result]


def _trojan(path: Path, canary: Path) -> Sample:
    """``path`` (a torch zip) with a call that creates ``canary`` spliced into its pickle: what
    ``torch.load(weights_only=False)`` runs; the sample that proves it."""
    path.write_bytes(
        _replace_member(path.read_bytes(), "data.pkl", lambda pickled: _splice_after_proto(pickled, _stmt("os.system", str(canary))))
    )
    return Sample(path.name, path, True, "torch.load", "resume-point", canary)


def _live(sample: Sample) -> None:
    """The payload runs where the victim loads it (in a child process), and its canary is then removed."""
    assert sample.canary is not None
    assert fire([sample]) == {sample.name}, "the payload must be live"
    sample.canary.unlink()


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hand-written torch loop's split saves (model, optimizer and scheduler per epoch), epochs 1-6."""
    folder = tmp_path_factory.mktemp("loop") / "run"
    torch_loop(folder, 6, "split")
    return folder


def _asked(cli: Cli, run: Path) -> dict[str, Result]:
    return {
        "inspect": cli("inspect", "--resume-path", run),
        "verify": cli("verify", "--resume-path", run),
        "verify --resume": cli("verify", "--resume", run),
    }


@pytest.mark.slow
def test_a_trojaned_optimizer_in_the_resume_point_prints_no_path(loop_run: Path, tmp_path: Path, cli: Cli) -> None:
    run = copy_run(loop_run, tmp_path / "run")
    canary = tmp_path / "canary"
    _live(_trojan(run / "optimizer_6.pt", canary))
    asked = _asked(cli, run)
    assert (asked["inspect"].exit_code, asked["inspect"].stdout.strip()) == (0, str(run / "model_6.safetensors"))  # headers: as before
    for command in ("verify", "verify --resume"):
        assert asked[command].exit_code == 1, asked[command]
        assert asked[command].stdout == "", "a script must get no path, not an older one nobody verified"
        assert "CKD401" in asked[command].stderr and "optimizer_6.pt" in asked[command].stderr
    assert not canary.exists()
    report = ckd.verify(run, resume=True)
    (judged,) = report.runs
    assert judged.resume is None and judged.resume_path is None
    assert any(f.code == "CKD401" and f.path and f.path.endswith("optimizer_6.pt") for f in report.findings)


@pytest.mark.slow
def test_a_trojan_stops_the_walk_back_a_damaged_save_does_not(loop_run: Path, tmp_path: Path, cli: Cli) -> None:
    """A newest checkpoint torn where its header does not show (the optimizer's pickle cut in
    half inside a whole zip) is passed over for the newest that verifies: the loop's own resume
    from it fails, from the one before it works. A payload is never passed over."""
    run = copy_run(loop_run, tmp_path / "run")
    optimizer = run / "optimizer_6.pt"
    optimizer.write_bytes(_replace_member(optimizer.read_bytes(), "data.pkl", lambda pickled: pickled[: len(pickled) // 2]))
    with pytest.raises(Exception):  # noqa: B017 - torch's own error for a cut pickle: any will do, the point is it fails
        loop_resume(run / "model_6.safetensors", "split")
    assert loop_resume(run / "model_5.safetensors", "split")[3] == 5
    assert cli("inspect", "--resume", run).stdout.strip() == "6"
    assert (cli("verify", "--resume", run).exit_code, cli("verify", "--resume", run).stdout.strip()) == (0, "5")
    assert cli("verify", "--resume-path", run).stdout.strip() == str(run / "model_5.safetensors")
    # the one before it carries a payload: no path, though epoch 4 would verify
    canary = tmp_path / "canary"
    _live(_trojan(run / "optimizer_5.pt", canary))
    told = cli("verify", "--resume-path", run)
    assert (told.exit_code, told.stdout) == (1, "")
    assert not canary.exists()


def test_damage_everywhere_gives_up_after_a_few_checkpoints(loop_run: Path, tmp_path: Path, cli: Cli) -> None:
    run = copy_run(loop_run, tmp_path / "run")
    for epoch in range(1, 7):
        optimizer = run / f"optimizer_{epoch}.pt"
        optimizer.write_bytes(_replace_member(optimizer.read_bytes(), "data.pkl", lambda pickled: pickled[: len(pickled) // 2]))
    tally = Tally()
    report, _ = verify_resume([str(run)], tally=tally)
    assert report.runs[0].resume is None
    assert tally.read == 3 * RESUME_TRIES  # three files a checkpoint, and no more checkpoints than that
    told = cli("verify", "--resume-path", run)
    assert (told.exit_code, told.stdout) == (1, "")


def test_a_healthy_run_gets_the_path_inspect_prints(loop_run: Path, tmp_path: Path, cli: Cli) -> None:
    run = copy_run(loop_run, tmp_path / "run")
    asked = _asked(cli, run)
    assert asked["inspect"].exit_code == asked["verify"].exit_code == asked["verify --resume"].exit_code == 0
    assert asked["verify"].stdout == asked["inspect"].stdout == f"{run / 'model_6.safetensors'}\n"
    assert asked["verify --resume"].stdout == cli("inspect", "--resume", run).stdout == "6\n"
    assert loop_resume(Path(asked["verify"].stdout.strip()), "split")[3] == 6  # the loop resumes from it


def test_only_the_resume_points_files_are_read(tmp_path: Path) -> None:
    """A run of many checkpoints: its resume point's three files are read whole, no other."""
    run = tmp_path / "run"
    torch_loop(run, 40, "split")
    tally = Tally()
    report, _ = verify_resume([str(run)], tally=tally)
    (judged,) = report.runs
    assert judged.resume is not None and judged.resume.index == 40
    assert (tally.read, tally.bytes_read) == (3, judged.resume.bytes)
    assert judged.resume_path == str(run / "model_40.safetensors")


# --- a real HF Trainer --------------------------------------------------------------------------


@pytest.mark.slow
def test_hf_trainer_trojaned_optimizer_prints_no_path_and_a_healthy_run_its_checkpoint(hf_trained: Path, tmp_path: Path, cli: Cli) -> None:
    healthy = copy_run(hf_trained, tmp_path / "healthy")
    asked = _asked(cli, healthy)
    assert asked["verify"].exit_code == 0 and asked["verify"].stdout == asked["inspect"].stdout == f"{healthy / 'checkpoint-6'}\n"
    assert hf_resumed(asked["verify"].stdout.strip(), 8, tmp_path / "again") == (8, 2), "HF went on from step 6"
    output = copy_run(hf_trained, tmp_path / "out")
    canary = tmp_path / "canary"
    _live(_trojan(output / "checkpoint-6" / "optimizer.pt", canary))
    asked = _asked(cli, output)
    assert (asked["inspect"].exit_code, asked["inspect"].stdout) == (0, f"{output / 'checkpoint-6'}\n")
    assert (asked["verify"].exit_code, asked["verify"].stdout) == (1, "")
    assert (asked["verify --resume"].exit_code, asked["verify --resume"].stdout) == (1, "")
    assert not canary.exists()
