"""Real files written by other projects: ``../shared/corpus`` beside the project's root where it
is (CI has it), else the part of it committed in ``tests/data/corpus``, so that a clone without
``../shared`` runs the same tests (see the README there for what is left out)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpus"
COMMITTED = Path(__file__).resolve().parent / "data" / "corpus"
CORPUS = SHARED if SHARED.is_dir() else COMMITTED
"""The corpus the tests read."""


def mnist_model() -> bytes:
    """burn's own ``mnist-model.bpk`` (tracel-ai/burn ``examples/mnist-inference-web/model.bpk``):
    the real file where ``../shared`` is; elsewhere burn's bytes up to its tensors (header, CBOR
    metadata and padding, committed) followed by seeded float32 values in the tensors' places, as
    many bytes as the real file holds. What the tests read of it is its layout, never its values."""
    real = SHARED / "burn" / "mnist-model.bpk"
    if real.is_file():
        return real.read_bytes()
    head = (COMMITTED / "burn" / "mnist-model.head.bpk").read_bytes()
    import cbor2

    (metadata_size,) = struct.unpack_from("<I", head, 6)
    tensors = cbor2.loads(head[10 : 10 + metadata_size])["tensors"].values()
    size = max(tensor["data_offsets"][1] for tensor in tensors)
    values = np.random.default_rng(0).uniform(-0.1, 0.1, size // 4).astype("<f4")
    return head + values.tobytes()
