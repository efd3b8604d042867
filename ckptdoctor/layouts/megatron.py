"""Megatron-LM: ``<save>/iter_<7 digits>/`` with ``latest_checkpointed_iteration.txt``.

The legacy ``torch`` format keeps ``model_optim_rng.pt`` (and ``distrib_optim.pt``) in one
folder per model-parallel rank (``mp_rank_00``, ``mp_rank_00_001``); the ``torch_dist`` format
keeps ``metadata.json``, ``common.pt`` and DCP files in the iteration folder. The tracker is
written after the data, so an ``iter_*`` folder newer than the tracker never finished saving
and Megatron will not resume from it.
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

_ITERATION = re.compile(r"^iter_([0-9]{7,})\Z")
_RANK = re.compile(r"^mp_rank_[0-9]{2}(?:_[0-9]{3}){0,2}\Z")
TRACKER = "latest_checkpointed_iteration.txt"
_FILES = {
    "model_optim_rng.pt": (Role.MODEL, Role.OPTIMIZER),
    "distrib_optim.pt": (Role.OPTIMIZER,),
    "common.pt": (Role.MODEL,),
    "metadata.json": (Role.METADATA,),
    ".metadata": (Role.METADATA,),
}


class MegatronLayout(FolderLayout):
    name = "megatron"
    builds_on = ("torch",)
    default_unit = Unit.ITERATION
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE, Format.JSON, Format.DISTCP, Format.TEXT})
    resume_needs = frozenset({Role.MODEL})
    named_files = MappingProxyType({TRACKER: Named(pointer.read)})

    def claim(self, name: str) -> Claim | None:
        match = _ITERATION.match(name)
        return Claim((), int(match[1]), "iter", Unit.ITERATION) if match else None

    def nested(self, name: str) -> bool:
        return bool(_RANK.match(name))

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        if name.endswith(".distcp"):
            return (Role.MODEL,)
        return _FILES.get(name)

    def pointer(self, name: str) -> Claim | None:
        return Claim((Role.POINTER,), 0, TRACKER) if name == TRACKER else None

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        return (Role.MODEL,)

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        """Rank folders (and their files) that the other iterations have."""
        return missing_from_siblings(files, siblings)

    def committed(self, pointers: Sequence[CheckpointFile], saved: Sequence[tuple[int, Sequence[CheckpointFile]]]) -> int | None:
        tracker = next((p for p in pointers if p.entry.name == TRACKER), None)
        text = tracker.report.fact(pointer.POINTS_TO) if tracker else None
        return int(text) if text is not None and text.isdigit() else None

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        tracker = next((f for f in run.loose_files if f.entry.name == TRACKER), None)
        if tracker is None:
            return (Pointer(None, "", None, TRACKER),) if run.checkpoints else ()
        text = tracker.report.fact(pointer.POINTS_TO)
        if text is None or text == "release":
            return ()
        return (Pointer(tracker, text, int(text) if text.isdigit() else None, "latest checkpointed iteration"),)

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        return followed(run, self.pointers(run))

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        return PointerWrite(TRACKER, str(checkpoint.index)) if source is None or source.entry.name == TRACKER else None

    def file_name(self, role: Role, index: int) -> str | None:
        return TRACKER if role is Role.POINTER else None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        return f"write {checkpoint.index} into {run.path}/{TRACKER}, or pass `--ckpt-step {checkpoint.index}`"
