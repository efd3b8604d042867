"""SIGKILL this process inside a framework's own save, for the fresh-run matrix (``matrix.py``).

:func:`arm` counts the files the process then opens for writing (below ``/dev`` and ``/proc`` aside: they hold no
checkpoint), and the ``write``-th one dies
with SIGKILL once ``fraction`` of its bytes are written (1.0: just after it is closed whole), the
way a node dies under a save. Staging files count too (Lightning writes a temporary file and
moves it into place), so that a kill can land before the move. Files are counted where Python writes them: ``open`` in a write
mode, and ``torch.save`` and ``safetensors.torch.save_file`` given a path (their own C++ and Rust
writers are routed through ``open`` with the same bytes, so that a kill can land inside them).
Writes through other native code (HDF5, TensorFlow) are not seen: a module that routes them
(``native_writes``) counts such a file with :func:`native` and kills it itself, and a writer that
writes one file in many writes (``zipfile``) is told its total with :func:`sized`.

Each file counted is told on stderr (``killer: 3 path``), so a failing test shows what was written.
"""

from __future__ import annotations

import builtins
import io
import os
import signal
import sys
from typing import Any

_TARGET = 0
_FRACTION = 1.0
_count = 0
_installed = False
_NOT_FILES = ("/dev/", "/proc/")
_open = builtins.open


_SIGNAL = signal.SIGKILL


def arm(write: int, fraction: float, stop: bool = False) -> None:
    """Kill the process during its ``write``-th file written from now on; ``stop``: stop it
    there instead (SIGSTOP), its file open, as a save that is going on is seen."""
    global _TARGET, _FRACTION, _count, _SIGNAL
    install()
    _TARGET, _FRACTION, _count = write, fraction, 0
    _SIGNAL = signal.SIGSTOP if stop else signal.SIGKILL


def install() -> None:
    """Route writes through the counting ``open``, counting nothing until :func:`arm` (a warm
    process installs it before it imports the frameworks, which then bind its saves)."""
    global _installed
    if _installed:
        return
    _installed = True
    builtins.open = _counting_open  # type: ignore[assignment]
    io.open = _counting_open  # type: ignore[assignment]
    try:
        import torch
    except ImportError:
        pass
    else:
        real_save = torch.save

        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
            if not isinstance(f, str | os.PathLike):
                return real_save(obj, f, *args, **kwargs)
            buffer = io.BytesIO()
            real_save(obj, buffer, *args, **kwargs)
            with open(f, "wb") as out:
                out.write(buffer.getvalue())
            return None

        torch.save = save
        torch.serialization.save = save
    try:
        import safetensors.torch
    except ImportError:
        return
    real_bytes = safetensors.torch.save

    def save_file(tensors: Any, filename: Any, metadata: Any = None) -> None:
        with open(filename, "wb") as out:
            out.write(real_bytes(tensors, metadata=metadata))

    safetensors.torch.save_file = save_file


def native(path: Any) -> float | None:
    """Count a file that native code writes (libhdf5), which ``open`` never sees: the fraction at
    which its writer must :func:`die` where it is the file that dies, else None."""
    global _count
    if not _TARGET:
        return None
    _count += 1
    sys.stderr.write(f"killer: {_count} {path} (native)\n")
    return _FRACTION if _count == _TARGET else None


def sized(file: Any, size: int) -> None:
    """``file`` (opened once armed) takes ``size`` bytes in many writes: where it is the file that
    dies, it dies once ``fraction`` of them are written, not within its first write."""
    if isinstance(file, _Dying):
        file.size = size


def missed() -> None:
    """Called after the save: the kill point was never reached (too few files written)."""
    sys.stderr.write(f"killer: only {_count} files written, none was number {_TARGET}\n")
    sys.exit(3)


def _counting_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
    opened = _open(file, mode, *args, **kwargs)
    if not _TARGET or not any(flag in mode for flag in "wax") or isinstance(file, int) or os.path.realpath(file).startswith(_NOT_FILES):
        return opened
    global _count
    _count += 1
    sys.stderr.write(f"killer: {_count} {file}\n")
    return _Dying(opened) if _count == _TARGET else opened


def die() -> None:
    sys.stderr.flush()
    os.kill(os.getpid(), _SIGNAL)


class _Dying:
    """A file object that dies part-way through its writes, or just after it is closed whole."""

    def __init__(self, file: Any) -> None:
        self._file = file
        self.size: int | None = None
        self._written = 0

    def write(self, data: Any) -> int:
        if _FRACTION < 1.0:  # dies in this write, or (told its `size`) in the write that crosses its share of it
            room = int(len(data) * _FRACTION) if self.size is None else int(self.size * _FRACTION) - self._written
            if self.size is None or len(data) >= room:
                self._file.write(data[: max(room, 0)])
                self._file.flush()
                die()
            self._written += len(data)
        return int(self._file.write(data))

    def close(self) -> None:
        self._file.close()
        if _FRACTION >= 1.0:
            die()

    def __enter__(self) -> _Dying:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)
