"""TensorFlow checkpoints: ``tf.train.CheckpointManager`` and ``tf.train.Checkpoint`` bundles.

Each save is a bundle: ``<prefix>.index`` and ``<prefix>.data-KKKKK-of-NNNNN`` shards, where the
prefix is ``ckpt-<save counter>`` for a manager (``checkpoint_management.py``,
``CheckpointManager.save``: ``"%s-%d" % (prefix, checkpoint_number)``), or whatever a script
passes (Keras 2's ``cp-{epoch:04d}.ckpt``, TF 1's ``model.ckpt-1000``). The shards are written
first (under ``<prefix>_temp/``, files ending ``.tempstate<n>``), then ``MergeV2Checkpoints``
renames them into place and writes the index; only then is the ``checkpoint`` state file
rewritten (through ``checkpoint.tmp<hex>``) to name the new prefix, and the checkpoints past
``max_to_keep`` are deleted.

``tf.train.latest_checkpoint(dir)`` returns the prefix the state file names if its ``.index``
exists, else None, and ``Checkpoint.restore(None)`` quietly starts from scratch: a state file
that names a deleted or broken save, or none at all, loses the run's progress without an error.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from types import MappingProxyType

from ckptdoctor.layouts.base import Layout
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.layouts.pointers import Pointer, followed
from ckptdoctor.model import Checkpoint, CheckpointFile, FileIssue, PointerWrite, Problem, Role, Run, Unit
from ckptdoctor.readers import pointer, tfbundle
from ckptdoctor.readers.named import Named
from ckptdoctor.readers.sniff import Format

STATE = "checkpoint"
_BUNDLE = re.compile(r"^(.+)\.(?:index|data-[0-9]{5}-of-[0-9]{5})\Z")
_SAVED = re.compile(r"^.+-[0-9]+\Z")
"""How ``Checkpoint.save`` names a save (``"%s-%d" % (prefix, save_counter)``)."""
_LAST_NUMBER = re.compile(r"([0-9]+)(?!.*[0-9])")
_STAGING = re.compile(r"(?:_temp|\.tempstate[0-9]+|^checkpoint\.tmp[0-9a-f]+)\Z")
"""``<prefix>_temp/`` (``MultiDeviceSaver.save``), ``….tempstate<n>`` (``BundleWriter``) and
``checkpoint.tmp<hex>`` (``file_io.atomic_write_string_to_file``)."""


class TensorFlowLayout(Layout):
    name = "tensorflow"
    packages = ("tensorflow",)
    vocabulary = ("TensorFlow", "tf.train", "latest_checkpoint")
    default_unit = Unit.SAVE
    content = frozenset({tfbundle.TF_INDEX, tfbundle.TF_DATA, tfbundle.TF_STATE})
    resume_needs = frozenset({Role.MODEL, Role.METADATA})
    named_files = MappingProxyType({STATE: Named(tfbundle.read_state, when=Format.UNKNOWN)})
    claimable = re.compile(r"\.(?:index|data-[0-9]{5}-of-[0-9]{5})\Z")

    def claim(self, name: str) -> Claim | None:
        match = _BUNDLE.match(name)
        if match is None:
            return None
        prefix = match[1]
        number = _LAST_NUMBER.search(prefix)
        # the index lists the bundle's tensors; the data shards hold them
        roles = (Role.METADATA,) if name.endswith(tfbundle.INDEX_SUFFIX) else (Role.MODEL,)
        return Claim(roles, int(number[1]) if number else 0, prefix)

    def required(self, claims: Sequence[Claim]) -> tuple[Role, ...]:
        return (Role.MODEL, Role.METADATA)

    def pointer(self, name: str) -> Claim | None:
        return Claim((Role.POINTER,), 0, STATE) if name == STATE else None

    def staging(self, name: str) -> Claim | None:
        return Claim((Role.TEMP,), 0, name) if _STAGING.search(name) else None

    def measured(self, files: list[CheckpointFile]) -> list[CheckpointFile]:
        """Each data shard against the end of the last tensor its index places in it."""
        index = next((f for f in files if Role.METADATA in f.roles and f.report.format == tfbundle.TF_INDEX.value), None)
        ends = tfbundle.extents(index.report) if index is not None else {}
        if not ends:
            return files
        measured = []
        for file in files:
            shard = tfbundle.shard_of(file.entry.name)
            end = ends.get(shard[1]) if shard is not None else None
            if end is not None and file.entry.size < end:
                issue = FileIssue(
                    Problem.TRUNCATED,
                    f"{file.entry.size} of the {end} bytes {index.name if index else 'its index'} places in it: the shard was cut "
                    "short (tensorflow: Read less bytes than requested)",
                )
                file = file._replace(report=dataclasses.replace(file.report, issues=(issue, *file.report.issues)))
            measured.append(file)
        return measured

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        """The shards the index counts that are not there."""
        index = next((f for f in files if Role.METADATA in f.roles), None)
        shards = index.report.fact(tfbundle.SHARDS) if index is not None else None
        if index is None or shards is None or not shards.isdigit() or int(shards) > 100_000:
            return ()
        prefix = index.entry.name.removesuffix(tfbundle.INDEX_SUFFIX)
        present = {f.entry.name for f in files}
        return tuple(name for shard in range(int(shards)) if (name := tfbundle.data_file_name(prefix, shard, int(shards))) not in present)

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        if not run.checkpoints:
            return ()
        state = next((f for f in run.loose_files if f.entry.name == STATE), None)
        if state is None:
            # `Checkpoint.save` and the manager name saves `<prefix>-<n>` and record them in the
            # state file; `Checkpoint.write` names them as told and records nothing
            saved = any(_SAVED.match(prefix) for c in run.checkpoints if (prefix := bundle_prefix(c)) is not None)
            return (Pointer(None, "", None, STATE),) if saved else ()
        target = state.report.fact(pointer.POINTS_TO)
        if target is None:
            return ()  # unreadable or malformed: its own finding says so
        return (Pointer(state, target, _named(run, target), STATE),)

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        return followed(run, self.pointers(run))

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        if source is not None and source.entry.name != STATE:
            return None
        prefix = bundle_prefix(checkpoint)
        if prefix is None:
            return None
        # the manager rebuilds its list of kept saves from these lines: keep the older ones
        kept = (source.report.fact(tfbundle.ALL_CHECKPOINTS) or "").splitlines() if source is not None else []
        older = [path for path in kept if (number := _number_of(path)) is not None and number < checkpoint.index]
        lines = [f"model_checkpoint_path: {_quoted(prefix)}", *(f"all_model_checkpoint_paths: {_quoted(p)}" for p in older)]
        lines.append(f"all_model_checkpoint_paths: {_quoted(prefix)}")
        return PointerWrite(STATE, "\n".join(lines) + "\n")

    def file_name(self, role: Role, index: int) -> str | None:
        return STATE if role is Role.POINTER else None

    def resume_path(self, run: Run, checkpoint: Checkpoint) -> str:
        """The bundle's prefix: what ``Checkpoint.restore`` takes."""
        prefix = bundle_prefix(checkpoint)
        return os.path.join(run.path, prefix) if prefix is not None else run.path

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        path = self.resume_path(run, checkpoint)
        hint = f'pass `"{path}"` to `tf.train.Checkpoint(...).restore(...)`'
        if any(p.source is not None and p.number == checkpoint.index for p in self.pointers(run)):
            return f"{hint}; `restore(manager.latest_checkpoint)` follows {os.path.join(run.path, STATE)} to it"
        return hint


def bundle_prefix(checkpoint: Checkpoint) -> str | None:
    """The prefix a checkpoint's files share (``ckpt-3``), from its index or any shard."""
    for file in checkpoint.files:
        match = _BUNDLE.match(file.entry.name)
        if match is not None:
            return match[1]
    return None


def _named(run: Run, target: str) -> int | None:
    """The index of the checkpoint whose prefix is ``target`` (relative, or absolute in this run's
    folder, as older TensorFlow wrote it); None where no save of this run has that prefix."""
    if ".." in target.split(os.sep):
        return None  # the operating system resolves `ckpt-4/..` only through a folder ckpt-4: no save's path
    folder, prefix = os.path.split(os.path.normpath(target))  # `./ckpt-3` is ckpt-3, as TensorFlow joins it
    # TensorFlow joins a relative path to the folder: only a bare prefix names a save of this run,
    # or an absolute path to this folder, as older versions wrote
    if folder and (not os.path.isabs(folder) or ".." in folder.split(os.sep) or os.path.abspath(folder) != os.path.abspath(run.path)):
        return None
    named = next((c.index for c in run.checkpoints if bundle_prefix(c) == prefix), None)
    if named is not None:
        return named
    # a save that is gone: its number says which, unless a save of another prefix holds it
    number = _number_of(prefix)
    return number if number is not None and all(c.index != number for c in run.checkpoints) else None


def _number_of(prefix: str) -> int | None:
    match = _LAST_NUMBER.search(os.path.basename(prefix))
    return int(match[1]) if match else None


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
