"""Every layout's recogniser over every other layout's tree: each run is claimed by its own only."""

from __future__ import annotations

from pathlib import Path

import pytest
from frameworks import FairseqTrainer, deepspeed_run, megatron_run
from test_dcp import dcp_run
from test_orbax import orbax_run
from test_timm import timm_run

from ckptdoctor.discover import discover
from ckptdoctor.layouts.base import FolderLayout, claim_all
from ckptdoctor.layouts.naming import file_names
from ckptdoctor.layouts.registry import LAYOUTS
from ckptdoctor.testing import write_burn_run


@pytest.fixture
def trees(tmp_path: Path) -> dict[str, Path]:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    burn = tmp_path / "burn" / "checkpoint"
    write_burn_run(burn, (1, 2))
    split = tmp_path / "split"
    split.mkdir()
    for epoch in (1, 2):
        save_file({"w": torch.zeros(2)}, str(split / f"model_{epoch}.safetensors"))
        torch.save({}, split / f"optimizer_{epoch}.pt")
    lightning = tmp_path / "lightning" / "checkpoints"
    lightning.mkdir(parents=True)
    for epoch in (1, 2):
        torch.save(
            {"state_dict": {}, "optimizer_states": [{"state": {}, "param_groups": []}], "lr_schedulers": []},
            lightning / f"epoch={epoch}-step={epoch * 10}.ckpt",
        )
    torch.save({"state_dict": {}, "optimizer_states": [{"state": {}, "param_groups": []}], "lr_schedulers": []}, lightning / "last.ckpt")
    hf = tmp_path / "hf"
    for step in (10, 20):
        folder = hf / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
        torch.save({}, folder / "optimizer.pt")
        torch.save({}, folder / "scheduler.pt")
        (folder / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    accelerate = tmp_path / "acc" / "checkpoints"
    for save in (0, 1):
        folder = accelerate / f"checkpoint_{save}"
        folder.mkdir(parents=True)
        save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
        torch.save({}, folder / "optimizer.bin")
        torch.save({}, folder / "scheduler.bin")
        torch.save({}, folder / "random_states_0.pkl")
    litgpt = tmp_path / "litgpt" / "out"
    for step in (2, 4):  # finetune/full.py's fabric.save, and the files saved beside it
        folder = litgpt / f"step-{step:06d}"
        folder.mkdir(parents=True)
        torch.save(
            {
                "model": {"w": torch.zeros(2)},
                "optimizer": {"state": {}, "param_groups": []},
                "scheduler": {},
                "iter_num": step,
                "step_count": step,
            },
            folder / "lit_model.pth",
        )
        (folder / "model_config.yaml").write_text("n_layer: 1\n")
        (folder / "hyperparameters.yaml").write_text("out_dir: out\n")
    return {
        "litgpt": litgpt,
        "burn": burn,
        "accelerate": accelerate,
        "torch": split,
        "lightning": lightning,
        "hf-trainer": hf,
        "deepspeed": deepspeed_run(tmp_path / "ds"),
        "dcp": dcp_run(tmp_path / "dcp"),
        "megatron": megatron_run(tmp_path / "megatron"),
        "orbax": orbax_run(tmp_path / "orbax"),
        "timm": timm_run(tmp_path / "timm", range(1, 3)),
        "fairseq": FairseqTrainer(tmp_path / "fairseq", save_interval_updates=3).epochs(2).save_dir,
    }


def test_each_tree_is_claimed_by_its_own_layout_only(trees):
    for owner, folder in trees.items():
        listings = discover(str(folder)).listings
        by_path = {listing.os_path: listing for listing in listings}
        entries = listings[0].entries

        def subfolder(entry, by_path=by_path):
            return by_path.get(entry.os_path)

        claimants = [layout.name for layout in LAYOUTS if claim_all(layout, listings[0], subfolder) and layout.recognises(entries)]
        assert claimants in ([owner], [owner, "torch"]), (owner, claimants)


@pytest.mark.slow
def test_each_tree_is_reported_under_its_layout(trees, inspect_json):
    for owner, folder in trees.items():
        report = inspect_json(folder).json
        assert [run["layout"] for run in report["runs"]] == [owner], owner
        assert report["findings"] == [], (owner, report["findings"])


def test_no_signature_takes_another_layouts_tree_for_a_lone_checkpoint_folder(trees):
    """A folder layout's signature (files only its framework writes) makes a folder one of its
    saves whatever the folder is called: it must not fit another framework's run folder
    (nanoGPT's ``ckpt.pt`` alone beside a run's numbered saves, say)."""
    for owner, folder in trees.items():
        names = file_names(discover(str(folder)).listings[0])
        signed = [layout.name for layout in LAYOUTS if isinstance(layout, FolderLayout) and layout.signature(names)]
        assert signed in ([], [owner]), (owner, signed)


def test_a_loop_saving_bin_files_per_epoch_is_not_taken_for_an_accelerate_save(tmp_path, inspect_json):
    """`model_3.bin`, `optimizer_3.bin`, `scheduler_3.bin`: accelerate's names for a second model,
    optimizer and scheduler, but here one file per role and epoch of a hand-made loop."""
    torch = pytest.importorskip("torch")
    for epoch in (1, 2, 3):
        for role in ("model", "optimizer", "scheduler"):
            torch.save({}, tmp_path / f"{role}_{epoch}.bin")
    (run,) = inspect_json(tmp_path).json["runs"]
    assert (run["layout"], [c["index"] for c in run["checkpoints"]]) == ("torch", [1, 2, 3])
