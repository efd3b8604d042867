"""torchtune's checkpointers: ``output_dir/epoch_{N}/`` weights, with the recipe state beside them.

From pytorch/torchtune at v0.6.1 (the release on PyPI) and bd2a0fc7c (main, 0.7.0 dev),
``torchtune/training/checkpointing/_checkpointer.py`` (``save_checkpoint`` of
``FullModelTorchTuneCheckpointer``, ``FullModelHFCheckpointer``, ``FullModelMetaCheckpointer``)
and ``_utils.py``:

- Each save writes ``epoch_{epoch}/`` (main also ``step_{step}/``, ``dir_prefix="step"``), 0-based:
  the recipes call ``save_checkpoint(epoch=curr_epoch)`` after ``epochs_run += 1``
  (``recipes/full_finetune_single_device.py``). On main, ``save_every_n_steps`` saves
  ``step_{global_step}/`` every N optimizer steps, then once more when training ends
  (``save_checkpoint(epoch=total_epochs - 1, step=global_step)``). Inside: ``model-{i:05d}-of-{n:05d}.bin`` or
  ``.safetensors`` (``SHARD_FNAME``; one shard is still ``model-00001-of-00001``), the HF index
  (``model.safetensors.index.json``, ``pytorch_model.bin.index.json``), ``adapter_model.pt`` /
  ``.safetensors`` and ``adapter_config.json`` for LoRA, and the non-weight files of the base
  model copied (``copy_files``: ``config.json``, tokenizer files). Nothing is written atomically.
- The recipe state (``optimizer``, ``seed``, ``epochs_run``, ``total_epochs``,
  ``max_steps_per_epoch``, ...: ``OPT_KEY``, ``EPOCHS_KEY``, ``TOTAL_EPOCHS_KEY``) is written last,
  and only for an intermediate save (``intermediate_checkpoint=(epoch + 1 < total_epochs)``; on main
  ``_checkpoint_client.save_checkpoint``: ``steps_run < total_training_steps``): the final save is
  weights alone, training finished, and the recipe state before it names it (``total_epochs``,
  ``total_training_steps``). In 0.6.1 it is ONE file, overwritten
  at each save: ``output_dir/recipe_state/recipe_state.pt`` (``RECIPE_STATE_DIRNAME``); on main
  each intermediate folder holds its own ``recipe_state.pt``.
- Resume (``get_recipe_checkpoint_path``, ``get_model_checkpoint_path``): with
  ``resume_from_checkpoint=True`` (``should_load_recipe_state`` on main) torchtune loads the recipe
  state and the weights named by ``checkpointer.checkpoint_files``, relative to ``output_dir``; it
  goes on at epoch ``epochs_run``. So the recipe state is a commit: it pairs with the epoch
  ``epochs_run - 1``. A save newer than that, other than the final epoch, never finished; older
  epochs are whole weights, which a new fine-tune can start from, but their recipe state is gone
  (0.6.1). A LoRA resume loads ``adapter_model.pt`` from the highest ``epoch_N`` by itself
  (``get_adapter_checkpoint_path``, ``get_largest_iter_folder``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.absent import unlisted_shards
from ckptdoctor.layouts.base import FolderLayout
from ckptdoctor.layouts.naming import Claim, file_names
from ckptdoctor.layouts.pointers import Pointer
from ckptdoctor.model import TOP_LEVEL_NUMBER, Checkpoint, CheckpointFile, Entry, Role, Run, Unit
from ckptdoctor.readers.files import with_keys
from ckptdoctor.readers.sniff import Format

_FOLDER = re.compile(r"^(epoch|step)_([0-9]+)\Z")
_SHARD = re.compile(r"^model-[0-9]{5}-of-[0-9]{5}\.(?:bin|safetensors|pth)\Z")
_ONE_SHARD = re.compile(r"^model-00001-of-00001\.(?:bin|safetensors|pth)\Z")
"""One shard named as shards: only torchtune does that (``save_pretrained`` writes ``model.safetensors``)."""
_HUB_NAMED = re.compile(r"^(?:model(?:-[0-9]{5}-of-[0-9]{5})?\.safetensors|pytorch_model(?:-[0-9]{5}-of-[0-9]{5})?\.bin)\Z")
"""Main's ``FullModelHFCheckpointer`` saves with huggingface_hub's ``save_torch_state_dict``
(``model{suffix}.safetensors``, ``pytorch_model{suffix}.bin``: one file has no suffix) and, with its
own ``recipe_state.pt`` beside them, resumes from the folder (``checkpoint_files`` relative to it)."""
STATE_FOLDER = "recipe_state"
RECIPE_STATE = "recipe_state.pt"
_ADAPTER = "adapter_model.pt"
_FILES = {
    "model.safetensors.index.json": (Role.SHARD_INDEX,),
    "pytorch_model.bin.index.json": (Role.SHARD_INDEX,),
    _ADAPTER: (Role.MODEL,),
    "adapter_model.safetensors": (Role.MODEL,),
    "adapter_model.bin": (Role.MODEL,),
    "adapter_config.json": (Role.CONFIG,),
    RECIPE_STATE: (Role.OPTIMIZER,),
}


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD110/weights-survive": "If only the weights survive, or they are not the save the recipe state was written with (torchtune 0.6.1 keeps one recipe state, and resumes only that epoch), start a new fine-tune from the newest whole epoch's weights: point `checkpointer.checkpoint_dir` at its `epoch_N` folder, with resuming off; AdamW and the schedule start over.",
    }
)
"""torchtune's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class TorchtuneLayout(FolderLayout):
    name = "torchtune"
    packages = ("torchtune",)
    fix_wordings = _FIX_WORDINGS
    vocabulary = ("torchtune", "recipe_state", "tune run", "should_load_recipe_state")
    builds_on = ("torch",)
    default_unit = Unit.EPOCH
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE, Format.SAFETENSORS, Format.JSON})
    resume_needs = frozenset({Role.MODEL})

    def claim(self, name: str) -> Claim | None:
        match = _FOLDER.match(name)
        if match is None:
            return None
        return Claim((), int(match[2]), match[1], Unit.EPOCH if match[1] == "epoch" else Unit.STEP)

    def claim_folders(self, folders: Sequence[tuple[Entry, Listing | None]]) -> dict[str, Claim]:
        """``epoch_N``/``step_N`` folders, where one of them carries torchtune's signature or the
        run keeps its ``recipe_state/``: a loop's own ``epoch_3/`` folders are not torchtune's."""
        named = {entry.name: claim for entry, _ in folders if (claim := self.claim(entry.name))}
        ours = any(entry.name == STATE_FOLDER for entry, _ in folders) or any(
            entry.name in named and self.signature(file_names(inside)) for entry, inside in folders
        )
        return named if ours else {}

    def signature(self, names: frozenset[str]) -> bool:
        return RECIPE_STATE in names or _ADAPTER in names or any(map(_ONE_SHARD.match, names))

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        return (Role.MODEL,) if _weights(name) else _FILES.get(name)

    def beside(self, entry: Entry, subfolder: Callable[[Entry], Listing | None]) -> Sequence[Entry]:
        """0.6.1's ``recipe_state/recipe_state.pt``: the run's one recipe state, read as its commit."""
        inside = subfolder(entry) if entry.is_dir and entry.name == STATE_FOLDER else None
        state = [item for item in inside.entries if item.name == RECIPE_STATE and not item.is_dir] if inside else []
        return state or (entry,)

    def pointer(self, name: str) -> Claim | None:
        return Claim((Role.POINTER,), 0, STATE_FOLDER) if name == RECIPE_STATE else None

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        # every save holds the weights; the recipe state belongs to one of them (``committed``)
        return (Role.MODEL,)

    def committed(self, pointers: Sequence[CheckpointFile], saved: Sequence[tuple[int, Sequence[CheckpointFile]]]) -> int | None:
        """The newest save the recipe state commits: ``epochs_run - 1`` (0.6.1's one file) or the
        newest folder holding a readable one (main); the final save too where that recipe state
        foretells it and it is the next save there is (torchtune writes no recipe state for it)."""
        found = _newest_state(pointers, saved)
        if found is None:
            return None
        index, state = found
        final = _final_save(state, index)
        following = [number for number, _ in saved if number > index]
        return final if final is not None and following and min(following) == final else index

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        """0.6.1's recipe state names the epoch whose weights it resumes with; a run of several
        saves with no recipe state anywhere lost it (torchtune writes one at every save but the last)."""
        state = next((f for f in run.loose_files if f.entry.name == RECIPE_STATE), None)
        if state is None:
            held = any(f.entry.name == RECIPE_STATE for c in run.checkpoints for f in c.files)
            return (Pointer(None, "", None, f"{STATE_FOLDER}/{RECIPE_STATE}"),) if len(run.checkpoints) > 1 and not held else ()
        epochs = _number(state, "epochs_run")
        if epochs is None:
            return ()  # cut or unreadable: its own finding says so
        return (Pointer(state, f"epochs_run={epochs}", epochs - 1, "recipe state"),)

    def resumable(self, run: Run) -> frozenset[int] | None:
        """0.6.1 keeps one recipe state, rewritten at every save: its resume goes on only from the
        save it was written with (``committed``); an older epoch's weights with it skip epochs, and
        without a readable one torchtune raises. A run of one save without it (a one-epoch run's
        final weights) and main, whose folders keep a recipe state each, resume as usual."""
        if any(f.entry.name == RECIPE_STATE for c in run.checkpoints for f in c.files):
            return None
        shared = [f for f in run.loose_files if f.entry.name == RECIPE_STATE]
        if not shared and len(run.checkpoints) < 2:
            return None
        committed = self.committed(shared, [(c.index, c.files) for c in run.checkpoints])
        return frozenset() if committed is None else frozenset({committed})

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        # a LoRA resume loads adapter_model.pt from the highest epoch folder, whatever it holds
        adapters = any(f.entry.name == _ADAPTER for c in run.checkpoints for f in c.files)
        return run.checkpoints[-1] if adapters and run.checkpoints else None

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        return unlisted_shards(files)

    def file_name(self, role: Role, index: int) -> str | None:
        return RECIPE_STATE if role is Role.POINTER else None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        # a save folder named on its own is the run's path; its output_dir is the folder above
        folder = checkpoint.folder.name if checkpoint.folder else os.path.basename(run.path)
        output = run.path if checkpoint.folder else os.path.dirname(run.path)
        own = next((f for f in checkpoint.files if f.entry.name == RECIPE_STATE), None)
        weights = [f.entry.name for f in checkpoint.files if _weights(f.entry.name)]
        from_folder = own is not None and any(_HUB_NAMED.match(name) for name in weights)
        shards = weights if from_folder else [f"{folder}/{name}" for name in weights]
        files = f"checkpointer.checkpoint_files=[{','.join(shards)}]"
        shared = next((f for f in run.loose_files if f.entry.name == RECIPE_STATE), None)
        newest = [f for c in reversed(run.checkpoints) for f in c.files if f.entry.name == RECIPE_STATE]
        state = own or shared or (newest[0] if newest else None)
        epochs = _number(state, "epochs_run") if state is not None else None
        if own is not None or (epochs is not None and epochs - 1 == checkpoint.index and not _damaged(shared)):
            where = f"checkpointer.checkpoint_dir={output}/{folder}" if own is not None else f"output_dir={output}"
            return (
                f"`tune run <recipe> --config <config> resume_from_checkpoint=True {files}` (relative to "
                f"{'the folder' if from_folder else '`output_dir`'}, {where}): torchtune loads {folder}'s weights with {STATE_FOLDER if own is None else folder}/{RECIPE_STATE} "
                f"and goes on at epoch {epochs if epochs is not None else checkpoint.index + 1}{_after_step(own)}"
            )
        fresh = (
            f"start a new fine-tune from its weights: `checkpointer.checkpoint_dir={output}/{folder}` with `resume_from_checkpoint=False`"
        )
        found = _newest_state([f for f in run.loose_files if f.entry.name == RECIPE_STATE], [(c.index, c.files) for c in run.checkpoints])
        if found is not None and checkpoint.index == _final_save(found[1], found[0]):
            return f"training finished: {folder} holds the final weights (torchtune saves no recipe state for the final save), nothing to resume; to train on, {fresh}"
        why = (
            "the run keeps no recipe state"
            if state is None
            else "its recipe state cannot be read"
            if epochs is None
            else f"torchtune's recipe state is not {folder}'s"
        )
        return f"weights only: {why}, so its resume would not continue from here; {fresh}"


def _weights(name: str) -> bool:
    return bool(_SHARD.match(name) or _HUB_NAMED.match(name))


def _after_step(state: CheckpointFile | None) -> str:
    """Where main's step saves go on inside their epoch (the recipe sets ``global_step = steps_run``)."""
    steps = _number(state, "steps_run") if state is not None else None
    return f", after step {steps}" if steps is not None else ""


def _damaged(state: CheckpointFile | None) -> bool:
    return state is not None and bool(state.report.issues)


def _number(file: CheckpointFile, key: str) -> int | None:
    """A top-level integer of a recipe state (``epochs_run``), skimmed where it was not read."""
    if file.report.issues:
        return None
    value = with_keys(file.entry, file.report).fact(f"{TOP_LEVEL_NUMBER}{key}")
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def _newest_state(
    pointers: Sequence[CheckpointFile], saved: Sequence[tuple[int, Sequence[CheckpointFile]]]
) -> tuple[int, CheckpointFile] | None:
    """The newest readable recipe state, with the save it commits (0.6.1's one file: ``epochs_run - 1``)."""
    for state in pointers:
        if state.entry.name == RECIPE_STATE and (epochs := _number(state, "epochs_run")) is not None:
            return epochs - 1, state
    for index, files in sorted(saved, key=lambda pair: -pair[0]):
        for file in files:
            if file.entry.name == RECIPE_STATE and _number(file, "epochs_run") is not None:
                return index, file
    return None


def _final_save(state: CheckpointFile, index: int) -> int | None:
    """The final save that the recipe state of save ``index`` foretells, the one torchtune writes
    no recipe state for: main's ``step_{total_training_steps}`` (``_checkpoint_client.save_checkpoint``
    saves one while ``steps_run < total_training_steps``, into ``step_{steps_run}``), or
    ``epoch_{total_epochs - 1}`` where the state says that epoch is next."""
    steps, total_steps = _number(state, "steps_run"), _number(state, "total_training_steps")
    if steps == index and total_steps is not None:
        return total_steps
    epochs, total = _number(state, "epochs_run"), _number(state, "total_epochs")
    return total - 1 if total is not None and epochs == total - 1 and index == epochs - 1 else None
