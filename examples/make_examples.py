"""Regenerate the example run folders under ``examples/runs`` (needs the ``torch`` extra).

    python examples/make_examples.py

burn runs are written by :mod:`ckptdoctor.testing` from the burnpack specification (burn is a
Rust framework); the PyTorch run is written by real ``torch.save`` and ``safetensors``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from ckptdoctor.testing import write_burn_run

HERE = Path(__file__).resolve().parent / "runs"


def burn_runs() -> None:
    # burn's default strategy keeps the last two epochs plus the best validation epoch
    write_burn_run(HERE / "burn-healthy" / "checkpoint", (3, 4, 5))
    (HERE / "burn-healthy" / "experiment.log").write_text("2026-11-30T10:00:00Z INFO training finished\n")

    # The seed scenario: epoch 5 has a model and a scheduler, but its optimizer file is gone
    seed = HERE / "burn-missing-optimizer" / "checkpoint"
    write_burn_run(seed, (3, 4, 5))
    (seed / "optim-5.bpk").unlink()

    # The disk filled while epoch 5's optimizer state was written: burn truncates in place
    cut = HERE / "burn-truncated" / "checkpoint"
    write_burn_run(cut, (3, 4, 5))
    optimizer = cut / "optim-5.bpk"
    data = optimizer.read_bytes()
    optimizer.write_bytes(data[: len(data) // 2])


def torch_split_run() -> None:
    """A hand-made loop: weights as safetensors, optimizer and scheduler with torch.save."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    folder = HERE / "torch-split"
    folder.mkdir(parents=True)
    for epoch in (1, 2, 3):
        loss = model(torch.randn(32, 8)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        save_file(model.state_dict(), str(folder / f"model_{epoch}.safetensors"))
        torch.save(optimizer.state_dict(), folder / f"optimizer_{epoch}.pt")
        torch.save(scheduler.state_dict(), folder / f"scheduler_{epoch}.pt")
    # killed while saving epoch 3's optimizer state: torch.save leaves a file without its zip tail
    state = folder / "optimizer_3.pt"
    state.write_bytes(state.read_bytes()[:700])


def main() -> None:
    if HERE.exists():
        shutil.rmtree(HERE)
    HERE.mkdir()
    burn_runs()
    torch_split_run()
    for root, _, files in sorted(os.walk(HERE)):
        for name in sorted(files):
            path = Path(root, name)
            print(f"{path.stat().st_size:>8}  {path.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
