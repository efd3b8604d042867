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
  ``IterableSimpleNamespace``. ``OWN_OBJECTS`` vouches for the classes its own restricted loader
  admits whose rebuilding runs nothing more (``_REBUILT_PLAIN``).
- Metrics: ``save_dir/results.csv`` (``save_metrics``), one row per epoch, ``epoch`` 1-based.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.base import Layout
from ckptdoctor.layouts.content import OwnObjects
from ckptdoctor.layouts.copies import loaded_copy
from ckptdoctor.layouts.grouping import group
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.layouts.pointers import Pointer, followed
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


_REBUILT_PLAIN: dict[str, str] = {
    "torch.nn.modules.activation": (
        "CELU ELU GELU GLU Hardshrink Hardsigmoid Hardswish Hardtanh LeakyReLU LogSigmoid LogSoftmax Mish "
        "MultiheadAttention PReLU RReLU ReLU ReLU6 SELU SiLU Sigmoid Softmax Softmax2d Softmin Softplus "
        "Softshrink Softsign Tanh Tanhshrink Threshold"
    ),
    "torch.nn.modules.adaptive": "AdaptiveLogSoftmaxWithLoss",
    "torch.nn.modules.batchnorm": (
        "BatchNorm1d BatchNorm2d BatchNorm3d LazyBatchNorm1d LazyBatchNorm2d LazyBatchNorm3d SyncBatchNorm "
        "_BatchNorm _LazyNormBase _NormBase"
    ),
    "torch.nn.modules.channelshuffle": "ChannelShuffle",
    "torch.nn.modules.container": "ModuleDict ModuleList ParameterDict ParameterList Sequential",
    "torch.nn.modules.conv": (
        "Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d LazyConv1d LazyConv2d LazyConv3d "
        "LazyConvTranspose1d LazyConvTranspose2d LazyConvTranspose3d _ConvNd _ConvTransposeMixin "
        "_ConvTransposeNd"
    ),
    "torch.nn.modules.distance": "CosineSimilarity PairwiseDistance",
    "torch.nn.modules.dropout": "AlphaDropout Dropout Dropout1d Dropout2d Dropout3d FeatureAlphaDropout _DropoutNd",
    "torch.nn.modules.flatten": "Flatten Unflatten",
    "torch.nn.modules.fold": "Fold Unfold",
    "torch.nn.modules.instancenorm": (
        "InstanceNorm1d InstanceNorm2d InstanceNorm3d LazyInstanceNorm1d LazyInstanceNorm2d LazyInstanceNorm3d "
        "_InstanceNorm"
    ),
    "torch.nn.modules.linear": "Bilinear Identity LazyLinear Linear NonDynamicallyQuantizableLinear",
    "torch.nn.modules.loss": (
        "BCELoss BCEWithLogitsLoss CTCLoss CosineEmbeddingLoss CrossEntropyLoss GaussianNLLLoss "
        "HingeEmbeddingLoss HuberLoss KLDivLoss L1Loss LinearCrossEntropyLoss MSELoss MarginRankingLoss "
        "MultiLabelMarginLoss MultiLabelSoftMarginLoss MultiMarginLoss NLLLoss PoissonNLLLoss SmoothL1Loss "
        "SoftMarginLoss TripletMarginLoss TripletMarginWithDistanceLoss _Loss _WeightedLoss"
    ),
    "torch.nn.modules.module": "Module",
    "torch.nn.modules.normalization": "CrossMapLRN2d GroupNorm LayerNorm LocalResponseNorm RMSNorm",
    "torch.nn.modules.padding": (
        "CircularPad1d CircularPad2d CircularPad3d ConstantPad1d ConstantPad2d ConstantPad3d ReflectionPad1d "
        "ReflectionPad2d ReflectionPad3d ReplicationPad1d ReplicationPad2d ReplicationPad3d ZeroPad1d ZeroPad2d "
        "ZeroPad3d _CircularPadNd _ConstantPadNd _ReflectionPadNd _ReplicationPadNd"
    ),
    "torch.nn.modules.pixelshuffle": "PixelShuffle PixelUnshuffle",
    "torch.nn.modules.pooling": (
        "AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d "
        "AdaptiveMaxPool3d AvgPool1d AvgPool2d AvgPool3d FractionalMaxPool2d FractionalMaxPool3d LPPool1d "
        "LPPool2d LPPool3d MaxPool1d MaxPool2d MaxPool3d MaxUnpool1d MaxUnpool2d MaxUnpool3d _AdaptiveAvgPoolNd "
        "_AdaptiveMaxPoolNd _AvgPoolNd _LPPoolNd _MaxPoolNd _MaxUnpoolNd"
    ),
    "torch.nn.modules.rnn": "GRUCell LSTMCell RNNCell RNNCellBase",
    "torch.nn.modules.sparse": "Embedding EmbeddingBag",
    "torch.nn.modules.transformer": "Transformer TransformerDecoder TransformerEncoder",
    "torch.nn.modules.upsampling": "Upsample UpsamplingBilinear2d UpsamplingNearest2d",
    "torchvision.transforms.transforms": "CenterCrop Compose Normalize Resize ToTensor",
    "ultralytics.nn.modules.activation": "AGLU",
    "ultralytics.nn.modules.block": (
        "A2C2f ABlock AConv ADown Attention BNContrastiveHead Bottleneck BottleneckCSP C1 C2 C2PSA C2f C2fAttn "
        "C2fCIB C2fPSA C3 C3Ghost C3TR C3f C3k C3k2 C3x CBFuse CBLinear CIB ContrastiveHead DFL ELAN1 "
        "GhostBottleneck HGBlock HGStem ImagePoolingAttn MaxSigmoidAttnBlock PSA PSABlock Proto Proto26 RealNVP "
        "RepBottleneck RepC3 RepCSP RepNCSPELAN4 RepVGGDW ResNetBlock ResNetLayer Residual SAVPE SCDown SPP "
        "SPPELAN SPPF SwiGLUFFN TorchVision"
    ),
    "ultralytics.nn.modules.conv": (
        "CBAM ChannelAttention Concat Conv Conv2 ConvTranspose DWConv DWConvTranspose2d Focus GhostConv Index "
        "LightConv RepConv SpatialAttention"
    ),
    "ultralytics.nn.modules.head": (
        "Classify Depth Detect LRPCHead OBB OBB26 Pose Pose26 RTDETRDecoder Segment Segment26 SemanticSegment "
        "WorldDetect YOLOEDetect YOLOESegment YOLOESegment26 v10Detect"
    ),
    "ultralytics.nn.modules.transformer": (
        "AIFI DeformableTransformerDecoder DeformableTransformerDecoderLayer LayerNorm2d MLP MLPBlock "
        "MSDeformAttn TransformerBlock TransformerEncoderLayer TransformerLayer"
    ),
    "ultralytics.nn.tasks": (
        "BaseModel ClassificationModel DepthModel DetectionModel Ensemble OBBModel PoseModel "
        "RTDETRDetectionModel SegmentationModel SemanticSegmentationModel WorldModel YOLOEModel YOLOESegModel"
    ),
}  # fmt: skip
"""By module, the classes ``make_run.py classes`` (tests/data/ultralytics) lists from ultralytics 8.4.190
and torch 2.14: those Ultralytics' own restricted loader (``_SafeLoad.loading``, ``nn/tasks.py``,
what ``ULTRALYTICS_SAFE_LOAD=1`` loads with) admits by rule, every ``nn.Module`` subclass defined in
``torch.nn.modules.*``, ``ultralytics.nn.modules.*`` and ``ultralytics.nn.tasks``, and the
classification transforms it admits by name; less each one whose unpickling could run more than
``cls.__new__(cls)`` and ``nn.Module.__setstate__`` (its own ``__new__``, ``__setstate__``,
``__setattr__``, ``__reduce__``): Ultralytics' ``AAttn`` (its ``__setstate__`` computes), torch's RNNs,
``Container``, ``NLLLoss2d`` and transformer layers. The ``__setstate__`` of ``_ConvNd``,
``Upsample``, ``Softmax``, ``MultiheadAttention``... only set one missing attribute's default, and
stay. A whole list, not a trust of the module names: a class a later version adds is vouched for
once it is read."""
OWN_OBJECTS = OwnObjects(
    loader="Ultralytics' own resume loads it with `torch_load` (`ultralytics/utils/patches.py`), which passes `weights_only=False`",
    unrestricted=True,
    # the model of every task (detect, segment, classify, pose, obb...) is an nn.Module tree, each
    # node rebuilt plain (cls.__new__(cls), then BUILD); a classifier keeps its torchvision
    # preprocessing (`ClassificationModel.transforms`), whose resize mode is an enum member
    classes=frozenset(f"{module}.{name}" for module, names in _REBUILT_PLAIN.items() for name in names.split()),
    enums=frozenset({"torchvision.transforms.functional.InterpolationMode"}),
    # the training arguments (`model.args`): a SimpleNamespace subclass (utils/__init__.py) with no
    # __init__, __new__ or __setstate__ of its own, pickled by SimpleNamespace's __reduce__ as
    # cls() then BUILD of its fields
    called_empty=frozenset({"ultralytics.utils.IterableSimpleNamespace"}),
)
"""What ``BaseTrainer.save_model`` pickles (its ``ema``: ``DetectionModel`` and its blocks, with
``args``) and ``strip_optimizer`` (the same model as ``model``), and how Ultralytics loads it back."""


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD401/do-not-load": "Ultralytics pickles its model (`ema`; `model` once `strip_optimizer` ran) as a whole `nn.Module`, and its own loader (`torch_load` in `ultralytics/utils/patches.py`) loads it with `weights_only=False`, which runs the pickle: `yolo train resume` on it only for files your own training wrote, where nobody else could change them. ckptdoctor cannot prove such a file safe.",
        "CKD401/re-save": "To keep or share the weights without code, load the file with Ultralytics in a trusted, isolated environment and save `YOLO(path).model.state_dict()` with `safetensors.torch.save_file`.",
        "CKD402/save-plain": "Nothing to change in your code: Ultralytics' `save_model` pickles its model (`DetectionModel` and its blocks) and training arguments into every save itself, and `yolo train resume` loads them with `torch_load` (`weights_only=False`); to resume with `weights_only=True`, set `ULTRALYTICS_SAFE_LOAD=1`, whose restricted loader allows Ultralytics' and torch's module classes.",
        "CKD402/upgrade": "",
    }
)
"""Ultralytics' own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class UltralyticsLayout(Layout):
    name = "ultralytics"
    packages = ("ultralytics",)
    fix_wordings = _FIX_WORDINGS
    vocabulary = ("Ultralytics", "YOLO", "yolo train", "strip_optimizer", "results.csv")
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
