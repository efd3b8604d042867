"""DeepSpeed engine checkpoints: ``<save_dir>/global_step<N>/`` tag folders and a ``latest`` file.

Each tag folder holds model states per model-parallel rank (``mp_rank_00_model_states.pt``)
and, under ZeRO, one optimizer partition per data-parallel rank
(``zero_pp_rank_<dp>_mp_rank_<mp>_optim_states.pt``). Rank 0 writes ``latest`` (the tag, no
newline) after every rank finished; ``load_checkpoint()`` follows it, and without it only warns
and loads nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import MappingProxyType

from ckptdoctor.layouts._base import Claim, FolderLayout, Pointer, followed, missing_from_siblings
from ckptdoctor.model import Checkpoint, CheckpointFile, PointerWrite, Role, Run, Unit
from ckptdoctor.readers import pointer
from ckptdoctor.readers.named import Named
from ckptdoctor.readers.sniff import Format

_TAG = re.compile(r"^global_step([0-9]+)\Z")
_MODEL = re.compile(r"_model_states\.pt\Z")
_OPTIMIZER = re.compile(r"optim_states\.pt\Z")
LATEST = "latest"
UNIVERSAL = "latest_universal"
"""The tag of the newest universal checkpoint (``ds_to_universal.py``), beside ``latest``."""


class DeepSpeedLayout(FolderLayout):
    name = "deepspeed"
    builds_on = ("torch",)
    default_unit = Unit.STEP
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE, Format.TEXT})
    resume_needs = frozenset({Role.MODEL, Role.OPTIMIZER})
    flat_optimizer_state = True
    named_files = MappingProxyType({LATEST: Named(pointer.read), UNIVERSAL: Named(pointer.read)})

    def claim(self, name: str) -> Claim | None:
        match = _TAG.match(name)
        return Claim((), int(match[1]), "global_step", Unit.STEP) if match else None

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        if _OPTIMIZER.search(name):
            return (Role.OPTIMIZER,)
        if _MODEL.search(name):
            return (Role.MODEL,)
        return None

    def pointer(self, name: str) -> Claim | None:
        return Claim((Role.POINTER,), 0, name) if name in self.named_files else None

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        # without ZeRO the optimizer lives inside the model states: only a run that ever wrote
        # optimizer partitions needs them
        seen = {role for files in saved for file in files for role in file.roles}
        return tuple(role for role in (Role.MODEL, Role.OPTIMIZER) if role in seen) or (Role.MODEL,)

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        return missing_from_siblings(files, siblings)

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        if not run.checkpoints:
            return ()
        latest = next((f for f in run.loose_files if f.entry.name == LATEST), None)
        if latest is None:
            return (Pointer(None, "", None, LATEST),)
        tag = latest.report.fact(pointer.POINTS_TO)
        if tag is None:
            return ()  # unreadable or malformed: its own finding says so
        match = _TAG.match(tag)
        return (Pointer(latest, tag, int(match[1]) if match else None, LATEST),)

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        return followed(run, self.pointers(run))

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        # the tag is the folder's name; `latest_universal` names universal checkpoints only
        if (source is not None and source.entry.name != LATEST) or checkpoint.folder is None:
            return None
        return PointerWrite(LATEST, checkpoint.folder.name)

    def file_name(self, role: Role, index: int) -> str | None:
        return {Role.MODEL: "mp_rank_00_model_states.pt", Role.OPTIMIZER: "zero_pp_rank_0_mp_rank_00_optim_states.pt"}.get(role)

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        return f'pass `tag="global_step{checkpoint.index}"` to `engine.load_checkpoint("{run.path}", tag=...)`'
