"""The buckets this process reaches, and what their listings showed.

A scan of a bucket lists it once; the readers then open its objects by URL, as they open local
files by path (``readers.sample.open_sample``), and the acting commands plan against the ETags
that listing saw. Both find the bucket and the object here. Only URLs under a bucket this process
listed are routed to a store: a local path that merely looks like a URL is never sent anywhere.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, TypeVar

from ckptdoctor.errors import StoreError as StoreError  # its home is the error taxonomy; imported from here too
from ckptdoctor.stores.urls import Location

if TYPE_CHECKING:
    from ckptdoctor.stores._bucket import Bucket as Bucket
    from ckptdoctor.stores._bucket import ObjectInfo as ObjectInfo
    from ckptdoctor.stores.control_plane import Control as Control


MISSING_EXTRA = (
    "reading object stores needs obstore: pip install 'ckptdoctor[s3]' (with boto3, for AWS profiles and SSO) or 'ckptdoctor[store]'"
)

Key = TypeVar("Key", str, tuple[str, str | None, str | None])
_lock = threading.Lock()
_buckets: dict[str, Bucket] = {}
_reached: dict[tuple[str, str | None, str | None], Bucket] = {}
_objects: dict[str, ObjectInfo] = {}
_controls: dict[str, Control] = {}
_endpoint: list[str | None] = [None]


def configure(endpoint: str | None) -> None:
    """Where S3-compatible servers are reached (``--endpoint-url``); None: the store's own, or
    the environment's (``_bucket.s3_endpoint``). Clients already made keep theirs."""
    _endpoint[0] = endpoint


def bucket(location: Location) -> Bucket:
    """The client for ``location``'s bucket, made once per process."""
    return _client(_buckets, location.root, location, _endpoint[0])


def reached(location: Location, endpoint: str | None) -> Bucket:
    """The client for ``location``'s bucket at ``endpoint``, where another process reached it
    (a task of ``verify --deep --ray``: this process's own credentials), made once per process."""
    return _client(_reached, (location.root, location.account, endpoint), location, endpoint)


def _client(made: dict[Key, Bucket], key: Key, location: Location, endpoint: str | None) -> Bucket:
    with _lock:
        found = made.get(key)
    if found is not None:
        return found
    try:
        from ckptdoctor.stores._bucket import connect  # obstore loads only when a URL is scanned
    except ImportError:
        raise StoreError(f"{location.url}: {MISSING_EXTRA}") from None
    client = connect(location, endpoint)
    with _lock:
        return made.setdefault(key, client)


def control(location: Location) -> Control:
    """S3's control plane for ``location``'s bucket (boto3), made once per process;
    :class:`StoreError` naming the extra where boto3 is missing."""
    with _lock:
        found = _controls.get(location.root)
    if found is not None:
        return found
    from ckptdoctor.stores.control_plane import Control  # boto3 loads only where its calls are needed

    data = bucket(location)
    made = Control(location, data.endpoint, lambda requests: data.traffic.add(requests, 0), data.region)
    with _lock:
        return _controls.setdefault(location.root, made)


def owner(url: str) -> Bucket | None:
    """The bucket of an object a listing of this process showed; None for anything else (a local
    path, even one spelled like a URL, and an object no listing showed)."""
    if "://" not in url:
        return None
    with _lock:
        if url not in _objects:
            return None
        for root, found in _buckets.items():
            if url.startswith(root + "/"):
                return found
    return None


def owner_of_prefix(url: str) -> Bucket | None:
    """The bucket of a folder (a key prefix) a listing of this process showed objects below."""
    listed = listed_under(url)
    return owner(listed[0]) if listed else None


def remember(found: Bucket, objects: list[ObjectInfo]) -> None:
    """What a listing of ``found`` showed, by URL: sizes, ETags and times for the later steps."""
    root = found.location.root + "/"
    with _lock:
        _objects.update((root + info.key, info) for info in objects)


def listed(url: str) -> ObjectInfo | None:
    """The object at ``url`` as the last listing showed it."""
    return _objects.get(url)


def listed_under(url: str) -> list[str]:
    """The URLs of every listed object below the prefix ``url``."""
    prefix = url.rstrip("/") + "/"
    with _lock:
        return [found for found in _objects if found.startswith(prefix)]


def traffic() -> tuple[int, int]:
    """Requests made and bytes received by every bucket so far."""
    with _lock:
        clients = list(_buckets.values())
    return sum(c.traffic.requests for c in clients), sum(c.traffic.received for c in clients)


def forget() -> None:
    """Drop every client, listing and endpoint (tests, and the Python API between calls)."""
    with _lock:
        _buckets.clear()
        _reached.clear()
        _objects.clear()
        _controls.clear()
        _endpoint[0] = None
