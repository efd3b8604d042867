"""The fresh-run matrix (``matrix.py``) for burn's ``FileCheckpointer`` (burnpack era).

burn is a Rust framework: nothing here can run its save or its load. The run is the layout of
burn-format reference §2.1 and §5 (``<artifact>/checkpoint/{model,optim,scheduler}-<E>.bpk``,
epochs 1-3 kept, as ``KeepLastNCheckpoints::new(3)`` keeps them). Each ``model-E.bpk`` is the
real burn-written ``mnist-model.bpk`` (``shared_corpus.mnist_model``) with its tensor values changed
per epoch, as training changes them (its header, CBOR and padding are burn's bytes); the optimizer
(Adam, §11.6) and scheduler (Linear, §11.7) records are written with
``ckptdoctor.testing.burnpack``, byte for byte as §11 specifies.

The oracle is burn's loading as the reference documents it (§7.1, §11.4): ``.checkpoint(E)``
loads ``model-E``, ``optim-E`` and ``scheduler-E`` and panics unless all three load. A record
loads where its 10-byte header has the magic and a version ≤ 1, its CBOR metadata decodes with a
``tensors`` map, the file holds ``10 + M + max(end)`` bytes, and each tensor's view over
``[D + start, D + end)`` exists (D the 256-aligned data start; a file cut inside the last
``D - (10 + M)`` bytes is UNVERIFIED in the reference and taken as failing). The model record is
strict (missing, unused or reshaped tensors panic); the optimizer's state for a parameter whose
leaves cannot be rebuilt, and a scheduler whose scalars do not decode, are silently started
afresh. burn has no automatic resume (the user passes ``.checkpoint(E)``), and no Python save to
kill: the killed-mid-save breakage is left out.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

import pytest
from matrix import Fresh, Unrestorable, ckptdoctor, matrix_tests, tensors_digest
from shared_corpus import mnist_model

from ckptdoctor.testing import BurnModel, Tensor, burnpack

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

cbor2 = pytest.importorskip("cbor2")
np = pytest.importorskip("numpy")


REFERENCE = "burnpack-v1"
"""The record format the run and the oracle follow (it keys the cached run)."""
ROLES = ("model", "optim", "scheduler")
_NAME = re.compile(r"^(model|optim|scheduler)-([0-9]+)\.bpk\Z")
STEPS = 4
"""Optimizer steps an epoch (Adam's ``momentum.time``, the Linear scheduler's ``remaining_iters``)."""


def _header(data: bytes) -> tuple[int, dict[str, Any]]:
    """The data start D and the CBOR metadata, as ``Reader`` checks them (§11.1, §11.4)."""
    if len(data) < 10:
        raise Unrestorable("header shorter than 10 bytes")
    magic, version, size = struct.unpack_from("<4sHI", data)
    if magic != b"NRUB" or version > 1 or size > 100 * 2**20 or len(data) < 10 + size:
        raise Unrestorable(f"bad header: magic {magic!r}, version {version}, metadata {size} bytes")
    try:
        metadata = cbor2.loads(data[10 : 10 + size])
    except Exception as error:
        raise Unrestorable(f"CBOR: {error}") from error
    if not isinstance(metadata, dict) or not isinstance(metadata.get("tensors"), dict):
        raise Unrestorable("no tensors map")
    ends = [descriptor["data_offsets"][1] for descriptor in metadata["tensors"].values()]
    if len(data) < 10 + size + max(ends, default=0):
        raise Unrestorable("file shorter than its tensors")
    return -(-(10 + size) // 256) * 256, metadata


def _tensors(data: bytes) -> tuple[dict[str, tuple[Any, ...]], dict[str, Any]]:
    """Each tensor's (dtype, shape, param_id, bytes), and the metadata."""
    start, metadata = _header(data)
    found = {}
    for name, descriptor in metadata["tensors"].items():
        begin, end = descriptor["data_offsets"]
        if end < begin or len(data) < start + end:
            raise Unrestorable(f"{name}: no view over [{begin}, {end})")
        found[name] = (descriptor["dtype"], tuple(descriptor["shape"]), descriptor.get("param_id"), data[start + begin : start + end])
    return found, metadata


def _load(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise Unrestorable(f"Can load {path.name}: {error}") from error


# --- the run ------------------------------------------------------------------------------------


def _values(rng: Any, size: int) -> bytes:
    """``size`` bytes of small finite float32 values."""
    return bytes(rng.normal(0.0, 0.05, size // 4).astype("<f4").tobytes())


def _trained(data: bytes, seed: int) -> bytes:
    """``data`` with every (float32) tensor's values drawn anew (``seed``), the container kept."""
    start, metadata = _header(data)
    out = bytearray(data)
    rng = np.random.default_rng(seed)
    for descriptor in metadata["tensors"].values():
        begin, end = descriptor["data_offsets"]
        out[start + begin : start + end] = _values(rng, end - begin)
    return bytes(out)


def _optimizer(model: bytes, seed: int, epoch: int) -> bytes:
    """Adam's record for the model's parameters (§11.6): ``<id>.momentum.moment_{1,2}`` tensors,
    ``<id>.momentum.time`` and ``<id>.__rank`` scalars, metadata ``<id>`` -> the parameter's path.
    BatchNorm's running statistics are no parameters: they have no state."""
    rng = np.random.default_rng(seed)
    tensors, scalars, metadata = {}, {}, {}
    for name, (dtype, shape, param_id, values) in _tensors(model)[0].items():
        if name.rsplit(".", 1)[1].startswith("running_"):
            continue
        for leaf in ("momentum.moment_1", "momentum.moment_2"):
            tensors[f"{param_id}.{leaf}"] = Tensor(dtype, shape, param_id, _values(rng, len(values)))
        scalars[f"{param_id}.momentum.time"] = {"UInt": STEPS * epoch}
        scalars[f"{param_id}.__rank"] = {"UInt": len(shape)}
        metadata[str(param_id)] = name
    return burnpack(tensors, scalars, metadata)


def build(folder: Path) -> Path:
    artifact = folder / "artifact"
    checkpoint = artifact / "checkpoint"
    checkpoint.mkdir(parents=True)
    real = mnist_model()
    for epoch in (1, 2, 3):
        model = _trained(real, seed=epoch)
        records = {
            "model": model,
            "optim": _optimizer(model, 100 + epoch, epoch),
            "scheduler": BurnModel.scheduler_record(100 - STEPS * epoch),
        }
        for role in ROLES:  # LearningCheckpointer's Save: model, then optim, then scheduler
            (checkpoint / f"{role}-{epoch}.bpk").write_bytes(records[role])
    (artifact / "experiment.log").write_text("2026-12-02T10:00:00Z INFO training finished\n")
    return artifact


def checkpoints(run: Path) -> dict[int, Path]:
    found = (_NAME.match(path.name) for path in (run / "checkpoint").iterdir())
    return {int(match[2]): run / "checkpoint" / match[0] for match in found if match and match[1] == "model"}


def members(path: Path) -> list[Path]:
    match = _NAME.match(path.name)
    assert match is not None, path
    return [path.with_name(f"{role}-{match[2]}.bpk") for role in ROLES]


# --- the oracle ---------------------------------------------------------------------------------


def _told(artifact: Path) -> Path:
    """burn resumes an index in its artifact folder, which is what ``--resume-path`` prints: the
    epoch is the ``.checkpoint(E)`` ckptdoctor's resume hint tells the user to pass."""
    _, report = ckptdoctor("inspect", "--json", artifact)
    assert isinstance(report, dict)
    (run,) = report["runs"]
    told = re.search(r"\.checkpoint\(([0-9]+)\)", run["resume"]["how"] if run["resume"] else "")
    if told is None:
        raise Unrestorable(f"no .checkpoint(E) told for {artifact}")
    return artifact / "checkpoint" / f"model-{told[1]}.bpk"


def restore(run: Path, path: Path) -> str:
    """``.checkpoint(E)`` for the epoch of ``path`` (any of its three records, or the artifact
    folder with the epoch ckptdoctor tells): the model (strict against the run's module: the
    healthy epoch 1's tensors), the optimizer's rebuilt states and the scheduler's, each as burn's
    loaders take them."""
    model_path, optim_path, scheduler_path = members(_told(path) if path.is_dir() else path)
    module = {name: (dtype, shape) for name, (dtype, shape, _, _) in _tensors(_trained(mnist_model(), 1))[0].items()}
    model = _tensors(_load(model_path))[0]
    missing, unused = sorted(set(module) - set(model)), sorted(set(model) - set(module))
    reshaped = sorted(name for name in set(module) & set(model) if model[name][:2] != module[name])
    if missing or unused or reshaped:
        raise Unrestorable(f"Missing tensors: {missing}, Unused tensors: {unused}, Apply errors: {reshaped}")
    optimizer_tensors, optimizer_metadata = _tensors(_load(optim_path))
    states = {}
    for param_id in {str(param_id) for _, _, param_id, _ in model.values()}:
        leaves = [optimizer_tensors.get(f"{param_id}.momentum.moment_{i}") for i in (1, 2)]
        time = optimizer_metadata.get("scalars", {}).get(f"{param_id}.momentum.time", {})
        if all(leaves) and "UInt" in time:  # else the state is dropped and started afresh
            states[param_id] = (leaves, time["UInt"])
    scheduler = _header(_load(scheduler_path))[1].get("scalars", {}).get("0.remaining_iters", {}).get("UInt")
    return tensors_digest({name: values for name, (*_, values) in model.items()}, repr(sorted(states.items())), scheduler)


BURN = Fresh(
    name="burn",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=None,
    save_more="",  # burn's save is Rust (burn_pack::Writer::write_to_file): no Python save to kill
    state=lambda model: members(model)[1],
    files=members,
)

test_breakage, test_killed_mid_save = matrix_tests(
    REFERENCE,
    BURN,
    expected_failures={
        "burn-zero-tail": "a zeroed last 4 KiB of optim-3.bpk is only CKD212 (warning): ckptdoctor still resumes from epoch 3, "
        "whose Adam moments burn loads zeroed without a word (burnpack has no checksum)",
        "burn-torn-copy": "a torn optim-3.bpk (epoch 3's head, optim-2.bpk's tail, byte for byte) is called whole: "
        "burn loads the mixed Adam state without a word (burnpack has no checksum)",
    },
)
