"""A repair in a bucket, and its undo, by the store's own means: what ``_quarantine`` does on disk.

A bucket has no rename: an object is moved into ``<home>/quarantine/<id>/`` by a server-side copy
made only while the source is the object planned (``CopySourceIfMatch``) and only where nothing is
at the target (``If-None-Match``), then a delete made only while the source is still that object
(``If-Match``). A pointer object is copied into the quarantine the same way before it is
rewritten, and rewritten only while it is the one the plan saw. The manifest, written before the
first move and again as the work ends, says what ``--undo`` may put back: an object in the
quarantine that is not the copy the repair made (another ETag) is never put back, and nothing is
put back over an object that exists again.
"""

from __future__ import annotations

import contextlib
import posixpath
import secrets
import time
from dataclasses import dataclass

from ckptdoctor.actions._objects import Lease, Place, folder_unchanged
from ckptdoctor.model import Action, Plan, PointerKind
from ckptdoctor.records import BadRecord, Moved, ObjectLine, ObjectManifest, ObjectPointer, Quarantine, Stored, StoredState
from ckptdoctor.stores import session
from ckptdoctor.stores.session import StoreError

QUARANTINE = "quarantine"
MANIFEST = "manifest.json"
MAX_MANIFEST = 64 * 1024 * 1024


def _relative(place: Place, url: str) -> str:
    return url[len(place.run.url) + 1 :]


def quarantine(place: Place, plan: Plan, now: float, lease: Lease | None) -> Moved:
    """Move what ``plan`` quarantines and re-point what it re-points; what changed since the plan
    is left (``Moved.left``)."""
    bucket, control = place.bucket, place.control
    folder = f"{place.home}/{QUARANTINE}/{_new_ident(place, now)}"
    ident = folder.rsplit("/", 1)[1]
    lines: list[ObjectLine] = []
    left = 0
    for item in plan.acting(Action.QUARANTINE):
        if not all(folder_unchanged(entry.os_path) for entry in item.entries if entry.is_dir):
            left += 1  # a folder written to since the plan: left whole, as on disk
            continue
        for entry in item.entries:
            for url in session.listed_under(entry.os_path) if entry.is_dir else [entry.os_path]:
                info = session.listed(url)
                if info is not None and info.etag:
                    lines.append(ObjectLine(_relative(place, url), info.etag, None, item.number, item.reasons, info.size))
    pointers: list[ObjectPointer] = []
    for item in plan.acting(Action.REPOINT):
        if item.write is None:
            continue
        key = item.write.name
        info = session.listed(f"{place.run.url}/{key}")
        pointers.append(ObjectPointer(key, info.etag if info is not None else None, item.write, None))
    manifest = ObjectManifest(plan.run, now, "repairing", tuple(lines), tuple(pointers))
    manifest_key = f"{folder}/{MANIFEST}"
    manifest_etag = bucket.create(manifest_key, manifest.encode())
    if manifest_etag is None:
        raise StoreError(f"{place.run.url_of(manifest_key)} exists already: another repair is at work")
    moved: list[ObjectLine] = []
    problems: list[str] = []
    for line in lines:
        if lease is not None:
            lease.check()  # before each move: a holder that lost its lock acts no more
        source = _in_run(place, line.key)
        copied = control.copy_if_match(source, f"{folder}/{line.key}", line.etag)
        if copied is None:
            left += 1
            continue
        outcome = control.delete_if_match(source, line.etag)
        if outcome.value == "changed":
            problems.append(
                f"{place.run.url_of(source)}: rewritten while it was moved: the new object stays, its old one is in the quarantine"
            )
        moved.append(line._replace(copied=copied))
    written: list[ObjectPointer] = []
    for pointer in pointers:
        if lease is not None:
            lease.check()
        done = _repoint(place, folder, pointer, problems)
        if done is None:
            left += 1
        else:
            written.append(done)
    final = ObjectManifest(plan.run, now, "done", tuple(moved), tuple(written))
    if bucket.replace(manifest_key, final.encode(), manifest_etag) is None:
        problems.append(
            f"{place.run.url_of(manifest_key)}: changed by someone else while the repair worked: --undo reads it as they left it"
        )
    return Moved(ident, place.run.url_of(folder), len(moved), sum(line.bytes for line in moved), len(written), left, tuple(problems))


def _new_ident(place: Place, now: float) -> str:
    """A quarantine's name: the store's time, then how many quarantines that second has already
    (two repairs within one second of the store's clock, such as a killed one and the one that
    closed it, keep their order: ``quarantines`` lists by name), then a random part."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    taken = [name for name in place.bucket.folders(f"{place.home}/{QUARANTINE}") if name.startswith(stamp)]
    return f"{stamp}-{len(taken):02d}{secrets.token_hex(3)}"


def _in_run(place: Place, relative: str) -> str:
    return f"{place.run.prefix}/{relative}" if place.run.prefix else relative


def _repoint(place: Place, folder: str, pointer: ObjectPointer, problems: list[str]) -> ObjectPointer | None:
    """Save the pointer's old version into the quarantine, then write the new one, each only while
    the pointer is the one the plan saw; what it wrote (None: left as it was)."""
    bucket, control = place.bucket, place.control
    key = _in_run(place, pointer.key)
    if pointer.old is not None and control.copy_if_match(key, f"{folder}/{pointer.key}", pointer.old) is None:
        return None
    write = pointer.write
    if write.kind is PointerKind.TEXT:
        data = write.text.encode()
        etag = bucket.create(key, data) if pointer.old is None else bucket.replace(key, data, pointer.old)
    elif write.kind is PointerKind.COPY:
        target = posixpath.normpath(posixpath.join(posixpath.dirname(pointer.key), write.text))
        info = session.listed(f"{place.run.url}/{target}")
        if info is None or info.etag is None or target.startswith(".."):
            problems.append(
                f"{place.run.url_of(key)}: what it should be a copy of ({write.text}) is not in the run's listing: left as it was"
            )
            return None
        etag = control.copy_if_match(_in_run(place, target), key, info.etag, over=pointer.old)
    else:
        problems.append(f"{place.run.url_of(key)}: a bucket holds no symlinks: re-point it by hand to {write.text}")
        return None
    return pointer._replace(written=etag) if etag is not None else None


# --- undo --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """A quarantine in a bucket: its id, its manifest's key and ETag, and what it says."""

    ident: str
    key: str
    etag: str | None
    manifest: ObjectManifest | None
    why: str = ""


def quarantines(place: Place) -> list[Found]:
    """Every quarantine under ``place``'s home, oldest first."""
    below = f"{place.home}/{QUARANTINE}/"
    found: list[Found] = []
    for info in sorted(place.bucket.objects(below), key=lambda info: info.key):
        ident, _, name = info.key[len(below) :].partition("/")
        if name != MANIFEST:
            continue
        if info.size > MAX_MANIFEST:
            found.append(Found(ident, info.key, info.etag, None, "longer than any manifest ckptdoctor writes"))
            continue
        try:
            manifest = ObjectManifest.decode(place.bucket.read(info.key, 0, info.size))
        except (BadRecord, OSError, UnicodeDecodeError) as error:
            found.append(Found(ident, info.key, info.etag, None, str(error)))
            continue
        found.append(Found(ident, info.key, info.etag, manifest))
    return found


def standing(place: Place, found: Found) -> Quarantine:
    """``found`` as ``--undo`` plans from it: where each object and pointer stands now."""
    assert found.manifest is not None
    folder = found.key.rsplit("/", 1)[0]
    items: list[Stored] = []
    for line in found.manifest.objects:
        state = _state(place, f"{folder}/{line.key}", line.copied or line.etag, _in_run(place, line.key), None)
        items.append(Stored(line.key, line.number, line.reasons, None, True, state, line.bytes))
    for pointer in found.manifest.pointers:
        if pointer.written is None:
            continue
        copy = f"{folder}/{pointer.key}" if pointer.old is not None else None
        state = _state(place, copy, pointer.old, _in_run(place, pointer.key), pointer.written)
        items.append(Stored(pointer.key, None, (f"re-pointed to {pointer.write.text}",), pointer.write, pointer.old is not None, state, 0))
    return Quarantine(
        found.ident,
        place.run.url_of(folder),
        found.manifest.run,
        found.manifest.created,
        found.manifest.state,
        tuple(items),
        place.run.url_of(place.home),
    )


def _state(place: Place, copy: str | None, expected: str | None, original: str, written: str | None) -> StoredState:
    """Where one item stands: its copy in the quarantine (None: a pointer the repair created) and
    its place in the run (``written``: for a pointer, what the repair wrote there)."""
    here = _etag_of(place, original)
    kept = _etag_of(place, copy) if copy is not None else None
    if written is not None:
        if here != written:
            return StoredState.CONFLICT  # changed since the repair wrote it
        if copy is not None and kept != expected:
            return StoredState.REPLACED if kept is not None else StoredState.LOST
        return StoredState.QUARANTINED
    if here is not None and here == expected:
        return StoredState.BACK  # never moved (a repair killed between its copy and its delete): still in place
    if kept is None:
        return StoredState.BACK if here is not None else StoredState.LOST
    if kept != expected:
        return StoredState.REPLACED
    return StoredState.CONFLICT if here is not None else StoredState.QUARANTINED


def _etag_of(place: Place, key: str) -> str | None:
    try:
        return place.bucket.head(key).etag
    except FileNotFoundError:
        return None


def restore(place: Place, found: Found, lease: Lease | None = None) -> tuple[int, tuple[str, ...]]:
    """Put back everything of ``found`` whose place is free, each only while its copy is the one
    the repair made; then remove the quarantine where it is empty. (Count, problems.)"""
    assert found.manifest is not None
    control = place.control
    folder = found.key.rsplit("/", 1)[0]
    restored = 0
    problems: list[str] = []
    for line in found.manifest.objects:
        if lease is not None:
            lease.check()  # before each put-back: a holder that lost its lock acts no more
        copy, expected = f"{folder}/{line.key}", line.copied or line.etag
        if _etag_of(place, _in_run(place, line.key)) == line.etag:  # still in place: its copy is a leftover
            control.delete_if_match(copy, expected)
            continue
        if control.copy_if_match(copy, _in_run(place, line.key), expected) is None:
            problems.append(f"{place.run.url_of(_in_run(place, line.key))}: not put back (in the run again, or its copy changed)")
            continue
        control.delete_if_match(copy, expected)
        restored += 1
    for pointer in reversed(found.manifest.pointers):
        if lease is not None:
            lease.check()
        if pointer.written is None:
            continue
        key = _in_run(place, pointer.key)
        if pointer.old is None:
            gone = control.delete_if_match(key, pointer.written).value != "changed"
        else:
            gone = control.copy_if_match(f"{folder}/{pointer.key}", key, pointer.old, over=pointer.written) is not None
            if gone:
                control.delete_if_match(f"{folder}/{pointer.key}", pointer.old)
        if gone:
            restored += 1
        else:
            problems.append(f"{place.run.url_of(key)}: changed since the repair: not put back")
    if not problems and found.etag is not None:
        with contextlib.suppress(StoreError):
            control.delete_if_match(found.key, found.etag)
    return restored, tuple(problems)


def close(place: Place, found: Found) -> tuple[bool, list[str]]:
    """Close the quarantine of a repair killed part-way, as ``_quarantine.close_repairs`` does on
    disk: whether it holds anything now, and its problems. Each object it had copied in is finished moving (deleted from the run only
    while it is still the object planned); what it had not copied stays in the run, for the next
    plan to decide. A pointer whose old version it had saved and that is no longer that version
    is taken as re-pointed by it, so that ``--undo`` puts the old one back. The manifest then says
    what was done: a record, never an order; a repair killed before it moved anything leaves none."""
    assert found.manifest is not None
    control = place.control
    folder = found.key.rsplit("/", 1)[0]
    moved: list[ObjectLine] = []
    problems: list[str] = []
    for line in found.manifest.objects:
        copied = _etag_of(place, f"{folder}/{line.key}")
        if copied is None:
            continue
        source = _in_run(place, line.key)
        here = _etag_of(place, source)  # None: moved before the kill (a store may answer 412 for an If-Match on nothing)
        if here is not None and (here != line.etag or control.delete_if_match(source, line.etag).value == "changed"):
            problems.append(
                f"{place.run.url_of(source)}: rewritten since an interrupted repair copied it: the new object stays, its old one is in the quarantine"
            )
        moved.append(line._replace(copied=copied))
    pointers: list[ObjectPointer] = []
    for pointer in found.manifest.pointers:
        now = _etag_of(place, _in_run(place, pointer.key))
        if pointer.old is not None and now is not None and now != pointer.old and _etag_of(place, f"{folder}/{pointer.key}") == pointer.old:
            pointers.append(pointer._replace(written=now))
    etag = found.etag
    if not moved and not pointers and etag is not None and place.control.delete_if_match(found.key, etag).value != "changed":
        return False, problems  # killed before it moved anything: nothing to record
    closed = ObjectManifest(found.manifest.run, found.manifest.created, "done", tuple(moved), tuple(pointers))
    if found.etag is None or place.bucket.replace(found.key, closed.encode(), found.etag) is None:
        problems.append(f"{place.run.url_of(found.key)}: changed by someone else meanwhile: the interrupted repair is left as it was")
    return True, problems
