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
E the epochs completed), and with ``double_checkpoint=True`` the previous pair as ``….bkp``. Each
is indexed by the epoch its metadata records. ``on_train_begin`` (``_load_model``) loads
``latest.weights.h5`` where it is there and sets the epoch from ``training_metadata.json`` where
that is there, each on its own: without the weights ``fit`` goes on at the recorded epoch with
fresh weights, without the record at epoch 0 with the saved weights, both without a word. Only
where loading the weights raises ``OSError`` (a cut or empty file) and ``latest.weights.h5.bkp``
is there does it copy the previous pair over the newest (deleting ``training_metadata.json``
where there is no ``.bkp`` record) and load again; an unreadable record (``json.loads``) fails
``fit`` with no fallback.

A save under a name of its own, with no number (``best.keras``, ``model.weights.h5``), stands for
one of the numbered saves beside it; alone in its folder it is the run's one save.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.base import Layout
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.layouts.torch import parse_name
from ckptdoctor.model import Checkpoint, CheckpointFile, Entry, FileReport, Problem, Role, Run, Unit
from ckptdoctor.quoting import shell_word
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
_PROGRESS_FILES = frozenset(_BACKUP_FILES.values())
_BACKED_UP = "backup"
"""The prefix of ``BackupAndRestore``'s files."""
_BUNDLE = (Role.MODEL, Role.OPTIMIZER)
"""Every Keras save holds the weights and the optimizer's variables: one file per save."""
_SHARD_INDEX = ".weights.json"
"""The index of a sharded save (``ShardedH5IOStore``)."""
_SUFFIX = re.compile("(?:" + "|".join(map(re.escape, checkpoint_suffixes(_CONTENT))) + r")\Z", re.IGNORECASE)
_OWN_SUFFIX = re.compile(r"\.(?:keras|weights\.h5)\Z", re.IGNORECASE)
"""The suffixes only Keras 3 gives a save (``model.save`` wants ``.keras``, ``save_weights``
``.weights.h5``): a file so named is a Keras save whatever its name (legacy ``.h5`` is any HDF5)."""


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD101/save-optimizer-beside": "",  # one Keras file holds the weights and the optimizer: nothing saves them apart
        "CKD101/weights-alone": "",  # the file that is gone held the weights too
        "CKD101/quarantine-leftovers": "Move the half-saved {unit} aside so that nothing resumes from it: {quarantine}.",
        "CKD101/stop-deleting": "",  # no Keras save keeps its optimizer in a file of its own
        "CKD102/point-model-saver": "",  # one Keras file holds the weights and the optimizer: nothing saves them apart
        "CKD102/quarantine-orphans": "Move what is left of the {unit} aside so that nothing resumes from it: {quarantine}.",
        "CKD106/async-save": "",  # BackupAndRestore writes its record right after the weights, in the same call
        "CKD106/copy-marker": "Restore {expected} from a backup or object-store copy into {run}, then run `ckptdoctor verify {run}`.",
        "CKD106/quarantine-uncommitted": "Move the {unit} without its record aside so that nothing resumes from it: {quarantine}.",
        "CKD114/name-last": "Do not call `fit` with `BackupAndRestore` on {run} as it is: it takes no checkpoint to resume from but loads what its folder holds, and the newest save there is not whole.",
        "CKD114/move-incomplete": "Put the previous save, {unit} {resume}, in the newest's place, as BackupAndRestore does itself only when the newest weights fail to load: keep a copy of the newest pair elsewhere, then copy latest.weights.h5.bkp over latest.weights.h5 and training_metadata.json.bkp over training_metadata.json in {run} (`ckptdoctor repair` leaves BackupAndRestore's files where they are: Keras needs both pairs to fall back).",
        "CKD114/keep-resuming": "",  # BackupAndRestore is given its folder, never a checkpoint
        "CKD207/fresh-files": 'If freshly written files show the same error, the saving code produces it: save with `model.save(path)`, whose archive holds `model.weights.h5`; Keras 3.15 cannot load the archives that `saving_lib.save_model(..., weights_format="npz")` writes.',
        "CKD404/safe-mode": "Do not pass `safe_mode=False` to `keras.models.load_model` unless you wrote {name} yourself; load the weights alone into a model built in code instead: `model.load_weights({name})` reads no configuration.",
        "CKD404/code-in-package": "Replace `Lambda` layers with a subclassed layer registered with `@keras.saving.register_keras_serializable()`, whose code lives in your package, not in the file.",
    }
)
"""Keras' own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class KerasLayout(Layout):
    """Names are parsed as a script's templates are (``layouts.torch.parse_name``), for Keras' formats."""

    name = "keras"
    packages = ("keras",)
    fix_wordings = _FIX_WORDINGS
    vocabulary = ("Keras", "keras.", "load_model", "load_weights", "safe_mode", "BackupAndRestore", "initial_epoch")
    default_unit = Unit.EPOCH
    content = _CONTENT | {Format.JSON}  # BackupAndRestore's training_metadata.json
    claimable = re.compile(r"(?:" + _SUFFIX.pattern.removesuffix(r"\Z") + r"|\.json)(?:\.bkp)?\Z", re.IGNORECASE)
    whole_saves = True
    named_files = MappingProxyType(
        {
            name: Named(functools.partial(hfjson.read_values, name=name, keys={"epoch": int, "batch": int}), Format.JSON)
            for name in _PROGRESS_FILES
        }
    )

    def claim(self, name: str) -> Claim | None:
        if name in _BACKUP_FILES:
            return Claim(_BUNDLE, 0, _BACKED_UP, Unit.EPOCH)  # its epoch is in its metadata: see build
        if name in _PROGRESS_FILES:
            return Claim((Role.METADATA,), 0, _BACKED_UP, Unit.EPOCH)
        parsed = parse_name(name, _SUFFIX)
        if parsed is None:
            return None
        return Claim(_BUNDLE, parsed.index, parsed.prefix or "keras", parsed.unit)

    def recorded(self, name: str) -> Claim | None:
        """A save under a name of its own (``best.keras``): the run's one save where no numbered
        one is beside it, placed by ``build``."""
        if _OWN_SUFFIX.search(name) and self.claim(name) is None:
            return Claim(_BUNDLE, -1, name, Unit.SAVE)
        return None

    def pointer(self, name: str) -> Claim | None:
        """A save without a number beside numbered ones (``best.keras``, ``model.weights.h5``):
        rewritten by each save."""
        return Claim((Role.POINTER,), 0, name) if _SUFFIX.search(name) and self.claim(name) is None else None

    def required(self, claims: Sequence[Claim]) -> tuple[Role, ...]:
        """A ``BackupAndRestore`` save is its weights and its progress record, whichever is there:
        without the weights Keras goes on with fresh ones, without the record at epoch 0."""
        if any(claim.prefix == _BACKED_UP for claim in claims):
            return (*_BUNDLE, Role.METADATA)
        return super().required(claims)

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
        saves = {name: claim for name, claim in claims.items() if claim.prefix != _BACKED_UP}
        epochs = [_epoch(probe, entries.get(progress)) for progress in _BACKUP_FILES.values()]
        if not any(name in entries for name in _BACKUP_FILES) and epochs == [None, None]:
            # no weights of BackupAndRestore and no record of its: a progress record of some other tool
            return super().build(listing, probe, self._placed(self._without_shards(saves, entries)), subfolder)
        newest, previous = epochs
        if newest is not None and newest == previous and _broken(probe, entries.get(BACKUP)):
            # killed writing the weights, after the .bkp copies and before the record: the .bkp
            # pair is the save both records name, the weights a later save never recorded
            newest += 1
        has_previous = any(name.endswith(PREVIOUS) for name in entries if name in claims)
        if newest is None:  # nothing records it: Keras goes on at epoch 0, or this one followed the previous save
            newest = previous + 1 if previous is not None else int(has_previous)
        if previous is None or previous >= newest:
            previous = max(0, newest - 1)
            newest = previous + 1 if has_previous else newest
        claims = {name: claim for name, claim in claims.items() if claim.number >= 0}  # an unnumbered save is a copy here
        for (weights, progress), number in zip(_BACKUP_FILES.items(), (newest, previous), strict=True):
            for name in (weights, progress):
                if name in claims:
                    claims[name] = claims[name]._replace(number=number)
        return super().build(listing, probe, claims, subfolder)

    def _placed(self, claims: dict[str, Claim]) -> dict[str, Claim]:
        """Saves under names of their own (``best.keras``) are copies of the numbered ones beside
        them, and where there are none, the run's one save."""
        numbered = {name: claim for name, claim in claims.items() if claim.number >= 0}
        return numbered or {name: claim._replace(number=0) for name, claim in claims.items()}

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
        open (``_falls_back``) and the ``.bkp`` copy is there, that copy instead."""
        saves = {file.entry.name: checkpoint for checkpoint in run.checkpoints for file in checkpoint.files}
        newest = saves.get(BACKUP) or saves.get(PROGRESS)
        if newest is None:
            return None
        weights = next((f for f in newest.files if f.entry.name == BACKUP), None)
        previous = saves.get(BACKUP + PREVIOUS)
        return previous if weights is not None and _falls_back(weights) and previous is not None else newest

    def left_in_place(self, checkpoint: Checkpoint) -> str | None:
        if _backed_up(checkpoint):
            return (
                "BackupAndRestore's own save: Keras falls back from a damaged latest.weights.h5 to its .bkp copy only while both are there"
            )
        return None

    def missing_name(self, checkpoint: Checkpoint, role: Role) -> str | None:
        """The file of its pair that a ``BackupAndRestore`` save lacks: its weights, or its record."""
        if not _backed_up(checkpoint):
            return None
        weights = BACKUP + PREVIOUS if _previous(checkpoint) else BACKUP
        return _BACKUP_FILES[weights] if role is Role.METADATA else weights

    def missing_note(self, run: Run, checkpoint: Checkpoint, role: Role) -> tuple[str, str] | None:
        """What ``fit`` with ``BackupAndRestore`` makes of a save that lacks its weights or its
        record, where it would load that save: it says nothing, and goes on from the wrong place."""
        if not _backed_up(checkpoint) or role is Role.OPTIMIZER or self.auto_resume_pick(run) is not checkpoint:
            return None
        folder = shell_word(run.path)
        if role is Role.METADATA:
            weights = BACKUP + PREVIOUS if _previous(checkpoint) else BACKUP
            how = (
                f"BackupAndRestore copies {weights} over {BACKUP}, deletes {PROGRESS} and" if _previous(checkpoint) else "BackupAndRestore"
            )
            return (
                f"{how} goes on from epoch 0 with the weights of {weights}, counting again the epochs they had trained, without a word",
                f'If you know how many epochs {weights} had completed, write them into {folder}/{_BACKUP_FILES[weights]} (`{{"epoch": 3, "batch": 0}}` for 3): '
                "BackupAndRestore then goes on after that epoch with these weights.",
            )
        epoch = _recorded_epoch(checkpoint)
        return (
            f"BackupAndRestore loads no weights and goes on after epoch {epoch} with freshly initialised weights and optimizer, without a word",
            f"If no copy of {BACKUP} exists and no earlier save will do, start the training over knowingly: "
            f"`rm -- {folder}/{PROGRESS}` makes BackupAndRestore start at epoch 0.",
        )

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        if _backed_up(checkpoint):
            fit = f'call `model.fit(...)` again with `keras.callbacks.BackupAndRestore("{run.path}")`'
            after = f"goes on after epoch {_recorded_epoch(checkpoint)}"
            if not _previous(checkpoint):
                return f"{fit}: it loads {BACKUP} and {after}"
            if self.auto_resume_pick(run) is checkpoint:
                return f"{fit}: it finds {BACKUP} damaged, copies {BACKUP + PREVIOUS} over it and {after}"
            folder = shell_word(run.path)
            copies = " && ".join(f"cp -- {folder}/{name}{PREVIOUS} {folder}/{name}" for name in (BACKUP, PROGRESS))
            newest = self.auto_resume_pick(run)  # what is left of the newest save, which the copies overwrite
            keep = "keep a copy of what is left of the newest save elsewhere if you may want it, then " if newest is not None else ""
            return f"{keep}put the previous pair in the newest's place (`{copies}`), then {fit}: it loads {BACKUP} and {after}"
        path = checkpoint.files[0].path
        if path.endswith(".keras"):
            load = f'`model = keras.models.load_model("{path}")` (it restores the optimizer and its step count)'
        else:
            load = f'build and compile the model, then `model.load_weights("{path}")`'
        if run.unit is Unit.SAVE:
            return f"{load}, then `model.fit(..., initial_epoch=...)` with the epochs it had trained: the file does not record them"
        return f"{load}, then `model.fit(..., initial_epoch={checkpoint.index})`"

    def resume_path(self, run: Run, checkpoint: Checkpoint) -> str:
        """``BackupAndRestore`` is given its folder, not a file."""
        return run.path if _backed_up(checkpoint) else super().resume_path(run, checkpoint)


def _backed_up(checkpoint: Checkpoint) -> bool:
    """Whether ``checkpoint`` is one of ``BackupAndRestore``'s pairs."""
    return any(f.entry.name in _BACKUP_FILES or f.entry.name in _PROGRESS_FILES for f in checkpoint.files)


def _previous(checkpoint: Checkpoint) -> bool:
    """Whether ``checkpoint`` is the ``.bkp`` pair, the copy of the save before the newest."""
    return any(f.entry.name.endswith(PREVIOUS) for f in checkpoint.files)


def _falls_back(weights: CheckpointFile) -> bool:
    """Whether ``on_train_begin`` falls back from these weights to the ``.bkp`` pair: only where
    h5py cannot open them (``OSError``: a cut or empty file). Damage inside a file that opens
    (zeroed metadata: h5py's ``RuntimeError``) fails ``fit`` with no fallback."""
    return bool(weights.report.problems & {Problem.EMPTY, Problem.TRUNCATED})


def _recorded_epoch(checkpoint: Checkpoint) -> int:
    """The epoch a ``BackupAndRestore`` save's record holds (its index where it holds none)."""
    epoch = next((f.report.fact("epoch") for f in checkpoint.files if Role.METADATA in f.roles), None)
    return int(epoch) if epoch is not None else checkpoint.index


def _broken(probe: Callable[[Entry], FileReport], entry: Entry | None) -> bool:
    """Whether a file is there and unusable as it is (cut, damaged: a problem that gives a status)."""
    return entry is not None and any(problem.status is not None for problem in probe(entry).problems)


def _epoch(probe: Callable[[Entry], FileReport], record: Entry | None) -> int | None:
    """The epoch a progress record holds, or None where there is none or it cannot be read."""
    epoch = probe(record).fact("epoch") if record is not None else None
    return int(epoch) if epoch is not None else None
