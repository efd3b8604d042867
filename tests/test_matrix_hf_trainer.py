"""The fresh-run matrix (``matrix.py``) for HF Trainer: a real ``transformers.Trainer`` of a
tiny GPT-2 saving at steps 2, 4 and 6; the oracle is ``train(resume_from_checkpoint=...)``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from frameworks import hf_trainer
from matrix import Fresh, KillPoint, Restored, matrix_tests, restored_by

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

transformers = pytest.importorskip("transformers")


class _Capture(transformers.TrainerCallback):  # type: ignore[misc]
    """Stops the Trainer in ``on_train_begin``, once it has restored everything it resumes."""

    def on_train_begin(
        self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None, lr_scheduler: Any = None, **_: Any
    ) -> None:
        raise Restored(model.state_dict(), optimizer.state_dict(), lr_scheduler.state_dict(), state.global_step)


def build(folder: Path) -> Path:
    out = folder / "out"
    hf_trainer(out, 6).train()
    return out


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(p.name.rsplit("-", 1)[1]): p for p in run.glob("checkpoint-*") if p.is_dir() and p.name.rsplit("-", 1)[1].isdigit()}


_restores = iter(range(1_000_000))


def restore(run: Path, path: Path) -> str:
    """What ``trainer.train(resume_from_checkpoint=path)`` restores before its first step."""
    trainer = hf_trainer(run.parent / f"restored-{next(_restores)}", 100, [_Capture()])
    return restored_by(lambda: trainer.train(resume_from_checkpoint=str(path)))


def auto_resume(run: Path) -> Path | None:
    """``resume_from_checkpoint=True``: ``get_last_checkpoint(output_dir)``."""
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(str(run))
    return None if last is None else Path(last)


HF = Fresh(
    name="hf-trainer",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=auto_resume,
    save_more="from frameworks import hf_trainer\nhf_trainer(run, 8).train(resume_from_checkpoint=True)",
    kill_points=(KillPoint(3, 0.5), KillPoint(5, 0.5), KillPoint(7, 1.0)),  # model.safetensors, optimizer.pt, rng_state.pth
    state=lambda checkpoint: checkpoint / "optimizer.pt",
)

test_breakage, test_killed_mid_save = matrix_tests(transformers.__version__, HF)
