"""Files read the way their exact name says, with the names passed in by whoever knows them.

A reader knows a format; the names a framework gives its pointer and state files (DeepSpeed's
``latest``, HF Trainer's ``trainer_state.json``) are framework knowledge, which lives in
``layouts/`` (``Layout.named_files``). The pipelines pass the layouts' table to ``probe`` and
``verify``, so that no reader module names a framework's files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

from ckptdoctor.model import FileReport
from ckptdoctor.readers.sample import Sample
from ckptdoctor.readers.sniff import Format


class Named(NamedTuple):
    """How a file of one exact name is read."""

    read: Callable[[Sample], FileReport] | None = None
    """Reads it in place of the reader its content would get (a pointer file's text, a trainer
    state's JSON): the name fixes what it holds."""
    when: Format | None = None
    """``read`` only where the content sniffs as this format (None: whatever its first bytes);
    otherwise the file is judged by its content like any other."""
    annotate: Callable[[Sample, FileReport], FileReport] | None = None
    """Adds to its content reader's report what the file tells beyond its format (the
    ``save_only_model`` flag in ``training_args.bin``)."""


NamedFiles = Mapping[str, Named]
"""File name -> how a file of that name is read."""
NO_NAMES: NamedFiles = MappingProxyType({})
