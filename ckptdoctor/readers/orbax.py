"""Orbax's own JSON files: a step's ``_CHECKPOINT_METADATA``, a PyTree item's ``_METADATA`` and ``_sharding``.

They are small and read whole: a restore ``json.loads`` each (``_CHECKPOINT_METADATA`` only to
find the items' handlers), so one that does not parse fails it. Facts: ``items`` (each item the
step holds and its handler, ``name<TAB>handler`` per line) and ``ocdbt`` (``true`` where the item's
arrays are in an OCDBT store, so that its ``manifest.ocdbt`` is needed).
"""

from __future__ import annotations

import json

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers.sample import MAX_HEADER, Sample
from ckptdoctor.readers.sniff import Format

CHECKPOINT_METADATA = "_CHECKPOINT_METADATA"
ITEM_METADATA = "_METADATA"
SHARDING = "_sharding"
NAMES = frozenset({CHECKPOINT_METADATA, ITEM_METADATA, SHARDING})


def read(sample: Sample, name: str) -> FileReport:
    if sample.size > MAX_HEADER:
        return _report(Problem.MALFORMED, f"{sample.size:,} bytes: larger than ckptdoctor reads for metadata")
    text = sample.head(sample.size)
    try:
        document = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        cut = isinstance(error, json.JSONDecodeError) and error.pos >= len(text.rstrip())
        problem = Problem.TRUNCATED if cut else Problem.MALFORMED
        return _report(problem, f"not valid JSON ({error}){': cut short' if cut else ''}")
    if not isinstance(document, dict):
        return _report(Problem.MALFORMED, f"holds a JSON {type(document).__name__}, not the object Orbax writes")
    if name == CHECKPOINT_METADATA:
        handlers = document.get("item_handlers")
        if isinstance(handlers, dict):
            items = "\n".join(f"{item}\t{handler}" for item, handler in sorted(handlers.items()))
            return FileReport(Format.JSON.value, (), (("items", items),))
    elif name == ITEM_METADATA and isinstance(document.get("use_ocdbt"), bool):
        return FileReport(Format.JSON.value, (), (("ocdbt", str(document["use_ocdbt"]).lower()),))
    return FileReport(Format.JSON.value)


def _report(problem: Problem, detail: str) -> FileReport:
    return FileReport(Format.JSON.value, (FileIssue(problem, detail),))
