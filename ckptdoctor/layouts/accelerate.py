"""Hugging Face accelerate ``save_state``: a folder of models, optimizers, schedulers and RNG states.

With ``automatic_checkpoint_naming`` every save goes to ``<project_dir>/checkpoints/checkpoint_<n>/``,
``n`` the next number (a save count, not a step); ``load_state()`` without a path takes the
highest-numbered folder. Otherwise the script names the folder (``save_state("out/step_500")``, the
pattern of HF's ``*_no_trainer`` examples; diffusers' ``checkpoint-<step>``): such folders are
known by what they hold, and their number and unit come from the name (``epoch_3``). A folder
holds the models (``model.safetensors``, ``model_1.safetensors``, ``pytorch_model.bin``, …),
``optimizer*.bin``, ``scheduler*.bin``, one ``random_states_<rank>.pkl`` per process (a torch
archive despite its name), and where used ``scaler.pt``, dataloader states and
``custom_checkpoint_<i>.pkl`` (``load_state`` refuses a folder whose count of those differs from
the objects registered); the run's other saves say how many of each to expect. Under FSDP with
``SHARDED_STATE_DICT`` the model and each optimizer are DCP folders instead, as the Trainer's
(``pytorch_model_fsdp_0/``, ``optimizer_0/``: ``.metadata`` and one ``__<rank>_0.distcp`` per
process; ``utils/fsdp_utils.py``: ``save_fsdp_model``, ``save_fsdp_optimizer``). Names and write
order: ``accelerate/checkpointing.py`` (``save_accelerator_state``, ``save_custom_state``),
``accelerate/utils/constants.py``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ckptdoctor.layouts._base import Claim, FolderLayout, missing_from_siblings
from ckptdoctor.layouts.hf_trainer import fsdp_absent, fsdp_folder, fsdp_measured, fsdp_roles, written_by_trainer
from ckptdoctor.model import Checkpoint, CheckpointFile, Role, Run, Unit
from ckptdoctor.readers.sniff import Format

_CHECKPOINT = re.compile(r"^checkpoint_([0-9]+)\Z")
_ROLES: tuple[tuple[re.Pattern[str], tuple[Role, ...]], ...] = (
    (re.compile(r"^(?:model|pytorch_model|pytorch_model_fsdp)(?:_[0-9]+)?\.(?:safetensors|bin)\Z"), (Role.MODEL,)),
    (re.compile(r"^optimizer(?:_[0-9]+)?\.bin\Z"), (Role.OPTIMIZER,)),
    (re.compile(r"^scheduler(?:_[0-9]+)?\.bin\Z"), (Role.SCHEDULER,)),
    (re.compile(r"^random_states_[0-9]+\.pkl\Z"), (Role.RNG_STATE,)),
    (re.compile(r"^scaler\.pt\Z"), (Role.SCALER,)),
    # the training loop's own state: samplers, stateful dataloaders, objects registered for checkpointing
    (re.compile(r"^(?:(?:sampler|dl_state_dict)(?:_[0-9]+)?\.bin|custom_checkpoint_[0-9]+\.pkl)\Z"), (Role.TRAINER_STATE,)),
)
_SIGNATURE = re.compile(r"^(?:random_states_[0-9]+\.pkl|custom_checkpoint_[0-9]+\.pkl|(?:scheduler|sampler|dl_state_dict)\.bin)\Z")
"""Names only accelerate writes. Not ``optimizer.bin`` (HF Trainer writes it under FSDP), nor the
numbered ``scheduler_1.bin`` of a second scheduler (a hand-made loop's ``scheduler_3.bin`` is its
epoch 3); a save cut short before any of these joins its run by its name (``step_#`` like its siblings)."""


class AccelerateLayout(FolderLayout):
    name = "accelerate"
    builds_on = ("torch",)
    default_unit = Unit.SAVE
    reads_every_name = True
    content = frozenset({Format.SAFETENSORS, Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE, Format.DISTCP})
    resume_needs = frozenset({Role.MODEL, Role.OPTIMIZER})

    def claim(self, name: str) -> Claim | None:
        match = _CHECKPOINT.match(name)
        return Claim((), int(match[1]), "checkpoint", Unit.SAVE) if match else None

    def signature(self, names: frozenset[str]) -> bool:
        return any(map(_SIGNATURE.match, names)) and not written_by_trainer(names)

    def nested(self, name: str) -> bool:
        return fsdp_folder(name)

    def role_in(self, relative: str) -> tuple[Role, ...] | None:
        return self.role_of(relative) if "/" not in relative else fsdp_roles(relative)

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        return next((roles for pattern, roles in _ROLES if pattern.match(name)), None)

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        seen = {role for files in saved for file in files for role in file.roles}
        wanted = (Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER, Role.RNG_STATE)
        return tuple(role for role in wanted if role in seen or role in self.resume_needs)

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        return tuple(sorted({*missing_from_siblings(files, siblings), *fsdp_absent(files, siblings)}))

    def measured(self, files: list[CheckpointFile]) -> list[CheckpointFile]:
        return fsdp_measured(files)

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        # load_state() without an input_dir: the highest checkpoint_N, whatever is inside; the
        # scripts that name their own folders resume from their newest one the same way
        # (diffusers' `--resume_from_checkpoint latest`, the `*_no_trainer` examples); a folder
        # named on its own has no latest to pick
        return run.checkpoints[-1] if run.checkpoints and run.checkpoints[-1].folder is not None else None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        steps = []
        newer = [c.folder.name for c in run.checkpoints if c.index > checkpoint.index and c.folder is not None]
        if newer:
            # a bare load_state() takes the highest number, and the next automatic save_state()
            # would find the broken folder where it wants to write
            steps.append(f"quarantine {', '.join(newer)} with `ckptdoctor repair --no-recurse {run.path}`")
        steps.append(f'call `accelerator.load_state("{checkpoint.path or run.path}")`')
        if checkpoint.folder is not None and _CHECKPOINT.match(checkpoint.folder.name):
            steps.append(
                f"right after it set `accelerator.project_configuration.iteration = {checkpoint.index + 1}` "
                "(accelerate does not restore its save count: the next `save_state()` would write "
                "checkpoint_0, which a bare `load_state()` never picks and `total_limit` deletes first)"
            )
        return " and ".join((", ".join(steps[:-1]), steps[-1])) if len(steps) > 1 else steps[0]
