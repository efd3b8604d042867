"""One bucket, through obstore: list it, read ranges of its objects, many at once.

Imported only when a URL is scanned: obstore (and boto3, for credentials) never load for a local
run. Every request is counted (``Traffic``), because on a bucket requests and bytes are what a
scan costs, and the report says how many it made.

Errors are told apart by what the store answered (the HTTP status, the error kind), never by one
client's exception classes alone: a missing object is ``FileNotFoundError`` and any other failed
read an ``OSError`` (a reader then calls the file unreadable, never clean); a listing the store
refuses is a :class:`StoreError`, one line that names the fix (exit 2).
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import obstore
from obstore.exceptions import AlreadyExistsError, BaseError, PermissionDeniedError, PreconditionError, UnauthenticatedError

from ckptdoctor.errors import StoreError
from ckptdoctor.stores.urls import PERMISSIONS, Archive, ArchivedObject, Location, Store, bad_endpoint

if TYPE_CHECKING:
    from obstore import GetOptions
    from obstore.store import AzureConfig, ClientConfig, GCSConfig, S3Config

CONCURRENCY = 48
"""Requests in flight at once: a local server and a cloud store alike answer 32-64 best."""
PART = 8 * 1024 * 1024
"""Bytes per ranged GET when an object is read whole: big objects come down in parallel parts."""

T = TypeVar("T")


class Changed(Exception):
    """A conditional read refused: the object is no longer the one asked for."""


class ObjectInfo(NamedTuple):
    """One object as a listing shows it: no request per object is needed for any of it."""

    key: str
    size: int
    etag: str | None
    modified: float
    """Last modified, in seconds since the epoch, by the store's clock."""
    version: str | None


class Traffic:
    """Requests made and bytes received so far (threads add to it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.received = 0

    def add(self, requests: int, received: int) -> None:
        with self._lock:
            self.requests += requests
            self.received += received


class Bucket:
    """A bucket (or container) and the client that reaches it."""

    def __init__(
        self, location: Location, store: Any, endpoint: str | None, region: str | None = None, rebuild: Callable[[str], Any] | None = None
    ) -> None:
        self.location = location
        self.endpoint = endpoint
        self.region = region
        """The S3 region requests are signed for (None for other stores): the bucket's own once
        the store has redirected a request there."""
        self._store = store
        self._rebuild = rebuild
        """The client again for another region (S3 only)."""
        self.traffic = Traffic()
        self._archives: dict[str, Archive] = {}
        self._archive_gates: dict[str, threading.Lock] = {}
        self._archive_lock = threading.Lock()
        self._control: Any = None
        self._control_tried = False

    def objects(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in one recursive listing."""
        found: list[ObjectInfo] = []
        pages = 0
        try:
            for page in obstore.list(self._store, prefix or None, chunk_size=1000):
                pages += 1
                found.extend(_info(meta) for meta in page)
        except (BaseError, ValueError) as error:
            if _UNNAMEABLE in str(error) or isinstance(error, ValueError):  # one key no path can name fails obstore's whole listing
                return self._objects_by_boto3(prefix, _first_line(error))
            if self._moved(error):
                return self.objects(prefix)
            raise StoreError(self.refused("list", prefix, error)) from None
        except FileNotFoundError as error:  # some clients' word for any 404: what the store said decides
            raise StoreError(self.refused("list", prefix, error)) from None
        finally:
            self.traffic.add(max(pages, 1), 0)
        return found

    def _objects_by_boto3(self, prefix: str, why: str) -> list[ObjectInfo]:
        """The listing boto3 makes, which takes any key: the keys no path can name are then
        reported by the listing's reader, and left alone."""
        from ckptdoctor.stores import control_plane  # boto3: only for a bucket holding such a key

        try:
            s3 = control_plane.client(self.location, self.endpoint, self.region)
        except StoreError:
            raise StoreError(f"{self.location.url_of(prefix)}: {why}; to list it, {control_plane.NEEDS_BOTO3}") from None
        found: list[ObjectInfo] = []
        try:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.location.bucket, Prefix=prefix):
                self.traffic.add(1, 0)
                found += [
                    ObjectInfo(item["Key"], item["Size"], item.get("ETag"), item["LastModified"].timestamp(), None)
                    for item in page.get("Contents", [])
                ]
        except Exception as error:  # botocore's: told apart by the status S3 sent
            status, code = control_plane.answer(error)
            raise StoreError(f"{self.location.url_of(prefix)}: the store refused to list it (HTTP {status}, {code})") from None
        return found

    def folders(self, prefix: str) -> list[str]:
        """The "folders" right below ``prefix`` (a key prefix, no slash at its end): one listing
        with a delimiter, whatever they hold (counted as one request: object_store pages it)."""
        try:
            found: Sequence[str] = obstore.list_with_delimiter(self._store, prefix)["common_prefixes"]
        except BaseError as error:
            raise self.failure("list", prefix, error) from None
        finally:
            self.traffic.add(1, 0)
        return [name[len(prefix) + 1 :] for name in found]

    def head(self, key: str) -> ObjectInfo:
        """The object ``key`` as it is now (``FileNotFoundError`` when there is none)."""
        try:
            return _info(self._call(obstore.head, key))
        finally:
            self.traffic.add(1, 0)

    def fetch(self, key: str, limit: int) -> tuple[bytes, ObjectInfo]:
        """The object ``key`` (at most ``limit`` bytes of it) with its ETag, from one answer: what
        is read and the ETag it is compared by cannot be of two different writes."""
        try:
            found = self._call(obstore.get, key, options={"range": (0, limit + 1)})
            data = bytes(found.bytes())
        except BaseError as error:  # the body cut short after the head came
            raise OSError(errno.EIO, self.refused("read", key, error)) from None
        finally:
            self.traffic.add(1, 0)
        self.traffic.add(0, len(data))
        if len(data) > limit:
            raise OSError(errno.EFBIG, f"{self.location.url_of(key)}: longer than {limit:,} bytes")
        return data, _info(found.meta)

    def create(self, key: str, data: bytes) -> str | None:
        """Write ``key`` only where no object has it (``If-None-Match: *``): its ETag, or None
        where one exists already; ``PermissionError`` where writing is denied."""
        return self._put(key, data, "create")

    def replace(self, key: str, data: bytes, etag: str) -> str | None:
        """Write ``key`` only while its ETag is ``etag`` (``If-Match``): its new ETag, or None
        where it changed (or went) since."""
        return self._put(key, data, {"e_tag": etag})

    def _put(self, key: str, data: bytes, mode: Any) -> str | None:
        self.traffic.add(1, 0)
        try:
            result = obstore.put(self._store, key, data, mode=mode)
        except (AlreadyExistsError, PreconditionError, FileNotFoundError):
            return self._landed(key, data)
        except BaseError as error:
            status = _status(error)
            if status in (409, 412):  # a conditional write refused, however the client names it
                return self._landed(key, data)
            raise self.failure("write", key, error) from None
        etag: str | None = result.get("e_tag")
        if etag is None:
            raise StoreError(f"{self.location.url_of(key)}: the store wrote it but sent no ETag: it cannot be changed safely later")
        return etag

    def _landed(self, key: str, data: bytes) -> str | None:
        """After a conditional write was refused: the ETag of ``key`` where it holds exactly
        ``data`` (the client sent the write again after the answer to the first, which went
        through, was lost on the way), else None (another's write is there, or none)."""
        try:
            found, info = self.fetch(key, len(data))
        except OSError:
            return None
        return info.etag if found == data else None

    def read(self, key: str, start: int, length: int, version: str | None = None, etag: str | None = None) -> bytes:
        """Up to ``length`` bytes of ``key`` from ``start`` (fewer at its end); of its older
        version ``version`` (an S3 ``versionId``) where one is named; ``etag``: only while the
        object's ETag is this one (``If-Match``), else ``OSError`` (``ESTALE``)."""
        if length <= 0:
            return b""
        if version is None and etag is None:
            data = bytes(self._call(obstore.get_range, key, start=start, length=length))
        else:
            options: GetOptions = {"range": (start, start + length)}
            if version is not None:
                options["version"] = version
            if etag is not None:
                options["if_match"] = etag
            try:
                data = bytes(self._call(obstore.get, key, options=options).bytes())
            except Changed:
                raise OSError(
                    errno.ESTALE, f"{self.location.url_of(key)} changed since it was listed: its ETag is no longer {etag}"
                ) from None
        self.traffic.add(1, len(data))
        return data

    def read_many(self, ranges: Sequence[tuple[str, int, int]]) -> list[bytes | OSError]:
        """Each ``(key, start, length)`` read, ``CONCURRENCY`` at a time; a read that failed is
        its error, in its place."""
        return run(self._gather([self._read_async(key, start, length) for key, start, length in ranges]))

    def read_into(self, key: str, size: int, write: Callable[[int, bytes], object]) -> None:
        """The whole object, in parallel ``PART``-sized ranges, each handed to ``write(offset,
        data)`` as it arrives; ``OSError`` when any range failed or came back short (the object
        changed or was cut while it was read)."""
        starts = list(range(0, size, PART))

        async def part(start: int) -> None:
            length = min(PART, size - start)
            data = await self._read_async(key, start, length)
            if len(data) != length:
                raise OSError(errno.EIO, f"{len(data):,} bytes where {length:,} were listed at {start:,}: it changed while it was read")
            write(start, data)

        for result in run(self._gather([part(start) for start in starts])):
            if isinstance(result, OSError):
                raise result

    async def _read_async(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        try:
            data = bytes(await obstore.get_range_async(self._store, key, start=start, length=length))
        except FileNotFoundError:
            self.traffic.add(1, 0)
            raise FileNotFoundError(errno.ENOENT, "no such object", self.location.url_of(key)) from None
        except BaseError as error:
            self.traffic.add(1, 0)
            if _code(error) == _ARCHIVED:
                raise await asyncio.to_thread(self.archived, key, error) from None
            raise OSError(errno.EIO, self.refused("read", key, error)) from None
        self.traffic.add(1, len(data))
        return data

    @staticmethod
    async def _gather(jobs: list[Awaitable[T]]) -> list[T | OSError]:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def gated(job: Awaitable[T]) -> T | OSError:
            async with gate:
                try:
                    return await job
                except OSError as error:
                    return error

        return await asyncio.gather(*(gated(job) for job in jobs))

    def _call(self, function: Callable[..., T], key: str, **arguments: Any) -> T:
        try:
            return function(self._store, key, **arguments)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "no such object", self.location.url_of(key)) from None
        except BaseError as error:
            if isinstance(error, PreconditionError) or _status(error) == 412:  # however the client names it
                raise Changed from None
            if _code(error) == _ARCHIVED:
                raise self.archived(key, error) from None
            raise OSError(errno.EIO, self.refused("read", key, error)) from None

    def archived(self, key: str, error: BaseException) -> ArchivedObject:
        """The error of a read S3 refused because ``key`` is archived (``InvalidObjectState``):
        the class its answer names, and whether a restore is under way, from one HEAD through
        boto3 per object (obstore's listing and HEAD say neither), made once for all its reads."""
        said = Archive(_tagged("StorageClass", error) or "GLACIER", _tagged("AccessTier", error))
        with self._archive_lock:
            gate = self._archive_gates.setdefault(key, threading.Lock())
        with gate:
            found = self._archives.get(key)
            if found is None:
                found = self._archives[key] = self._head_archive(key, said)
        return ArchivedObject(self.location.url_of(key), found)

    def _head_archive(self, key: str, said: Archive) -> Archive:
        from ckptdoctor.stores import control_plane  # boto3: only for a bucket holding an archived object

        with self._archive_lock:
            if not self._control_tried:  # the client, made once
                self._control_tried = True
                try:
                    self._control = control_plane.Control(self.location, self.endpoint, lambda requests: self.traffic.add(requests, 0))
                except StoreError:  # no boto3: the class the read named; whether a restore is under way is not known
                    self._control = None
            control = self._control
        return control.archive(key, said) if control is not None else said

    def first(self, prefix: str) -> ObjectInfo | None:
        """The first object whose key starts with ``prefix`` (one listing request), None for
        none; ``PermissionError`` where listing is denied, :class:`StoreError` where the bucket
        cannot be used at all (none, bad credentials, unreachable)."""
        try:
            for page in obstore.list(self._store, prefix or None, chunk_size=1):
                return _info(page[0]) if page else None
            return None
        except (FileNotFoundError, BaseError) as error:  # a 404 is told apart by what the store said
            if self._moved(error):
                return self.first(prefix)
            raise self.failure("list", prefix, error) from None
        finally:
            self.traffic.add(1, 0)

    def delete(self, key: str) -> None:
        """Delete ``key`` whatever it holds (a missing key is no error); ``PermissionError``
        where deleting is denied. Only for keys no one else writes (``diskcheck``'s probe)."""
        try:
            obstore.delete(self._store, key)
        except FileNotFoundError:
            return
        except BaseError as error:
            raise self.failure("delete", key, error) from None
        finally:
            self.traffic.add(1, 0)

    def first_byte(self, key: str) -> bytes:
        """The first byte of ``key`` (a ranged read); ``PermissionError`` where reading is denied."""
        try:
            data = bytes(obstore.get_range(self._store, key, start=0, length=1))
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "no such object", self.location.url_of(key)) from None
        except BaseError as error:
            raise self.failure("read", key, error) from None
        finally:
            self.traffic.add(1, 0)
        self.traffic.add(0, len(data))
        return data

    def failure(self, what: str, key: str, error: BaseException) -> Exception:
        """What a refused ``what`` of ``key`` is: :class:`StoreError` where the bucket cannot be
        used at all (bad credentials, no such bucket, unreachable), ``PermissionError`` where
        only this is denied, else ``OSError``; each with :meth:`refused`'s line."""
        message = self.refused(what, key, error)
        status, code = _status(error), _code(error)
        if isinstance(error, UnauthenticatedError) or status == 401 or code in _BAD_CREDENTIALS or code == "NoSuchBucket":
            return StoreError(message)
        if _not_s3(error, what):
            return StoreError(message)
        if status is None and not isinstance(error, PermissionDeniedError) and code != "AccessDenied":
            return StoreError(message)
        if isinstance(error, PermissionDeniedError) or status == 403 or code == "AccessDenied":
            return PermissionError(errno.EACCES, message)
        return OSError(errno.EIO, message)

    def _moved(self, error: BaseException) -> bool:
        """Whether the store redirected the request to the bucket's region (S3's 301
        PermanentRedirect, which names the region only in a header obstore does not read) and
        the client now signs for that region: asked once, by an unsigned HEAD of the bucket,
        whose answer carries ``x-amz-bucket-region`` whatever its status (as boto3 and s3fs
        find a bucket's region)."""
        if self._rebuild is None or not _WRONG_REGION.search(str(error)):
            return False
        region = _bucket_region(self.location.bucket, self.endpoint)
        if region is None or region == self.region:
            return False
        rebuild = self._rebuild
        self._store = _built(self.location, lambda: rebuild(region))
        self.region = region
        return True

    def _permission(self, what: str, error: BaseException) -> str:
        """The permission to grant for a denied ``what``: the KMS key's where S3 says its key
        refused (an SSE-KMS object needs kms:Decrypt besides s3:GetObject, and S3 often says
        only "Access Denied" for either)."""
        if self.location.store is Store.S3 and _KMS.search(_message(error)):
            return "kms:Decrypt on the bucket's KMS key (its key policy, or IAM)"
        permission = PERMISSIONS[what][self.location.store]
        if self.location.store is Store.S3 and what == "read":
            return f"{permission} (and kms:Decrypt on its KMS key where the bucket encrypts with one)"
        return permission

    def _endpoint_setting(self) -> str:
        """Where this bucket's endpoint was set, in the words to change it by."""
        if self.location.store is Store.S3 and self.endpoint:
            named = next((name for name in S3_ENDPOINT_VARIABLES if os.environ.get(name) == self.endpoint), None)
            if named is not None:
                return named
        return "--endpoint-url" if self.endpoint else "--endpoint-url / AWS_ENDPOINT_URL"

    def refused(self, what: str, key: str, error: BaseException) -> str:
        """One line on why the store refused to ``what`` ``key``, and what to do about it."""
        where = self.location.url_of(key) if key else self.location.root
        status = _status(error)
        code = _code(error)
        if _NO_TOKEN in str(error):  # the token service (a metadata server, OAuth) answered no, or not at all
            return f"{where}: no access token could be had ({f'HTTP {status}' if status else _first_line(error)}): {_CREDENTIALS[self.location.store]}"
        if _not_s3(error, what):  # a web page's 401 or 403 is no S3 refusal either
            reach = _without_secrets(self.endpoint) if self.endpoint else "the store"
            return (
                f"{where}: {reach} answered HTTP {status} to {_REQUESTS.get(what, what)}, which is not an S3 answer: "
                f"is {self._endpoint_setting()} the S3 API's address?"
            )
        if isinstance(error, UnauthenticatedError) or status == 401 or code in _BAD_CREDENTIALS:
            return f"{where}: the store did not accept the credentials ({code or status}): {_CREDENTIALS[self.location.store]}"
        if isinstance(error, PermissionDeniedError) or status == 403 or code == "AccessDenied":
            return f"{where}: permission denied to {what} ({code or 403}): grant {self._permission(what, error)}"
        if code == "NoSuchBucket":
            return f"{self.location.root}: no such bucket (the store answered NoSuchBucket)"
        if _WRONG_REGION.search(str(error)):
            return (
                f"{where}: the store redirected the request: the bucket is not in {self.region}: set AWS_REGION to its region "
                f"(`aws s3api get-bucket-location --bucket {self.location.bucket}`)"
            )
        if status is None and _UNREACHED.search(str(error)):
            reach = _without_secrets(self.endpoint) if self.endpoint else "the store"
            return f"{where}: cannot reach {reach} ({_first_line(error)}): check the network and {self._endpoint_setting()}"
        if status is None:
            return f"{where}: the store's answer could not be used ({_first_line(error)})"
        return f"{where}: the store refused to {what} it (HTTP {status}{f', {code}' if code else ''})"


def run(job: Awaitable[T]) -> T:
    """Run a coroutine to its end from ordinary code, in this thread or, where an event loop
    already runs here (a notebook), in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(job)  # type: ignore[arg-type]
    result: list[T] = []
    failure: list[BaseException] = []

    def in_thread() -> None:
        try:
            result.append(asyncio.run(job))  # type: ignore[arg-type]
        except BaseException as error:  # carried back to the caller's thread, raised there
            failure.append(error)

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def _info(meta: Any) -> ObjectInfo:
    modified = meta["last_modified"]
    return ObjectInfo(meta["path"], meta["size"], meta.get("e_tag"), modified.timestamp(), meta.get("version"))


_STATUS = re.compile(r"status code: (\d{3})")
_UNREACHED = re.compile(r"error sending request|connect|timed out|dns error|Connection refused", re.IGNORECASE)
_UNNAMEABLE = "Encountered object with invalid path"
_ARCHIVED = "InvalidObjectState"
"""S3's code for a read of an object in an archive tier that is not restored (HTTP 403)."""
_NO_TOKEN = "Error performing token request"
"""object_store's words where it asked for a token (a metadata server, an OAuth endpoint) and got none."""
_CODE = re.compile(r"<Code>([A-Za-z.]+)</Code>|\(code: ([A-Za-z.]+)\)")
"""S3's error code (``KMS.DisabledException`` has a dot)."""
_BAD_CREDENTIALS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "AuthenticationFailed"})
_CREDENTIALS = {
    Store.S3: "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (with ckptdoctor[s3] installed), or run `aws sso login`",
    Store.GCS: "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key, or run `gcloud auth application-default login`",
    Store.AZURE: "set AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN, or run `az login` with AZURE_USE_AZURE_CLI=true",
}


_WRONG_REGION = re.compile(r"redirect without LOCATION|PermanentRedirect|AuthorizationHeaderMalformed|status code: 301")
"""obstore's and S3's words where a request went to another region than the bucket's."""
_KMS = re.compile(r"\bkms\b|ciphertext|customer master key", re.IGNORECASE)
"""What S3's 403 says where the object's KMS key, not the bucket, refused: "not authorized to
perform: kms:Decrypt", "The ciphertext refers to a customer master key that does not exist"."""
_ANSWER = re.compile(r"status code: \d{3}[^:]*: (.*?)(?:\n\nDebug source:|$)", re.DOTALL)
_MESSAGE = re.compile(r"<Message>(.*?)</Message>", re.DOTALL)
_REQUESTS = {"list": "a listing", "read": "a read", "write": "a write", "delete": "a delete"}


def _body(error: BaseException) -> str:
    """The body of the store's answer, as the client's error quotes it ("" for none)."""
    match = _ANSWER.search(str(error))
    return match.group(1).strip() if match else ""


def _message(error: BaseException) -> str:
    """The ``<Message>`` of an S3 error answer ("" for none)."""
    match = _MESSAGE.search(_body(error))
    return match.group(1) if match else ""


def _not_s3(error: BaseException, what: str) -> bool:
    """Whether the answer came from something other than an S3 API (a web page, a console, a
    wrong port): an error status with no S3 error code, and a body that is not S3's XML (any
    body S3 sends to a refused GET is XML; a HEAD's answer has no body and proves nothing)."""
    status, body = _status(error), _body(error)
    if status is None or status < 300 or _code(error) is not None:
        return False
    if body:
        return not body.lstrip().startswith("<?xml") and "<Error>" not in body
    return what == "list"


def _status(error: BaseException) -> int | None:
    match = _STATUS.search(str(error))
    return int(match.group(1)) if match else None


def _code(error: BaseException) -> str | None:
    match = _CODE.search(str(error))
    return (match.group(1) or match.group(2)) if match else None


def _bucket_region(bucket: str, endpoint: str | None) -> str | None:
    """The region S3 says ``bucket`` is in (its ``x-amz-bucket-region`` header to an unsigned
    HEAD of the bucket, which S3 sends with a 200, 301 or 403 alike); None where none is said."""
    import urllib.error  # only where a store redirected a request: no scan loads them otherwise
    import urllib.request

    url = f"{endpoint.rstrip('/')}/{bucket}" if endpoint else f"https://{bucket}.s3.amazonaws.com"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10) as answer:
            region: str | None = answer.headers.get("x-amz-bucket-region")
    except urllib.error.HTTPError as refused:
        region = refused.headers.get("x-amz-bucket-region")
    except (OSError, ValueError):
        return None
    return region


def _tagged(tag: str, error: BaseException) -> str | None:
    """The text of ``<tag>`` in the XML body of the store's answer (S3's ``<StorageClass>``)."""
    match = re.search(f"<{tag}>([A-Z_]+)</{tag}>", str(error))
    return match.group(1) if match else None


def _without_secrets(endpoint: str) -> str:
    """An endpoint as it may be printed: any ``user:password@`` in it left out."""
    scheme, sep, rest = endpoint.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host.rpartition('@')[2]}{slash}{path}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text.rsplit(" - ", 1)[-1][:160]


def connect(location: Location, endpoint: str | None = None) -> Bucket:
    """A client for ``location``'s bucket: the store's own credential chain, and ``endpoint``
    (else :func:`s3_endpoint`'s) for S3-compatible servers and emulators."""
    if location.store is Store.S3:
        return _s3(location, _checked(s3_endpoint(endpoint), endpoint))
    if location.store is Store.GCS:
        return _gcs(location, endpoint)
    return _azure(location, endpoint)


S3_ENDPOINT_VARIABLES = ("FSSPEC_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
"""Where an S3-compatible server's address is set, first found first: s3fs's order (the run's
writer, for Lightning and every fsspec user): fsspec hands ``FSSPEC_S3_ENDPOINT_URL`` to
``S3FileSystem(endpoint_url=...)``, which passes it to botocore's ``create_client``, and
botocore reads ``AWS_ENDPOINT_URL_S3``, then ``AWS_ENDPOINT_URL``, only where none is passed."""


def s3_endpoint(given: str | None) -> str | None:
    """The S3 endpoint obstore and boto3 (the control plane, through :attr:`Bucket.endpoint`)
    both use: ``given`` (``--endpoint-url``), else the first of :data:`S3_ENDPOINT_VARIABLES`
    set; None for AWS itself."""
    return given or next((os.environ[name] for name in S3_ENDPOINT_VARIABLES if os.environ.get(name)), None)


def _checked(endpoint: str | None, given: str | None) -> str | None:
    """``endpoint``, where it is a server's address; else :class:`StoreError` naming where it was set."""
    why = bad_endpoint(endpoint) if endpoint else None
    if why is not None:
        source = "--endpoint-url" if endpoint == given else next(name for name in S3_ENDPOINT_VARIABLES if os.environ.get(name) == endpoint)
        raise StoreError(f"{source}={endpoint}: {why}")
    return endpoint


def _gcs(location: Location, endpoint: str | None) -> Bucket:
    from obstore.store import GCSStore  # each store's client is built only for its URLs

    config: GCSConfig = {"base_url": endpoint} if endpoint else {}
    if not _has_env(_GOOGLE_CREDENTIALS) and not os.path.isfile(_google_adc()):
        if _emulated(endpoint):
            # an emulator checks no token; object_store asks the metadata server for one even
            # with skip_signature (to write or delete), so a stand-in token is sent instead
            config["bearer_token"] = "emulator"
        elif not _on_cloud(_GOOGLE_CLOUD):
            raise StoreError(f"{location.root}: no Google Cloud credentials: {_CREDENTIALS[Store.GCS]}")
    options = _plain_http(endpoint)
    return Bucket(location, _built(location, lambda: GCSStore(location.bucket, config=config, client_options=options)), endpoint)


def _azure(location: Location, endpoint: str | None) -> Bucket:
    from obstore.store import AzureStore  # each store's client is built only for its URLs

    config: AzureConfig = {}
    account = location.account or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME") or os.environ.get("AZURE_STORAGE_ACCOUNT")
    if not _has_env(_AZURE_CREDENTIALS) and _emulated(endpoint):
        # Azurite: its one well-known account and key, published by Microsoft, and the account
        # in the path (http://127.0.0.1:10000/devstoreaccount1) as Azurite's URLs have it
        account = account or _AZURITE_ACCOUNT
        config["account_key"] = _AZURITE_KEY
        endpoint = endpoint if urllib.parse.urlsplit(endpoint or "").path.strip("/") else f"{(endpoint or '').rstrip('/')}/{account}"
    elif not account:
        raise StoreError(f"{location.root}: no Azure storage account: {_CREDENTIALS[Store.AZURE]}")
    elif not _has_env(_AZURE_CREDENTIALS) and not _on_cloud(_AZURE_CLOUD):
        raise StoreError(f"{location.root}: no Azure credentials for the account {account}: {_CREDENTIALS[Store.AZURE]}")
    config["account_name"] = account
    if endpoint:
        config["endpoint"] = endpoint
    options = _plain_http(endpoint)
    return Bucket(location, _built(location, lambda: AzureStore(location.bucket, config=config, client_options=options)), endpoint)


_GOOGLE_CREDENTIALS = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_SERVICE_ACCOUNT",
    "GOOGLE_SERVICE_ACCOUNT_PATH",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "GOOGLE_BEARER_TOKEN",
)
"""What object_store reads Google credentials from, besides gcloud's file and the metadata server."""
_AZURE_CREDENTIALS = (
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_MASTER_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_TOKEN",
    "AZURE_CLIENT_SECRET",
    "AZURE_STORAGE_CLIENT_SECRET",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_FABRIC_TOKEN_SERVICE_URL",
    "AZURE_USE_AZURE_CLI",
    "AZURE_STORAGE_USE_EMULATOR",
    "AZURE_SKIP_SIGNATURE",
    "IDENTITY_ENDPOINT",
    "MSI_ENDPOINT",
    "AZURE_IDENTITY_ENDPOINT",
    "AZURE_MSI_ENDPOINT",
)
"""What object_store reads Azure credentials from, besides the VM's managed identity."""
_GOOGLE_CLOUD = (("/sys/class/dmi/id/product_name", "Google"), ("GCE_METADATA_HOST", ""), ("K_SERVICE", ""), ("CLOUD_RUN_JOB", ""))
_AZURE_CLOUD = (("/sys/class/dmi/id/chassis_asset_tag", "7783-7084-3265-9085-8269-3286-77"),)
"""Where a metadata server answers with credentials: a file that starts with a word (the
machine's firmware says whose cloud it is), or an environment variable the platform sets. Off
these, object_store would ask 169.254.169.254 and wait for it (or be refused by a firewall)."""
_AZURITE_ACCOUNT = "devstoreaccount1"
_AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _has_env(names: Sequence[str]) -> bool:
    return any(os.environ.get(name) for name in names)


def _google_adc() -> str:
    """gcloud's application default credentials, where ``gcloud auth application-default
    login`` writes them and object_store reads them."""
    return os.path.join(os.path.expanduser("~"), ".config", "gcloud", "application_default_credentials.json")


def _emulated(endpoint: str | None) -> bool:
    """An emulator: an endpoint over plain HTTP, to which no real credential is ever sent."""
    return bool(endpoint) and urllib.parse.urlsplit(endpoint or "").scheme == "http"


def _on_cloud(signs: Sequence[tuple[str, str]]) -> bool:
    for where, starts in signs:
        if where.startswith("/"):
            try:
                with open(where, encoding="utf-8", errors="replace") as handle:
                    if handle.read(256).startswith(starts):
                        return True
            except OSError:
                continue
        elif os.environ.get(where):
            return True
    return False


def _s3(location: Location, endpoint: str | None) -> Bucket:
    from obstore.store import S3Store  # each store's client is built only for its URLs

    config: S3Config = {}
    if endpoint:
        config["endpoint"] = endpoint
        config["virtual_hosted_style_request"] = False  # MinIO, Ceph, SeaweedFS: the bucket in the path
    provider, has_boto3 = _boto3_credentials()
    if provider is None and not _has_env(_ENV_CREDENTIALS):
        raise StoreError(
            f"{location.root}: no AWS credentials: "
            + (
                "none in the environment, AWS_PROFILE, SSO or an instance role: run `aws configure` or `aws sso login`, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
                if has_boto3
                else "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or install ckptdoctor[s3] (boto3) to use AWS_PROFILE, SSO and instance roles"
            )
        )
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or _boto3_region() or "us-east-1"

    def build(region: str) -> Any:
        signed: S3Config = {**config, "region": region}
        if provider is not None:
            return S3Store(location.bucket, config=signed, client_options=_plain_http(endpoint), credential_provider=provider)
        return S3Store(location.bucket, config=signed, client_options=_plain_http(endpoint))

    return Bucket(location, _built(location, lambda: build(region)), endpoint, region, build)


def _built(location: Location, build: Callable[[], T]) -> T:
    try:
        return build()
    except (BaseError, ValueError) as error:
        raise StoreError(f"{location.root}: the client could not be set up: {_first_line(error)}") from None


def _plain_http(endpoint: str | None) -> ClientConfig:
    return {"allow_http": True} if endpoint and endpoint.startswith("http://") else {}


_ENV_CREDENTIALS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


def _boto3_credentials() -> tuple[Any, bool]:
    """boto3's credential chain (profiles, SSO, instance roles) for obstore, which reads only the
    environment (None where boto3 finds none); and whether boto3 is installed."""
    try:
        import boto3  # the optional extra: only its credential chain is used here
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError:
        return None, False
    session = boto3.Session()
    if session.get_credentials() is None:
        return None, True
    return Boto3CredentialProvider(session), True


def _boto3_region() -> str | None:
    try:
        import boto3  # the optional extra: the region of the profile in use
    except ImportError:
        return None
    region: str | None = boto3.Session().region_name
    return region
