"""timm's ``train.py`` (``CheckpointSaver``): ``checkpoint-<epoch>.pth.tar`` beside ``last.pth.tar`` and ``model_best.pth.tar``.

From ``timm/utils/checkpoint_saver.py`` (huggingface/pytorch-image-models aa4b5850, and timm 1.0.31
as released, which adds milestones and the saver's own bookkeeping) and ``train.py``. Every save
writes ``tmp.pth.tar`` and renames it to ``last.pth.tar``; the numbered files of the top-N list,
``model_best.pth.tar`` and 1.0.31's ``milestone-<N>.pth.tar`` (``save_milestone``: N counts the
completed epochs, never evicted) are hard links to it, so sizes count each inode once.
``recovery-<epoch>-<update>.pth.tar`` are mid-epoch saves (``--recovery-interval``), renamed from
``recovery_tmp.pth.tar``; the saver deletes all but the newest two of its own session and never
those of an earlier session. ``tmp.pth.tar`` and ``recovery_tmp.pth.tar`` left behind mean a save
was interrupted.

How saves index: every file records the epoch it was saved in, and ``--resume`` continues at the
next epoch from any of them (``resume_checkpoint``: ``epoch + 1`` for version-2 files). So
``recovery-E-U`` fills epoch E's place: newer than ``checkpoint-<E-1>``, older than
``checkpoint-E``, which is written when epoch E ends. A milestone and ``last.pth.tar`` are indexed
by the epoch they record (a milestone's name counts completed epochs, one more). Epoch E's
checkpoint is ``checkpoint-E`` where it exists, else its milestone, else ``last.pth.tar`` where it
holds E, else the recovery save of E with the highest update; the others are loose copies.

The numbered files are the best ``max_history`` (``--checkpoint-hist``, 10) by the eval metric,
not the newest: an epoch whose metric does not make that list gets no ``checkpoint-E``, and its
state may be in ``last.pth.tar`` alone (``save_checkpoint``). ``last.pth.tar`` is a checkpoint of
the run only where it is the newest save: its epoch newer than every other end-of-epoch save, and
no recovery save of a later epoch; elsewhere it is a copy of one of them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.base import Layout
from ckptdoctor.layouts.content import OwnObjects
from ckptdoctor.layouts.copies import Copy
from ckptdoctor.layouts.grouping import group
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.model import TOP_LEVEL_NUMBER, Checkpoint, Entry, FileReport, Role, Run, Unit
from ckptdoctor.readers.files import with_keys
from ckptdoctor.readers.sniff import Format

_NUMBERED = re.compile(r"^checkpoint-([0-9]+)\.pth\.tar\Z")
_RECOVERY = re.compile(r"^recovery-([0-9]+)-([0-9]+)\.pth\.tar\Z")
_MILESTONE = re.compile(r"^milestone-([0-9]+)\.pth\.tar\Z")
_POINTERS = re.compile(r"^(last|model_best)\.pth\.tar\Z")
LAST = "last.pth.tar"
_EPOCH = f"{TOP_LEVEL_NUMBER}epoch"
_STAGING = frozenset({"tmp.pth.tar", "recovery_tmp.pth.tar"})
_SIGNATURE = frozenset({"last.pth.tar", "model_best.pth.tar", "args.yaml", "summary.csv"})
"""Files only timm's ``train.py`` leaves beside its checkpoints."""

BUNDLED = (Role.MODEL, Role.OPTIMIZER)


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD402/save-plain": "Nothing to change in your code: timm's saver writes `args` as an `argparse.Namespace` itself, and its own loader allows exactly that one; only other objects beside it stop timm's resume.",
    }
)
"""timm's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class TimmLayout(Layout):
    name = "timm"
    packages = ("timm",)
    fix_wordings = _FIX_WORDINGS
    vocabulary = ("timm", "recovery-", "checkpoint_hist")
    builds_on = ("torch",)
    default_unit = Unit.EPOCH
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE})
    own_objects = OwnObjects(
        loader="timm's own loader (`_torch_load` in `timm/models/_helpers.py`) allows exactly `argparse.Namespace` when it resumes",
        allows=frozenset({"argparse.Namespace"}),
    )
    """The saver stores ``args`` as a Namespace; timm's loaders (``_torch_load`` in
    ``timm/models/_helpers.py``, ``timm/task/_helpers.py``) load with exactly this one allowed."""
    index_keys = MappingProxyType({Unit.EPOCH: "epoch"})

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

    def recorded(self, name: str) -> Claim | None:
        if name == LAST or _MILESTONE.match(name):
            return Claim(BUNDLED, -1, name.partition("-")[0].partition(".")[0], Unit.EPOCH)
        return None

    def build(
        self,
        listing: Listing,
        probe: Callable[[Entry], FileReport],
        claims: dict[str, Claim],
        subfolder: Callable[[Entry], Listing | None],
    ) -> Run | None:
        saved = {name: claim for name, claim in claims.items() if claim.number >= 0}
        entries = {entry.name: entry for entry in listing.entries}
        recorded = {
            name: epoch for name, claim in claims.items() if claim.number < 0 and (epoch := _epoch(entries[name], probe)) is not None
        }
        saved |= {name: claims[name]._replace(number=epoch) for name, epoch in recorded.items() if name != LAST}
        if LAST in recorded and _newest(recorded[LAST], saved):
            saved[LAST] = claims[LAST]._replace(number=recorded[LAST])
        newest: dict[int, str] = {}
        for name, claim in saved.items():
            held = newest.get(claim.number)
            if held is None or _recency(name) > _recency(held):
                newest[claim.number] = name
        return group(listing, self, probe, {name: saved[name] for name in newest.values()})

    def pointer(self, name: str) -> Claim | None:
        if match := _POINTERS.match(name):
            return Claim((Role.POINTER,), 0, match[1])
        # a recovery save that a newer save of its epoch supersedes, a milestone of an epoch whose
        # checkpoint-E is there, one whose epoch cannot be read: copies outside the sequence
        if _RECOVERY.match(name) or _MILESTONE.match(name):
            return Claim((Role.POINTER,), 0, name.partition("-")[0])
        return None

    def staging(self, name: str) -> Claim | None:
        return Claim((Role.TEMP,), 0, name.split(".")[0]) if name in _STAGING else None

    def whole_copy(self, entry: Entry) -> Copy | None:
        # `last.pth.tar` where it is no checkpoint of its own: the save of its epoch, whole,
        # which `--resume` loads where the numbered file (a hard link, or a copy) is damaged
        return Copy.RESUMED if entry.name == LAST and not entry.is_symlink and not entry.is_dir else None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        path = checkpoint.files[0].path
        hint = f"pass `--resume {path}` to timm's `train.py`"
        if checkpoint.files[0].name == LAST:
            return (
                f"{hint}: it holds epoch {checkpoint.index}, which no checkpoint-{checkpoint.index}.pth.tar keeps (the saver "
                f"numbers only the best `--checkpoint-hist` by the eval metric), and timm goes on at epoch {checkpoint.index + 1}"
            )
        if _MILESTONE.match(checkpoint.files[0].name):
            return f"{hint}: it holds epoch {checkpoint.index}, and timm goes on at epoch {checkpoint.index + 1}"
        if (match := _RECOVERY.match(checkpoint.files[0].name)) is None:
            return hint
        return (
            f"{hint}; it was saved mid-epoch (epoch {match[1]}, update {match[2]}), and timm goes on "
            f"at epoch {int(match[1]) + 1}, skipping the rest of epoch {match[1]}"
        )


def _recency(name: str) -> int:
    """Which of two saves of one epoch stands for it: ``checkpoint-E`` (written when the epoch
    ends), then its milestone and ``last.pth.tar`` (the same bytes, hard links: the milestone is
    never evicted, ``last`` is overwritten by the next save), above every recovery save of E,
    which rank by their update number."""
    if match := _RECOVERY.match(name):
        return int(match[2])
    if _MILESTONE.match(name):
        return (1 << 62) - 1
    return (1 << 62) - 2 if name == LAST else 1 << 62


def _epoch(entry: Entry, probe: Callable[[Entry], FileReport]) -> int | None:
    """The epoch a save records (``save_state["epoch"]``); None where it cannot be read (a cut
    file stays beside the run, a copy with its own finding)."""
    value = None if entry.is_dir or entry.dangling else with_keys(entry, probe(entry)).fact(_EPOCH)
    return int(value) if value is not None and value.isdigit() else None


def _newest(epoch: int, saved: dict[str, Claim]) -> bool:
    """Whether ``last.pth.tar``, holding the end of ``epoch``, is newer than every other save:
    every other end-of-epoch save is of an earlier epoch, and no recovery save of a later one."""
    ends = [claim.number for name, claim in saved.items() if not _RECOVERY.match(name)]
    recovered = [claim.number for name, claim in saved.items() if _RECOVERY.match(name)]
    return epoch > max(ends, default=-1) and epoch >= max(recovered, default=-1)
