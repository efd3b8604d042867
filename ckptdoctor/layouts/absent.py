"""Files a checkpoint should have and lacks, told by its siblings or its shard index: the
pieces the layouts' ``absent`` hooks are made of.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ckptdoctor.model import CheckpointFile, Role


def missing_from_siblings(files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
    """Files the run's other checkpoints have and this one lacks (by name inside the checkpoint):
    for frameworks whose every save is written by the same ranks under the same names."""
    expected = {file.prefix for others in siblings for file in others}
    return tuple(sorted(expected - {file.prefix for file in files}))


def folder_name(files: Sequence[CheckpointFile]) -> str:
    """The name of the checkpoint folder ``files`` lie in ('' for none): each file's path ends
    with its path inside the folder. For frameworks that save kinds of checkpoint side by side
    (Megatron's ``release/`` beside ``iter_*/``), each compared only with its own kind."""
    return next((os.path.basename(f.entry.os_path[: -len(f.prefix) - 1]) for f in files[:1]), "")


def unlisted_shards(files: Sequence[CheckpointFile]) -> tuple[str, ...]:
    """The shards a checkpoint's shard index (``model.safetensors.index.json``) names that are not
    among its files: for frameworks that write HF's sharded weights."""
    present = {f.entry.name for f in files}
    named: set[str] = set()
    for file in files:
        if Role.SHARD_INDEX in file.roles and (shards := file.report.fact("shards")):
            named.update(shards.split("\n"))
    return tuple(sorted(named - present))
