"""Plain PyTorch / safetensors runs written by a hand-made training loop.

Split runs save one file per role and index (``model_3.pt``, ``optimizer-epoch-3.pth``,
``weights.step.500.safetensors``); bundled runs save one file per index holding everything
(``epoch_12.pt``, ``checkpoint_3.pth``, ``ckpt-500.pt``). Nothing in the framework says which
roles a checkpoint needs, so a checkpoint is complete when it has every role the run's other
checkpoints have: a run that never saved a scheduler does not need one.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.base import Layout
from ckptdoctor.layouts.context import role_hints
from ckptdoctor.layouts.naming import CHECKPOINT_WORDS, ROLE_WORDS, UNIT_WORDS, Claim
from ckptdoctor.model import Checkpoint, Entry, FileReport, Role, Run, Unit
from ckptdoctor.optimizers import FRESH_START_COST
from ckptdoctor.readers.files import checkpoint_suffixes
from ckptdoctor.readers.sniff import Format

_CONTENT = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.TORCH_TAR, Format.TORCH_PREVIEW, Format.PICKLE, Format.SAFETENSORS})
_SUFFIX = re.compile("(?:" + "|".join(map(re.escape, checkpoint_suffixes(_CONTENT))) + r")\Z", re.IGNORECASE)
_SEPARATORS = re.compile(r"[-_.=]+")
_LEADING_WORDS = re.compile(r"^(.*?)(?:[-_.=]*(?:epoch|ep|step|steps|iter|iteration|it)?[-_.=]*[0-9]+)", re.IGNORECASE | re.DOTALL)
_UNIT_NUMBER = re.compile(r"^(epoch|ep|step|steps|iter|iteration|it)([0-9]+)\Z")

BUNDLED_ROLES = (Role.MODEL, Role.OPTIMIZER)
"""What a one-file-per-index save holds by convention; ``verify`` confirms it from the keys."""


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD101/weights-alone": "If no copy exists, resume from the weights alone: `model.load_state_dict(...)` and build a new optimizer. "
        + FRESH_START_COST,
        "CKD103/schedule-without-copy": "If no copy exists and the schedule is easy to recompute, resume from weights and optimizer and rebuild the scheduler at the right position: torch schedulers take `last_epoch=`.",
        "CKD103/save-scheduler": "Save the scheduler with every checkpoint from now on: put `scheduler.state_dict()` in the same save as the model and optimizer.",
        "CKD107/resume-optimizer": "To resume with the optimizer's state next time, put `optimizer.state_dict()` and the scheduler's in the same `torch.save` as the weights.",
        "CKD303/resume-version": "Resume with the library versions that wrote the checkpoint you resume from, and pin them in the environment (`requirements.txt`).",
        "CKD303/upgraded": "If you upgraded on purpose, check that the newest checkpoint loads with the new version (`ckptdoctor verify --load {run}` loads it with the installed torch) before removing the old environment.",
        "CKD304/before-resuming": "Before resuming, lower the learning rate or add gradient clipping (`torch.nn.utils.clip_grad_norm_`), and use loss scaling or bf16 instead of plain fp16.",
        "CKD305/map-location": "Load with `map_location`: `torch.load(f, map_location='cpu', weights_only=True)`, or `map_location='cuda:0'` on a single GPU.",
        "CKD305/portable": "To make checkpoints portable, move tensors to the CPU before saving (`{{k: v.cpu() for k, v in sd.items()}}`), or save safetensors, which records no device.",
        "CKD305/gpu-there": "If a GPU should be there, check that `torch.cuda.is_available()` is true: the installed torch must be a CUDA build and the launcher must expose the GPUs (`CUDA_VISIBLE_DEVICES`).",
        "CKD306/strip-prefix": "Strip the prefix when loading: `sd = {{k.removeprefix('module.'): v for k, v in sd.items()}}` (or `'_orig_mod.'`), then `model.load_state_dict(sd)`.",
        "CKD306/torch-helper": "Or use torch's helper: `torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, 'module.')`.",
        "CKD306/save-inner": "Save the inner model from now on: `model.module.state_dict()` for DDP and DataParallel, the original module (`model._orig_mod`) after `torch.compile`.",
        "CKD203/own-saving-code": "In your own saving code, write to `name.tmp` in the same folder, `fsync`, then `os.replace` it to the final name, so a failed save never leaves a cut file under the real name.",
        "CKD205/another-format": "If it is another format under the wrong name, give it that format's name, or convert it properly instead of renaming (for a pickle you trust, load it and save the tensors with `safetensors.torch.save_file`).",
        "CKD207/newer-library": "If a newer library may have written it, upgrade the reader first (e.g. `pip install -U safetensors torch`) before concluding the file is damaged.",
        "CKD207/fresh-files": "If freshly written files show the same error, the saving code produces it: save with `torch.save` or `safetensors.torch.save_file` instead of a custom writer.",
        "CKD209/save-state": "Save `model.state_dict()` and `optimizer.state_dict()`, not the objects, and keep logs, data and extra copies out of the checkpoint.",
        "CKD210/re-save": "Re-save in the zip format, which is the default since torch 1.6: load with `torch.load(f, weights_only=True)` and `torch.save` the result again.",
        "CKD210/read-pytorch": "`Attempted to read a PyTorch file with version …`: upgrade torch where you load; the file is newer than the reader.",
        "CKD210/tar-format": "Tar-format files cannot be loaded with `weights_only=True`; load them only if you trust their source, and re-save them in the zip format.",
        "CKD401/do-not-load": "Do not load it with `weights_only=False`, `pickle.load`, or torch older than 2.6 (where even `weights_only=True` can be bypassed, CVE-2025-32434); torch's default `torch.load(f, weights_only=True)` refuses it.",
        "CKD401/re-save": "If it is your own file with custom objects, re-save only the tensors: in a trusted, isolated environment load it, then save `model.state_dict()` with `safetensors.torch.save_file` or `torch.save`.",
        "CKD401/declare-trusted": 'If it only rebuilds objects of classes you wrote or trust (the finding names them), declare them as `torch.serialization.add_safe_globals` would: `trusted-globals = ["mypkg.Config"]` in `[tool.ckptdoctor]` (exact names, or `mypkg.*` for a package of your own; never a module that can act, such as `os` or `builtins`), and load it with `weights_only=True` inside `torch.serialization.safe_globals([...])` of the same classes.',
        "CKD402/allowlist": "Allowlist exactly the globals the finding names and keep `weights_only=True`: `torch.serialization.add_safe_globals([...])`, or the `torch.serialization.safe_globals([...])` context manager around the load.",
        "CKD402/own-files": "For files you wrote yourself and trust, `torch.load(f, weights_only=False)` works; never do this for files from elsewhere.",
        "CKD403/re-zipped": "If it is your own file re-zipped by a tool, restore the original, or in a trusted environment load it with `torch.load(f, weights_only=True)` and `torch.save` it again.",
    }
)
"""torch's own words for the rules' fixes, by slot (``Layout.fix_wordings``): every layout that builds on
torch (``builds_on``) is told them where it has none of its own."""


class TorchLayout(Layout):
    name = "torch"
    packages = ("torch",)
    fix_wordings = _FIX_WORDINGS
    vocabulary = ("torch", "state_dict", "weights_only", "map_location", "DDP", "DataParallel", "last_epoch")
    aliases = ("safetensors",)
    default_unit = Unit.EPOCH
    content = _CONTENT

    def build(
        self,
        listing: Listing,
        probe: Callable[[Entry], FileReport],
        claims: dict[str, Claim],
        subfolder: Callable[[Entry], Listing | None],
    ) -> Run | None:
        """The run, reported as ``safetensors`` where every file that can be read is one."""
        run = super().build(listing, probe, claims, subfolder)
        return dataclasses.replace(run, layout=self.aliases[0]) if run is not None and self.aliases and _all_safetensors(run) else run

    claimable: re.Pattern[str] = _SUFFIX
    """The suffixes of the formats it writes: a layout that names files as scripts do, for other
    formats (Keras), sets its own."""

    def claim(self, name: str) -> Claim | None:
        parsed = parse_name(name, self.claimable)
        if parsed is None:
            return None
        if parsed.roles:
            return Claim(parsed.roles, parsed.index, parsed.prefix, parsed.unit)
        if parsed.unit is not None or CHECKPOINT_WORDS.intersection(parsed.words):
            return Claim(BUNDLED_ROLES, parsed.index, parsed.prefix or "checkpoint", parsed.unit)
        return None

    def needed_to_resume(self, run: Run) -> frozenset[Role]:
        """A hand-made loop's resume loads every state it saves: one its other saves have and
        this one lacks fails it (``FileNotFoundError``), whatever the role."""
        return frozenset(run.required)

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        """A hand-made loop resumes by loading each saved state into the object that saved it."""
        files = [f for f in checkpoint.files if f.roles and Role.TEMP not in f.roles]
        if len(files) == 1 and len(files[0].roles) > 1:
            return f'`state = torch.load("{files[0].path}", weights_only=True)`, then hand each part to its `load_state_dict`'
        pairs = ", ".join(f"{'/'.join(r.value for r in f.roles)} from {f.name}" for f in files)
        return (
            "load each state with `torch.load(path, weights_only=True)` (`safetensors.torch.load_file` for safetensors) "
            f"into its object's `load_state_dict`: {pairs}"
        )

    def stray(self, name: str) -> Claim | None:
        parsed = parse_name(name, self.claimable)
        if parsed is None or parsed.roles or parsed.unit is not None or not parsed.words:
            return None
        if CHECKPOINT_WORDS.intersection(parsed.words):
            return None
        return Claim((Role.MODEL,), parsed.index, parsed.prefix)


@dataclass(frozen=True)
class ScriptName:
    """A file name as a script's template wrote it (``model_3.pt``, ``ep03-0.190.keras``)."""

    roles: tuple[Role, ...]
    index: int
    unit: Unit | None
    words: tuple[str, ...]
    """Tokens that are neither role, unit nor number (``resnet``, ``checkpoint``, ``ema``)."""
    prefix: str
    """The name up to its index, as written: what a checkpointer was told to call its files."""


_METRIC_VALUE = re.compile(r"(?<![0-9A-Za-z])-?[0-9]+\.[0-9]+(?:e[-+]?[0-9]+)?(?![0-9A-Za-z])", re.IGNORECASE)
"""A number with a decimal point (``weights.05-0.42``, ``ep03-0.190``): a metric's value that a
filename template wrote, never the index."""


def parse_name(name: str, suffixes: re.Pattern[str]) -> ScriptName | None:
    suffix = suffixes.search(name)
    if suffix is None:
        return None
    stem = _METRIC_VALUE.sub("", name[: suffix.start()])
    roles: list[Role] = []
    words: list[str] = []
    index: int | None = None
    unit: Unit | None = None
    named_unit: Unit | None = None
    by_unit = False  # the index came with its unit's word (`ep3`, `epoch_3`): a bare number after it is no index
    after_unit = False
    for token in _SEPARATORS.split(stem.lower()):
        spelled = _UNIT_NUMBER.match(token)
        if spelled:
            unit, index, by_unit = UNIT_WORDS[spelled[1]], int(spelled[2]), True
        elif token.isascii() and token.isdigit():  # what a Python script formats an int as
            if after_unit or not by_unit:
                index, unit, by_unit = int(token), named_unit or unit, by_unit or after_unit
        elif token in UNIT_WORDS:
            named_unit = UNIT_WORDS[token]
            after_unit = True
            continue
        elif token in ROLE_WORDS or token in (hints := role_hints()):
            roles.append(ROLE_WORDS.get(token) or hints[token])
        elif token and token != "lr":
            words.append(token)
        after_unit = False
    if index is None:
        return None
    prefix = _SEPARATORS.sub("_", _LEADING_WORDS.match(stem).group(1)).strip("_").lower()  # type: ignore[union-attr]
    return ScriptName(tuple(dict.fromkeys(roles)), index, unit or named_unit, tuple(words), prefix)


def _all_safetensors(run: Run) -> bool:
    """A run whose files (those that can be read at all) are all safetensors."""
    files = [f for c in run.checkpoints for f in c.files if not f.report.issues]
    return bool(files) and all(f.report.format == Format.SAFETENSORS.value for f in files)
