"""Consistency rules (CKD3xx): do a checkpoint's files fit each other, and the run's checkpoints one another?

These checks compare what the readers found inside files: optimizer state against the model's
parameters, optimizer kind, versions and precision, tensor names and shapes, values and devices.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import NamedTuple, cast

from ckptdoctor.bundles import ROLE_KEYS
from ckptdoctor.model import Checkpoint, Finding, Problem, Role, Severity, Tensor
from ckptdoctor.readers.dtypes import FLOATS
from ckptdoctor.rules.context import RunContext
from ckptdoctor.rules.rule import Rule, fires, fix
from ckptdoctor.units import counted

OPTIMIZER_MODEL_MISMATCH = Rule(
    code="CKD301",
    name="optimizer-model-mismatch",
    severity=Severity.ERROR,
    summary="The optimizer state does not match the model's parameters (count or shapes).",
    meaning=(
        "Optimizer state is kept per parameter, so it belongs to exactly one set of parameters. Here the optimizer file holds "
        "state for a different number of parameters, or for parameters of other sizes, than the model file of the same "
        "checkpoint. torch refuses to load it (`loaded state dict contains a parameter group that doesn't match the size of "
        "optimizer's group`); burn silently drops the state it cannot match and starts those moments from zero, so the "
        "resume works but part of the optimizer state is lost. ckptdoctor compares element counts, not shapes, because burn "
        "may store a parameter's state transposed."
    ),
    causes=(
        "The set of trainable parameters changed between save and resume: a freeze/unfreeze schedule, a fine-tuning flag, "
        "other LoRA targets, removed BatchNorm statistics. Model and optimizer files of different runs or epochs were mixed "
        "in one checkpoint. Another learner's optimizer file landed under this run's name. burn optimizer files written "
        "before PR #5177 still carry orphaned state from earlier resumes."
    ),
    fixes=(
        "If only {unit} {index} is affected, resume from an earlier {unit} whose files belong together.",
        "Resume with exactly the configuration that saved it (the same frozen layers, LoRA targets and training stage), so that the parameter groups line up.",
        "If the model changed on purpose, load only the weights and build a fresh optimizer: Adam moments restart from zero (expect a short loss spike), and the learning-rate schedule must be restored separately.",
        "Check that the model and optimizer files come from the same run and {unit}: `ckptdoctor verify {run}` shows the parameters each file covers.",
        "Give every learner its own checkpoint folder so that optimizer files of different models never share a name.",
    ),
    messages=(
        "loaded state dict contains a parameter group that doesn't match the size of optimizer's group",
        "loaded state dict has a different number of parameter groups",
        "Optimizer record tensors should carry a parameter id.",
    ),
    related=("CKD302", "CKD307", "CKD209", "CKD111"),
)

OPTIMIZER_CHANGED = Rule(
    code="CKD302",
    name="optimizer-changed",
    severity=Severity.WARNING,
    summary="The optimizer's kind or state layout changes between checkpoints of one run (Adam → SGD).",
    meaning=(
        "State saved by one optimizer does not carry over to another. burn gives no error at all: SGD resumed from Adam "
        "state keeps nothing useful, and Adam resumed from SGD state drops it and starts its moments from zero. torch fails "
        "on the first step with a `KeyError` for the state entry it expects (`'exp_avg'` when Adam meets SGD state). Within "
        "this run, checkpoints from before and after the change are not interchangeable: resuming an older one with the "
        "newer code, or the reverse, loses the optimizer state."
    ),
    causes=(
        "The optimizer was switched mid-training (SGD for warm-up then Adam, a config change before a resume). A setting that "
        "changes the state layout was flipped (AMSGrad, momentum on or off). Two scripts with different optimizers saved "
        "into one folder."
    ),
    fixes=(
        "Resume with the optimizer and settings that wrote the checkpoint you resume from; `ckptdoctor verify {run}` shows which kind each optimizer file holds.",
        "If the switch is intended, resume from the weights with a fresh optimizer and accept that its state starts from zero, and start a new run folder at the switch so the two phases are not mixed.",
        "Keep the optimizer's kind and settings in the run's saved config and compare them before resuming.",
    ),
    messages=("KeyError: 'exp_avg'",),
    related=("CKD301", "CKD303", "CKD101"),
)

FORMAT_VERSION_CHANGED = Rule(
    code="CKD303",
    name="format-version-changed",
    severity=Severity.WARNING,
    summary="The framework version or precision settings differ between checkpoints of one run.",
    meaning=(
        "The checkpoints of this run were not all written by the same framework version or with the same precision "
        "settings (burn recorder metadata, HF `transformers_version`, DeepSpeed `ds_version`, the float type of the "
        "tensors). Usually newer code still reads older files, but not always: recorder-era burn names the difference "
        "(`Metadata has a different Burn version`) when a record fails to load, and a precision change halves or doubles "
        "file sizes and changes the numbers after a resume."
    ),
    causes=(
        "The training environment was upgraded between a stop and a resume. Nodes or containers with different versions "
        "wrote checkpoints into one folder. Precision settings changed between runs sharing a folder (`CompactRecorder` half "
        "precision against full precision, fp16/bf16 flags)."
    ),
    fixes=(
        fix(
            "Resume with the framework version that wrote the checkpoint you resume from, and pin it in the environment.",
            slot="CKD303/resume-version",
        ),
        fix(
            "If you upgraded on purpose, check that the newest checkpoint loads with the new version before removing the old environment.",
            slot="CKD303/upgraded",
        ),
        "Keep one precision setting per run, and start a new run folder when you change it.",
        fix(slot="CKD303/recorder-era"),
    ),
    messages=("Metadata has a different Burn version",),
    related=("CKD112", "CKD210", "CKD302", "CKD307"),
)

NONFINITE_VALUES = Rule(
    code="CKD304",
    name="nonfinite-values",
    severity=Severity.ERROR,
    summary="A float tensor holds NaN or Inf values (`--deep`).",
    meaning=(
        "A NaN or Inf in the weights or the optimizer state poisons every step after a resume: the loss turns NaN at once and "
        "never recovers. The checkpoint was saved after training had already diverged, so it is no use as a resume point "
        "even though every file is intact."
    ),
    causes=(
        "The loss exploded (learning rate too high, no gradient clipping, fp16 overflow without loss scaling, a bad batch) and "
        "the run kept saving. A division by zero put NaN into the optimizer moments. More rarely, corruption flipped a "
        "float's exponent bits; CRC findings (CKD206) on the same file point that way."
    ),
    fixes=(
        "Resume from an earlier {unit} whose tensors are all finite; `ckptdoctor verify --deep {run}` checks every checkpoint.",
        fix(
            "Before resuming, lower the learning rate or add gradient clipping, and use loss scaling or bf16 instead of plain fp16.",
            slot="CKD304/before-resuming",
        ),
        "Stop saving diverged state: check the loss for NaN before each save, or stop early on the validation loss, so that good checkpoints are not rotated out by broken ones.",
        "Pin the resume point, the newest {unit} that passed, so that retention keeps it whatever is saved after it: `ckptdoctor prune {this_run} --keep {resume} --keep-last 2` (add `--dry-run` to see the plan first).",
    ),
    messages=(),
    related=("CKD206", "CKD208"),
)

DEVICE_BOUND = Rule(
    code="CKD305",
    name="device-bound",
    severity=Severity.INFO,
    summary="Tensors were saved from a CUDA or MPS device.",
    meaning=(
        "torch records each tensor's device in the checkpoint and, unless told otherwise, puts the tensor back on that device "
        "when loading. On a machine without it (a CPU-only host, a laptop, a CI runner) `torch.load` fails with `Attempting "
        "to deserialize object on a CUDA device …`. The file is fine; this is a note for whoever loads it elsewhere."
    ),
    causes=(
        "`torch.save` of tensors or a `state_dict` that lived on the GPU, the normal case during training. Multi-GPU ranks "
        "saving `cuda:1`-style devices, which fail on hosts with fewer GPUs. MPS tensors saved on a Mac."
    ),
    fixes=(
        fix("Load it with its tensors mapped to the CPU, or to the one GPU there is.", slot="CKD305/map-location"),
        fix(
            "To make checkpoints portable, move tensors to the CPU before saving, or save safetensors, which records no device.",
            slot="CKD305/portable",
        ),
        fix("If a GPU should be there, check that it is visible (`nvidia-smi`, `CUDA_VISIBLE_DEVICES`).", slot="CKD305/gpu-there"),
    ),
    messages=("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False",),
    related=("CKD306", "CKD210"),
)

WRAPPER_PREFIX = Rule(
    code="CKD306",
    name="wrapper-prefix",
    severity=Severity.INFO,
    summary="Every key starts with `module.` or `_orig_mod.`: the wrapper's state_dict was saved, not the model's.",
    meaning=(
        "`DistributedDataParallel` and `DataParallel` keep the real model under `.module`, and `torch.compile` keeps it under "
        "`._orig_mod`, so their `state_dict()` prefixes every key. Loading such a checkpoint into a bare model fails with "
        '`Missing key(s)` and `Unexpected key(s) in state_dict: "module.…"`, and loading a bare checkpoint into a wrapper '
        "fails the other way round. The weights are all there; only the names differ."
    ),
    causes=(
        "`torch.save(ddp_model.state_dict())` instead of `ddp_model.module.state_dict()`. Saving a `torch.compile`d model. "
        "Training code that saves from the wrapper while evaluation code loads into a plain model."
    ),
    fixes=(
        fix("Strip the prefix (`module.`, `_orig_mod.`) from every key when loading.", slot="CKD306/strip-prefix"),
        fix(slot="CKD306/torch-helper"),
        fix("Save the inner model from now on, not its wrapper.", slot="CKD306/save-inner"),
    ),
    messages=(
        'Unexpected key(s) in state_dict: "module.',
        'Unexpected key(s) in state_dict: "_orig_mod.',
    ),
    related=("CKD307", "CKD305"),
)

SHAPE_CHANGED = Rule(
    code="CKD307",
    name="shape-changed",
    severity=Severity.WARNING,
    summary="The model's tensor names or shapes change between checkpoints of one run.",
    meaning=(
        "Every checkpoint of one run should describe the same model. Here tensors appear, disappear or change shape from one "
        "checkpoint to another, so the code for one cannot load the others: torch fails with `size mismatch for …`, burn "
        "with `shape mismatch, expected …`, `Missing tensors` or `Unused tensors`. The folder mixes different models, or the "
        "model changed in the middle of the run."
    ),
    causes=(
        "The architecture or config changed between a stop and a resume (layers added, a head replaced, a wider hidden "
        "size). The vocabulary grew and the embeddings were resized. Two experiments saved into one folder. A naming change "
        "such as a wrapper prefix (CKD306)."
    ),
    fixes=(
        fix("Resume with the config that saved the checkpoint you resume from.", slot="CKD307/resume-config"),
        fix("If the vocabulary grew, resize the embeddings before loading.", slot="CKD307/resize-embeddings"),
        "Keep each model variant in its own run folder: move the other variant's checkpoints out of {run}.",
        "`ckptdoctor verify {run}` lists each checkpoint's tensors, to find the {unit} where the model changed.",
    ),
    messages=(
        "size mismatch for",
        "shape mismatch, expected",
        "Missing tensors:",
        "Unused tensors:",
        "Missing key(s) in state_dict",
        "Unexpected key(s) in state_dict",
        "Missing key in checkpoint state_dict",
    ),
    related=("CKD301", "CKD306", "CKD303", "CKD208"),
)


INDEX_MISMATCH = Rule(
    code="CKD308",
    name="index-mismatch",
    severity=Severity.ERROR,
    summary="A sharded checkpoint's index and its shards disagree: tensors missing, in another shard, or unlisted.",
    meaning=(
        "Sharded weights (`model-00001-of-00003.safetensors`, `pytorch_model-00001-of-00002.bin`) come with an index "
        "(`*.index.json`) whose `weight_map` names the shard of every tensor; loaders open the shard the index names and "
        "look the tensor up there. Here the index and the shards' own contents disagree: a tensor the index lists is not in "
        "the shard it names (loading fails with a missing key, or `tensor ... not found`), a shard holds tensors the index "
        "does not list (they are silently ignored), or `total_size` does not add up. ckptdoctor reads every shard's header "
        "and compares."
    ),
    causes=(
        "Shards of two different saves mixed in one folder (a re-save with another `max_shard_size` that left old shards or "
        "an old index behind). A save interrupted after some shards were rewritten. An index edited or regenerated by hand. "
        "A copy that took the index from one revision and the shards from another."
    ),
    fixes=(
        fix(
            "Re-save the model from a trusted copy with the library that wrote it, which writes matching shards and index together.",
            slot="CKD308/re-save",
        ),
        "If the shards are right and only the index is stale, rebuild the index from the shards' headers (every safetensors header lists its tensors), or re-save.",
        "Delete shards that no index names before copying a checkpoint elsewhere; `ckptdoctor verify {run}` then checks the rest.",
    ),
    messages=("File does not contain tensor",),
    related=("CKD105", "CKD307"),
)


RULES: tuple[Rule, ...] = (
    OPTIMIZER_MODEL_MISMATCH,
    OPTIMIZER_CHANGED,
    FORMAT_VERSION_CHANGED,
    NONFINITE_VALUES,
    DEVICE_BOUND,
    WRAPPER_PREFIX,
    SHAPE_CHANGED,
    INDEX_MISMATCH,
)


# --- checks: they compare what ``verify`` read inside files, and are silent after a header read ---

_KEYS = dict(ROLE_KEYS)
WRAPPERS = ("module.", "_orig_mod.")
_READABLE = frozenset({Problem.LEGACY, Problem.NON_WEIGHTS})
"""Problems that leave a file's tensors fit to compare."""
_TORCH_STATE = re.compile(r"^(?:(?P<outer>.+)\.)?state\.(?P<param>\d+)\.(?P<field>[^.]+)$")
_TORCH_KINDS: tuple[tuple[str, str], ...] = (
    ("max_exp_avg_sq", "adam-amsgrad"),
    ("exp_avg_sq_row", "adafactor"),
    ("exp_avg", "adam"),
    ("exp_inf", "adamax"),
    ("momentum_buffer", "sgd-momentum"),
    ("square_avg", "rmsprop"),
    ("acc_delta", "adadelta"),
    ("sum", "adagrad"),
)
"""State fields torch's optimizers keep, most telling first: they name the optimizer."""


class _Contents(NamedTuple):
    """One checkpoint's model and optimizer tensors, as verify read them."""

    model: list[Tensor]
    optimizer: list[Tensor]
    optimizer_kind: str | None


def _contents(checkpoint: Checkpoint) -> _Contents | None:
    model: list[Tensor] = []
    optimizer: list[Tensor] = []
    kind = None
    read = False
    for file in checkpoint.files:
        tensors = file.report.tensors
        roles = set(file.roles)
        if not roles & {Role.MODEL, Role.OPTIMIZER}:
            continue
        if tensors is None or file.report.problems - _READABLE:
            return None  # a part was not read whole: CKD2xx say why; comparing the rest would mislead
        read = True
        if Role.MODEL in roles:
            model += _part(tensors, file.report.keys, _KEYS[Role.MODEL], bundled=len(roles) > 1)
        if Role.OPTIMIZER in roles:
            optimizer += _part(tensors, file.report.keys, _KEYS[Role.OPTIMIZER], bundled=len(roles) > 1)
            kind = kind or file.report.fact("optimizer")
    if not read:
        return None
    return _Contents(model, optimizer, kind or _torch_kind(optimizer))


def _part(tensors: tuple[Tensor, ...], keys: tuple[str, ...], wanted: tuple[str, ...], bundled: bool) -> Sequence[Tensor]:
    """The tensors under the first of ``wanted`` keys the file has (DeepSpeed's ``module``,
    Lightning's ``state_dict``), names relative to it; a file of one role without such a key is
    all that part (a bare state dict)."""
    if not keys:
        return () if bundled else tensors
    key = next((k for k in wanted if k in keys), None)
    if key is None:
        return () if bundled else tensors
    prefix = f"{key}."
    return [t._replace(name=t.name[len(prefix) :]) for t in tensors if t.name.startswith(prefix)]


def _torch_kind(optimizer: list[Tensor]) -> str | None:
    fields = {m.group("field") for t in optimizer if (m := _TORCH_STATE.match(t.name))}
    return next((kind for field, kind in _TORCH_KINDS if field in fields), None)


_MIRRORS = frozenset({
    "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "exp_inf", "momentum_buffer", "square_avg", "sum", "acc_delta",
    "moment_1", "moment_2", "max_moment_2", "velocity",
})  # fmt: skip
"""State fields shaped like their parameter (torch's and burn's); factored or scalar state
(Adafactor's ``row_var``, ``step``) says nothing about the parameter's size."""


def _param_sizes(optimizer: list[Tensor]) -> dict[str, int]:
    """Elements of each parameter the optimizer keeps state for (burn: by param id; torch: by index)."""
    sizes: dict[str, int] = {}
    for tensor in optimizer:
        match = _TORCH_STATE.match(tensor.name)
        key = tensor.param if tensor.param is not None else match.group("param") if match else None
        if key is not None and tensor.name.rsplit(".", 1)[-1] in _MIRRORS:
            sizes.setdefault(key, tensor.numel)
    return sizes


def _read_checkpoints(ctx: RunContext) -> list[tuple[Checkpoint, _Contents]]:
    """Each checkpoint whose model and optimizer files verify read whole, with their tensors;
    worked out once per run and shared by every check of this family."""
    if _CONTENTS not in ctx.memo:
        ctx.memo[_CONTENTS] = [(c, contents) for c in ctx.run.checkpoints if (contents := _contents(c)) is not None]
    return cast(list[tuple[Checkpoint, _Contents]], ctx.memo[_CONTENTS])


_CONTENTS = "consistency.contents"


@fires(OPTIMIZER_MODEL_MISMATCH)
def optimizer_model_mismatch(ctx: RunContext) -> Iterator[Finding]:
    """CKD301: optimizer state for parameters the model of the same checkpoint does not have."""
    for checkpoint, contents in _read_checkpoints(ctx):
        if not contents.model or not contents.optimizer or ctx.layout.flat_optimizer(checkpoint):
            continue
        sizes = _param_sizes(contents.optimizer)
        burn_ids = {t.param: t.numel for t in contents.model if t.param is not None}
        if burn_ids and all(t.param is not None for t in contents.optimizer):
            wrong = [f"{key} ({n} elements)" for key, n in sizes.items() if burn_ids.get(key) != n]
            what = "parameter ids the model does not have, or of other sizes"
        else:
            available = Counter(t.numel for t in contents.model if t.dtype in FLOATS)
            wanted = Counter(sizes.values())
            wrong = [f"{n} elements (×{count - available[n]})" for n, count in wanted.items() if count > available[n]]
            what = "parameters of sizes the model does not have"
        if wrong:
            yield ctx.finding(
                OPTIMIZER_MODEL_MISMATCH,
                f"{ctx.run.unit.value} {checkpoint.index}: the optimizer keeps state for {counted(len(sizes), 'parameter')}, "
                f"including {what}: {', '.join(wrong[:3])}; the model has {counted(len(contents.model), 'tensor')}",
                index=checkpoint.index,
                path=checkpoint.files_for(Role.OPTIMIZER)[0].path,
            )


@fires(OPTIMIZER_CHANGED)
def optimizer_changed(ctx: RunContext) -> Iterator[Finding]:
    """CKD302: the optimizer's kind changes from one checkpoint to the next."""
    previous: tuple[int, str] | None = None
    for checkpoint, contents in _read_checkpoints(ctx):
        kind = contents.optimizer_kind
        if not kind or kind == "unknown":
            continue
        if previous and previous[1] != kind:
            yield ctx.finding(
                OPTIMIZER_CHANGED,
                f"{ctx.run.unit.value} {checkpoint.index} holds {kind} optimizer state, "
                f"{ctx.run.unit.value} {previous[0]} {previous[1]} state",
                index=checkpoint.index,
                path=checkpoint.files_for(Role.OPTIMIZER)[0].path,
            )
        previous = (checkpoint.index, kind)


@fires(FORMAT_VERSION_CHANGED)
def format_version_changed(ctx: RunContext) -> Iterator[Finding]:
    """CKD303: the burn version of records, or the model's float precision, changes between checkpoints."""
    previous: tuple[int, str] | None = None
    for checkpoint, contents in _read_checkpoints(ctx):
        models = checkpoint.files_for(Role.MODEL)
        if not models:
            continue
        report = models[0].report
        version = report.fact("version")
        if version:
            label = f"burn {version}"
        elif report.fact("precision") or report.fact("settings"):
            continue  # burn's own precision settings: CKD112 reports those
        else:
            label = ", ".join(sorted({t.dtype for t in contents.model if t.dtype in FLOATS}))
        if not label:
            continue
        if previous and previous[1] != label:
            yield ctx.finding(
                FORMAT_VERSION_CHANGED,
                f"{ctx.run.unit.value} {checkpoint.index}'s model is saved as {label}; {ctx.run.unit.value} {previous[0]}'s as {previous[1]}",
                index=checkpoint.index,
                path=models[0].path,
            )
        previous = (checkpoint.index, label)


@fires(DEVICE_BOUND)
def device_bound(ctx: RunContext) -> Iterator[Finding]:
    """CKD305: tensors saved from a GPU or MPS device (once per run)."""
    bound = [
        (file, devices)
        for report, kinds in ctx.by_report
        if (devices := sorted({t.device for t in report.tensors or () if t.device not in ("cpu", "meta")}))
        for kind in kinds
        for _, file in kind.files
    ]
    if bound:
        file, devices = bound[0]
        more = f" and {len(bound) - 1} more files" if len(bound) > 1 else ""
        yield ctx.finding(
            DEVICE_BOUND,
            f"{file.name}{more} hold tensors saved from {', '.join(devices)}: loading needs that device or map_location",
            path=file.path,
        )


@fires(WRAPPER_PREFIX)
def wrapper_prefix(ctx: RunContext) -> Iterator[Finding]:
    """CKD306: every model key carries a ``module.`` or ``_orig_mod.`` wrapper prefix (once per run)."""
    for checkpoint, contents in _read_checkpoints(ctx):
        names = [t.name for t in contents.model]
        wrapper = next((w for w in WRAPPERS if names and all(n.startswith(w) for n in names)), None)
        if wrapper:
            yield ctx.finding(
                WRAPPER_PREFIX,
                f"every model key starts with {wrapper!r} (saved from a wrapped model), from {ctx.run.unit.value} {checkpoint.index} on",
                index=checkpoint.index,
                path=checkpoint.files_for(Role.MODEL)[0].path,
            )
            return


@fires(SHAPE_CHANGED)
def shape_changed(ctx: RunContext) -> Iterator[Finding]:
    """CKD307: the model's tensor names or shapes differ from the checkpoint before."""
    previous: tuple[int, dict[str, tuple[int, ...]]] | None = None
    for checkpoint, contents in _read_checkpoints(ctx):
        shapes = {t.name: t.shape for t in contents.model}
        if not shapes:
            continue
        if previous and previous[1] != shapes:
            before = previous[1]
            added = sorted(shapes.keys() - before.keys())
            removed = sorted(before.keys() - shapes.keys())
            resized = [
                f"{n} {list(before[n])} → {list(shapes[n])}" for n in sorted(shapes.keys() & before.keys()) if shapes[n] != before[n]
            ]
            parts = [
                f"{len(v)} {label} ({', '.join(v[:3])})" for label, v in (("added", added), ("removed", removed), ("resized", resized)) if v
            ]
            yield ctx.finding(
                SHAPE_CHANGED,
                f"{ctx.run.unit.value} {checkpoint.index}'s model differs from {ctx.run.unit.value} {previous[0]}'s: {'; '.join(parts)}",
                index=checkpoint.index,
                path=checkpoint.files_for(Role.MODEL)[0].path,
            )
        previous = (checkpoint.index, shapes)


@fires(INDEX_MISMATCH)
def index_mismatch(ctx: RunContext) -> Iterator[Finding]:
    """CKD308: a shard index's ``weight_map`` against what each shard holds (shards read by verify)."""
    for checkpoint in ctx.run.checkpoints:
        for index_file in checkpoint.files_for(Role.SHARD_INDEX):
            mapping = index_file.report.weight_map
            shards = {f.name: f.report.tensors for f in checkpoint.files if f.report.tensors is not None}
            named = {shard for _, shard in mapping}
            if not mapping or not named & shards.keys():
                continue
            held = {t.name: shard for shard, tensors in shards.items() if shard in named for t in tensors or ()}
            problems = []
            absent = [t for t, shard in mapping if shard in shards and held.get(t) != shard]
            if absent:
                problems.append(
                    f"{counted(len(absent), 'tensor')} {'is' if len(absent) == 1 else 'are'} not in the shard it names ({', '.join(absent[:3])})"
                )
            listed = {t for t, _ in mapping}
            unlisted = sorted(set(held) - listed)
            if unlisted:
                problems.append(
                    f"{counted(len(unlisted), 'tensor')} in the shards {'is' if len(unlisted) == 1 else 'are'} not in it ({', '.join(unlisted[:3])})"
                )
            total = index_file.report.fact("total_size")
            actual = sum(f.report.tensor_bytes for f in checkpoint.files if f.name in named and f.report.format == "safetensors")
            if total and not problems and named <= shards.keys() and actual and int(total) != actual:
                problems.append(f"its total_size is {total} bytes but the shards hold {actual}")
            if problems:
                yield ctx.finding(
                    INDEX_MISMATCH,
                    f"{index_file.name} disagrees with its shards: {'; '.join(problems)}",
                    index=checkpoint.index,
                    path=index_file.path,
                )


CHECKS = (index_mismatch, optimizer_model_mismatch, optimizer_changed, format_version_changed, device_bound, wrapper_prefix, shape_changed)
