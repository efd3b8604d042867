"""fairseq's ``fairseq-train``: ``checkpoint{epoch}.pt`` and ``checkpoint_{epoch}_{updates}.pt`` in ``--save-dir``.

Everything below is read from ``fairseq/checkpoint_utils.py`` (``save_checkpoint``,
``load_checkpoint``, ``torch_persistent_save``, ``checkpoint_paths``) and ``fairseq/trainer.py``
(``Trainer.state_dict``, ``Trainer.load_checkpoint``, ``Trainer.checkpoint_suffix``) at
facebookresearch/fairseq 3d262bb25690e4eb2e7d3c1309b1e9c406ca4b99.

One save writes one file and copies it (``PathManager.copy``: whole copies, not links) to the
others its conditions name, in this order: ``checkpoint{E}.pt`` when epoch E ends,
``checkpoint_{E}_{U}.pt`` every ``--save-interval-updates`` inside epoch E (U counts updates, not
epochs), ``checkpoint_best.pt``, ``checkpoint.best_{metric}_{value:.3f}{rand}.pt``
(``--keep-best-checkpoints``) and ``checkpoint_last.pt``. Every name carries the trainer's
``checkpoint_suffix``: ``--checkpoint-suffix``, then ``-model_part-{rank}`` under model
parallelism, ``-rank-{rank}`` with base layers, ``-shard{rank}`` for FSDP's sharded state; a
rank's file is a whole bundle of that rank's share. (``_part{i}`` is the name the loader tries for
model-parallel shards, ``get_maybe_sharded_checkpoint_filename``.) The first file is written as
``<name>.tmp`` and renamed (``torch_persistent_save``), so a save killed while writing leaves a
``.tmp``; the copies are not atomic, so a kill while copying leaves a cut ``checkpoint_last.pt``.

Each file bundles ``model``, ``optimizer_history`` (whose last item holds the scheduler's state and
``num_updates``), ``extra_state`` (``train_iterator``, ``val_loss``, ``best``) and, unless
``--no-save-optimizer-state``, ``last_optimizer_state``. Without the last, ``load_checkpoint``
loads the weights and silently starts a new optimizer, schedule and update count.

The index. End-of-epoch saves count epochs and interval saves count updates, and a save's
updates are inside the file (``optimizer_history[-1]["num_updates"]``), not in the end-of-epoch
name. So:

- a run of end-of-epoch saves alone is indexed by epoch;
- a run of interval saves alone (``--no-epoch-checkpoints``) is indexed by updates (a step each),
  as fairseq's own ``--keep-interval-updates`` orders them;
- where both are there, by epoch: ``checkpoint_{E}_{U}`` fills epoch E's place, newer than
  ``checkpoint{E-1}`` and older than ``checkpoint{E}``, which supersedes it when the epoch ends
  (as timm's recovery saves do). Epoch E's checkpoint is ``checkpoint{E}.pt``, else its interval
  save with the most updates whose files are whole; the other saves of E are loose copies, and a
  staging file of any save but the chosen one is a leftover beside the run.

Resume: ``--restore-file`` defaults to ``checkpoint_last.pt`` in ``--save-dir``; without that file
fairseq starts training afresh (``Trainer.load_checkpoint``: "No existing checkpoint found") and
saves over the numbered checkpoints. A job killed after a save's first file and before its copies
leaves a whole ``checkpoint_last.pt`` that still holds the save before: the default then goes back
to it and trains the newer save's epoch (or updates) again, writing over it (CKD116); the newer
save resumes with ``--restore-file``, and is the resume point. Which save each copy holds is told
by its content (``copies.copy_of``: the pickle its central directory records is the save's), for
``checkpoint_last.pt`` and the ``--keep-best-checkpoints`` copies alike; where a save's own file
is cut or damaged and its copy is whole, the copy stands for it (``whole_copy``). Any other file
is named with ``--restore-file PATH``, given without the rank suffix: fairseq appends it
(``load_checkpoint``: ``restore_file.replace(".pt", suffix + ".pt")``).
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.absent import missing_from_siblings
from ckptdoctor.layouts.base import Layout
from ckptdoctor.layouts.copies import Copy, copied, loaded_copy
from ckptdoctor.layouts.grouping import group
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.layouts.pointers import Pointer, copy_pointer, pointer_files
from ckptdoctor.model import (
    Checkpoint,
    CheckpointFile,
    Entry,
    FileReport,
    PointerKind,
    PointerWrite,
    Role,
    Run,
    Unit,
)
from ckptdoctor.quoting import shell_word
from ckptdoctor.readers.sniff import Format

_RANKS = r"(?:-model_part-[0-9]+|-rank-[0-9]+|-shard[0-9]+|_part[0-9]+)*"
"""The rank suffixes fairseq appends (``Trainer.checkpoint_suffix``, ``distributed/utils.py``)."""
_EPOCH = re.compile(rf"^checkpoint([0-9]+)({_RANKS})\.pt\Z")
_INTERVAL = re.compile(rf"^checkpoint_([0-9]+)_([0-9]+)({_RANKS})\.pt\Z")
_LAST = re.compile(rf"^checkpoint_last({_RANKS})\.pt\Z")
_RANK_SUFFIX = re.compile(rf"({_RANKS})\.pt\Z")
"""A name's rank suffix, which ``--restore-file`` leaves out."""
_BEST = re.compile(rf"^checkpoint_best({_RANKS})\.pt\Z")
_BEST_KEPT = re.compile(rf"^checkpoint\.best_(.+)_(-?[0-9]+\.[0-9]{{3}})[0-9]*({_RANKS})\.pt\Z")
"""``--keep-best-checkpoints``: the metric's value with 3 decimals, then random digits against ties."""
_SIGNATURE = (_LAST, _BEST, _BEST_KEPT)
"""Copies only fairseq's ``save_checkpoint`` leaves beside its numbered checkpoints."""

LAST = "checkpoint_last.pt"
BUNDLED = (Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER)
"""``model``, ``last_optimizer_state``, ``optimizer_history`` (``bundles.ROLE_KEYS`` reads them)."""
_EPOCH_END = 1 << 62
"""Where an end-of-epoch save ranks among the saves of its epoch: after every interval save."""


class _Save(NamedTuple):
    """One save's name: its epoch, its updates where the name says them, its rank suffix."""

    epoch: int
    updates: int | None
    ranks: str


def _parsed(name: str) -> _Save | None:
    if match := _EPOCH.match(name):
        return _Save(int(match[1]), None, match[2])
    if match := _INTERVAL.match(name):
        return _Save(int(match[1]), int(match[2]), match[3])
    return None


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD116/name-newest": "Or pass `--restore-file` the file the last line names: the default, `checkpoint_last.pt`, holds the older save.",
    }
)
"""fairseq's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class FairseqLayout(Layout):
    name = "fairseq"
    packages = ("fairseq",)
    fix_wordings = _FIX_WORDINGS
    vocabulary = ("fairseq", "--restore-file", "checkpoint_last.pt", "last_optimizer_state", "--save-dir", "--reset-optimizer")
    builds_on = ("torch",)
    default_unit = Unit.EPOCH
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE})
    resume_needs = frozenset({Role.MODEL, Role.OPTIMIZER})
    """Without ``last_optimizer_state`` fairseq resumes silently with a new optimizer, schedule and update count."""

    claimable = re.compile(r"^checkpoint.*\.pt\Z")

    def claim(self, name: str) -> Claim | None:
        save = _parsed(name)
        return Claim(BUNDLED, save.epoch, f"checkpoint{save.ranks}", Unit.EPOCH) if save else None

    def recognises(self, entries: tuple[Entry, ...]) -> bool:
        # a hand-made loop may name a file checkpoint_3_500.pt; fairseq leaves its copies beside
        return any(pattern.match(entry.name) for entry in entries for pattern in _SIGNATURE)

    def whole_copy(self, entry: Entry) -> Copy | None:
        # `PathManager.copy` of a save's first file: checkpoint_last.pt (what the default
        # --restore-file loads), checkpoint_best.pt and checkpoint.best_* (kept aside)
        if entry.is_symlink or entry.is_dir:
            return None
        if _LAST.match(entry.name):
            return Copy.RESUMED
        return Copy.KEPT if _BEST.match(entry.name) or _BEST_KEPT.match(entry.name) else None

    def pointer(self, name: str) -> Claim | None:
        if match := _LAST.match(name):
            return Claim((Role.POINTER,), 0, f"checkpoint_last{match[1]}")
        if match := _BEST.match(name):
            return Claim((Role.POINTER,), 0, f"checkpoint_best{match[1]}")
        if match := _BEST_KEPT.match(name):
            return Claim((Role.POINTER,), 0, f"checkpoint.best{match[3]}")
        return None

    def build(
        self,
        listing: Listing,
        probe: Callable[[Entry], FileReport],
        claims: dict[str, Claim],
        subfolder: Callable[[Entry], Listing | None],
    ) -> Run | None:
        saves = {name: save for name in claims if (save := _parsed(name)) is not None}
        if all(save.updates is None for save in saves.values()):
            return group(listing, self, probe, claims)
        if all(save.updates is not None for save in saves.values()):
            return group(listing, _BY_UPDATES, probe, {name: c for name in claims if (c := _BY_UPDATES.claim(name))})
        chosen = _newest_whole_saves(listing, probe, saves)
        return group(listing, _ByEpoch(frozenset(chosen)), probe, {name: claims[name] for name in chosen})

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        """The rank files (``-shard1``, ``-model_part-1``) the run's other checkpoints have, by the
        name this checkpoint's would have."""
        missing = missing_from_siblings(files, siblings)
        named = next((f.name for f in files if Role.TEMP not in f.roles and _parsed(f.name)), None)
        save = _parsed(named) if named else None
        if not missing or save is None:
            return missing
        stem = f"checkpoint{save.epoch}" if save.updates is None else f"checkpoint_{save.epoch}_{save.updates}"
        return tuple(f"{stem}{prefix.removeprefix('checkpoint')}.pt" for prefix in missing)

    def weights_only(self, saved: Sequence[Sequence[CheckpointFile]]) -> str | None:
        """``--no-save-optimizer-state``: every checkpoint's keys were read, and none holds
        ``last_optimizer_state`` (each still holds ``optimizer_history``, which alone resumes nothing)."""
        files = [f for files in saved for f in files if Role.TEMP not in f.roles]
        if not files or any(not f.report.keys_read or Role.OPTIMIZER in f.roles for f in files):
            return None
        return f"no checkpoint holds last_optimizer_state (--no-save-optimizer-state): the keys of {files[-1].name} are " + ", ".join(
            files[-1].report.keys[:8]
        )

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        """``checkpoint_last.pt``: the save it copies (known from its content), or, where it is
        missing, the one it should be: fairseq's default ``--restore-file`` then finds nothing and
        trains from scratch. A cut one is its own finding."""
        if not run.checkpoints:
            return ()
        lasts = [f for f in pointer_files(run) if _LAST.match(f.name)]
        if lasts:
            return tuple(p for f in lasts if (p := copy_pointer(run, f, "copy (--restore-file default)")))
        ranks = {f.prefix.removeprefix("checkpoint") for c in run.checkpoints for f in c.files if Role.TEMP not in f.roles}
        return () if len(ranks) > 1 else (Pointer(None, "", None, f"checkpoint_last{''.join(ranks)}.pt"),)

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        """The default ``--restore-file checkpoint_last.pt``: the save it copies, or the copy
        itself where it is cut (``load_checkpoint`` fails on it); None without one (a fresh start)."""
        last = next((f for f in pointer_files(run) if f.name == LAST), None)
        return loaded_copy(run, last) if last is not None else None

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        """``checkpoint_last.pt`` as fairseq writes it: a whole copy of the save. Never a link:
        fairseq's next save copies onto the path (``shutil.copyfile`` truncates and writes through
        a link), which would overwrite the checkpoint it named."""
        files = [f for f in checkpoint.files if Role.TEMP not in f.roles and Role.POINTER not in f.roles]
        if len(files) != 1 or (source is not None and not _LAST.match(source.name)):
            return None  # one copy per rank: ckptdoctor writes no rank's file for it
        if any(problem.status is not None for problem in files[0].report.problems):
            return None  # the checkpoint resumes from a whole copy: its own file is not one to copy
        ranks = _parsed(files[0].name)
        name = source.entry.name if source is not None else f"checkpoint_last{ranks.ranks if ranks else ''}.pt"
        return PointerWrite(name, os.path.basename(files[0].entry.os_path), PointerKind.COPY)

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        files = [f for f in checkpoint.files if Role.TEMP not in f.roles]
        if not files:
            return ""
        save, ranks = _parsed(files[0].name), _RANK_SUFFIX.search(files[0].name)
        hint = f"pass `--restore-file {_restore_file(files[0])}` to `fairseq-train`, with the same `--save-dir`"
        if ranks is not None and ranks[1]:
            hint += f" (each rank adds its own suffix, as `{ranks[1]}` here)"
        if save is None:
            hint += f"; it is a whole copy of {run.unit.value} {checkpoint.index}, whose own file is damaged"
        elif save.updates is not None and run.unit is Unit.EPOCH:
            hint += f"; it was saved inside epoch {save.epoch}, after {save.updates} updates, and fairseq goes on from there"
        if run.weights_only:
            hint += (
                "; it holds no optimizer state, so fairseq starts a new optimizer and learning-rate schedule and counts "
                "updates from 0 (as `--reset-optimizer --reset-lr-scheduler` would)"
            )
        if (last := _behind(run, checkpoint)) is not None:
            hint += (
                f". Without `--restore-file`, fairseq would load {last.name}, which still holds an older save (the job "
                f"stopped before copying {files[0].name} over it), and train again from there; "
                f"`cp {shell_word(files[0].path)} {shell_word(last.path)}` makes the default go on from here"
            )
        return hint

    def resume_path(self, run: Run, checkpoint: Checkpoint) -> str:
        """What ``--restore-file`` takes: the file without its rank suffix, which fairseq adds."""
        files = [f for f in checkpoint.files if Role.TEMP not in f.roles]
        return _restore_file(files[0]) if files else run.path

    def metric_values(self, run: Run, root: str, metric: str, read: Callable[[str], bytes | None]) -> dict[int, float]:
        """``checkpoint.best_{metric}_{value}.pt`` (``--keep-best-checkpoints``): each is a byte
        copy of the numbered save of the same call, and gives its value to the checkpoint it
        copies (``copied``: known from its content)."""
        values: dict[int, float] = {}
        for file in pointer_files(run):
            match = _BEST_KEPT.match(file.name)
            if match is not None and match[1] == metric and (index := copied(file)) is not None:
                values[index] = float(match[2])
        return values


class _ByUpdates(FairseqLayout):
    """A run of interval saves alone: each is a checkpoint, indexed by its updates."""

    default_unit = Unit.STEP

    def claim(self, name: str) -> Claim | None:
        save = _parsed(name)
        if save is None or save.updates is None:
            return None
        return Claim(BUNDLED, save.updates, f"checkpoint{save.ranks}", Unit.STEP)


class _ByEpoch(FairseqLayout):
    """Epoch and interval saves together: ``chosen`` are each epoch's checkpoint; the run's other
    numbered saves are copies beside it, and a staging file of one of them is a leftover."""

    def __init__(self, chosen: frozenset[str]) -> None:
        self.chosen = chosen

    def claim(self, name: str) -> Claim | None:
        return super().claim(name) if name in self.chosen else None

    def pointer(self, name: str) -> Claim | None:
        if (save := _parsed(name)) is not None:
            return Claim((Role.POINTER,), 0, f"checkpoint{save.ranks}")
        return super().pointer(name)


_BY_UPDATES = _ByUpdates()


def _newest_whole_saves(listing: Listing, probe: Callable[[Entry], FileReport], saves: dict[str, _Save]) -> list[str]:
    """Each epoch's checkpoint (its end-of-epoch save, else its interval save with the most
    updates whose every rank's file reads whole, else its newest), as the names of its files."""
    entries = {entry.name: entry for entry in listing.entries}
    by_save: dict[tuple[int, int], list[str]] = defaultdict(list)
    for name, save in saves.items():
        by_save[(save.epoch, _EPOCH_END if save.updates is None else save.updates)].append(name)
    by_epoch: dict[int, list[tuple[int, list[str]]]] = defaultdict(list)
    for (epoch, rank), names in by_save.items():
        by_epoch[epoch].append((rank, names))
    chosen: list[str] = []
    for candidates in by_epoch.values():
        candidates.sort(reverse=True)
        whole = next((names for _, names in candidates if all(_whole(entries[name], probe) for name in names)), None)
        chosen += whole if whole is not None else candidates[0][1]
    return chosen


def _whole(entry: Entry, probe: Callable[[Entry], FileReport]) -> bool:
    """Whether a file reads as a place to resume from (a problem that gives no status aside)."""
    return not entry.is_dir and not entry.dangling and all(problem.status is None for problem in probe(entry).problems)


def _behind(run: Run, checkpoint: Checkpoint) -> CheckpointFile | None:
    """The run's ``checkpoint_last.pt`` where it copies a save older than ``checkpoint``: the
    save was killed after its first file and before the copy (``save_checkpoint`` writes
    ``checkpoint_last.pt`` last), and fairseq's default ``--restore-file`` would go back to it."""
    last = next((f for f in pointer_files(run) if f.name == LAST and not f.report.issues), None)
    index = copied(last) if last is not None else None
    return last if index is not None and index < checkpoint.index else None


def _restore_file(file: CheckpointFile) -> str:
    """The path ``--restore-file`` takes for ``file``: without its rank suffix (fairseq adds it)."""
    return os.path.join(os.path.dirname(file.path), _RANK_SUFFIX.sub(".pt", file.name))
