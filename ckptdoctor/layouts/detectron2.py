"""Detectron2 (``DefaultTrainer``, ``train_net.py``): ``model_<iteration:07d>.pth`` in ``OUTPUT_DIR``.

From facebookresearch/detectron2 (``detectron2/engine/defaults.py``, ``engine/hooks.py``,
``engine/train_loop.py``) and facebookresearch/fvcore (``fvcore/common/checkpoint.py``):

- ``PeriodicCheckpointer.step`` saves ``model_{iteration:07d}.pth`` when ``(iteration + 1) %
  CHECKPOINT_PERIOD == 0``: the number is the 0-based index of the iteration just run (after
  10000 iterations, ``model_0009999.pth``). At ``max_iter - 1`` it also saves ``model_final.pth``;
  ``max_to_keep`` deletes older periodic files, never ``*_final.pth``. ``BestCheckpointer`` saves
  ``model_best.pth`` through the same checkpointer. ``model_final`` and ``model_best`` carry
  their iteration inside only (``iteration``, the top-level key every save passes): they are
  indexed by it, and stand beside the run where it cannot be read.
- ``Checkpointer.save`` writes ``{model, <checkpointables>, **kwargs}`` with one ``torch.save``
  straight to the final name (no staging), then ``tag_last_checkpoint`` rewrites
  ``last_checkpoint`` with the file's **name** alone (``model_best.pth`` too, after a best save).
  ``DefaultTrainer`` registers ``trainer=``: the top level is ``{model, trainer, iteration}``,
  with the optimizer in ``trainer._trainer.optimizer`` (``SimpleTrainer.state_dict``) and the LR
  schedule in ``trainer.hooks.LRScheduler`` (``TrainerBase.state_dict``); ``plain_train_net.py``
  passes ``optimizer=`` and ``scheduler=`` at the top level instead.
- ``train_net.py --resume`` calls ``resume_or_load(resume=True)``: fvcore loads what
  ``last_checkpoint`` names, joined with ``OUTPUT_DIR`` (``get_checkpoint_file``), and the trainer
  goes on at ``iteration + 1``; without ``last_checkpoint`` it loads ``MODEL.WEIGHTS`` alone and
  starts at iteration 0. ``Checkpointer.load`` skips a checkpointable whose key is missing, and
  ``SimpleTrainer.load_state_dict`` fails on a ``_trainer`` without ``optimizer``.
- ``JSONWriter`` appends one JSON object per line to ``OUTPUT_DIR/metrics.json``, each with its
  ``iteration``; evaluation results land on the line of the iteration they were computed at.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.grouping import group
from ckptdoctor.layouts.metrics import logged_values
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.layouts.naming_file import NamedByFile, NamingFile
from ckptdoctor.layouts.pointers import followed
from ckptdoctor.model import TOP_LEVEL_NUMBER, Checkpoint, Entry, FileReport, Role, Run, Unit
from ckptdoctor.readers.files import with_keys
from ckptdoctor.readers.sniff import Format

_PERIODIC = re.compile(r"^model_([0-9]{7,})\.pth\Z")
_SAVED_BY_NAME = frozenset({"model_final.pth", "model_best.pth"})
"""Saves whose name carries no iteration: ``PeriodicCheckpointer``'s last, ``BestCheckpointer``'s."""
LAST = NamingFile("last_checkpoint", full_path=False)
METRICS = "metrics.json"
_SIGNATURE = frozenset({LAST.name, METRICS, "model_final.pth", "config.yaml"})
"""Files a Detectron2 trainer leaves in ``OUTPUT_DIR`` (``default_setup`` writes ``config.yaml``)."""
BUNDLED = (Role.MODEL, Role.OPTIMIZER)
"""``model`` and the trainer's optimizer; the LR schedule where the keys show it."""
_ITERATION = f"{TOP_LEVEL_NUMBER}iteration"


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD116/name-newest": "Or write the name of the newest complete checkpoint file into `last_checkpoint` in the output folder: `--resume` loads only what it names.",
    }
)
"""Detectron2's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class Detectron2Layout(NamedByFile):
    name = "detectron2"
    packages = ("detectron2", "fvcore")
    fix_wordings = _FIX_WORDINGS
    vocabulary = ("Detectron2", "fvcore", "train_net.py", "OUTPUT_DIR", "PeriodicCheckpointer", "resume_or_load")
    builds_on = ("torch",)
    default_unit = Unit.ITERATION
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE, Format.TEXT})
    resume_needs = frozenset({Role.MODEL, Role.OPTIMIZER})
    naming_file = LAST
    named_files = LAST.named_files
    whole_saves = True
    """``model_final.pth`` is saved at the same iteration as the last periodic file, where the
    period divides ``max_iter``; ``model_best.pth`` at an evaluated one."""

    claimable = re.compile(r"\.pth\Z")

    def claim(self, name: str) -> Claim | None:
        match = _PERIODIC.match(name)
        return Claim(BUNDLED, int(match[1]), "model", Unit.ITERATION) if match else None

    def recognises(self, entries: tuple[Entry, ...]) -> bool:
        # the torch layout reads model_0000099.pth as a model file of a hand-made loop
        return any(entry.name in _SIGNATURE for entry in entries)

    def build(
        self,
        listing: Listing,
        probe: Callable[[Entry], FileReport],
        claims: dict[str, Claim],
        subfolder: Callable[[Entry], Listing | None],
    ) -> Run | None:
        """The periodic saves, with ``model_final.pth`` and ``model_best.pth`` at the iteration they
        record (where it can be read: a cut one stands beside the run, with its own finding)."""
        recorded = dict(claims)
        for entry in listing.entries:
            if entry.name in _SAVED_BY_NAME and not entry.is_dir and not entry.dangling:
                iteration = with_keys(entry, probe(entry)).fact(_ITERATION)
                if iteration is not None and iteration.isdigit():
                    recorded[entry.name] = Claim(BUNDLED, int(iteration), entry.name.removesuffix(".pth"), Unit.ITERATION)
        return group(listing, self, probe, recorded)

    def pointer(self, name: str) -> Claim | None:
        if name in _SAVED_BY_NAME:
            return Claim((Role.POINTER,), 0, name.removesuffix(".pth"))  # its iteration could not be read
        return super().pointer(name)

    def resume_path(self, run: Run, checkpoint: Checkpoint) -> str:
        return next((f.path for f in checkpoint.files if Role.TEMP not in f.roles), run.path)

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        name = os.path.basename(self.resume_path(run, checkpoint))
        goes_on = f"goes on at iteration {checkpoint.index + 1}"
        if followed(run, self.pointers(run)) is checkpoint:
            return f"run `train_net.py --resume` with `OUTPUT_DIR {run.path}` (`trainer.resume_or_load(resume=True)`): it loads {name} through {LAST.name} and {goes_on}"
        return (
            f"write `{name}` into {run.path}/{LAST.name} (what `ckptdoctor repair` does), then run `train_net.py --resume` "
            f"with `OUTPUT_DIR {run.path}`: `--resume` loads only what {LAST.name} names, and {goes_on}"
        )

    def metric_values(self, run: Run, root: str, metric: str, read: Callable[[str], bytes | None]) -> dict[int, float]:
        """``metrics.json``'s rows by ``iteration`` (evaluation results on the iteration they were computed at)."""
        return logged_values(read(os.path.join(root, METRICS)), metric, "iteration")
