"""Orbax ``CheckpointManager`` (JAX): one folder per step (``<step>`` or ``<prefix>_<step>``).

A finalized step folder holds ``_CHECKPOINT_METADATA`` (the items and their handlers), one folder
per item and, since Orbax 0.12.3 (and always on GCS), ``commit_success.txt``. On local disks a
save is written under ``<name>.orbax-checkpoint-tmp[-N]`` and renamed when done, so such folders
are abandoned saves, and the rename is what commits: Orbax 0.12 restores a step without its
``commit_success.txt`` or with an empty ``_CHECKPOINT_METADATA`` (given the items' args).
Orbax lists its steps by name alone (``path/step.py``, ``_StandardNameFormat``): on a local disk,
every folder named as the manager names its steps is one, markers or not, and ``latest_step()``,
the step its users resume from, is the highest of them.

A PyTree item (``StandardCheckpointHandler``, ``PyTreeCheckpointHandler``) holds ``_METADATA``
(its tree), ``_sharding`` and, with OCDBT (Orbax's default), ``manifest.ocdbt``: the manifest
names the data files the restore reads, in ``d/`` and in the per-process stores
``ocdbt.process_<n>/``, which keep older versions whose files it does not read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.base import FolderLayout
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.model import Checkpoint, CheckpointFile, Entry, FileReport, Role, Run, Unit
from ckptdoctor.readers.ocdbt import MANIFEST
from ckptdoctor.readers.orbax import CHECKPOINT_METADATA, ITEM_METADATA, SHARDING
from ckptdoctor.readers.sniff import Format
from ckptdoctor.stores.urls import scheme

_STEP = re.compile(r"^(?:(.+)_)?([0-9]+)\Z")
_TEMPORARY = re.compile(r"^.*?_*?([0-9]+)\.orbax-checkpoint-tmp(?:-[0-9]+)?\Z")
METADATA = CHECKPOINT_METADATA
COMMIT = "commit_success.txt"
_STORE = re.compile(r"^[^/]+/(?:d|ocdbt\.process_[^/]+)/")
"""An item's OCDBT data files and per-process stores: read through its manifest only."""
_IN_STORE = FileReport(Format.OCDBT.value)
_IGNORED = FileReport(Format.TEXT.value)
_MARKERS = {METADATA: (Role.METADATA,), COMMIT: (Role.POINTER,)}
_ARRAY_DATA = re.compile(r"^(?:[0-9a-f]{32}|[0-9]+(?:\.[0-9]+)*)\Z")
"""An OCDBT data file (``d/<32 hex>``) or a zarr chunk (``0.0``)."""
_PYTREE = ("PyTreeCheckpointHandler", "StandardCheckpointHandler")
_PYTREE_FILES = (MANIFEST, SHARDING, "d/", "ocdbt.process_")


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD501/keep-fewer": "Keep fewer checkpoints: `CheckpointManagerOptions(max_to_keep=n)`.",
        "CKD202/create-manager": "Create the manager with `CheckpointManagerOptions(cleanup_tmp_directories=True)` so it removes leftovers when it starts.",
    }
)
"""Orbax's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class OrbaxLayout(FolderLayout):
    name = "orbax"
    packages = ("orbax",)
    fix_wordings = _FIX_WORDINGS
    vocabulary = ("Orbax", "CheckpointManager", "cleanup_tmp_directories", "max_to_keep", "commit_success")
    default_unit = Unit.STEP
    content = frozenset({Format.JSON, Format.UNKNOWN, Format.TEXT, Format.OCDBT})
    resume_needs = frozenset({Role.MODEL})
    advisory = MappingProxyType({
        Role.METADATA: (
            "Orbax restores the step without it when `restore` is given each item's args "
            "(`restore(step, args=ocp.args.Composite(...))`); a bare `restore(step)` needs it for the items' handlers"
        ),
        Role.POINTER: (
            "Orbax restores the step without it from a local disk, where renaming the save's temporary "
            "folder committed it (on GCS, Orbax skips a step without it)"
        ),
    })  # fmt: skip

    def advisory_at(self, path: str) -> Mapping[Role, str]:
        # on GCS Orbax commits a step by writing commit_success.txt last, not by a rename
        return _ON_GCS if _on_gcs(path) else self.advisory

    def missing_note(self, run: Run, checkpoint: Checkpoint, role: Role) -> tuple[str, str] | None:
        if role is not Role.POINTER or not _on_gcs(run.path):
            return None
        step = checkpoint.path or run.path
        return (
            f"on GCS Orbax writes `{COMMIT}` last instead of renaming a temporary folder, so a step without it is a save "
            "that never finished: Orbax's CheckpointManager does not list or restore it, and deletes it when it starts "
            "with `cleanup_tmp_directories=True` (orbax#394)",
            f"Orbax will delete step {checkpoint.index} ({step}) when a CheckpointManager with `cleanup_tmp_directories=True` "
            f"opens {run.path}, and never restores it: resume from the newest step that has its `{COMMIT}`, and copy this "
            f"one elsewhere first (`gcloud storage cp -r {step} SOMEWHERE`) only if you need to look at what it holds.",
        )

    def claim(self, name: str) -> Claim | None:
        match = _STEP.match(name)
        return Claim((), int(match[2]), match[1] or "", Unit.STEP) if match else None

    def claim_folder(self, entry: Entry, inside: Listing | None) -> Claim | None:
        """Step folders are plain numbers: only those holding Orbax's markers are Orbax's."""
        claim = self.claim(entry.name)  # the name first: cheaper than looking through a big folder
        if claim is None or inside is None or not any(e.name in (METADATA, COMMIT) for e in inside.entries):
            return None
        return claim

    def claim_folders(self, folders: Sequence[tuple[Entry, Listing | None]]) -> dict[str, Claim]:
        """The folders holding Orbax's markers, and beside them every folder Orbax's own step
        listing counts too: ``CheckpointManager.latest_step()`` takes any folder named as its
        steps are (``_StandardNameFormat``: the manager's ``<prefix>_``, then the step without a
        leading zero, or zero-padded to the width its steps have), whatever it holds."""
        named = super().claim_folders(folders)
        formats = {_name_format(name, claim) for name, claim in named.items()}
        listed = {
            entry.name: claim
            for entry, _ in folders
            if entry.name not in named and (claim := self.claim(entry.name)) and _name_format(entry.name, claim) in formats
        }
        return named | listed

    def staging(self, name: str) -> Claim | None:
        match = _TEMPORARY.match(name)
        return Claim((Role.TEMP,), int(match[1]), "orbax-checkpoint-tmp") if match else None

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        if name in _MARKERS:
            return _MARKERS[name]
        # arrays (parameters and optimizer state alike): an OCDBT store's files, zarr chunks; the
        # rest is JSON that describes them (_METADATA, _sharding, .zarray) or a JSON item's own
        return (Role.MODEL,) if name == MANIFEST or _ARRAY_DATA.match(name) else (Role.CONFIG,)

    def role_in(self, relative: str) -> tuple[Role, ...] | None:
        # an item's own commit_success.txt is not the step's marker: a restore never reads it
        return (Role.CONFIG,) if relative.endswith(f"/{COMMIT}") else self.role_of(relative.rpartition("/")[2])

    def _contents(self, folder: Listing | None, subfolder: Callable[[Entry], Listing | None]) -> list[tuple[str, Entry]]:
        """A step folder's files, with every file of its item folders at any depth."""
        found: list[tuple[str, Entry]] = []
        pending = [("", folder)]
        while pending:
            prefix, listing = pending.pop()
            for item in listing.entries if listing else ():
                inner = subfolder(item) if item.is_dir else None
                if inner is None:
                    found.append((prefix + item.name, item))
                else:
                    pending.append((f"{prefix}{item.name}/", inner))
        return found

    def unread(self, relative: str) -> FileReport | None:
        if relative.endswith(f"/{COMMIT}"):
            return _IGNORED
        return _IN_STORE if _STORE.match(relative) else None

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        # commit_success.txt exists from Orbax 0.12.3 on: expected once any step of the run has it
        seen = {role for files in saved for file in files for role in file.roles}
        return (Role.METADATA, Role.POINTER) if Role.POINTER in seen else (Role.METADATA,)

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        """What a restore opens and the step lacks: the items its metadata names (or, where that
        cannot be read, the items the other steps name), each PyTree item's ``_METADATA`` and
        ``manifest.ocdbt``, and the data files the manifest names."""
        items = _items(files) or {item: handler for others in siblings for item, handler in _items(others).items()}
        held = {f.prefix.split("/", 1)[0] for f in files if "/" in f.prefix and f.entry.name != COMMIT}
        names = {f.prefix for f in files}
        lacking = [f"{item}/" for item in sorted(items) if item not in held]
        for item in sorted(held):
            inside = [f for f in files if f.prefix.startswith(f"{item}/")]
            pytree = items.get(item, "").endswith(_PYTREE) or any(_pytree_file(f.prefix[len(item) + 1 :]) for f in inside)
            if not pytree:
                continue
            lacking += [
                f"{item}/{name}" for name in (ITEM_METADATA, MANIFEST) if f"{item}/{name}" not in names and _needed(name, inside, item)
            ]
            for f in inside:
                missing = f.report.fact("missing") if f.prefix == f"{item}/{MANIFEST}" else None
                lacking += [f"{item}/{path}" for path in missing.split("\n")] if missing else []
        return tuple(lacking)

    def file_name(self, role: Role, index: int) -> str | None:
        return {Role.METADATA: METADATA, Role.POINTER: COMMIT}.get(role)

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        # CheckpointManager.latest_step(): the highest step its listing counts, whatever the step
        # holds (every step folder on a disk; on GCS, only those its commit_success.txt commits)
        listed = [c for c in run.checkpoints if not _on_gcs(run.path) or c.files_for(Role.POINTER)]
        return listed[-1] if listed else None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        marker = checkpoint.files_for(Role.METADATA)
        if marker and not marker[0].report.issues:
            return f"`ocp.CheckpointManager('{run.path}').restore({checkpoint.index})`"
        # without its _CHECKPOINT_METADATA, Orbax knows the items' handlers only from the args
        return (
            f"`ocp.CheckpointManager('{run.path}').restore({checkpoint.index}, args=ocp.args.Composite(...))` with each item's restore args"
        )


_ON_GCS = MappingProxyType({role: why for role, why in OrbaxLayout.advisory.items() if role is not Role.POINTER})
"""What Orbax resumes without on GCS: not ``commit_success.txt``, which commits a step there."""


def _on_gcs(path: str) -> bool:
    return scheme(path) in ("gs", "gcs")


def _name_format(name: str, claim: Claim) -> tuple[str, int | None]:
    """How Orbax names the step folder ``name``: its prefix and, where the number has a leading
    zero, its fixed width (``step_format_fixed_length``); Orbax lists no other spelling."""
    digits = name[len(claim.prefix) + 1 :] if claim.prefix else name
    return claim.prefix, len(digits) if digits.startswith("0") and len(digits) > 1 else None


def _items(files: Sequence[CheckpointFile]) -> dict[str, str]:
    """The items a step's ``_CHECKPOINT_METADATA`` names, with their handlers."""
    listed = next((f.report.fact("items") for f in files if f.prefix == METADATA), None)
    return dict(line.partition("\t")[::2] for line in listed.split("\n")) if listed else {}


def _pytree_file(relative: str) -> bool:
    """Whether a file inside an item is one only a PyTree item writes (its OCDBT store, its shardings)."""
    return relative.startswith(_PYTREE_FILES)


def _needed(name: str, inside: Sequence[CheckpointFile], item: str) -> bool:
    """``_METADATA`` always; ``manifest.ocdbt`` where the item's ``_METADATA`` says its arrays are
    in OCDBT or, where it does not say, where the item holds an OCDBT store's files."""
    if name == ITEM_METADATA:
        return True
    said = next((f.report.fact("ocdbt") for f in inside if f.prefix == f"{item}/{ITEM_METADATA}"), None)
    return said == "true" or (said is None and any(_STORE.match(f.prefix) for f in inside))
