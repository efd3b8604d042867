"""``verify --load``: load each file that passed the static checks with the library that reads it.

Only here are the libraries imported. Files are loaded with ``torch.load(weights_only=True)``
(memory-mapped when the format allows), the safetensors library, h5py (Keras' HDF5 weights) or
TensorFlow's checkpoint reader, and only when the static pass found nothing wrong with them:
nothing the static pass calls unsafe is ever handed to an unpickler. A library that is not
installed leaves the file unloaded, and says so (CKD213).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import zipfile
from collections.abc import Callable, Iterable

from ckptdoctor.model import Entry, FileIssue, FileReport, Problem
from ckptdoctor.readers._registry import Library, current
from ckptdoctor.stores import session

_HARMLESS = frozenset({Problem.LEGACY})
"""Issues that do not stop a file from being loaded."""

_EXPLAINED: tuple[tuple[str, Problem], ...] = (
    ("failed finding central directory", Problem.TRUNCATED),
    ("not a ZIP archive", Problem.TRUNCATED),
    ("incomplete metadata", Problem.TRUNCATED),
    ("Unsupported operand", Problem.UNSAFE_PICKLE),
    ("Unsupported global", Problem.NON_WEIGHTS),
    ("Weights only load failed", Problem.NON_WEIGHTS),
    ("invalid load key", Problem.NOT_A_CHECKPOINT),
    ("header too large", Problem.NOT_A_CHECKPOINT),
    ("truncated file", Problem.TRUNCATED),
    ("bad object header version number", Problem.TRUNCATED),
    ("Read less bytes than requested", Problem.TRUNCATED),
    ("not an sstable", Problem.TRUNCATED),
    ("Checksum does not match", Problem.CRC_MISMATCH),
)
"""What the libraries say, and the rule that explains it; anything else is a malformed file."""


def load_all(entries: Iterable[Entry], reports: dict[str, FileReport]) -> dict[str, FileReport]:
    """The reports of files that failed to load (or whose library is missing), with why added."""
    failed: dict[str, FileReport] = {}
    for entry in entries:
        report = reports[entry.os_path]
        spec = current().by_format.get(report.format)
        if spec is None or spec.loaded_by is None or any(i.problem not in _HARMLESS for i in report.issues):
            continue
        if session.owner(entry.os_path) is not None:  # the libraries open local paths only
            issue = FileIssue(
                Problem.PARTLY_CHECKED, "not loaded: it is in a bucket, and --load loads local files (copy the run down to load it)"
            )
            failed[entry.os_path] = dataclasses.replace(report, issues=(*report.issues, issue))
            continue
        try:
            error = _load(entry.os_path, spec.loaded_by)
        except ImportError:
            issue = FileIssue(
                Problem.PARTLY_CHECKED, f"not loaded: {spec.loaded_by.value} is not installed (pip install {spec.loaded_by.value})"
            )
        else:
            if error is None:
                continue
            issue = FileIssue(_explain(error), f"loading it fails: {error.splitlines()[0][:300]}")
        failed[entry.os_path] = dataclasses.replace(report, issues=(*report.issues, issue))
    return failed


def _load(path: str, library: Library) -> str | None:
    """Why loading ``path`` with ``library`` fails, or None; ImportError where it is missing."""
    loader = _LOADERS[library]
    try:
        loader(path)
    except ImportError:
        raise
    except Exception as error:  # the libraries raise many types; each becomes a finding
        return f"{type(error).__name__}: {error}"
    return None


def _torch(path: str, mmap: bool = False) -> None:
    # the libraries load only for verify --load
    import torch

    torch.load(path, weights_only=True, mmap=mmap, map_location="cpu")


def _safetensors(path: str) -> None:
    # the libraries load only for verify --load
    from safetensors.torch import load_file

    load_file(path, device="cpu")


def _h5py(path: str) -> None:
    """Every dataset of an HDF5 file, or of the weights inside a ``.keras`` archive."""
    # the libraries load only for verify --load
    import h5py

    with contextlib.ExitStack() as stack:
        source: object = path
        if zipfile.is_zipfile(path):
            archive = stack.enter_context(zipfile.ZipFile(path))
            source = stack.enter_context(archive.open("model.weights.h5"))
        opened = stack.enter_context(h5py.File(source, "r", locking=False) if source is path else h5py.File(source, "r"))
        opened.visititems(lambda name, item: item[()] if isinstance(item, h5py.Dataset) else None)


def _tensorflow(path: str) -> None:
    """Every tensor of the bundle whose index is ``path``, through the reader ``restore`` uses."""
    # TensorFlow logs its start-up on stderr unless told not to, before it is imported
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # the libraries load only for verify --load
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path.removesuffix(".index"))
    for name in reader.get_variable_to_dtype_map():
        reader.get_tensor(name)


_LOADERS: dict[Library, Callable[[str], None]] = {
    Library.TORCH: _torch,
    Library.TORCH_MMAP: functools.partial(_torch, mmap=True),
    Library.SAFETENSORS: _safetensors,
    Library.H5PY: _h5py,
    Library.TENSORFLOW: _tensorflow,
}


def _explain(message: str) -> Problem:
    return next((problem for text, problem in _EXPLAINED if text in message), Problem.MALFORMED)
