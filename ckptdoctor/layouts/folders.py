"""Frameworks that save each checkpoint as a folder of files: the hooks they add
(``FolderHooks``), and how a run is assembled from the folders they claim (``assemble``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from ckptdoctor.discover import Listing
from ckptdoctor.layouts._zeroed import find_zeroed
from ckptdoctor.layouts.content import MARKER, probe_batch
from ckptdoctor.layouts.grouping import ContentCheck
from ckptdoctor.layouts.hooks import LayoutHooks
from ckptdoctor.layouts.judging import Verdicts, checkpoint_of, version, without_training_state
from ckptdoctor.layouts.naming import Claim, common_unit, file_names, numbered, numbers_a_series, series_pattern
from ckptdoctor.model import Checkpoint, CheckpointFile, Entry, FileReport, Role, Run


class FolderHooks(LayoutHooks):
    """A framework that saves each checkpoint as a folder of files (``base.FolderLayout``).

    Subclasses override ``claim`` (the folder's name) and ``role_of`` (a file's name inside it);
    ``build`` assembles the run from the folders ``claim_folders`` finds (``assemble``). The hooks
    it adds to ``LayoutHooks``' (this table, too, is held to them by ``tests/test_layout_knowledge.py``):

    ============================  ==========================================  ======================================
    hook                          default                                     overridden by
    ============================  ==========================================  ======================================
    ``role_of(name)``             required: roles of a file in a folder       every folder layout
    ``role_in(relative)``         ``role_of`` of the last path part           orbax (per-item markers), deepspeed,
                                                                              hf-trainer (by the folder a file is in),
                                                                              lightning (its ``.ckpt`` folders)
    ``nested(path)``              False                                       megatron (``mp_rank_*/`` folders),
                                                                              deepspeed (universal ``zero/<param>/``),
                                                                              hf-trainer (FSDP's DCP folders),
                                                                              lightning (DeepSpeed's ``checkpoint/``)
    ``claim_folder(entry, ls)``   ``claim(entry.name)``                       dcp, orbax, megatron (``release/``:
                                                                              judged by contents), composer
                                                                              (sharded saves: DCP files inside)
    ``signature(names)``          False                                       hf-trainer, accelerate, torchtune,
                                                                              nanogpt, litgpt, deepspeed (a tag alone)
    ``claim_folders(folders)``    by name, else by signature in a series      torchtune (only beside its signature),
                                                                              deepspeed (one tag a step),
                                                                              nanogpt (none: out_dirs alone),
                                                                              orbax (what its step listing counts)
    ``required_of(saved)``        ``required([])``                            hf-trainer, accelerate, deepspeed,
                                                                              megatron, orbax, torchtune, nanogpt,
                                                                              litgpt, lightning (``.ckpt`` folders)
    ``committed(pointers, s)``    None                                        megatron (its tracker), torchtune
                                                                              (its recipe state)
    ``beside(entry, subfolder)``  the entry itself                            torchtune (``recipe_state/``)
    ``build_alone(...)``          one folder as a run of one checkpoint       nanogpt (indexed by ``iter_num``)
    ============================  ==========================================  ======================================
    """

    folders = True

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        """The roles of a file inside a checkpoint folder, or None for files that hold none."""
        raise NotImplementedError

    def claim_folder(self, entry: Entry, inside: Listing | None) -> Claim | None:
        """A checkpoint folder of this framework, judged by its name (and, where names are free,
        by what it holds)."""
        return self.claim(entry.name)

    def signature(self, names: frozenset[str]) -> bool:
        """Whether a folder holding files named ``names`` is unmistakably one of this framework's
        checkpoints, whatever the folder is called (accelerate's ``random_states_0.pkl``)."""
        return False

    def claim_folders(self, folders: Sequence[tuple[Entry, Listing | None]]) -> dict[str, Claim]:
        """The checkpoint folders among ``folders`` (each with its listing), by name first.

        Where no folder carries the framework's own name, the folders whose files carry its
        signature are its saves under the user's names (``save_state("out/step_500")``), indexed
        by the number in the name, in the unit its word spells; a folder named like them that
        holds only this framework's files (or nothing yet) is a save cut short before its telling
        files were written. Where the framework's own names are there, folders under other names
        are not part of that run (a copy a user made, ``best/``): ``prune`` must never count them
        among the saves it rotates, and each is looked at as a run of its own.
        """
        named = {entry.name: claim for entry, inside in folders if (claim := self.claim_folder(entry, inside))}
        if named:
            return named
        signed = {
            entry.name: claim
            for entry, inside in folders
            # the name first: it is cheap, and a run's own big folder (``checkpoint/``) numbers no series
            if inside is not None and (claim := self._in_series(entry.name)) and self.signature(file_names(inside))
        }
        patterns = {series_pattern(name) for name in signed}
        for entry, inside in folders:
            if entry.name in signed or series_pattern(entry.name) not in patterns:
                continue
            if (claim := self._in_series(entry.name)) and all(self.role_of(name) for name in file_names(inside)):
                signed[entry.name] = claim
        return signed

    def _in_series(self, name: str) -> Claim | None:
        """A name that numbers the saves of one loop (``step_500``, ``epoch-3``, ``checkpoint-500``,
        ``500``), not one that tells experiments apart (``exp1``, ``seed42``: runs of their own)."""
        return self._numbered(name) if numbers_a_series(name) else None

    def _numbered(self, name: str) -> Claim | None:
        found = numbered(name)
        return Claim((), found[0], series_pattern(name), found[1] or self.default_unit) if found else None

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        """The roles every checkpoint needs, given what the run's checkpoints hold."""
        return self.required([])

    def role_in(self, relative: str) -> tuple[Role, ...] | None:
        """The roles of a file by its path inside the checkpoint folder: by its name, unless the
        same name means another thing at another depth (Orbax's per-item markers)."""
        return self.role_of(relative.rpartition("/")[2])

    def nested(self, name: str) -> bool:
        """Whether a subfolder of a checkpoint folder holds its files (Megatron's ``mp_rank_00/``),
        by its path inside the checkpoint (DeepSpeed's universal ``zero/<param>/``)."""
        return False

    def committed(self, pointers: Sequence[CheckpointFile], saved: Sequence[tuple[int, Sequence[CheckpointFile]]]) -> int | None:
        """The newest index the framework's tracker has committed; later ones never finished.
        ``pointers`` are the run's pointer files, ``saved`` each checkpoint's index and files."""
        return None

    def beside(self, entry: Entry, subfolder: Callable[[Entry], Listing | None]) -> Sequence[Entry]:
        """What an entry beside the checkpoint folders stands for: itself, or, for a folder where
        the framework keeps the run's own state (torchtune's ``recipe_state/``), the files in it,
        judged as the run's files (its pointers, its staging)."""
        return (entry,)


class Saved(NamedTuple):
    """One checkpoint folder of a run, as its layout claimed it."""

    claim: Claim
    folder: Entry | None
    """None where the folder is the listing itself (``FolderLayout.build_alone``)."""
    contents: list[tuple[str, Entry]]


class _Sorted(NamedTuple):
    """A folder run's entries, sorted: each checkpoint folder with its claim and its files, and
    what lies beside them."""

    saved: list[tuple[Claim, Entry | None, list[CheckpointFile]]]
    loose: list[CheckpointFile]
    others: list[Entry]
    markers: list[tuple[str, Entry]]
    """Markers of a save in progress, each with the name of the checkpoint it names."""


def assemble(layout: FolderHooks, listing: Listing, probe: Callable[[Entry], FileReport], slots: Sequence[Saved | Entry]) -> Run:
    """The run of the checkpoint folders in ``slots``, with the entries beside them."""
    judge = ContentCheck(layout, probe_batch(_read_at_once(layout, slots), probe))
    found = _Sorted([], [], [], [])
    for slot in slots:
        if isinstance(slot, Saved):
            found.saved.append((slot.claim, slot.folder, layout.measured(_saved_files(layout, judge, slot, found.others))))
        else:
            _sort_beside(layout, judge, slot, found)
    _place_markers(found)
    saved = found.saved
    # folders list in any order; "newest" means the highest number, then the later save of one name
    saved.sort(key=lambda save: (save[0].number, version(layout.resaved, save[1].name if save[1] is not None else "")))
    every = [files for _, _, files in saved]
    weights_only = layout.weights_only(every)
    required = without_training_state(layout.required_of(every)) if weights_only else layout.required_of(every)
    checkpoints = _checkpoints(layout, listing.path, found, every, required)
    return Run(
        path=listing.path,
        layout=layout.name,
        unit=common_unit((claim for claim, _, _ in saved), layout.default_unit),
        checkpoints=checkpoints,
        required=required,
        other_files=tuple(found.others),
        loose_files=tuple(found.loose),
        weights_only=weights_only,
    )


def _read_at_once(layout: FolderHooks, slots: Sequence[Saved | Entry]) -> list[Entry]:
    """The files of the checkpoint folders that are read (``probe_batch`` reads them at once)."""
    return [
        item
        for slot in slots
        if isinstance(slot, Saved)
        for relative, item in slot.contents
        if not item.is_dir and not item.dangling and layout.role_in(relative) and layout.unread(relative) is None
    ]


def _saved_files(layout: FolderHooks, judge: ContentCheck, slot: Saved, others: list[Entry]) -> list[CheckpointFile]:
    """A checkpoint folder's files, each with its roles and report; what holds none joins ``others``."""
    files: list[CheckpointFile] = []
    for relative, item in slot.contents:
        roles = None if item.is_dir else layout.role_in(relative)
        if roles:
            files.append(CheckpointFile(item, roles, relative, layout.unread(relative) or judge(item)))
        else:
            others.append(item)
    return files


def _sort_beside(layout: FolderHooks, judge: ContentCheck, entry: Entry, found: _Sorted) -> None:
    """Where an entry beside the checkpoint folders belongs: staging, a pointer, a marker, or none."""
    if entry.is_dir and (staged := layout.staging(entry.name)) is not None:
        found.loose.append(CheckpointFile(entry, (Role.TEMP,), staged.prefix, FileReport("folder")))
    elif (pointer := layout.pointer(entry.name)) is not None:
        # a copy of a checkpoint folder under the pointer's name (Lightning's `last.ckpt/`) is the run's too
        found.loose.append(CheckpointFile(entry, pointer.roles, pointer.prefix, FileReport("folder") if entry.is_dir else judge(entry)))
    elif not entry.is_dir and (marked := layout.unfinished(entry.name)) is not None:
        found.markers.append((marked, entry))
    else:
        found.others.append(entry)


def _place_markers(found: _Sorted) -> None:
    """Each marker of a save in progress joins the checkpoint folder it names (that save never
    finished); one that names no folder of the run is a file like any other."""
    for marked, entry in found.markers:
        held = next((files for _, folder, files in found.saved if folder is not None and folder.name == marked), None)
        if held is None:
            found.others.append(entry)
        else:
            held.append(CheckpointFile(entry, (Role.TEMP,), entry.name, MARKER))


def _checkpoints(
    layout: FolderHooks, path: str, found: _Sorted, every: list[list[CheckpointFile]], required: tuple[Role, ...]
) -> tuple[Checkpoint, ...]:
    """Each checkpoint folder's checkpoint, with its verdict."""
    numbered = [(claim.number, files) for claim, _, files in found.saved]
    newest = layout.committed([f for f in found.loose if Role.POINTER in f.roles], numbered)
    zeros = find_zeroed(numbered)
    verdicts: Verdicts = {}
    return tuple(
        checkpoint_of(
            claim.number,
            tuple(files),
            # a save newer than the tracker's commit never finished, whatever it holds
            (*required, Role.POINTER) if newest is not None and claim.number > newest else required,
            False,
            folder,
            layout.absent(files, every),
            frozenset(layout.advisory_at(path)),
            zeros.get(claim.number, ()),
            verdicts=verdicts,
        )
        for claim, folder, files in found.saved
    )
