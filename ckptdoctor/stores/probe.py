"""``diskcheck`` of a run in a bucket: what the store lets this identity do, tried for real.

A bucket has no free space to read. What can stop the next save, or the commands that tend a
run, is a permission the identity lacks, so each is tried: a listing of the run's prefix, a
probe object created only where none has its name (``If-None-Match: *``) and then deleted (on
S3 with ``If-Match`` on the ETag it was created with), a one-byte ranged read, and on S3 a
multipart upload started on a probe key and aborted. The probe keys lie under the run's
``.ckptdoctor/`` prefix, which no scan counts as part of a run, with a random part: they never
name a checkpoint. The probe object is deleted whatever fails after it was created; where even
that is refused, the check says it is left (``BucketCheck.probe_left``).

Each probe's outcome comes from what the store answered (403 denied, 404 ``NoSuchUpload``),
never from a client's exception classes. What could not be tried is said, never taken for
granted: without boto3 (``ckptdoctor[s3]``), S3's uploads, versioning and lifecycle rules; on
``gs://`` and ``az://``, everything but the listing, the write, the read and the delete.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from ckptdoctor.errors import StoreError
from ckptdoctor.model import Access, BucketCheck, LifecycleRule, Permission
from ckptdoctor.places import OWN_FOLDER
from ckptdoctor.stores import session
from ckptdoctor.stores.urls import PERMISSIONS, Location, Store

if TYPE_CHECKING:
    from ckptdoctor.stores._bucket import Bucket
    from ckptdoctor.stores.control_plane import Control

NEEDED_BY: dict[str, tuple[str, ...]] = {
    "list": ("inspect", "verify", "prune", "repair", "diskcheck"),
    "read": ("inspect", "verify", "prune", "repair"),
    "write": ("the trainer's saves", "prune (its lock and journal)", "repair (its quarantine and pointers)"),
    "delete": ("prune", "repair"),
    "list uploads": ("inspect (incomplete uploads)", "prune --abort-uploads"),
    "abort uploads": ("prune --abort-uploads",),
}
"""The commands each permission is needed by."""

PROBE_BODY = b"ckptdoctor diskcheck: a write probe, deleted at once\n"
NO_SUCH_UPLOAD = "ckptdoctor-probe-no-such-upload"
"""The upload id asked about where no probe upload could be started: a store that lets this
identity abort uploads answers 404 ``NoSuchUpload``, one that does not answers 403."""
NO_QUOTA = "no quota known"


def probe_key(location: Location) -> str:
    """A key under the run's ``.ckptdoctor/`` prefix that no checkpoint and no other probe has."""
    return "/".join(part for part in (location.prefix, OWN_FOLDER, f"diskcheck-probe-{uuid.uuid4().hex}") if part)


def check_bucket(location: Location) -> BucketCheck:
    """Every probe of ``location``'s bucket; :class:`StoreError` where the bucket cannot be used
    at all (no such bucket, credentials refused, unreachable)."""
    bucket = session.bucket(location)
    found = _Found(location)
    below = location.prefix + "/" if location.prefix else ""
    first = None
    try:
        first = bucket.first(below)
        found.set("list", Access.GRANTED, f"listed {location.url}/")
    except PermissionError as error:
        found.set("list", Access.DENIED, error.strerror)
    key = probe_key(location)
    etag: str | None = None
    created = False
    try:
        try:
            etag = bucket.create(key, PROBE_BODY)
            created = etag is not None
            if created:
                found.set("write", Access.GRANTED, f"created {location.url_of(key)}")
            else:
                found.set("write", Access.UNCHECKED, f"{location.url_of(key)} exists already: a probe of that random name cannot be made")
        except PermissionError as error:
            found.set("write", Access.DENIED, error.strerror)
        except OSError as error:
            found.set("write", Access.UNCHECKED, error.strerror or str(error))
        target = first.key if first is not None else key if created else None
        _read(bucket, found, target)
        if location.store is Store.S3:
            control = _control(location, found)
            if control is not None:
                _uploads(control, found, key, created)
                _settings(control, found)
        else:
            found.note(f"multipart uploads, versioning and lifecycle rules: not checked on this store ({location.store.value}://)")
    finally:
        left = _delete(bucket, location, found, key, etag if created else None)
    return BucketCheck(
        store=location.store.value,
        probe=location.url_of(key),
        permissions=found.permissions(),
        keys=below,
        probe_left=left,
        has_objects=first is not None,
        quota_bytes=None,
        quota=NO_QUOTA if location.store is Store.S3 else "not checked on this store",
        versioning=found.versioning,
        lifecycle=found.lifecycle,
        not_checked=tuple(found.notes),
    )


class _Found:
    """What the probes have shown so far."""

    def __init__(self, location: Location) -> None:
        self.location = location
        self.access: dict[str, tuple[Access, str]] = {}
        self.notes: list[str] = []
        self.versioning: str | None = None
        self.lifecycle: tuple[LifecycleRule, ...] | None = None

    def set(self, action: str, access: Access, detail: str | None = "") -> None:
        self.access[action] = (access, detail or "")

    def note(self, text: str) -> None:
        self.notes.append(text)

    def permissions(self) -> tuple[Permission, ...]:
        store = self.location.store
        return tuple(
            Permission(action, names[store], NEEDED_BY[action], *self.access.get(action, (Access.UNCHECKED, "not tried")))
            for action, names in PERMISSIONS.items()
            if store in names
        )


def _read(bucket: Bucket, found: _Found, key: str | None) -> None:
    if key is None:
        found.set("read", Access.UNCHECKED, "no object under the run's prefix to read, and no probe object could be made")
        return
    try:
        bucket.first_byte(key)
    except PermissionError as error:
        found.set("read", Access.DENIED, error.strerror)
    except OSError as error:
        found.set("read", Access.UNCHECKED, error.strerror or str(error))
    else:
        found.set("read", Access.GRANTED, f"read 1 byte of {found.location.url_of(key)}")


def _control(location: Location, found: _Found) -> Control | None:
    try:
        return session.control(location)
    except StoreError as error:
        why = str(error).split(": ", 1)[-1]
        for action in ("list uploads", "abort uploads"):
            found.set(action, Access.UNCHECKED, why)
        found.note(f"multipart uploads, versioning and lifecycle rules: not checked ({why})")
        return None


def _uploads(control: Control, found: _Found, key: str, created: bool) -> None:
    """List the uploads under the probe's prefix, and start one on a probe key and abort it
    (where the write was denied, abort an upload that does not exist: 404 or 403 says)."""
    folder = key.rpartition("/")[0] + "/"
    listed = control.attempt("list its multipart uploads", "list_multipart_uploads", Prefix=folder)
    found.set("list uploads", *_access(listed.status, listed.code, listed.succeeded, "listed the uploads under the probe's prefix"))
    upload_key = key + "-upload"
    started = control.attempt("start a multipart upload", "create_multipart_upload", Key=upload_key) if created else None
    if started is not None and started.succeeded:
        upload_id = str(started.result.get("UploadId", ""))
        aborted = control.attempt("abort a multipart upload", "abort_multipart_upload", Key=upload_key, UploadId=upload_id)
        found.set(
            "abort uploads", *_access(aborted.status, aborted.code, aborted.succeeded, "started an upload on a probe key and aborted it")
        )
        if not aborted.succeeded:
            found.note(
                f"the probe's upload {upload_id} of {found.location.url_of(upload_key)} is left: "
                f"aws s3api abort-multipart-upload --bucket {found.location.bucket} --key {upload_key} --upload-id {upload_id}"
            )
        return
    asked = control.attempt("abort a multipart upload", "abort_multipart_upload", Key=upload_key, UploadId=NO_SUCH_UPLOAD)
    if asked.code == "NoSuchUpload" or asked.status == 404:
        found.set(
            "abort uploads",
            Access.GRANTED,
            "asked to abort an upload that does not exist: the store answered NoSuchUpload, not AccessDenied",
        )
    else:
        found.set("abort uploads", *_access(asked.status, asked.code, False, ""))


def _access(status: int, code: str | None, succeeded: bool, done: str) -> tuple[Access, str]:
    if succeeded:
        return Access.GRANTED, done
    if status == 403 or code == "AccessDenied":
        return Access.DENIED, f"the store refused it (HTTP {status}, {code or 'AccessDenied'})"
    return Access.UNCHECKED, f"the store answered HTTP {status}{f', {code}' if code else ''}"


def _settings(control: Control, found: _Found) -> None:
    versioning = control.attempt("read its versioning", "get_bucket_versioning")
    if versioning.succeeded:
        found.versioning = str(versioning.result.get("Status") or "never")
    else:
        found.note(f"versioning: the store refused to say (HTTP {versioning.status}, {versioning.code}): grant s3:GetBucketVersioning")
    try:
        found.lifecycle = tuple(_rule(raw) for raw in control.lifecycle())
    except StoreError as error:
        found.note(f"lifecycle rules: {str(error).split(': ', 1)[-1]}: grant s3:GetLifecycleConfiguration")


def _rule(raw: dict[str, Any]) -> LifecycleRule:
    """One of S3's lifecycle rules, as much of it as ``diskcheck`` judges."""
    given = raw.get("Filter") or {}
    both = given.get("And") or {}
    prefix = given.get("Prefix", both.get("Prefix", raw.get("Prefix", ""))) or ""
    tagged = bool(given.get("Tag") or both.get("Tags"))
    aborts = (raw.get("AbortIncompleteMultipartUpload") or {}).get("DaysAfterInitiation")
    expires = (raw.get("NoncurrentVersionExpiration") or {}).get("NoncurrentDays")
    return LifecycleRule(str(prefix), raw.get("Status") == "Enabled", aborts, expires, tagged)


def _delete(bucket: Bucket, location: Location, found: _Found, key: str, etag: str | None) -> bool:
    """Delete the probe object (``etag``: it was created with it; None: it never was, and the
    delete of its missing key shows the permission alone); whether it is left."""
    control = None
    if etag is not None and location.store is Store.S3:
        try:
            control = session.control(location)
        except StoreError:
            control = None  # no boto3: obstore's delete, which takes no condition, of a key only this probe wrote
    if control is not None and etag is not None:
        deleted = control.attempt("delete the probe object", "delete_object", Key=key, IfMatch=etag)
        found.set("delete", *_access(deleted.status, deleted.code, deleted.succeeded, f"deleted the probe object (If-Match {etag})"))
        return not deleted.succeeded
    try:
        bucket.delete(key)
    except PermissionError as error:
        found.set("delete", Access.DENIED, error.strerror)
        return etag is not None
    except OSError as error:
        found.set("delete", Access.UNCHECKED, error.strerror or str(error))
        return etag is not None
    done = "deleted the probe object" if etag is not None else "deleted the probe's key, which no object had (the write was refused)"
    found.set("delete", Access.GRANTED, done)
    return False
