"""Layout claims: which names each layout takes for a checkpoint's file (or folder), with what
roles, index and unit, and which it refuses; and what becomes of a refused name beside a run
(a pointer, a staging leftover, a stray prefix), as ``scan`` reports it."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.naming import sifted
from ckptdoctor.layouts.registry import LAYOUTS, layout_named
from ckptdoctor.model import Entry, Role, Unit
from ckptdoctor.pipelines.scan import inspect, scan
from ckptdoctor.testing import write_burn_run

M, OPT, S = Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER
LIGHTNING = (M, OPT, S)
BUNDLE = (M, OPT)
FAIRSEQ = (M, OPT, S)  # model, last_optimizer_state, optimizer_history (the scheduler's state)

CLAIMED = [
    # layout, name, (roles, index, unit the name spells)
    ("burn", "model-3.bpk", ((M,), 3, None)),
    ("burn", "optim-12.mpk.gz", ((OPT,), 12, None)),
    ("burn", "scheduler-1.json", ((S,), 1, None)),
    ("burn", "policy-2.bpk", ((M,), 2, None)),  # the RL learner's names
    ("burn", "learning-agent-2.bpk", ((OPT,), 2, None)),
    ("lightning", "epoch=3-step=1200.ckpt", (LIGHTNING, 3, Unit.EPOCH)),  # by epoch, unless the run says steps
    ("lightning", "epoch=3-step=1200-v1.ckpt", (LIGHTNING, 3, Unit.EPOCH)),
    ("lightning", "step=500.ckpt", (LIGHTNING, 500, Unit.STEP)),
    ("lightning", "epoch=2-val_loss=0.12.ckpt", (LIGHTNING, 2, Unit.EPOCH)),  # the metric's digits are no index
    ("lightning", "3-1200.ckpt", (LIGHTNING, 1200, Unit.STEP)),  # {epoch}-{step} without metric names
    ("lightning", "3.ckpt", (LIGHTNING, 3, Unit.EPOCH)),
    ("lightning", "hpc_ckpt_2.ckpt", (LIGHTNING, 2, Unit.SAVE)),
    ("lightning", "megatron_gpt--val_loss=0.1234-epoch=3.ckpt", (LIGHTNING, 3, Unit.EPOCH)),  # NeMo's exp_manager
    ("lightning", "gpt--val_loss=0.1234-epoch=3-step=1200.ckpt", (LIGHTNING, 3, Unit.EPOCH)),
    ("lightning", "model-epoch=03-val_loss=0.12.ckpt", (LIGHTNING, 3, Unit.EPOCH)),  # text before {epoch:02d}
    ("lightning", "periodic-epoch=3-step=1200.ckpt", (LIGHTNING, 3, Unit.EPOCH)),
    ("lightning", "ckpt_step=500.ckpt", (LIGHTNING, 500, Unit.STEP)),
    ("torch", "model_3.pt", ((M,), 3, None)),
    ("torch", "model-3.pt", ((M,), 3, None)),
    ("torch", "model_ema_3.pt", ((M,), 3, None)),
    ("torch", "optimizer-epoch-3.pth", ((OPT,), 3, Unit.EPOCH)),
    ("torch", "scheduler_7.pth", ((S,), 7, None)),
    ("torch", "weights.step.500.safetensors", ((M,), 500, Unit.STEP)),
    ("torch", "model-ep3.pth", ((M,), 3, Unit.EPOCH)),
    ("torch", "epoch_12.pt", (BUNDLE, 12, Unit.EPOCH)),
    ("torch", "epoch_12.PT", (BUNDLE, 12, Unit.EPOCH)),
    ("torch", "step_500.pt", (BUNDLE, 500, Unit.STEP)),
    ("torch", "iter5.pt", (BUNDLE, 5, Unit.ITERATION)),
    ("torch", "checkpoint_3.pth", (BUNDLE, 3, None)),
    ("torch", "ckpt-500.pt", (BUNDLE, 500, None)),
    ("timm", "checkpoint-3.pth.tar", (BUNDLE, 3, Unit.EPOCH)),
    ("timm", "recovery-3-100.pth.tar", (BUNDLE, 3, Unit.EPOCH)),  # a mid-epoch save fills its epoch's place
    ("hf-trainer", "checkpoint-500", ((), 500, Unit.STEP)),
    ("accelerate", "checkpoint_3", ((), 3, Unit.SAVE)),
    ("deepspeed", "global_step100", ((), 100, Unit.STEP)),
    ("deepspeed", "global_step100_universal", ((), 100, Unit.STEP)),  # ds_to_universal.py's output folder
    ("megatron", "iter_0000200", ((), 200, Unit.ITERATION)),
    ("megatron", "iter_12345678", ((), 12345678, Unit.ITERATION)),
    ("keras", "ep03-0.190.keras", (BUNDLE, 3, Unit.EPOCH)),  # ModelCheckpoint's template: 0.190 is the loss
    ("keras", "weights.05-0.42.weights.h5", (BUNDLE, 5, None)),  # the Keras docs' example template
    ("keras", "model_12.h5", (BUNDLE, 12, None)),  # legacy HDF5 models
    ("keras", "ep1-99.keras", (BUNDLE, 1, Unit.EPOCH)),  # `ep{epoch}-{val_acc:.0f}`: the number after its unit word
    ("keras", "latest.weights.h5", (BUNDLE, 0, Unit.EPOCH)),  # BackupAndRestore: its epoch is in its metadata
    ("keras", "training_metadata.json", ((Role.METADATA,), 0, Unit.EPOCH)),  # its record: a save of its own without the weights
    ("tensorflow", "ckpt-12.index", ((Role.METADATA,), 12, None)),  # CheckpointManager.save
    ("tensorflow", "ckpt-12.data-00000-of-00001", ((M,), 12, None)),
    ("tensorflow", "model.ckpt-1000.index", ((Role.METADATA,), 1000, None)),  # TF 1 Saver
    ("tensorflow", "cp-0005.ckpt.data-00001-of-00002", ((M,), 5, None)),  # the Keras 2 tutorials' template
    ("tensorflow", "weights.index", ((Role.METADATA,), 0, None)),  # Checkpoint.write("weights"): one save
    ("mmengine", "epoch_3.pth", (BUNDLE, 3, Unit.EPOCH)),  # 1-based, unpadded (CheckpointHook.filename_tmpl)
    ("mmengine", "iter_12.pth", (BUNDLE, 12, Unit.ITERATION)),
    ("detectron2", "model_0009999.pth", (BUNDLE, 9999, Unit.ITERATION)),  # the 0-based iteration, 7 digits
    ("detectron2", "model_12345678.pth", (BUNDLE, 12345678, Unit.ITERATION)),
    ("composer", "ep1-ba4-rank0.pt", (BUNDLE, 4, Unit.STEP)),  # by batch, the global step
    ("composer", "ep12-ba3000-rank3.pt", (BUNDLE, 3000, Unit.STEP)),
    ("torchtune", "epoch_0", ((), 0, Unit.EPOCH)),  # 0-based, as the recipes save
    ("torchtune", "step_500", ((), 500, Unit.STEP)),  # main's dir_prefix="step"
    ("fairseq", "checkpoint3.pt", (FAIRSEQ, 3, Unit.EPOCH)),
    ("fairseq", "checkpoint_3_1500.pt", (FAIRSEQ, 3, Unit.EPOCH)),  # by epoch; a run of interval saves alone goes by updates
    ("fairseq", "checkpoint12-shard1.pt", (FAIRSEQ, 12, Unit.EPOCH)),  # FSDP's sharded state: one file per rank
    ("fairseq", "checkpoint_2_800-model_part-0.pt", (FAIRSEQ, 2, Unit.EPOCH)),
    ("fairseq", "checkpoint4_part1.pt", (FAIRSEQ, 4, Unit.EPOCH)),
    ("litgpt", "step-000500", ((), 500, Unit.STEP)),  # finetuning pads to 6 digits
    ("litgpt", "step-00001000", ((), 1000, Unit.STEP)),  # pretraining to 8
]


@pytest.mark.parametrize(("layout", "name", "expected"), CLAIMED)
def test_a_layout_claims_its_names_with_roles_index_and_unit(layout, name, expected):
    claim = layout_named(layout).claim(name)
    assert claim is not None, f"{layout} does not claim {name}"
    assert (claim.roles, claim.number, claim.unit) == expected


REFUSED = [
    ("burn", "model-3.pt"),  # not an extension burn writes
    ("burn", "model3.bpk"),
    ("burn", "Model-3.bpk"),
    ("burn", "optimizer-3.bpk"),  # another prefix: a stray, not one of the run's roles
    ("burn", "model-3.bpk.tmp"),  # staging of model-3.bpk, never the checkpoint itself
    ("burn", "model-0007.bpk"),  # burn writes the epoch unpadded: `.checkpoint(7)` loads model-7.bpk
    ("burn", "model-\uff18.bpk"),  # a full-width 8 is a digit to Python, not to burn
    ("lightning", "last.ckpt"),  # a pointer to a checkpoint, not one
    ("lightning", "last-v1.ckpt"),
    ("lightning", "megatron_gpt--val_loss=0.1234-epoch=3-last.ckpt"),  # NeMo's copy of the newest save
    ("lightning", "megatron_gpt--val_loss=0.1234-epoch=3-unfinished"),  # NeMo's marker of a save in progress
    ("lightning", "model.ckpt"),
    ("lightning", "val_loss=0.1.ckpt"),  # a metric alone names no index
    ("lightning", "model-substep=3.ckpt"),  # a metric whose name ends in "step" is no step
    ("lightning", "megatron_gpt--end.ckpt"),  # NeMo < 1.0's save at the end of training: it stops exp_manager's resume
    ("lightning", "epoch=3-step=1200.ckpt.tmp"),
    ("torch", "resnet50.pt"),  # an architecture's number, not an epoch
    ("torch", "model.pt"),
    ("torch", "notes_3.txt"),
    ("torch", "model_3.pt.tmp"),
    ("timm", "last.pth.tar"),  # its epoch is inside: indexed when the run is built, where it is the newest save
    ("timm", "milestone-4.pth.tar"),  # 1.0.31: indexed by the epoch inside (3), its name counts completed epochs
    ("timm", "model_best.pth.tar"),
    ("timm", "tmp.pth.tar"),
    ("timm", "checkpoint-3.pth"),
    ("hf-trainer", "checkpoint-500.pt"),
    ("hf-trainer", "checkpoint_500"),  # accelerate's name
    ("hf-trainer", "Checkpoint-500"),
    ("hf-trainer", "tmp-checkpoint-8"),  # the Trainer's staging folder
    ("accelerate", "checkpoint-3"),  # HF Trainer's name
    ("accelerate", "checkpoint_3.pt"),
    ("deepspeed", "global_step"),
    ("deepspeed", "global_step-1"),
    ("deepspeed", "global_step100.pt"),
    ("deepspeed", "global_step100_old"),
    ("deepspeed", "latest"),
    ("megatron", "iter_200"),  # Megatron pads to 7 digits
    ("megatron", "iter_0000200.pt"),
    ("megatron", "iter_0000200_old"),
    ("megatron", "latest_checkpointed_iteration.txt"),
    ("megatron", "release"),  # by its name alone: only a folder holding rank folders is one (tests/test_megatron.py)
    ("keras", "best.keras"),  # save_best_only under one name: a copy that stands for a save
    ("keras", "ep03.keras.tmp"),
    ("keras", "ep03.pt"),
    ("tensorflow", "checkpoint"),  # the state file
    ("tensorflow", "ckpt-3_temp"),  # a killed save's staging folder
    ("tensorflow", "ckpt-3.index.tempstate123"),
    ("tensorflow", "ckpt-3.data-00000-of-00001.tempstate15889886598725582139"),
    ("tensorflow", "ckpt-3.data-0-of-1"),  # DataFilename pads to five digits
    ("mmengine", "best_mse_epoch_3.pth"),  # save_best's weights, no resume point
    ("mmengine", "epoch_3-0123abcd.pth"),  # published
    ("mmengine", "epoch_3.pt"),
    ("mmengine", "last_checkpoint"),
    ("detectron2", "model_final.pth"),  # its iteration is inside: indexed when the run is built
    ("detectron2", "model_best.pth"),
    ("detectron2", "model_999.pth"),  # fvcore pads to 7 digits
    ("detectron2", "last_checkpoint"),
    ("composer", "latest-rank0.pt"),  # its pointer
    ("composer", "latest-rank0.pt.symlink"),
    ("composer", "ep1-ba4.pt"),  # not the saver's default name
    ("composer", "ep1-ba4-rank0.tar.gz"),  # a tarball: no reader opens it
    ("torchtune", "recipe_state"),  # 0.6.1's folder of the run's one recipe state
    ("torchtune", "epoch_3.pt"),
    ("torchtune", "epoch-3"),
    ("fairseq", "checkpoint_last.pt"),  # a copy of the newest save, what --restore-file loads by default
    ("fairseq", "checkpoint_best-shard0.pt"),
    ("fairseq", "checkpoint.best_loss_2.3451.pt"),  # --keep-best-checkpoints copies
    ("fairseq", "checkpoint3.pt.tmp"),  # torch_persistent_save's staging file
    ("fairseq", "checkpoint_3.pt"),  # a hand-made loop's name
    ("fairseq", "checkpoint3.pth"),
    ("fairseq", "checkpoint3-shard.pt"),
    ("nanogpt", "ckpt.pt"),
    ("litgpt", "final"),  # the finished model: a run of its own, not a step
    ("litgpt", "step-5"),  # LitGPT pads the step count
    ("litgpt", "step_000500"),
    ("litgpt", "step-000500.pth"),  # no index in the name: the folder is the one save, indexed by its iter_num
]


@pytest.mark.parametrize(("layout", "name"), REFUSED)
def test_a_layout_refuses_names_that_are_not_its_checkpoints(layout, name):
    assert layout_named(layout).claim(name) is None


NAME_PARTS = st.lists(
    st.one_of(
        st.sampled_from(["model", "optim", "epoch", "step", "iter", "checkpoint", "global_step", "last", "v", "ema"]),
        st.text(string.ascii_letters, min_size=1, max_size=4),
        st.integers(0, 10**12).map(str),
        st.sampled_from(["-", "_", ".", "="]),
    ),
    min_size=1,
    max_size=7,
).map("".join)
SUFFIXES = st.sampled_from(
    ["", ".bpk", ".mpk.gz", ".pt", ".pth", ".pth.tar", ".ckpt", ".safetensors", ".bin", ".tmp", ".txt", ".keras", ".weights.h5", ".index"]
)


@given(NAME_PARTS, SUFFIXES)
def test_every_claim_takes_its_index_from_a_number_in_the_name(stem, suffix):
    """Whatever the name, no layout raises on it, and a claim's index is written in the name
    (leading zeros aside), or is 0 where the name has no number (a save written under a name of
    its own, as a folder named on its own is): a checkpoint is never placed at an index it does
    not carry."""
    name = stem + suffix
    digits = "".join(ch if ch.isdigit() else " " for ch in name).split()
    for layout in LAYOUTS:
        claim = layout.claim(name)
        if claim is None:
            continue
        assert claim.number >= 0
        assert str(claim.number) in {part.lstrip("0") or "0" for part in digits or ["0"]}, (layout.name, name, claim)
        assert Role.TEMP not in claim.roles and Role.POINTER not in claim.roles, (layout.name, name)


@given(NAME_PARTS, SUFFIXES)
def test_a_claimable_pattern_sifts_by_suffix_as_it_would_name_by_name(stem, suffix):
    """A big folder's names are sifted once per suffix (``naming.sifted``): every layout's
    ``claimable`` pattern finds by suffix exactly the names it finds one by one."""
    names = (stem + suffix, f"x{suffix}", f"a.b{suffix}", stem)
    listing = Listing("/run", "/run", tuple(Entry(name, f"/run/{name}", f"/run/{name}", 1) for name in names))
    for layout in LAYOUTS:
        if layout.claimable is not None:
            assert list(sifted(listing, layout.claimable)) == [n for n in names if layout.claimable.search(n)], layout.name


@pytest.mark.parametrize(("layout", "name", "expected"), CLAIMED)
def test_a_claimed_name_passes_its_layouts_sieve(layout, name, expected):
    owner = layout_named(layout)
    if owner.claimable is not None:
        listing = Listing("/run", "/run", (Entry(name, f"/run/{name}", f"/run/{name}", 1),))
        assert list(sifted(listing, owner.claimable)) == [name]


# --- what a refused name becomes beside a run -------------------------------------------------------


def only_run(folder: Path):
    (run,) = scan([str(folder)]).runs
    return run


def test_a_burn_run_claims_its_roles_by_epoch(tmp_path):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, [1, 2, 10])
    run = only_run(folder)
    assert (run.layout, run.unit) == ("burn", Unit.EPOCH)
    assert [c.index for c in run.checkpoints] == [1, 2, 10]  # by number, never by string order
    assert [sorted(r.value for r in c.roles) for c in run.checkpoints] == [["model", "optimizer", "scheduler"]] * 3


def test_a_name_under_another_prefix_is_a_stray_beside_the_run_not_one_of_its_roles(tmp_path):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, [1, 2])
    (folder / "optimizer-2.bpk").write_bytes((folder / "optim-2.bpk").read_bytes())
    run = only_run(folder)
    assert [c.index for c in run.checkpoints] == [1, 2]
    assert all(f.entry.name != "optimizer-2.bpk" for c in run.checkpoints for f in c.files)
    (stray,) = run.loose_files
    assert stray.entry.name == "optimizer-2.bpk" and stray.roles == (OPT,)
    report, _ = inspect([str(folder)])
    assert [(f.code, f.path.endswith("optimizer-2.bpk")) for f in report.findings] == [("CKD111", True)]


def test_a_staging_file_joins_the_checkpoint_it_was_going_to_become(tmp_path):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, [1, 2])
    (folder / "model-3.bpk.tmp").write_bytes(b"\0" * 64)
    run = only_run(folder)
    assert [(c.index, c.status.value) for c in run.checkpoints] == [(1, "complete"), (2, "complete"), (3, "partial")]
    (staged,) = run.checkpoints[-1].files
    assert staged.roles == (Role.TEMP,)
    assert run.resume is not None and run.resume.index == 2


def test_names_no_layout_claims_stay_beside_the_run(tmp_path):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, [1])
    for name in ("notes.txt", "model3.bpk", "events.out.tfevents.123"):
        (folder / name).write_text("x")
    run = only_run(folder)
    assert sorted(e.name for e in run.other_files) == ["events.out.tfevents.123", "model3.bpk", "notes.txt"]
    assert [c.index for c in run.checkpoints] == [1]


@pytest.mark.parametrize(("layout", "name"), [(layout, name) for layout, name, _ in CLAIMED])
def test_a_name_with_more_after_it_or_other_digits_is_no_checkpoint(layout: str, name: str) -> None:
    """A name its framework writes, with a newline after it or its digits written in another
    script, is a name no save writes and no resume opens: never a checkpoint of that index."""
    claim = layout_named(layout).claim
    assert claim(name + "\n") is None
    other_digits = name.translate({ord(d): chr(0xFF10 + int(d)) for d in "0123456789"})  # full-width
    if other_digits != name:
        found = claim(other_digits)
        assert found is None or found.number != CLAIMED_AS[layout, name][1], other_digits


CLAIMED_AS = {(layout, name): claimed for layout, name, claimed in CLAIMED}
