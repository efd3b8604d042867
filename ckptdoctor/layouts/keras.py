"""Keras 3: ``ModelCheckpoint`` files (``.keras``, ``.weights.h5``, legacy ``.h5``) named by the user's template.

``keras/src/callbacks/model_checkpoint.py`` formats the ``filepath`` template with ``epoch`` (1-based),
``batch`` and the logs (``_get_file_path``): ``ep{epoch:02d}-{val_loss:.3f}.keras`` gives
``ep03-0.190.keras``, where ``0.190`` is a metric's value and 3 the epoch. Every file is a whole
save: the weights and the optimizer's variables (``optimizer/vars``, whose first is ``iterations``)
in one file, written in place (``saving_lib.save_model``: ``open(path, "wb")``; ``save_weights``:
``h5py.File(path, "w")``), so a killed save leaves the newest file cut short, never a temporary
name. A name without a number (``best.keras`` under ``save_best_only``) is overwritten by each
save: a copy that stands for one of the numbered saves. Keras writes no metrics file and no
pointer; ``prune --keep-best`` reads metric values from names.

``BackupAndRestore`` (``keras/src/callbacks/backup_and_restore.py``) keeps one save in its
``backup_dir``: ``latest.weights.h5`` and ``training_metadata.json`` (``{"epoch": E, "batch": B}``,
E the epochs completed), and with ``double_checkpoint=True`` the previous pair as ``….bkp``, which
``on_train_begin`` falls back to when the newest cannot be read. Each is indexed by the epoch its
metadata records; ``fit`` with the same callback resumes from it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts._base import Claim, Layout
from ckptdoctor.layouts.torch import parse_name
from ckptdoctor.model import Checkpoint, Entry, FileReport, Role, Run, Unit
from ckptdoctor.readers import hdf5, hfjson, keras
from ckptdoctor.readers.files import checkpoint_suffixes
from ckptdoctor.readers.named import Named
from ckptdoctor.readers.sniff import Format

_CONTENT = frozenset({keras.KERAS, hdf5.HDF5})
"""What Keras saves are: the formats whose suffixes name them."""
BACKUP = "latest.weights.h5"
PROGRESS = "training_metadata.json"
PREVIOUS = ".bkp"
"""``double_checkpoint``'s copies of the previous pair: ``latest.weights.h5.bkp``, ``training_metadata.json.bkp``."""
_BACKUP_FILES = {BACKUP: PROGRESS, BACKUP + PREVIOUS: PROGRESS + PREVIOUS}
"""Each backup's weights, and the file that records its epoch: the newest first."""
_SHARD_INDEX = ".weights.json"
"""The index of a sharded save (``ShardedH5IOStore``)."""
_SUFFIX = re.compile("(?:" + "|".join(map(re.escape, checkpoint_suffixes(_CONTENT))) + r")\Z", re.IGNORECASE)


class KerasLayout(Layout):
    """Names are parsed as a script's templates are (``layouts.torch.parse_name``), for Keras' formats."""

    name = "keras"
    default_unit = Unit.EPOCH
    content = _CONTENT | {Format.JSON}  # BackupAndRestore's training_metadata.json
    claimable = re.compile(_SUFFIX.pattern.removesuffix(r"\Z") + r"(?:\.bkp)?\Z", re.IGNORECASE)
    whole_saves = True
    named_files = MappingProxyType(
        {
            name: Named(functools.partial(hfjson.read_values, name=name, keys={"epoch": int, "batch": int}), Format.JSON)
            for name in _BACKUP_FILES.values()
        }
    )

    def claim(self, name: str) -> Claim | None:
        if name in _BACKUP_FILES:
            return Claim((Role.MODEL, Role.OPTIMIZER), 0, "backup", Unit.EPOCH)  # its epoch is in its metadata: see build
        parsed = parse_name(name, _SUFFIX)
        if parsed is None:
            return None
        # every Keras save holds the weights and the optimizer's variables: one file per save
        return Claim((Role.MODEL, Role.OPTIMIZER), parsed.index, parsed.prefix or "keras", parsed.unit)

    def pointer(self, name: str) -> Claim | None:
        """A save without a number (``best.keras``, ``model.weights.h5``): rewritten by each save."""
        return Claim((Role.POINTER,), 0, name) if _SUFFIX.search(name) and self.claim(name) is None else None

    def build(
        self,
        listing: Listing,
        probe: Callable[[Entry], FileReport],
        claims: dict[str, Claim],
        subfolder: Callable[[Entry], Listing | None],
    ) -> Run | None:
        """A ``BackupAndRestore`` folder's two saves indexed by the epochs their metadata records
        (the newest one above the copy before it where a record cannot be read); a progress record
        without its weights is a save too, which Keras resumes with fresh weights."""
        entries = {entry.name: entry for entry in listing.entries if not entry.is_dir}
        if not any(name in entries for name in (*_BACKUP_FILES, *_BACKUP_FILES.values())):
            return super().build(listing, probe, self._without_shards(claims, entries), subfolder)
        epochs = [_epoch(probe, entries.get(progress)) for progress in _BACKUP_FILES.values()]
        newest, previous = epochs
        if newest is None:
            newest = previous + 1 if previous is not None else 1
        if previous is None:
            previous = max(0, newest - 1)
        claims = dict(claims)
        for (weights, progress), number in zip(_BACKUP_FILES.items(), (newest, previous), strict=True):
            if weights in claims:
                claims[weights] = claims[weights]._replace(number=number)
            if progress in entries:
                claims[progress] = Claim((Role.METADATA,), number, "backup", Unit.EPOCH)
        return super().build(listing, probe, claims, subfolder)

    def _without_shards(self, claims: dict[str, Claim], entries: dict[str, Entry]) -> dict[str, Claim]:
        """Claims with the shards of a sharded save (``save_weights("x.weights.json",
        max_shard_size=...)``: ``x_00000.weights.h5``, … beside ``x.weights.json``) left out: they
        are one save, not one an epoch, and no file of theirs is ckptdoctor's to prune or move."""
        stems = [name.removesuffix(_SHARD_INDEX) for name in entries if name.endswith(_SHARD_INDEX)]
        if not stems:
            return claims
        shard = re.compile("^(?:" + "|".join(map(re.escape, stems)) + r")_[0-9]{5}\.weights\.h5\Z")
        return {name: claim for name, claim in claims.items() if not shard.match(name)}

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        """What ``BackupAndRestore.on_train_begin`` loads: the newest save; where its weights fail to
        load with an ``OSError`` (cut, damaged) and the ``.bkp`` copy is there, that copy instead."""
        saves = {file.entry.name: checkpoint for checkpoint in run.checkpoints for file in checkpoint.files}
        newest = saves.get(BACKUP) or saves.get(PROGRESS)
        if newest is None:
            return None
        weights = next((f for f in newest.files if f.entry.name == BACKUP), None)
        previous = saves.get(BACKUP + PREVIOUS)
        fails = weights is not None and any(problem.status is not None for problem in weights.report.problems)
        return previous if fails and previous is not None else newest

    def left_in_place(self, checkpoint: Checkpoint) -> str | None:
        if any(f.entry.name in _BACKUP_FILES or f.entry.name in _BACKUP_FILES.values() for f in checkpoint.files):
            return (
                "BackupAndRestore's own save: Keras falls back from a damaged latest.weights.h5 to its .bkp copy only while both are there"
            )
        return None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        names = {f.entry.name for f in checkpoint.files}
        if names & set(_BACKUP_FILES):
            loads = (
                f"it finds {BACKUP} damaged, copies {BACKUP + PREVIOUS} over it"
                if BACKUP not in names and self.auto_resume_pick(run) is checkpoint
                else f"it loads {BACKUP}"
            )
            return f'call `model.fit(...)` again with `keras.callbacks.BackupAndRestore("{run.path}")`: {loads} and goes on after epoch {checkpoint.index}'

        path = checkpoint.files[0].path
        if path.endswith(".keras"):
            load = f'`model = keras.models.load_model("{path}")` (it restores the optimizer and its step count)'
        else:
            load = f'build and compile the model, then `model.load_weights("{path}")`'
        return f"{load}, then `model.fit(..., initial_epoch={checkpoint.index})`"


def _epoch(probe: Callable[[Entry], FileReport], record: Entry | None) -> int | None:
    """The epoch a progress record holds, or None where there is none or it cannot be read."""
    epoch = probe(record).fact("epoch") if record is not None else None
    return int(epoch) if epoch is not None else None
