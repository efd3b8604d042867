"""A prune in a bucket, by the store's own means: what ``_home`` and ``_trash`` do on disk.

A bucket has no rename, no ``flock`` and no trash that costs nothing, so the same guarantees are
kept another way:

- **Lock**: an object ``<home>/lock`` created only where none exists (``If-None-Match: *``),
  holding who holds it. A lock older than ``LEASE`` by the store's clock is taken over with
  ``If-Match`` on its ETag, so two takers cannot both win; the holder renews it the same way while
  it works. Before relying on it, the store is asked once to create it again: a store that
  accepts that ignores conditions, and nothing is done there.
- **Journal**: ``<home>/prune-<id>.json``, created only where none exists, naming every object to
  delete with the ETag the plan saw; written before the first delete, removed after the last. A
  prune killed part-way leaves it, and the next one deletes what it names (still only objects
  whose ETag is the one recorded) once confirmed.
- **Deletes**: one object at a time (several in flight), each with ``If-Match`` on the ETag the
  plan saw: an object rewritten since is kept (412), one gone since is not an error.

Deletes in a bucket are final (no trash to restore from); on a versioned bucket they only hide
the object behind a delete marker. What is kept is never in a plan, and what a plan names is
deleted only while it is the object the plan saw.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import secrets
import socket
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ckptdoctor.actions._home import Locked
from ckptdoctor.model import Entry
from ckptdoctor.records import BadRecord, ObjectJournal
from ckptdoctor.stores import session
from ckptdoctor.stores.session import StoreError
from ckptdoctor.stores.urls import Location, parse

LEASE = 15 * 60.0
"""Seconds a lock holds without being renewed, by the store's clock."""
LOCK = "lock"
JOURNAL = "prune-"
THREADS = 16
"""Deletes in flight at once."""
MAX_RECORD = 64 * 1024 * 1024
"""A journal object longer than this is not ckptdoctor's: it is left alone."""


@dataclass(frozen=True)
class Place:
    """A run in a bucket, and the prefix where ckptdoctor keeps its lock and journals for it."""

    run: Location
    home: str
    """A key prefix, no slash at its end."""

    @property
    def bucket(self) -> session.Bucket:
        return session.bucket(self.run)

    @property
    def control(self) -> session.Control:
        return session.control(self.run)


def place_of(run_url: str, home_url: str) -> Place:
    """The run at ``run_url`` with its records under ``home_url`` (both in one bucket)."""
    run, home = parse(run_url), parse(home_url)
    if home.root != run.root:
        raise StoreError(f"{home_url}: ckptdoctor's records of {run_url} must be in its bucket")
    return Place(run, home.prefix)


@dataclass
class Lease:
    """A lock held: its ETag, renewed with ``If-Match`` while the work goes on."""

    place: Place
    shown: str
    etag: str
    taken: float = field(default_factory=time.monotonic)

    def renew(self) -> None:
        """Write the lock again if half its lease has passed; ``Locked`` where another took it."""
        if time.monotonic() - self.taken < LEASE / 2:
            return
        etag = self.place.bucket.replace(_lock_key(self.place), _whoami(), self.etag)
        if etag is None:
            raise Locked(self.shown, "another ckptdoctor took the lock over: its lease had run out")
        self.etag, self.taken = etag, time.monotonic()


@contextlib.contextmanager
def locked(place: Place, shown: str) -> Iterator[Lease]:
    """Hold ``place``'s lock to the end (``Locked`` when another holds it)."""
    bucket, key = place.bucket, _lock_key(place)
    etag = bucket.create(key, _whoami())
    if etag is None:
        etag = _take_over(place, shown)
    if bucket.create(key, _whoami()) is not None:  # the store let a second create through
        bucket_refuses = (
            f"{place.run.root} does not honour conditional writes (If-None-Match): ckptdoctor cannot lock or delete safely there "
            "(--no-lock acts there anyway, without a lock)"
        )
        with contextlib.suppress(StoreError):
            place.control.delete_if_match(key, etag)
        raise StoreError(bucket_refuses)
    lease = Lease(place, shown, etag)
    try:
        yield lease
    finally:
        with contextlib.suppress(StoreError):
            place.control.delete_if_match(key, lease.etag)


def _take_over(place: Place, shown: str) -> str:
    bucket, key = place.bucket, _lock_key(place)
    try:
        held = bucket.head(key)
    except FileNotFoundError:  # released meanwhile: take it as new
        etag = bucket.create(key, _whoami())
        if etag is None:
            raise Locked(shown, "another ckptdoctor took it a moment ago") from None
        return etag
    now = place.control.now()
    if held.modified + LEASE > now or held.etag is None:
        raise Locked(shown, _holder(place, key))
    etag = bucket.replace(key, _whoami(), held.etag)
    if etag is None:
        raise Locked(shown, "another ckptdoctor took the stale lock over first")
    return etag


def _lock_key(place: Place) -> str:
    return f"{place.home}/{LOCK}"


def _whoami() -> bytes:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "user": getpass.getuser(), "started": time.time()}).encode()


def _holder(place: Place, key: str) -> str:
    try:
        info = json.loads(place.bucket.read(key, 0, 4096))
        return f"pid {info['pid']} on {info['host']} by {info['user']}"
    except (ValueError, KeyError, TypeError, OSError):
        return "holder unknown"


# --- journals ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """A journal a killed prune left: its key and ETag, and what it says (None: not ckptdoctor's)."""

    key: str
    etag: str | None
    journal: ObjectJournal | None
    why: str = ""


def journals(place: Place) -> list[Found]:
    """The journals killed prunes left under ``place``'s home, oldest first."""
    found: list[Found] = []
    for info in sorted(place.bucket.objects(place.home + "/"), key=lambda info: info.key):
        name = info.key[len(place.home) + 1 :]
        if not name.startswith(JOURNAL) or "/" in name:
            continue
        if info.size > MAX_RECORD:
            found.append(Found(info.key, info.etag, None, "longer than any journal ckptdoctor writes"))
            continue
        try:
            journal = ObjectJournal.decode(place.bucket.read(info.key, 0, info.size))
        except (BadRecord, OSError, UnicodeDecodeError) as error:
            found.append(Found(info.key, info.etag, None, str(error)))
            continue
        found.append(Found(info.key, info.etag, journal))
    return found


def write_journal(place: Place, journal: ObjectJournal) -> tuple[str, str]:
    """Create the journal (never over another); its key and ETag."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    key = f"{place.home}/{JOURNAL}{stamp}-{secrets.token_hex(4)}.json"
    etag = place.bucket.create(key, journal.encode())
    if etag is None:
        raise StoreError(f"{place.run.url_of(key)}: a journal of that name appeared: another prune is at work")
    return key, etag


def close_journal(place: Place, key: str, etag: str | None) -> None:
    """Remove a journal whose objects are all dealt with."""
    if etag is not None:
        place.control.delete_if_match(key, etag)


# --- deletes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deleted:
    """What a run of conditional deletes did."""

    deleted: tuple[str, ...]
    changed: tuple[str, ...]
    """Kept: rewritten (or gone) since the plan."""
    problems: tuple[str, ...] = ()


def delete_objects(place: Place, objects: Sequence[tuple[str, str]], lease: Lease | None = None) -> Deleted:
    """Delete each ``(key, etag)`` while its ETag is the one given; several in flight."""
    # imported here: the conditional delete is S3's control plane (boto3)
    from ckptdoctor.stores.control_plane import Deleted as Outcome

    control = place.control
    deleted: list[str] = []
    changed: list[str] = []
    problems: list[str] = []

    def one(item: tuple[str, str]) -> tuple[str, Outcome | str]:
        key, etag = item
        try:
            return key, control.delete_if_match(key, etag)
        except StoreError as error:
            return key, str(error)

    with ThreadPoolExecutor(THREADS) as pool:
        for key, outcome in pool.map(one, objects):
            if outcome == Outcome.DELETED:
                deleted.append(key)
            elif isinstance(outcome, str):
                problems.append(f"{place.run.url_of(key)}: {outcome}")
            else:
                changed.append(key)
            if lease is not None:
                lease.renew()
    return Deleted(tuple(deleted), tuple(changed), tuple(problems))


def changed_since_scan(entries: Sequence[Entry]) -> str | None:
    """The first of ``entries`` (objects the plan relies on) that is no longer the object the scan
    listed, said in words; None when all are as listed."""
    for entry in entries:
        listed = session.listed(entry.os_path)
        bucket = session.owner(entry.os_path)
        if listed is None or bucket is None:
            return f"{entry.path} (not in the scan's listing)"
        try:
            now = bucket.head(bucket.location.key_of(entry.os_path))
        except FileNotFoundError:
            return f"{entry.path} (deleted)"
        except OSError as error:
            return f"{entry.path} ({error.strerror or error})"
        if now.etag != listed.etag or now.size != listed.size:
            return f"{entry.path} (rewritten)"
    return None


def folder_unchanged(url: str) -> bool:
    """Whether the objects below the folder ``url`` are, now, those the scan listed (the same keys,
    each with the same ETag): a checkpoint folder that gained or changed a file since the plan is
    left whole, as it is on disk."""
    bucket = session.owner_of_prefix(url)
    if bucket is None:
        return False
    below = bucket.location.key_of(url) + "/"
    now = {bucket.location.url_of(info.key): info.etag for info in bucket.objects(below)}
    then = {found: info.etag for found in session.listed_under(url) if (info := session.listed(found)) is not None}
    return now == then
