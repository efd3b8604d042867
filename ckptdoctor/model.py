"""The data that flows through ckptdoctor: files, checkpoints, runs and findings.

Everything here is a frozen dataclass or an enum so that every stage (layouts, rules,
renderers) can share values without defensive copies, and so that renderers cannot
change what the core decided.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple


class _Word(str, enum.Enum):
    """An enum whose members are their values' strings, hashed as those strings are: in C, and
    once per member (``Enum`` hashes each member by its name in a Python call, and a big run
    puts roles and problems into sets and dict keys for every file)."""

    __hash__ = str.__hash__


class Severity(_Word):
    """How bad a finding is; ordered so that thresholds (`--fail-on`) compare."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


class Status(_Word):
    """The state of one checkpoint (docs/formats.md says what makes one whole)."""

    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    PARTIAL = "partial"
    CORRUPT = "corrupt"
    UNREADABLE = "unreadable"
    """A file or folder of it this user may not read or search (EACCES, EPERM): nothing is known
    of what it holds, so it is neither a place to resume from nor broken, and no command acts on it."""
    ARCHIVED = "archived"
    """An object of it is in an archive tier of its store (S3 Glacier Flexible Retrieval, Deep
    Archive, Intelligent-Tiering's archive tiers) and not restored: no one can read it until it is,
    so it is no place to resume from, yet nothing says it is broken, and ``repair`` never moves it."""


class Role(_Word):
    """What a file holds for its checkpoint."""

    MODEL = "model"
    OPTIMIZER = "optimizer"
    SCHEDULER = "scheduler"
    TRAINER_STATE = "trainer-state"
    RNG_STATE = "rng-state"
    TRAINING_ARGS = "training-args"
    SCALER = "scaler"
    CONFIG = "config"
    SHARD_INDEX = "shard-index"
    METADATA = "metadata"
    POINTER = "pointer"
    TEMP = "temp"
    """A staging artefact of an interrupted save, attributed to the checkpoint it belonged to."""


class Unit(_Word):
    """What a run's checkpoint index counts."""

    EPOCH = "epoch"
    STEP = "step"
    ITERATION = "iteration"
    SAVE = "save"


class Problem(_Word):
    """What a reader can find wrong with one file: the one table from reader problems to rules
    and checkpoint statuses. Each value is the name of the rule that reports the problem
    (``rules.integrity`` looks it up by name; a test checks each names a rule), and ``status`` is
    what the problem makes of the checkpoint that holds the file: partial, corrupt, or None
    where the checkpoint stays a place to resume from. It lives here, not in ``rules/``, because
    readers make these values and ``layouts/`` judges statuses by them, and neither imports
    ``rules`` (see ARCHITECTURE.md, "How to add a rule")."""

    _value_: str
    status: Status | None

    def __new__(cls, rule: str, status: Status | None) -> Problem:
        member = str.__new__(cls, rule)
        member._value_ = rule
        member.status = status
        return member

    EMPTY = "empty-file", Status.PARTIAL
    TRUNCATED = "truncated", Status.PARTIAL
    TRAILING_BYTES = "trailing-bytes", None
    """Torch and burn ignore the extra bytes: worth a look, not a reason to resume elsewhere."""
    NOT_A_CHECKPOINT = "not-a-checkpoint", Status.CORRUPT
    MALFORMED = "malformed", Status.CORRUPT
    LEGACY = "legacy-format", None
    """Still loadable: reported once per run and format, by its own check."""
    UNREADABLE = "unreadable", Status.CORRUPT
    """Reading failed otherwise than by a permission: an I/O error, a file that vanished."""
    ACCESS_DENIED = "access-denied", Status.UNREADABLE
    """This user may not read it (EACCES, EPERM): nothing is known of it, neither whole nor broken."""
    ARCHIVED = "archived", Status.ARCHIVED
    """Its object is in an archive tier and not restored (S3 answers ``InvalidObjectState``): no
    one reads it before a restore, and nothing is known of it, neither whole nor broken. The
    report's facts say the storage class, the tier and whether a restore is under way."""
    DANGLING = "stale-pointer", Status.CORRUPT
    """A symlink whose target is gone."""
    CRC_MISMATCH = "crc-mismatch", Status.CORRUPT
    NONFINITE = "nonfinite-values", Status.CORRUPT
    """A resume would load NaN or Inf as weights."""
    UNSAFE_PICKLE = "unsafe-pickle", Status.CORRUPT
    """Loading it would run code: no place to resume from."""
    NON_WEIGHTS = "non-weights-object", None
    """Its own framework loads it with those globals allowed."""
    ZIP_ANOMALY = "zip-anomaly", Status.CORRUPT
    PARTLY_CHECKED = "partly-checked", None
    """An optional library that reads the rest is missing: what could be checked was."""
    CODE_IN_CONFIG = "code-in-config", Status.CORRUPT
    """A model's configuration carries Python code its loader would run (Keras' Lambda layers)."""


_NO_PROBLEMS: frozenset[Problem] = frozenset()
TOP_LEVEL_TENSORS = "top-level-tensors"
"""The fact a skim of a bundled file's keys leaves: how many top-level values are tensors."""
TOP_LEVEL_NUMBER = "top-level:"
"""Facts a skim leaves for the top-level keys that hold numbers (``top-level:global_step``)."""
RECORDED_PATH = "recorded-path:"
"""Facts a whole read leaves for the keys a checkpoint records another file of its run under
(``recorded-path:last_model_path``: ``bundles.PATH_KEYS``), with the path it records."""
STORAGE_CLASS = "storage-class"
ARCHIVE_TIER = "archive-tier"
RESTORE = "restore"
"""The facts an archived object's report holds (``Problem.ARCHIVED``): its storage class, its
Intelligent-Tiering archive tier ('' for none), and how its restore stands (one of the three below)."""
RESTORING = "restore requested, not finished"
NOT_RESTORED = "not restored"
RESTORE_UNKNOWN = "whether a restore is under way is not known (that needs boto3: pip install 'ckptdoctor[s3]')"
COPY_OF = "copy-of"
"""The fact a layout leaves on a whole copy the framework keeps of one of its saves: the index
of the save it holds (``layouts.copies.copy_of``)."""


class Rebuilt(NamedTuple):
    """What an unsafe pickle does with the globals outside every allowlist, where importing them is
    all that keeps it from being proven safe: which it only rebuilds the way pickle writes plain
    objects and enum members, and which it uses otherwise (``other``). Readers know no framework,
    so they report it; the layout of the run that holds the file decides whether its framework
    writes exactly these, and the user's ``trusted-globals`` which they declared."""

    where: str
    """The pickle (``data.pkl``, ``the pickle``)."""
    instances: frozenset[str]
    """Classes only instantiated empty (``cls.__new__(cls)``, ``NEWOBJ`` with no arguments) and
    then given their fields (``BUILD`` of the new object): how pickle writes a plain object."""
    values: frozenset[str]
    """Classes only called with one literal (``cls(2)``): how pickle writes an enum member."""
    methods: frozenset[str]
    """``class.name`` of the constant ``getattr`` lookups on those classes, kept, never called
    (mmengine's ``HistoryBuffer`` keeps ``getattr(HistoryBuffer, "min")``)."""
    called: frozenset[str] = frozenset()
    """Classes only called with no argument (``cls()``, which runs its ``__init__``) and then,
    if at all, given their fields: how a ``types.SimpleNamespace`` pickles itself."""
    other: frozenset[str] = frozenset()
    """Globals used any other way (called with arguments, kept as values, passed on): only a
    user's declaration (``trusted-globals``, as torch's ``add_safe_globals``) or a framework's
    own bare values (``OwnObjects.kept``) vouch for them."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.instances | self.values | self.called | self.other))

    @property
    def plain(self) -> bool:
        """Whether the pickle only rebuilds objects and enum members (nothing called with arguments)."""
        return not self.other


@dataclass(frozen=True)
class FileIssue:
    """One problem a reader found in a file, with the sentence that explains it."""

    problem: Problem
    detail: str
    needs: tuple[str, ...] = ()
    """The globals a non-weights issue asks a loader to allow (``argparse.Namespace``); empty for
    every other issue and for non-weights content no allowlist admits (TorchScript code)."""
    rebuilt: Rebuilt | None = None
    """On an unsafe-pickle issue, what the pickle did with the globals that made it unsafe, where
    importing them is all that made it so (``Rebuilt``); None for any other."""
    severity: Severity | None = None
    """Set by the layout of the run that holds the file, where its framework's own loader loads
    what the file needs (info: as the framework wrote it; a warning: with the step the detail
    names); None: the rule's own."""


class Span(NamedTuple):
    """A stretch of bytes that ``verify --deep`` read whole: a tensor's data, a DCP item."""

    name: str
    """The tensor's name, or the DCP item's fully qualified name (with its chunk's offsets when sharded)."""
    zero: bool
    """Every byte is zero."""
    file: str = ""
    """The file that holds it, when not the one reported on (a DCP item lies in a data file ``.metadata`` names)."""


class Tensor(NamedTuple):
    """One tensor a file holds, as its format records it (nothing is loaded)."""

    name: str
    """Dotted path inside the saved object (``state_dict.fc.weight``, ``state.0.exp_avg``)."""
    dtype: str
    """torch's spelling for every format (``float32``, ``bfloat16``, ``int64``, ``bool``)."""
    shape: tuple[int, ...]
    nbytes: int
    device: str = "cpu"
    """The device it was saved from (torch records it; other formats are always ``cpu``)."""
    param: str | None = None
    """The parameter id burn keys optimizer state by (burnpack ``param_id``, a record's ``ParamSerde.id``)."""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class FileReport:
    """What a reader learned about one file: from its header and trailer, or (``verify``) all of it."""

    format: str
    """Content format as sniffed, e.g. ``burnpack``, ``torch-zip``, ``safetensors``."""
    issues: tuple[FileIssue, ...] = ()
    facts: tuple[tuple[str, str], ...] = ()
    """Small key/value facts for consistency rules: precision, recorder, optimizer kind, ..."""
    tensors: tuple[Tensor, ...] | None = None
    """Every tensor, when the whole file was read (``verify``); None after a header read."""
    keys: tuple[str, ...] = ()
    """Top-level keys of the saved object (bundled checkpoints: ``state_dict``, ``optimizer_states``)."""
    tensor_bytes: int = 0
    """Bytes of tensor data, each shared storage counted once."""
    weight_map: tuple[tuple[str, str], ...] = ()
    """A shard index's map: (tensor name, shard file name) pairs."""
    spans: tuple[Span, ...] | None = None
    """``verify --deep``: each tensor (or DCP item) read byte by byte, and whether it is all zero;
    None when the bytes were not read one by one."""

    def fact(self, key: str) -> str | None:
        for name, value in self.facts:
            if name == key:
                return value
        return None

    @property
    def keys_read(self) -> bool:
        """Whether ``keys`` were read from the content: the whole file (``verify``), or the
        top-level keys skimmed for a bundled checkpoint (``inspect``)."""
        return self.tensors is not None or self.fact(TOP_LEVEL_TENSORS) is not None

    @functools.cached_property
    def problems(self) -> frozenset[Problem]:
        return frozenset(issue.problem for issue in self.issues) if self.issues else _NO_PROBLEMS


class Entry(NamedTuple):
    """One directory entry seen by discovery, before any layout looked at it.

    A NamedTuple rather than a frozen dataclass: a scan makes one per file, and building a
    frozen dataclass costs several times as much (big runs have hundreds of thousands).
    """

    name: str
    """The file name as the OS gave it (may carry surrogate escapes)."""
    path: str
    """The path as the user gave it, joined with the name: what every report shows."""
    os_path: str
    """The path to open: may differ from ``path`` where a name is not valid UTF-8."""
    size: int
    is_dir: bool = False
    is_symlink: bool = False
    dangling: bool = False
    inode: tuple[int, int] | None = None
    """(device, inode), so that hard links and symlinked copies are counted once."""
    mtime: float = 0.0
    link: str | None = None
    """Where a symlink points, as written in the link (None for anything else)."""
    links: int = 1
    """Hard links to the file (``st_nlink``): its bytes can be shared only when above 1."""
    denied: bool = False
    """Listed, but this user may not look at it (its folder may be read, not searched): size,
    time and identity unknown."""


class Zeroed(NamedTuple):
    """Bytes that are all zero in a checkpoint where the run's previous checkpoint held data (CKD212)."""

    path: str
    """The file that holds them, as reports show it."""
    regions: tuple[str, ...]
    """The tensors or DCP items that are all zero; empty for the guess from a file's last 4 KiB."""
    before: int
    """The index of the previous checkpoint, which held data there."""

    @property
    def read_whole(self) -> bool:
        """Found by reading every byte (``verify --deep``), not guessed from the file's tail."""
        return bool(self.regions)


class CheckpointFile(NamedTuple):
    """A file that belongs to a checkpoint, with the roles it holds (one per file, like Entry)."""

    entry: Entry
    roles: tuple[Role, ...]
    prefix: str
    """The name prefix the file was saved under (burn's checkpointer name, ``model``, ...)."""
    report: FileReport

    @property
    def path(self) -> str:
        return self.entry.path

    @property
    def name(self) -> str:
        """The file name as reports print it (undecodable bytes escaped, as in ``path``)."""
        return self.entry.path.rpartition(os.sep)[2]

    @property
    def bytes(self) -> int:
        return self.entry.size

    @property
    def bundled(self) -> bool:
        return len(self.roles) > 1

    @property
    def leftover(self) -> bool:
        """Useless wherever it lies: a staging leftover, or an empty file. ``repair`` moves such a
        file even when it belongs to no checkpoint; the fixes say so only of these."""
        return Role.TEMP in self.roles or Problem.EMPTY in self.report.problems


@dataclass(frozen=True)
class Checkpoint:
    """All files saved for one index (epoch, step, ...) of a run."""

    index: int
    files: tuple[CheckpointFile, ...]
    status: Status
    missing: tuple[Role, ...] = ()
    """Required roles with no file (what makes the checkpoint incomplete)."""
    absent: tuple[str, ...] = ()
    """Files the checkpoint's own metadata names (shards in an index) that are not there."""
    folder: Entry | None = None
    """The checkpoint's own folder, for layouts that save one folder per checkpoint."""
    roles_unread: tuple[str, ...] = ()
    """Bundled files whose roles are only what their names say: their keys were not read, or
    name no role ckptdoctor knows (``complete`` then means "as far as names tell")."""
    zeroed: tuple[Zeroed, ...] = ()
    """Its bytes that are all zero where the run's previous checkpoint held data."""
    unlisted: tuple[Entry, ...] = ()
    """Its folder, or folders in it, that this user may not list or search (each ``denied``)."""

    @property
    def bytes(self) -> int:
        return _unique_bytes([f.entry for f in self.files])

    @property
    def path(self) -> str | None:
        """The checkpoint's folder as reports show it, if it has one."""
        return self.folder.path if self.folder else None

    @property
    def shut(self) -> bool:
        """Whether this user may not read some of it (a file, its folder, a folder in it): no
        command deletes or moves it, whatever else is known of it (CKD215)."""
        return bool(self.unlisted) or any(Problem.ACCESS_DENIED in f.report.problems for f in self.files)

    @property
    def archived(self) -> tuple[CheckpointFile, ...]:
        """Its files whose objects are in an archive tier and not restored (CKD217)."""
        return tuple(f for f in self.files if Problem.ARCHIVED in f.report.problems)

    def files_for(self, role: Role) -> tuple[CheckpointFile, ...]:
        return tuple(f for f in self.files if role in f.roles)

    @property
    def roles(self) -> frozenset[Role]:
        return frozenset(role for f in self.files for role in f.roles)


class PendingUpload(NamedTuple):
    """A multipart upload begun under a run's prefix and neither completed nor aborted: no object
    shows it, yet its parts are stored (and billed)."""

    url: str
    """The object it would have made."""
    parts_bytes: int
    age: float | None
    """Seconds since it began, by the store's own clock (None where the store sent no time)."""


class PreviousVersion(NamedTuple):
    """What a versioned bucket keeps of a damaged file from before it was overwritten: its newest
    older version read whole by the scan's own reader, or why there is none."""

    path: str
    """The damaged file, as reports show it."""
    bucket: str
    key: str
    version_id: str | None
    """The S3 ``versionId`` of the newest older version found whole; None where none is."""
    size: int = 0
    modified: float = 0.0
    """When that version was written, in seconds since the epoch, by the store's clock."""
    checked: str = ""
    """How it was found whole (``its length``, ``its length and its SHA256``), or with no version,
    why none is offered (``no older version of it is kept``)."""
    unchecked: str = ""
    """What of it was not checked (a checksum the store keeps that was not computed); '' for nothing."""


@dataclass(frozen=True)
class StoreLeftovers:
    """What a store keeps under a run's prefix that no listing of its objects shows: incomplete
    multipart uploads, and on a versioned bucket older versions and delete markers. Asked once
    per path the user gave (``stores.leftovers``), shared out to its runs by prefix."""

    uploads: tuple[PendingUpload, ...] = ()
    versioning: str | None = None
    """The bucket's versioning (``Enabled``, ``Suspended``); None where it never was versioned."""
    noncurrent: int = 0
    noncurrent_bytes: int = 0
    """Bytes of older versions: what the deletes of a versioned bucket did not free."""
    delete_markers: int = 0
    unchecked: str | None = None
    """Why uploads and versions were not asked about (no boto3, a store with no such calls here,
    a refusal); None where they were."""
    told: bool = False
    """``unchecked`` is said on another run of the same path (said once per path)."""
    previous: tuple[PreviousVersion, ...] = ()
    """On a versioned bucket, each damaged file's newest whole older version (or why none)."""


MIN_AGE = 600.0
"""``prune`` and ``repair`` leave files younger than this (seconds) by default (``--min-age``): a
save may still be writing them, on this machine or another."""


class Cause(_Word):
    """Why a save stopped part-way, as the world around it tells (CKD117)."""

    BEING_WRITTEN = "being-written"
    """A live process of this machine holds its files: the save is going on now."""
    DISK_FULL = "disk-full"
    """Its volume has no room left for the rest of it."""
    KILLED = "killed"
    """Nothing holds its files and its volume has room: the writer died (a kill, a crash, a pre-empted node)."""
    CUT_SHORT = "cut-short"
    """Nothing could be asked of the world (a store, an unreadable process table): cut short, why unknown."""


@dataclass(frozen=True)
class Interruption:
    """A checkpoint whose save stopped part-way, and what the world said of it when it was listed."""

    index: int
    cause: Cause
    age: float | None
    """Seconds since its newest file was last written; None where its files' times are unknown."""
    holders: tuple[str, ...] = ()
    """The live processes holding its files open for writing (``pid (command, user)``)."""
    readers: tuple[str, ...] = ()
    """The live processes holding its files open only to read them (a copy, a pager): no writer,
    yet ``prune`` and ``repair`` leave the files while they are held."""
    volume: Volume | None = None
    """The filesystem under it; None for a run in a store, or one whose volume cannot be read."""
    wanted_bytes: int | None = None
    """What the rest of the save needed: the run's last complete checkpoint less what this one
    holds; None where the run has no complete checkpoint to judge by."""
    unseen: bool = False
    """Some processes' open files were hidden from this user (another user's, an undumpable
    one): "no process holds its files" is then only as far as this user can see."""


@dataclass(frozen=True)
class Run:
    """One training run: a folder of checkpoints in one layout."""

    path: str
    layout: str
    unit: Unit
    checkpoints: tuple[Checkpoint, ...]
    """In natural numeric order of index."""
    required: tuple[Role, ...]
    """Roles every checkpoint of this run needs to be complete."""
    other_files: tuple[Entry, ...] = ()
    """Files in the run folder that no layout claimed: reported, never dropped."""
    loose_files: tuple[CheckpointFile, ...] = ()
    """Checkpoint-like files that belong to no checkpoint: staging leftovers, stray prefixes."""
    single_file: bool = False
    """The user pointed at one file: only that file is judged, not the run's completeness."""
    extra_files: tuple[CheckpointFile, ...] = ()
    """Files outside every checkpoint that ``verify`` read whole (pickles, arrays, unknown content)."""
    weights_only: str | None = None
    """Why the run saves weights alone by design (HF ``save_only_model``, Lightning
    ``save_weights_only``): its checkpoints need no optimizer or scheduler state, and its
    framework resumes from them with a fresh optimizer. None for a run that saves it all."""
    resume_how: str = ""
    """How the run's framework resumes from ``resume``, in its own terms (``pass
    `.checkpoint(4)` to burn's `SupervisedTraining```); '' where there is nothing to add."""
    resume_path: str | None = None
    """The path to hand the framework's resume (``inspect --resume-path``); None where there is
    no resume point, or only one file was judged."""
    store: StoreLeftovers | None = None
    """What the store keeps under a run in a bucket besides its objects; None for a local run."""
    resumable: frozenset[int] | None = None
    """The indices the framework can resume from (``Layout.resumable``: torchtune 0.6.1 only the
    save its one recipe state was written with); None where any complete checkpoint will do."""
    interrupted: tuple[Interruption, ...] = ()
    """Its checkpoints whose save stopped part-way (``unfinished``), with what the world said of
    why (``pipelines/interrupted.py``): empty until that is asked."""

    @property
    def lone_file(self) -> str | None:
        """The path of the one file judged alone (``single_file``); None for a run."""
        if not self.single_file:
            return None
        return next((f.path for c in self.checkpoints for f in c.files), self.path)

    @property
    def resume(self) -> Checkpoint | None:
        """The newest complete checkpoint the framework can resume from; None for
        one file judged alone, whose run's other files were not looked at (a lone
        ``model.safetensors`` is no resume point)."""
        if self.single_file:
            return None
        for checkpoint in reversed(self.checkpoints):
            if checkpoint.status is Status.COMPLETE and (self.resumable is None or checkpoint.index in self.resumable):
                return checkpoint
        return None

    @property
    def resume_depends_on(self) -> tuple[Checkpoint, ...]:
        """The checkpoints newer than the resume point that this user cannot read (``UNREADABLE``):
        the framework may resume from one of them, so the resume point is known only to a user who
        can read them."""
        if self.single_file:
            return ()
        resume = self.resume
        after = self.after_resume if resume is not None else self.checkpoints
        return tuple(c for c in after if c.status is Status.UNREADABLE and (self.resumable is None or c.index in self.resumable))

    @property
    def after_resume(self) -> tuple[Checkpoint, ...]:
        """The checkpoints after the resume point in the run's order: higher indices, and a later
        save of its own index (Lightning's ``-v1``); none where there is no resume point."""
        resume = self.resume
        if resume is None:
            return ()
        return self.checkpoints[next(i for i, c in enumerate(self.checkpoints) if c is resume) + 1 :]

    @property
    def unfinished(self) -> tuple[Checkpoint, ...]:
        """The checkpoints whose save stopped part-way: partial or incomplete ones after the resume
        point (all of them where there is none), and older ones holding a file cut short or a
        save's leftover. A file missing alone from an older one is more likely a cleanup's doing."""
        if self.single_file:
            return ()
        after = {id(c) for c in self.after_resume} if self.resume is not None else {id(c) for c in self.checkpoints}
        return tuple(
            c
            for c in self.checkpoints
            if c.status in (Status.PARTIAL, Status.INCOMPLETE)
            and not (c.folder is not None and c.folder.link is not None and not c.files)  # a link not followed: not read, not cut
            and (id(c) in after or any(f.report.problems & CUT_SHORT or Role.TEMP in f.roles for f in c.files))
        )

    @property
    def bytes(self) -> int:
        entries = [f.entry for c in self.checkpoints for f in c.files]
        entries += [f.entry for f in self.loose_files]
        entries += [f.entry for f in self.extra_files]
        entries += [e for e in self.other_files if not e.is_dir]
        return _unique_bytes(entries)


class Action(str, enum.Enum):
    """What an acting command (``prune``, ``repair``) does with one checkpoint."""

    KEEP = "keep"
    DELETE = "delete"
    QUARANTINE = "quarantine"
    REPOINT = "repoint"
    RESTORE = "restore"
    """``repair --undo``: put a quarantined entry or an old pointer back."""


class PointerKind(str, enum.Enum):
    """How a pointer names its checkpoint."""

    TEXT = "text"
    """A small file whose content names it (DeepSpeed's ``latest``, Megatron's tracker)."""
    SYMLINK = "symlink"
    COPY = "copy"
    """A full copy of the checkpoint's file (Lightning's ``last.ckpt`` with ``save_last=True``)."""


class PointerWrite(NamedTuple):
    """What makes a framework's pointer name a checkpoint (``repair`` writes it)."""

    name: str
    """The pointer's file name in the run folder."""
    text: str
    """Its content; for a symlink where it points, for a copy the file copied (both relative to
    the pointer's folder)."""
    kind: PointerKind = PointerKind.TEXT


Seen = Mapping[str, Entry]
"""What a scan saw of a run, by path relative to the run's folder: the executor leaves what has
changed since (``actions.delete``, ``actions.quarantine``)."""
NOTHING_SEEN: Seen = MappingProxyType({})


class PlanItem(NamedTuple):
    """One checkpoint's fate in a plan, with every reason that decided it (a NamedTuple, like
    Entry: a plan holds one per checkpoint, and big runs have tens of thousands)."""

    number: int | None
    """The checkpoint's index (``index`` is taken by tuple); None for what belongs to none."""
    action: Action
    reasons: tuple[str, ...]
    entries: tuple[Entry, ...]
    """What the action touches: the checkpoint's folder, or its files (never what a symlink names)."""
    bytes: int
    write: PointerWrite | None = None
    """A repoint's new pointer."""

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(entry.path for entry in self.entries)


@dataclass(frozen=True)
class Plan:
    """What an acting command will do to one run, decided before anything is touched."""

    run: str
    root: str
    """The run folder as the OS opens it."""
    home: str
    """Where ckptdoctor keeps the run's lock, journals and quarantines."""
    items: tuple[PlanItem, ...]
    freed_bytes: int
    """Bytes the deletions free: files a kept checkpoint also holds (hard links) are not counted."""
    policy: str = ""
    """The policy in words, for the preview."""

    def acting(self, action: Action) -> tuple[PlanItem, ...]:
        return tuple(item for item in self.items if item.action is action)


@dataclass(frozen=True)
class Finding:
    """One thing wrong (or worth knowing) about a run, a checkpoint or a file."""

    code: str
    name: str
    severity: Severity
    run: str | None
    index: int | None
    path: str | None
    message: str
    fixes: tuple[str, ...] = ()
    part_of: tuple[str, int | None] | None = None
    """The code and index of the finding on the same run that this one is a part of (a missing
    file of a save cut short, under its CKD117): shown under it, counted with it; None for a
    finding of its own."""
    stands_for: tuple[str, ...] = ()
    """The codes of the findings that are its parts (``part_of`` names it): it is kept by a
    ``--select`` or a baseline that keeps any of them, and left out where all of them are."""

    @property
    def fingerprint(self) -> str:
        """Stable across runs of ckptdoctor and versions of its wording: the rule, the run, the
        checkpoint and the file, never the message (sizes and counts in it change). SARIF's
        ``partialFingerprints`` and baselines both key on it."""
        # only fingerprints need it, and --help loads the model
        import hashlib

        key = "\x1f".join((self.code, _normal(self.run), "" if self.index is None else str(self.index), _normal(self.path)))
        return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]


@dataclass(frozen=True)
class ScanError:
    """A path the user gave that could not be scanned at all (exit 2)."""

    path: str
    message: str


NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "cephfs",
        "glusterfs", "9p", "afs", "ocfs2", "gfs2", "panfs", "wekafs", "davfs", "fuse", "fuseblk",
    }
)  # fmt: skip
"""Filesystems whose writes can fail part-way for reasons local disks rarely have (CKD504);
every ``fuse.*`` type (s3fs, gcsfuse, sshfs, juicefs, …) too."""


@dataclass(frozen=True)
class Volume:
    """The filesystem that holds a path."""

    path: str
    """The folder asked about (or, when it does not exist yet, its nearest existing parent)."""
    mountpoint: str
    fstype: str
    total_bytes: int
    free_bytes: int
    """Free to an unprivileged user (what a training job can use)."""
    free_inodes: int | None
    """None where the filesystem has no inode limit (btrfs, many network filesystems)."""

    @property
    def network(self) -> bool:
        return self.fstype in NETWORK_FILESYSTEMS or self.fstype.startswith("fuse.")


@dataclass(frozen=True)
class Estimate:
    """The next save: its bytes and files, and where the figure comes from."""

    bytes: int
    files: int
    """Files (inodes) one save creates."""
    basis: str
    """In words: ``the largest of the last 3 complete epochs``, ``model 1.2 GiB + adam state``."""


@dataclass(frozen=True)
class Freeing:
    """What a prune of the run frees toward the next save, where it lacks space (``diskcheck``'s
    advice, so that the prune a fix prints frees enough)."""

    keep_last: int | None
    """The most complete checkpoints a prune can keep and still free ``shortfall_bytes``; None
    where none can (even keeping one)."""
    freed_bytes: int
    """What that prune frees (with None: what keeping one frees, the most any prune can)."""
    shortfall_bytes: int
    """What the next save lacks: its size with headroom, less the free space."""
    young: float = 0.0
    """Seconds of --min-age that would spare what it deletes (0: none): written so recently that
    the prune needs ``--min-age 0``."""


class Transfer(NamedTuple):
    """What reading a run in an object store cost: requests made and bytes received."""

    requests: int
    received: int


class Fanned(NamedTuple):
    """What fanning the deep check out over a cluster did (``verify --deep --ray``)."""

    kind: str
    """The cluster's kind: ``ray``."""
    tasks: int
    workers: int
    """Distinct worker processes that ran a task."""
    bytes_read: int
    """Bytes the tasks read and checked, in all."""
    seconds: float
    """From the first task submitted to the last result in."""


class Access(enum.Enum):
    """Whether the store let a probe do one thing a command needs."""

    GRANTED = "granted"
    DENIED = "denied"
    UNCHECKED = "not checked"
    """Not tried, or tried without a clear answer: never taken for granted."""


@dataclass(frozen=True)
class Permission:
    """One permission another command needs on a bucket, and what the probe of it showed."""

    action: str
    """What it lets ckptdoctor do: ``list``, ``read``, ``write``, ``delete``, ``list uploads``, ``abort uploads``."""
    name: str
    """The store's own name for it: ``s3:PutObject``, ``storage.objects.create``."""
    needed_by: tuple[str, ...]
    """The commands that need it."""
    access: Access
    detail: str = ""
    """What the store answered, or why it was not checked."""


@dataclass(frozen=True)
class LifecycleRule:
    """The part of one lifecycle rule of a bucket that ``diskcheck`` judges."""

    prefix: str
    """The keys it applies to (all of them: ``''``)."""
    enabled: bool
    abort_uploads_after_days: int | None
    """``AbortIncompleteMultipartUpload``'s ``DaysAfterInitiation``; None where it has none."""
    noncurrent_expiry_days: int | None
    """``NoncurrentVersionExpiration``'s ``NoncurrentDays``; None where it has none."""
    tagged: bool = False
    """It applies only to objects with given tags (never to uploads in progress)."""


@dataclass(frozen=True)
class BucketCheck:
    """What ``diskcheck`` of a run in a bucket found: there is no free space to read, so the
    probes of what the store lets this identity do, and the bucket's own settings."""

    store: str
    """``s3``, ``gs``, ``az``."""
    probe: str
    """The URL of the probe object (created, then deleted)."""
    permissions: tuple[Permission, ...]
    keys: str = ""
    """The run's key prefix, with its ``/`` (``''`` for a whole bucket): what a lifecycle rule must cover."""
    probe_left: bool = False
    """The probe object was created but could not be deleted: it is still there."""
    has_objects: bool = False
    """The run's prefix holds objects already."""
    quota_bytes: int | None = None
    """The store's quota on the bucket; None where none is known (S3 has none)."""
    quota: str = "no quota known"
    """The quota in words: ``no quota known`` (S3), ``not checked on this store``."""
    versioning: str | None = None
    """``Enabled``, ``Suspended``, ``never`` (a bucket never versioned); None: not checked."""
    lifecycle: tuple[LifecycleRule, ...] | None = None
    """The bucket's lifecycle rules; None: not checked."""
    not_checked: tuple[str, ...] = ()
    """What could not be checked on this bucket, each with why."""

    def access(self, action: str) -> Access:
        return next((p.access for p in self.permissions if p.action == action), Access.UNCHECKED)

    @property
    def versioned(self) -> bool:
        """Deletes keep older versions: versioning is on, or was (suspended)."""
        return self.versioning in ("Enabled", "Suspended")

    def _covered(self, wanted: str) -> bool | None:
        if self.lifecycle is None:
            return None
        return any(
            rule.enabled and not rule.tagged and self.keys.startswith(rule.prefix) and getattr(rule, wanted) is not None
            for rule in self.lifecycle
        )

    @property
    def aborts_uploads(self) -> bool | None:
        """An enabled rule over all of the run's keys aborts incomplete uploads; None: not checked."""
        return self._covered("abort_uploads_after_days")

    @property
    def expires_noncurrent(self) -> bool | None:
        """An enabled rule over all of the run's keys expires noncurrent versions; None: not checked."""
        return self._covered("noncurrent_expiry_days")


@dataclass(frozen=True)
class Growth:
    """How a run in a bucket grows: per save, per month, and where its retention holds it."""

    checkpoints: int
    stored_bytes: int
    """The run's checkpoints' bytes now."""
    bytes_per_save: int
    """The mean size of its checkpoints."""
    saves_per_month: float | None
    """From the checkpoints' last-modified times (the store's clock); None with fewer than two
    saves at different times."""
    bytes_per_month: int | None
    """What a month of saves adds when nothing is deleted."""
    keep_last: int | None
    steady_bytes: int | None
    """What the run holds for good at ``keep_last``; None: it grows without bound (no retention,
    or deletes on a versioned bucket that no rule expires)."""
    deletes_free_nothing: bool = False
    """A versioned bucket with no noncurrent-version expiry: a prune hides objects, frees nothing."""


@dataclass(frozen=True)
class DiskCheck:
    """What ``diskcheck`` found (the JSON report's ``disk`` block, and what the human view draws)."""

    path: str
    volume: Volume | None
    """None when nothing of the path can be reached (the finding says why)."""
    writable: bool
    why_not_writable: str
    estimate: Estimate | None
    """None for an empty run when no model size was given."""
    needed_bytes: int
    """The estimate plus headroom: what must be free for the next save."""
    keep_last: int | None
    saves_until_full: int | None
    """How many more saves fit; None when retention keeps the run within the free space for good
    (or nothing is known to estimate)."""
    sizes: tuple[tuple[int, int], ...] = ()
    """(index, bytes) of the run's checkpoints, oldest first."""
    exists: bool = True
    """False for a folder that does not exist yet (a run that has not saved)."""
    bucket: BucketCheck | None = None
    """A run in an object store: the probes and settings that stand in for a volume."""
    growth: Growth | None = None
    """A run in an object store: how it grows at its retention."""
    freeing: Freeing | None = None
    """Where the next save lacks space: what pruning the run frees toward it."""


@dataclass(frozen=True)
class Report:
    """The result of one command over all the paths the user gave."""

    command: str
    runs: tuple[Run, ...]
    findings: tuple[Finding, ...]
    errors: tuple[ScanError, ...] = ()
    unrecognised: tuple[str, ...] = ()
    """Checkpoint-like files (by suffix) in folders that no layout recognises: listed, not judged."""
    disk: DiskCheck | None = None
    """``diskcheck``: the volume, the next save and the runway."""
    transfer: Transfer | None = None
    """What the paths in object stores cost to read (None where every path was local)."""
    fanned: Fanned | None = None
    """What the cluster that read the deep check's ranges did (None where this process read them)."""

    def count(self, severity: Severity) -> int:
        """Findings of ``severity``, one per cause: the parts of a finding count with it."""
        return sum(1 for f in standing(self.findings) if f.severity is severity)

    @property
    def ok(self) -> bool:
        """No error-severity finding (for ``diskcheck``: the next save fits and can be written)."""
        return not any(f.severity is Severity.ERROR for f in self.findings)


def detached(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    """``findings`` with each part whose finding is not among them (a ``--select``, ``--ignore``
    or baseline left it out) standing on its own: it names none (``part_of``)."""
    present = {(f.run, f.code, f.index) for f in findings if f.stands_for}
    return tuple(f if f.part_of is None or (f.run, *f.part_of) in present else dataclasses.replace(f, part_of=None) for f in findings)


def standing(findings: Sequence[Finding]) -> list[Finding]:
    """The findings that stand on their own: all but the parts of a finding among them (a part
    whose finding a ``--select``, ``--ignore`` or baseline left out stands on its own again)."""
    present = {(f.run, f.code, f.index) for f in findings}
    return [f for f in findings if f.part_of is None or (f.run, *f.part_of) not in present]


CUT_SHORT = frozenset({Problem.EMPTY, Problem.TRUNCATED})
"""What a reader finds of a file whose writing stopped part-way."""


def _normal(path: str | None) -> str:
    """``runs/a``, ``./runs/a`` and ``$PWD/runs/a`` alike: relative to the working directory (a
    store's URL as it is)."""
    if path and "://" in path:
        return path
    return os.path.relpath(os.path.abspath(path)) if path else ""


def _unique_bytes(entries: Sequence[Entry]) -> int:
    """Sum sizes, counting each inode once (hard links, symlinked copies)."""
    total = 0
    for entry in entries:
        if entry.links != 1 or entry.is_symlink:
            break
        total += entry.size
    else:
        return total  # no file can be another's second name (nearly every run)
    seen: set[tuple[int, int]] = set()
    total = 0
    for entry in entries:
        if entry.inode is not None:
            if entry.inode in seen:
                continue
            seen.add(entry.inode)
        total += entry.size
    return total
