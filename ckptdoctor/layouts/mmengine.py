"""OpenMMLab mmengine (MMDetection, MMSegmentation, ...): ``Runner`` with its ``CheckpointHook``.

From open-mmlab/mmengine (``mmengine/hooks/checkpoint_hook.py``, ``mmengine/runner/runner.py``,
``mmengine/runner/checkpoint.py``), checked against real runs of mmengine 0.10.7:

- ``CheckpointHook._save_checkpoint`` saves ``epoch_{N}.pth`` (``by_epoch``) or ``iter_{N}.pth``
  into ``out_dir`` (``work_dir`` by default), N the 1-based count of finished epochs or iterations,
  unpadded (``filename_tmpl``). Each is one bundled ``torch.save`` of ``Runner.save_checkpoint``:
  ``meta``, ``state_dict``, ``message_hub``, ``optimizer``, ``param_schedulers`` (none without a
  scheduler). Nothing is staged: ``LocalBackend.put`` writes the final name in place.
- ``max_keep_ckpts`` deletes the oldest before the new one is saved
  (``_save_checkpoint_with_step``): a kill mid-save leaves a cut newest file and one fewer whole.
- ``save_best`` writes ``best_{metric}_{epoch|iter}_{N}.pth`` (``_save_best_checkpoint``) with
  ``save_optimizer=False``: a copy of weights by design, no resume point, never rotated.
  ``published_keys`` writes ``<name>-<sha256[:8]>.pth`` after training (``_publish_model``).
- After each save, ``work_dir/last_checkpoint`` is rewritten with the checkpoint's **full path**
  (no newline). ``Runner(resume=True)`` reads it (``find_latest_checkpoint``), or resumes
  ``load_from`` where that is given (``Runner.load_or_resume``); without it the run starts over.
  ``Runner.resume`` restores the optimizer and schedulers only ``if`` their keys are there.
- ``CheckpointHook(out_dir=...)`` saves into ``out_dir/<basename(work_dir)>/`` (``before_train``),
  best checkpoints too, while ``last_checkpoint`` stays in ``work_dir`` and names the checkpoint's
  full path there: a folder of checkpoints without it nor log folders is such an ``out_dir``.
- ``Runner`` logs into ``work_dir/<YYYYmmdd_HHMMSS>/``; evaluation rows of
  ``vis_data/scalars.json`` carry the epoch (or, with ``log_metric_by_epoch=False``, the
  iteration) as ``step``, training rows carry ``iter``.
- mmengine 0.10 loads with ``torch.load``'s default: on torch >= 2.6 that refuses the
  ``HistoryBuffer`` of its own ``message_hub`` (``Unsupported global``).

Under ``FlexibleRunner`` (``mmengine/_strategy/``) the same names are *folders*:
``DeepSpeedStrategy.save_checkpoint`` has the engine save each into ``out_dir`` with the name as
its tag (``save_checkpoint(out_dir, tag="epoch_3.pth", client_state=..., save_latest=False)``:
``mp_rank_00_model_states.pt`` holding the client state, one
``zero_pp_rank_<r>_mp_rank_00_optim_states.pt`` per rank under ZeRO, no ``latest``, and the
engine's ``zero_to_fp32.py`` beside the folders), and resumes by ``load_checkpoint(out_dir,
tag=...)``; ``best_*`` (``save_optimizer=False``) is a file. ``FSDPStrategy`` with a sharded
``state_dict_cfg`` (``local``) saves ``<name>/rank<r>.pth`` per rank, each a whole bundle of that
rank's shards, best ones too, and loads ``rank<rank>.pth`` of the folder on each rank.
``last_checkpoint`` names the folder, and ``max_keep_ckpts`` removes folders as files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.absent import missing_from_siblings
from ckptdoctor.layouts.base import FolderLayout
from ckptdoctor.layouts.content import OwnObjects
from ckptdoctor.layouts.deepspeed import OWN_OBJECTS as DEEPSPEED_OBJECTS
from ckptdoctor.layouts.deepspeed import DeepSpeedLayout
from ckptdoctor.layouts.grouping import group
from ckptdoctor.layouts.metrics import logged_values
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.layouts.naming_file import NamedByFile, NamingFile
from ckptdoctor.layouts.pointers import Pointer, followed
from ckptdoctor.model import Checkpoint, CheckpointFile, Entry, FileReport, Role, Run, Unit
from ckptdoctor.readers.sniff import Format

_NUMBERED = re.compile(r"^(epoch|iter)_([0-9]+)\.pth\Z")
_BEST = re.compile(r"^best_.+_(?:epoch|iter)_[0-9]+\.pth\Z")
_PUBLISHED = re.compile(r"^(?:best_.+_)?(?:epoch|iter)_[0-9]+-[0-9a-f]{8}\.pth\Z")
_LOG_FOLDER = re.compile(r"^[0-9]{8}_[0-9]{6}\Z")
"""``Runner``'s ``work_dir/<timestamp>/``, one per launch, with the log and ``vis_data/``."""
LAST = NamingFile("last_checkpoint", full_path=True)
BUNDLED = (Role.MODEL, Role.OPTIMIZER)
"""What ``Runner.save_checkpoint`` writes (``param_schedulers`` only where the run has a
scheduler: the keys confirm it)."""
_RANK = re.compile(r"^rank[0-9]+\.pth\Z")
"""``FSDPStrategy``'s file of one rank in a checkpoint folder."""
_DEEPSPEED = DeepSpeedLayout()
_TORCH_26 = (
    "with torch >= 2.6 set `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1` for the resume: mmengine 0.10 loads with "
    "torch's default `weights_only=True`, which refuses the `HistoryBuffer` of its own `message_hub`"
)
_HISTORY_BUFFER = "mmengine.logging.history_buffer.HistoryBuffer"
OWN_OBJECTS = OwnObjects(
    loader=_TORCH_26,
    unrestricted=True,
    as_written=False,
    # HistoryBuffer defines no __new__; its __setstate__ sets its fields and merges the kept
    # statistics methods (lookups of its own, nothing else) into the class's table; a
    # FlexibleRunner's DeepSpeedStrategy folders hold the engine's own files and objects
    classes=frozenset({_HISTORY_BUFFER}) | DEEPSPEED_OBJECTS.classes,
    enums=DEEPSPEED_OBJECTS.enums,
    methods=frozenset(f"{_HISTORY_BUFFER}.{name}" for name in ("min", "max", "current", "mean")),
)
"""``Runner.save_checkpoint``'s ``message_hub`` holds each logged scalar as a ``HistoryBuffer``,
whose ``__getstate__`` keeps its ``statistics_methods`` (``getattr(HistoryBuffer, "min")``...);
mmengine 0.10 loads the file with ``torch.load``'s default (``runner/checkpoint.py``,
``load_from_local``), which on torch >= 2.6 refuses it unless the resume forces the old default."""


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD402/save-plain": "Nothing to change in your code: mmengine's `Runner.save_checkpoint` writes the `HistoryBuffer`s of its `message_hub` itself; with torch >= 2.6 resume with `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1` set, which mmengine 0.10's `torch.load` needs for its own files.",
    }
)
"""mmengine's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class MmengineLayout(NamedByFile):
    name = "mmengine"
    packages = ("mmengine",)
    fix_wordings = _FIX_WORDINGS
    vocabulary = ("mmengine", "MMDetection", "CheckpointHook", "max_keep_ckpts", "load_from", "message_hub", "HistoryBuffer")
    builds_on = ("torch",)
    default_unit = Unit.EPOCH
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE, Format.TEXT})
    resume_needs = frozenset({Role.MODEL, Role.OPTIMIZER})
    """``Runner.resume`` loads the optimizer only ``if 'optimizer' in checkpoint``: without it the
    run goes on silently with a fresh one."""
    naming_file = LAST
    named_files = LAST.named_files
    own_objects = OWN_OBJECTS

    claimable = re.compile(r"\.pth\Z")
    folder_saves = True

    def claim(self, name: str) -> Claim | None:
        match = _NUMBERED.match(name)
        if match is None:
            return None
        return Claim(BUNDLED, int(match[2]), match[1], Unit.EPOCH if match[1] == "epoch" else Unit.ITERATION)

    def build(
        self,
        listing: Listing,
        probe: Callable[[Entry], FileReport],
        claims: dict[str, Claim],
        subfolder: Callable[[Entry], Listing | None],
    ) -> Run | None:
        folders = {entry.name: claims[entry.name] for entry in listing.folders if entry.name in claims}
        if folders:
            # DeepSpeedStrategy's or FSDPStrategy's checkpoint folders: the run is theirs
            return _FOLDERS.build(listing, probe, folders, subfolder)
        return group(listing, self, probe, claims)

    def recognises(self, entries: tuple[Entry, ...]) -> bool:
        # a hand-made loop may save epoch_3.pth too: a Runner leaves its pointer, its log folders
        # or its best checkpoints beside them
        return any(e.name == LAST.name or _BEST.match(e.name) or (e.is_dir and _LOG_FOLDER.match(e.name)) for e in entries)

    def pointer(self, name: str) -> Claim | None:
        if _BEST.match(name) or _PUBLISHED.match(name):
            return Claim((Role.POINTER,), 0, "best" if name.startswith("best_") else "published")  # copies outside the series
        return super().pointer(name)

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        """``last_checkpoint``, which ``CheckpointHook`` writes into ``work_dir``: a folder without
        it nor the Runner's log folders is an ``out_dir``, whose pointer is in a ``work_dir``
        elsewhere (``find_latest_checkpoint(work_dir)`` reads it): none to judge here."""
        return super().pointers(run) if _work_dir(run) else ()

    def flat_optimizer(self, checkpoint: Checkpoint) -> bool:
        """A strategy's checkpoint folder holds the engine's files: DeepSpeed's ZeRO partitions
        or FSDP's shards, never one state tensor per parameter."""
        return checkpoint.folder is not None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        path = self.resume_path(run, checkpoint)
        runner = "Runner" if checkpoint.folder is None else "FlexibleRunner"  # a strategy's folders: FlexibleRunner saved them
        if followed(run, self.pointers(run)) is checkpoint:
            how = f"pass `resume=True` to `{runner}` (`tools/train.py --resume`): it follows {LAST.name} to {path}"
        else:
            where = (
                ", which does not name it"
                if _work_dir(run)
                else " in the work_dir, which `CheckpointHook(out_dir=...)` keeps apart from these checkpoints"
            )
            how = (
                f'pass `resume=True, load_from="{path}"` to `{runner}` (`tools/train.py --resume {path}`); '
                f"`resume=True` alone follows {LAST.name}{where}"
            )
        return f"{how}; {_TORCH_26}"

    def metric_values(self, run: Run, root: str, metric: str, read: Callable[[str], bytes | None]) -> dict[int, float]:
        """Evaluation rows of each launch's ``vis_data/scalars.json``, oldest launch first (a
        resumed run evaluates again under a new timestamp)."""
        values: dict[int, float] = {}
        for entry in sorted((e for e in run.other_files if e.is_dir and _LOG_FOLDER.match(e.name)), key=lambda e: e.name):
            values.update(logged_values(read(os.path.join(entry.os_path, "vis_data", "scalars.json")), metric, "step", unless="iter"))
        return values


def _work_dir(run: Run) -> bool:
    """Whether the run's folder is a ``work_dir``: the Runner keeps ``last_checkpoint`` and a log
    folder per launch there (``<timestamp>/``), and nothing of them in an ``out_dir``."""
    return any(f.entry.name == LAST.name for f in run.loose_files) or any(
        entry.is_dir and _LOG_FOLDER.match(entry.name) for entry in run.other_files
    )


class _MmengineFolders(FolderLayout):
    """``FlexibleRunner``'s checkpoint folders, built into the mmengine run
    (``MmengineLayout.build`` hands them here; never listed on its own): the engine's files are
    judged as DeepSpeed's, ``FSDPStrategy``'s ``rank<r>.pth`` as bundles."""

    name = MmengineLayout.name
    builds_on = MmengineLayout.builds_on
    default_unit = Unit.EPOCH
    content = MmengineLayout.content
    resume_needs = MmengineLayout.resume_needs
    own_objects = MmengineLayout.own_objects

    def claim(self, name: str) -> Claim | None:
        return MMENGINE.claim(name)

    def pointer(self, name: str) -> Claim | None:
        return MMENGINE.pointer(name)

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        return BUNDLED if _RANK.match(name) else _DEEPSPEED.role_of(name)

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        # the engine keeps the optimizer in its model states without ZeRO: DeepSpeed's own answer
        return _DEEPSPEED.required_of(saved)

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        # a rank's file the other saves have (each rank loads its own: `rank<rank>.pth`, its ZeRO partition)
        return missing_from_siblings(files, siblings)


MMENGINE = MmengineLayout()
_FOLDERS = _MmengineFolders()
