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
"""Each backup's weights, and the file that records its epoch."""
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
        """A ``BackupAndRestore`` folder's saves indexed by the epochs their metadata records."""
        entries = {entry.name: entry for entry in listing.entries}
        for weights, progress in _BACKUP_FILES.items():
            if weights not in claims:
                continue
            recorded = entries.get(progress)
            epoch = probe(recorded).fact("epoch") if recorded is not None and not recorded.is_dir else None
            number = int(epoch) if epoch is not None else 0
            claims = {**claims, weights: claims[weights]._replace(number=number)}
            if recorded is not None:
                claims[progress] = Claim((Role.METADATA,), number, "backup", Unit.EPOCH)
        return super().build(listing, probe, claims, subfolder)

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        if any(f.entry.name in _BACKUP_FILES for f in checkpoint.files):
            return (
                f'call `model.fit(...)` again with `keras.callbacks.BackupAndRestore("{run.path}")`: it loads {BACKUP} '
                f"and goes on after epoch {checkpoint.index}"
            )
        path = checkpoint.files[0].path
        if path.endswith(".keras"):
            load = f'`model = keras.models.load_model("{path}")` (it restores the optimizer and its step count)'
        else:
            load = f'build and compile the model, then `model.load_weights("{path}")`'
        return f"{load}, then `model.fit(..., initial_epoch={checkpoint.index})`"
