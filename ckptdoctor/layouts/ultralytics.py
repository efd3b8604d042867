"""Ultralytics YOLO's trainer: ``runs/<task>/train<N>/weights/`` with ``last.pt``, ``best.pt`` and ``epoch<N>.pt``.

From the installed ultralytics 8.4.190 (``ultralytics/engine/trainer.py``, ``utils/torch_utils.py``,
``utils/patches.py``):

- ``BaseTrainer.save_model`` serializes one dict once and writes the same bytes, in place
  (``Path.write_bytes``), to ``weights/last.pt`` every epoch, ``weights/best.pt`` when the epoch is
  the best so far, and ``weights/epoch{N}.pt`` every ``save_period`` epochs (0-based, unpadded).
  The dict: ``epoch``, ``best_fitness``, ``model: None``, ``ema`` (the EMA model, a pickled
  ``nn.Module``), ``updates``, ``optimizer``, ``scaler``, ``train_args``, ``train_metrics``,
  ``train_results``, ``date``, ``version``... So ``last.pt`` and ``best.pt`` carry their epoch
  inside, not in their names: the run is indexed by the ``epoch`` each file records.
- When training ends, ``final_eval`` runs ``strip_optimizer`` on ``last.pt`` and ``best.pt``:
  ``model = ema`` in fp16, ``optimizer``, ``ema``, ``scaler``... set to None and ``epoch = -1``.
  ``YOLO(path).train(resume=True)`` (``engine/model.py``) then warns that it is "not a resumable
  training checkpoint" and starts a new training from its weights: such a file is finished, not
  damaged. It is the newest save of the run: it is placed after every epoch another file records.
- Resume: ``yolo train resume model=path/to/last.pt`` (``check_resume``); any whole training save
  (``best.pt``, ``epoch{N}.pt``) resumes the same way, from its epoch + 1.
- Loading: ``torch_load`` (``utils/patches.py``) passes ``weights_only=False``: the pickled model
  is a tree of Ultralytics' and torch's ``nn.Module`` classes, with the training arguments as an
  ``IterableSimpleNamespace``. ``OWN_OBJECTS`` vouches for exactly the classes real runs pickle.
- Metrics: ``save_dir/results.csv`` (``save_metrics``), one row per epoch, ``epoch`` 1-based.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence

from ckptdoctor.discover import Listing
from ckptdoctor.layouts._base import Claim, Layout, OwnObjects, Pointer, followed, group, loaded_copy
from ckptdoctor.model import (
    TOP_LEVEL_NUMBER,
    Checkpoint,
    CheckpointFile,
    Entry,
    FileReport,
    PointerKind,
    PointerWrite,
    Role,
    Run,
    Unit,
)
from ckptdoctor.readers.files import with_keys
from ckptdoctor.readers.sniff import Format

_NUMBERED = re.compile(r"^epoch([0-9]+)\.pt\Z")
LAST = "last.pt"
_RECORDED = frozenset({LAST, "best.pt"})
WEIGHTS = "weights"
BUNDLED = (Role.MODEL, Role.OPTIMIZER)
_EPOCH = f"{TOP_LEVEL_NUMBER}epoch"


_TORCH_MODULES = (
    "container.Sequential", "container.ModuleList", "conv.Conv2d", "batchnorm.BatchNorm2d",
    "activation.SiLU", "linear.Identity", "pooling.MaxPool2d", "upsampling.Upsample",
)  # fmt: skip
_OWN_MODULES = (
    "tasks.DetectionModel", "modules.head.Detect", "modules.conv.Conv", "modules.conv.DWConv",
    "modules.conv.Concat", "modules.block.Bottleneck", "modules.block.C2f", "modules.block.C3k",
    "modules.block.C3k2", "modules.block.SPPF", "modules.block.C2PSA", "modules.block.PSABlock",
    "modules.block.Attention", "modules.block.DFL",
)  # fmt: skip
OWN_OBJECTS = OwnObjects(
    loader="Ultralytics' own resume loads it with `torch_load` (`ultralytics/utils/patches.py`), which passes `weights_only=False`",
    unrestricted=True,
    # nn.Module trees, each node rebuilt plain (cls.__new__(cls), then BUILD). None of these
    # Ultralytics classes defines __new__, __setstate__ or __reduce__ (ultralytics 8.4.190,
    # nn/tasks.py, nn/modules/{head,conv,block}.py; their bases are nn.Module, C2f, C3 and Conv);
    # block.py's AAttn and distill_model.py's DistillationModel do, and are not here. Of torch's,
    # Module.__setstate__ updates __dict__ and adds the hook tables an old save lacks, and
    # _ConvNd's and Upsample's add one default attribute; none defines __new__. Exactly the
    # classes real detection saves of YOLO26, YOLO11 and YOLOv8 pickle (tests/data/ultralytics).
    classes=frozenset({
        *(f"torch.nn.modules.{name}" for name in _TORCH_MODULES),
        *(f"ultralytics.nn.{name}" for name in _OWN_MODULES),
    }),
    # the training arguments (`model.args`): a SimpleNamespace subclass (utils/__init__.py) with no
    # __init__, __new__ or __setstate__ of its own, pickled by SimpleNamespace's __reduce__ as
    # cls() then BUILD of its fields
    called_empty=frozenset({"ultralytics.utils.IterableSimpleNamespace"}),
)  # fmt: skip
"""What ``BaseTrainer.save_model`` pickles (its ``ema``: ``DetectionModel`` and its blocks, with
``args``) and ``strip_optimizer`` (the same model as ``model``), and how Ultralytics loads it back."""


class UltralyticsLayout(Layout):
    name = "ultralytics"
    builds_on = ("torch",)
    default_unit = Unit.EPOCH
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE})
    resume_needs = frozenset({Role.MODEL, Role.OPTIMIZER})
    whole_saves = True
    own_objects = OWN_OBJECTS
    claimable = re.compile(r"\.pt\Z")

    def recognises(self, entries: tuple[Entry, ...]) -> bool:
        # the trainer's own folder: save_dir/weights holding last.pt or best.pt
        return any(e.name in _RECORDED and os.path.basename(os.path.dirname(os.path.abspath(e.os_path))) == WEIGHTS for e in entries)

    def claim(self, name: str) -> Claim | None:
        match = _NUMBERED.match(name)
        return Claim(BUNDLED, int(match[1]), "epoch", Unit.EPOCH) if match else None

    def recorded(self, name: str) -> Claim | None:
        return Claim(BUNDLED, -1, name.partition(".")[0], Unit.EPOCH) if name in _RECORDED else None

    def pointer(self, name: str) -> Claim | None:
        # last.pt or best.pt whose epoch cannot be read (cut, unreadable): beside the run, judged alone
        return Claim((Role.POINTER,), 0, name.partition(".")[0]) if name in _RECORDED else None

    def build(
        self,
        listing: Listing,
        probe: Callable[[Entry], FileReport],
        claims: dict[str, Claim],
        subfolder: Callable[[Entry], Listing | None],
    ) -> Run | None:
        entries = {entry.name: entry for entry in listing.entries}
        indexed: dict[str, Claim] = {}
        finished: list[str] = []
        for name, claim in claims.items():
            if claim.number >= 0:
                indexed[name] = claim
                continue
            entry = entries[name]
            epoch = None if entry.is_dir or entry.dangling else _recorded_epoch(with_keys(entry, probe(entry)))
            if epoch is not None and epoch < 0:
                finished.append(name)
            elif epoch is not None:
                indexed[name] = claim._replace(number=epoch)
        after = max((claim.number for claim in indexed.values()), default=-1) + 1
        indexed.update({name: claims[name]._replace(number=after) for name in finished})
        return group(listing, self, probe, indexed) if indexed else None

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        """``last.pt``, what ``yolo train resume`` loads (``get_latest_run``: the newest
        ``last*.pt`` under ``runs/``): the save of the epoch it records, which may be older than
        the run's newest (a copy put back over it); gone from the run, missing: the resume then
        finds no checkpoint of this run. A cut one is no pointer: its own finding says so."""
        held = next(((c, f) for c in run.checkpoints for f in c.files if f.entry.name == LAST), None)
        if held is not None:
            checkpoint, last = held
            named = next((f.name for f in checkpoint.files if f is not last), LAST)
            return (Pointer(last, named, checkpoint.index, f"{LAST} (what `yolo train resume` loads)", copy=True),)
        if any(f.entry.name == LAST for f in run.loose_files):
            return ()
        return (Pointer(None, "", None, LAST),) if run.checkpoints else ()

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        """``last.pt`` as the trainer writes it: the same bytes as the save's other files."""
        if source is not None and source.entry.name != LAST:
            return None
        file = next((f for f in checkpoint.files if f.entry.name != LAST), None)
        return PointerWrite(LAST, os.path.basename(file.entry.os_path), PointerKind.COPY) if file is not None else None

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        cut = next((f for f in run.loose_files if f.entry.name == LAST), None)
        return loaded_copy(run, cut) if cut is not None else followed(run, self.pointers(run))

    def weights_only(self, saved: Sequence[Sequence[CheckpointFile]]) -> str | None:
        newest = [f for f in saved[-1] if _recorded_epoch(f.report) == -1] if saved else []
        if not newest:
            return None
        return f"training finished: strip_optimizer left {newest[0].name} with epoch -1 and no optimizer, nothing to resume"

    def metric_values(self, run: Run, root: str, metric: str, read: Callable[[str], bytes | None]) -> dict[int, float]:
        """``results.csv`` beside ``weights/``: one row per epoch, numbered from 1."""
        data = read(os.path.join(os.path.dirname(root), "results.csv"))
        try:
            lines = data.decode("utf-8").splitlines() if data is not None else []
        except UnicodeDecodeError:
            return {}
        if not lines:
            return {}
        header = [name.strip() for name in lines[0].split(",")]
        if "epoch" not in header or metric not in header:
            return {}
        values: dict[int, float] = {}
        for line in lines[1:]:
            cells = [cell.strip() for cell in line.split(",")]
            try:
                values[int(float(cells[header.index("epoch")])) - 1] = float(cells[header.index(metric)])
            except (ValueError, IndexError):
                continue
        return values

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        path = checkpoint.files[0].path
        if run.weights_only:
            return (
                f"training finished: nothing to resume (`yolo train resume` would start a new training from "
                f"{checkpoint.files[0].name}'s weights); to train on, start one: `yolo train model={path}`"
            )
        return f"`yolo train resume model={path}` (it goes on at epoch {checkpoint.index + 2} of the run's epochs, counted from 1)"


def _recorded_epoch(report: FileReport) -> int | None:
    value = report.fact(_EPOCH)
    return int(value) if value is not None and value.lstrip("-").isdigit() else None
