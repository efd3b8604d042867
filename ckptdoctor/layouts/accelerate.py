"""Hugging Face accelerate ``save_state``: ``<project_dir>/checkpoints/checkpoint_<n>/``.

With ``automatic_checkpoint_naming`` every save gets the next number (a save count, not a step);
``load_state()`` without a path takes the highest-numbered folder. A folder holds the models
(``model.safetensors``, ``model_1.safetensors``, ``pytorch_model.bin``, …), ``optimizer*.bin``,
``scheduler*.bin`` and one ``random_states_<rank>.pkl`` per process (a torch archive despite its
name); the run's other saves say how many of each to expect.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ckptdoctor.layouts._base import Claim, FolderLayout, missing_from_siblings
from ckptdoctor.model import Checkpoint, CheckpointFile, Role, Run, Unit
from ckptdoctor.readers.sniff import Format

_CHECKPOINT = re.compile(r"^checkpoint_(\d+)$")
_ROLES: tuple[tuple[re.Pattern[str], tuple[Role, ...]], ...] = (
    (re.compile(r"^(?:model|pytorch_model)(?:_\d+)?\.(?:safetensors|bin)$"), (Role.MODEL,)),
    (re.compile(r"^optimizer(?:_\d+)?\.bin$"), (Role.OPTIMIZER,)),
    (re.compile(r"^scheduler(?:_\d+)?\.bin$"), (Role.SCHEDULER,)),
    (re.compile(r"^random_states_\d+\.pkl$"), (Role.RNG_STATE,)),
    (re.compile(r"^scaler\.pt$"), (Role.SCALER,)),
)


class AccelerateLayout(FolderLayout):
    name = "accelerate"
    default_unit = Unit.SAVE
    reads_every_name = True
    content = frozenset({Format.SAFETENSORS, Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE})
    resume_needs = frozenset({Role.MODEL, Role.OPTIMIZER})

    def claim(self, name: str) -> Claim | None:
        match = _CHECKPOINT.match(name)
        return Claim((), int(match[1]), "checkpoint", Unit.SAVE) if match else None

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        return next((roles for pattern, roles in _ROLES if pattern.match(name)), None)

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        seen = {role for files in saved for file in files for role in file.roles}
        wanted = (Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER, Role.RNG_STATE)
        return tuple(role for role in wanted if role in seen or role in self.resume_needs)

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        return missing_from_siblings(files, siblings)

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        # load_state() without an input_dir: the highest checkpoint_N, whatever is inside
        return run.checkpoints[-1] if run.checkpoints else None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        return f'pass it to `accelerator.load_state("{checkpoint.path}")`'
