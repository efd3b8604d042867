"""Object-store URLs, parsed without any client: which store, which bucket, which prefix.

A path the user gives is a URL when it starts with a scheme (``s3://``); a local folder of that
very name wins, as it always has (``discover.remote``). ``file://`` URLs are local paths and are
scanned as such. Every other scheme is refused by name, so a typo never reaches a client.
"""

from __future__ import annotations

import enum
import errno
import re
import urllib.parse
from typing import NamedTuple

from ckptdoctor.errors import InvalidValue


class Store(enum.Enum):
    S3 = "s3"
    GCS = "gs"
    AZURE = "az"


PERMISSIONS: dict[str, dict[Store, str]] = {
    "list": {Store.S3: "s3:ListBucket", Store.GCS: "storage.objects.list", Store.AZURE: "the Storage Blob Data Reader role"},
    "read": {Store.S3: "s3:GetObject", Store.GCS: "storage.objects.get", Store.AZURE: "the Storage Blob Data Reader role"},
    "write": {Store.S3: "s3:PutObject", Store.GCS: "storage.objects.create", Store.AZURE: "the Storage Blob Data Contributor role"},
    "delete": {Store.S3: "s3:DeleteObject", Store.GCS: "storage.objects.delete", Store.AZURE: "the Storage Blob Data Contributor role"},
    "list uploads": {Store.S3: "s3:ListBucketMultipartUploads"},
    "abort uploads": {Store.S3: "s3:AbortMultipartUpload"},
}
"""What each store calls the permission to do each thing ckptdoctor does to a bucket."""


class Archive(NamedTuple):
    """Where an object that cannot be read before a restore is kept (S3's ``InvalidObjectState``),
    as the store said it: the failed read names the class (and Intelligent-Tiering's tier), one
    HEAD whether a restore is under way."""

    storage_class: str
    """``GLACIER``, ``DEEP_ARCHIVE`` or ``INTELLIGENT_TIERING``."""
    tier: str | None = None
    """Intelligent-Tiering's archive tier (``ARCHIVE_ACCESS``, ``DEEP_ARCHIVE_ACCESS``); None for the others."""
    restoring: bool | None = None
    """A restore was requested and has not finished (HEAD's ``Restore: ongoing-request="true"``);
    None: not known (no HEAD could be made: boto3 missing, or refused)."""


class ArchivedObject(OSError):
    """A read refused because the object is archived and not restored: no damage, and no
    permission this user lacks (readers call the file archived, never unreadable)."""

    def __init__(self, url: str, archive: Archive) -> None:
        super().__init__(errno.EIO, f"{url} is archived ({archive.storage_class}) and not restored")
        self.archive = archive


_SCHEMES = {"s3": Store.S3, "s3a": Store.S3, "gs": Store.GCS, "gcs": Store.GCS, "az": Store.AZURE, "azure": Store.AZURE}
_AZURE_FS = frozenset({"abfs", "abfss"})
SUPPORTED = "s3://, gs://, az:// (abfs://) and file://"

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
"""What S3, GCS and Azure all accept as a bucket or container name (3 to 63 characters)."""


class BadURL(InvalidValue):
    """A URL ckptdoctor cannot read a run from; the message says why and what it accepts."""


class Location(NamedTuple):
    """Where a run is in an object store: the bucket and the key prefix below it (no slashes at
    either end; empty for the whole bucket). (A NamedTuple: defined at every start of a scan, and
    a frozen dataclass costs a millisecond more.)"""

    store: Store
    bucket: str
    prefix: str
    account: str | None = None
    """The Azure storage account an ``abfs://container@account.dfs.core.windows.net`` URL names."""

    @property
    def root(self) -> str:
        """The bucket as a URL, with no slash at its end: every object's URL starts with it."""
        return f"{self.store.value}://{self.bucket}"

    @property
    def url(self) -> str:
        return f"{self.root}/{self.prefix}" if self.prefix else self.root

    def url_of(self, key: str) -> str:
        """The URL of the object ``key`` of this bucket."""
        return f"{self.root}/{key}"

    def key_of(self, url: str) -> str:
        """The key of an object of this bucket, from its URL."""
        if not url.startswith(self.root + "/"):
            raise BadURL(f"{url} is not in {self.root}")
        return url[len(self.root) + 1 :]


def scheme(path: str) -> str | None:
    """The scheme a path starts with (``s3``), lower-cased; None for a plain path."""
    match = _SCHEME.match(path)
    return match.group(1).lower() if match else None


def in_store(path: str) -> bool:
    """Whether ``path`` is spelled as a store URL (``s3://``, ``gs://``, ``az://``, ``abfs://``):
    what ckptdoctor says of it is in a bucket's words, not a disk's."""
    name = scheme(path)
    return name in _SCHEMES or name in _AZURE_FS


def local_path(path: str) -> str | None:
    """The local path a ``file://`` URL names (None for anything else)."""
    if scheme(path) != "file":
        return None
    import urllib.parse  # only for a file:// URL: a local scan's start-up does not load it

    parsed = urllib.parse.urlsplit(path)
    if parsed.netloc not in ("", "localhost"):
        raise BadURL(f"{path}: a file:// URL names a local path (file:///path), not the host {parsed.netloc!r}")
    return urllib.parse.unquote(parsed.path) or "/"


def parse(url: str, listed: bool = False) -> Location:
    """The location a store URL names; :class:`BadURL` saying why for anything else. ``listed``:
    a URL this process made from keys a listing showed, where ``?`` and ``#`` are parts of a key
    (a URL typed by a user holding them is refused: it would name a query or a fragment)."""
    name = scheme(url)
    rest = url[len(name) + 3 :] if name else ""
    if name in _AZURE_FS:
        container, _, host = rest.partition("/")[0].partition("@")
        account = host.split(".")[0] if host else None
        return _location(url, Store.AZURE, container, rest.partition("/")[2], account, listed)
    store = _SCHEMES.get(name or "")
    if store is None:
        raise BadURL(f"{url}: not a store ckptdoctor reads (it reads {SUPPORTED})")
    bucket, _, prefix = rest.partition("/")
    return _location(url, store, bucket, prefix, None, listed)


def _location(url: str, store: Store, bucket: str, prefix: str, account: str | None, listed: bool) -> Location:
    if not _BUCKET.fullmatch(bucket):
        raise BadURL(f"{url}: {bucket!r} is not a bucket name (3 to 63 lower-case letters, digits, dots and dashes)")
    if not listed and ("?" in prefix or "#" in prefix):
        raise BadURL(f"{url}: a query or fragment is not part of a run's path")
    parts = [part for part in prefix.split("/") if part]
    if any(part in (".", "..") for part in parts):
        raise BadURL(f"{url}: '.' and '..' are not folders in a bucket; name the run's prefix as its keys spell it")
    return Location(store, bucket, "/".join(parts), account)


def bad_endpoint(endpoint: str) -> str | None:
    """Why ``endpoint`` is not a server's address (None where it is one): an ``http://`` or
    ``https://`` URL with a host, no spaces, and any port from 1 to 65535. (obstore's client
    panics on the rest, out of reach of its error handling.)"""
    try:
        parts = urllib.parse.urlsplit(endpoint)
        port = parts.port
    except ValueError as error:
        return f"not a URL ({error})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "give the server's http:// or https:// URL"
    if any(character.isspace() for character in endpoint):
        return "a URL holds no spaces"
    if port == 0:
        return "port 0 is no server's"
    return None
