"""MosaicML Composer's ``CheckpointSaver``: ``ep{epoch}-ba{batch}-rank{rank}.pt`` beside ``latest-rank{rank}.pt``.

From mosaicml/composer at 6405188805a0054b4551ec49e4919c54c971d0e8 (0.33.0.dev0):

- Names (``CheckpointSaver.__init__``, ``composer/callbacks/checkpoint_saver.py``): the Trainer's
  defaults are ``filename='ep{epoch}-ba{batch}-rank{rank}.pt'`` and
  ``latest_filename='latest-rank{rank}.pt'``, unpadded. ``epoch`` counts completed epochs and
  ``batch`` is the global batch count (``Timestamp``): the index here is the batch, a global step.
- Content (``_save_checkpoint``, ``composer/utils/checkpoint.py``): ``{'state': State.state_dict(),
  'rng': get_rng_state()}``; a ``weights_only`` save holds ``{'state': {model, integrations,
  metadata}}``. ``State.state_dict`` (``composer/core/state.py``) keeps ``model``, ``optimizers``
  (keyed by the optimizer's class), ``schedulers``, ``timestamp`` and the rest under ``state``
  (``bundles.ROLE_KEYS`` reads ``state.model`` and ``state.optimizers``).
- Ranks: today only global rank 0 writes a monolithic file (``_save_checkpoint``: ``elif
  dist.get_global_rank() == 0``) and every rank loads it (``download_checkpoint`` formats the path
  with rank 0); releases that saved under DeepSpeed wrote one file per rank. A checkpoint needs
  every rank's file the run's other checkpoints have.
- No atomic write (``_write_checkpoint_file``: ``open(filename, 'wb')``, ``torch.save``): a kill
  leaves a cut file under its final name.
- Latest: after the save (and its barrier) ``CheckpointSaver._save_checkpoint`` removes
  ``latest-rank{R}.pt`` and makes it a symlink to the save's path relative to the folder.
  ``Trainer(autoresume=True)`` (``Trainer._get_autoresume_checkpoint``) loads
  ``save_folder/latest-rank0.pt`` where ``os.path.exists`` says it is there: a dangling link reads
  as no checkpoint, and the run starts over.
- Remote runs: ``{latest_remote_file_name}.symlink``, a text object holding the remote name of the
  save (``create_symlink_file``), which ``get_file`` follows (``composer/utils/file_helpers.py``);
  it is found in a local copy of the bucket, naming a file of the same folder.
- Loading (``_torch_load_with_validation``): ``torch.load(weights_only=True)`` with
  ``_COMPOSER_CHECKPOINT_SAFE_GLOBALS`` allowed (``datetime.timedelta``, numpy arrays and dtypes,
  ``TorchVersion``): the timestamp's wall-clock times and the numpy RNG state need them.
- FSDP's sharded saves (``get_save_filename``: ``fsdp_config.sharded_ckpt_prefix_dir``, by default
  ``ep{epoch}-ba{batch}``): a folder of DCP files (``dist_cp.save`` with a ``FileSystemWriter``:
  ``__{R}_0.distcp`` and ``.metadata``), and global rank 0 alone makes ``latest-rank0.pt`` a
  symlink to the folder (``rank_saves_symlinks``: "sharded checkpoints use directories not files
  for load_paths"); ``load_path`` and autoresume load the folder (``load_sharded_checkpoint``).
  ``ShardedComposer`` claims them where Composer's latest pointer lies beside; without it they
  are DCP folders, which the dcp layout reads.
- Compressed saves (``is_compressed_pt``, ``get_compressor``: ``composer/utils/compression.py``): a
  ``filename`` ending ``.pt.<ext>`` is piped through the command-line tool of its suffix
  (``bz2``, ``gz``, ``lz4``, ``lzma``, ``lzo``, ``xz``, ``zst``) by ``_write_checkpoint_file``, and
  ``download_checkpoint`` pipes it back (``<tool> -dc``) into the ``.pt`` it hands ``torch.load``;
  the latest link is named by ``latest_filename`` (``latest-rank{rank}.pt.zst`` beside such saves).
  The reader judges what is inside each stream (``readers/compressed.py``).
- Not claimed: tarballs (``.tar``, ``.tar.gz``: ``composer_states.pt`` inside).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.absent import missing_from_siblings
from ckptdoctor.layouts.base import FolderLayout, Layout
from ckptdoctor.layouts.content import OwnObjects
from ckptdoctor.layouts.dcp import DcpLayout
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.layouts.pointers import Pointer, followed, symlink_pointers
from ckptdoctor.model import Checkpoint, CheckpointFile, Entry, PointerKind, PointerWrite, Role, Run, Unit
from ckptdoctor.readers import pointer
from ckptdoctor.readers.named import Named
from ckptdoctor.readers.sniff import Format

_COMPRESSED = r"(\.(?:bz2|gz|lz4|lzma|lzo|xz|zst))?"
"""``KNOWN_COMPRESSORS``' suffixes (``composer/utils/compression.py``)."""
_SAVE = re.compile(rf"^ep([0-9]+)-ba([0-9]+)-(rank[0-9]+)\.pt{_COMPRESSED}\Z")
_SHARDED = re.compile(r"^ep([0-9]+)-ba([0-9]+)\Z")
"""FSDP's sharded save folder (``sharded_ckpt_prefix_dir``'s default)."""
_LATEST = re.compile(rf"^latest-(rank[0-9]+)\.pt{_COMPRESSED}(\.symlink)?\Z")
_AUTORESUMED = "latest-rank0.pt"
"""What ``Trainer(autoresume=True)`` loads (``_get_autoresume_checkpoint``), where it exists."""
REMOTE_LATEST = "latest-rank0.pt.symlink"
"""The remote pointer of the rank that writes it (rank 0: ``rank_saves_symlinks``)."""

BUNDLED = (Role.MODEL, Role.OPTIMIZER)
"""What a save holds unless ``save_weights_only``; ``verify`` confirms it from ``state``'s keys."""

_NUMPY_DTYPES = (
    "Bool", "Byte", "Bytes", "CLongDouble", "Complex128", "Complex64", "DateTime64", "Float16", "Float32", "Float64",
    "Int16", "Int32", "Int64", "Int8", "Int", "Long", "LongDouble", "LongLong", "Object", "Short", "Str", "String",
    "TimeDelta64", "UByte", "UInt16", "UInt32", "UInt64", "UInt8", "UInt", "ULong", "ULongLong", "UShort", "Void",
)  # fmt: skip


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD116/name-newest": "Or pass `load_path=` the file the last line names instead of `autoresume=True`, which follows `latest-rank0.pt`.",
        "CKD402/save-plain": "Nothing to change in your code for the globals Composer allows itself (`_COMPOSER_CHECKPOINT_SAFE_GLOBALS`); any other object in the state (a callback's, an algorithm's) stops Composer's own load: keep those plain.",
    }
)
"""Composer's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class ComposerLayout(Layout):
    name = "composer"
    packages = ("composer",)
    fix_wordings = _FIX_WORDINGS
    vocabulary = ("Composer", "autoresume", "load_path", "latest-rank", "CheckpointSaver")
    builds_on = ("torch",)
    default_unit = Unit.STEP
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE, Format.TEXT, Format.DISTCP})
    resume_needs = frozenset({Role.MODEL, Role.OPTIMIZER})
    named_files = MappingProxyType({REMOTE_LATEST: Named(pointer.read)})
    own_objects = OwnObjects(
        loader="Composer's own load (`_torch_load_with_validation` in `composer/utils/checkpoint.py`) allows them: `weights_only=True` with its `_COMPOSER_CHECKPOINT_SAFE_GLOBALS`",
        allows=frozenset(
            {
                "datetime.timedelta",
                "numpy.ndarray",
                "numpy.dtype",
                "numpy.core.multiarray._reconstruct",
                "numpy._core.multiarray._reconstruct",
                "torch.torch_version.TorchVersion",
                *(f"numpy.dtypes.{name}DType" for name in _NUMPY_DTYPES),
            }
        ),
    )
    """``_COMPOSER_CHECKPOINT_SAFE_GLOBALS`` in ``composer/utils/checkpoint.py``: what Composer's
    own ``weights_only=True`` load allows."""

    claimable = re.compile(rf"^ep[0-9]+-ba[0-9]+-rank[0-9]+\.pt{_COMPRESSED}\Z")

    def claim(self, name: str) -> Claim | None:
        match = _SAVE.match(name)
        return Claim(BUNDLED, int(match[2]), match[3], Unit.STEP) if match else None

    def pointer(self, name: str) -> Claim | None:
        match = _LATEST.match(name)
        return Claim((Role.POINTER,), 0, f"latest-{match[1]}") if match else None

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        """The files of the ranks the run's other checkpoints have, by the name this one's would have."""
        ranks = missing_from_siblings(files, siblings)
        named = next((match for f in files if (match := _SAVE.match(f.entry.name))), None)
        if named is None:
            return ranks
        return tuple(f"ep{named[1]}-ba{named[2]}-{rank}.pt{named[4] or ''}" for rank in ranks)

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        """``latest-rank{R}.pt`` symlinks, then the remote ``.symlink`` object, by the save each
        names; where neither is there, the ``latest-rank0.pt`` the saver makes after every save:
        ``autoresume=True`` then finds no checkpoint and trains from the start."""
        found = list(symlink_pointers(run, _saved, "latest symlink"))
        for file in run.loose_files:
            if file.entry.name.endswith(".symlink") and (text := file.report.fact(pointer.POINTS_TO)) is not None:
                named = _saved(text.rsplit("/", 1)[-1])
                found.append(Pointer(file, text, named.number if named else None, "remote latest (.symlink)"))
        if run.checkpoints and not any(f.entry.name.startswith(_AUTORESUMED) for f in run.loose_files):
            found.append(Pointer(None, "", None, _AUTORESUMED))
        return tuple(found)

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        # autoresume loads what latest-rank0.pt names
        # autoresume loads `save_latest_filename`: latest-rank0.pt, or latest-rank0.pt.zst beside compressed saves
        return followed(run, [p for p in self.pointers(run) if p.source is not None and _autoresumed(p.source.entry.name)])

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        """The link as Composer makes it (relative, to the same rank's file, or to a sharded
        save's folder), or the ``.symlink`` object's text with its remote folder kept. Never a
        link where a copy stands."""
        match = _LATEST.match(source.entry.name if source is not None else _AUTORESUMED)
        if match is None:
            return None
        target = checkpoint.folder or next((f.entry for f in checkpoint.files if f.prefix == match[1] and Role.TEMP not in f.roles), None)
        if target is None:
            return None
        if source is None:  # made as the saver makes it
            return PointerWrite(_AUTORESUMED, os.path.basename(target.os_path), PointerKind.SYMLINK)
        if match[3]:
            said = source.report.fact(pointer.POINTS_TO)
            if said is None:
                return None  # its remote folder is unknown: a bare name would not be followed
            folder = said.rpartition("/")[0]
            return PointerWrite(source.entry.name, f"{folder}/{target.name}" if folder else target.name)
        if not source.entry.is_symlink:
            return None
        return PointerWrite(source.entry.name, os.path.basename(target.os_path), PointerKind.SYMLINK)

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        files = [f for f in checkpoint.files if Role.TEMP not in f.roles]
        if checkpoint.folder is not None and checkpoint.path is not None:
            match, path = _SHARDED.match(checkpoint.folder.name), checkpoint.path  # load_path is the folder
        else:
            match = _SAVE.match(files[0].entry.name) if files else None
            path = files[0].path if files else ""
        if match is None:
            return ""
        if len(files) > 1 and checkpoint.folder is None:
            path = path[: len(path) - len(files[0].entry.name)] + f"ep{match[1]}-ba{match[2]}-rank{{rank}}.pt{match[4] or ''}"
        said = f'pass `load_path="{path}"` to `Trainer` (epoch {match[1]}, batch {match[2]})'
        if run.weights_only:
            return f"{said} with `load_weights_only=True`: the save holds the weights alone"
        if self.auto_resume_pick(run) is checkpoint:
            said += "; `autoresume=True` with the same `save_folder` and `run_name` loads it too, through latest-rank0.pt"
        return said


class ShardedComposer(FolderLayout):
    """FSDP's sharded saves, ``ep{E}-ba{B}/`` DCP folders beside Composer's latest pointer: built
    into the composer run here, judged as DCP folders are; every other hook is ``ComposerLayout``'s
    (``layout_named`` finds it first)."""

    name = ComposerLayout.name
    builds_on = ComposerLayout.builds_on
    default_unit = Unit.STEP
    content = ComposerLayout.content
    named_files = ComposerLayout.named_files

    def recognises(self, entries: tuple[Entry, ...]) -> bool:
        return any(_LATEST.match(entry.name) for entry in entries)

    def claim(self, name: str) -> Claim | None:
        match = _SHARDED.match(name)
        return Claim((), int(match[2]), "ep-ba", Unit.STEP) if match else None

    def claim_folder(self, entry: Entry, inside: Listing | None) -> Claim | None:
        return self.claim(entry.name) if _DCP.claim_folder(entry, inside) is not None else None

    def pointer(self, name: str) -> Claim | None:
        return _COMPOSER.pointer(name)

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        return _DCP.role_of(name)

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        return _DCP.required([])

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        return _DCP.absent(files, siblings)

    def measured(self, files: list[CheckpointFile]) -> list[CheckpointFile]:
        return _DCP.measured(files)


_COMPOSER, _DCP, _SHARDED_SAVES = ComposerLayout(), DcpLayout(), ShardedComposer()


def _autoresumed(name: str) -> bool:
    """The local latest link of rank 0 (``_get_autoresume_checkpoint`` formats the name with rank 0)."""
    match = _LATEST.match(name)
    return match is not None and match[1] == "rank0" and not match[3]


def _saved(name: str) -> Claim | None:
    """A save a latest link may name: a monolithic file, or a sharded save's folder."""
    return _COMPOSER.claim(name) or _SHARDED_SAVES.claim(name)
