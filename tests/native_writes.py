"""Keras' and TensorFlow's native writes made visible to :mod:`killer`, in a child process that saves.

:mod:`killer` counts the files Python opens for writing; Keras writes its HDF5 weights through
libhdf5 (h5py) and TensorFlow its bundles through its C++ ``BundleWriter``, which it never sees.

- :func:`route_keras`: each HDF5 file Keras' ``H5IOStore`` opens for writing is counted
  (:func:`killer.native`) and, where it is the file that dies, the process is SIGKILLed between
  two of the variables Keras writes into it, once ``fraction`` of them are written (1.0: just
  after it is closed), libhdf5's own file left as libhdf5 left it (never closed). A ``.keras``
  zip, which Python's ``zipfile`` writes through ``open`` in many writes, is told its size
  (:func:`killer.sized`) so that it dies once ``fraction`` of its bytes are written.
- :func:`route_tensorflow`: ``save_v2`` and ``merge_v2_checkpoints`` run for real into a scratch
  folder, and their files are then put in place through ``open`` with the same bytes, under the
  names and in the order ``tensor_bundle.cc`` uses (``BundleWriter``: the data file, then the
  index, each written to ``<name>.tempstate<random>`` and renamed; ``MergeBundles``: the shards'
  data files renamed into place, the merged ``.index`` written directly, the shard indexes and
  ``<prefix>_temp/`` removed); the state file is written as ``file_io.atomic_write_string_to_file``
  writes it (``checkpoint.tmp<uuid hex>``, renamed), through ``open``. Both writers append, so a
  kill part-way through leaves a prefix of the bytes, as a kill inside them does.
  :func:`same_bytes_as_tensorflow` checks that a routed save is byte for byte TensorFlow's own.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import tempfile
import uuid
from pathlib import Path
from typing import Any

import killer


def route_keras() -> None:
    from keras.src.saving import saving_lib

    class CountedH5IOStore(saving_lib.H5IOStore):  # type: ignore[misc]
        """An HDF5 file Keras writes, counted by killer; where it is the file that dies, killed
        between two of its variables once ``fraction`` of them are written (``variables``)."""

        variables = 0

        def __init__(self, path_or_io: Any, archive: Any = None, mode: str = "r") -> None:
            self.written = 0
            self.fraction = (
                killer.native(path_or_io) if mode == "w" and archive is None and not isinstance(path_or_io, io.BytesIO) else None
            )
            super().__init__(path_or_io, archive, mode)

        def __setitem__(self, key: str, value: Any) -> None:
            if self.fraction is not None and self.fraction < 1.0 and self.written >= self.fraction * self.variables:
                killer.die()  # libhdf5's file as it is now: never flushed, never closed
            super().__setitem__(key, value)
            self.written += 1

        def close(self) -> None:
            super().close()
            if self.fraction == 1.0:
                killer.die()

    real_weights = saving_lib.save_weights_only

    def save_weights_only(model: Any, filepath: Any, *args: Any, **kwargs: Any) -> Any:
        """Counts the variables Keras writes, by saving them into memory first."""
        counted = CountedH5IOStore(io.BytesIO(), mode="w")
        saving_lib._save_state(model, weights_store=counted, assets_store=None, inner_path="", visited_saveables=set())
        counted.close()
        CountedH5IOStore.variables = counted.written
        return real_weights(model, filepath, *args, **kwargs)

    real_fileobj = saving_lib._save_model_to_fileobj

    def save_model_to_fileobj(model: Any, fileobj: Any, weights_format: str) -> None:
        """Tells killer how many bytes ``zipfile`` writes, from the same save into memory."""
        counting = _CountingBytes()
        real_fileobj(model, counting, weights_format)
        killer.sized(fileobj, counting.written)
        real_fileobj(model, fileobj, weights_format)

    saving_lib.H5IOStore = CountedH5IOStore
    saving_lib.save_weights_only = save_weights_only
    saving_lib._save_model_to_fileobj = save_model_to_fileobj


class _CountingBytes(io.BytesIO):
    """Memory that counts every byte written into it, rewrites included."""

    written = 0

    def write(self, data: Any) -> int:
        self.written += len(data)
        return super().write(data)


def route_tensorflow() -> None:
    from tensorflow.python.lib.io import file_io
    from tensorflow.python.ops import gen_io_ops, io_ops

    real_save, real_merge = io_ops.save_v2, gen_io_ops.merge_v2_checkpoints

    def save_v2(prefix: Any, tensor_names: Any, shape_and_slices: Any, tensors: Any, name: Any = None) -> None:
        """``BundleWriter``: the data file, then the index, each staged under ``.tempstate<n>``."""
        target = _text(prefix)
        with tempfile.TemporaryDirectory() as scratch:
            real_save(os.path.join(scratch, "bundle"), tensor_names, shape_and_slices, tensors)
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            for suffix in (".data-00000-of-00001", ".index"):
                staged = f"{target}{suffix}.tempstate{random.getrandbits(64)}"
                _write(staged, Path(scratch, "bundle" + suffix).read_bytes())
                os.rename(staged, target + suffix)

    def merge_v2_checkpoints(
        checkpoint_prefixes: Any, destination_prefix: Any, delete_old_dirs: bool = True, allow_missing_files: bool = False, name: Any = None
    ) -> None:
        """``MergeBundles``: the shards' data renamed into place, the merged index written directly,
        the shards' indexes and folders removed."""
        prefixes, destination = [_text(p) for p in checkpoint_prefixes], _text(destination_prefix)
        with tempfile.TemporaryDirectory() as scratch:
            copies = []
            for number, prefix in enumerate(prefixes):
                copies.append(os.path.join(scratch, f"part{number}"))
                for file in Path(prefix).parent.glob(Path(prefix).name + ".*"):  # linked, not copied: killer counts no copy
                    os.symlink(file, copies[-1] + file.name.removeprefix(Path(prefix).name))
            real_merge(copies, os.path.join(scratch, "merged"), delete_old_dirs=False, allow_missing_files=allow_missing_files)
            for prefix in prefixes:
                for data in Path(prefix).parent.glob(Path(prefix).name + ".data-*"):
                    os.rename(data, destination + data.name.removeprefix(Path(prefix).name))
            _write(destination + ".index", Path(scratch, "merged.index").read_bytes())
        for prefix in prefixes:
            os.remove(prefix + ".index")
        for folder in {Path(prefix).parent for prefix in prefixes} if delete_old_dirs else ():
            with contextlib.suppress(OSError):  # Env::DeleteDir: only where empty
                folder.rmdir()

    def atomic_write_string_to_file(filename: str, contents: str, overwrite: bool = True) -> None:
        staged = f"{filename}.tmp{uuid.uuid4().hex}"
        _write(staged, contents.encode())
        os.replace(staged, filename)

    io_ops.save_v2 = save_v2
    gen_io_ops.merge_v2_checkpoints = merge_v2_checkpoints
    file_io.atomic_write_string_to_file = atomic_write_string_to_file


def _text(value: Any) -> str:
    return value.numpy().decode() if hasattr(value, "numpy") else str(value)


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as file:
        file.write(data)


def assert_routed_as_tensorflow_writes(checkpoint: Any, folder: Path) -> None:
    """``checkpoint.write`` into ``folder`` by TensorFlow, then routed (:func:`route_tensorflow`):
    the same files, byte for byte. The routing stays on."""
    checkpoint.write(str(folder / "own" / "ckpt"))
    route_tensorflow()
    checkpoint.write(str(folder / "routed" / "ckpt"))
    own, routed = ({p.name: p.read_bytes() for p in (folder / name).iterdir()} for name in ("own", "routed"))
    assert own == routed and len(own) == 2, (sorted(own), sorted(routed))


def assert_routed_as_keras_writes(model: Any, folder: Path) -> None:
    """``model.save_weights`` and ``model.save`` into ``folder`` by Keras, then routed
    (:func:`route_keras`): the same bytes (``metadata.json``'s ``date_saved`` aside). The routing stays on."""
    import zipfile

    def saved(name: str) -> tuple[bytes, dict[str, bytes]]:
        (folder / name).mkdir(parents=True)
        model.save_weights(folder / name / "w.weights.h5")
        model.save(folder / name / "m.keras")
        with zipfile.ZipFile(folder / name / "m.keras") as archive:
            members = {info.filename: archive.read(info) for info in archive.infolist() if info.filename != "metadata.json"}
        return (folder / name / "w.weights.h5").read_bytes(), members

    own = saved("own")
    route_keras()
    assert saved("routed") == own
