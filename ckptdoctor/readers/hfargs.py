"""HF Trainer's ``training_args.bin``: the flags in it that decide what a checkpoint holds.

``TrainingArguments`` is pickled as a dataclass whose fields go in one ``BUILD`` dict. Only
``save_only_model`` matters here: with it the Trainer writes no optimizer, scheduler or RNG
state, and resumes from the weights with a fresh optimizer. The flag is found as CPython's
pickler writes a dict entry (the key string, its memo put, the ``NEWTRUE``/``NEWFALSE``
opcode), never by loading the pickle.
"""

from __future__ import annotations

import dataclasses
import re

from ckptdoctor.model import FileReport
from ckptdoctor.readers import torchzip
from ckptdoctor.readers._sample import Sample

NAME = "training_args.bin"
SAVE_ONLY_MODEL = "save_only_model"
_FLAG = re.compile(rb"(?:X\x0f\x00\x00\x00|\x8c\x0f)save_only_model(?:q.|r....|\x94)?([\x88\x89])", re.DOTALL)
"""The key as BINUNICODE or SHORT_BINUNICODE, an optional memo put, then True or False."""


def with_flags(sample: Sample, report: FileReport) -> FileReport:
    """``report`` with ``save_only_model`` among its facts where the pickle says it plainly."""
    data = torchzip.first_pickle(sample)
    found = _FLAG.findall(data) if data is not None else []
    if len(found) != 1:
        return report  # absent, ambiguous or unreadable: as if not set (a missing optimizer stays damage)
    value = "true" if found[0] == b"\x88" else "false"
    return dataclasses.replace(report, facts=(*report.facts, (SAVE_ONLY_MODEL, value)))
