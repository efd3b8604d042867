"""Write checkpoints for tests, benchmarks and examples: burn's by the burnpack specification,
and small HF Trainer ``checkpoint-N/`` folders.

burn is a Rust framework, so there is no Python writer to call; this follows the byte layout
of burn-format reference §11 (checked against a real burn-written file in the test suite).
"""

from __future__ import annotations

import json
import os
import random
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import prod

import cbor2

ALIGNMENT = 256
DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1}


@dataclass(frozen=True)
class Tensor:
    dtype: str
    shape: tuple[int, ...]
    param_id: int | None = None
    data: bytes | None = None
    """Raw little-endian bytes; zeros of the right length when None."""

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * DTYPE_SIZES[self.dtype]


def burnpack(
    tensors: Mapping[str, Tensor],
    scalars: Mapping[str, Mapping[str, object]] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> bytes:
    """A burnpack file: tensors are laid out in the mapping's order, names sorted in the CBOR."""
    descriptors: dict[str, dict[str, object]] = {}
    blobs: list[tuple[int, bytes]] = []
    offset = 0
    for name, tensor in tensors.items():
        data = tensor.data if tensor.data is not None else bytes(tensor.nbytes)
        descriptor: dict[str, object] = {
            "dtype": tensor.dtype,
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        if tensor.param_id is not None:
            descriptor["param_id"] = tensor.param_id
        descriptors[name] = descriptor
        blobs.append((offset, data))
        offset = _aligned(offset + len(data))
    document: dict[str, object] = {"tensors": dict(sorted(descriptors.items()))}
    if metadata:
        document["metadata"] = dict(metadata)
    if scalars:
        document["scalars"] = dict(scalars)
    encoded = cbor2.dumps(document)
    header = struct.pack("<4sHI", b"NRUB", 1, len(encoded)) + encoded
    start = _aligned(len(header))
    out = bytearray(header)
    out += bytes(start - len(out))
    for relative, data in blobs:
        out += bytes(start + relative - len(out))
        out += data
    return bytes(out)


@dataclass(frozen=True)
class BurnModel:
    """A model's parameters (name -> shape) with stable burn ParamIds."""

    params: Mapping[str, tuple[int, ...]]
    dtype: str = "F32"
    seed: int = 0

    def ids(self) -> dict[str, int]:
        rng = random.Random(self.seed)
        return {name: rng.getrandbits(64) for name in self.params}

    def model_record(self) -> bytes:
        ids = self.ids()
        return burnpack({name: Tensor(self.dtype, shape, ids[name]) for name, shape in self.params.items()})

    def optimizer_record(self, optimizer: str = "adam", step: int = 1) -> bytes:
        """burn's optimizer record (§11.6): ``<id>.<state field>`` tensors, ``__rank`` scalars."""
        fields = {"adam": ("momentum.moment_1", "momentum.moment_2"), "sgd-momentum": ("momentum.velocity",), "sgd": ()}[optimizer]
        tensors: dict[str, Tensor] = {}
        scalars: dict[str, Mapping[str, object]] = {}
        metadata: dict[str, str] = {}
        for name, param_id in self.ids().items():
            shape = self.params[name]
            for leaf in fields:
                tensors[f"{param_id}.{leaf}"] = Tensor(self.dtype, shape, param_id)
            if optimizer == "adam":
                scalars[f"{param_id}.momentum.time"] = {"UInt": step}
            scalars[f"{param_id}.__rank"] = {"UInt": len(shape)}
            metadata[str(param_id)] = name
        return burnpack(tensors, scalars, metadata)

    @staticmethod
    def scheduler_record(remaining: int = 97) -> bytes:
        return burnpack({}, {"0.remaining_iters": {"UInt": remaining}})


SMALL_MODEL = BurnModel({"fc1.weight": (16, 8), "fc1.bias": (16,), "fc2.weight": (4, 16), "fc2.bias": (4,)})


def write_burn_run(
    folder: str | os.PathLike[str],
    epochs: Iterable[int],
    model: BurnModel = SMALL_MODEL,
    optimizer: str = "adam",
    roles: Sequence[str] = ("model", "optim", "scheduler"),
) -> None:
    """A burn ``checkpoint/`` folder with ``roles`` saved for each epoch."""
    os.makedirs(folder, exist_ok=True)
    records = {
        "model": model.model_record(),
        "optim": model.optimizer_record(optimizer),
        "scheduler": model.scheduler_record(),
    }
    for epoch in epochs:
        for role in roles:
            with open(os.path.join(folder, f"{role}-{epoch}.bpk"), "wb") as handle:
                handle.write(records[role])


def write_hf_checkpoints(folder: str | os.PathLike[str], steps: Iterable[int]) -> None:
    """Minimal, complete HF Trainer ``checkpoint-N/`` folders (no Trainer run: fast): a
    safetensors model, optimizer and scheduler pickles, and ``trainer_state.json``."""

    # only HF runs need numpy and safetensors
    import numpy as np
    from safetensors.numpy import save_file

    for step in steps:
        checkpoint = os.path.join(folder, f"checkpoint-{step}")
        os.makedirs(checkpoint, exist_ok=True)
        with open(os.path.join(checkpoint, "trainer_state.json"), "w", encoding="utf-8") as handle:
            json.dump({"global_step": step, "log_history": []}, handle)
        save_file({"w": np.zeros(2, np.float32)}, os.path.join(checkpoint, "model.safetensors"))
        for name in ("optimizer.pt", "scheduler.pt"):
            with open(os.path.join(checkpoint, name), "wb") as handle:
                handle.write(b"\x80\x02}q\x00.")  # an empty dict, pickled as torch.save's legacy pickles are


def _aligned(offset: int) -> int:
    return -(-offset // ALIGNMENT) * ALIGNMENT
