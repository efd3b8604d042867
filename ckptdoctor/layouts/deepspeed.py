"""DeepSpeed engine checkpoints: ``<save_dir>/global_step<N>/`` tag folders and a ``latest`` file.

Each tag folder holds model states per model-parallel rank (``mp_rank_00_model_states.pt``)
and, under ZeRO, one optimizer partition per data-parallel rank
(``zero_pp_rank_<dp>_mp_rank_<mp>_optim_states.pt``). Rank 0 writes ``latest`` (the tag, no
newline) after every rank finished; ``load_checkpoint()`` follows it, and without it only warns
and loads nothing.

A universal checkpoint (``deepspeed/checkpoint/ds_to_universal.py``, ``main``) is a tag folder
``global_step<N>_universal/`` converted from ``global_step<N>/``: ``zero/<param>/fp32.pt``,
``exp_avg.pt``, ``exp_avg_sq.pt`` (and ``step.pt``) per parameter (``_merge_zero_shards``),
``zero/optimizer_state.pt`` (``_save_optimizer_state``), and last the copied
``mp_rank_XX_model_states.pt``. Its fragments go through ``tmp/`` first, removed before the copy
(kept with ``--keep_temp_folder``): a ``tmp/`` without the model states is a conversion cut
short. The converter writes no pointer; ``load_checkpoint`` with ``"checkpoint":
{"load_universal": true}`` reads ``latest_universal`` instead of ``latest``
(``engine.py``: ``latest_tag = "latest_universal" if self.load_universal_checkpoint() else
"latest"``) and fails without it.

Objects: every ZeRO save pickles DeepSpeed's own objects into its optimizer partitions
(``state_dict`` of ``stage_1_and_2.py`` and ``stage3.py``): the loss scaler
(``LossScaler``, or ``DynamicLossScaler`` under fp16), the stage as a ``ZeroStageEnum`` member,
and, under ZeRO-1/2 and bf16, ``param_slice_mappings`` of ``fragment_address`` dataclasses.
``load_checkpoint`` reads every file through ``TorchCheckpointEngine.load``:
``torch.load(path, map_location=..., weights_only=False)``, so it restores them all, and would run
whatever else a file held.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.absent import folder_name, missing_from_siblings
from ckptdoctor.layouts.base import FolderLayout
from ckptdoctor.layouts.content import OwnObjects
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.layouts.pointers import Pointer, elsewhere, followed
from ckptdoctor.model import Checkpoint, CheckpointFile, Entry, FileReport, PointerWrite, Role, Run, Unit
from ckptdoctor.places import parent
from ckptdoctor.readers import pointer
from ckptdoctor.readers.named import Named
from ckptdoctor.readers.sniff import Format

_TAG = re.compile(r"^global_step([0-9]+)\Z")
_UNIVERSAL_TAG = re.compile(r"^global_step([0-9]+)_universal\Z")
_MODEL = re.compile(r"_model_states\.pt\Z")
_OPTIMIZER = re.compile(r"optim_states\.pt\Z")
LATEST = "latest"
UNIVERSAL = "latest_universal"
"""The tag of the newest universal checkpoint (``ds_to_universal.py``), beside ``latest``."""
_ZERO = "zero"
_TMP = "tmp"
_COMMON = f"{_ZERO}/optimizer_state.pt"
_FRAGMENT = FileReport(Format.TORCH_ZIP.value)
"""A fragment in a universal conversion's ``tmp/``: counted, never read (the conversion's own)."""

OWN_OBJECTS = OwnObjects(
    loader="DeepSpeed's own `engine.load_checkpoint` loads it with `torch.load(weights_only=False)` (`TorchCheckpointEngine.load`)",
    unrestricted=True,
    # plain objects: neither defines __new__ nor __setstate__ (deepspeed/runtime/fp16/loss_scaler.py,
    # deepspeed/utils/tensor_fragment.py), so rebuilding one only sets its fields
    classes=frozenset({
        "deepspeed.runtime.fp16.loss_scaler.LossScaler",
        "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
        "deepspeed.utils.tensor_fragment.fragment_address",
    }),
    enums=frozenset({"deepspeed.runtime.zero.config.ZeroStageEnum"}),
)  # fmt: skip
"""What DeepSpeed 0.19's ZeRO saves pickle (``stage_1_and_2.py``, ``stage3.py``, ``bf16_optimizer.py``,
``state_dict``) and how ``load_checkpoint`` reads it back. Lightning's ``DeepSpeedStrategy``
folders hold the same files, loaded by the same engine (``layouts/lightning.py``)."""


ZERO3_WEIGHTS = (
    "the weights are inside `global_stepN/`; rebuild full weights with the `zero_to_fp32.py` script DeepSpeed copied into "
    "the checkpoint folder, and set `stage3_gather_16bit_weights_on_model_save: true` for future saves."
)
"""Where ZeRO-3 left the weights and how to rebuild them: a fix of DeepSpeed runs and of HF Trainer's runs on it."""

_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD101/save-optimizer-beside": "Call `engine.save_checkpoint(dir, tag)` on every rank, not on rank 0 alone: each rank writes its own optimizer partition into the tag folder, and the resume needs them all.",
        "CKD102/zero3-weights": "Under ZeRO-3, " + ZERO3_WEIGHTS,
        "CKD105/new-tag": "Do not reuse a tag folder (`global_stepN`) across runs with a different number of GPUs; resume with the data-parallel size the checkpoint was saved with, or convert it with DeepSpeed's universal checkpoint tool `ds_to_universal`.",
        "CKD113/point-newest": "By hand: write the tag without a newline (`printf global_step{resume} > {run}/latest`) or pass it explicitly (`load_checkpoint(dir, tag=...)`, `zero_to_fp32.py --tag`).",
        "CKD114/name-last": "Pass `tag=` the folder the last line names to `load_checkpoint`: without it DeepSpeed follows `latest`, which names an incomplete one.",
        "CKD116/name-newest": "Or pass `tag=` the folder the last line names to `load_checkpoint`: without it DeepSpeed follows `latest`.",
        "CKD402/save-plain": "Nothing to change in your code: DeepSpeed's `save_checkpoint` writes these objects into every ZeRO partition itself, and `engine.load_checkpoint({run}, tag=...)` restores them; to read a partition outside DeepSpeed, keep `weights_only=True` inside `torch.serialization.safe_globals([LossScaler, ZeroStageEnum, fragment_address])` (the classes the finding names).",
        "CKD402/upgrade": "",
    }
)
"""DeepSpeed's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class DeepSpeedLayout(FolderLayout):
    name = "deepspeed"
    packages = ("deepspeed",)
    fix_wordings = _FIX_WORDINGS
    vocabulary = (
        "DeepSpeed",
        "ZeRO",
        "zero_to_fp32",
        "global_step",
        "ds_to_universal",
        "load_checkpoint",
        "stage3_gather",
        "`latest`",
        "/latest`",
    )
    builds_on = ("torch",)
    default_unit = Unit.STEP
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE, Format.TEXT})
    resume_needs = frozenset({Role.MODEL, Role.OPTIMIZER})
    named_files = MappingProxyType({LATEST: Named(pointer.read), UNIVERSAL: Named(pointer.read)})
    own_objects = OWN_OBJECTS

    def flat_optimizer(self, checkpoint: Checkpoint) -> bool:
        """ZeRO partitions flatten the optimizer's state across parameters."""
        return True

    def claim(self, name: str) -> Claim | None:
        if match := _TAG.match(name):
            return Claim((), int(match[1]), "global_step", Unit.STEP)
        match = _UNIVERSAL_TAG.match(name)
        return Claim((), int(match[1]), "global_step_universal", Unit.STEP) if match else None

    def claim_folders(self, folders: Sequence[tuple[Entry, Listing | None]]) -> dict[str, Claim]:
        """Tags by name; a universal tag converted from a tag still beside it holds the same step
        (a run holds one checkpoint a step): the tag it came from is the run's, and the
        converted one is looked at as a run of its own."""
        named = super().claim_folders(folders)
        plain = {claim.number for claim in named.values() if claim.prefix == "global_step"}
        return {name: claim for name, claim in named.items() if claim.prefix == "global_step" or claim.number not in plain}

    def signature(self, names: frozenset[str]) -> bool:
        """A tag folder looked at on its own (a universal one beside the tag it came from): the
        engine's model states, with no other framework's checkpoint files."""
        return any(map(_MODEL.search, names)) and all(
            _MODEL.search(n) or _OPTIMIZER.search(n) or n in (LATEST, "zero_to_fp32.py") for n in names if n.endswith(".pt")
        )

    def nested(self, name: str) -> bool:
        # a universal tag's zero/<param>/ folders, and a cut conversion's tmp/<param>/<tp>/
        return name in (_ZERO, _TMP) or (name.startswith(f"{_ZERO}/") and name.count("/") == 1) or name.startswith(f"{_TMP}/")

    def role_in(self, relative: str) -> tuple[Role, ...] | None:
        if relative.startswith(f"{_TMP}/"):
            return (Role.TEMP,)
        if relative.startswith(f"{_ZERO}/"):
            # fp32 master weights and the optimizer's moments per parameter, and its common state
            return (Role.OPTIMIZER,) if relative.endswith(".pt") else None
        return self.role_of(relative)

    def unread(self, relative: str) -> FileReport | None:
        return _FRAGMENT if relative.startswith(f"{_TMP}/") else None

    def measured(self, files: list[CheckpointFile]) -> list[CheckpointFile]:
        """A universal tag's ``tmp/`` beside its copied model states is one kept on purpose
        (``--keep_temp_folder``): the conversion finished, and nothing loads from it."""
        if any(Role.MODEL in f.roles for f in files):
            return [f for f in files if Role.TEMP not in f.roles]
        return files

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
        """Rank files the run's other tags of the same kind have; in a universal tag, also its
        common optimizer state and each parameter's state files the other parameters have."""
        universal = _converted(files)
        # a cut conversion's tmp/ fragments are no file the others lack
        kind = [[f for f in other if Role.TEMP not in f.roles] for other in siblings if _converted(other) == universal]
        missing = missing_from_siblings(files, kind)
        if not universal:
            return missing
        states: dict[str, set[str]] = {}
        for file in files:
            parts = file.prefix.split("/")
            if len(parts) == 3 and parts[0] == _ZERO:
                states.setdefault(parts[1], set()).add(parts[2])
        every = set().union(*states.values()) if states else set()
        cut = [f"{_ZERO}/{param}/{name}" for param, held in states.items() for name in sorted(every - held)]
        common = [] if any(f.prefix == _COMMON for f in files) else [_COMMON]
        return tuple(sorted({*missing, *cut, *common}))

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        """``latest`` for the run's tags, ``latest_universal`` for its universal ones (each
        expected where the run has tags of its kind; a tag of the other kind is not one it can
        name)."""
        found = []
        for name, tags in ((LATEST, _TAG), (UNIVERSAL, _UNIVERSAL_TAG)):
            file = next((f for f in run.loose_files if f.entry.name == name), None)
            if file is None:
                if any(c.folder is not None and tags.match(c.folder.name) for c in run.checkpoints):
                    found.append(Pointer(None, "", None, name))
                continue
            tag = file.report.fact(pointer.POINTS_TO)
            if tag is None:
                continue  # unreadable or malformed: its own finding says so
            match = tags.match(tag)
            found.append(
                Pointer(file, tag, int(match[1]) if match else None, name, outside=None if match else elsewhere(file, tag, beside=False))
            )
        return tuple(found)

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        # `latest` unless the config sets load_universal (ckptdoctor cannot see it): the first pointer
        return followed(run, self.pointers(run))

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        # the tag is the folder's name; `latest_universal` names universal checkpoints only
        if checkpoint.folder is None:
            return None
        name = UNIVERSAL if _UNIVERSAL_TAG.match(checkpoint.folder.name) else LATEST
        if source is not None and source.entry.name != name:
            return None
        return PointerWrite(name, checkpoint.folder.name)

    def file_name(self, role: Role, index: int) -> str | None:
        return {Role.MODEL: "mp_rank_00_model_states.pt", Role.OPTIMIZER: "zero_pp_rank_0_mp_rank_00_optim_states.pt"}.get(role)

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        # a tag folder looked at on its own is the run: it is loaded from the folder above it
        load_dir, tag = (
            (run.path, checkpoint.folder.name) if checkpoint.folder else (parent(run.path), os.path.basename(os.path.normpath(run.path)))
        )
        if _UNIVERSAL_TAG.match(tag):
            return (
                f'set `"checkpoint": {{"load_universal": true}}` in the DeepSpeed config and pass '
                f'`tag="{tag}"` to `engine.load_checkpoint("{load_dir}", tag=...)` (or write the tag into {UNIVERSAL})'
            )
        return f'pass `tag="{tag}"` to `engine.load_checkpoint("{load_dir}", tag=...)`'


def _converted(files: Sequence[CheckpointFile]) -> bool:
    """Whether ``files`` are a universal tag's."""
    return bool(_UNIVERSAL_TAG.match(folder_name(files)))
