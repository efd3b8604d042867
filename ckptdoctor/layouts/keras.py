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
"""

from __future__ import annotations

import re

from ckptdoctor.layouts._base import Claim, Layout
from ckptdoctor.layouts.torch import parse_name
from ckptdoctor.model import Checkpoint, Role, Run, Unit
from ckptdoctor.readers import hdf5, keras
from ckptdoctor.readers.files import checkpoint_suffixes

_CONTENT = frozenset({keras.KERAS, hdf5.HDF5})
_SUFFIX = re.compile("(?:" + "|".join(map(re.escape, checkpoint_suffixes(_CONTENT))) + r")\Z", re.IGNORECASE)


class KerasLayout(Layout):
    """Names are parsed as a script's templates are (``layouts.torch.parse_name``), for Keras' formats."""

    name = "keras"
    default_unit = Unit.EPOCH
    content = _CONTENT
    claimable = _SUFFIX
    whole_saves = True

    def claim(self, name: str) -> Claim | None:
        parsed = parse_name(name, _SUFFIX)
        if parsed is None:
            return None
        # every Keras save holds the weights and the optimizer's variables: one file per save
        return Claim((Role.MODEL, Role.OPTIMIZER), parsed.index, parsed.prefix or "keras", parsed.unit)

    def pointer(self, name: str) -> Claim | None:
        """A save without a number (``best.keras``, ``model.weights.h5``): rewritten by each save."""
        return Claim((Role.POINTER,), 0, name) if _SUFFIX.search(name) and self.claim(name) is None else None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        path = checkpoint.files[0].path
        if path.endswith(".keras"):
            load = f'`model = keras.models.load_model("{path}")` (it restores the optimizer and its step count)'
        else:
            load = f'build and compile the model, then `model.load_weights("{path}")`'
        return f"{load}, then `model.fit(..., initial_epoch={checkpoint.index})`"
