"""Boolean fields of a pickled dataclass, found without loading the pickle.

A dataclass (HF Trainer's ``TrainingArguments`` in ``training_args.bin``) is pickled with its
fields in one ``BUILD`` dict. A flag is found as CPython's pickler writes a dict entry: the key
string, its memo put, the ``NEWTRUE``/``NEWFALSE`` opcode. Which fields matter is the caller's
knowledge (a layout's ``named_files``), passed in.
"""

from __future__ import annotations

import dataclasses
import re
import struct

from ckptdoctor.model import FileReport
from ckptdoctor.readers import torchzip
from ckptdoctor.readers.sample import Sample
from ckptdoctor.readers.sniff import Format


def _pattern(field: str) -> re.Pattern[bytes]:
    """The key as BINUNICODE or SHORT_BINUNICODE, an optional memo put, then True or False."""
    key = field.encode()
    long, short = re.escape(b"X" + struct.pack("<I", len(key))), re.escape(b"\x8c" + bytes([len(key)]))
    return re.compile(rb"(?:" + long + rb"|" + short + rb")" + re.escape(key) + rb"(?:q.|r....|\x94)?([\x88\x89])", re.DOTALL)


def with_flags(sample: Sample, report: FileReport, fields: tuple[str, ...]) -> FileReport:
    """``report`` with each of ``fields`` among its facts (``true``/``false``) where the torch
    archive's pickle says it plainly; absent, ambiguous or unreadable: left out (as if not set)."""
    if report.format != Format.TORCH_ZIP.value:
        return report
    data = torchzip.first_pickle(sample)
    if data is None:
        return report
    facts = []
    for field in fields:
        found = _pattern(field).findall(data)
        if len(found) == 1:
            facts.append((field, "true" if found[0] == b"\x88" else "false"))
    return dataclasses.replace(report, facts=(*report.facts, *facts)) if facts else report
