"""LitGPT (``litgpt pretrain``, ``litgpt finetune_*``): ``out_dir/step-<N>/lit_model.pth`` folders.

From litgpt 0.5.13 (as installed; Lightning-AI/litgpt): ``pretrain.py`` (``fit``,
``save_checkpoint``) saves ``out_dir/step-{step_count:08d}/lit_model.pth`` with ``fabric.save`` of
``{model, optimizer, train_dataloader, iter_num, step_count}``, and the same into
``out_dir/final/``; ``finetune/full.py`` saves ``step-{step_count:06d}/lit_model.pth`` with
``{model, optimizer, scheduler, iter_num, step_count}`` and ``final/lit_model.pth`` with the model
alone; ``finetune/lora.py``, ``adapter.py`` and ``adapter_v2.py`` save the trained weights alone,
as ``lit_model.pth.lora``, ``.adapter`` and ``.adapter_v2``. Beside each go
``model_config.yaml`` (``save_config``), ``hyperparameters.yaml`` (``save_hyperparameters``),
``prompt_style.yaml`` (finetuning) and the tokenizer and config files copied from the base model.
The number is optimizer steps (``step_count``; ``iter_num`` counts micro-batches). On more than
one device every script builds ``FSDPStrategy(state_dict_type="full")``, so rank 0 writes the same
one file (Fabric's ``FSDPStrategy.save_checkpoint``), its optimizer state keyed by parameter names
(``FSDP.optim_state_dict``); no LitGPT script chooses Fabric's ``"sharded"``, which would make
``lit_model.pth`` a folder of DCP files.

Fabric's ``_atomic_save`` writes each file in an fsspec transaction: a temporary file in
``$TMPDIR``, moved into place when it is whole; a move across filesystems copies, so a kill then
leaves a cut ``lit_model.pth``, and a kill before it leaves the step folder without one.

``--resume auto`` (and ``True``) is ``litgpt.utils.find_resume_path``: the highest
``int(folder.split("-")[1])`` among ``out_dir.rglob("step-*/*.pth")``, whatever that file holds;
``fabric.load(path, state)`` then needs every key of the state (``strict``), so a checkpoint
without its optimizer (or, in finetuning, its scheduler) does not resume. ``--resume PATH`` takes
the ``lit_model.pth`` file. Only ``adapter_v2`` resumes among the weights-only variants, from the
highest ``step-*/*.pth.adapter_v2``, with a fresh optimizer. ``final/`` is no step: a run of its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ckptdoctor.layouts.base import FolderLayout
from ckptdoctor.layouts.content import confirmed_roles
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.model import Checkpoint, CheckpointFile, Role, Run, Unit
from ckptdoctor.readers.files import with_keys
from ckptdoctor.readers.sniff import Format

_STEP = re.compile(r"^step-([0-9]{6,})\Z")
"""``{step_count:06d}`` (finetuning) or ``{step_count:08d}`` (pretraining)."""
FULL = "lit_model.pth"
ADAPTERS = {"lit_model.pth.lora": "LoRA", "lit_model.pth.adapter": "adapter", "lit_model.pth.adapter_v2": "adapter v2"}
"""Weights-only saves of LitGPT's parameter-efficient finetuning, by the method that writes them."""
_RESUMED = (".pth", ".pth.adapter_v2")
"""What ``--resume`` looks for in a step folder: ``find_resume_path``'s ``*.pth`` and adapter_v2's own glob."""
_SIGNATURE = frozenset({"hyperparameters.yaml", "model_config.yaml"})
BUNDLED = (Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER)
"""What ``lit_model.pth`` may hold; its keys say which (``scheduler`` in finetuning only)."""


class LitGptLayout(FolderLayout):
    name = "litgpt"
    packages = ("litgpt",)
    vocabulary = ("LitGPT", "litgpt", "find_resume_path", "fabric.load", "lit_model.pth", "merge_lora", "--resume auto")
    builds_on = ("torch",)
    default_unit = Unit.STEP
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE})
    resume_needs = frozenset({Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER})
    """``fabric.load`` is strict: a key of the state missing from the file raises."""
    reads_every_name = True
    """``find_resume_path`` globs ``out_dir.rglob("step-*/*.pth")``, every folder below included:
    a step folder quarantined or trashed inside the run would be picked again. ckptdoctor's own
    folder lives beside the run."""

    def claim(self, name: str) -> Claim | None:
        match = _STEP.match(name)
        return Claim((), int(match[1]), "step", Unit.STEP) if match else None

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        if name == FULL:
            return BUNDLED
        return (Role.MODEL,) if name in ADAPTERS else None

    def signature(self, names: frozenset[str]) -> bool:
        """A LitGPT save (``final/``, or a step folder named on its own): its weights file beside
        the hyper-parameters and model config it writes there (a converted base model has no
        ``hyperparameters.yaml``)."""
        return _SIGNATURE.issubset(names) and any(self.role_of(name) for name in names)

    def measured(self, files: list[CheckpointFile]) -> list[CheckpointFile]:
        """``lit_model.pth``'s roles as its keys show them (``final/`` of a finetune: the model alone)."""
        measured = []
        for file in files:
            if len(file.roles) < 2:
                measured.append(file)
                continue
            report = with_keys(file.entry, file.report)
            measured.append(CheckpointFile(file.entry, confirmed_roles(file.roles, report), file.prefix, report))
        return measured

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        """The roles the run's saves hold, as the keys of those that could be read show them:
        pretraining saves no scheduler (its learning rate follows ``iter_num``), adapters nothing
        but weights. A cut ``lit_model.pth`` keeps every role its name allows, which must not make
        its whole siblings incomplete for a scheduler LitGPT never saved."""
        files = [file for files in saved for file in files]
        read = [file for file in files if file.report.keys_read] or files
        seen = {role for file in read for role in file.roles}
        return tuple(role for role in BUNDLED if role in seen) or (Role.MODEL,)

    def weights_only(self, saved: Sequence[Sequence[CheckpointFile]]) -> str | None:
        """LoRA and adapter finetuning (their own file names), or a ``lit_model.pth`` whose keys
        show the model alone (``final/`` of a finetune, written with ``{"model": ...}``)."""
        files = [file for files in saved for file in files]
        methods = sorted({ADAPTERS[f.name] for f in files if f.name in ADAPTERS})
        full = [f for f in files if f.name == FULL]
        if methods and not full:
            return f"LitGPT's {' and '.join(methods)} finetuning saves the trained weights alone"
        if full and all(f.report.keys_read and Role.OPTIMIZER not in f.roles for f in full):
            return f"{full[-1].name} holds the model alone, as a finetune's final save does"
        return None

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        """``find_resume_path``: the highest step folder holding a ``*.pth`` (adapter_v2: a
        ``*.pth.adapter_v2``), whatever is in it; none where the run's folders are not LitGPT's names."""
        if not all(c.folder is not None and _STEP.match(c.folder.name) for c in run.checkpoints):
            return None
        picked = [c for c in run.checkpoints if any(_resumed(f) for f in c.files)]
        return picked[-1] if picked else None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        path = self.resume_path(run, checkpoint)
        if run.weights_only and path.endswith(FULL):
            return (
                f"{path} holds the weights alone, which `--resume` cannot load (`fabric.load` wants the optimizer too): "
                "use its folder as the `--checkpoint_dir` of a new finetune, or resume from a step folder"
            )
        if run.weights_only and not path.endswith(".adapter_v2"):
            return (
                "LitGPT's LoRA and adapter finetuning do not resume: start again from the base model, "
                f"or merge {path} into it (`litgpt merge_lora`) to use it"
            )
        hint = f"pass `--resume {path}` to the same `litgpt` command"
        if self.auto_resume_pick(run) is checkpoint:
            hint += f" (or `--resume auto` with `--out_dir {run.path}`: it picks this one)"
        return hint

    def resume_path(self, run: Run, checkpoint: Checkpoint) -> str:
        """The weights file ``--resume`` takes (``fabric.load`` opens a file, not the folder)."""
        files = [f for f in checkpoint.files if Role.MODEL in f.roles]
        return files[0].path if files else super().resume_path(run, checkpoint)


def _resumed(file: CheckpointFile) -> bool:
    """A file directly in its step folder that ``--resume`` globs for."""
    return "/" not in file.prefix and file.name.endswith(_RESUMED)
