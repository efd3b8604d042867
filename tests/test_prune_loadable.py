"""A prune never leaves a run without a loadable checkpoint it had (issue 32, item 2).

torch's legacy format (``torch.save(..., _use_new_zipfile_serialization=False)``) has no end
record: where its pickles run past what ``inspect`` reads of the head, a file cut in half looks
whole. ``prune`` once kept such a newest epoch and deleted every loadable one. Before it deletes
the last checkpoint a header read can prove whole, it now reads the newest it keeps whole, as
``prune --verify`` does, and keeps the newest that reads whole in place of one that does not.

The runs are real ``torch.save`` calls of the PyTorch tutorial's checkpoint dict; what is kept is
then loaded with ``torch.load(weights_only=True)`` into the model, as a resume loads it."""

from __future__ import annotations

import os
import pickle
import struct
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("fake_machine")  # the process table and clock are the test's (conftest)

torch = pytest.importorskip("torch")

LAYERS = 24
"""Enough tensors for the pickles of a legacy save to run past inspect's head read (16 KiB)."""


def new_model() -> torch.nn.Module:
    return torch.nn.Sequential(*(torch.nn.Linear(8, 8) for _ in range(LAYERS)))


def legacy_run(folder: Path, epochs: int) -> None:
    """A loop saving the tutorial's dict each epoch in torch's legacy format, an hour ago."""
    folder.mkdir(parents=True)
    torch.manual_seed(0)
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters())
    for epoch in range(1, epochs + 1):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state = {
            "epoch": epoch,
            "model_state_dict": model.state_dict(),
            "optimizer_state_dict": optimizer.state_dict(),
            "loss": loss.item(),
        }
        torch.save(state, folder / f"ckpt_{epoch}.pt", _use_new_zipfile_serialization=False)
    an_hour_ago = time.time() - 3600
    for path in folder.iterdir():
        os.utime(path, (an_hour_ago, an_hour_ago))


def resumed(path: Path) -> int:
    """The tutorial's resume: load the dict with weights_only=True into a model and an optimizer."""
    state = torch.load(path, weights_only=True)
    model = new_model()
    model.load_state_dict(state["model_state_dict"])
    torch.optim.AdamW(model.parameters()).load_state_dict(state["optimizer_state_dict"])
    return int(state["epoch"])


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    stamp = path.stat().st_mtime
    path.write_bytes(data[: len(data) // 2])
    os.utime(path, (stamp, stamp))


def test_a_truncated_legacy_newest_epoch_does_not_cost_the_run_every_loadable_one(tmp_path, cli, inspect_json):
    folder = tmp_path / "run"
    legacy_run(folder, 4)
    cut_in_half(folder / "ckpt_4.pt")
    # torch itself cannot load it; which error depends on where the cut falls (storage keys vary)
    with pytest.raises((EOFError, RuntimeError, struct.error, pickle.UnpicklingError)):
        torch.load(folder / "ckpt_4.pt", weights_only=True)
    assert inspect_json(folder).json["runs"][0]["resume"]["index"] == 4  # the fault: the header read takes it for whole

    done = cli("prune", "--json", "--yes", "--keep-last", "1", folder)
    assert done.exit_code == 0, done.stdout
    plan = {item["index"]: item for item in done.json["plan"]}
    assert [index for index, item in plan.items() if item["action"] == "keep"] == [3, 4]
    assert any(why.startswith("the newest that reads whole (epoch 4 after it does not") for why in plan[3]["reasons"])
    assert sorted(path.name for path in folder.glob("ckpt_*.pt")) == ["ckpt_3.pt", "ckpt_4.pt"]
    assert resumed(folder / "ckpt_3.pt") == 3


def test_a_whole_legacy_newest_epoch_is_read_and_the_plan_goes_on(tmp_path, cli):
    """Read whole, the newest legacy epoch loads: the older ones go as the policy says."""
    folder = tmp_path / "run"
    legacy_run(folder, 4)
    done = cli("prune", "--yes", "--keep-last", "1", folder)
    assert done.exit_code == 0, done.stdout
    assert [path.name for path in folder.glob("ckpt_*.pt")] == ["ckpt_4.pt"]
    assert resumed(folder / "ckpt_4.pt") == 4
