"""timm's ``train.py``: ``checkpoint-<epoch>.pth.tar`` beside ``last.pth.tar`` and ``model_best.pth.tar``.

Every save writes ``tmp.pth.tar`` and renames it to ``last.pth.tar``; the numbered files of the
top-N list and ``model_best.pth.tar`` are hard links to it, so sizes count each inode once.
``recovery-<epoch>-<batch>.pth.tar`` are mid-epoch saves; ``tmp.pth.tar`` and
``recovery_tmp.pth.tar`` left behind mean a save was interrupted.
"""

from __future__ import annotations

import re

from ckptdoctor.layouts._base import Claim, Layout
from ckptdoctor.model import Entry, Role, Unit
from ckptdoctor.readers.sniff import Format

_NUMBERED = re.compile(r"^checkpoint-(\d+)\.pth\.tar$")
_POINTERS = re.compile(r"^(last|model_best|recovery-\d+-\d+)\.pth\.tar$")
_STAGING = frozenset({"tmp.pth.tar", "recovery_tmp.pth.tar"})
_SIGNATURE = frozenset({"last.pth.tar", "model_best.pth.tar", "args.yaml", "summary.csv"})
"""Files only timm's ``train.py`` leaves beside its checkpoints."""

BUNDLED = (Role.MODEL, Role.OPTIMIZER)


class TimmLayout(Layout):
    name = "timm"
    default_unit = Unit.EPOCH
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE})
    loader_allows = frozenset({"argparse.Namespace"})
    """The saver stores ``args`` as a Namespace; timm's loaders (``_torch_load`` in
    ``timm/models/_helpers.py``, ``timm/task/_helpers.py``) load with exactly this one allowed."""

    def recognises(self, entries: tuple[Entry, ...]) -> bool:
        # a hand-made loop may name files checkpoint-3.pth.tar too; timm leaves its signature
        return any(entry.name in _SIGNATURE for entry in entries)

    def claim(self, name: str) -> Claim | None:
        match = _NUMBERED.match(name)
        return Claim(BUNDLED, int(match[1]), "checkpoint", Unit.EPOCH) if match else None

    def pointer(self, name: str) -> Claim | None:
        match = _POINTERS.match(name)
        return Claim((Role.POINTER,), 0, match[1].split("-")[0]) if match else None

    def staging(self, name: str) -> Claim | None:
        return Claim((Role.TEMP,), 0, name.split(".")[0]) if name in _STAGING else None
