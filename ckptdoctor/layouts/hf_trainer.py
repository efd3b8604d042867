"""Hugging Face transformers ``Trainer``: ``<output_dir>/checkpoint-<step>/`` folders.

Each folder holds the model (``model.safetensors``, ``pytorch_model.bin``, shards with their
index, or a PEFT adapter), ``optimizer.pt``, ``scheduler.pt``, RNG state, ``training_args.bin``
and, written last, ``trainer_state.json``. The Trainer's own resume (``get_last_checkpoint``)
takes the highest-numbered folder without looking inside it, and loads optimizer and scheduler
only as a pair: a folder missing either resumes silently with a fresh optimizer.

Under FSDP the Trainer saves through accelerate (``accelerate/utils/fsdp_utils.py``,
``save_fsdp_model`` and ``save_fsdp_optimizer``): ``SHARDED_STATE_DICT`` writes DCP folders
``pytorch_model_fsdp_<i>/`` and ``optimizer_<i>/`` (``.metadata`` and ``__<rank>_0.distcp``),
``FULL_STATE_DICT`` writes ``pytorch_model_fsdp.bin`` (``pytorch_model_fsdp_<i>.bin``) and
``optimizer.bin`` (``optimizer_<i>.bin``), ``LOCAL_STATE_DICT`` one
``pytorch_model_fsdp[_<i>]_rank<r>.bin`` per rank. Each holds the model, or the optimizer.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.layouts.absent import unlisted_shards
from ckptdoctor.layouts.base import FolderLayout
from ckptdoctor.layouts.dcp import DcpLayout
from ckptdoctor.layouts.deepspeed import ZERO3_WEIGHTS
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.layouts.pointers import Pointer
from ckptdoctor.model import Checkpoint, CheckpointFile, Role, Run, Unit
from ckptdoctor.readers import hfjson, pickled_flags, pointer
from ckptdoctor.readers.dcp import DATA_SUFFIX, METADATA
from ckptdoctor.readers.named import Named
from ckptdoctor.readers.sniff import Format

_CHECKPOINT = re.compile(r"^checkpoint-([0-9]+)\Z")
_STAGING = re.compile(r"^tmp-checkpoint-([0-9]+|[a-z0-9_]+)\Z")
_SHARD = re.compile(r"^(?:model|pytorch_model)-[0-9]{5}-of-[0-9]{5}\.(?:safetensors|bin)\Z")
_RNG = re.compile(r"^rng_state(?:_[0-9]+)?\.pth\Z")
_FSDP_MODEL = re.compile(r"^pytorch_model_fsdp(?:_[0-9]+)?(?:_rank[0-9]+)?\.bin\Z")
_FSDP_OPTIMIZER = re.compile(r"^optimizer_[0-9]+\.bin\Z")
_FSDP_FOLDER = re.compile(r"^(pytorch_model_fsdp|optimizer)_[0-9]+\Z")
"""accelerate's DCP folders of a sharded FSDP save: the model's, and each optimizer's."""
_DCP = DcpLayout()

TRAINER_STATE = "trainer_state.json"
TRAINING_ARGS = "training_args.bin"
BEST = "best_model_checkpoint"
"""The key of ``trainer_state.json`` that names the best checkpoint (``load_best_model_at_end``)."""
SAVE_ONLY_MODEL = "save_only_model"
"""The ``TrainingArguments`` flag with which the Trainer writes no optimizer, scheduler or RNG
state, and resumes from the weights with a fresh optimizer."""

FILES: dict[str, tuple[Role, ...]] = {
    "model.safetensors": (Role.MODEL,),
    "pytorch_model.bin": (Role.MODEL,),
    "adapter_model.safetensors": (Role.MODEL,),
    "adapter_model.bin": (Role.MODEL,),
    "pytorch_model_fsdp.bin": (Role.MODEL,),
    "model.safetensors.index.json": (Role.SHARD_INDEX,),
    "pytorch_model.bin.index.json": (Role.SHARD_INDEX,),
    "optimizer.pt": (Role.OPTIMIZER,),
    "optimizer.bin": (Role.OPTIMIZER,),
    "scheduler.pt": (Role.SCHEDULER,),
    TRAINER_STATE: (Role.TRAINER_STATE,),
    TRAINING_ARGS: (Role.TRAINING_ARGS,),
    "scaler.pt": (Role.SCALER,),
    "config.json": (Role.CONFIG,),
    "latest": (Role.POINTER,),
    "generation_config.json": (Role.CONFIG,),
    "adapter_config.json": (Role.CONFIG,),
}
"""File names the Trainer writes into a checkpoint folder (framework reference §1.2)."""

_ONLY_TRAINER = frozenset({TRAINER_STATE, TRAINING_ARGS, "optimizer.pt", "scheduler.pt"})
"""Names only the Trainer writes into a checkpoint (with ``rng_state*.pth``)."""
_RESUMABLE = frozenset({"optimizer.pt", "scheduler.pt"})

REQUIRED = (Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER, Role.TRAINER_STATE)
NAMES = {Role.OPTIMIZER: "optimizer.pt", Role.SCHEDULER: "scheduler.pt", Role.TRAINER_STATE: TRAINER_STATE, Role.MODEL: "model.safetensors"}


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD101/save-optimizer-beside": "Pass `resume_from_checkpoint` the folder the last line names, not `True`: the Trainer resumes from a folder without `optimizer.pt` with a fresh optimizer and says nothing.",
        "CKD102/zero3-weights": "Under DeepSpeed ZeRO-3, " + ZERO3_WEIGHTS,
        "CKD103/point-scheduler-saver": "",
        "CKD103/schedule-without-copy": "If no copy exists, do not resume from this folder: the Trainer loads `optimizer.pt` only together with `scheduler.pt`, so the optimizer would restart as well. Resume from the folder the last line names.",
        "CKD103/save-scheduler": "",
        "CKD104/move-unfinished": "Move the unfinished folder out of the way so `get_last_checkpoint` picks the previous one: `{repair} {this_run}` quarantines it (or move `checkpoint-{index}` aside by hand).",
        "CKD104/resume-explicit": "Resume from an explicit folder instead of `True`: pass `trainer.train(resume_from_checkpoint=...)` the folder that `ckptdoctor inspect --resume-path {run}` prints, the newest complete step.",
        "CKD107/resume-optimizer": "To resume with the optimizer's state next time, drop `save_only_model=True` from `TrainingArguments`.",
        "CKD110/check-folder": "Check that {run} is the Trainer's `output_dir`; `ckptdoctor inspect` on a parent folder finds every run below it.",
        "CKD110/renamed-folders": "If the folders were renamed or moved, pass `resume_from_checkpoint` an explicit path instead of `True`.",
        "CKD113/point-newest": "If `best_model_checkpoint` names a folder that moved, correct the path in `trainer_state.json`, or resume from the moved folder with an explicit `resume_from_checkpoint`.",
        "CKD114/name-last": "Pass `resume_from_checkpoint` the folder the last line names, not `True`: `True` takes the highest-numbered `checkpoint-N`, which is incomplete.",
        "CKD307/resume-config": "Resume with the config that saved the checkpoint you resume from: the checkpoint's own `config.json`.",
        "CKD307/resize-embeddings": "If the vocabulary grew, resize the embeddings before loading: `model.resize_token_embeddings(n)`.",
        "CKD308/re-save": "Re-save the model from a trusted copy with `save_pretrained(...)`, which writes matching shards and index together.",
        "CKD501/keep-fewer": "Keep fewer checkpoints: `save_total_limit` in `TrainingArguments` (and `save_only_model=True` for saves you will never resume from).",
        "CKD202/create-manager": "If saves fail with `Directory not empty` on several nodes, move off the transformers versions that staged saves (4.36–4.38, the 4.49 development builds), and delete stale `tmp-checkpoint-*` folders and any `checkpoint-N` of the same step before resuming.",
        "CKD205/another-format": "Put back what the Trainer wrote as {name}: it loads each file of a checkpoint by its name, `model.safetensors` with safetensors and `pytorch_model.bin`, `optimizer.pt`, `scheduler.pt`, `rng_state*.pth` and `training_args.bin` with `torch.load`, so no other format loads under that name, converted or renamed (weights saved with `torch.save` load as `pytorch_model.bin`).",
        "CKD207/fresh-files": "If freshly written files show the same error, the saving code produces it: save with `save_pretrained` instead of a custom writer.",
        "CKD402/upgrade": "Upgrade `transformers`: newer releases allowlist the numpy globals its own RNG files need.",
    }
)
"""HF Trainer's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class HfTrainerLayout(FolderLayout):
    name = "hf-trainer"
    packages = ("transformers",)
    harmless = frozenset({
        "transformers.training_args.TrainingArguments", "transformers.training_args.OptimizerNames",
        "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
        "transformers.trainer_utils.IntervalStrategy", "transformers.trainer_utils.SchedulerType",
        "transformers.trainer_utils.HubStrategy", "transformers.trainer_utils.SaveStrategy",
        "transformers.debug_utils.DebugOption", "transformers.training_args.ParallelMode",
        "transformers.trainer_pt_utils.AcceleratorConfig", "transformers.trainer_utils.FSDPOption",
        "transformers.generation.configuration_utils.GenerationConfig",
        # the accelerate state a `TrainingArguments` keeps, pickled with it into `training_args.bin`
        "accelerate.utils.dataclasses.DistributedType", "accelerate.state.PartialState",
    })  # fmt: skip
    construct_only = frozenset({
        "transformers.training_args.TrainingArguments", "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
        "transformers.trainer_pt_utils.AcceleratorConfig", "accelerate.state.PartialState",
        "transformers.generation.configuration_utils.GenerationConfig",
    })  # fmt: skip
    fix_wordings = _FIX_WORDINGS
    vocabulary = (
        "HF",
        "Hugging Face",
        "huggingface",
        "transformers",
        "Trainer",
        "TrainingArguments",
        "resume_from_checkpoint",
        "save_total_limit",
        "save_only_model",
        "get_last_checkpoint",
        "trainer_state.json",
        "best_model_checkpoint",
        "save_pretrained",
        "resize_token_embeddings",
        "config.json",
        "optimizer.pt",
        "scheduler.pt",
        "tmp-checkpoint",
        "output_dir",
    )
    builds_on = ("torch",)
    default_unit = Unit.STEP
    content = frozenset({Format.SAFETENSORS, Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE, Format.JSON, Format.TEXT, Format.DISTCP})
    resume_needs = frozenset(REQUIRED)
    named_files = MappingProxyType(
        {
            TRAINER_STATE: Named(
                functools.partial(hfjson.read_values, name=TRAINER_STATE, keys={"global_step": int, BEST: str}), Format.JSON
            ),
            TRAINING_ARGS: Named(annotate=functools.partial(pickled_flags.with_flags, fields=(SAVE_ONLY_MODEL,))),
            "latest": Named(pointer.read),  # under DeepSpeed: the engine's tag file, inside each checkpoint-N
        }
    )

    def claim(self, name: str) -> Claim | None:
        match = _CHECKPOINT.match(name)
        return Claim((), int(match[1]), "checkpoint", Unit.STEP) if match else None

    def signature(self, names: frozenset[str]) -> bool:
        """``trainer_state.json`` beside weights and the optimizer or RNG state: a Trainer
        checkpoint, copied or renamed (``best/``, ``step_500/``). Without the last two it is the
        final ``save_model()`` + ``save_state()`` export (or a ``save_only_model`` save), which
        nothing resumes training from as it is: not taken for a checkpoint."""
        return (
            TRAINER_STATE in names
            and any(FILES.get(name) == (Role.MODEL,) or _SHARD.match(name) for name in names)
            and any(name in _RESUMABLE or _RNG.match(name) for name in names)
        )

    def staging(self, name: str) -> Claim | None:
        match = _STAGING.match(name)
        if match is None:
            return None
        return Claim((Role.TEMP,), int(match[1]) if match[1].isdigit() else 0, "tmp-checkpoint")

    def nested(self, name: str) -> bool:
        return fsdp_folder(name)

    def role_in(self, relative: str) -> tuple[Role, ...] | None:
        return self.role_of(relative) if "/" not in relative else fsdp_roles(relative)

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        if name in FILES:
            return FILES[name]
        if _SHARD.match(name) or _FSDP_MODEL.match(name):
            return (Role.MODEL,)
        if _FSDP_OPTIMIZER.match(name):
            return (Role.OPTIMIZER,)
        if _RNG.match(name):
            return (Role.RNG_STATE,)
        return None

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        if any(Role.POINTER in file.roles for files in saved for file in files):
            # under DeepSpeed the engine saves weights, optimizer and scheduler in its own
            # global_step*/ folder (with `latest`) inside each checkpoint-N: no optimizer.pt there
            return (Role.TRAINER_STATE,)
        return REQUIRED

    def weights_only(self, saved: Sequence[Sequence[CheckpointFile]]) -> str | None:
        """``save_only_model=True`` in the newest ``training_args.bin`` that says either way (a
        run resumed with the flag set saves its newer checkpoints without an optimizer: HF resumes
        from those as well)."""
        for files in reversed(saved):
            for file in files:
                if Role.TRAINING_ARGS in file.roles and (flag := file.report.fact(SAVE_ONLY_MODEL)) is not None:
                    return f"{file.name} sets save_only_model=True" if flag == "true" else None
        return None

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        return fsdp_absent(files, siblings) + unlisted_shards(files)

    def measured(self, files: list[CheckpointFile]) -> list[CheckpointFile]:
        return fsdp_measured(files)

    def file_name(self, role: Role, index: int) -> str | None:
        return NAMES.get(role)

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        hint = f'pass `resume_from_checkpoint="{checkpoint.path or run.path}"` to `trainer.train()`'
        return f"{hint} (the optimizer and scheduler start afresh: the folder holds none)" if run.weights_only else hint

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        """``best_model_checkpoint`` in the newest ``trainer_state.json``: what retention and
        ``load_best_model_at_end`` follow (in the Trainer's own ``checkpoint-N`` folders only: a
        folder copied out of them names checkpoints that were never its siblings)."""
        if not _own_names(run):
            return ()
        for checkpoint in reversed(run.checkpoints):
            for file in checkpoint.files_for(Role.TRAINER_STATE):
                best = file.report.fact(BEST)
                if best is None:
                    continue
                match = _CHECKPOINT.match(best.rstrip("/").rsplit("/", 1)[-1])
                # load_best_model_at_end loads the weights from it, nothing else
                return (Pointer(file, best, int(match[1]) if match else None, BEST, frozenset({Role.MODEL})),)
        return ()

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        # get_last_checkpoint: the highest checkpoint-N folder, whatever is inside (it sees no other name)
        return run.checkpoints[-1] if run.checkpoints and _own_names(run) else None

    def metric_values(self, run: Run, root: str, metric: str, read: Callable[[str], bytes | None]) -> dict[int, float]:
        """The newest ``trainer_state.json`` that parses holds the whole ``log_history``: eval
        rows by step (``eval_`` is the prefix the Trainer gives evaluation metrics)."""
        for checkpoint in reversed(run.checkpoints):
            for file in checkpoint.files_for(Role.TRAINER_STATE):
                data = read(file.entry.os_path)
                if data is None:
                    continue
                try:
                    history = json.loads(data).get("log_history", [])
                except (ValueError, AttributeError):
                    continue
                names = (metric, f"eval_{metric}") if not metric.startswith("eval_") else (metric,)
                values: dict[int, float] = {}
                for row in history if isinstance(history, list) else []:
                    if not isinstance(row, dict) or not isinstance(row.get("step"), int):
                        continue
                    value = next((row[n] for n in names if isinstance(row.get(n), (int, float))), None)
                    if value is not None:
                        values[row["step"]] = float(value)
                return values
        return {}


def fsdp_folder(relative: str) -> bool:
    """Whether a folder (by its path inside the checkpoint) is one of accelerate's DCP folders of
    a sharded FSDP save, which the Trainer writes through accelerate too."""
    return bool(_FSDP_FOLDER.match(relative))


def fsdp_roles(relative: str) -> tuple[Role, ...] | None:
    """The roles of a file inside accelerate's DCP folders (``pytorch_model_fsdp_0/__1_0.distcp``),
    by its path inside the checkpoint; None for any other path."""
    folder, _, name = relative.rpartition("/")
    match = _FSDP_FOLDER.match(folder)
    if match is None:
        return None
    if name == METADATA:
        return (Role.METADATA,)  # where DCP places each item: read with the data files
    if not name.endswith(DATA_SUFFIX):
        return None
    return (Role.MODEL,) if match[1] == "pytorch_model_fsdp" else (Role.OPTIMIZER,)


def fsdp_absent(files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
    """The data files the ``.metadata`` of each DCP folder names that the folder lacks."""
    return _DCP.absent(files, siblings)


def fsdp_measured(files: list[CheckpointFile]) -> list[CheckpointFile]:
    """Each DCP data file against where its folder's ``.metadata`` places its items: ``dcp.load``
    (``load_fsdp_model``, ``load_fsdp_optimizer``) fails on one cut short."""
    return _DCP.measured(files)


def written_by_trainer(names: frozenset[str]) -> bool:
    """Whether a folder holding ``names`` has files only the Trainer writes."""
    return bool(_ONLY_TRAINER & names) or any(_RNG.match(name) for name in names)


def _own_names(run: Run) -> bool:
    """Whether the run's checkpoints are the Trainer's ``checkpoint-N`` folders."""
    return all(c.folder is not None and _CHECKPOINT.match(c.folder.name) for c in run.checkpoints)
