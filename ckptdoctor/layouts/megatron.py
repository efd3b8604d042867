"""Megatron-LM: ``<save>/iter_<7 digits>/`` with ``latest_checkpointed_iteration.txt``.

The legacy ``torch`` format keeps ``model_optim_rng.pt`` (and ``distrib_optim.pt``) in one
folder per model-parallel rank (``mp_rank_00``, ``mp_rank_00_001``); the ``torch_dist`` format
keeps ``metadata.json``, ``common.pt`` and DCP files in the iteration folder. The tracker is
written after the data, so an ``iter_*`` folder newer than the tracker never finished saving
and Megatron will not resume from it.

A released model (converted from another framework, or saved with ``--save`` of a release) sits
in ``release/`` instead of ``iter_<7 digits>/``, with the same rank folders or dist-ckpt files,
and the tracker says ``release`` (``megatron/training/checkpointing.py``:
``get_checkpoint_name``, ``read_metadata``, and ``save_checkpoint``'s
``f.write('release' if release else str(iteration))``). ``load_checkpoint`` takes its iteration
as 0 and loads neither optimizer nor RNG state from it (``if args.finetune or release``,
``if not release and ... not args.no_load_optim``): a release without them is whole. It counts
here as iteration 0, compared with no ``iter_*`` folder (its parallelism is its own).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.absent import folder_name, missing_from_siblings
from ckptdoctor.layouts.base import FolderLayout
from ckptdoctor.layouts.content import OwnObjects
from ckptdoctor.layouts.naming import Claim, file_names
from ckptdoctor.layouts.pointers import Pointer, followed, unreadable_pointer
from ckptdoctor.model import Checkpoint, CheckpointFile, Entry, PointerWrite, Role, Run, Unit
from ckptdoctor.readers import pointer
from ckptdoctor.readers.named import Named
from ckptdoctor.readers.sniff import Format

_ITERATION = re.compile(r"^iter_([0-9]{7,})\Z")
_RANK = re.compile(r"^mp_rank_[0-9]{2}(?:_[0-9]{3}){0,2}\Z")
TRACKER = "latest_checkpointed_iteration.txt"
RELEASE = "release"
"""The folder of a released model, and what the tracker says to load it."""
_DIST = frozenset({"metadata.json", "common.pt"})
"""What the ``torch_dist`` format writes beside its DCP files."""
_FILES = {
    "model_optim_rng.pt": (Role.MODEL, Role.OPTIMIZER),
    "distrib_optim.pt": (Role.OPTIMIZER,),
    "common.pt": (Role.MODEL,),
    "metadata.json": (Role.METADATA,),
    ".metadata": (Role.METADATA,),
}


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD106/leave-pointer": "Do not edit `latest_checkpointed_iteration.txt` to point at an unfinished `iter_*` folder; resume from the iteration it already names.",
        "CKD113/point-newest": "By hand: `printf {resume_pointer} > {run}/latest_checkpointed_iteration.txt` (the newest complete checkpoint: its iteration, or `release`).",
        "CKD116/name-newest": "Or pass `--ckpt-step` the iteration the last line names: it overrides the tracker.",
        "CKD501/keep-fewer": "Keep fewer checkpoints: with `--save-retain-interval N` only saves N iterations apart, and the last, stay.",
    }
)
"""Megatron-LM's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class MegatronLayout(FolderLayout):
    name = "megatron"
    packages = ("megatron",)
    fix_wordings = _FIX_WORDINGS
    vocabulary = ("Megatron", "latest_checkpointed_iteration", "iter_", "save-retain-interval")
    builds_on = ("torch",)
    default_unit = Unit.ITERATION
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE, Format.JSON, Format.DISTCP, Format.TEXT})
    resume_needs = frozenset({Role.MODEL})
    named_files = MappingProxyType({TRACKER: Named(pointer.read)})
    own_objects = OwnObjects(
        loader="Megatron's own load (`load_checkpoint` in `megatron/training/checkpointing.py`) allows them: megatron.core registers `SAFE_GLOBALS` (`megatron/core/safe_globals.py`) with `torch.serialization.add_safe_globals`",
        allows=frozenset(
            {
                "argparse.Namespace",
                "pathlib.PosixPath",
                "numpy.ndarray",
                "numpy.dtype",
                "numpy.dtypes.UInt32DType",
                "numpy.core.multiarray._reconstruct",
                "numpy._core.multiarray._reconstruct",
            }
        ),
    )
    """The harmless globals among ``SAFE_GLOBALS`` (``megatron/core/safe_globals.py``): the
    legacy ``model_optim_rng.pt`` pickles ``args`` as a Namespace and the numpy RNG state as an
    array; Megatron's own classes there (its enums, ``OptimizerConfig``, the rerun state) are not
    vouched for."""

    def claim(self, name: str) -> Claim | None:
        match = _ITERATION.match(name)
        return Claim((), int(match[1]), "iter", Unit.ITERATION) if match else None

    def claim_folder(self, entry: Entry, inside: Listing | None) -> Claim | None:
        """``iter_<7 digits>/`` by its name; ``release/`` only where it holds Megatron's rank
        folders or dist-ckpt files (a project's own ``release/`` folder is no checkpoint)."""
        if entry.name != RELEASE:
            return self.claim(entry.name)
        if inside is None:
            return None
        ranks = any(item.is_dir and _RANK.match(item.name) for item in inside.entries)
        return Claim((), 0, RELEASE, Unit.ITERATION) if ranks or file_names(inside) >= _DIST else None

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
        """Rank folders (and their files) that the other iterations have: a release is compared
        with none of them, nor they with it (it was saved, or converted, on its own)."""
        release = _released(files)
        return missing_from_siblings(files, [other for other in siblings if _released(other) == release])

    def committed(self, pointers: Sequence[CheckpointFile], saved: Sequence[tuple[int, Sequence[CheckpointFile]]]) -> int | None:
        tracker = next((p for p in pointers if p.entry.name == TRACKER), None)
        text = tracker.report.fact(pointer.POINTS_TO) if tracker else None
        if text == RELEASE:
            return 0  # Megatron loads the release: an iteration saved after it never reached the tracker
        return int(text) if text is not None and text.isdigit() else None

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        tracker = next((f for f in run.loose_files if f.entry.name == TRACKER), None)
        if tracker is None:
            return (Pointer(None, "", None, TRACKER),) if run.checkpoints else ()
        text = tracker.report.fact(pointer.POINTS_TO)
        if text is None:  # empty (killed as iter_finalize_fn rewrote it): read_metadata exits, "Invalid metadata file"
            return (unreadable_pointer(tracker, "latest checkpointed iteration"),)
        if text == RELEASE:
            release = _release_of(run)
            return (Pointer(tracker, text, release.index if release else None, "latest checkpointed iteration"),)
        return (Pointer(tracker, text, int(text) if text.isdigit() else None, "latest checkpointed iteration"),)

    def left_in_place(self, checkpoint: Checkpoint) -> str | None:
        if checkpoint.folder is not None and checkpoint.folder.name == RELEASE:
            return "a released model (release/), not one of the run's saves: --keep-last does not count it"
        return None

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        found = self.pointers(run)
        if found and found[0].target == RELEASE:
            return _release_of(run) if found[0].number is not None else None
        return followed(run, found)

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        if source is not None and source.entry.name != TRACKER:
            return None
        return PointerWrite(TRACKER, RELEASE if _is_release(checkpoint) else str(checkpoint.index))

    def file_name(self, role: Role, index: int) -> str | None:
        return TRACKER if role is Role.POINTER else None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        if _is_release(checkpoint):
            # load_checkpoint: a release starts at iteration 0, without optimizer or RNG state
            return (
                f"write {RELEASE} into {run.path}/{TRACKER} and pass `--load {run.path} --finetune` "
                "(a release loads as iteration 0, with a fresh optimizer)"
            )
        return f"write {checkpoint.index} into {run.path}/{TRACKER}, or pass `--ckpt-step {checkpoint.index}`"


def _is_release(checkpoint: Checkpoint) -> bool:
    return checkpoint.folder is not None and checkpoint.folder.name == RELEASE


def _release_of(run: Run) -> Checkpoint | None:
    return next((c for c in run.checkpoints if _is_release(c)), None)


def _released(files: Sequence[CheckpointFile]) -> bool:
    return folder_name(files) == RELEASE
