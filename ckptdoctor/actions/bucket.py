"""The ``Executor`` of runs in a bucket: ``_objects`` (lock, journals, conditional deletes) and
``_object_quarantine`` (repair and undo) behind the one interface ``ckptdoctor.acting`` acts
through. Loaded only for runs in buckets.

Ages are measured by the store's clock (``Control.now``), never the local one: the objects'
times are the store's. Files held open have no meaning in a bucket: an incomplete upload into a
run stands for them (a save still arriving keeps what it writes into).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ckptdoctor.actions import _object_quarantine, _objects
from ckptdoctor.actions._objects import Lease, Place
from ckptdoctor.actions.executor import Acted, Inside, Said, World, deleted, finished, kept_paths
from ckptdoctor.model import Action, Entry, Plan, Role, Run
from ckptdoctor.places import home_of, run_root
from ckptdoctor.records import Moved, ObjectJournal, Pending, Quarantine
from ckptdoctor.stores import session, urls
from ckptdoctor.stores.control_plane import Upload
from ckptdoctor.units import counted, duration, size

ABANDONED = 24 * 3600.0
"""An incomplete multipart upload older than this (without --abort-uploads) is taken for abandoned;
a younger one may be a save still going on, and keeps what it writes into."""


@dataclass
class BucketExecutor:
    """Acts on runs in S3 buckets. ``lock`` False (``--no-lock``): no lock, for a store that does
    not honour conditional writes. ``home_of_run``: where ckptdoctor keeps a run's lock, journals
    and quarantines, which its layout decides (the executor knows no framework)."""

    home_of_run: Callable[[Run], str]
    lock: bool = True
    noun = "object"
    reads_metrics = False
    """--keep-best reads metrics files beside local runs only, for now."""
    has_trash = False
    """Deletes in a bucket are final: nothing to put back from."""
    partial_undo = False
    """A copy in a bucket's quarantine that changed puts nothing back: there is no copy of the run
    to act on, as there is on disk, so the user decides first."""
    _leases: dict[str, Lease] = field(default_factory=dict)
    _now: dict[str, float] = field(default_factory=dict)
    _uploads: dict[str, list[Upload]] = field(default_factory=dict)
    _journals: dict[str, list[_objects.Found]] = field(default_factory=dict)
    _found: dict[str, _object_quarantine.Found] = field(default_factory=dict)
    """Each quarantine listed, by its folder's URL: what ``restore`` puts back from."""

    def opened(self, held: contextlib.ExitStack, paths: Sequence[str], dry_run: bool) -> list[str]:
        return []  # a prefix has nothing to open, nor a folder a dry run may not read

    def refusals(self, places: Sequence[tuple[str, str]], command: str) -> list[str]:
        # before any lock is written: only S3 has the conditional writes acting needs
        return [
            f"{shown}: {command} acts in s3:// buckets only, for now (it needs S3's conditional copy and delete)"
            for shown, url in places
            if urls.parse(url, listed=True).store is not urls.Store.S3
        ]

    def notes(self) -> list[str]:
        if self.lock:
            return []
        return ["note: --no-lock: no lock is taken, and a store that ignores conditions deletes even what changed since the plan"]

    def ready(self, runs: Sequence[Run], dry_run: bool) -> None:
        """Nothing to confirm: a prefix cannot be swapped for a link."""

    @contextlib.contextmanager
    def locked(self, home: str, shown: str, tell: Callable[[str], None]) -> Iterator[None]:
        if not self.lock:
            yield
            return
        with _objects.locked(_objects.place_of(home, home), shown, tell) as lease:
            self._leases[home] = lease
            try:
                yield
            finally:
                del self._leases[home]

    def holder_now(self, home: str) -> str | None:
        return _objects.holder_now(_objects.place_of(home, home)) if self.lock else None

    def strays(self, home: str) -> list[str]:
        return []

    def _place(self, run: Run) -> Place:
        return _objects.place_of(run_root(run), self.home_of_run(run))

    def _clock(self, place: Place) -> float:
        url = place.run.url
        if url not in self._now:
            self._now[url] = place.control.now()
        return self._now[url]

    def _uploads_of(self, place: Place) -> list[Upload]:
        url = place.run.url
        if url not in self._uploads:
            self._uploads[url] = place.control.uploads(place.run.prefix + "/")
        return self._uploads[url]

    def world(self, run: Run, tell: Callable[[str], None] | None = None, noted: set[str] | None = None) -> World:
        """Every object inside each checkpoint folder of ``run`` (from the scan's listing), with the
        uploads going on into it; and what the young uploads are writing, by URL: a save into a
        checkpoint that is still going on keeps it, as a file held open does on disk."""
        place = self._place(run)
        now, uploads = self._clock(place), self._uploads_of(place)
        folders = [c.folder for c in run.checkpoints if c.folder is not None]
        folders += [f.entry for f in run.loose_files if f.entry.is_dir and Role.TEMP in f.roles]
        location = place.run
        listed = sorted(session.listed_under(location.url))
        young = [upload for upload in uploads if now - upload.initiated < ABANDONED]
        inside: Inside = {}
        open_by: dict[str, int | str] = {}
        folder_prefixes = tuple(folder.os_path + "/" for folder in folders)
        resume = run.resume.index if run.resume is not None else None
        newer = [c for c in run.checkpoints if resume is None or c.index > resume]
        for upload in young:
            url = location.url_of(upload.key)
            said = f"an upload into it began {duration(max(0.0, now - upload.initiated))} ago and is not complete"
            open_by[url] = said
            if not url.startswith(folder_prefixes):  # a file of some save still arriving: the saves after the resume point may be its
                for checkpoint in newer:
                    open_by.update(
                        (file.entry.os_path, f"a save may still be arriving: {said} ({upload.key.rsplit('/', 1)[-1]})")
                        for file in checkpoint.files
                    )
        for folder in folders:
            prefix = folder.os_path + "/"
            contents = [
                (url, info.modified, info.size) for url in listed if url.startswith(prefix) and (info := session.listed(url)) is not None
            ]
            contents += [(location.url_of(u.key), u.initiated, u.parts_bytes) for u in young if location.url_of(u.key).startswith(prefix)]
            inside[folder.os_path] = tuple(contents)
        return World(now, open_by, inside)

    def busy_now(self, run: Run) -> frozenset[str]:
        return frozenset()  # every act is conditioned on the object's ETag instead

    def changed_since_scan(self, root: str, entries: Sequence[Entry]) -> str | None:
        return _objects.changed_since_scan(entries)

    # --- prune -------------------------------------------------------------------------------

    def leftovers(self, home: str, remove: bool) -> tuple[list[str], list[str]]:
        return [], []  # a delete in a bucket leaves nothing half done to try again

    def _journals_of(self, place: Place) -> list[_objects.Found]:
        url = place.run.url
        if url not in self._journals:
            self._journals[url] = _objects.journals(place)
        return self._journals[url]

    def journals(self, root: str, home: str) -> list[Pending]:
        place = _objects.place_of(root, home)
        # listed again, not the plan's: after Ctrl-C, the journal this prune wrote is named too
        return [Pending(place.run.url_of(found.key), 0, (), ()) for found in _objects.journals(place) if found.journal is not None]

    def pending(self, run: Run, plan: Plan, busy: frozenset[str], tell: Callable[[str], None] | None = None) -> list[Pending]:
        """What the journals a killed prune left would still delete (objects unchanged, not kept now)."""
        place = self._place(run)
        found = self._journals_of(place)
        for journal in found:
            if journal.journal is None and tell is not None:
                tell(f"note: {place.run.url_of(journal.key)} is not ckptdoctor's ({journal.why}): ignored")
        records = [journal.journal for journal in found if journal.journal is not None]
        if not records:
            return []
        location = place.run
        in_run: list[str] = []
        spared: list[str] = []
        finishable = _journal_objects(run, plan, place)
        for record in records:
            for key, etag in record.objects:
                if session.listed(f"{location.url}/{key}") is None:
                    continue
                (in_run if (key, etag) in finishable else spared).append(key)
        names = ", ".join(location.url_of(j.key) for j in found if j.journal is not None)
        return [Pending(names, 0, tuple(in_run), tuple(spared))]

    def discard(self, root: str, home: str) -> tuple[int, list[str]]:
        return 0, []  # never asked: has_trash is False

    def _held(self, home: str) -> Lease | None:
        """The lease of ``home``'s lock, checked: ``LockLost`` where it may no longer be this
        command's (it waited at the prompt, or was stopped, while another took it over)."""
        lease = self._leases.get(home)
        if lease is not None:
            lease.check()
        return lease

    def finish_interrupted(self, run: Run, plan: Plan) -> Acted:
        """Delete what each killed prune was confirmed to delete, still as it was."""
        place = self._place(run)
        location, lease = place.run, self._held(self.home_of_run(run))
        acted = Acted()
        for journal in self._journals_of(place):
            if journal.journal is None:
                continue
            finishable = _journal_objects(run, plan, place)
            left = [(location.key_of(f"{location.url}/{key}"), etag) for key, etag in journal.journal.objects if (key, etag) in finishable]
            done = _objects.delete_objects(place, left, lease)
            acted.problems += done.problems
            if not done.problems:
                _objects.close_journal(place, journal.key, journal.etag)
            acted.said.append(finished(run.path, len(done.deleted), plan, _all_deleted(location, frozenset(done.deleted))))
        return acted

    def delete(self, run: Run, plan: Plan, since: float) -> Acted:
        lease = self._held(self.home_of_run(run))
        place = self._place(run)
        location = place.run
        acted = Acted()
        objects, unconditioned, changed_folders = _planned_objects(plan, location)
        if changed_folders:
            acted.said.append(
                Said(
                    f"{plan.run}: left {counted(changed_folders, 'checkpoint folder')} written to since the plan was made; the next prune looks again."
                )
            )
        acted.problems += [
            f"{url}: the store listed it without an ETag: it cannot be deleted only as planned, so it is left" for url in unconditioned
        ]
        below = len(location.prefix) + 1 if location.prefix else 0
        key, etag = _objects.write_journal(place, ObjectJournal(run.path, tuple((k[below:], e) for k, e in objects)))
        done = _objects.delete_objects(place, objects, lease)
        acted.problems += done.problems
        if not done.problems:
            _objects.close_journal(place, key, etag)
        freed = sum(info.size for k in done.deleted if (info := session.listed(location.url_of(k))) is not None)
        what = counted(len(done.deleted), "object") if done.deleted else None
        left = f"{counted(len(done.changed), 'object')} rewritten or removed" if done.changed else None
        acted.said += deleted(plan.run, len(plan.acting(Action.DELETE)), what, f"{size(freed)} no longer listed", left)
        return acted

    def prune_notes(self, run: Run, plan: Plan, abort_uploads: float | None, dry_run: bool) -> list[str]:
        notes = _versions(self._place(run), plan)
        stale = self._stale(run, abort_uploads)
        if stale:
            verb = "would abort" if dry_run else "aborts"
            notes.append(
                f"{run.path}: {verb} {len(stale)} incomplete upload{'s' if len(stale) != 1 else ''} older than "
                f"{duration(abort_uploads or 0)} ({size(sum(upload.parts_bytes for upload in stale))} of parts)"
            )
        return notes

    def _stale(self, run: Run, age: float | None) -> list[Upload]:
        if age is None:
            return []
        place = self._place(run)
        now = self._clock(place)
        return [upload for upload in self._uploads_of(place) if now - upload.initiated >= age]

    def chores(self, run: Run, abort_uploads: float | None) -> bool:
        return bool(self._stale(run, abort_uploads))

    def do_chores(self, run: Run, abort_uploads: float | None) -> Acted:
        self._held(self.home_of_run(run))
        place = self._place(run)
        acted = Acted()
        for upload in self._stale(run, abort_uploads):
            if place.control.abort(upload):
                acted.said.append(
                    Said(
                        f"{run.path}: aborted the incomplete upload of {place.run.url_of(upload.key)} ({size(upload.parts_bytes)} of parts).",
                        True,
                    )
                )
        return acted

    # --- repair and undo -----------------------------------------------------------------------

    def sweep(self, home: str) -> None:
        """Nothing to sweep: a manifest object is written whole or not at all."""

    def close_repairs(self, root: str, home: str) -> tuple[list[str], list[str]]:
        place = _objects.place_of(root, home)
        closed: list[str] = []
        problems: list[str] = []
        for found in _object_quarantine.quarantines(place):
            if found.manifest is not None and found.manifest.state == "repairing":
                kept, failed = _object_quarantine.close(place, found)
                problems += failed
                if kept:  # one that had moved nothing is gone: no undo to name
                    closed.append(found.ident)
        return closed, problems

    def quarantine(self, run: Run, plan: Plan, since: float) -> Moved:
        place = self._place(run)
        return _object_quarantine.quarantine(place, plan, self._clock(place), self._held(self.home_of_run(run)))

    def quarantine_homes(self, path: str) -> list[str]:
        # every checkpoint quarantined: the run is its folder's quarantine, where the store lists one
        place = _objects.place_of(path.rstrip("/"), home_of(path.rstrip("/"), False))
        return [place.run.url_of(place.home)] if place.bucket.first(f"{place.home}/{_object_quarantine.QUARANTINE}/") else []

    def quarantines(self, root: str, home: str) -> list[Quarantine]:
        place = _objects.place_of(root.rstrip("/"), home)
        every = []
        for found in _object_quarantine.quarantines(place):
            if found.manifest is not None:
                standing = _object_quarantine.standing(place, found)
                self._found[standing.folder] = found
                every.append(standing)
        return every

    def restore(self, found: Quarantine, root: str) -> tuple[int, list[str]]:
        place = _objects.place_of(root.rstrip("/"), found.home)
        restored, problems = _object_quarantine.restore(place, self._found[found.folder], self._held(found.home))
        return restored, list(problems)


def _versions(place: Place, plan: Plan) -> list[str]:
    """On a versioned bucket a delete frees nothing: say so before anything is asked."""
    if not plan.acting(Action.DELETE):
        return []
    control = place.control
    if control.versioning() is None:
        return []
    expiring = [rule for rule in control.lifecycle() if rule.get("Status") == "Enabled" and "NoncurrentVersionExpiration" in rule]
    later = (
        f"once its lifecycle rule expires noncurrent versions ({expiring[0]['NoncurrentVersionExpiration'].get('NoncurrentDays', '?')} days)"
        if expiring
        else "never: no lifecycle rule expires noncurrent versions (add one with a NoncurrentVersionExpiration)"
    )
    return [
        f"note: {place.run.root} keeps object versions: these deletes free 0 B now (each leaves a delete marker), "
        f"and {size(plan.freed_bytes)} {later}"
    ]


def _planned_objects(plan: Plan, location: urls.Location) -> tuple[list[tuple[str, str]], list[str], int]:
    """The (key, ETag) of every object the plan deletes (a folder's are every object listed below
    it); the URLs of those the listing gave no ETag, which no delete can be conditioned on; and
    how many checkpoints are left because a folder of theirs changed since the scan."""
    found: list[tuple[str, str]] = []
    unconditioned: list[str] = []
    left = 0
    for item in plan.acting(Action.DELETE):
        if not all(_objects.folder_unchanged(entry.os_path) for entry in item.entries if entry.is_dir):
            left += 1
            continue
        for entry in item.entries:
            urls_of = session.listed_under(entry.os_path) if entry.is_dir else [entry.os_path]
            for url in urls_of:
                info = session.listed(url)
                if info is not None and info.etag:
                    found.append((location.key_of(url), info.etag))
                elif info is not None:
                    unconditioned.append(url)
    return found, unconditioned, left


def _all_deleted(location: urls.Location, keys: frozenset[str]) -> Callable[[Entry], bool]:
    """Whether each object of an entry (a folder's: every object listed below it) is among ``keys``."""

    def gone(entry: Entry) -> bool:
        return all(location.key_of(url) in keys for url in (session.listed_under(entry.os_path) if entry.is_dir else [entry.os_path]))

    return gone


def _journal_objects(run: Run, plan: Plan, place: Place) -> frozenset[tuple[str, str]]:
    """What a killed prune's journal may still delete: objects of the run's checkpoints (never any
    other object of the run, whatever a planted journal names) that this plan does not keep, each
    with the ETag the listing shows."""
    location = place.run
    kept = kept_paths(plan)
    urls_of: list[str] = []
    for checkpoint in run.checkpoints:
        entries = [checkpoint.folder] if checkpoint.folder is not None else [file.entry for file in checkpoint.files]
        for entry in entries:
            urls_of += session.listed_under(entry.os_path) if entry.is_dir else [entry.os_path]
    finishable: set[tuple[str, str]] = set()
    for url in urls_of:
        key = url[len(location.url) + 1 :]
        info = session.listed(url)
        if info is None or info.etag is None or any(key == k or key.startswith(k + "/") for k in kept):
            continue
        finishable.add((key, info.etag))
    return frozenset(finishable)
