"""What a bucket keeps under a path besides the objects its listing shows, asked once per path.

A killed multipart upload leaves no object, yet its parts are stored and billed: only
ListMultipartUploads shows it. On a versioned bucket a delete only hides an object behind a delete
marker, and its bytes stay as a noncurrent version. Both come from S3's control plane (boto3, the
``s3`` extra), in a constant number of requests per path the user gave: one ListMultipartUploads
(one ListParts more per upload found), one GetBucketVersioning, and one ListObjectVersions only
where the bucket is or was versioned. Where they cannot be asked (no boto3, ``gs://`` and ``az://``,
a refusal) the answer says so, and never stands for "none".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptdoctor.errors import StoreError
from ckptdoctor.model import PendingUpload, StoreLeftovers
from ckptdoctor.stores import session
from ckptdoctor.stores.urls import BadURL, Location, Store, parse

if TYPE_CHECKING:
    from ckptdoctor.stores.control_plane import Version


@dataclass(frozen=True)
class Surveyed:
    """What the control plane said about every key under one path."""

    location: Location
    uploads: tuple[tuple[str, PendingUpload], ...] = ()
    """(key, upload)."""
    versioning: str | None = None
    noncurrent: tuple[tuple[str, int], ...] = ()
    """(key, bytes) of each older version."""
    markers: tuple[str, ...] = ()
    """Keys of the delete markers."""
    unchecked: str | None = None
    older: tuple[Version, ...] = ()
    """Each older version (no delete marker), the newest of each key first: what a damaged
    object may be restored from."""


def survey(url: str) -> Surveyed | None:
    """Incomplete uploads, versioning and older versions under the store path ``url``; None for
    anything that is not one."""
    try:
        location = parse(url)
    except BadURL:
        return None
    if location.store is not Store.S3:
        return Surveyed(location, unchecked=f"ckptdoctor lists them in S3 buckets only (boto3), not yet in {location.store.value}:// ones")
    below = location.prefix + "/" if location.prefix else ""
    try:
        control = session.control(location)
        uploads = control.uploads(below)
        clock = control.server_date
        versioning = control.versioning()
        kept = control.kept(below) if versioning else []
    except StoreError as error:
        return Surveyed(location, unchecked=str(error))
    return Surveyed(
        location,
        tuple(
            (upload.key, PendingUpload(location.url_of(upload.key), upload.parts_bytes, clock - upload.initiated if clock else None))
            for upload in uploads
        ),
        versioning,
        tuple((version.key, version.size) for version in kept if not version.latest and not version.marker),
        tuple(version.key for version in kept if version.marker),
        older=tuple(sorted((version for version in kept if not version.latest and not version.marker), key=lambda v: -v.modified)),
    )


def shared_out(surveyed: Surveyed, runs: Sequence[str]) -> dict[str, StoreLeftovers]:
    """What ``surveyed`` says about each of ``runs`` (URLs below its path): each key goes to the
    deepest run whose prefix holds it. ``unchecked`` is told on the first run only."""
    location = surveyed.location
    runs = [run for run in runs if run == location.root or run.startswith(location.root + "/")]
    prefixes = sorted((("" if run == location.root else location.key_of(run) + "/", run) for run in runs), reverse=True)

    def owner(key: str) -> str | None:
        return next((run for prefix, run in prefixes if key.startswith(prefix)), None)

    uploads: dict[str, list[PendingUpload]] = {}
    for key, upload in surveyed.uploads:
        if (run := owner(key)) is not None:
            uploads.setdefault(run, []).append(upload)
    noncurrent: dict[str, list[int]] = {}
    for key, size in surveyed.noncurrent:
        if (run := owner(key)) is not None:
            noncurrent.setdefault(run, []).append(size)
    markers: dict[str, int] = {}
    for key in surveyed.markers:
        if (run := owner(key)) is not None:
            markers[run] = markers.get(run, 0) + 1
    shares: dict[str, StoreLeftovers] = {}
    for position, run in enumerate(runs):
        shares[run] = StoreLeftovers(
            uploads=tuple(uploads.get(run, ())),
            versioning=surveyed.versioning,
            noncurrent=len(noncurrent.get(run, ())),
            noncurrent_bytes=sum(noncurrent.get(run, ())),
            delete_markers=markers.get(run, 0),
            unchecked=surveyed.unchecked,
            told=surveyed.unchecked is not None and position > 0,
        )
    return shares
