"""Keras 3 and ``tf.train.CheckpointManager`` runs for the fresh-run matrix, and the frameworks'
own restores of them: imported only in child processes (TensorFlow stays out of the test
process), by the run builders, by :class:`_frameworks_subprocess.Worker` and by ``save_more``.

Every run trains the same tiny model (``Dense(8)``, ``Dense(2)``, Adam, MSE) on the same 32
samples, 4 steps an epoch. A restore returns a digest (``matrix.tensors_digest``) of what the
framework restored: the epoch ``fit`` goes on at (or the step counter), the weights and the
optimizer's variables (``iterations`` and Adam's moments); it raises :class:`Refused` where the
framework fails.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import keras
import native_writes
import numpy as np
import tensorflow as tf
from _frameworks_subprocess import Refused
from keras.src.utils import file_utils
from matrix import tensors_digest

_DATA = np.random.default_rng(0)
X, Y = _DATA.random((32, 4), dtype=np.float32), _DATA.random((32, 2), dtype=np.float32)
BATCH = 8
"""4 steps an epoch."""
KERAS_FILE = re.compile(r"^ep([0-9]+)\.keras\Z")
TEMPLATE = "ep{epoch:02d}.keras"
WEIGHTS, RECORD, PREVIOUS = "latest.weights.h5", "training_metadata.json", ".bkp"
BACKUP_OPTIONS = {"double_checkpoint": True, "delete_checkpoint": False}


def model() -> Any:
    keras.backend.clear_session()  # layer names and seeds as in a fresh process
    keras.utils.set_random_seed(0)
    built = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    built.compile(optimizer="adam", loss="mse")
    return built


def _fit(trained: Any, **arguments: Any) -> None:
    trained.fit(X, Y, batch_size=BATCH, verbose=0, **arguments)


# --- ModelCheckpoint: one .keras file an epoch --------------------------------------------------


def keras_files(folder: str) -> dict[int, Path]:
    return {int(match[1]): path for path in Path(folder).iterdir() if (match := KERAS_FILE.match(path.name))}


def checkpoint_fit(folder: str, epochs: int) -> None:
    """``fit`` with ``ModelCheckpoint(folder/ep{epoch:02d}.keras)`` up to ``epochs``, resumed as a
    script resumes (Keras picks nothing): ``load_model`` of the highest-numbered file there, then
    ``fit(initial_epoch=its number)``."""
    saved = keras_files(folder) if os.path.isdir(folder) else {}
    trained = keras.saving.load_model(saved[max(saved)]) if saved else model()
    callback = keras.callbacks.ModelCheckpoint(os.path.join(folder, TEMPLATE))
    _fit(trained, epochs=epochs, initial_epoch=max(saved, default=0), callbacks=[callback])


def keras_file_restore(path: str) -> str:
    """``keras.saving.load_model(path)``, then ``fit(initial_epoch=<the number in its name>)``:
    what it holds when the first epoch begins."""
    match = KERAS_FILE.match(os.path.basename(path))
    if match is None:
        raise Refused(f"{path}: no epoch in its name to pass as initial_epoch")
    with _refused():
        keras.backend.clear_session()
        loaded = keras.saving.load_model(path)
        return _begun(loaded, epochs=int(match[1]) + 1, initial_epoch=int(match[1]))


# --- BackupAndRestore: latest.weights.h5, its record, and the previous pair ----------------------


def backup_fit(folder: str, epochs: int) -> None:
    """``fit`` with ``BackupAndRestore(folder, double_checkpoint=True, delete_checkpoint=False)`` up
    to ``epochs``: it goes on from the backup there by itself."""
    _fit(model(), epochs=epochs, callbacks=[keras.callbacks.BackupAndRestore(folder, **BACKUP_OPTIONS)])


def backup_restore(folder: str) -> str:
    """A second ``fit`` with ``BackupAndRestore`` on (a copy of) ``folder`` as it is: what it holds
    when its first epoch begins (``on_train_begin`` may rewrite the folder: a copy keeps the run)."""
    with _copy(folder) as copy:
        return _backup_begun(copy)


def backup_pair_restore(weights: str) -> str:
    """The pair of ``weights`` (``latest.weights.h5`` or its ``.bkp``, with the record beside it
    under the same suffix) alone in a backup folder, as ``latest.weights.h5`` and
    ``training_metadata.json``: what a second ``fit`` restores from it."""
    suffix = PREVIOUS if weights.endswith(PREVIOUS) else ""
    with tempfile.TemporaryDirectory() as folder:
        for source, name in ((weights, WEIGHTS), (os.path.join(os.path.dirname(weights), RECORD + suffix), RECORD)):
            if os.path.exists(source):
                shutil.copyfile(source, os.path.join(folder, name))
        return _backup_begun(folder)


def backup_pick(folder: str) -> str | None:
    """The pair ``BackupAndRestore.on_train_begin`` restores in ``folder`` (a copy of it): the
    ``.bkp`` weights where it falls back to them (it copies them over ``latest.weights.h5``), else
    ``latest.weights.h5`` (there or not) where anything of the newest pair is there; None where
    nothing is (a fresh start)."""
    copied: list[str] = []
    real_copy = file_utils.copy

    def copy(source: str, target: str) -> Any:
        copied.append(os.path.basename(source))
        return real_copy(source, target)

    with _copy(folder) as copy_of_folder:
        if not any(os.path.exists(os.path.join(copy_of_folder, name)) for name in (WEIGHTS, RECORD)):
            return None
        file_utils.copy = copy
        try:
            _backup_begun(copy_of_folder)
        finally:
            file_utils.copy = real_copy
    return os.path.join(folder, WEIGHTS + PREVIOUS if WEIGHTS + PREVIOUS in copied else WEIGHTS)


def _backup_begun(folder: str) -> str:
    with _refused():
        return _begun(model(), epochs=10, callbacks=[keras.callbacks.BackupAndRestore(folder, **BACKUP_OPTIONS)])


# --- tf.train.CheckpointManager -----------------------------------------------------------------


def _tf_objects() -> tuple[Any, Any, Any]:
    """The model (trained one epoch, so that Adam's variables exist), a step counter and the
    ``tf.train.Checkpoint`` of all three, as tests/test_tensorflow.py builds them."""
    trained = model()
    _fit(trained, epochs=1)
    step = tf.Variable(0, dtype=tf.int64)
    return trained, step, tf.train.Checkpoint(step=step, optimizer=trained.optimizer, model=trained)


def tf_fit(folder: str, saves: int) -> None:
    """``restore(manager.latest_checkpoint)`` (nothing: from scratch), then an epoch and a
    ``manager.save()`` at a time until the step counter reaches ``saves``."""
    trained, step, checkpoint = _tf_objects()
    manager = tf.train.CheckpointManager(checkpoint, folder, max_to_keep=3)
    checkpoint.restore(manager.latest_checkpoint)
    while int(step.numpy()) < saves:
        _fit(trained, epochs=1)
        step.assign_add(1)
        manager.save()


def tf_restore(prefix: str) -> str:
    """``checkpoint.restore(prefix).assert_consumed()``: the step, the save counter, the weights
    and the optimizer's variables it restored."""
    trained, step, checkpoint = _tf_objects()
    with _refused():
        checkpoint.restore(prefix).assert_consumed()
    return tensors_digest(int(step.numpy()), int(checkpoint.save_counter.numpy()), *_variables(trained))


def tf_latest(folder: str) -> str | None:
    """``manager.latest_checkpoint``: the prefix the state file names (taken from it unchecked)."""
    with _refused():
        return tf.train.CheckpointManager(_tf_objects()[2], folder, max_to_keep=3).latest_checkpoint  # type: ignore[no-any-return]


# --- the restores' shared parts -----------------------------------------------------------------


class _Begun(Exception):
    def __init__(self, digest: str) -> None:
        self.digest = digest


class _Capture(keras.callbacks.Callback):  # type: ignore[misc]
    """Stops ``fit`` as its first epoch begins, once every callback's ``on_train_begin`` ran."""

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        raise _Begun(tensors_digest(epoch, *_variables(self.model)))


def _variables(trained: Any) -> tuple[list[Any], list[Any]]:
    return [v.numpy() for v in trained.weights], [v.numpy() for v in trained.optimizer.variables]


def _begun(trained: Any, callbacks: list[Any] | None = None, **arguments: Any) -> str:
    try:
        _fit(trained, callbacks=[*(callbacks or []), _Capture()], **arguments)
    except _Begun as begun:
        return begun.digest
    raise Refused("fit began no epoch")


@contextmanager
def _refused() -> Iterator[None]:
    """What the framework raises, as :class:`Refused`."""
    try:
        yield
    except Refused:
        raise
    except Exception as error:
        raise Refused(f"{type(error).__name__}: {str(error)[:300]}") from error


@contextmanager
def _copy(folder: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as scratch:
        yield shutil.copytree(folder, os.path.join(scratch, "copy"))


def build(variant: str, folder: str) -> None:
    """A run of three saves (``checkpoint``, ``backup`` or ``tensorflow``), then the routing of the
    framework's native writes (``native_writes``) checked against its own bytes, on a scratch folder."""
    {"checkpoint": checkpoint_fit, "backup": backup_fit, "tensorflow": tf_fit}[variant](folder, 3)
    with tempfile.TemporaryDirectory() as scratch:
        if variant == "tensorflow":
            native_writes.assert_routed_as_tensorflow_writes(_tf_objects()[2], Path(scratch))
        else:
            trained = model()
            _fit(trained, epochs=1)
            native_writes.assert_routed_as_keras_writes(trained, Path(scratch))
