"""What every layout shares: how a name is claimed, and how claims become a run.

A layout knows its framework (names, the roles a checkpoint needs, pointers, metrics, wording:
see ``Layout``'s table of hooks); grouping files by index, attributing staging leftovers, and
giving each checkpoint a status is done here once for all of them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import enum
import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from ckptdoctor.bundles import OPTIMIZER_STATE, ROLE_KEYS
from ckptdoctor.discover import Listing, remote
from ckptdoctor.layouts._zeroed import find_zeroed
from ckptdoctor.model import (
    COPY_OF,
    TOP_LEVEL_NUMBER,
    TOP_LEVEL_TENSORS,
    Checkpoint,
    CheckpointFile,
    Entry,
    FileIssue,
    FileReport,
    PointerWrite,
    Problem,
    Rebuilt,
    Role,
    Run,
    Severity,
    Status,
    Unit,
    Zeroed,
)
from ckptdoctor.parallel import map_chunks
from ckptdoctor.readers import pointer as pointer_file
from ckptdoctor.readers._pickle_safety import Trusted
from ckptdoctor.readers.compressed import pandas_archive
from ckptdoctor.readers.files import HeaderReads, ReadAhead, expected_formats, same_save, with_keys
from ckptdoctor.readers.named import NO_NAMES, Named, NamedFiles
from ckptdoctor.readers.sniff import Format
from ckptdoctor.readers.tararchive import TAR


class Claim(NamedTuple):
    """A layout's reading of one file name (a NamedTuple: one is made per file)."""

    roles: tuple[Role, ...]
    number: int
    """The checkpoint index the name carries (``index`` is taken by tuple)."""
    prefix: str
    unit: Unit | None = None
    """The unit the name spells out (``epoch_3``, ``step-500``), if any."""


@dataclasses.dataclass(frozen=True)
class OwnObjects:
    """What a framework's own save code pickles beyond torch's ``weights_only`` set, and how its
    own loader loads its files back, both read from the framework's source. In a run of its
    layout, a file whose pickles need nothing more is loaded as the framework wrote it: CKD402
    (info, or a warning where the resume needs a step of the user's, which ``loader`` names),
    never CKD401. Its classes are vouched for only as the reader saw them rebuilt (``Rebuilt``:
    plain objects, enum members, lookups of their own methods); a pickle that uses them any other
    way, or imports anything else, stays unsafe, and so do they in any other framework's run."""

    loader: str = ""
    """How the framework's own loader loads its files, said in the finding; empty: it vouches
    for nothing."""
    allows: frozenset[str] = frozenset()
    """Harmless globals (the readers' ``KNOWN_BENIGN``) that its loader allows by name (timm
    passes ``argparse.Namespace`` to ``safe_globals``)."""
    unrestricted: bool = False
    """Its loader passes ``weights_only=False`` (or the resume must, as ``loader`` says): every
    harmless global loads, and whatever else a file holds runs, which CKD401 then says too."""
    classes: frozenset[str] = frozenset()
    """Its own classes its save code pickles as plain objects: ``cls.__new__(cls)``, then their
    fields set (each one's ``__new__`` and ``__setstate__`` read: they run nothing else)."""
    called_empty: frozenset[str] = frozenset()
    """Its own classes its save code pickles as ``cls()``, then their fields set (a
    ``SimpleNamespace``'s ``__reduce__``; each one's ``__init__`` and ``__new__`` read: with no
    argument they run nothing else)."""
    enums: frozenset[str] = frozenset()
    """Its own enums its save code pickles as members, ``cls(value)``."""
    methods: frozenset[str] = frozenset()
    """``class.name`` of its classes' own methods that its objects keep, pickled as
    ``getattr(cls, name)`` lookups (mmengine's ``HistoryBuffer`` keeps ``min``, ``max``...)."""
    kept: frozenset[str] = frozenset()
    """Globals its save code pickles as bare values, referenced, not rebuilt (OmegaConf keeps
    ``typing.Any`` as a node's type): vouched for however the pickle uses them, so only names
    whose every use is harmless (``typing.Any`` cannot be called)."""
    as_written: bool = True
    """Its loader loads them unaided (the finding is info); False: only after the step
    ``loader`` names (a warning: the resume fails without it)."""

    @property
    def runs_anything(self) -> bool:
        """Whether its loader, as the framework calls it, runs whatever a file holds."""
        return self.unrestricted and self.as_written

    def writes(self, rebuilt: Rebuilt, trusted: Trusted | None = None) -> bool:
        """Whether its save code writes exactly what ``rebuilt`` says the pickle does, the globals
        the user declared ``trusted`` aside (used any way, as torch's ``add_safe_globals``, where
        they are the user's own; a library's only where rebuilt, never called with arguments)."""
        declared = trusted.covers if trusted else lambda _name, called=False: False
        return (
            all(name in self.classes or declared(name) for name in rebuilt.instances)
            and all(name in self.enums or declared(name, called=True) for name in rebuilt.values)
            and rebuilt.methods <= self.methods
            and all(name in self.called_empty or declared(name) for name in rebuilt.called)
            and all(name in self.kept or declared(name, called=True) for name in rebuilt.other)
        )

    def vouched(self, report: FileReport, trusted: Trusted | None = None) -> FileReport:
        """``report`` as this framework's own loader sees the file: where its pickles are unsafe
        only because they rebuild this framework's own objects or globals the user declared
        ``trusted``, one CKD402 that names them with the harmless globals beside them, and
        harmless globals this loader allows, CKD402 that says how it loads them; every other
        issue as the reader found it (CKD401 stands where any pickle does more)."""
        if not report.issues or not (self.loader or (trusted and trusted.source)):
            return report
        unsafe = [i for i in report.issues if i.problem is Problem.UNSAFE_PICKLE]
        allowed = [i for i in report.issues if i.problem is Problem.NON_WEIGHTS and i.needs and self._allows(i.needs)]
        rebuilt = [i.rebuilt for i in unsafe if i.rebuilt is not None and self.writes(i.rebuilt, trusted)]
        if unsafe and len(rebuilt) == len(unsafe):
            names = tuple(dict.fromkeys(name for r in rebuilt for name in r.names))
            declared = tuple(name for name in names if trusted and trusted.covers(name))
            own = tuple(name for name in names if name not in declared)
            benign = tuple(dict.fromkeys(name for i in allowed for name in i.needs))
            said = [f"{', '.join(own)}, rebuilt only as the framework that wrote it does"] if own else []
            said += [f"{', '.join(declared)}, declared trusted in {trusted.source}"] if trusted and declared else []
            said += [f"the harmless {', '.join(benign)}"] if benign else []
            loaders = [self.loader] if own and self.loader else []
            listed = ", ".join((*names, *benign))
            loaders.append(f"torch.load(weights_only=True) loads it within torch.serialization.safe_globals([{listed}])")
            detail = f"{rebuilt[0].where} needs {'; and '.join(said)}; {' or '.join(loaders)}"
            # the framework's own loader loads its own objects unaided; a declared class needs the user's safe_globals
            unaided = self.as_written and (self.unrestricted or not declared)
            merged = FileIssue(
                Problem.NON_WEIGHTS, detail, (*names, *benign), severity=Severity.INFO if unaided and own else Severity.WARNING
            )
            return dataclasses.replace(report, issues=(merged, *(i for i in report.issues if i not in unsafe and i not in allowed)))
        if not self.loader:
            return report
        severity = Severity.INFO if self.as_written else Severity.WARNING
        if not allowed:
            return report
        issues = tuple(
            dataclasses.replace(i, detail=f"{i.detail}; {self.loader}", severity=severity) if i in allowed else i for i in report.issues
        )
        return dataclasses.replace(report, issues=issues)

    def _allows(self, needs: tuple[str, ...]) -> bool:
        return self.unrestricted or self.allows.issuperset(needs)


NO_OWN_OBJECTS = OwnObjects()


class Copy(enum.Enum):
    """What a whole copy of a save is to its framework (``Layout.whole_copy``)."""

    RESUMED = "resumed"
    """What the framework resumes from (Lightning's copied ``last.ckpt``, fairseq's
    ``checkpoint_last.pt``): where its save's own files are broken, it stands for that save."""
    KEPT = "kept"
    """A copy kept aside (fairseq's best copies): the save it holds is known, nothing more."""


class Pointer(NamedTuple):
    """A file that names a checkpoint the framework will follow."""

    source: CheckpointFile | None
    """The pointer file; None when the framework expects one and there is none."""
    target: str
    """What the pointer says, as written."""
    number: int | None
    """The checkpoint index it names, None when it names none that can exist (``index`` is taken by tuple)."""
    meaning: str
    """What the framework uses it for (``best_model_checkpoint``, ``latest``)."""
    loads: frozenset[Role] = frozenset()
    """The roles its follower loads from the checkpoint it names (HF's ``load_best_model_at_end``
    loads the weights alone); empty: the whole checkpoint."""
    copy: bool = False
    """The pointer file is a whole copy of the save it names (``Layout.whole_copy``), loaded in
    its place: it is followable while the copy itself is whole."""
    outside: str | None = None
    """Where it leads out of the run, to a file or folder that is there (``elsewhere``): the
    framework loads that, and nothing of it was judged with the run."""


class Layout:
    """One framework's knowledge: its names, what its checkpoints need, its pointers, where it
    keeps metrics and how its fixes are worded. Everything else (grouping files by index, staging
    leftovers, statuses) is done here once for all frameworks.

    A layout of flat files (a checkpoint is one or more files side by side) subclasses this and
    overrides ``claim``; every other hook has a default that suits a framework without the
    feature. The hooks, their defaults, and the layouts that override them today:

    ===========================  ===========================================  ====================================
    hook                         default                                      overridden by
    ===========================  ===========================================  ====================================
    *naming*
    ``name``                     ``"unknown"``                                every layout
    ``aliases``                  none                                         torch (``safetensors``)
    ``default_unit``             save                                         every layout
    ``claim(name)``              required: the roles and index of a name      every layout
    ``claimable``                None (every name is asked)                   burn, torch, lightning, timm, keras,
                                                                              tensorflow, mmengine, detectron2,
                                                                              composer, ultralytics, fairseq, nemo
    ``stray(name)``              None                                         burn, torch
    ``staging(name)``            None                                         hf-trainer, orbax, timm, tensorflow
    ``pointer(name)``            None                                         deepspeed, megatron, lightning, timm,
                                                                              keras, tensorflow, mmengine, detectron2,
                                                                              composer, torchtune, ultralytics, fairseq
    ``recorded(name)``           None                                         ultralytics (``last.pt``), keras
                                                                              (``best.keras``: placed by ``build``)
    ``unfinished(name)``         None                                         lightning (NeMo's ``-unfinished``)
    ``resaved(name)``            None                                         lightning (``-vN``: the name was taken)
    ``recognises(entries)``      True                                         timm, mmengine, detectron2, ultralytics,
                                                                              fairseq
    ``file_name(role, index)``   None                                         hf-trainer, deepspeed, megatron,
                                                                              dcp, orbax, burn, torchtune
    ``missing_name(c, role)``    None (named by its siblings, ``file_name``)  keras (``BackupAndRestore``'s pairs)
    *content and reading*
    ``content``                  empty (nothing written is vouched for)       every layout
    ``accepts(format)``          ``format in content``                        the lone-file layout of __init__
    ``legacy_formats``           none                                         burn
    ``named_files``              none                                         hf-trainer, deepspeed, megatron,
                                                                              tensorflow, mmengine, detectron2,
                                                                              composer
    ``unread(relative)``         None (every file is read)                    orbax, deepspeed (a conversion's ``tmp/``)
    ``own_objects``              none (vouches for nothing)                   deepspeed (and lightning's
                                                                              DeepSpeed folders), mmengine,
                                                                              timm, composer, ultralytics,
                                                                              megatron
    ``flat_optimizer(c)``        False                                        deepspeed, and lightning and mmengine
                                                                              for an engine's checkpoint folders
    *what a checkpoint needs*
    ``required(claims)``         every role the claims name                   dcp, burn, tensorflow
    ``resume_needs``             none                                         every layout but lightning, timm, torch
    ``needed_to_resume(run)``    ``resume_needs``                             torch (every role its saves have)
    ``advisory``                 none                                         orbax
    ``advisory_at(path)``        ``advisory``                                 orbax (on ``gs://`` its marker commits)
    ``missing_note(...)``        None                                         dcp (in a store), orbax (on ``gs://``)
    ``whole_saves``              False                                        lightning, keras, detectron2,
                                                                              ultralytics
    ``whole_copy(entry)``        None (no copies)                             lightning (a copied ``last.ckpt``,
                                                                              NeMo's ``-last.ckpt``), fairseq
                                                                              (``checkpoint_last.pt``, its best
                                                                              copies), timm (``last.pth.tar``)
    ``index_keys``               none                                         lightning (``epoch``, ``global_step``),
                                                                              timm (``epoch``)
    ``absent(files, siblings)``  none                                         every folder layout, tensorflow,
                                                                              composer, fairseq (rank files),
                                                                              nemo (an archive's members)
    ``measured(files)``          the files as they are                        dcp, tensorflow (sizes against the index),
                                                                              nanogpt, litgpt (roles from keys),
                                                                              deepspeed (a kept ``tmp/``)
    ``weights_only(saved)``      None (the bundles' keys may still tell)      hf-trainer, ultralytics, fairseq, litgpt
    ``build(...)``               ``group``: files grouped by claimed index    lightning, timm, torch, detectron2,
                                                                              ultralytics, keras, fairseq, mmengine
    ``folder_saves``             False                                        mmengine (FlexibleRunner's folders)
    *pointers and resume*
    ``pointers(run)``            none                                         hf-trainer, deepspeed, megatron,
                                                                              lightning, tensorflow, mmengine,
                                                                              detectron2, composer, torchtune, fairseq,
                                                                              ultralytics
    ``auto_resume_pick(run)``    None                                         hf-trainer, accelerate, deepspeed,
                                                                              megatron, lightning, tensorflow,
                                                                              mmengine, detectron2, composer,
                                                                              torchtune, litgpt, fairseq, ultralytics,
                                                                              orbax
    ``auto_resume_outcome(...)`` None (the pick is a checkpoint)              accelerate (a stray entry in ``checkpoints/``)
    ``resumable(run)``           None (every complete checkpoint)             torchtune (0.6.1's one recipe state)
    ``left_in_place(c)``         None                                         keras (BackupAndRestore), megatron
                                                                              (``release/``)
    ``repoint(source, c)``       None (not rewritable)                        deepspeed, megatron, lightning,
                                                                              tensorflow (its state file), mmengine,
                                                                              detectron2 (both through ``NamingFile``),
                                                                              composer, fairseq, ultralytics
    ``resume_hint(run, c)``      ``""``                                       every layout
    ``resume_path(run, c)``      its folder, else its model file              burn (the artifact folder), detectron2,
                                                                              tensorflow (the bundle's prefix),
                                                                              fairseq, litgpt (its weights file)
    *planners and wording*
    ``metric_values(...)``       ``name=value`` pairs in file names           hf-trainer, burn, mmengine, detectron2,
                                                                              ultralytics, fairseq
    ``reads_every_name``         False                                        accelerate, litgpt (a recursive glob)
    ``builds_on``                none (``fix_keys``: its name, then these)    the layouts of torch-based
                                                                              frameworks
    ``fix_wordings``             none (the general words)                     every layout with fixes of
                                                                              its own
    ``vocabulary``               none                                         every layout
    ``packages``                 none                                         every layout of a Python
                                                                              framework
    ===========================  ===========================================  ====================================

    Each hook's own docstring says what it answers. Nothing outside ``layouts/`` knows a
    framework by name: readers get the file names they must read specially from ``named_files``
    (through ``layouts.NAMED_FILES``), rules and planners ask the run's layout
    (``layout_named(run.layout)``), and a test (``tests/test_layout_knowledge.py``) keeps it so.
    A rule's fixes name no framework: each layout words them its own way (``fix_wordings``,
    picked by ``fix_keys``): a run is told its own framework's words, else the general ones.
    """

    name: str = "unknown"
    aliases: tuple[str, ...] = ()
    """Other names a run of this layout is reported under (``safetensors`` for ``torch``)."""
    default_unit: Unit = Unit.SAVE
    content: frozenset[Format] = frozenset()
    """Formats this framework writes; they decide between layouts that claim the same names."""
    resume_needs: frozenset[Role] = frozenset()
    """Roles the framework's own resume cannot do without: it fails, or silently drops state."""
    legacy_formats: Mapping[str, str] = MappingProxyType({})
    """Formats this framework wrote once and reads no more, with why (CKD210)."""
    folders: bool = False
    """Whether a checkpoint is a folder (HF Trainer's ``checkpoint-N/``) rather than files."""
    folder_saves: bool = False
    """A layout of files whose checkpoints are folders under the same names where another's
    engine saves them (mmengine's ``epoch_3.pth/`` under DeepSpeedStrategy): its ``build`` takes
    those folders, and a folder layout that claims them by what they hold yields to it."""
    reads_every_name: bool = False
    """The framework parses every name in the run folder (accelerate's automatic checkpoint
    naming takes a number from each, and fails on any other): ckptdoctor's own folder (lock,
    journals, quarantine) then lives beside the run, never in it."""
    own_objects: OwnObjects = NO_OWN_OBJECTS
    """What the framework's own save code pickles beyond torch's ``weights_only`` set and how its
    own loader loads it (``OwnObjects``): in this layout's runs, files that need nothing more are
    CKD402, as its loader loads them; CKD401 on anything else says how its loader would load it
    where that loader runs whatever a file holds."""
    advisory: Mapping[Role, str] = MappingProxyType({})
    """Roles the framework writes but resumes without, each with how: a checkpoint stays complete
    when such a file is missing or damaged, and the finding that says so is a warning."""
    whole_saves: bool = False
    """Every file of a checkpoint is a whole save of it (Lightning's ``epoch=0.ckpt`` beside
    ``epoch=0-step=4.ckpt``): where several share an index, the best of them is the checkpoint."""
    index_keys: Mapping[Unit, str] = MappingProxyType({})
    """The top-level key each save records its index in, by the run's unit (Lightning's
    ``epoch`` and ``global_step``): what places a whole copy (``whole_copy``) whose content
    matches none of the run's saves."""
    named_files: NamedFiles = NO_NAMES
    """Files this framework names whose name fixes how they are read (DeepSpeed's ``latest``:
    a pointer, read by ``readers.pointer``; HF's ``trainer_state.json``: JSON, for the values its
    layout asks for). ``layouts.NAMED_FILES`` joins every layout's, and the pipelines pass that
    to the readers: the readers know formats, never a framework's file names."""

    claimable: re.Pattern[str] | None = None
    """A pattern every name ``claim`` takes matches (its suffixes): a big folder's names are
    sifted by it at once, and only those it finds are asked one by one. None: every name is asked."""

    def claim(self, name: str) -> Claim | None:
        """The roles and index of a checkpoint file of this layout, or None."""
        raise NotImplementedError

    def accepts(self, content: Format) -> bool:
        """Whether this framework writes ``content``."""
        return content in self.content

    def stray(self, name: str) -> Claim | None:
        """A checkpoint-like name under a prefix this layout does not use."""
        return None

    def pointer(self, name: str) -> Claim | None:
        """A file that stands for the newest checkpoint (Lightning's ``last.ckpt``), or None."""
        return None

    def whole_copy(self, entry: Entry) -> Copy | None:
        """What ``entry``, one of the run's pointer files (``pointer``), is where it is a whole
        copy the framework keeps of one of its saves (Lightning's ``last.ckpt`` with
        ``save_last=True``, fairseq's ``checkpoint_last.pt`` and best copies); None for any other.
        ``group`` finds the save it holds (``copy_of``); where that save's own files are not
        whole, a copy the framework resumes from stands for it."""
        return None

    def recorded(self, name: str) -> Claim | None:
        """A checkpoint file whose index is recorded inside it, not in its name (Ultralytics'
        ``last.pt``), or that only the rest of its folder makes a checkpoint (Keras' ``best.keras``,
        the run's one save where no numbered one is beside it): its roles and prefix, with the
        index -1 until the layout's ``build`` places it. None for every other name."""
        return None

    def staging(self, name: str) -> Claim | None:
        """A staging artefact of an interrupted save named by the framework (``tmp.pth.tar``)."""
        return None

    def unfinished(self, name: str) -> str | None:
        """The checkpoint (file or folder name) that a marker file of a save in progress names
        (NeMo's ``<checkpoint without .ckpt>-unfinished``, removed once the save finished), or None."""
        return None

    def resaved(self, name: str) -> tuple[str, int] | None:
        """The name the framework meant to give a save, and the version it added because that
        name was taken (Lightning's ``epoch=0-step=4-v1.ckpt``: ``epoch=0-step=4.ckpt``, 1), or
        None for a name given as meant. The higher version is the later save: of two whole saves
        of one index, the newer is the checkpoint's, and CKD115 names them both."""
        return None

    def recognises(self, entries: tuple[Entry, ...]) -> bool:
        """Whether a folder whose names this layout claims is really this framework's."""
        return True

    builds_on: tuple[str, ...] = ()
    """What this framework saves with (``torch``): fixes worded for that fit its runs too."""
    fix_wordings: Mapping[str, str] = MappingProxyType({})
    """The framework's own words for the rules' fixes, by slot (``rules._rule.Fix.slot``); ``""``
    where a fix does not apply to its runs."""
    vocabulary: tuple[str, ...] = ()
    """The names of the framework's API, files and tools that a fix could mention: no other
    framework's runs are told them (``tests/test_fix_wording.py``)."""
    packages: tuple[str, ...] = ()
    """The framework's Python packages (``transformers`` for HF Trainer): no module outside
    ``layouts/`` names them (``tests/test_layout_knowledge.py``)."""

    @property
    def fix_keys(self) -> tuple[str, ...]:
        """The keys of the fix wordings that fit this layout's runs, most specific first
        (``rules._rule.Fix``): its own name, then what it builds on."""
        return (self.name, *self.builds_on)

    def weights_only(self, saved: Sequence[Sequence[CheckpointFile]]) -> str | None:
        """Why this run saves weights alone by design, from what the framework records (None
        where it does not, or where only the files' keys tell: ``group`` reads those)."""
        return None

    def measured(self, files: list[CheckpointFile]) -> list[CheckpointFile]:
        """One checkpoint's files, each judged against what the others record about it (a data
        file's size against the metadata that places its items)."""
        return files

    def required(self, claims: Sequence[Claim]) -> tuple[Role, ...]:
        """The roles a checkpoint of this run needs to be complete."""
        seen = {role for claim in claims for role in claim.roles}
        return tuple(role for role in Role if role in seen and role is not Role.TEMP)

    def file_name(self, role: Role, index: int) -> str | None:
        """The name the framework gives ``role``'s file at ``index``, where its naming is fixed."""
        return None

    def missing_name(self, checkpoint: Checkpoint, role: Role) -> str | None:
        """The name of the file of ``role`` that ``checkpoint`` lacks, where the framework names it
        by what the checkpoint holds rather than by its index; None: its siblings' names tell."""
        return None

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        """Files a checkpoint should have but does not: named by its own index, or by its siblings
        (a rank's file the run's other checkpoints have)."""
        return ()

    def unread(self, relative: str) -> FileReport | None:
        """The report of a checkpoint's file (by its path inside the checkpoint) that the framework
        does not read on its own: read only through another one, which judges it (an OCDBT
        manifest's data files), or not at all. Such a file is counted, never read. None for the
        files that are read."""
        return None

    def flat_optimizer(self, checkpoint: Checkpoint) -> bool:
        """Whether an engine keeps ``checkpoint``'s optimizer state flat or sharded (DeepSpeed's
        ZeRO partitions, FSDP's shards), so that it cannot be matched parameter by parameter
        against the model's tensors (CKD301)."""
        return False

    def needed_to_resume(self, run: Run) -> frozenset[Role]:
        """The roles a resume of ``run`` cannot do without (a missing one is an error, not a
        schedule that silently starts over): the framework's ``resume_needs``."""
        return self.resume_needs

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        """How to resume from ``checkpoint`` in the framework's own terms ('' if nothing to add)."""
        return ""

    def advisory_at(self, path: str) -> Mapping[Role, str]:
        """``advisory`` for a run at ``path``: in an object store a framework may commit by a
        file it resumes without on a disk (Orbax's ``commit_success.txt`` on GCS)."""
        return self.advisory

    def missing_note(self, run: Run, checkpoint: Checkpoint, role: Role) -> tuple[str, str] | None:
        """What happened where ``checkpoint`` of ``run`` lacks ``role``, and its fix, where the
        framework's way of saving to where the run is tells more than the rule's general words
        (DCP's rename by copy-then-delete in a bucket); None where it does not."""
        return None

    def resume_path(self, run: Run, checkpoint: Checkpoint) -> str:
        """The path to hand the framework's resume (``inspect --resume-path``): the checkpoint's
        own folder where it saves one (HF's ``resume_from_checkpoint``, DCP's ``checkpoint_id``,
        an Orbax step, a DeepSpeed or Megatron tag folder), the run's folder where a folder
        layout saved straight into it, else the checkpoint's model file (Lightning's and timm's
        one file, a split save's weights)."""
        if checkpoint.path is not None:
            return checkpoint.path
        if self.folders:
            return run.path
        files = checkpoint.files_for(Role.MODEL) or checkpoint.files
        return files[0].path if files else run.path

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        """What the framework's pointer files (``latest``, ``best_model_checkpoint``, ...) name."""
        return ()

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        """The checkpoint the framework's own "resume from the latest" would load, if it has one."""
        return None

    def auto_resume_outcome(self, run: Run, pick: Checkpoint) -> str | None:
        """What the framework's "resume from the latest" does where its pick (``auto_resume_pick``)
        is an entry beside the checkpoints that it takes for one (accelerate parses a number out
        of every name in ``checkpoints/``), as CKD114 says it after "<framework>'s resume from
        the latest checkpoint"; None where the pick is a checkpoint (or a copy of one)."""
        return None

    def resumable(self, run: Run) -> frozenset[int] | None:
        """The only indices the framework can resume from, where its state for resuming is kept
        for fewer saves than it keeps weights (torchtune 0.6.1's one recipe state); None where
        every complete checkpoint resumes. The others stay whole weights."""
        return None

    def left_in_place(self, checkpoint: Checkpoint) -> str | None:
        """Why ``prune`` and ``repair`` must leave ``checkpoint`` where it is, whatever its state
        and age: the framework manages it itself (Keras falls back from a damaged
        ``BackupAndRestore`` save to the one before, only while both are there), or it is no save
        in the sequence (Megatron's ``release/``). None: the usual rules decide."""
        return None

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        """How to make the pointer file ``source`` (None: the one the framework expects and
        lacks) name ``checkpoint``; None where the pointer is not a file of its own to write."""
        return None

    def metric_values(self, run: Run, root: str, metric: str, read: Callable[[str], bytes | None]) -> dict[int, float]:
        """Checkpoint index -> value of ``metric`` where the framework records it (``prune
        --keep-best``); empty when nothing does. ``root`` is the run's folder; ``read`` reads a
        file whole (None where it cannot), so that a layout opens nothing itself."""
        return values_in_names(run, metric)

    def build(
        self,
        listing: Listing,
        probe: Callable[[Entry], FileReport],
        claims: dict[str, Claim],
        subfolder: Callable[[Entry], Listing | None],
    ) -> Run | None:
        """The run this layout sees in ``listing``."""
        return group(listing, self, probe, claims)


class FolderLayout(Layout):
    """A framework that saves each checkpoint as a folder of files.

    Subclasses override ``claim`` (the folder's name) and ``role_of`` (a file's name inside it);
    ``build`` assembles the run from the folders ``claim_folders`` finds. The hooks it adds to
    ``Layout``'s:

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
            if inside is not None and self.signature(file_names(inside)) and (claim := self._in_series(entry.name))
        }
        patterns = {_pattern(name) for name in signed}
        for entry, inside in folders:
            if entry.name in signed or _pattern(entry.name) not in patterns:
                continue
            if all(self.role_of(name) for name in file_names(inside)) and (claim := self._in_series(entry.name)):
                signed[entry.name] = claim
        return signed

    def _in_series(self, name: str) -> Claim | None:
        """A name that numbers the saves of one loop (``step_500``, ``epoch-3``, ``checkpoint-500``,
        ``500``), not one that tells experiments apart (``exp1``, ``seed42``: runs of their own)."""
        words = set(_LETTERS.findall(name.lower()))
        return self._numbered(name) if not words or words & SERIES_WORDS else None

    def _numbered(self, name: str) -> Claim | None:
        found = numbered(name)
        return Claim((), found[0], _pattern(name), found[1] or self.default_unit) if found else None

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

    def _contents(self, folder: Listing | None, subfolder: Callable[[Entry], Listing | None]) -> list[tuple[str, Entry]]:
        """A checkpoint folder's entries, with those of its nested folders (at any depth ``nested``
        allows), by relative name."""
        found: list[tuple[str, Entry]] = []
        pending = [("", folder)]
        while pending:
            prefix, listing = pending.pop(0)
            for item in listing.entries if listing else ():
                relative = prefix + item.name
                inner = subfolder(item) if item.is_dir and self.nested(relative) else None
                if inner is None:
                    found.append((relative, item))
                else:
                    pending.append((f"{relative}/", inner))
        return found

    def build(
        self,
        listing: Listing,
        probe: Callable[[Entry], FileReport],
        claims: dict[str, Claim],
        subfolder: Callable[[Entry], Listing | None],
    ) -> Run | None:
        slots: list[_Saved | Entry] = []
        for entry in listing.entries:
            if entry.name in claims:
                slots.append(_Saved(claims[entry.name], entry, self._contents(subfolder(entry), subfolder)))
            else:
                slots.extend(self.beside(entry, subfolder))
        return self._assemble(listing, probe, slots)

    def beside(self, entry: Entry, subfolder: Callable[[Entry], Listing | None]) -> Sequence[Entry]:
        """What an entry beside the checkpoint folders stands for: itself, or, for a folder where
        the framework keeps the run's own state (torchtune's ``recipe_state/``), the files in it,
        judged as the run's files (its pointers, its staging)."""
        return (entry,)

    def build_alone(
        self, listing: Listing, probe: Callable[[Entry], FileReport], subfolder: Callable[[Entry], Listing | None]
    ) -> Run | None:
        """``listing`` is itself one checkpoint folder of this framework (``ckptdoctor inspect
        out/step_500``; a ``save_state("my_checkpoint")``): a run of that one checkpoint, indexed by
        the number in the folder's name. A name without a number is one save of its own: index 0,
        counted in saves (nothing says what it would count). None where what the folder holds
        shows it is not this framework's after all (nanoGPT's ``ckpt.pt`` with another's keys)."""
        name = os.path.basename(os.path.normpath(listing.os_path))
        claim = self._numbered(name) or Claim((), 0, name, Unit.SAVE)
        return self._assemble(listing, probe, [_Saved(claim, None, self._contents(listing, subfolder))])

    def _assemble(self, listing: Listing, probe: Callable[[Entry], FileReport], slots: Sequence[_Saved | Entry]) -> Run:
        """The run of the checkpoint folders in ``slots``, with the entries beside them."""
        batch = [
            item
            for slot in slots
            if isinstance(slot, _Saved)
            for relative, item in slot.contents
            if not item.is_dir and not item.dangling and self.role_in(relative) and self.unread(relative) is None
        ]
        judge = _ContentCheck(self, probe_batch(batch, probe))
        saved: list[tuple[Claim, Entry | None, list[CheckpointFile]]] = []
        loose: list[CheckpointFile] = []
        others: list[Entry] = []
        markers: list[tuple[str, Entry]] = []
        for slot in slots:
            if isinstance(slot, _Saved):
                files: list[CheckpointFile] = []
                for relative, item in slot.contents:
                    roles = None if item.is_dir else self.role_in(relative)
                    if roles:
                        files.append(CheckpointFile(item, roles, relative, self.unread(relative) or judge(item)))
                    else:
                        others.append(item)
                saved.append((slot.claim, slot.folder, self.measured(files)))
            elif slot.is_dir and (staged := self.staging(slot.name)) is not None:
                loose.append(CheckpointFile(slot, (Role.TEMP,), staged.prefix, FileReport("folder")))
            elif (pointer := self.pointer(slot.name)) is not None:
                # a copy of a checkpoint folder under the pointer's name (Lightning's `last.ckpt/`) is the run's too
                loose.append(CheckpointFile(slot, pointer.roles, pointer.prefix, FileReport("folder") if slot.is_dir else judge(slot)))
            elif not slot.is_dir and (marked := self.unfinished(slot.name)) is not None:
                markers.append((marked, slot))
            else:
                others.append(slot)
        for marked, slot in markers:
            held = next((files for claim, folder, files in saved if folder is not None and folder.name == marked), None)
            if held is None:
                others.append(slot)
            else:
                held.append(CheckpointFile(slot, (Role.TEMP,), slot.name, _MARKER))
        # folders list in any order; "newest" means the highest number, then the later save of one name
        saved.sort(key=lambda save: (save[0].number, _version(self.resaved, save[1].name if save[1] is not None else "")))
        every = [files for _, _, files in saved]
        weights_only = self.weights_only(every)
        required = without_training_state(self.required_of(every)) if weights_only else self.required_of(every)
        newest = self.committed([f for f in loose if Role.POINTER in f.roles], [(claim.number, files) for claim, _, files in saved])
        zeros = find_zeroed([(claim.number, files) for claim, _, files in saved])
        verdicts: _Verdicts = {}
        checkpoints = [
            _checkpoint(
                claim.number,
                tuple(files),
                # a save newer than the tracker's commit never finished, whatever it holds
                (*required, Role.POINTER) if newest is not None and claim.number > newest else required,
                False,
                folder,
                self.absent(files, every),
                frozenset(self.advisory_at(listing.path)),
                zeros.get(claim.number, ()),
                verdicts=verdicts,
            )
            for claim, folder, files in saved
        ]
        return Run(
            path=listing.path,
            layout=self.name,
            unit=common_unit((claim for claim, _, _ in saved), self.default_unit),
            checkpoints=tuple(checkpoints),
            required=required,
            other_files=tuple(others),
            loose_files=tuple(loose),
            weights_only=weights_only,
        )


class _Saved(NamedTuple):
    """One checkpoint folder of a run, as its layout claimed it."""

    claim: Claim
    folder: Entry | None
    """None where the folder is the listing itself (``FolderLayout.build_alone``)."""
    contents: list[tuple[str, Entry]]


ROLE_WORDS: dict[str, Role] = {
    "model": Role.MODEL,
    "weights": Role.MODEL,
    "net": Role.MODEL,
    "optim": Role.OPTIMIZER,
    "optimizer": Role.OPTIMIZER,
    "sched": Role.SCHEDULER,
    "scheduler": Role.SCHEDULER,
}
"""Words that name a role in checkpoint file names (``lr_scheduler`` splits into ``scheduler``)."""

_ROLE_HINTS: contextvars.ContextVar[Mapping[str, Role]] = contextvars.ContextVar("role_hints", default=MappingProxyType({}))
"""Name prefixes a project's own checkpointers use (``ema-3.bpk``, ``teacher_3.pt``), with the
role each holds: ``[tool.ckptdoctor.roles]``. A context variable, not module state: each scan
uses the hints of its own configuration (a command's, or ``preflight``'s run's), never those an
earlier caller in the same process left behind.

Why a context variable rather than an argument: the hints change what ``claim`` and ``stray``
answer, and those are asked well after the scan, by code that finds the layout by the run's
name (``layout_named(run.layout)``: the rules' CKD111 index, the planners) and holds no
configuration. Passing them explicitly would mean a hints argument on every naming hook and on
every caller of ``layout_named``, or per-configuration layout objects carried on each ``Run``.
Each entry point sets them once for its own call (``cli._output.configured`` for a command,
``hinted_roles`` around ``preflight``'s scan), and a context variable keeps them to that call."""


def role_hints() -> Mapping[str, Role]:
    """The role hints of the scan in progress (prefix, lower case -> role)."""
    return _ROLE_HINTS.get()


def _lowered(hints: Mapping[str, Role]) -> Mapping[str, Role]:
    return MappingProxyType({prefix.lower(): role for prefix, role in hints.items()})


def use_role_hints(hints: Mapping[str, Role]) -> None:
    """Scan with ``hints`` for the rest of this context (a command sets its own at its start)."""
    _ROLE_HINTS.set(_lowered(hints))


@contextlib.contextmanager
def hinted_roles(hints: Mapping[str, Role]) -> Iterator[None]:
    """Scan with ``hints`` (prefix -> role) inside the block."""
    token = _ROLE_HINTS.set(_lowered(hints))
    try:
        yield
    finally:
        _ROLE_HINTS.reset(token)


NO_TRUST = Trusted()
_TRUSTED: contextvars.ContextVar[Trusted] = contextvars.ContextVar("trusted_globals", default=NO_TRUST)
"""The globals the user declared trusted (``trusted-globals``) for the scan in progress: a context
variable, as the role hints are, and for the same reason (set once by each entry point, read by
every layout's content check)."""


def trusted_globals() -> Trusted:
    return _TRUSTED.get()


@contextlib.contextmanager
def trusting(trusted: Trusted) -> Iterator[None]:
    """Scan with the globals ``trusted`` declares trusted inside the block."""
    token = _TRUSTED.set(trusted)
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def use_trusted_globals(trusted: Trusted) -> None:
    """Scan with ``trusted`` for the rest of this context (a command sets its own at its start)."""
    _TRUSTED.set(trusted)


def guess_roles(prefix: str) -> tuple[Role, ...]:
    """What a file under an unfamiliar prefix most likely holds, judged from its name."""
    lowered = prefix.lower()
    for word in re.split(r"[-_.]+", lowered):
        if word in ROLE_WORDS:
            return (ROLE_WORDS[word],)
    if "optim" in lowered or "adam" in lowered or "sgd" in lowered:
        return (Role.OPTIMIZER,)
    if "sched" in lowered:
        return (Role.SCHEDULER,)
    return (Role.MODEL,)


TEMP_SUFFIX = re.compile(r"(?:\.[0-9]+-[0-9]+)?\.(?:tmp|temp|partial)\Z|\.tmp[0-9]*\Z", re.IGNORECASE)
"""``x.tmp``, ``x.partial`` and the atomic writers' ``x.<pid>-<n>.tmp`` scratch files."""


def temp_base(name: str) -> str | None:
    """The final name a staging file was going to become, or None if it is not one."""
    match = TEMP_SUFFIX.search(name)
    return name[: match.start()] if match and match.start() > 0 else None


def group(
    listing: Listing,
    layout: Layout,
    probe: Callable[[Entry], FileReport],
    claims: dict[str, Claim] | None = None,
) -> Run | None:
    """Build the run ``layout`` sees in ``listing``; None when it claims nothing there."""
    if claims is None:
        claims = claim_all(layout, listing)
    if not claims:
        return None
    judge = _ContentCheck(layout, probe)
    by_index: dict[int, list[CheckpointFile]] = defaultdict(list)
    loose: list[CheckpointFile] = []
    others: list[Entry] = []
    bundles: list[CheckpointFile] = []
    for entry in listing.entries:
        claim = claims.get(entry.name)
        if claim is not None:
            report = judge(entry)
            roles = claim.roles
            if len(roles) > 1:
                report = with_keys(entry, report)
                bundles.append(CheckpointFile(entry, roles, claim.prefix, report))
                roles = confirmed_roles(roles, report)
            by_index[claim.number].append(CheckpointFile(entry, roles, claim.prefix, report))
            continue
        base = temp_base(entry.name)
        target = layout.claim(base) if base is not None else None
        if base is not None and (target is not None or expected_formats(base) is not None):
            # a staging file of a save that never finished: it makes that checkpoint partial
            staged = CheckpointFile(entry, (Role.TEMP,), target.prefix if target else "", _report(entry, probe))
            (by_index[target.number] if target else loose).append(staged)
            continue
        marked = layout.unfinished(entry.name)
        if marked is not None and (target := claims.get(marked)) is not None:
            # the framework's "save in progress" marker beside the checkpoint it names: that save never finished
            by_index[target.number].append(CheckpointFile(entry, (Role.TEMP,), target.prefix, _MARKER))
            continue
        staged_by_name = layout.staging(entry.name)
        if staged_by_name is not None:
            loose.append(CheckpointFile(entry, (Role.TEMP,), staged_by_name.prefix, _report(entry, probe)))
            continue
        pointer = layout.pointer(entry.name)
        if pointer is not None:
            loose.append(CheckpointFile(entry, pointer.roles, pointer.prefix, judge(entry)))
            continue
        stray = layout.stray(entry.name)
        if stray is not None and not entry.is_dir:
            loose.append(CheckpointFile(entry, stray.roles, stray.prefix, judge(entry)))
            continue
        others.append(entry)

    required = layout.required(list(claims.values()))
    saves = sorted(((index, layout.measured(files)) for index, files in by_index.items()), key=lambda save: save[0])
    saved = [files for _, files in saves]
    weights_only = layout.weights_only(saved) or _bundles_hold_weights_only(bundles, saved)
    if weights_only:
        required = without_training_state(required)
    zeros = find_zeroed(saves)
    verdicts: _Verdicts = {}
    unit = common_unit(claims.values(), layout.default_unit)

    def judge_save(index: int, files: Sequence[CheckpointFile], copies: tuple[CheckpointFile, ...] = ()) -> Checkpoint:
        return _checkpoint(
            index,
            (*files, *copies),
            required,
            listing.single_file,
            absent=() if listing.single_file else layout.absent(files, saved),
            zeroed=zeros.get(index, ()),
            whole_saves=layout.resaved if layout.whole_saves or copies else None,
            verdicts=verdicts,
        )

    checkpoints = [judge_save(index, files) for index, files in saves]
    if not listing.single_file:
        loose, checkpoints = _stand_ins(layout, layout.index_keys.get(unit), loose, saves, checkpoints, judge_save)
    return Run(
        path=listing.path,
        layout=layout.name,
        unit=unit,
        checkpoints=tuple(checkpoints),
        required=required,
        other_files=tuple(others),
        loose_files=tuple(loose),
        single_file=listing.single_file,
        weights_only=weights_only,
    )


def _stand_ins(
    layout: Layout,
    key: str | None,
    loose: list[CheckpointFile],
    saves: Sequence[tuple[int, Sequence[CheckpointFile]]],
    checkpoints: list[Checkpoint],
    judge: Callable[[int, Sequence[CheckpointFile], tuple[CheckpointFile, ...]], Checkpoint],
) -> tuple[list[CheckpointFile], list[Checkpoint]]:
    """The run's loose files and checkpoints once its whole copies (``Layout.whole_copy``) are
    placed: each copy is marked with the save it holds (``COPY_OF``), and where that save's own
    files are not whole and the copy is, the copy joins its checkpoint as the whole save the
    framework resumes from (the numbered file cut, the copy written whole after it)."""
    kinds = {id(f): kind for f in loose if Role.POINTER in f.roles and (kind := layout.whole_copy(f.entry)) is not None}
    if not kinds:
        return loose, checkpoints
    position = {c.index: at for at, c in enumerate(checkpoints)}
    numbered = dict(saves)
    placed: dict[int, CheckpointFile | None] = {}  # by the copy's id: marked, or None once it joined its checkpoint
    # those the framework resumes from first: of two whole copies of a save, one stands for it
    for file in sorted((f for f in loose if id(f) in kinds), key=lambda f: kinds[id(f)] is not Copy.RESUMED):
        index = copy_of(file, saves, key)
        if index is None:
            continue
        marked = file._replace(report=dataclasses.replace(file.report, facts=(*file.report.facts, (COPY_OF, str(index)))))
        placed[id(file)] = marked
        before = checkpoints[position[index]]
        if before.status is Status.COMPLETE or marked.report.problems & _UNUSABLE or kinds[id(file)] is Copy.KEPT:
            continue
        roles = next((f.roles for f in before.files if _whole_save(f)), ())
        report = with_keys(marked.entry, marked.report) if len(roles) > 1 else marked.report
        joined = marked._replace(roles=(*confirmed_roles(roles, report), Role.POINTER), report=report)
        after = judge(index, numbered[index], (joined,))
        if after.status is Status.COMPLETE:  # else the copy lacks what the save needs as well
            checkpoints[position[index]] = after
            placed[id(file)] = None
    kept = [placed.get(id(f), f) for f in loose]
    return [f for f in kept if f is not None], checkpoints


def copy_of(copy: CheckpointFile, saves: Sequence[tuple[int, Sequence[CheckpointFile]]], key: str | None) -> int | None:
    """The index of the save whose whole copy ``copy`` is: the newest save whose file holds the
    very pickle ``copy``'s central directory records (``readers.files.same_save``: the save's
    counters are in it, so it tells one save from another; read in the save's own directory, or
    in its first bytes where it was cut short or its end zeroed). A byte copy has its save's size:
    only saves of that size, or whose files are damaged since, are compared. Where none matches,
    the index ``copy`` records under ``key`` (``Layout.index_keys``), if the run has that save.
    None where neither tells (a copy of a save since deleted)."""
    files = [
        (index, f)
        for index, held in reversed(saves)
        for f in held
        if _whole_save(f) and (f.entry.size == copy.entry.size or f.report.problems & _UNUSABLE)
    ]
    found = same_save(copy.entry, [f.entry for _, f in files]) if files and not copy.entry.is_dir else None
    if found is not None:
        return files[found][0]
    if key is None or copy.entry.is_dir or copy.entry.dangling:
        return None
    recorded = with_keys(copy.entry, copy.report).fact(f"{TOP_LEVEL_NUMBER}{key}")
    indexes = {index for index, _ in saves}
    return int(recorded) if recorded is not None and recorded.isdigit() and int(recorded) in indexes else None


def copied(file: CheckpointFile) -> int | None:
    """The index of the save a whole copy holds (``COPY_OF``, left by ``group``), if known."""
    index = file.report.fact(COPY_OF)
    return int(index) if index is not None else None


def pointer_files(run: Run) -> list[CheckpointFile]:
    """The run's pointer files, loose or standing for their save in its checkpoint (a copy)."""
    return [f for f in (*run.loose_files, *(f for c in run.checkpoints for f in c.files)) if Role.POINTER in f.roles]


def copy_pointer(run: Run, copy: CheckpointFile, meaning: str) -> Pointer | None:
    """A whole copy as a pointer: it names the save it holds (``copied``), by that save's file;
    None where that save is not known."""
    index = copied(copy)
    target = next((c for c in run.checkpoints if c.index == index), None)
    if target is None:
        return None
    named = next((f.name for f in target.files if _whole_save(f) and Role.POINTER not in f.roles), copy.name)
    return Pointer(copy, named, index, meaning, copy=True)


def loaded_copy(run: Run, copy: CheckpointFile) -> Checkpoint | None:
    """What a framework's resume that loads the whole-copy file ``copy`` loads: the copy as a
    broken checkpoint where it is cut or damaged (a resume from it fails), else the checkpoint
    of the save it holds; None where that save is not known (it resumes from a save ckptdoctor
    cannot place)."""
    broken = {problem.status for problem in copy.report.problems if problem.status is not None}
    if broken:
        status = Status.PARTIAL if Status.PARTIAL in broken else Status.CORRUPT
        return Checkpoint(run.checkpoints[-1].index if run.checkpoints else 0, (copy,), status)
    index = copied(copy)
    return next((c for c in run.checkpoints if c.index == index), None)


_MARKER = FileReport("marker")
"""A marker file's report: its presence is what it says, its bytes are never read."""

_METRIC_PAIR = re.compile(r"(?:^|[-_])([A-Za-z][\w/]*?)=(-?[0-9]+(?:\.[0-9]+)?(?:e-?[0-9]+)?)", re.IGNORECASE)


def values_in_names(run: Run, metric: str) -> dict[int, float]:
    """``name=value`` in file names, as Lightning's ``filename`` templates write them
    (``epoch=3-val_loss=0.21.ckpt``): where a framework keeps no metrics of its own, a loop may."""
    values: dict[int, float] = {}
    wanted = metric.replace("/", "_")
    for checkpoint in run.checkpoints:
        names = [checkpoint.folder.name] if checkpoint.folder is not None else []
        for stem in (name.rsplit(".", 1)[0] for name in (*names, *(file.name for file in checkpoint.files))):
            for name, value in _METRIC_PAIR.findall(stem):
                if name.replace("/", "_") == wanted:
                    values[checkpoint.index] = float(value)
    return values


class NamingFile(NamedTuple):
    """A text file beside the checkpoints that names the newest one's file, rewritten after
    every save and read by the framework's resume (``last_checkpoint``): mmengine writes the
    file's full path (``CheckpointHook._save_checkpoint_with_step``), Detectron2 through fvcore
    its name alone (``Checkpointer.tag_last_checkpoint``), which fvcore joins with its folder
    (``get_checkpoint_file``). The layouts that keep one answer their pointer hooks from it."""

    name: str
    full_path: bool
    """The file holds the checkpoint file's absolute path, not its name."""

    @property
    def named_files(self) -> NamedFiles:
        return MappingProxyType({self.name: Named(pointer_file.read)})

    def pointer(self, name: str) -> Claim | None:
        return Claim((Role.POINTER,), 0, self.name) if name == self.name else None

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        """What the file names: the checkpoint holding that file in the run's folder, else
        none that can exist (another folder, a name no checkpoint has, a relative path the
        framework would resolve from wherever the job runs)."""
        if not run.checkpoints:
            return ()
        source = next((f for f in run.loose_files if f.entry.name == self.name), None)
        if source is None:
            return (Pointer(None, "", None, self.name),)
        text = source.report.fact(pointer_file.POINTS_TO)
        if text is None:
            return (unreadable_pointer(source, self.name),)
        folder = os.path.dirname(source.entry.os_path)
        path = os.path.join(folder, text)
        if self.full_path and not os.path.isabs(text):
            return (Pointer(source, text, None, self.name),)
        if os.path.realpath(os.path.dirname(path)) != os.path.realpath(folder):
            return (Pointer(source, text, None, self.name, outside=elsewhere(source, text)),)
        name = os.path.basename(path)
        number = next((c.index for c in run.checkpoints if _named(c, name)), None)
        return (Pointer(source, text, number, self.name, outside=elsewhere(source, text) if number is None else None),)

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        """The file, written as the framework writes it, naming ``checkpoint``'s file (the
        best of its whole saves, named first), or its folder where it is one."""
        if source is not None and source.entry.name != self.name:
            return None
        file = checkpoint.folder or next((f.entry for f in checkpoint.files if Role.MODEL in f.roles and Role.TEMP not in f.roles), None)
        if file is None:
            return None
        return PointerWrite(self.name, os.path.abspath(file.os_path) if self.full_path else file.name)


def _named(checkpoint: Checkpoint, name: str) -> bool:
    """Whether ``name`` is the checkpoint's folder, or one of its files (not a staging one)."""
    if checkpoint.folder is not None:
        return checkpoint.folder.name == name
    return any(f.entry.name == name and Role.TEMP not in f.roles for f in checkpoint.files)


def logged_values(data: bytes | None, metric: str, index: str, unless: str | None = None) -> dict[int, float]:
    """``metric`` by ``index`` from a JSON-lines log (mmengine's ``vis_data/scalars.json``,
    Detectron2's ``metrics.json``), from the rows that hold no ``unless`` key (training rows,
    where evaluation rows are wanted). An index logged twice with two values is left out: the
    log does not say which one a checkpoint of that index saw (mmengine logs evaluations of
    iteration-based runs under epoch 0)."""
    values: dict[int, float] = {}
    clashes: set[int] = set()
    try:
        lines = data.decode("utf-8").splitlines() if data is not None else []
    except UnicodeDecodeError:
        return {}
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill, or not JSON
        if not isinstance(row, dict) or (unless is not None and unless in row):
            continue
        step, value = row.get(index), row.get(metric)
        if type(step) is not int or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if step in values and values[step] != value:
            clashes.add(step)
        values[step] = float(value)
    return {step: value for step, value in values.items() if step not in clashes}


def without_training_state(required: tuple[Role, ...]) -> tuple[Role, ...]:
    """What a checkpoint of a run that saves weights alone needs: no optimizer, no scheduler."""
    return tuple(role for role in required if role not in (Role.OPTIMIZER, Role.SCHEDULER))


def _bundles_hold_weights_only(bundles: Sequence[CheckpointFile], saved: Sequence[Sequence[CheckpointFile]]) -> str | None:
    """Why a run of bundled files saves weights alone: every bundle's keys were read and show
    weights, none shows optimizer or scheduler state, and no other file of the run holds one (a
    framework told to save weights alone saves neither: a scheduler without its optimizer is
    what a cleanup leaves)."""
    training = (Role.OPTIMIZER, Role.SCHEDULER)
    if not bundles or any(role in file.roles for files in saved for file in files for role in training):
        return None
    for bundle in bundles:
        found = roles_in(bundle.report)
        if found is None or Role.MODEL not in found or any(role in found for role in training):
            return None
    example = bundles[-1]
    return f"no checkpoint holds optimizer state: the top-level keys of {example.name} are {', '.join(example.report.keys[:8])}"


def common_unit(claims: Iterable[Claim], default: Unit) -> Unit:
    """The unit most of a run's names spell out; ``default`` where none does."""
    units = Counter(claim.unit for claim in claims if claim.unit is not None)
    return units.most_common(1)[0][0] if units else default


def followed(run: Run, pointers: Sequence[Pointer]) -> Checkpoint | None:
    """The checkpoint the first pointer names: what a framework that resumes through it loads."""
    for pointer in pointers:
        return next((c for c in run.checkpoints if c.index == pointer.number), None)
    return None


def link_beside(link_path: str, target: str) -> bool:
    """Whether a symlink at ``link_path`` names a file in its own folder: a framework that loads
    whatever its link names (Lightning's ``last.ckpt``, Composer's ``latest-rank0.pt``) loads a
    file of the same name in another run as readily, and that one is not this run's."""
    folder = os.path.dirname(link_path)
    return os.path.realpath(os.path.dirname(os.path.join(folder, target))) == os.path.realpath(folder)


def symlink_pointers(run: Run, claim: Callable[[str], Claim | None], meaning: str) -> tuple[Pointer, ...]:
    """What the run's pointer files that are symlinks name (a dangling one names nothing: its
    own finding, CKD113, says so, and ``repair`` re-points it): the index ``claim`` reads in the
    target's name where the target lies beside the link, else None (not the run's)."""
    found = []
    for file in run.loose_files:
        if Role.POINTER in file.roles and file.entry.link and not file.entry.dangling:
            named = claim(file.entry.link.rsplit("/", 1)[-1]) if link_beside(file.entry.os_path, file.entry.link) else None
            # a link's framework loads a file, this run's checkpoint or not
            outside = elsewhere(file, file.entry.link) if named is None and not file.entry.is_dir else None
            found.append(Pointer(file, file.entry.link, named.number if named else None, meaning, outside=outside))
    return tuple(found)


def elsewhere(source: CheckpointFile, target: str, beside: bool = True) -> str | None:
    """Where the pointer file ``source`` leads when its ``target`` (a symlink's, or the text a
    framework joins to the pointer's folder: mmengine's absolute path, DeepSpeed's tag), which
    names none of the run's checkpoints, is a file or folder that is there (outside the run, a
    hidden file beside the pointer, ckptdoctor's own quarantine): the path the framework opens.
    None where it is not there, is the pointer itself, lies beside it where not ``beside`` (a
    framework that takes only its own names there), or the run is in a store (whose pointers
    name no local path)."""
    if remote(source.entry.os_path) or (not beside and link_beside(source.entry.os_path, target)):
        return None
    path = os.path.normpath(os.path.join(os.path.dirname(source.entry.os_path), target))
    return path if os.path.exists(path) and path != os.path.normpath(source.entry.os_path) else None


def led_outside(layout: Layout, run: Run) -> str:
    """What to say where one of ``run``'s pointers leads out of it (``Pointer.outside``): the
    framework's own resume through it loads a file no scan of the run judged, whatever the
    resume point is; '' where none does."""
    for pointer in layout.pointers(run):
        if pointer.outside is not None and pointer.source is not None:
            return (
                f"{pointer.source.name} points outside this run's checkpoints, at {pointer.outside}: {layout.name}'s own resume through it "
                "loads that, which ckptdoctor did not check as one of them"
            )
    return ""


OUTSIDE = "outside this run's checkpoints"
"""What ``unfollowable`` says of a pointer that leads to a file or folder that is there, but none
of the run's checkpoints (``Pointer.outside``): the framework loads it, and it was not judged as one."""


def unfollowable(run: Run, pointer: Pointer) -> str | None:
    """Why the framework cannot follow ``pointer`` (``missing``, ``not there``, ``partial``, ...);
    None if it can."""
    if pointer.source is None:
        return "missing"
    if pointer.source.report.problems & _DENIED:
        return None  # what this user may not read is unknown, never stale: its owner can tell
    if pointer.number is None and not pointer.target:
        return "empty" if pointer.source.entry.size == 0 else "unreadable"
    target = next((c for c in run.checkpoints if c.index == pointer.number), None)
    if target is None:
        return OUTSIDE if pointer.number is None and pointer.outside is not None else "not there"
    if target.status in _KNOWN_FOLLOWABLE or (pointer.loads and _whole_for(target, pointer.loads)):
        return None
    if pointer.copy and not pointer.source.report.problems & _UNUSABLE:
        return None  # the framework loads the copy, which is whole
    return str(target.status.value)


def behind_pointer(layout: Layout, run: Run) -> tuple[Checkpoint, Pointer | None] | None:
    """Where the framework's own resume (``auto_resume_pick``) would load a complete checkpoint
    older than the resume point: that checkpoint, with the pointer (or whole copy) it follows
    there, if one names it. None where the pick is the resume point, broken, or none."""
    pick, resume = layout.auto_resume_pick(run), run.resume
    if pick is None or resume is None or pick.status is not Status.COMPLETE or pick.index >= resume.index:
        return None
    return pick, next((p for p in layout.pointers(run) if p.source is not None and p.number == pick.index), None)


def unreadable_pointer(source: CheckpointFile, meaning: str) -> Pointer:
    """A pointer file that names nothing (empty: killed while the framework rewrote it in place;
    or not one name): the framework's resume stops on it or loads something else (Megatron's
    ``read_metadata`` exits, fvcore's ``get_checkpoint_file`` returns the folder itself)."""
    return Pointer(source, "", None, meaning)


def _whole_for(checkpoint: Checkpoint, roles: frozenset[Role]) -> bool:
    """Whether every file of ``roles`` is there and whole (the rest of the checkpoint aside)."""
    if roles & set(checkpoint.missing):
        return False
    held = [f for f in checkpoint.files if roles & set(f.roles)]
    return bool(held) and not any(f.report.problems & (_PARTIAL | _CORRUPT) or Role.TEMP in f.roles for f in held)


def missing_from_siblings(files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
    """Files the run's other checkpoints have and this one lacks (by name inside the checkpoint):
    for frameworks whose every save is written by the same ranks under the same names."""
    expected = {file.prefix for others in siblings for file in others}
    return tuple(sorted(expected - {file.prefix for file in files}))


def folder_name(files: Sequence[CheckpointFile]) -> str:
    """The name of the checkpoint folder ``files`` lie in ('' for none): each file's path ends
    with its path inside the folder. For frameworks that save kinds of checkpoint side by side
    (Megatron's ``release/`` beside ``iter_*/``), each compared only with its own kind."""
    return next((os.path.basename(f.entry.os_path[: -len(f.prefix) - 1]) for f in files[:1]), "")


def unlisted_shards(files: Sequence[CheckpointFile]) -> tuple[str, ...]:
    """The shards a checkpoint's shard index (``model.safetensors.index.json``) names that are not
    among its files: for frameworks that write HF's sharded weights."""
    present = {f.entry.name for f in files}
    named: set[str] = set()
    for file in files:
        if Role.SHARD_INDEX in file.roles and (shards := file.report.fact("shards")):
            named.update(shards.split("\n"))
    return tuple(sorted(named - present))


def probe_batch(batch: Sequence[Entry], probe: Callable[[Entry], FileReport]) -> Callable[[Entry], FileReport]:
    """Probe ``batch`` at once (on every core for big runs); a probe that serves from the results."""
    if isinstance(probe, ReadAhead):
        return probe  # read already: sending its reports between processes would cost more
    if isinstance(probe, HeaderReads):
        read = probe.many(batch)
    else:
        read = [r for chunk in map_chunks(lambda start, stop: [probe(entry) for entry in batch[start:stop]], len(batch)) for r in chunk]
    reports = dict(zip((entry.os_path for entry in batch), read, strict=True))

    def cached(entry: Entry) -> FileReport:
        report = reports.get(entry.os_path)
        if report is None:
            report = reports[entry.os_path] = probe(entry)
        return report

    return cached


def claim_all(
    layout: Layout,
    listing: Listing,
    subfolder: Callable[[Entry], Listing | None] = lambda entry: None,
) -> dict[str, Claim]:
    if isinstance(layout, FolderLayout):
        return layout.claim_folders([(entry, subfolder(entry)) for entry in listing.folders])
    names: Iterable[str] = listing.names
    if layout.claimable is not None:
        names = sifted(listing, layout.claimable)
    claims: dict[str, Claim] = {}
    claim_of, recorded = layout.claim, layout.recorded
    for name in names:
        claim = claim_of(name) or recorded(name)
        if claim is not None:
            claims[name] = claim
    return claims


def sifted(listing: Listing, claimable: re.Pattern[str]) -> Iterable[str]:
    r"""The names of ``listing`` that ``claimable`` matches, in order. A pattern anchored at the
    name's start (``^ep…``) is tried on every name, in C; any other ends the name and begins at a
    dot (``\.pth\Z``), so it matches a name exactly when it matches the name's suffix from its
    first dot, and is tried once per suffix: most names of a big folder share one
    (``tests/test_claims.py`` holds every layout's pattern to that)."""
    if claimable.pattern.startswith("^"):
        return filter(claimable.search, listing.names)
    groups = listing.by_suffix
    matched = [suffix for suffix in groups if claimable.search(suffix)]
    if len(matched) < 2:
        return groups[matched[0]] if matched else ()
    wanted = set(matched)
    return [name for name in listing.names if name[name.find(".") :] in wanted and "." in name]


def file_names(listing: Listing | None) -> frozenset[str]:
    """The names of the files (not folders) directly in ``listing``."""
    return frozenset(entry.name for entry in listing.entries if not entry.is_dir) if listing else frozenset()


UNIT_WORDS: dict[str, Unit] = {
    "epoch": Unit.EPOCH,
    "ep": Unit.EPOCH,
    "step": Unit.STEP,
    "steps": Unit.STEP,
    "iter": Unit.ITERATION,
    "iteration": Unit.ITERATION,
    "it": Unit.ITERATION,
}
"""Words that say what the number beside them counts (``epoch_3``, ``step-500``, ``iter5``)."""
CHECKPOINT_WORDS = frozenset({"checkpoint", "ckpt", "state", "snapshot"})
"""Words that call a numbered name a checkpoint (``checkpoint_3.pth``, ``ckpt-500/``)."""
SERIES_WORDS = frozenset(UNIT_WORDS) | CHECKPOINT_WORDS | {"save"}
_LETTERS = re.compile(r"[a-z]+")
_WORDS_AND_NUMBERS = re.compile(r"[a-z]+|[0-9]+")
_DIGITS = re.compile(r"[0-9]+")


def numbered(name: str) -> tuple[int, Unit | None] | None:
    """The index a folder's name carries (its last number) and the unit its words spell, if any:
    ``step_500`` -> (500, step), ``epoch_3`` -> (3, epoch), ``checkpoint-500`` -> (500, None)."""
    tokens = _WORDS_AND_NUMBERS.findall(name.lower())
    numbers = [token for token in tokens if token.isdigit()]
    if not numbers:
        return None
    return int(numbers[-1]), next((UNIT_WORDS[token] for token in tokens if token in UNIT_WORDS), None)


def _pattern(name: str) -> str:
    """A name with its numbers blanked: saves of one loop share it (``step_#``)."""
    return _DIGITS.sub("#", name)


_ROLE_ORDER = {role: position for position, role in enumerate(Role)}
_PARTIAL = frozenset(problem for problem in Problem if problem.status is Status.PARTIAL)
_CORRUPT = frozenset(problem for problem in Problem if problem.status is Status.CORRUPT)
"""Problems that make a checkpoint no place to resume from (unsafe and NaN-filled files included):
each ``Problem`` says which status it gives."""
_UNUSABLE = _PARTIAL | _CORRUPT
_DENIED = frozenset(problem for problem in Problem if problem.status is Status.UNREADABLE)
_KNOWN_FOLLOWABLE = frozenset({Status.COMPLETE, Status.UNREADABLE})
"""What a pointer may name: a complete checkpoint, or one this user cannot read (nothing says it
is not whole: its owner can tell, and no ``repair`` re-points away from it)."""


def _checkpoint(
    index: int,
    files: tuple[CheckpointFile, ...],
    required: tuple[Role, ...],
    single: bool,
    folder: Entry | None = None,
    absent: tuple[str, ...] = (),
    advisory: frozenset[Role] = frozenset(),
    zeroed: tuple[Zeroed, ...] = (),
    whole_saves: Callable[[str], tuple[str, int] | None] | None = None,
    verdicts: _Verdicts | None = None,
) -> Checkpoint:
    """The checkpoint ``files`` make, and its verdict. A run's checkpoints mostly repeat a few
    shapes (the same roles, with the same shared reports): ``verdicts``, kept for one run, holds
    each shape's verdict once it is worked out. A shape holds what the verdict depends on
    beyond the names, so only checkpoints whose names play no part are looked up there: none of
    their files is a staging file, and no two are whole saves of one index. ``whole_saves``: the
    layout's ``resaved`` where each of its files is a whole save (``Layout.whole_saves``)."""
    files = tuple(sorted(files, key=_file_order))
    staged = any(Role.TEMP in f.roles for f in files)
    several_saves = whole_saves if whole_saves is not None and sum(_whole_save(f) for f in files) > 1 else None
    if verdicts is None or staged or several_saves is not None:
        return _judged(index, files, required, single, folder, absent, advisory, zeroed, staged, several_saves)
    # ids of reports the run's files hold alive: stable while ``verdicts`` is in use
    shape = (required, single, advisory, bool(absent), any(z.read_whole for z in zeroed), tuple((f.roles, id(f.report)) for f in files))
    verdict = verdicts.get(shape)
    if verdict is None:
        judged = _judged(index, files, required, single, folder, absent, advisory, zeroed, staged, several_saves)
        unread = tuple(_roles_unread(f) for f in files)
        verdict = verdicts[shape] = (judged.status, judged.missing, unread)
        return judged
    status, missing, unread = verdict
    roles_unread = tuple(f.name for f, skipped in zip(files, unread, strict=True) if skipped) if any(unread) else ()
    return Checkpoint(index, files, status, missing, absent, folder, roles_unread, zeroed)


_Verdicts = dict[tuple[object, ...], tuple[Status, tuple[Role, ...], tuple[bool, ...]]]
"""Verdicts (status, missing roles, which files' roles are unread) by checkpoint shape, for one run."""


def _judged(
    index: int,
    files: tuple[CheckpointFile, ...],
    required: tuple[Role, ...],
    single: bool,
    folder: Entry | None,
    absent: tuple[str, ...],
    advisory: frozenset[Role],
    zeroed: tuple[Zeroed, ...],
    staged: bool,
    several_saves: Callable[[str], tuple[str, int] | None] | None,
) -> Checkpoint:
    counted = files
    if several_saves is not None:
        saves = [f for f in files if _whole_save(f)]
        # each file that holds the model is a whole save of this index: the checkpoint is what the
        # best of them holds (of equals, the later save of one name), named first (the resume
        # names files[0]); the others are copies with findings of their own; what is no save (a
        # staging file, a progress record) counts as it is
        best = min(
            saves,
            key=lambda f: (
                bool(f.report.problems & _UNUSABLE),
                -len(set(f.roles) & set(required)),
                -_version(several_saves, f.entry.name),
                f.entry.name,
            ),
        )
        files = (best, *(f for f in files if f is not best))
        counted = (best, *(f for f in files if not _whole_save(f)))
    present = {role for f in counted for role in f.roles}
    missing = () if single else tuple(role for role in required if role not in present)
    # a staging file whose final name stands whole beside it is a leftover of an earlier (or a
    # repeated) save: its own finding (CKD202), not a checkpoint cut short
    whole = {f.entry.name for f in files if Role.TEMP not in f.roles} if staged else set()
    judged = [f for f in counted if (Role.TEMP not in f.roles or temp_base(f.entry.name) not in whole) and not advisory.issuperset(f.roles)]
    problems = {problem for f in judged if f.report.issues for problem in f.report.problems}
    if (staged and any(Role.TEMP in f.roles for f in judged)) or problems & _PARTIAL:
        status = Status.PARTIAL
    elif problems & _CORRUPT or any(z.read_whole for z in zeroed):
        # tensors read as zeros where the previous checkpoint held data: a resume would load them
        # as weights (the guess from a file's last 4 KiB only warns)
        status = Status.CORRUPT
    elif set(missing) - advisory or absent:
        status = Status.INCOMPLETE
    elif problems & _DENIED:  # nothing else is wrong with it, and what this user may not read is unknown
        status = Status.UNREADABLE
    else:
        status = Status.COMPLETE
    # only the saves that count tell the roles: a cut copy of another whole save tells nothing
    return Checkpoint(index, files, status, missing, absent, folder, tuple(f.name for f in counted if _roles_unread(f)), zeroed)


def _version(resaved: Callable[[str], tuple[str, int] | None], name: str) -> int:
    """The version the framework added to ``name`` because it was taken (``Layout.resaved``); 0 for none."""
    found = resaved(name)
    return found[1] if found is not None else 0


def _whole_save(file: CheckpointFile) -> bool:
    """A file that is a save of its own where the framework's saves are whole (``whole_saves``)."""
    return Role.MODEL in file.roles and Role.TEMP not in file.roles


def _roles_unread(file: CheckpointFile) -> bool:
    """Whether ``file`` is bundled and only its name tells its roles."""
    return file.bundled and Role.POINTER not in file.roles and roles_in(file.report) is None


def _file_order(file: CheckpointFile) -> tuple[int, str]:
    """A checkpoint's files by role (the model first), then by name."""
    return _ROLE_ORDER[file.roles[0]], file.entry.name


def _report(entry: Entry, probe: Callable[[Entry], FileReport]) -> FileReport:
    if entry.is_dir:
        return FileReport("folder", (FileIssue(Problem.NOT_A_CHECKPOINT, "a folder where a checkpoint file belongs"),))
    if entry.dangling:
        return FileReport("symlink", (FileIssue(Problem.DANGLING, "a symlink whose target is missing"),))
    return probe(entry)


class _ContentCheck:
    """Whether ``layout``'s framework writes what each file holds, and what of the objects it
    needs that framework vouches for (``OwnObjects``); judged once per shared report."""

    def __init__(self, layout: Layout, probe: Callable[[Entry], FileReport]) -> None:
        self.layout = layout
        self.probe = probe
        self.judged: dict[int, tuple[FileReport, FileReport]] = {}

    def __call__(self, entry: Entry) -> FileReport:
        report = _report(entry, self.probe)
        held = self.judged.get(id(report))
        if held is not None and held[0] is report:
            return held[1]
        judged = self._judge(report, entry.name)
        # the report is kept with its judgement: a folder's or a dangling link's, made afresh
        # for each entry, cannot leave its id to another
        self.judged[id(report)] = (report, judged)
        return judged

    def _judge(self, report: FileReport, name: str) -> FileReport:
        if report.issues:
            return self.layout.own_objects.vouched(report, trusted_globals())
        try:
            content = Format(report.format)
        except ValueError:
            content = Format.UNKNOWN
        if self.layout.accepts(content) or (content is Format.NUMPY and report.tensors):
            return report  # arrays no framework writes as checkpoints, but read and found to be plain data
        if report.format in (Format.ZIP.value, TAR.value) and pandas_archive(name):
            return report  # pandas' pickle archive, its pickle read as read_pickle reads it and found plain data
        what = "no checkpoint format ckptdoctor knows" if content is Format.UNKNOWN else f"{content.value} data"
        writer = f", which {self.layout.name} does not write" if self.layout.content else ""
        return FileReport(report.format, (FileIssue(Problem.NOT_A_CHECKPOINT, f"holds {what}{writer}"),), report.facts)


def confirmed_roles(roles: tuple[Role, ...], report: FileReport) -> tuple[Role, ...]:
    """A bundled file's roles as its top-level keys show them once they were read (``verify``,
    or the skim ``inspect`` does); before that (or for a file of one role) as its name says."""
    if len(roles) < 2:
        return roles
    found = roles_in(report)
    if found is None:
        return roles
    return found + tuple(role for role in roles if role not in (Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER))


def roles_in(report: FileReport) -> tuple[Role, ...] | None:
    """The roles a file's top-level keys show; None where they were not read or tell none."""
    if not report.keys_read or not report.keys:
        return None
    found = tuple(role for role, keys in ROLE_KEYS if any(key in report.keys for key in keys))
    if found:
        return found
    if all(key in report.keys for key in OPTIMIZER_STATE):
        return (Role.OPTIMIZER,)
    if report.tensors or report.fact(TOP_LEVEL_TENSORS) == str(len(report.keys)):
        return (Role.MODEL,)  # a bare state dict: its keys are tensor names
    return None


class NamedByFile(Layout):
    """A layout whose pointer hooks all answer from one ``NamingFile`` (``naming_file``):
    mmengine's and Detectron2's ``last_checkpoint``, written each in its framework's form."""

    naming_file: NamingFile

    def pointer(self, name: str) -> Claim | None:
        return self.naming_file.pointer(name)

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        return self.naming_file.pointers(run)

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        return followed(run, self.pointers(run))

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        return self.naming_file.repoint(source, checkpoint)
