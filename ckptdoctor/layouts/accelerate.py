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

import os
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.layouts.absent import missing_from_siblings
from ckptdoctor.layouts.base import FolderLayout
from ckptdoctor.layouts.hf_trainer import fsdp_absent, fsdp_folder, fsdp_measured, fsdp_roles, written_by_trainer
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.model import Checkpoint, CheckpointFile, Entry, Role, Run, Status, Unit
from ckptdoctor.readers.sniff import Format

_CHECKPOINT = re.compile(r"^checkpoint_([0-9]+)\Z")
_SORTED_BY = re.compile(r"[0-9]+")
r"""What a bare ``load_state()`` sorts each entry of ``checkpoints/`` by: the first digits in its name
(``re.findall(r"[\/]?([0-9]+)(?=[^\/]*$)", folder)[0]`` over the entry's path)."""
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


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD101/save-optimizer-beside": "Save with `accelerator.save_state()`, which writes the optimizer's state beside the weights in each folder, rather than saving the model alone, so that `load_state` finds {expected} in {folder}.",
        "CKD114/name-last": "Call `load_state` with the folder the last line names: a bare `load_state()` takes the highest-numbered folder, which is incomplete.",
        "CKD114/move-out": "Move {name} out of {run}, where a bare `load_state()` takes a number from every name (`ckptdoctor repair` leaves it there: it is no checkpoint): {quarantine}.",
        "CKD114/name-last-folder": "Or call `load_state` with the folder the last line names: given a folder, it looks at no other name in {run}.",
        "CKD501/keep-fewer": "Keep fewer checkpoints: `ProjectConfiguration(total_limit=n)`.",
        "CKD205/another-format": "Put back what `save_state` wrote as {name}: `load_state` loads `model.safetensors` with safetensors and `pytorch_model.bin`, `optimizer.bin`, `scheduler.bin` and `random_states_<rank>.pkl` with `torch.load`, so no other format loads under that name, converted or renamed (weights saved with `torch.save` load as `pytorch_model.bin`).",
        "CKD402/upgrade": "Upgrade accelerate: newer releases allowlist the numpy globals its own RNG files need.",
    }
)
"""accelerate's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class AccelerateLayout(FolderLayout):
    name = "accelerate"
    packages = ("accelerate",)
    fix_wordings = _FIX_WORDINGS
    vocabulary = ("accelerate", "load_state", "save_state", "ProjectConfiguration", "total_limit")
    builds_on = ("torch",)
    default_unit = Unit.SAVE
    reads_every_name = True
    content = frozenset({Format.SAFETENSORS, Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE, Format.DISTCP})
    resume_needs = frozenset({Role.MODEL, Role.OPTIMIZER})
    # load_accelerator_state loads random_states_<rank>.pkl inside a try that only logs on failure;
    # custom_checkpoint_<i>.pkl is not: load_state raises where their count differs
    advisory = MappingProxyType({
        Role.RNG_STATE: (
            'accelerate\'s `load_state` loads the checkpoint without it and only logs "Could not load random states": '
            "the random number generators (data order, dropout) and `accelerator.step` are not restored"
        ),
    })  # fmt: skip

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
        lacking = {*missing_from_siblings(files, siblings), *fsdp_absent(files, siblings)}
        # a process's RNG states are advisory: load_state resumes without them
        return tuple(sorted(name for name in lacking if not set(self.role_in(name) or ()) <= set(self.advisory)))

    def measured(self, files: list[CheckpointFile]) -> list[CheckpointFile]:
        return fsdp_measured(files)

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        # load_state() without an input_dir: the highest checkpoint_N, whatever is inside; the
        # scripts that name their own folders resume from their newest one the same way
        # (diffusers' `--resume_from_checkpoint latest`, the `*_no_trainer` examples); a folder
        # named on its own has no latest to pick
        if not run.checkpoints or run.checkpoints[-1].folder is None:
            return None
        newest = run.checkpoints[-1]
        stray = _taken_for_newest(run)
        if stray is None:
            return newest
        # no checkpoint of the run's: what load_state() loads there is not whole, or it fails
        number = _sort_key(stray.name)
        return Checkpoint(newest.index if number is None else number, (), Status.INCOMPLETE, folder=stray)

    def auto_resume_outcome(self, run: Run, pick: Checkpoint) -> str | None:
        if pick in run.checkpoints or pick.folder is None:
            return None
        name, folder, newest = pick.folder.name, os.path.dirname(pick.folder.path), run.checkpoints[-1]
        how = f"a bare `load_state()` sorts every entry of {folder} by the first number in its name"
        number = _sort_key(name)
        if number is None:
            return f"fails: {how}, and raises IndexError on {name}, which has none, before it loads anything"
        if pick.folder.is_dir:
            loaded = f"{name} fails to load where it holds no accelerate save, and resumes from whatever save it holds otherwise"
        else:
            loaded = f"{name} is a file, so it fails (NotADirectoryError)"
        mine = os.path.basename(newest.path or "")
        if number == newest.index:
            return f"may load {name}, not {mine}: {how}, both sort as {number}, and the order the filesystem lists them decides; {loaded}"
        return f"loads {name}, not {mine}: {how}, and {number} is the highest; {loaded}"

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


def _sort_key(name: str) -> int | None:
    """The number a bare ``load_state()`` sorts an entry named ``name`` by; None where it has none
    (the sort raises IndexError)."""
    found = _SORTED_BY.search(name)
    return int(found[0]) if found else None


def _taken_for_newest(run: Run) -> Entry | None:
    """The entry beside a run's ``checkpoint_N`` folders that a bare ``load_state()`` fails on (one
    with no number) or loads in place of the newest (a number as high or higher); None where it
    loads the newest. Only where the run's folders are automatic naming's ``checkpoint_N``: the
    folders a script names are loaded by the path it gives."""
    folders = [c.folder for c in run.checkpoints if c.folder is not None]
    if len(folders) < len(run.checkpoints) or not all(_CHECKPOINT.match(folder.name) for folder in folders):
        return None
    where = os.path.dirname(folders[-1].os_path)
    beside = {f.entry.os_path: f.entry for f in (*run.loose_files, *run.extra_files)}
    beside.update((entry.os_path, entry) for entry in run.other_files)
    # listdir takes every entry, hidden ones and files too; sorted by name, so the verdict does not depend on the listing's order
    strays = sorted((entry for entry in beside.values() if os.path.dirname(entry.os_path) == where), key=lambda entry: entry.name)
    numbered = [(_sort_key(entry.name), entry) for entry in strays]
    unnumbered = next((entry for number, entry in numbered if number is None), None)
    if unnumbered is not None:
        return unnumbered
    highest = max(((number, entry) for number, entry in numbered if number is not None), key=lambda pair: pair[0], default=None)
    return highest[1] if highest is not None and highest[0] >= run.checkpoints[-1].index else None
