"""nanoGPT's ``train.py``: one ``ckpt.pt`` in ``out_dir``, overwritten in place at every save.

From karpathy/nanoGPT 3adf61e154c3fe3fca428ad6bc3818b27a3b8291, ``train.py``: after each
evaluation (``iter_num % eval_interval == 0``), when the validation loss improved or
``always_save_checkpoint`` (the default), and ``iter_num > 0``, it writes
``torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))`` with the keys ``model``,
``optimizer``, ``model_args``, ``iter_num``, ``best_val_loss`` and ``config``, straight over the
previous save: no staging file, so a kill during a save leaves a cut ``ckpt.pt`` and nothing else
to resume from. ``out_dir`` holds nothing else nanoGPT writes.

``--init_from=resume`` loads ``<out_dir>/ckpt.pt`` (``torch.load``, the weights with any
``_orig_mod.`` prefix stripped, then ``optimizer.load_state_dict(checkpoint['optimizer'])``, then
``iter_num`` and ``best_val_loss``), so both the model and the optimizer state are needed. The
index is ``iter_num`` (iterations), read from the file: the name carries none.

There is no checkpoint folder and no number in the name, so this is a folder layout whose run is
its one folder (``build_alone``): the folder is nanoGPT's when ``ckpt.pt`` is the only checkpoint
file in it, and its keys, where they can be read, are nanoGPT's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.base import FolderLayout
from ckptdoctor.layouts.content import confirmed_roles
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.model import TOP_LEVEL_NUMBER, Checkpoint, CheckpointFile, Entry, FileReport, Role, Run, Unit
from ckptdoctor.readers.files import expected_formats, with_keys
from ckptdoctor.readers.sniff import Format

CKPT = "ckpt.pt"
BUNDLED = (Role.MODEL, Role.OPTIMIZER)
_OWN_KEYS = frozenset({"model_args", "iter_num"})
"""Keys only nanoGPT's save holds beside ``model`` and ``optimizer``."""


class NanoGptLayout(FolderLayout):
    name = "nanogpt"
    vocabulary = ("nanoGPT", "--init_from", "ckpt.pt", "train.py", "out_dir")
    builds_on = ("torch",)
    default_unit = Unit.ITERATION
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE})
    resume_needs = frozenset(BUNDLED)

    def claim(self, name: str) -> Claim | None:
        return None  # no checkpoint folders: ``out_dir`` itself is the one save

    def claim_folders(self, folders: Sequence[tuple[Entry, Listing | None]]) -> dict[str, Claim]:
        return {}  # folders of ckpt.pt side by side are out_dirs of their own, never one run's saves

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        return BUNDLED if name == CKPT else None

    def signature(self, names: frozenset[str]) -> bool:
        """``ckpt.pt`` is the one checkpoint file in the folder (beside it, a hand-made loop's
        numbered saves make a run of their own)."""
        return CKPT in names and not any(expected_formats(name) is not None for name in names if name != CKPT)

    def measured(self, files: list[CheckpointFile]) -> list[CheckpointFile]:
        """The bundle's roles as its keys show them (a save without ``optimizer`` resumes nothing)."""
        measured = []
        for file in files:
            report = with_keys(file.entry, file.report)
            measured.append(CheckpointFile(file.entry, confirmed_roles(file.roles, report), file.prefix, report))
        return measured

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        return BUNDLED

    def build_alone(
        self, listing: Listing, probe: Callable[[Entry], FileReport], subfolder: Callable[[Entry], Listing | None]
    ) -> Run | None:
        run = super().build_alone(listing, probe, subfolder)
        if run is None or not run.checkpoints:
            return run
        (checkpoint,) = run.checkpoints
        report = next((f.report for f in checkpoint.files if f.entry.name == CKPT), None)
        if report is not None and report.keys_read and not _OWN_KEYS.issubset(report.keys):
            return None  # another program's ckpt.pt: not nanoGPT's, and no run of a layout ckptdoctor knows
        number = report.fact(f"{TOP_LEVEL_NUMBER}iter_num") if report is not None else None
        index = int(number) if number is not None and number.isdigit() else 0
        return dataclasses.replace(run, unit=Unit.ITERATION, checkpoints=(dataclasses.replace(checkpoint, index=index),))

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        return (
            f"run `python train.py <your config> --init_from=resume --out_dir={run.path}` (it loads {CKPT}); "
            f"copy {CKPT} aside first: the next save overwrites it in place, and a kill during that save leaves "
            "nothing to resume from"
        )
