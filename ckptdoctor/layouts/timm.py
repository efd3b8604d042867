"""timm's ``train.py`` (``CheckpointSaver``): ``checkpoint-<epoch>.pth.tar`` beside ``last.pth.tar`` and ``model_best.pth.tar``.

Every save writes ``tmp.pth.tar`` and renames it to ``last.pth.tar``; the numbered files of the
top-N list and ``model_best.pth.tar`` are hard links to it, so sizes count each inode once.
``recovery-<epoch>-<update>.pth.tar`` are mid-epoch saves (``--recovery-interval``), renamed from
``recovery_tmp.pth.tar``; the saver deletes all but the newest two of its own session and never
those of an earlier session. ``tmp.pth.tar`` and ``recovery_tmp.pth.tar`` left behind mean a save
was interrupted.

How recovery saves index: every file records the epoch it was saved in, and ``--resume`` continues
at the next epoch from either kind (``resume_checkpoint``: ``epoch + 1`` for version-2 files). So
``recovery-E-U`` fills epoch E's place: newer than ``checkpoint-<E-1>``, older than
``checkpoint-E``, which is written when epoch E ends. Epoch E's checkpoint is ``checkpoint-E``
where it exists, else the recovery save of E with the highest update; the other recovery saves are
loose copies, as ``last.pth.tar`` is. (timm writes no other names: no ``milestone-N``.)
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ckptdoctor.discover import Listing
from ckptdoctor.layouts._base import Claim, Layout, OwnObjects, group
from ckptdoctor.model import Checkpoint, Entry, FileReport, Role, Run, Unit
from ckptdoctor.readers.sniff import Format

_NUMBERED = re.compile(r"^checkpoint-([0-9]+)\.pth\.tar\Z")
_RECOVERY = re.compile(r"^recovery-([0-9]+)-([0-9]+)\.pth\.tar\Z")
_POINTERS = re.compile(r"^(last|model_best)\.pth\.tar\Z")
_STAGING = frozenset({"tmp.pth.tar", "recovery_tmp.pth.tar"})
_SIGNATURE = frozenset({"last.pth.tar", "model_best.pth.tar", "args.yaml", "summary.csv"})
"""Files only timm's ``train.py`` leaves beside its checkpoints."""

BUNDLED = (Role.MODEL, Role.OPTIMIZER)


class TimmLayout(Layout):
    name = "timm"
    builds_on = ("torch",)
    default_unit = Unit.EPOCH
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE})
    own_objects = OwnObjects(
        loader="timm's own loader (`_torch_load` in `timm/models/_helpers.py`) allows exactly `argparse.Namespace` when it resumes",
        allows=frozenset({"argparse.Namespace"}),
    )
    """The saver stores ``args`` as a Namespace; timm's loaders (``_torch_load`` in
    ``timm/models/_helpers.py``, ``timm/task/_helpers.py``) load with exactly this one allowed."""

    def recognises(self, entries: tuple[Entry, ...]) -> bool:
        # a hand-made loop may name files checkpoint-3.pth.tar too; timm leaves its signature
        return any(entry.name in _SIGNATURE for entry in entries)

    claimable = re.compile(r"\.pth\.tar\Z")

    def claim(self, name: str) -> Claim | None:
        if match := _NUMBERED.match(name):
            return Claim(BUNDLED, int(match[1]), "checkpoint", Unit.EPOCH)
        if match := _RECOVERY.match(name):
            return Claim(BUNDLED, int(match[1]), "recovery", Unit.EPOCH)
        return None

    def build(
        self,
        listing: Listing,
        probe: Callable[[Entry], FileReport],
        claims: dict[str, Claim],
        subfolder: Callable[[Entry], Listing | None],
    ) -> Run | None:
        newest: dict[int, str] = {}
        for name, claim in claims.items():
            held = newest.get(claim.number)
            if held is None or _recency(name) > _recency(held):
                newest[claim.number] = name
        return group(listing, self, probe, {name: claims[name] for name in newest.values()})

    def pointer(self, name: str) -> Claim | None:
        if match := _POINTERS.match(name):
            return Claim((Role.POINTER,), 0, match[1])
        # a recovery save that a newer save of its epoch supersedes: a copy outside the sequence
        return Claim((Role.POINTER,), 0, "recovery") if _RECOVERY.match(name) else None

    def staging(self, name: str) -> Claim | None:
        return Claim((Role.TEMP,), 0, name.split(".")[0]) if name in _STAGING else None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        path = checkpoint.files[0].path
        hint = f"pass `--resume {path}` to timm's `train.py`"
        if (match := _RECOVERY.match(checkpoint.files[0].name)) is None:
            return hint
        return (
            f"{hint}; it was saved mid-epoch (epoch {match[1]}, update {match[2]}), and timm goes on "
            f"at epoch {int(match[1]) + 1}, skipping the rest of epoch {match[1]}"
        )


def _recency(name: str) -> int:
    """Which of two saves of one epoch is newer: ``checkpoint-E`` (written when the epoch ends)
    above every recovery save of E, which rank by their update number."""
    match = _RECOVERY.match(name)
    return int(match[2]) if match else 1 << 62
