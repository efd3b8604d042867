"""The fresh-run matrix (``matrix.py``) for ckptdoctor's ``torch`` and ``safetensors`` layouts: a
hand-written PyTorch training loop (``frameworks.torch_loop``) saving three epochs in the shapes
users write: ``split`` (``model_{e}.safetensors``, ``optimizer_{e}.pt``, ``scheduler_{e}.pt``),
``bundled`` (``torch.save`` of the PyTorch tutorial's dict into ``ckpt_{e}.pt``) and ``weights``
(``model_{e}.safetensors`` alone, a ``safetensors`` run).

There is no framework: the oracle is the loop's own resume (``frameworks.loop_resume``): from
the file it is given (``model_3.safetensors`` for a split save, whose siblings it finds by the
epoch in the name, as ``--resume-path`` prints it), ``load_state_dict`` of the model, optimizer and
scheduler. Its automatic pick is what such loops are written to do, a glob and a max: the file of
the highest epoch number (``frameworks.loop_newest``), whatever state it is in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from frameworks import loop_newest, loop_resume, loop_saves, split_files
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")


def variant(shape: str, kill_points: tuple[KillPoint, ...]) -> Fresh:
    def build(folder: Path) -> Path:
        from frameworks import torch_loop

        torch_loop(folder / "run", 3, shape)
        return folder / "run"

    def restore(run: Path, path: Path) -> str:
        """What the loop's resume restores from ``path``: model, optimizer, scheduler and epoch."""
        try:
            model, optimizer, scheduler, epoch = loop_resume(path, shape)
        except Exception as error:
            raise Unrestorable(f"{type(error).__name__}: {error}") from error
        return tensors_digest(model.state_dict(), optimizer.state_dict(), scheduler.state_dict(), epoch)

    return Fresh(
        name=shape,
        build=build,
        checkpoints=lambda run: loop_saves(run, shape),
        restore=restore,
        auto_resume=lambda run: loop_newest(run, shape),
        save_more=f"from frameworks import torch_loop\ntorch_loop(run, 4, {shape!r})",
        kill_points=kill_points,
        state=(lambda checkpoint: split_files(checkpoint)[1]) if shape == "split" else None,
        files=split_files if shape == "split" else None,
    )


# the split save writes model_4.safetensors, optimizer_4.pt, scheduler_4.pt: killed inside the
# weights, inside the optimizer state, and between the optimizer and the scheduler; the others
# write one file each epoch, killed in its first third (the weights) and its last (the optimizer)
SPLIT = variant("split", (KillPoint(1, 0.5), KillPoint(2, 0.5), KillPoint(2, 1.0)))
BUNDLED = variant("bundled", (KillPoint(1, 0.3), KillPoint(1, 0.8)))
WEIGHTS = variant("weights", (KillPoint(1, 0.5),))


test_breakage, test_killed_mid_save = matrix_tests(
    torch.__version__,
    SPLIT,
    BUNDLED,
    WEIGHTS,
    expected_failures={
        "weights-torn-copy": (
            "verify --deep calls a torn model_3.safetensors whole (safetensors has no checksum, but its tail is byte for byte "
            "the previous save's); the loop loads mixed weights"
        ),
    },
)
