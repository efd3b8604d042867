"""Small JSON files that say what a checkpoint should hold, read whole.

A shard index (``model.safetensors.index.json``, the Hugging Face Hub's format) names every shard
of the weights; a framework's state file (HF Trainer's ``trainer_state.json``) is read for the
top-level values its layout asks for (``Layout.named_files``: the names and keys are the layout's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers.sample import MAX_HEADER, Sample
from ckptdoctor.readers.sniff import Format

INDEX_SUFFIXES = (".safetensors.index.json", ".bin.index.json")


def is_index(name: str) -> bool:
    return name.endswith(INDEX_SUFFIXES)


def read_index(sample: Sample, name: str) -> FileReport:
    """A shard index: the shards its ``weight_map`` names (fact ``shards``) and its ``total_size``."""
    document = _document(sample, name)
    if isinstance(document, FileReport):
        return document
    weight_map = document.get("weight_map")
    if not isinstance(weight_map, dict):
        return _report(Problem.MALFORMED, "a shard index without a 'weight_map'")
    shards = sorted({str(shard) for shard in weight_map.values()})
    facts = [("shards", "\n".join(shards))]
    metadata = document.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("total_size"), int):
        facts.append(("total_size", str(metadata["total_size"])))
    pairs = tuple((str(tensor), str(shard)) for tensor, shard in weight_map.items())
    return FileReport(Format.JSON.value, (), tuple(facts), weight_map=pairs)


def read_values(sample: Sample, name: str, keys: Mapping[str, type[int] | type[str]]) -> FileReport:
    """A small JSON object with the top-level values of ``keys`` as facts, each where it is of its
    type (and not empty); ``keys`` come from the layout that names the file (HF Trainer's
    ``global_step`` and ``best_model_checkpoint``)."""
    document = _document(sample, name)
    if isinstance(document, FileReport):
        return document
    facts = tuple(
        (key, str(value))
        for key, kind in keys.items()
        if isinstance(value := document.get(key), kind) and not isinstance(value, bool) and value != ""
    )
    return FileReport(Format.JSON.value, (), facts)


def _document(sample: Sample, name: str) -> dict[str, Any] | FileReport:
    """The JSON object the file holds, or the report of why it holds none."""
    if sample.size > MAX_HEADER:
        return _report(Problem.MALFORMED, f"{sample.size} bytes: too large for a {name}")
    try:
        document = json.loads(sample.head(sample.size))
    except (ValueError, UnicodeDecodeError) as error:
        problem = Problem.TRUNCATED if "Expecting" in str(error) and _cut_short(sample) else Problem.MALFORMED
        return _report(problem, f"not valid JSON ({error})")
    if not isinstance(document, dict):
        return _report(Problem.MALFORMED, "not a JSON object")
    return document


def _cut_short(sample: Sample) -> bool:
    return not sample.tail(64).rstrip().endswith(b"}")


def _report(problem: Problem, detail: str) -> FileReport:
    return FileReport(Format.JSON.value, (FileIssue(problem, detail),))
