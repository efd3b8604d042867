"""The fresh-run matrix (``matrix.py``) for Orbax (orbax-checkpoint on JAX, CPU): a real
``CheckpointManager`` saving a linear model and a hand-written Adam's state (shaped as optax's)
at steps 1, 2 and 3 (``frameworks.orbax_train``), each step one ``StandardSave`` PyTree: the
optimizer's state is in the same OCDBT store as the weights, and Orbax keeps no pointer.

The oracle is ``manager.restore(step, args=StandardRestore())`` (a read-only manager on the
step's folder's parent), and a digest of every array it restores; the automatic pick is
``manager.latest_step()``.

Killing inside Orbax's save: its arrays are written by TensorStore (C++), which killer cannot
see, but the rest of the save is Python's: a step is written into ``<step>.orbax-checkpoint-tmp/``
(``_CHECKPOINT_METADATA``, then the item's ``array_metadatas/process_0``, ``_METADATA`` and
``commit_success.txt``, ``_CHECKPOINT_METADATA`` again as ``AtomicRenameTemporaryPath.finalize``
records the commit, and the step's ``commit_success.txt``), which is then renamed to ``<step>``
(``orbax/checkpoint/_src/path/atomicity.py``). killer counts those files: the kills land after
TensorStore's writes began, inside the item's metadata, and just before the rename.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest
from frameworks import orbax_train
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

REASON = "real Orbax checkpoints need the orbax extra: pip install -e '.[orbax]'"
ocp = pytest.importorskip("orbax.checkpoint", reason=REASON)
np = pytest.importorskip("numpy")


def build(folder: Path) -> Path:
    run = folder / "run"
    orbax_train(run, 3)
    return run


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(path.name): path for path in run.iterdir() if path.is_dir() and path.name.isdigit()}


def _manager(directory: Path) -> Any:
    return ocp.CheckpointManager(directory.resolve(), options=ocp.CheckpointManagerOptions(read_only=True))


def restore(run: Path, path: Path) -> str:
    """``manager.restore(<its step>)`` on the folder that holds ``path``."""
    if not path.name.isdigit():
        raise Unrestorable(f"{path.name} is no step: manager.restore takes a step number")
    try:
        with _manager(path.parent) as manager:
            restored = manager.restore(int(path.name), args=ocp.args.StandardRestore())
    except Exception as error:  # Orbax and TensorStore raise many unrelated types on damaged steps
        raise Unrestorable(f"{type(error).__name__}: {str(error)[:300]}") from error
    return tensors_digest(_arrays(restored))


def _arrays(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {key: _arrays(value) for key, value in tree.items()}
    return np.asarray(tree)


def latest_step(run: Path) -> Path | None:
    with _manager(run) as manager:
        step = manager.latest_step()
    return None if step is None else run / str(step)


ORBAX = Fresh(
    name="orbax",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=latest_step,
    save_more="from frameworks import orbax_train\norbax_train(run, 4)",
    kill_points=(KillPoint(2, 0.5), KillPoint(3, 0.5), KillPoint(7, 1.0)),
    inspect_blind={
        breakage: f"{damage} the largest OCDBT data file of step 3 (zstd-compressed values, no checksum of their own): "
        "inspect walks the manifest and reads no value; verify --deep decompresses every one (CKD207)"
        for breakage, damage in (("zero-tail", "zeros over the end of"), ("torn-copy", "step 2's tail under"))
    },
)

test_breakage, test_killed_mid_save = matrix_tests(importlib.metadata.version("orbax-checkpoint"), ORBAX)
