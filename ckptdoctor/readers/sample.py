"""The bytes a reader may look at: a file's head and tail, more only when a format asks.

Readers are pure functions of a :class:`Sample`. ``inspect`` hands them a file-backed sample
that reads the first and last few KiB and, when a format declares a longer header (burnpack
metadata, a safetensors header), exactly that header. Tests and fuzzers hand them bytes.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import io
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar, cast

from ckptdoctor.regular import open_to_read
from ckptdoctor.stores import session, urls

if TYPE_CHECKING:
    from ckptdoctor.stores.session import Bucket

HEAD = 16 * 1024
TAIL = 4 * 1024
TAIL_ZERO = "zero-tail"
"""The fact every read records: ``yes`` where a file's last ``TAIL`` bytes are all zero, else ``no``."""
MAX_HEADER = 16 * 1024 * 1024
"""The longest header a reader may ask for; a declared header beyond this is itself a finding."""
CHUNK = 1024 * 1024
Found = TypeVar("Found")


@dataclass(frozen=True)
class FileAddress:
    """Where a process on another machine reads a sample's bytes itself (``verify --deep
    --ray``): the file at the same absolute path, known by the size, modification time, inode
    and change time it had here, so that a different file there is never taken for it (a file
    renamed over it with its modification time set back keeps neither inode nor change time:
    no call sets those). A shared filesystem gives every node a file's own inode number and
    change time (NFS, Lustre, GPFS: the server's)."""

    path: str
    size: int
    """The file's size when it was opened here."""
    mtime_ns: int
    inode: int = 0
    ctime_ns: int = 0
    base: int = 0
    """Where the sample's first byte lies in the file (a zip member stored whole)."""
    length: int = -1
    """The sample's own size; -1: the whole file."""

    def names(self, found: os.stat_result) -> bool:
        """Whether ``found`` (a stat of the file at ``path``) is the file this address was made of."""
        return (found.st_size, found.st_mtime_ns, found.st_ino, found.st_ctime_ns) == (self.size, self.mtime_ns, self.inode, self.ctime_ns)

    def changed_here(self) -> bool:
        """Whether the file at ``path`` on this machine is no longer the one addressed."""
        try:
            return not self.names(os.stat(self.path))
        except OSError:
            return True


@dataclass(frozen=True)
class ObjectAddress:
    """Where a process on another machine reads an object's bytes itself: the object at ``path``
    (its URL), reached at the endpoint this process reached it at, with that process's own
    credentials. Every read there asks for this ETag (``If-Match``): the store refuses a read
    of any other object at the URL, so another write's bytes are never taken for these."""

    path: str
    size: int
    etag: str
    version: str | None
    """An older version (an S3 ``versionId``); None: the current one."""
    endpoint: str | None
    """The S3-compatible server (or emulator) this process reached; None: the store's own."""
    account: str | None = None
    """The Azure storage account an ``abfs://`` URL named."""
    base: int = 0
    length: int = -1

    def changed_here(self) -> bool:
        """Whether the object at ``path``, as this process reaches it now, is no longer the one addressed."""
        found = session.owner(self.path)
        try:
            return found is None or found.head(found.location.key_of(self.path)).etag != self.etag
        except OSError:
            return True


Address = FileAddress | ObjectAddress


def address_path(os_path: str) -> str:
    """The ``path`` of the address of the file (or listed object) at ``os_path``."""
    return os_path if session.owner(os_path) is not None else os.path.abspath(os_path)


class Sample:
    """A view of one file's bytes; subclasses decide where they come from."""

    size: int

    def head(self, n: int = HEAD) -> bytes:
        """Up to ``n`` bytes from the start (fewer when the file is shorter)."""
        return self.range(0, n)

    def tail(self, n: int = TAIL) -> bytes:
        """Up to the last ``n`` bytes."""
        start = max(0, self.size - n)
        return self.range(start, self.size - start)

    def range(self, offset: int, n: int) -> bytes:
        raise NotImplementedError

    def readinto(self, offset: int, buffer: memoryview) -> int:
        """Fill ``buffer`` from ``offset`` without allocating; returns the bytes read."""
        data = self.range(offset, len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def read_in_order(self) -> None:
        """Say that the whole file is about to be read from start to end (``verify --deep``)."""

    def chunks(self) -> Iterator[bytes]:
        """The whole file, streamed: only for formats that cannot be checked otherwise."""
        offset = 0
        while offset < self.size:
            data = self.range(offset, CHUNK)
            if not data:
                return
            yield data
            offset += len(data)

    def whole(self) -> bytes | None:
        """All of the file's bytes where they are already at hand (a small file), else None."""
        return None

    def address(self) -> Address | None:
        """Where another machine reads these bytes itself; None where it cannot (bytes in memory,
        a decompressed stream)."""
        return None

    def reopened(self) -> str | None:
        """A name by which this process opens this very file again (its descriptor under
        ``/proc``), for C libraries that read a named file twice as fast as through a Python file
        object; offered only while the file's own path still leads to it (libhdf5 resolves that
        path too). None where there is none: bytes, an object in a bucket, a stretch of another
        file, a file deleted or replaced since it was opened.
        """
        return None

    def close(self) -> None:
        """Let go of what the sample holds open (a file, a download)."""

    def __enter__(self) -> Sample:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def held(sample: Sample) -> int:
    """How far into the file the bytes reach that every sample of it reads at once (its head, or
    all of a small file, as ``FileSample`` and ``object_samples`` read them): a check of those
    costs ``inspect`` no read."""
    return sample.size if sample.size <= HEAD + TAIL else HEAD


class BytesSample(Sample):
    """A sample over bytes in memory (tests, fuzzing, decompressed payloads)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.size = len(data)

    def range(self, offset: int, n: int) -> bytes:
        return self._data[offset : offset + max(0, n)]


class FileSample(Sample):
    """A sample over an open file; the first head and tail reads are cached."""

    def __init__(self, fd: int, size: int | None = None, path: str | None = None) -> None:
        self._fd = fd
        self._path = path
        self.size = os.fstat(fd).st_size if size is None else size
        # ask for no more than the file holds: os.read allocates what it is asked for
        first = os.read(fd, self.size) if self.size <= HEAD + TAIL else os.read(fd, HEAD)
        self._head = first
        self._tail_start = self.size - TAIL
        self._tail = first[self._tail_start :] if self.size <= HEAD + TAIL else b""

    @classmethod
    def open(cls, os_path: str, size: int | None = None) -> FileSample:
        """Open a file; ``size`` from a fresh stat saves a syscall per file on big scans."""
        fd = open_to_read(os_path)
        try:
            return cls(fd, size, os_path)
        except BaseException:
            os.close(fd)
            raise

    def close(self) -> None:
        os.close(self._fd)

    def whole(self) -> bytes | None:
        """All of the file's bytes when the first read held them (small files), else None."""
        return self._head if len(self._head) == self.size else None

    def address(self) -> Address | None:
        if self._path is None:
            return None
        opened = os.fstat(self._fd)
        return FileAddress(address_path(self._path), opened.st_size, opened.st_mtime_ns, opened.st_ino, opened.st_ctime_ns)

    def reopened(self) -> str | None:
        name = f"/proc/self/fd/{self._fd}"
        try:
            there, mine = os.stat(os.readlink(name)), os.fstat(self._fd)
        except OSError:  # no /proc, or the file has no path any more
            return None
        return name if (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino) else None

    def range(self, offset: int, n: int) -> bytes:
        end = min(self.size, offset + max(0, n))
        if end <= len(self._head):
            return self._head[offset:end]
        if self._tail_start >= 0 and offset >= self._tail_start:
            if not self._tail:
                self._tail = os.pread(self._fd, TAIL, self._tail_start)
            return self._tail[offset - self._tail_start : end - self._tail_start]
        return os.pread(self._fd, end - offset, offset) if end > offset else b""

    def readinto(self, offset: int, buffer: memoryview) -> int:
        return os.preadv(self._fd, [buffer], offset)

    def read_in_order(self) -> None:
        if hasattr(os, "posix_fadvise"):  # a longer read-ahead where the file is not cached yet
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)


class EdgeSample(Sample):
    """Only the two ends of a longer stream (a decompressed payload), and its length."""

    def __init__(self, head: bytes, tail: bytes, size: int) -> None:
        self._head = head
        self._tail = tail
        self.size = size

    def range(self, offset: int, n: int) -> bytes:
        end = min(self.size, offset + max(0, n))
        if end <= len(self._head):
            return self._head[offset:end]
        tail_start = self.size - len(self._tail)
        if offset >= tail_start:
            return self._tail[offset - tail_start : end - tail_start]
        raise ValueError("the middle of a stream is not kept")


class SampleReader(io.RawIOBase):
    """A sample as a read-only file object, for parsers that want one (``tarfile``)."""

    def __init__(self, sample: Sample) -> None:
        self._sample = sample
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        got = self._sample.readinto(self._position, view[: max(0, min(len(view), self._sample.size - self._position))])
        self._position += got
        return got

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._sample.size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position


class Window(Sample):
    """A stretch of another sample, read as a file of its own (a stored zip member)."""

    def __init__(self, outer: Sample, offset: int, size: int) -> None:
        self._outer = outer
        self._offset = offset
        self.size = max(0, min(size, outer.size - offset))

    def range(self, offset: int, n: int) -> bytes:
        return self._outer.range(self._offset + offset, max(0, min(n, self.size - offset)))

    def readinto(self, offset: int, buffer: memoryview) -> int:
        return self._outer.readinto(self._offset + offset, buffer[: max(0, self.size - offset)])

    def read_in_order(self) -> None:
        self._outer.read_in_order()

    def address(self) -> Address | None:
        outer = self._outer.address()
        if outer is None:
            return None
        return replace(outer, base=outer.base + self._offset, length=self.size)


class ObjectSample(Sample):
    """A sample of an object in a bucket, read by ranged GETs: the head and tail a bulk read
    fetched already, and blocks of ``BLOCK`` bytes around any other read, a few kept, because
    readers walk a header in many small reads and every request costs a round trip."""

    BLOCK = 256 * 1024
    KEPT = 8

    def __init__(
        self,
        bucket: Bucket,
        key: str,
        size: int,
        head: bytes = b"",
        tail: bytes = b"",
        version: str | None = None,
        blocks: bool = True,
        etag: str | None = None,
        matched: bool = False,
    ) -> None:
        self._bucket = bucket
        self._key = key
        self._version = version
        """An older version of the object (its S3 ``versionId``); None: the current one."""
        self._etag = etag
        """The ETag the listing showed: what another machine's reads ask for (``address``)."""
        self._match = etag if matched else None
        """Where set, every read asks for this ETag (``If-Match``): a task of ``--ray`` reads the
        object the driver listed or nothing."""
        self.size = size
        self._head = head
        self._tail = tail
        self._blocks: collections.OrderedDict[int, bytes] = collections.OrderedDict()
        self._by_block = blocks

    def whole(self) -> bytes | None:
        return self._head if len(self._head) == self.size else None

    def address(self) -> Address | None:
        if self._etag is None:  # nothing would prove that another machine read this very object
            return None
        location = self._bucket.location
        return ObjectAddress(location.url_of(self._key), self.size, self._etag, self._version, self._bucket.endpoint, location.account)

    def range(self, offset: int, n: int) -> bytes:
        end = min(self.size, offset + max(0, n))
        if end <= offset:
            return b""
        if end <= len(self._head):
            return self._head[offset:end]
        tail_start = self.size - len(self._tail)
        if self._tail and offset >= tail_start:
            return self._tail[offset - tail_start : end - tail_start]
        if end - offset > self.BLOCK or not self._by_block:
            return self._bucket.read(self._key, offset, end - offset, self._version, self._match)
        first, last = offset // self.BLOCK, (end - 1) // self.BLOCK
        data = b"".join(self._block(number) for number in range(first, last + 1))
        start = offset - first * self.BLOCK
        return data[start : start + end - offset]

    def _block(self, number: int) -> bytes:
        block = self._blocks.get(number)
        if block is None:
            block = self._bucket.read(self._key, number * self.BLOCK, self.BLOCK, self._version, self._match)
            self._blocks[number] = block
            if len(self._blocks) > self.KEPT:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(number)
        return block


IN_MEMORY = 256 * 1024 * 1024
"""An object read whole up to this size is held in memory; a bigger one goes to a temporary file."""


@contextlib.contextmanager
def opened_at(address: Address) -> Iterator[Sample]:
    """The sample at ``address``, opened on this machine; ``OSError`` where there is no such
    file or object, and ``LookupError`` where the file there is not the one meant (another size
    or modification time). An object's reads fail where it is another object now (its ETag)."""
    if isinstance(address, ObjectAddress):
        yield _object_at(address)
        return
    whole = FileSample.open(address.path)
    try:
        opened = os.fstat(whole._fd)
        if not address.names(opened):
            raise LookupError(
                f"{address.path} is another file here: {opened.st_size} bytes modified at {opened.st_mtime_ns} ns "
                f"(inode {opened.st_ino}, changed at {opened.st_ctime_ns} ns), not {address.size} bytes at "
                f"{address.mtime_ns} ns (inode {address.inode}, changed at {address.ctime_ns} ns)"
            )
        yield _within(whole, address)
    finally:
        whole.close()


def _object_at(address: ObjectAddress) -> Sample:
    location = urls.parse(address.path, listed=True)._replace(prefix="", account=address.account)
    found = session.reached(location, address.endpoint)
    key = location.key_of(address.path)
    return _within(ObjectSample(found, key, address.size, version=address.version, blocks=False, etag=address.etag, matched=True), address)


def _within(whole: Sample, address: Address) -> Sample:
    """The stretch of ``whole`` that ``address`` names (a zip member's), or all of it."""
    return whole if address.base == 0 and address.length in (-1, whole.size) else Window(whole, address.base, address.length)


def open_sample(os_path: str, size: int | None = None, blocks: bool = True) -> Sample:
    """The file (or a listed object's URL) at ``os_path``, sampled: a local file as
    :meth:`FileSample.open` opens it, an object by ranged reads (``blocks``: each widened to the
    ``ObjectSample.BLOCK`` around it, for a reader that walks a header in small reads; else
    exactly the bytes asked for, for one that reads ranges it was told of, whose bytes
    ``verify`` counts before it reads them). ``OSError`` when it cannot be."""
    bucket = session.owner(os_path)
    if bucket is None:
        return FileSample.open(os_path, size)
    kept = _kept_copy(os_path, size)
    if kept is not None:
        return BytesSample(kept)
    key = bucket.location.key_of(os_path)
    listed = session.listed(os_path)
    if size is None:
        size = listed.size if listed is not None else bucket.head(key).size
    return ObjectSample(bucket, key, size, blocks=blocks, etag=listed.etag if listed is not None and listed.size == size else None)


KEPT_WHOLE = 64 * 1024 * 1024
"""Bytes of small objects a header read holds whole that are kept for ``verify``'s whole read
(``keeping_whole``): at most ``HEAD + TAIL`` each, so over 3,000 objects before any is read twice."""
_kept: dict[str, bytes] | None = None
_kept_bytes = [0]
_kept_lock = threading.Lock()


@contextlib.contextmanager
def keeping_whole() -> Iterator[None]:
    """Within this, each object that a header read (``object_samples``) holds whole is kept, up
    to ``KEPT_WHOLE`` bytes in all, and :func:`downloaded` of it requests nothing: ``verify``
    reads every file whole after its header, and a small object's header read was all of it."""
    global _kept
    with _kept_lock:
        _kept, _kept_bytes[0] = {}, 0
    try:
        yield
    finally:
        with _kept_lock:
            _kept = None
            _remembered.clear()


def remembered(key: tuple[object, ...], compute: Callable[[], Found]) -> Found:
    """``compute()``, a reading of the object or file ``key`` names (its path, its size, and what
    is asked of it), made once within ``keeping_whole``: ``verify`` groups the runs again after
    its whole reads, and what grouping reads of an object outside its header (a torch archive's
    keys, the pickle a copy holds) is not read a second time. Outside it, made every time."""
    if _kept is None:
        return compute()
    with _kept_lock:
        found = _remembered.get(key, _NOT_YET)
    if found is _NOT_YET:
        found = compute()
        with _kept_lock:
            _remembered[key] = found
    return cast("Found", found)


_remembered: dict[tuple[object, ...], object] = {}
_NOT_YET = object()


def kept_whole(os_path: str, size: int) -> bool:
    """Whether :func:`downloaded` of this object serves bytes already received (``keeping_whole``)."""
    return _kept_copy(os_path, size) is not None


def _kept_copy(os_path: str, size: int | None) -> bytes | None:
    """The object's bytes, as a header read held them whole (``keeping_whole``), where they are
    as long as it is listed (``size``)."""
    kept = _kept.get(os_path) if _kept is not None else None
    return kept if kept is not None and (size is None or len(kept) == size) else None


def _keep(url: str, data: bytes) -> None:
    if _kept is None:  # not within ``keeping_whole`` (``inspect``): no lock taken per object
        return
    with _kept_lock:
        if _kept is not None and url not in _kept and _kept_bytes[0] + len(data) <= KEPT_WHOLE:
            _kept[url] = data
            _kept_bytes[0] += len(data)


def downloaded(os_path: str, size: int) -> Sample:
    """An object read whole (``verify``), its parts in parallel: in memory up to ``IN_MEMORY``
    bytes, else in a temporary file that is gone once the sample is closed; one that a header
    read held whole (``keeping_whole``) from those bytes, with no request. A local file is
    opened as :func:`open_sample` opens it."""
    bucket = session.owner(os_path)
    if bucket is None:
        return FileSample.open(os_path, size)
    kept = _kept_copy(os_path, size)
    if kept is not None:
        return BytesSample(kept)
    key = bucket.location.key_of(os_path)
    if size <= IN_MEMORY:
        buffer = bytearray(size)

        def keep(offset: int, data: bytes) -> None:
            buffer[offset : offset + len(data)] = data

        bucket.read_into(key, size, keep)
        return BytesSample(bytes(buffer))
    import tempfile  # only for an object too big to hold in memory: a local scan's start-up does not load it

    fd, path = tempfile.mkstemp(prefix="ckptdoctor-")
    os.unlink(path)  # nobody else can open it, and it is gone with its descriptor
    try:
        bucket.read_into(key, size, lambda offset, data: os.pwrite(fd, data, offset))
        return FileSample(fd, size)
    except BaseException:
        os.close(fd)
        raise


def object_samples(objects: Sequence[tuple[str, int]], head: int = HEAD, tail: int = TAIL) -> list[Sample | OSError]:
    """A sample of each listed object ``(URL, size)`` holding its first ``head`` and last ``tail``
    bytes (all of it when no longer), every range fetched at once, a few dozen in flight; an
    object that could not be read is its error, in its place."""
    if not objects:
        return []
    bucket = session.owner(objects[0][0])
    if bucket is None or any(not url.startswith(bucket.location.root + "/") for url, _ in objects):
        raise ValueError("objects of one listed bucket only")
    ranges: list[tuple[str, int, int]] = []
    for url, size in objects:
        key = bucket.location.key_of(url)
        if size <= head + tail:
            ranges.append((key, 0, size))
        else:
            ranges += [(key, 0, head), (key, size - tail, tail)]
    got: Iterator[bytes | OSError] = iter(bucket.read_many(ranges))
    samples: list[Sample | OSError] = []
    for url, size in objects:
        first = next(got)
        last = next(got) if size > head + tail else b""
        if isinstance(first, OSError):
            samples.append(first)
        elif isinstance(last, OSError):
            samples.append(last)
        elif len(first) == min(size, head if size > head + tail else size) and len(last) == (tail if size > head + tail else 0):
            if len(first) == size:
                _keep(url, first)
            samples.append(ObjectSample(bucket, bucket.location.key_of(url), size, first, last))
        else:
            samples.append(OSError(errno.EIO, "it is shorter than its listing said: it changed while it was read"))
    return samples
