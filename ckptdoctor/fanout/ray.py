"""The deep check's ranges read by tasks on an existing Ray cluster (``verify --deep --ray``).

The driver (this process) still reads every header and judges every file; only the ranges that
``--deep`` reads whole (``deep_scan.check``'s parts: tensors, zip members, at most
``deep_scan.PART`` each) go to the cluster, dealt into tasks of about ``TASK_BYTES``. A task
opens the file at the same absolute path on its own node (a filesystem every node mounts) and
checks that it is the same file (size and modification time), or reads an object from its
bucket with its node's own credentials, asking for the ETag the driver listed; it reads its
parts and returns what the local scan returns for them: non-finite counts, CRC-32s, zero tests.
The driver merges them as it merges its own threads' parts, so the report is the one a single
machine writes.

A task whose worker dies is run again by Ray (``RETRIES``); a range that still could not be read
is an unreadable file, never a clean one.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ckptdoctor.errors import UsageError
from ckptdoctor.model import Fanned
from ckptdoctor.readers import deep_scan
from ckptdoctor.readers.sample import Address, ObjectAddress, opened_at
from ckptdoctor.regular import NotRegular
from ckptdoctor.version import __version__

TASK_BYTES = 256 * 1024 * 1024
"""Bytes one task reads: long enough that a task's scheduling (a few ms) costs nothing against
its read (a tenth of a second at 2 GB/s), short enough that a run's files make many tasks."""
RETRIES = 3
"""Times Ray runs a task again when its worker dies or a read fails (a node lost, a flaky mount)."""
INSTALL = "pip install 'ckptdoctor[ray]'"


class ClusterUnusable(UsageError):
    """The Ray cluster cannot be reached, or its workers cannot read the files (exit 2)."""


def connect(address: str) -> RayFanout:
    """A fan-out over the Ray cluster at ``address`` (``auto``: ``RAY_ADDRESS``, else the one
    started on this machine), or this process's connection where it has one already."""
    try:
        # the optional extra, imported only for --ray
        import ray
    except ImportError:
        raise UsageError(f"--ray needs Ray, which is not installed here: {INSTALL}") from None
    if not ray.is_initialized():
        if address == "auto":
            _reachable(_found(ray), " (--ray auto: RAY_ADDRESS, else the cluster last started here)")
        else:
            _reachable(address)
        logging.getLogger("ray").setLevel(logging.ERROR)  # its notes at connecting (token authentication) are not ours to print
        # the failures of tasks whose results were never asked for (those cancelled when a file is given up)
        os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise ClusterUnusable(
                f"no Ray cluster at {address}: {_first_line(error)} (start one with `ray start --head`, or give its "
                "address: --ray HOST:PORT, RAY_ADDRESS)"
            ) from None
        to_stderr(ray)
    if not ray.cluster_resources().get("CPU"):  # type: ignore[no-untyped-call]
        raise ClusterUnusable("the Ray cluster has no CPUs for tasks: start its nodes with --num-cpus above 0")
    return RayFanout(ray)


def to_stderr(ray: Any) -> None:
    """The cluster's messages (a worker died, a task is retried), which Ray's driver prints on
    stdout, printed on stderr: stdout holds the report alone (``--json``). Ray names no public
    switch for them, so its printer is wrapped where it is found, and left alone where not."""
    driver = getattr(getattr(ray, "_private", None), "worker", None)
    printer = getattr(driver, "print_to_stdstream", None)
    if driver is None or printer is None or getattr(printer, "ckptdoctor", False):
        return

    def on_stderr(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        return printer({**data, "is_err": True}, *args, **kwargs)

    on_stderr.ckptdoctor = True  # type: ignore[attr-defined]
    driver.print_to_stdstream = on_stderr


REACH_SECONDS = 5.0
"""How long the cluster's head may take to accept a connection: Ray's own client retries a dead
address for minutes."""


def _found(ray: Any) -> str:
    """The address ``auto`` names: ``RAY_ADDRESS``, else the cluster last started on this machine
    (Ray's record of it, which outlives a cluster that was stopped); empty where Ray finds none
    this way, and is left to look for one itself."""
    if os.environ.get("RAY_ADDRESS", "").strip().lower() == "local":  # ray.init would start a cluster of its own
        raise ClusterUnusable(
            "--ray auto found RAY_ADDRESS=local, which starts a cluster for this command alone: give an existing "
            "cluster's address (--ray HOST:PORT, RAY_ADDRESS)"
        )
    try:
        return str(ray._private.services.canonicalize_bootstrap_address("auto") or "")
    except Exception:  # a Ray whose private helper moved or refuses: its own search, unchecked
        return os.environ.get("RAY_ADDRESS", "")


def _reachable(address: str, found: str = "") -> None:
    """:class:`ClusterUnusable` unless ``address`` (``HOST:PORT``, or ``ray://HOST:PORT`` for Ray
    Client) accepts a connection; an empty one, or ``auto``, is Ray's to find. ``found``: how
    the address was found, said after it."""
    if not address or address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or "/" in host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterUnusable(f"{address!r} is not a Ray cluster's address: give HOST:PORT (its head's GCS port, 6379 by default)")
    refused = _refused(host, int(port), REACH_SECONDS)
    if refused is not None:
        raise ClusterUnusable(f"no Ray cluster at {address}{found}: {refused} (start one with `ray start --head`)")


def _refused(host: str, port: int, timeout: float) -> str | None:
    """Why ``host:port`` accepted no connection within ``timeout`` seconds; None where it did."""
    try:
        socket.create_connection((host.strip("[]"), port), timeout=timeout).close()
    except OSError as error:
        return error.strerror or str(error)
    return None


class RayFanout:
    """Deep-check parts as Ray tasks. Shared by the driver's threads, one per file being read."""

    def __init__(self, ray: Any) -> None:
        self._ray = ray
        self._head = _Heartbeat(ray.get_runtime_context().gcs_address)
        options = {"max_retries": RETRIES, "retry_exceptions": [OSError], "num_cpus": 1}
        self._check = ray.remote(**options)(_check_task)
        # a refusal (no such file, credentials the bucket refuses) is the answer: tried once
        self._probe = ray.remote(**{**options, "retry_exceptions": False})(_probe_task)
        self._lock = threading.Lock()
        self._pending: set[Any] = set()
        self._tasks = 0
        self._bytes = 0
        self._workers: set[str] = set()
        self._began: float | None = None
        self._ended = 0.0
        self._read: Callable[[int], None] | None = None
        self._counted: dict[str, int] = {}

    def probe(self, address: Address) -> None:
        """Make sure, before any range is handed out, that a worker runs this ckptdoctor and reads
        the file at ``address`` as this process does: else :class:`ClusterUnusable`."""
        probe = self._probe.remote(address)
        try:
            version = self._got(probe, timeout=PROBE_SECONDS)
        except self._ray.exceptions.GetTimeoutError:
            self._ray.cancel(probe, force=True)
            raise ClusterUnusable(
                f"the Ray cluster ran no task within {PROBE_SECONDS:.0f} s: are its CPUs all taken by other jobs?"
            ) from None
        except self._ray.exceptions.RayTaskError as failed:
            cause = failed.cause if isinstance(failed.cause, BaseException) else failed
            if isinstance(cause, (LookupError, OSError)) and address.changed_here():
                raise deep_scan.FileChanged(f"{address.path} changed while the cluster was asked to read it") from None
            if isinstance(cause, ModuleNotFoundError):
                raise ClusterUnusable(f"the Ray workers cannot import ckptdoctor: install it on every node ({INSTALL})") from None
            remedy = (
                "give every node credentials that may read it (the workers use their own: environment, profile, instance role)"
                if isinstance(address, ObjectAddress)
                else "run --ray on a filesystem every node mounts at the same path"
            )
            raise ClusterUnusable(
                f"the Ray workers cannot read {address.path} as this machine does ({_first_line(cause)}): {remedy}"
            ) from None
        if version != __version__:
            raise ClusterUnusable(f"the Ray workers run ckptdoctor {version}, this machine {__version__}: install the same on every node")

    def check_parts(self, address: Address, parts: Sequence[deep_scan.Region]) -> list[deep_scan.Checked]:
        batches = _batches(parts)
        with self._lock:
            if self._began is None:
                self._began = time.monotonic()
            refs = [self._check.remote(address, batch) for batch in batches]
            self._pending.update(refs)
            self._tasks += len(refs)
        results: list[deep_scan.Checked] = []
        try:
            for ref, batch in zip(refs, batches, strict=True):
                worker, checked = self._got(ref, address, batch)
                results += checked
                done = sum(part.length for part in batch)
                with self._lock:
                    self._pending.discard(ref)
                    self._workers.add(worker)
                    self._bytes += done
                    self._counted[address.path] = self._counted.get(address.path, 0) + done
                if self._read is not None:
                    self._read(done)
        except deep_scan.FileChanged as failed:
            self.cancel(refs)
            if len(refs) == 1:
                raise
            # the first range that failed is named; the file's verdict does not rest on the others
            raise deep_scan.FileChanged(f"{failed} (its other {len(refs) - 1} ranges are left unchecked)") from None
        except BaseException:
            self.cancel(refs)
            raise
        finally:
            with self._lock:
                self._ended = max(self._ended, time.monotonic())
        return results

    def cancel(self, refs: Sequence[Any] | None = None) -> None:
        """Cancel ``refs`` (None: every task still pending): Ctrl-C, or a file given up; not where
        the cluster is gone (nothing would answer)."""
        with self._lock:
            doomed = list(self._pending if refs is None else refs)
            self._pending.difference_update(doomed)
        if self._head.gone is None:
            for ref in doomed:
                self._ray.cancel(ref, force=True)

    def counting(self, read: Callable[[int], None]) -> None:
        self._read = read

    def close(self) -> None:
        """Cancel what is still pending and stop watching the head: this command is done with the cluster."""
        self.cancel()
        self._head.stop()

    def settled(self, path: str) -> int:
        with self._lock:
            return self._counted.pop(path, 0)

    def spent(self) -> Fanned:
        with self._lock:
            seconds = max(0.0, self._ended - self._began) if self._began is not None else 0.0
            return Fanned("ray", self._tasks, len(self._workers), self._bytes, round(seconds, 3))

    def _got(self, ref: Any, address: Address | None = None, batch: Sequence[deep_scan.Region] = (), timeout: float | None = None) -> Any:
        """The result of ``ref``; a failure after Ray's retries is :class:`deep_scan.FileChanged`
        (the ranges of ``batch`` of the file at ``address`` could not be read)."""
        exceptions = self._ray.exceptions
        try:
            return self._waited(ref, timeout)
        except exceptions.RayTaskError as failed:
            if address is None:
                raise
            cause = failed.cause if isinstance(failed.cause, BaseException) else failed
            if isinstance(cause, deep_scan.FileChanged):
                raise deep_scan.FileChanged(str(cause)) from None
            raise deep_scan.FileChanged(f"{_unread(address, batch)}: {_first_line(cause)}") from None
        except (exceptions.WorkerCrashedError, exceptions.NodeDiedError, exceptions.ObjectLostError, exceptions.OwnerDiedError) as lost:
            if address is None:
                raise ClusterUnusable(f"the Ray cluster lost the probe task: {_first_line(lost)}") from None
            raise deep_scan.FileChanged(f"{_unread(address, batch)}: its worker died {RETRIES + 1} times") from None
        except exceptions.RaySystemError as gone:
            raise ClusterUnusable(f"the Ray cluster went away: {_first_line(gone)}") from None

    def _waited(self, ref: Any, timeout: float | None) -> Any:
        """``ray.get(ref)``, a second at a time: where the head stopped answering meanwhile,
        :class:`ClusterUnusable` (Ray's own driver would end this process, 60 s later, with no
        word of ours)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = 1.0 if deadline is None else min(1.0, max(0.0, deadline - time.monotonic()))
            try:
                return self._ray.get(ref, timeout=wait)
            except self._ray.exceptions.GetTimeoutError:
                if self._head.gone is not None:
                    raise ClusterUnusable(f"the Ray cluster went away: {self._head.gone}") from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise


LOST_SECONDS = 10.0
"""How long the cluster's head may refuse connections before the cluster is taken for gone: a
restarting head (GCS fault tolerance) is back within seconds, and Ray ends a driver that lost it
for 60 s."""


class _Heartbeat:
    """Whether the cluster's head (its GCS) still accepts connections, asked every 2 s by a thread
    of its own."""

    def __init__(self, address: str) -> None:
        self.gone: str | None = None
        """Why the head is taken for gone; None while it answers."""
        self._address = address
        self._stopped = threading.Event()
        threading.Thread(target=self._beat, name="ckptdoctor-ray-heartbeat", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def _beat(self) -> None:
        host, _, port = self._address.rpartition(":")
        since: float | None = None
        while self.gone is None and not self._stopped.wait(2.0):
            refused = _refused(host, int(port), 2.0)
            if refused is None:
                since = None
                continue
            now = time.monotonic()
            since = now if since is None else since
            if now - since >= LOST_SECONDS:
                self.gone = f"its head at {self._address} has not answered for {LOST_SECONDS:.0f} s ({refused})"


PROBE_SECONDS = 60.0
"""How long the first task may wait for a free CPU before the cluster is called unusable."""


def _batches(parts: Sequence[deep_scan.Region]) -> list[list[deep_scan.Region]]:
    """``parts`` in file order, dealt into runs of about ``TASK_BYTES`` each."""
    batches: list[list[deep_scan.Region]] = []
    size = 0
    for part in parts:
        if not batches or (size + part.length > TASK_BYTES and batches[-1]):
            batches.append([])
            size = 0
        batches[-1].append(part)
        size += part.length
    return batches


def _unread(address: Address, batch: Sequence[deep_scan.Region]) -> str:
    start = min(part.offset for part in batch) + address.base
    end = max(part.offset + part.length for part in batch) + address.base
    return f"could not read bytes {start:,}–{end:,} of {os.path.basename(address.path)} on the Ray cluster"


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def _check_task(address: Address, parts: Sequence[deep_scan.Region]) -> tuple[str, list[deep_scan.Checked]]:
    """What a worker runs: ``parts`` of the file at ``address``, read on its node, and who it is.
    What no second try changes (no file there, a folder, a FIFO, no permission) is not retried."""
    try:
        return f"{socket.gethostname()}:{os.getpid()}", deep_scan.check_at(address, parts)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError, NotRegular) as error:
        raise deep_scan.FileChanged(f"{_unread(address, parts)}: {error.strerror or error}") from None


def _probe_task(address: Address) -> str:
    """What a worker runs first: its ckptdoctor's version, once it has opened the file at
    ``address`` and found it the one the driver sees (``LookupError`` else), and read its head."""
    with opened_at(address) as sample:
        sample.head(4096)
    return __version__
