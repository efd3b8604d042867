"""A prune in a bucket, by the store's own means: what ``_home`` and ``_trash`` do on disk.

A bucket has no rename, no ``flock`` and no trash that costs nothing, so the same guarantees are
kept another way:

- **Lock**: an object ``<home>/lock`` created only where none exists (``If-None-Match: *``),
  holding who holds it (``_holder``) and a nonce of its own: a write whose answer was lost is read
  back, and is this holder's where the nonce is. A thread renews it every ``RENEW`` seconds with
  ``If-Match`` on its ETag while the work goes on; a lock not renewed for ``LEASE`` by the store's
  clock, or held by a process of this machine that no longer runs, is taken over the same way, so
  two takers cannot both win. Before relying on it, the store is asked once to create it again: a
  store that accepts that ignores conditions, and nothing is done there. It is released however
  the command ends (SIGTERM included); a SIGKILL leaves it for at most one lease.
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
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptdoctor.actions._holder import Holder
from ckptdoctor.actions._home import Locked
from ckptdoctor.errors import LockedError
from ckptdoctor.model import Entry
from ckptdoctor.records import BadRecord, ObjectJournal
from ckptdoctor.stores import session
from ckptdoctor.stores.session import StoreError
from ckptdoctor.stores.urls import Location, parse
from ckptdoctor.units import duration

if TYPE_CHECKING:
    from ckptdoctor.stores.session import ObjectInfo

LEASE = 120.0
"""Seconds a lock holds without being renewed, by the store's clock: the longest a killed
ckptdoctor keeps others out (the lock of a process of this machine that no longer runs is taken
over at once). The holder renews it every ``RENEW`` seconds while it works, asked or not."""
RENEW = LEASE / 4
TRUST = LEASE / 2
"""A holder that could not renew its lock for this long stops acting: by the lease's end another
ckptdoctor may have taken it over."""
UNSAID_LEASE = 15 * 60.0
"""The lease of a lock that names none: ckptdoctor before leases were written, which renewed at half of it."""
MOST_LEASE = 3600.0
TRIES = 4
"""Writes of the lock tried before giving up: an answer lost on the way is read back, never guessed."""
LOCK = "lock"
JOURNAL = "prune-"
THREADS = 16
"""Deletes in flight at once."""
MAX_RECORD = 64 * 1024 * 1024
"""A journal object longer than this is not ckptdoctor's: it is left alone."""
MAX_LOCK = 4096


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

    @property
    def lock(self) -> str:
        return f"{self.home}/{LOCK}"


def place_of(run_url: str, home_url: str) -> Place:
    """The run at ``run_url`` with its records under ``home_url`` (both in one bucket)."""
    run, home = parse(run_url, listed=True), parse(home_url, listed=True)
    if home.root != run.root:
        raise StoreError(f"{home_url}: ckptdoctor's records of {run_url} must be in its bucket")
    return Place(run, home.prefix)


class LockLost(LockedError):
    """This ckptdoctor's lock in a bucket was taken over, or could not be renewed for long enough
    that another may have taken it: it stopped acting."""

    def __init__(self, run: str, why: str) -> None:
        super().__init__(f"{run}: stopped part-way: {why}; what was done stays done, and running the command again finishes the rest")


class Lease:
    """A lock held: renewed by a thread of its own every ``RENEW`` seconds, each time only while
    it is still the lock this holder wrote (``If-Match``), until ``release``."""

    def __init__(self, place: Place, shown: str, me: Holder, etag: str, since: float) -> None:
        self.place, self.shown, self.me = place, shown, me
        self._etag, self._renewed = etag, since
        self._lost = ""
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="ckptdoctor-lease", daemon=True)
        self._thread.start()

    def check(self) -> None:
        """Before each act: ``LockLost`` where the lock may no longer be this holder's."""
        with self._guard:
            lost, renewed = self._lost, self._renewed
        if lost:
            raise LockLost(self.shown, lost)
        if time.monotonic() - renewed > TRUST:
            raise LockLost(self.shown, f"its lock could not be renewed for {duration(TRUST)}, and another ckptdoctor may take it over")

    def adopt(self, etag: str) -> None:
        """The lock was written again by this holder outside the renewals (the probe)."""
        with self._guard:
            self._etag = etag

    def _keep(self) -> None:
        wait = RENEW
        while not self._stop.wait(wait):
            sent = time.monotonic()
            with self._guard:
                etag = self._etag
            try:
                now = _rewrite(self.place, self.me, etag)
            except (StoreError, OSError):
                wait = RENEW / 4  # the network: sooner again, within the trust
                continue
            with self._guard:
                if now is None:
                    self._lost = (
                        "another ckptdoctor took its lock over (this one was cut off from the store, or stopped, for longer than the lease)"
                    )
                    return
                self._etag, self._renewed, wait = now, sent, RENEW

    def release(self) -> str | None:
        """Delete the lock where it is still this holder's; what could not be done, in words."""
        self._stop.set()
        self._thread.join()
        if self._lost:
            return None
        from ckptdoctor.stores.control_plane import Deleted as Outcome  # S3's conditional delete (boto3)

        failure: BaseException | None = None
        for attempt in range(TRIES):
            if attempt:
                time.sleep(0.25 * 2**attempt)
            try:
                if self.place.control.delete_if_match(self.place.lock, self._etag) is not Outcome.CHANGED:
                    return None
                found = _read(self.place)
            except (StoreError, OSError) as error:
                failure = error
                continue
            if found is None or found[0] is None or found[0].nonce != self.me.nonce or found[1].etag is None:
                return None  # another's now
            self._etag = found[1].etag  # ours, rewritten by a renewal whose answer was lost
        return (
            f"note: {self.place.run.url_of(self.place.lock)} could not be removed ({failure}): "
            f"it keeps other ckptdoctors out until its lease runs out, {duration(LEASE)} from its last renewal"
        )


@contextlib.contextmanager
def locked(place: Place, shown: str, tell: Callable[[str], None]) -> Iterator[Lease]:
    """Hold ``place``'s lock to the end (``Locked`` when another holds it); released however the
    block ends, the store's refusal of conditions included."""
    me = Holder.me(secrets.token_hex(8), LEASE)
    since = time.monotonic()
    lease = Lease(place, shown, me, _claim(place, me, shown, tell), since)
    try:
        _honours_conditions(place, lease)
        yield lease
    finally:
        unreleased = lease.release()
        if unreleased:
            tell(unreleased)


def _claim(place: Place, me: Holder, shown: str, tell: Callable[[str], None]) -> str:
    """Create the lock, or take over one whose holder is gone or whose lease ran out: its ETag.
    A create whose answer was lost is read back: the lock is ours where it holds our nonce."""
    failure: BaseException | None = None
    for attempt in range(TRIES):
        if attempt:
            time.sleep(0.25 * 2**attempt)
        try:
            # looked at first: a store that ignores If-None-Match would let the create write over a live lock
            found = _read(place)
            if found is None:
                etag = place.bucket.create(place.lock, me.encode())
                if etag is not None:
                    return etag
                found = _read(place)
        except PermissionError:
            raise
        except (StoreError, OSError) as error:
            failure = error
            continue
        if found is None:
            continue  # released meanwhile
        holder, info = found
        if holder is not None and holder.nonce == me.nonce and info.etag is not None:
            return info.etag  # our create went through, and its answer was lost on the way
        return _take_over(place, me, holder, info, shown, tell)
    raise StoreError(f"{place.run.url_of(place.lock)}: the lock could not be taken ({failure})")


def _take_over(place: Place, me: Holder, holder: Holder | None, info: ObjectInfo, shown: str, tell: Callable[[str], None]) -> str:
    """Take over the lock ``info`` from a holder that is gone or whose lease ran out (``Locked``
    while it may still be at work)."""
    lease = holder.lease if holder is not None and holder.lease is not None and 0 < holder.lease <= MOST_LEASE else UNSAID_LEASE
    who = holder.said(since=False) if holder is not None else "a holder that is not ckptdoctor's"
    ends = info.modified + lease
    now = place.control.now()
    if holder is not None and holder.gone():
        why = f"took over the lock of {who}, which no longer runs on this machine"
    elif ends <= now:
        why = f"took over the lock of {who}, whose lease ran out {duration(now - ends)} ago (killed, or cut off from the store)"
    else:
        raise Locked(
            shown,
            f"{who}; last renewed {_clock(info.modified)}, its lease ends at {_clock(ends)}, in {duration(ends - now)} "
            "(by the store's clock), unless it renews it while it works: a ckptdoctor that was killed holds it no longer than that",
        )
    etag = _rewrite(place, me, info.etag) if info.etag is not None else None
    if etag is None:
        raise Locked(shown, "another ckptdoctor took the lock over first")
    tell(f"note: {place.run.url_of(place.lock)}: {why}")
    return etag


def _rewrite(place: Place, me: Holder, etag: str) -> str | None:
    """Write ``me`` over the lock while its ETag is ``etag``: its new ETag, None where it is
    another's now. A write whose answer was lost is read back; one that did not happen (the lock
    is still the one of ``etag``) is tried again."""
    failure: BaseException | None = None
    for attempt in range(TRIES):
        if attempt:
            time.sleep(0.25 * 2**attempt)
        try:
            written = place.bucket.replace(place.lock, me.encode(), etag)
            if written is not None:
                return written
        except PermissionError:
            raise
        except (StoreError, OSError) as error:
            failure = error
        try:
            found = _read(place)
        except (StoreError, OSError) as error:
            failure = error
            continue
        if found is None:
            return None  # released, or taken and released, meanwhile
        holder, info = found
        if holder is not None and holder.nonce == me.nonce and not holder.probe:
            return info.etag
        if info.etag != etag:
            return None  # another's write
    raise StoreError(f"{place.run.url_of(place.lock)}: the lock could not be written ({failure})")


def _honours_conditions(place: Place, lease: Lease) -> None:
    """Ask the store to create the lock again, as a probe: a store that lets it through ignores
    conditions, and nothing is done there. A probe whose answer was lost is read back."""
    probe = lease.me.probing()
    for attempt in range(TRIES):
        if attempt:
            time.sleep(0.25 * 2**attempt)
        try:
            written = place.bucket.create(place.lock, probe.encode())
        except PermissionError:
            raise
        except (StoreError, OSError):
            try:
                found = _read(place)
            except (StoreError, OSError):
                continue
            if found is None or found[0] is None or not found[0].probe:
                continue  # not written, or refused: asked again
            written = found[1].etag
        if written is None:
            return
        lease.adopt(written)
        raise StoreError(
            f"{place.run.root} does not honour conditional writes (If-None-Match): ckptdoctor cannot lock or delete safely there "
            "(--no-lock acts there anyway, without a lock)"
        )
    raise StoreError(f"{place.run.url_of(place.lock)}: the store's answers were lost: whether it honours conditional writes is not known")


def _read(place: Place) -> tuple[Holder | None, ObjectInfo] | None:
    """The lock as it is now, with its ETag; None where there is none."""
    try:
        data, info = place.bucket.fetch(place.lock, MAX_LOCK)
    except FileNotFoundError:
        return None
    return Holder.decode(data), info


def holder_now(place: Place) -> str | None:
    """Who holds ``place``'s lock now and until when, without taking it; None where none does
    (or the lock cannot be read: a dry run may be anyone's)."""
    try:
        found = _read(place)
        if found is None:
            return None
        holder, info = found
        lease = holder.lease if holder is not None and holder.lease is not None and 0 < holder.lease <= MOST_LEASE else UNSAID_LEASE
        if info.modified + lease <= place.control.now():
            return None
    except (StoreError, OSError):
        return None
    who = holder.said(since=False) if holder is not None else "a holder that is not ckptdoctor's"
    return f"{who}, until {_clock(info.modified + lease)} by the store's clock, unless renewed"


def _clock(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))


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
    """No longer there: deleted, or gone already (a delete retried after its answer was lost)."""
    changed: tuple[str, ...]
    """Kept: rewritten since the plan."""
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
        if lease is not None:
            lease.check()  # before each delete: a holder that lost its lock acts no more
        try:
            return key, control.delete_if_match(key, etag)
        except StoreError as error:
            return key, str(error)

    with ThreadPoolExecutor(THREADS) as pool:
        for key, outcome in pool.map(one, objects):
            if outcome in (Outcome.DELETED, Outcome.GONE):  # gone: a retry of a delete whose answer was lost, or another's delete
                deleted.append(key)
            elif isinstance(outcome, str):
                problems.append(f"{place.run.url_of(key)}: {outcome}")
            else:
                changed.append(key)
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
