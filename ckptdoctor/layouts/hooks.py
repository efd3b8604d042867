"""The hooks of a layout, each with its default: what a framework's layout may answer.

``LayoutHooks`` declares them; ``base.Layout`` adds the default ``build`` (``grouping.group``),
and ``folders.FolderHooks`` the hooks of a framework that saves each checkpoint as a folder.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.layouts.content import NO_OWN_OBJECTS, OwnObjects
from ckptdoctor.layouts.copies import Copy
from ckptdoctor.layouts.metrics import values_in_names
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.layouts.pointers import Pointer
from ckptdoctor.model import Checkpoint, CheckpointFile, Entry, FileReport, PointerWrite, Role, Run, Unit
from ckptdoctor.readers.named import NO_NAMES, NamedFiles
from ckptdoctor.readers.sniff import Format


class LayoutHooks:
    """One framework's knowledge: its names, what its checkpoints need, its pointers, where it
    keeps metrics and how its fixes are worded. Everything else (grouping files by index, staging
    leftovers, statuses) is done once for all frameworks (``grouping``, ``folders``, ``judging``).

    A layout of flat files (a checkpoint is one or more files side by side) subclasses
    ``base.Layout`` and overrides ``claim``; every other hook has a default that suits a framework
    without the feature. The hooks, their defaults, and the layouts that override them today
    (``tests/test_layout_knowledge.py`` holds this table to the hooks declared here, and to
    their defaults):

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
    ``versions_taken``           False (True where ``resaved`` is overridden) lightning, by ``resaved``
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
    ``harmless``                 none                                         hf-trainer, lightning (their argument
                                                                              and hyper-parameter containers)
    ``construct_only``           none                                         hf-trainer (``TrainingArguments``...)
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
    ``folders``                  False (a checkpoint is files)                every folder layout (``FolderLayout``)
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
    ``fix_keys``                 its name, then ``builds_on``                 none
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

    harmless: frozenset[str] = frozenset()
    """Classes the framework's own saves pickle that are harmless to import and rebuild (its
    argument and hyper-parameter containers, as ``module.Class``), outside torch's allowlist:
    a pickle that needs them is CKD402, not CKD401. ``layouts.HARMLESS`` joins every layout's,
    and the pipelines hand that to the readers, as ``named_files``: a file is read before any
    layout claims it, so each is judged with every layout's (a lone ``training_args.bin`` too,
    still reported, never called clean)."""
    construct_only: frozenset[str] = frozenset()
    """Those of ``harmless`` harmless only rebuilt field by field (``NEWOBJ`` + ``BUILD``): calling
    them runs their set-up code (devices, distributed state), so a pickle that calls them is unsafe."""

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

    versions_taken: bool = False
    """Whether the framework adds a version to a name that is taken: set for every layout that
    overrides ``resaved`` (``__init_subclass__``), so CKD115 looks only in such runs, and a new
    layout's override is never left unlooked at."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.versions_taken = cls.resaved is not LayoutHooks.resaved

    def recognises(self, entries: tuple[Entry, ...]) -> bool:
        """Whether a folder whose names this layout claims is really this framework's."""
        return True

    builds_on: tuple[str, ...] = ()
    """What this framework saves with (``torch``): fixes worded for that fit its runs too."""
    fix_wordings: Mapping[str, str] = MappingProxyType({})
    """The framework's own words for the rules' fixes, by slot (``rules.rule.Fix.slot``); ``""``
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
        (``rules.rule.Fix``): its own name, then what it builds on."""
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
