"""The fresh-run matrix (``matrix.py``) for ``tf.train.CheckpointManager`` (TensorFlow 2.21): a real
run of three ``manager.save()`` (``keras_tf_runs.tf_fit``: a Keras model, its Adam optimizer and a
step counter in a ``tf.train.Checkpoint``, ``max_to_keep=3``), in a child process.

The oracle is ``checkpoint.restore(prefix).assert_consumed()`` and a digest of the step, the
save counter, the weights and the optimizer's variables; the automatic pick is
``manager.latest_checkpoint``, which the state file ``checkpoint`` (the pointer) names, taken
from it unchecked. Both run in one long-lived child (``keras_tf_runs``: TensorFlow stays out of
the test process). A checkpoint is its prefix ``ckpt-N``: ``ckpt-N.index`` and
``ckpt-N.data-00000-of-00001``.

Killing inside TensorFlow's save: its bundles are written by C++ (``BundleWriter``,
``MergeBundles``), which killer cannot see, so ``native_writes.route_tensorflow`` runs them for
real into a scratch folder and puts their bytes in place through ``open`` under TensorFlow's own
names and order (checked byte for byte against TensorFlow's own files when the run is built):
the shard's data file and index staged as ``ckpt-4_temp/part-00000-of-00001.*.tempstate<n>``,
the merged ``ckpt-4.index``, then the state file through ``checkpoint.tmp<hex>``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

import pytest
from _frameworks_subprocess import Worker, run_function
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("needs tensorflow-cpu (pip install -e '.[tensorflow]')", allow_module_level=True)

STATE = "checkpoint"
_PREFIX = re.compile(r"^(ckpt-([0-9]+))\.(?:index|data-[0-9]{5}-of-[0-9]{5})\Z")
_tensorflow = Worker("keras_tf_runs", refused=Unrestorable)


def build(folder: Path) -> Path:
    run = folder / "manager"
    run_function("keras_tf_runs", "build", "tensorflow", str(run))
    return run


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(match[2]): run / match[1] for path in run.iterdir() if (match := _PREFIX.match(path.name))}


def restore(run: Path, prefix: Path) -> str:
    return str(_tensorflow("tf_restore", str(prefix)))


def latest_checkpoint(run: Path) -> Path | None:
    latest: str | None = _tensorflow("tf_latest", str(run))
    return None if latest is None else Path(latest)


def stale(run: Path) -> None:
    """The state file naming ``ckpt-4`` (as ``manager.save()`` writes it), a save that is not there."""
    state = run / STATE
    state.write_text(state.read_text().replace('"ckpt-3"', '"ckpt-4"'))


MANAGER = Fresh(
    name="checkpoint-manager",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=latest_checkpoint,
    save_more="import native_writes\nnative_writes.route_tensorflow()\nimport keras_tf_runs\nkeras_tf_runs.tf_fit(str(run), 4)",
    # the shard's data staged in ckpt-4_temp/ (3172 bytes: counters, Adam's moments at 1-15 %, the
    # weights at 16-23 %, the object graph): cut inside the weights; the merged index cut; the
    # state file staged whole, not yet renamed over `checkpoint`
    kill_points=(KillPoint(1, 0.2), KillPoint(3, 0.5), KillPoint(4, 1.0)),
    pointer=lambda run: run / STATE,
    stale=stale,
    files=lambda prefix: [prefix.with_name(prefix.name + ".index"), prefix.with_name(prefix.name + ".data-00000-of-00001")],
    inspect_blind={
        "zero-tail": "the data shard (3 KiB: zeroed whole, its length kept): inspect reads the index and each shard's "
        "length; verify --deep checks every tensor against the CRC-32C the index records"
    },
)

test_breakage, test_killed_mid_save = matrix_tests(
    importlib.metadata.version("tensorflow-cpu"),
    MANAGER,
)
