"""The records ckptdoctor keeps in a run's own folder, and the plain data acting on a run reports.

Two records are written to disk, and encoded and decoded here only:

- ``Journal``: ``trash/<id>/journal.json``, the entries a ``prune`` deletes;
- ``Manifest``: ``quarantine/<id>/manifest.json``, what a ``repair`` moved aside and re-pointed,
  which ``--undo`` puts back.

Both are files anyone can edit, and what they name is moved or deleted: ``decode`` takes exactly
what ckptdoctor writes (or wrote in earlier versions) and refuses anything else with a
``BadRecord`` (a ``ValueError``) saying what is wrong. What is refused is left as it is.

The rest (``Quarantine``, ``Stored``, ``Pending``, ``Done``, ``Moved``, ``Finished``) is what the
executor (``actions``) returns and the planners and renderers read: here, so that they need not
import the executor.
"""

from __future__ import annotations

import enum
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeGuard, TypeVar

from ckptdoctor.model import PointerKind, PointerWrite
from ckptdoctor.places import OWN_FOLDER

Identity = tuple[int, int, int, int, int]
"""What makes an entry the one a plan saw: device, inode, size, mtime and ctime in ns. A file
restored from a backup keeps its mtime, never its inode or ctime."""


def plain(relative: str) -> bool:
    """Whether ``relative`` can name an entry below a folder: not absolute, no ``..``, not empty."""
    parts = relative.split(os.sep)
    return bool(relative) and not os.path.isabs(relative) and os.pardir not in parts and "" not in parts and os.curdir not in parts


def ours(relative: str) -> bool:
    """Whether ``relative`` lies in ckptdoctor's own folder: no journal or manifest acts on it."""
    return relative.split(os.sep)[0] == OWN_FOLDER


# --- what acting reports ---------------------------------------------------------------------------


class StoredState(str, enum.Enum):
    """Where one quarantined entry (or re-pointed pointer) stands now."""

    QUARANTINED = "quarantined"
    """In the quarantine, its place in the run free: ``--undo`` can put it back."""
    BACK = "back"
    """In the run already (restored, or never moved by a repair that was killed)."""
    CONFLICT = "conflict"
    """In the quarantine, and something else is at its place in the run."""
    REPLACED = "replaced"
    """In the quarantine, but not what the repair moved there (another inode, size or time):
    never put back into the run."""
    LOST = "lost"
    """Neither in the quarantine nor in the run: someone removed it."""


class Stored(NamedTuple):
    """One line of a quarantine's manifest, with where it stands now."""

    path: str
    """Relative to the run."""
    number: int | None
    """The checkpoint index (``index`` is taken by tuple)."""
    reasons: tuple[str, ...]
    write: PointerWrite | None
    """For a pointer: what the repair wrote there."""
    existed: bool
    """For a pointer: whether there was one before (its old version is in the quarantine)."""
    state: StoredState
    bytes: int


@dataclass(frozen=True)
class Quarantine:
    """What one ``repair`` moved aside, read back from its manifest."""

    ident: str
    folder: str
    run: str
    created: float
    state: str
    """``repairing`` (killed part-way), ``done``, or ``undoing`` (an undo was killed part-way)."""
    items: tuple[Stored, ...]
    home: str
    """ckptdoctor's own folder for the run, where this quarantine lies."""


@dataclass(frozen=True)
class Moved:
    ident: str
    folder: str
    entries: int
    bytes: int
    repointed: int
    left: int = 0
    """Entries left because they (or their checkpoint) were written, opened or replaced after the plan."""
    problems: tuple[str, ...] = ()
    """Entries that could not be moved (each ``path: why``); the rest of the plan went on."""


@dataclass(frozen=True)
class Done:
    deleted: int
    """Checkpoints removed."""
    files: int
    freed_bytes: int
    left: int = 0
    """Entries left because they were written, opened or replaced after the plan was made."""
    problems: tuple[str, ...] = ()
    """Entries that could not be deleted (each ``path: why``); the rest of the plan went on."""
    journal_free: bool = False
    """The disk was too full for a journal: entries were deleted in place (see ``actions._trash``)."""


@dataclass(frozen=True)
class Pending:
    """What a killed prune's journal would still do."""

    journal: str
    in_trash: int
    """Entries it had moved into its trash already."""
    in_run: tuple[str, ...]
    """Entries still in the run, the same and unchanged, that finishing it deletes."""
    spared: tuple[str, ...]
    """Entries it listed that are changed, restored, open or kept by this prune's policy: left."""


@dataclass(frozen=True)
class Finished:
    paths: tuple[str, ...]
    """The entries finishing deleted (those the killed prune had moved into its trash too), by
    their paths in the run."""
    problems: tuple[str, ...] = ()


# --- the records on disk ---------------------------------------------------------------------------


class BadRecord(ValueError):
    """A journal or manifest that is not one ckptdoctor wrote; the message says what is wrong."""


class Phase(str, enum.Enum):
    """Where the repair (or undo) a manifest records stands."""

    REPAIRING = "repairing"
    """Written before anything moved: a repair killed now is finished by the next."""
    DONE = "done"
    UNDOING = "undoing"
    """An undo started: one killed now is finished by the next ``--undo``."""


@dataclass(frozen=True)
class EntryLine:
    """An entry a repair moves into its quarantine."""

    path: str
    """Relative to the run; kept under the same path in the quarantine's ``files``."""
    index: int | None
    reasons: tuple[str, ...]
    bytes: int
    identity: Identity | None
    """As the repair found it; a killed repair is finished only for entries still that inode,
    unchanged. None in version 1 manifests, which are finished only for what had moved."""
    content: str | None = None
    """Its content's fingerprint as it moved (``actions._content``): an undo on a copy of the run,
    where every inode is another, puts back what still matches it. None in manifests before
    version 3, and where the entry could not be read (then only its inode proves it)."""


@dataclass(frozen=True)
class PointerLine:
    """A pointer a repair re-points; its old version (if ``existed``) is kept in the quarantine."""

    path: str
    index: int | None
    reasons: tuple[str, ...]
    text: str
    kind: PointerKind
    existed: bool

    @property
    def write(self) -> PointerWrite:
        return PointerWrite(os.path.basename(self.path), self.text, self.kind)


@dataclass(frozen=True)
class Manifest:
    """``quarantine/<id>/manifest.json``. Version 3 records each entry's identity and content
    fingerprint; version 2 its identity only, version 1 (the first ``repair``) neither. Each is
    still read, and rewritten as the version it is."""

    version: int
    run: str
    created: float
    state: Phase
    entries: tuple[EntryLine, ...]
    pointers: tuple[PointerLine, ...]

    @property
    def lines(self) -> tuple[EntryLine | PointerLine, ...]:
        """Every line, the entries first."""
        return (*self.entries, *self.pointers)

    def encode(self) -> bytes:
        return _readable(self, Manifest.decode)

    @classmethod
    def decode(cls, data: bytes) -> Manifest:
        return cls.from_json(_parse(data))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "run": self.run,
            "created": self.created,
            "state": self.state.value,
            "entries": [
                {"path": line.path, "index": line.index, "reasons": list(line.reasons), "bytes": line.bytes}
                | ({} if line.identity is None else {"identity": list(line.identity)})
                | ({"content": line.content} if self.version >= 3 else {})
                for line in self.entries
            ],
            "pointers": [
                {
                    "path": line.path,
                    "index": line.index,
                    "reasons": list(line.reasons),
                    "text": line.text,
                    "kind": line.kind.value,
                    "existed": line.existed,
                }
                for line in self.pointers
            ],
        }

    @classmethod
    def from_json(cls, document: object) -> Manifest:
        if (
            not isinstance(document, dict)
            or not isinstance(document.get("entries"), list)
            or not isinstance(document.get("pointers"), list)
        ):
            raise BadRecord("not a ckptdoctor quarantine manifest")
        version = document.get("version")
        if not _is_int(version) or version not in MANIFEST_VERSIONS:
            raise BadRecord(
                f"its version {version!r} is not one this ckptdoctor reads ({', '.join(map(str, MANIFEST_VERSIONS))}): was it written by a newer ckptdoctor?"
            )
        run, created, state = document.get("run"), document.get("created"), document.get("state")
        if not isinstance(run, str) or not _is_time(created) or state not in _PHASES:
            raise BadRecord("its run, created or state field is missing or wrong")
        _only(document, _MANIFEST_KEYS, "it")
        lines = document["entries"] + document["pointers"]
        for line in lines:
            named = line.get("path") if isinstance(line, dict) else None
            if not _is_path(named) or not plain(named) or ours(named):
                raise BadRecord(f"an entry names {named!r}, which is not a path inside the run")
        entry_fields = _ENTRY_FIELDS[version]
        entries = tuple(_entry_line(_fields(line, entry_fields, "entry")) for line in document["entries"])
        pointers = tuple(_pointer_line(_fields(line, _POINTER, "pointer")) for line in document["pointers"])
        return cls(version, run, created, Phase(state), entries, pointers)


MANIFEST_VERSION = 3
"""The version ``repair`` writes."""
MANIFEST_VERSIONS = (1, 2, MANIFEST_VERSION)
"""The versions ``--undo`` and a finishing ``repair`` read."""


@dataclass(frozen=True)
class Journal:
    """``trash/<id>/journal.json``: the entries (relative to the run) a prune deletes, in order.

    The format has no version field: the one ckptdoctor writes is the only one, and a journal with
    any ``version`` is refused. Journals of earlier versions have no ``identities``, and finish
    only what they had moved."""

    run: str
    entries: tuple[str, ...]
    identities: Mapping[str, Identity] | None
    """Each entry's identity when the plan was made: a journal is finished only for entries still
    that inode, unchanged."""

    def identity(self, path: str) -> Identity | None:
        return None if self.identities is None else self.identities.get(path)

    def encode(self) -> bytes:
        return _readable(self, Journal.decode)

    @classmethod
    def decode(cls, data: bytes) -> Journal:
        return cls.from_json(_parse(data))

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"run": self.run, "entries": list(self.entries)}
        if self.identities is not None:
            document["identities"] = {path: list(found) for path, found in self.identities.items()}
        return document

    @classmethod
    def from_json(cls, document: object) -> Journal:
        if not isinstance(document, dict):
            raise BadRecord("not a ckptdoctor journal")
        if "version" in document:
            raise BadRecord(f"its version {document['version']!r} is not one this ckptdoctor reads: was it written by a newer ckptdoctor?")
        entries, identities = document.get("entries"), document.get("identities", {})
        if (
            not isinstance(document.get("run"), str)
            or not isinstance(entries, list)
            or not all(_is_path(path) for path in entries)
            or not isinstance(identities, dict)
        ):
            raise BadRecord("not a ckptdoctor journal")
        _only(document, _JOURNAL_KEYS, "it")
        # Paths are only checked to be names: a listed entry outside the run is skipped where it is
        # acted on (``_confine.Folder.reach``), and the rest of the journal is finished.
        listed = set(entries)
        for path, found in identities.items():
            if path not in listed or not _is_identity(found):
                raise BadRecord(f"its identity of {path!r} is not one ckptdoctor recorded")
        kept = {path: _as_identity(found) for path, found in identities.items()} if "identities" in document else None
        return cls(document["run"], tuple(entries), kept)


@dataclass(frozen=True)
class ObjectJournal:
    """``<run>/.ckptdoctor/prune-<id>.json`` in a bucket: the objects a prune deletes (keys
    relative to the run's prefix), each with the ETag the plan saw. Written before the first
    delete and removed after the last: one left behind means a prune was killed, and the next one
    deletes what it still names, but only objects whose ETag is still the one recorded."""

    run: str
    """The run's URL."""
    objects: tuple[tuple[str, str], ...]

    def encode(self) -> bytes:
        return _readable(self, ObjectJournal.decode)

    @classmethod
    def decode(cls, data: bytes) -> ObjectJournal:
        return cls.from_json(_parse(data))

    def to_json(self) -> dict[str, Any]:
        return {"kind": OBJECT_JOURNAL, "run": self.run, "objects": [list(item) for item in self.objects]}

    @classmethod
    def from_json(cls, document: object) -> ObjectJournal:
        if not isinstance(document, dict) or document.get("kind") != OBJECT_JOURNAL:
            raise BadRecord("not a ckptdoctor journal of a bucket")
        _only(document, _OBJECT_JOURNAL_KEYS, "it")
        objects = document.get("objects")
        if not isinstance(document.get("run"), str) or not isinstance(objects, list):
            raise BadRecord("not a ckptdoctor journal of a bucket")
        for item in objects:
            if not (isinstance(item, list) and len(item) == 2 and all(isinstance(part, str) and part for part in item)):
                raise BadRecord("one of its objects is not a key and an ETag")
            if not plain_key(item[0]) or item[0].split("/")[0] == OWN_FOLDER:
                raise BadRecord(f"it names {item[0]!r}, which is no object of the run ckptdoctor would delete")
        return cls(document["run"], tuple((key, etag) for key, etag in objects))


OBJECT_JOURNAL = "ckptdoctor.bucket-prune.v1"
OBJECT_MANIFEST = "ckptdoctor.bucket-quarantine.v1"


class ObjectLine(NamedTuple):
    """One object a repair moved into a bucket's quarantine."""

    key: str
    """Relative to the run's prefix; its copy is at the same key below the quarantine."""
    etag: str
    """The object's ETag when the plan was made."""
    copied: str | None
    """Its copy's ETag in the quarantine (None until the copy is made: then ``etag``, a copy in
    one piece keeping it)."""
    number: int | None
    reasons: tuple[str, ...]
    bytes: int


class ObjectPointer(NamedTuple):
    """A pointer object a repair rewrote: its old version is copied into the quarantine first."""

    key: str
    old: str | None
    """The ETag it had (None: the repair created it)."""
    write: PointerWrite
    written: str | None
    """The ETag of what the repair wrote (None until written)."""


@dataclass(frozen=True)
class ObjectManifest:
    """``<run>/.ckptdoctor/quarantine/<id>/manifest.json`` in a bucket: what a repair moved there
    and re-pointed, for ``--undo``. Written (create-only) before the first move, and again with
    ``If-Match`` as each step is done."""

    run: str
    created: float
    state: str
    """``repairing`` (killed part-way) or ``done``."""
    objects: tuple[ObjectLine, ...]
    pointers: tuple[ObjectPointer, ...]

    def encode(self) -> bytes:
        return _readable(self, ObjectManifest.decode)

    @classmethod
    def decode(cls, data: bytes) -> ObjectManifest:
        return cls.from_json(_parse(data))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": OBJECT_MANIFEST,
            "run": self.run,
            "created": self.created,
            "state": self.state,
            "objects": [
                {"key": o.key, "etag": o.etag, "copied": o.copied, "number": o.number, "reasons": list(o.reasons), "bytes": o.bytes}
                for o in self.objects
            ],
            "pointers": [
                {"key": p.key, "old": p.old, "name": p.write.name, "text": p.write.text, "kind": p.write.kind.value, "written": p.written}
                for p in self.pointers
            ],
        }

    @classmethod
    def from_json(cls, document: object) -> ObjectManifest:
        if not isinstance(document, dict) or document.get("kind") != OBJECT_MANIFEST:
            raise BadRecord("not a ckptdoctor quarantine manifest of a bucket")
        _only(document, _OBJECT_MANIFEST_KEYS, "it")
        objects, pointers = document.get("objects"), document.get("pointers")
        if not (
            isinstance(document.get("run"), str)
            and _is_time(document.get("created"))
            and document.get("state") in ("repairing", "done")
            and isinstance(objects, list)
            and isinstance(pointers, list)
        ):
            raise BadRecord("not a ckptdoctor quarantine manifest of a bucket")
        return cls(
            document["run"], float(document["created"]), document["state"],
            tuple(_object_line(item) for item in objects), tuple(_object_pointer(item) for item in pointers),
        )  # fmt: skip


def _key_of_run(value: object) -> str:
    if not isinstance(value, str) or not plain_key(value) or value.split("/")[0] == OWN_FOLDER:
        raise BadRecord(f"it names {value!r}, which is no object of the run ckptdoctor would move")
    return value


def _etag(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise BadRecord(f"{value!r} is not an ETag")
    return value


def _maybe_etag(value: object) -> str | None:
    return None if value is None else _etag(value)


def _object_line(item: object) -> ObjectLine:
    if not isinstance(item, dict) or item.keys() != {"key", "etag", "copied", "number", "reasons", "bytes"}:
        raise BadRecord("one of its objects is not one ckptdoctor recorded")
    number = item["number"]
    if not (number is None or _is_int(number)) or not _is_reasons(item["reasons"]) or not _is_size(item["bytes"]):
        raise BadRecord("one of its objects is not one ckptdoctor recorded")
    return ObjectLine(
        _key_of_run(item["key"]), _etag(item["etag"]), _maybe_etag(item["copied"]), number, tuple(item["reasons"]), item["bytes"]
    )


def _object_pointer(item: object) -> ObjectPointer:
    if not isinstance(item, dict) or item.keys() != {"key", "old", "name", "text", "kind", "written"}:
        raise BadRecord("one of its pointers is not one ckptdoctor recorded")
    if not isinstance(item["name"], str) or not isinstance(item["text"], str) or item["kind"] not in _KINDS:
        raise BadRecord("one of its pointers is not one ckptdoctor recorded")
    write = PointerWrite(item["name"], item["text"], PointerKind(item["kind"]))
    return ObjectPointer(_key_of_run(item["key"]), _maybe_etag(item["old"]), write, _maybe_etag(item["written"]))


def plain_key(relative: str) -> bool:
    """Whether ``relative`` names an object below a prefix: no empty, ``.`` or ``..`` part."""
    return bool(relative) and not any(part in ("", ".", "..") for part in relative.split("/"))


# --- checks ----------------------------------------------------------------------------------------

_MANIFEST_KEYS = frozenset({"version", "run", "created", "state", "entries", "pointers"})
_JOURNAL_KEYS = frozenset({"run", "entries", "identities"})
_OBJECT_JOURNAL_KEYS = frozenset({"kind", "run", "objects"})
_OBJECT_MANIFEST_KEYS = frozenset({"kind", "run", "created", "state", "objects", "pointers"})
_PHASES = frozenset(phase.value for phase in Phase)
_KINDS = frozenset(kind.value for kind in PointerKind)
_INT64 = 1 << 63
_UINT64 = 1 << 64


_Record = TypeVar("_Record", "Manifest", "Journal", "ObjectJournal", "ObjectManifest")


def _readable(record: _Record, decode: Callable[[bytes], _Record]) -> bytes:
    """``record``'s bytes, checked to decode as this very record: what the next ckptdoctor could
    not read back (and so neither finish nor undo) is never written, and nothing moves."""
    data = json.dumps(record.to_json()).encode()
    if decode(data) != record:
        raise BadRecord(f"a {type(record).__name__.lower()} that would not read back as written (a bug in ckptdoctor)")
    return data


def _parse(data: bytes) -> object:
    """JSON as ckptdoctor writes it: no NaN or Infinity, no key named twice."""
    try:
        return json.loads(data, parse_constant=_no_constant, object_pairs_hook=_unique)
    except RecursionError:
        raise BadRecord("it is nested far deeper than anything ckptdoctor writes") from None


def _no_constant(name: str) -> object:
    raise BadRecord(f"it holds {name}, which ckptdoctor never writes")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        raise BadRecord("it names a field twice")
    return document


def _only(document: dict[str, Any], keys: frozenset[str], what: str) -> None:
    extra = document.keys() - keys
    if extra:
        raise BadRecord(f"{what} holds {', '.join(map(repr, sorted(extra)))}, which ckptdoctor never writes")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON's true is no number


def _is_time(value: object) -> TypeGuard[float]:
    """Seconds since the epoch, as ``time.time()`` gives them (1e999 reads as inf)."""
    if _is_int(value):
        return -_INT64 < value < _INT64
    return isinstance(value, float) and math.isfinite(value)


def _is_size(value: object) -> bool:
    return _is_int(value) and 0 <= value < _INT64


def _is_index(value: object) -> bool:
    return value is None or _is_int(value)  # as long as the name it was read from: never capped


def _is_name(value: object) -> TypeGuard[str]:
    """A string the OS takes as a path (no NUL, encodable)."""
    if not isinstance(value, str) or "\0" in value:
        return False
    try:
        os.fsencode(value)
    except UnicodeError:
        return False
    return True


def _is_path(value: object) -> TypeGuard[str]:
    return _is_name(value) and bool(value)


def _is_reasons(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(reason, str) for reason in value)


def _is_identity(value: object) -> bool:
    """Device, inode (unsigned), size, mtime and ctime in ns (signed: a time before 1970 is negative)."""
    if not isinstance(value, list) or len(value) != 5 or not all(_is_int(part) for part in value):
        return False
    device, inode, size, mtime, ctime = value
    return (
        0 <= device < _UINT64 and 0 <= inode < _UINT64 and 0 <= size < _INT64 and all(-_INT64 <= time < _INT64 for time in (mtime, ctime))
    )


def _as_identity(value: list[int]) -> Identity:
    device, inode, size, mtime, ctime = value
    return (device, inode, size, mtime, ctime)


def _optional(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: value is _ABSENT or check(value)


def _is_content(value: object) -> bool:
    """A fingerprint as ``actions._content`` writes it (a SHA-256 in lowercase hex), or null."""
    return value is None or (isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value))


_ABSENT = object()
"""A field a line leaves out (only ``identity`` may, in a version 1 manifest)."""
_LINE: dict[str, Callable[[object], bool]] = {"path": _is_path, "index": _is_index, "reasons": _is_reasons}
_ENTRY = {**_LINE, "bytes": _is_size, "identity": _is_identity}
_ENTRY_FIELDS: dict[int, dict[str, Callable[[object], bool]]] = {
    1: {**_ENTRY, "identity": _optional(_is_identity)},
    2: _ENTRY,
    3: {**_ENTRY, "content": _is_content},
}
"""An entry line's fields by manifest version: each version added one."""
_POINTER = {**_LINE, "text": _is_name, "kind": lambda value: value in _KINDS, "existed": lambda value: isinstance(value, bool)}


def _fields(line: dict[str, Any], fields: Mapping[str, Callable[[object], bool]], kind: str) -> dict[str, Any]:
    """``line``'s ``fields``, each checked (a missing one is ``_ABSENT``); BadRecord names what is wrong."""
    found = {key: line.get(key, _ABSENT) for key in fields}
    wrong = [key for key, check in fields.items() if not check(found[key])]
    if wrong:
        raise BadRecord(f"the {kind} line for {line['path']!r} is incomplete: its {', '.join(wrong)} is missing or wrong")
    _only(line, frozenset(fields), f"the {kind} line for {line['path']!r}")
    return found


def _entry_line(found: dict[str, Any]) -> EntryLine:
    identity = None if found["identity"] is _ABSENT else _as_identity(found["identity"])
    return EntryLine(found["path"], found["index"], tuple(found["reasons"]), found["bytes"], identity, found.get("content"))


def _pointer_line(found: dict[str, Any]) -> PointerLine:
    return PointerLine(found["path"], found["index"], tuple(found["reasons"]), found["text"], PointerKind(found["kind"]), found["existed"])
