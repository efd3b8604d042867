"""The fresh-run matrix (``matrix.py``) for torchtune 0.6.1: its own
``recipes/full_finetune_single_device.py`` (``frameworks.torchtune_recipe``, the file ``tune run``
runs) fine-tuning a tiny Llama for five epochs, stopped after three (a job's time limit), saving
through ``FullModelTorchTuneCheckpointer`` (``epoch_N/model-00001-of-00001.bin``) or
``FullModelHFCheckpointer`` (``.safetensors``) with the recipe state of every epoch but the last
in the run's one ``recipe_state/recipe_state.pt``, overwritten at each save.

The oracle is the recipe's own resume: ``resume_from_checkpoint=True`` with
``checkpointer.checkpoint_files=[epoch_N/<weights>]`` (relative to ``output_dir``, as torchtune's
docs tell), ``setup(cfg)``: the checkpointer's ``load_checkpoint`` (the weights named, and the
recipe state it finds by itself: ``get_recipe_checkpoint_path``), then the model, AdamW, the
dataloader, ``_update_recipe_state`` (``epochs_run``, ``seed``) and the scheduler built at
``global_step``. The recipe never checks that the weights are those its recipe state was saved
with: given ``epoch_1``'s weights and the state saved with ``epoch_2`` it goes on at epoch 3 with
epoch 1's weights and epoch 2's AdamW moments, skipping an epoch; given a newer epoch's, it
trains that epoch again. So a restore is the save's own state only where the recipe goes on at
the epoch after the weights' (``epochs_run == N + 1``); any other it does not restore, in the
healthy run as in a broken one: torchtune 0.6.1 resumes its newest intermediate save and no
other (the older epochs are weights a new fine-tune can start from).

The automatic part of that resume is the recipe state (the weights are the user's to name): the
automatic pick is the epoch that state was saved with, ``epoch_{epochs_run - 1}``; the pick fails
where ``get_recipe_checkpoint_path`` or ``safe_torch_load`` does (no recipe state: "recipe_checkpoint
file must be provided").
"""

from __future__ import annotations

import itertools
import re
import shutil
from pathlib import Path

import pytest
from frameworks import torchtune_base, torchtune_recipe, torchtune_train
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

pytest.importorskip("torchao")
torchtune = pytest.importorskip("torchtune")

STATE = Path("recipe_state") / "recipe_state.pt"


_EPOCH = re.compile(r"^epoch_([0-9]+)\Z")


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(match[1]): path for path in run.iterdir() if (match := _EPOCH.match(path.name))}


_restores = itertools.count()


def restore(run: Path, path: Path) -> str:
    """``resume_from_checkpoint=True checkpointer.checkpoint_files=[<the epoch's weights>]``: what
    the recipe holds once ``setup`` is done, where it goes on at the epoch after those weights'."""
    match = _EPOCH.match(path.name)
    if match is None:
        raise Unrestorable(f"{path} is no epoch folder: checkpoint_files cannot name its weights")
    files = [f"{path.name}/{weights.name}" for weights in sorted(path.glob("model-*-of-*.*"))]
    try:
        recipe = torchtune_recipe(run, run.parent / "base", 5, resume=files, log_to=run.parent / f"restored-{next(_restores)}")
    except Exception as error:
        raise Unrestorable(f"{type(error).__name__}: {error}") from error
    if recipe.epochs_run != int(match[1]) + 1:
        raise Unrestorable(f"the recipe state goes on at epoch {recipe.epochs_run}: it was not saved with {path.name}'s weights")
    return tensors_digest(
        recipe._model.state_dict(),
        recipe._optimizer.state_dict(),
        recipe._lr_scheduler.state_dict(),
        recipe._dataloader.state_dict(),
        recipe.epochs_run,
        recipe.global_step,
        recipe.seed,
    )


def auto_resume(run: Path) -> Path | None:
    """The epoch the recipe state found by ``get_recipe_checkpoint_path`` was saved with, read by
    torchtune's own ``safe_torch_load``."""
    from torchtune.training.checkpointing._utils import get_recipe_checkpoint_path, safe_torch_load

    try:
        state = safe_torch_load(get_recipe_checkpoint_path(run, should_load_recipe_state=True), mmap=False)
        return run / f"epoch_{state['epochs_run'] - 1}"
    except Exception as error:
        raise Unrestorable(f"{type(error).__name__}: {error}") from error


def variant(name: str, hf: bool, kill_points: tuple[KillPoint, ...], inspect_blind: dict[str, str] | None = None) -> Fresh:
    def build(folder: Path) -> Path:
        torchtune_base(folder / "base", hf=hf)
        torchtune_train(torchtune_recipe(folder / "out", folder / "base", 5), 3)
        return folder / "out"

    return Fresh(
        name=name,
        build=build,
        checkpoints=checkpoints,
        restore=restore,
        auto_resume=auto_resume,
        save_more=SAVE_MORE,
        kill_points=kill_points,
        state=lambda checkpoint: checkpoint.parent / STATE,
        shared=lambda checkpoint: [checkpoint.parent / STATE],
        pointer=lambda run: run / STATE,
        stale=lambda run: shutil.rmtree(run / "epoch_2"),  # the newest epoch deleted: the recipe state still names it
        inspect_blind=inspect_blind or {},
    )


# resumed from epoch 2, as ckptdoctor's hint words it, and one more epoch saved
SAVE_MORE = """
from frameworks import torchtune_recipe, torchtune_train
files = [p.relative_to(run).as_posix() for p in (run / "epoch_2").glob("model-*")]
torchtune_train(torchtune_recipe(run, run.parent / "base", 5, resume=files, log_to=run.parent / "relaunched"), 1)
"""

# the relaunch writes its torchtune_config.yaml, then epoch_3's files, then the recipe state
TORCHTUNE = variant("torchtune", False, (KillPoint(2, 0.5), KillPoint(2, 1.0), KillPoint(3, 0.5)))
# model-00001-of-00001.safetensors, model.safetensors.index.json, config.json, recipe_state.pt
HF = variant(
    "torchtune-hf",
    True,
    (KillPoint(2, 0.5), KillPoint(4, 1.0), KillPoint(5, 0.5)),
    inspect_blind={"zero-tail": "the zeroed 4 KiB are tensor data, which inspect does not read (it warns CKD212)"},
)


test_breakage, test_killed_mid_save = matrix_tests(
    torchtune.__version__,
    TORCHTUNE,
    HF,
    expected_failures={
        "torchtune-hf-torn-copy": (
            "verify --deep calls a torn model-00001-of-00001.safetensors (epoch 2's header and head, epoch 1's tail) whole and says "
            "nothing: safetensors keeps no checksum, and the recipe resumes weights mixed from two epochs"
        ),
    },
)
