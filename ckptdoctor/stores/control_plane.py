"""S3's control plane, which obstore has no calls for, through boto3 (the ``s3`` extra).

Incomplete multipart uploads (list, abort), object versions and delete markers, lifecycle rules,
listings holding keys no path can name, and the one write ``prune`` and ``repair`` must make
conditionally but obstore cannot: a delete that removes an object only while its ETag is the one
planned (``If-Match``). Imported only where a command needs it; a missing boto3 is a
:class:`StoreError` naming the extra.

Outcomes are told apart by the HTTP status and the error code S3 sends (412 is "changed since",
404 "gone"), never by botocore's exception classes. Every call is counted in the bucket's traffic.
"""

from __future__ import annotations

import email.utils
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from ckptdoctor.errors import StoreError
from ckptdoctor.stores.urls import Archive, Location, Store

NEEDS_BOTO3 = "pip install 'ckptdoctor[s3]' (boto3)"
T = TypeVar("T")


def client(location: Location, endpoint: str | None, region: str | None = None) -> Any:
    """A boto3 S3 client for ``location``'s bucket: boto3's own credential chain, ``region``
    (the bucket's, as the data plane found it; else boto3's own), ``endpoint`` for S3-compatible servers."""
    if location.store is not Store.S3:
        raise StoreError(f"{location.root}: this needs S3's control plane, which {location.store.value}:// has no client for here")
    try:
        import boto3  # the optional extra, loaded only where the control plane is used
        from botocore.config import Config
    except ImportError:
        raise StoreError(f"{location.root}: this needs boto3: {NEEDS_BOTO3}") from None
    config = Config(retries={"max_attempts": 3, "mode": "standard"}, s3={"addressing_style": "path"} if endpoint else None)
    return boto3.session.Session().client("s3", endpoint_url=endpoint, region_name=region, config=config)


def answer(error: BaseException) -> tuple[int | None, str | None]:
    """The HTTP status and S3 error code of a failed boto3 call (None where it never got one)."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return None, None
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = response.get("Error", {}).get("Code")
    return (status if isinstance(status, int) else None), (code if isinstance(code, str) else None)


class Upload(NamedTuple):
    """A multipart upload begun and neither completed nor aborted: no object shows it, yet its
    parts are stored (and billed)."""

    key: str
    upload_id: str
    initiated: float
    """When it began, in seconds since the epoch, by the store's clock."""
    parts_bytes: int
    """Bytes of the parts uploaded so far."""


@dataclass(frozen=True)
class Versions:
    """What a versioned bucket keeps under a prefix besides its current objects."""

    noncurrent: int
    noncurrent_bytes: int
    """Bytes of older versions: a delete on a versioned bucket frees nothing until they expire."""
    delete_markers: int


class Version(NamedTuple):
    """One version of an object, or a delete marker, as a versioned bucket lists it."""

    key: str
    size: int
    latest: bool
    """The current one of its key (for a delete marker: the key reads as deleted)."""
    marker: bool
    version_id: str = ""
    modified: float = 0.0
    """When it was written, in seconds since the epoch, by the store's clock."""


class Checksum(NamedTuple):
    """The checksum of a whole object that the store keeps beside it (``x-amz-checksum-*``)."""

    algorithm: str
    """As S3 names it: ``SHA256``, ``SHA1``, ``CRC32``, ``CRC32C``, ``CRC64NVME``."""
    value: str
    """Base64 of the digest, as S3 sends it."""


class Deleted(enum.Enum):
    """What a conditional delete did."""

    DELETED = "deleted"
    CHANGED = "changed"
    """Not deleted: the object is no longer the one planned (412)."""
    GONE = "gone"
    """Not there any more (404)."""


class Control:
    """The control plane of one bucket, for the commands that need it."""

    def __init__(self, location: Location, endpoint: str | None, count: Callable[[int], None], region: str | None = None) -> None:
        self.location = location
        self._s3 = client(location, endpoint, region)
        self._count = count
        self.server_date: float | None = None
        """The store's clock (its ``Date`` header) at the last answer: ages are measured by it."""

    def _call(self, what: str, operation: str, **arguments: Any) -> Any:
        self._count(1)
        try:
            result = getattr(self._s3, operation)(Bucket=self.location.bucket, **arguments)
        except Exception as error:  # botocore's: told apart by the status and code S3 sent
            status, code = answer(error)
            if status is None:
                raise StoreError(f"{self.location.root}: cannot reach the store to {what} ({error})") from None
            raise _StoreRefused(status, code, f"{self.location.root}: the store refused to {what} (HTTP {status}, {code})") from None
        self._remember_date(result)
        return result

    def _remember_date(self, result: Any) -> None:
        date = result.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date") if isinstance(result, dict) else None
        if date:
            parsed = email.utils.parsedate_to_datetime(date)
            self.server_date = parsed.timestamp()

    def _pages(self, what: str, operation: str, items: str, token: tuple[str, ...], **arguments: Any) -> list[dict[str, Any]]:
        """Every item of a paged listing (``token``: the response's names of the next page's
        markers, then the request's)."""
        found: list[dict[str, Any]] = []
        extra: dict[str, Any] = {}
        while True:
            page = self._call(what, operation, **arguments, **extra)
            found += page.get(items, [])
            if not page.get("IsTruncated"):
                return found
            half = len(token) // 2
            extra = {token[half + i]: page.get(token[i]) for i in range(half) if page.get(token[i]) is not None}
            if not extra:
                return found

    def now(self) -> float:
        """The store's clock (the ``Date`` of its answer to one light request): what ages of
        objects are measured by, never the local clock."""
        self._call("reach the bucket", "head_bucket")
        if self.server_date is None:
            raise StoreError(f"{self.location.root}: the store sent no Date: object ages cannot be measured by its clock")
        return self.server_date

    def uploads(self, prefix: str) -> list[Upload]:
        """Every incomplete multipart upload whose key starts with ``prefix``, with its parts' bytes."""
        listed = self._pages(
            "list its multipart uploads", "list_multipart_uploads", "Uploads", ("NextKeyMarker", "NextUploadIdMarker", "KeyMarker", "UploadIdMarker"),
            Prefix=prefix,
        )  # fmt: skip
        found: list[Upload] = []
        for item in listed:
            parts = self._pages(
                "list an upload's parts", "list_parts", "Parts", ("NextPartNumberMarker", "PartNumberMarker"),
                Key=item["Key"], UploadId=item["UploadId"],
            )  # fmt: skip
            found.append(Upload(item["Key"], item["UploadId"], item["Initiated"].timestamp(), sum(part.get("Size", 0) for part in parts)))
        return found

    def abort(self, upload: Upload) -> bool:
        """Abort an incomplete upload; False where it is gone already (completed or aborted since)."""
        try:
            self._call("abort a multipart upload", "abort_multipart_upload", Key=upload.key, UploadId=upload.upload_id)
        except _StoreRefused as refused:
            if refused.status == 404:
                return False
            raise StoreError(str(refused)) from None
        return True

    def versioning(self) -> str | None:
        """``Enabled``, ``Suspended``, or None for a bucket that was never versioned."""
        status: str | None = self._call("read its versioning", "get_bucket_versioning").get("Status")
        return status

    def versions(self, prefix: str) -> Versions:
        """The older versions and delete markers kept under ``prefix``."""
        pages = self._versions_pages(prefix)
        noncurrent = [item for item in pages[0] if not item.get("IsLatest")]
        return Versions(len(noncurrent), sum(item.get("Size", 0) for item in noncurrent), len(pages[1]))

    def kept(self, prefix: str) -> list[Version]:
        """Every version and delete marker under ``prefix``, each with its key: the current ones too."""
        versions, markers = self._versions_pages(prefix)
        found = [_version(item, False) for item in versions]
        return found + [_version(item, True) for item in markers]

    def checksum(self, key: str, version_id: str) -> Checksum | None:
        """The checksum of the whole of ``key``'s version ``version_id`` the store keeps (one
        HeadObject with ``ChecksumMode``); None where it keeps none, or only a checksum of checksums
        of its parts (``COMPOSITE``, ``-N``), which no read of the object alone reproduces."""
        head = self._call("read an object's checksum", "head_object", Key=key, VersionId=version_id, ChecksumMode="ENABLED")
        if head.get("ChecksumType") == "COMPOSITE":
            return None
        for algorithm in _CHECKSUMS:
            value = head.get(f"Checksum{algorithm}")
            if isinstance(value, str) and "-" not in value:
                return Checksum(algorithm, value)
        return None

    def _versions_pages(self, prefix: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        versions: list[dict[str, Any]] = []
        markers: list[dict[str, Any]] = []
        extra: dict[str, Any] = {}
        while True:
            page = self._call("list its object versions", "list_object_versions", Prefix=prefix, **extra)
            versions += page.get("Versions", [])
            markers += page.get("DeleteMarkers", [])
            if not page.get("IsTruncated"):
                return versions, markers
            extra = {"KeyMarker": page.get("NextKeyMarker"), "VersionIdMarker": page.get("NextVersionIdMarker")}

    def lifecycle(self) -> list[dict[str, Any]]:
        """The bucket's lifecycle rules (none where it has no configuration)."""
        try:
            rules: list[dict[str, Any]] = self._call("read its lifecycle rules", "get_bucket_lifecycle_configuration").get("Rules", [])
        except _StoreRefused as refused:
            if refused.code == "NoSuchLifecycleConfiguration" or refused.status == 404:
                return []
            raise StoreError(str(refused)) from None
        return rules

    def copy_if_match(self, source: str, target: str, etag: str, *, over: str | None = None) -> str | None:
        """Copy ``source`` (only while its ETag is ``etag``) to ``target``: only where no object
        is there, or with ``over``, only while the one there has that ETag. The new object's ETag,
        or None where a condition failed (412) or the source is gone (404). Objects over 5 GiB,
        which one CopyObject cannot take, are copied in parts under the same source condition."""
        condition = {"IfMatch": over} if over is not None else {"IfNoneMatch": "*"}
        try:
            if self._size(source) > MAX_COPY:
                return self._copy_in_parts(source, target, etag, over)
            result = self._call(
                "copy an object", "copy_object", Key=target, CopySource={"Bucket": self.location.bucket, "Key": source},
                CopySourceIfMatch=etag, **condition,
            )  # fmt: skip
        except _StoreRefused as refused:
            if refused.status == 412:
                return self._copied_before(target, etag)
            if refused.status in (404, 409):
                return None
            raise StoreError(str(refused)) from None
        copied: str | None = result.get("CopyObjectResult", {}).get("ETag")
        return quoted(copied) if copied else None

    def _copied_before(self, target: str, etag: str) -> str | None:
        """After a copy's condition was refused (412): the target's ETag where it already holds
        the source's bytes (ETag ``etag``: the copy went through, and the answer to it was lost on
        the way, so the client sent it again), else None."""
        try:
            found = self._call("look for an object", "head_object", Key=target).get("ETag")
        except _StoreRefused:
            return None
        return quoted(found) if found and quoted(found) == quoted(etag) else None

    def _size(self, key: str) -> int:
        size: int = self._call("read an object's size", "head_object", Key=key).get("ContentLength", 0)
        return size

    def _copy_in_parts(self, source: str, target: str, etag: str, over: str | None) -> str | None:
        """A copy over 5 GiB: boto3's managed copy (UploadPartCopy), each part under ``etag``."""
        from boto3.s3.transfer import TransferConfig  # the managed copy: only for objects over 5 GiB

        if over is None:
            try:
                self._call("look for an object", "head_object", Key=target)
                return None  # something is there already: never overwritten
            except _StoreRefused as refused:
                if refused.status != 404:
                    raise
        self._count(1)
        try:
            self._s3.copy(
                {"Bucket": self.location.bucket, "Key": source}, self.location.bucket, target,
                ExtraArgs={"CopySourceIfMatch": etag}, Config=TransferConfig(multipart_threshold=MAX_COPY, multipart_chunksize=PART_COPY),
            )  # fmt: skip
        except Exception as error:  # botocore's: told apart by the status S3 sent
            status, _ = answer(error)
            if status in (404, 412):
                return None
            raise StoreError(f"{self.location.root}: the store refused to copy {source} (HTTP {status})") from None
        copied: str | None = self._call("read an object's ETag", "head_object", Key=target).get("ETag")
        return quoted(copied) if copied else None

    def archive(self, key: str, said: Archive) -> Archive:
        """What one HEAD of an archived object says (``said``: what its failed read said): its
        class, Intelligent-Tiering's tier (``ArchiveStatus``), and whether a restore is under way
        (``Restore: ongoing-request="true"``); ``said`` as it is where the HEAD is refused."""
        try:
            head = self._call("read an object's storage class", "head_object", Key=key)
        except StoreError:
            return said
        restore = head.get("Restore") or ""
        return Archive(
            head.get("StorageClass") or said.storage_class,
            head.get("ArchiveStatus") or said.tier,
            'ongoing-request="true"' in restore.replace(" ", ""),
        )

    def delete_if_match(self, key: str, etag: str) -> Deleted:
        """Delete ``key`` only while its ETag is ``etag`` (``If-Match``): anything rewritten since
        the plan is kept."""
        try:
            self._call("delete an object", "delete_object", Key=key, IfMatch=etag)
        except _StoreRefused as refused:
            if refused.status == 412:
                return self._why_refused(key)
            if refused.status == 404:
                return Deleted.GONE
            raise StoreError(str(refused)) from None
        return Deleted.DELETED

    def _why_refused(self, key: str) -> Deleted:
        """A delete's ``If-Match`` refused (412): where nothing is there any more, the object is
        gone, not changed. S3-compatible stores answer 412 for an ``If-Match`` on no object, and a
        delete retried after its first answer was lost on the way meets exactly that."""
        try:
            self._call("look for an object", "head_object", Key=key)
        except _StoreRefused as refused:
            if refused.status == 404:
                return Deleted.GONE
            raise StoreError(str(refused)) from None
        return Deleted.CHANGED

    def attempt(self, what: str, operation: str, **arguments: Any) -> Attempt:
        """One call made to see whether the store allows it (``diskcheck``'s probes): what it
        answered, refused or not; :class:`StoreError` only where it could not be reached."""
        try:
            result = self._call(what, operation, **arguments)
        except _StoreRefused as refused:
            return Attempt(refused.status, refused.code, {})
        status = result.get("ResponseMetadata", {}).get("HTTPStatusCode", 200)
        return Attempt(status if isinstance(status, int) else 200, None, result)


def _version(item: dict[str, Any], marker: bool) -> Version:
    modified = item.get("LastModified")
    return Version(
        item["Key"], 0 if marker else item.get("Size", 0), bool(item.get("IsLatest")), marker, item.get("VersionId") or "",
        modified.timestamp() if modified is not None else 0.0,
    )  # fmt: skip


_CHECKSUMS = ("SHA256", "SHA1", "CRC32", "CRC32C", "CRC64NVME")
"""The whole-object checksums S3 keeps, the strongest first."""


class Attempt(NamedTuple):
    """What the store answered to one probing call."""

    status: int
    code: str | None
    """S3's error code (``AccessDenied``, ``NoSuchUpload``); None where the call went through."""
    result: dict[str, Any]

    @property
    def denied(self) -> bool:
        return self.status == 403 or self.code == "AccessDenied"

    @property
    def succeeded(self) -> bool:
        return 200 <= self.status < 300


MAX_COPY = 5 * 1024**3
"""The largest object one CopyObject takes."""
PART_COPY = 512 * 1024**2


def quoted(etag: str) -> str:
    """An ETag as listings and HEAD give it, in double quotes (some servers leave them off in a
    copy's answer): ETags are compared in this one form."""
    return etag if etag.startswith('"') else f'"{etag}"'


class _StoreRefused(StoreError):
    """The store answered with an error: a one-line :class:`StoreError` wherever no caller tells
    its status apart."""

    def __init__(self, status: int, code: str | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
