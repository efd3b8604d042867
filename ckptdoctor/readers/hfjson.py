"""The small JSON files of Hugging Face checkpoints that say what a checkpoint should hold.

``trainer_state.json`` (written last by the Trainer) gives the step and the best checkpoint;
a shard index (``model.safetensors.index.json``) names every shard of the weights. Both are
small, so they are read whole.
"""

from __future__ import annotations

import json
from typing import Any

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers._sample import MAX_HEADER, Sample
from ckptdoctor.readers.sniff import Format

TRAINER_STATE = "trainer_state.json"
INDEX_SUFFIXES = (".safetensors.index.json", ".bin.index.json")


def is_hf_json(name: str) -> bool:
    return name == TRAINER_STATE or name.endswith(INDEX_SUFFIXES)


def read(sample: Sample, name: str) -> FileReport:
    if sample.size > MAX_HEADER:
        return _report(Problem.MALFORMED, f"{sample.size} bytes: too large for a {name}")
    try:
        document = json.loads(sample.head(sample.size))
    except (ValueError, UnicodeDecodeError) as error:
        problem = Problem.TRUNCATED if "Expecting" in str(error) and _cut_short(sample) else Problem.MALFORMED
        return _report(problem, f"not valid JSON ({error})")
    if not isinstance(document, dict):
        return _report(Problem.MALFORMED, "not a JSON object")
    if name == TRAINER_STATE:
        return FileReport(Format.JSON.value, (), _trainer_state_facts(document))
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


def _trainer_state_facts(state: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    facts = []
    if isinstance(state.get("global_step"), int):
        facts.append(("global_step", str(state["global_step"])))
    best = state.get("best_model_checkpoint")
    if isinstance(best, str) and best:
        facts.append(("best_model_checkpoint", best))
    return tuple(facts)


def _cut_short(sample: Sample) -> bool:
    return not sample.tail(64).rstrip().endswith(b"}")


def _report(problem: Problem, detail: str) -> FileReport:
    return FileReport(Format.JSON.value, (FileIssue(problem, detail),))
