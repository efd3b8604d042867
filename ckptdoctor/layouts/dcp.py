"""torch.distributed.checkpoint (DCP): one folder per checkpoint, named by the user.

A checkpoint folder holds ``__<rank>_<n>.distcp`` data files and ``.metadata``, which the
coordinator writes last (through ``.metadata.tmp`` and a rename) and which names every data
file. A folder without ``.metadata`` was never committed; a ``.metadata.tmp`` left over means
the commit itself was interrupted; a data file that stops before the items ``.metadata`` places in
it were written was cut short.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.base import FolderLayout
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.model import Checkpoint, CheckpointFile, Entry, Role, Run, Unit
from ckptdoctor.quoting import shell_word
from ckptdoctor.readers.dcp import DATA_SUFFIX, METADATA, extents, shard_issue
from ckptdoctor.readers.sniff import Format
from ckptdoctor.stores.urls import scheme

_NUMBER = re.compile(r"([0-9]+)\Z")
_MARKERS = (METADATA, METADATA + ".tmp")


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD505/fewer-files": "Write fewer files per checkpoint (`single_file_per_rank=True` and fewer writer threads), or move checkpoints to a filesystem with more inodes.",
    }
)
"""DCP's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class DcpLayout(FolderLayout):
    name = "dcp"
    fix_wordings = _FIX_WORDINGS
    vocabulary = ("DCP", "single_file_per_rank", "torch.distributed.checkpoint")
    builds_on = ("torch",)
    default_unit = Unit.STEP
    content = frozenset({Format.DISTCP, Format.PICKLE})
    resume_needs = frozenset({Role.MODEL, Role.METADATA})

    def claim(self, name: str) -> Claim | None:
        match = _NUMBER.search(name)
        return Claim((), int(match[1]), name[: match.start()], Unit.STEP) if match else None

    def claim_folder(self, entry: Entry, inside: Listing | None) -> Claim | None:
        """Only folders that hold DCP files, whatever they are called (``step-1000``, ``ckpt_3``)."""
        claim = self.claim(entry.name)  # the name first: a run's own big folder (``checkpoint/``) has no number
        if claim is None or inside is None or not any(e.name.endswith(DATA_SUFFIX) or e.name in _MARKERS for e in inside.entries):
            return None
        return claim

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        if name.endswith(DATA_SUFFIX):
            return (Role.MODEL,)
        if name == METADATA:
            return (Role.METADATA,)
        if name == METADATA + ".tmp":
            return (Role.TEMP,)
        return None

    def required(self, claims: Sequence[Claim]) -> tuple[Role, ...]:
        return (Role.MODEL, Role.METADATA)

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        """The data files each ``.metadata`` names that its folder lacks (a checkpoint may hold
        several DCP saves in folders of their own: accelerate's ``pytorch_model_fsdp_0/`` and
        ``optimizer_0/``), by their path inside the checkpoint."""
        present = {f.prefix for f in files}
        named = {
            posixpath.join(posixpath.dirname(f.prefix), name)
            for f in files
            if Role.METADATA in f.roles and (references := f.report.fact("references"))
            for name in references.split("\n")
        }
        return tuple(sorted(named - present))

    def measured(self, files: list[CheckpointFile]) -> list[CheckpointFile]:
        """Each data file against where the ``.metadata`` of its folder places its items: one that
        stops short of them, or whose last ``torch.save`` stream lost its end, was cut short
        (``.metadata`` is read once per save; its report carries where each data file's items end)."""
        ends = {
            posixpath.join(posixpath.dirname(f.prefix), name): end
            for f in files
            if Role.METADATA in f.roles
            for name, end in extents(f.report).items()
        }
        if not ends:
            return files
        measured = []
        for file in files:
            end = ends.get(file.prefix) if file.report.format == Format.DISTCP.value else None
            issue = shard_issue(file.report, file.entry.size, end) if end is not None else None
            if issue is not None:
                file = file._replace(report=dataclasses.replace(file.report, issues=(issue, *file.report.issues)))
            measured.append(file)
        return measured

    def file_name(self, role: Role, index: int) -> str | None:
        return METADATA if role is Role.METADATA else None

    def missing_note(self, run: Run, checkpoint: Checkpoint, role: Role) -> tuple[str, str] | None:
        """In a bucket, a step with ``.metadata.tmp`` and no ``.metadata`` died inside the commit:
        fsspec has no rename, so ``FsspecWriter`` copies ``.metadata.tmp`` to ``.metadata`` and then
        deletes it, and a save over a step deletes its ``.metadata`` first. The temporary object
        is written only after every rank's data, and an object exists only once whole."""
        staged = next((f for f in checkpoint.files if f.entry.name == METADATA + ".tmp"), None)
        if role is not Role.METADATA or staged is None or scheme(run.path) is None:
            return None
        committed = staged.path[: -len(".tmp")]
        copy = (
            f"`aws s3 cp {shell_word(staged.path)} {shell_word(committed)}`"
            if scheme(run.path) in ("s3", "s3a")
            else "the store's own copy command"
        )
        return (
            "DCP's FsspecWriter commits `.metadata` by copying `.metadata.tmp` to it, then deleting `.metadata.tmp` (and a "
            "save over an existing step deletes the old `.metadata` first): the save was killed inside that rename, after "
            "every rank had written its data",
            f"`.metadata.tmp` is the whole commit (DCP writes it after all ranks' data, and a store shows an object only once "
            f"it is whole): copy it to `{committed.rsplit('/', 1)[-1]}` to commit the step, with {copy}, then run "
            f"`ckptdoctor verify {shell_word(run.path)}`; or leave the step alone and resume from the previous one.",
        )

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        return f'load it with `torch.distributed.checkpoint.load(state_dict, checkpoint_id="{checkpoint.path}")`'
