"""NeMo's ``.nemo`` archives: a model's weights and config, packed for ``restore_from``.

``nemo/core/connectors/save_restore_connector.py``: ``save_to`` writes the model's config
(``model_config.yaml``), its state dict (``model_weights.ckpt``, a bare ``torch.save``; with model
parallelism ``mp_rank_XX/model_weights.ckpt`` or ``tp_rank_XX_pp_rank_XXX/model_weights.ckpt``)
and artefacts (tokenizers) into a folder, then ``_make_nemo_file_from_folder`` tars it
(``tarfile.open(filename, "w:")`` with ``arcname="."``; before NeMo 1.7 ``"w:gz"``; ``_tar_open``
reads both). ``NeMoModelCheckpoint`` (``nemo/utils/callbacks/nemo_model_checkpoint.py``) writes
``{dirpath}/{prefix}.nemo`` beside its Lightning checkpoints, moving the one before to
``{prefix}-v{N}.nemo`` and deleting that once the new one is written
(``_backup_existing_nemo_ckpt``); the tar is written in place, not atomically. A ``.nemo`` holds no
optimizer: training from it starts a new fit with its weights. In a folder of Lightning
checkpoints the lightning run is the folder's, and a ``.nemo`` beside them is read as a file of it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ckptdoctor.layouts.base import Layout
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.model import Checkpoint, CheckpointFile, Role, Run, Unit
from ckptdoctor.readers.tararchive import MEMBERS, TAR

_NEMO = re.compile(r"^(.+?)(?:-v([0-9]+))?\.nemo\Z")
_CONFIG = "model_config.yaml"
_WEIGHTS = "model_weights.ckpt"


class NemoLayout(Layout):
    name = "nemo"
    packages = ("nemo",)
    vocabulary = ("NeMo", ".nemo", "restore_from", "model_weights.ckpt", "model_config.yaml", "exp_manager")
    builds_on = ("torch",)
    default_unit = Unit.SAVE
    content = frozenset({TAR})
    resume_needs = frozenset({Role.MODEL})
    claimable = re.compile(r"\.nemo\Z")

    def claim(self, name: str) -> Claim | None:
        # `{prefix}-vN.nemo` is the save before, kept while the next one is written
        match = _NEMO.match(name)
        return Claim((Role.MODEL,), int(match[2] or 0), match[1], Unit.SAVE) if match else None

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        """The config and weights ``restore_from`` reads, where the archive's members were listed
        (``verify``): at the top, or per model-parallel rank."""
        missing: list[str] = []
        for file in files:
            members = file.report.fact(MEMBERS)
            if members is None:
                continue
            names = members.split("\n")
            if _CONFIG not in names:
                missing.append(f"{file.name}:{_CONFIG}")
            if not any(name.rpartition("/")[2] == _WEIGHTS for name in names):
                missing.append(f"{file.name}:{_WEIGHTS}")
        return tuple(missing)

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        path = self.resume_path(run, checkpoint)
        return (
            f'restore the model with `YourModel.restore_from("{path}")` and start a new `trainer.fit(model)`; '
            "a .nemo holds no optimizer state"
        )
