"""``diskcheck`` of a run in a bucket (issue 19): no free space to read, so what the store lets
this identity do is tried for real, and the bucket's growth and lifecycle rules are judged.

Against moto (breadth: lifecycle rules, versioning) and SeaweedFS (real denials: a second server,
started once for this module, has a read-only identity besides the test's own). Every probe
must leave the bucket as it found it: each test lists the run's prefix, and its uploads, after.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stores

import ckptdoctor
from ckptdoctor.stores import session
from ckptdoctor.testing import write_burn_run

pytestmark = pytest.mark.slow  # real S3 servers on 127.0.0.1

pytest.importorskip("obstore")

READER = {
    "name": "reader",
    "credentials": [{"accessKey": "ckptdoctor-reader", "secretKey": "ckptdoctor-reader-secret"}],
    "actions": ["Read", "List"],
}
"""A SeaweedFS identity that may list and read, nothing else (a reader's or an evaluation job's role)."""

MONTH = 30 * 24 * 3600


# --- servers and buckets -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reader_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second SeaweedFS whose identities are the test's own and ``READER``: the one server
    start this module adds."""
    with stores.seaweed_server(tmp_path_factory.mktemp("weed-reader"), [READER]) as endpoint:
        yield endpoint


def _weed_bucket(endpoint: str, monkeypatch: pytest.MonkeyPatch, reader: bool) -> Iterator[stores.Bucket]:
    bucket = stores.bucket_in(endpoint, "ckpt-reader")
    for variable, value in bucket.env.items():
        monkeypatch.setenv(variable, value)
    if reader:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", READER["credentials"][0]["accessKey"])  # type: ignore[index]
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", READER["credentials"][0]["secretKey"])  # type: ignore[index]
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    session.forget()
    yield bucket
    session.forget()


@pytest.fixture
def reader_bucket(reader_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[stores.Bucket]:
    """A prefix in a bucket of that server; the test's client (``.s3``) may do anything, the
    environment the CLI sees holds the reader's keys."""
    yield from _weed_bucket(reader_endpoint, monkeypatch, reader=True)


@pytest.fixture
def weed_admin_bucket(reader_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[stores.Bucket]:
    """The same, with the environment holding the keys that may do anything (the tests of
    SeaweedFS here use this module's server alone)."""
    yield from _weed_bucket(reader_endpoint, monkeypatch, reader=False)


@pytest.fixture
def own_bucket(moto_bucket: stores.Bucket) -> stores.Bucket:
    """A moto bucket of this test's own: lifecycle rules and versioning are set per bucket, and
    the shared one must not carry them into other tests."""
    name = f"ckpt-own-{uuid.uuid4().hex[:10]}"
    moto_bucket.s3.create_bucket(Bucket=name)
    return stores.Bucket(moto_bucket.endpoint, name, moto_bucket.prefix, moto_bucket.s3)


def _run(bucket: stores.Bucket, tmp_path: Path, epochs: range = range(1, 4)) -> str:
    write_burn_run(tmp_path / "run", epochs)
    return bucket.upload(tmp_path / "run", "run")


def _diskcheck(cli: Any, url: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = cli("diskcheck", "--json", url, *args)
    assert "Traceback" not in result.stderr, result.stderr
    return result.exit_code, json.loads(result.stdout)


def _codes(document: dict[str, Any]) -> list[str]:
    return [finding["code"] for finding in document["findings"]]


def _access(document: dict[str, Any]) -> dict[str, str]:
    return {p["action"]: p["access"] for p in document["disk"]["bucket"]["permissions"]}


def _left_behind(bucket: stores.Bucket) -> tuple[list[str], list[str]]:
    """Every key under ckptdoctor's own prefix of the run, and every upload in progress under
    the test's prefix, as the test's own client sees them."""
    own = bucket.s3.list_objects_v2(Bucket=bucket.name, Prefix=bucket.key("run", ".ckptdoctor") + "/").get("Contents", [])
    uploads = bucket.s3.list_multipart_uploads(Bucket=bucket.name, Prefix=bucket.prefix + "/").get("Uploads", [])
    return [item["Key"] for item in own], [item["Key"] for item in uploads]


# --- a healthy bucket ------------------------------------------------------------------------------


@pytest.mark.parametrize("server", ["moto_bucket", "weed_admin_bucket"])
def test_a_healthy_bucket_is_probed_and_left_as_it_was(server: str, request: pytest.FixtureRequest, tmp_path: Path, cli: Any) -> None:
    bucket: stores.Bucket = request.getfixturevalue(server)
    url = _run(bucket, tmp_path)
    before = bucket.stored()
    code, document = _diskcheck(cli, url, "--keep-last", "2")
    assert code == 0
    assert not {"CKD501", "CKD502", "CKD503", "CKD511"} & set(_codes(document))
    disk = document["disk"]
    assert disk["writable"] is True
    assert disk["free_bytes"] is None and disk["mountpoint"] is None  # no volume was measured
    assert set(_access(document).values()) == {"granted"}
    assert disk["bucket"]["quota"] == "no quota known" and disk["bucket"]["quota_bytes"] is None
    assert disk["bucket"]["probe"].startswith(url + "/.ckptdoctor/diskcheck-probe-")
    assert disk["bucket"]["probe_left"] is False
    # the probe object and the probe upload are gone: the run's keys are what they were
    assert bucket.stored() == before
    assert _left_behind(bucket) == ([], [])
    human = cli("diskcheck", url, "--keep-last", "2")
    assert "write probe: created and deleted" in human.stdout
    assert "no quota known" in human.stdout
    assert "no free space to read" in human.stdout and " free;" not in human.stdout  # no volume's figure


def test_a_url_is_never_measured_on_the_local_disk(moto_bucket: stores.Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    psutil = pytest.importorskip("psutil")
    url = _run(moto_bucket, tmp_path)

    def local_disk(*args: object, **kwargs: object) -> None:
        raise AssertionError("diskcheck of a URL measured the local disk")

    for module, name in ((os, "statvfs"), (shutil, "disk_usage"), (psutil, "disk_usage"), (psutil, "disk_partitions")):
        monkeypatch.setattr(module, name, local_disk)
    report = ckptdoctor.preflight(url, keep_last=2)
    assert report.ok
    assert report.disk is not None and report.disk.volume is None and report.disk.bucket is not None
    assert report.disk.path == url


@pytest.mark.parametrize("failure", ["store", "interrupt"])
def test_the_probe_object_is_deleted_whatever_fails_after_it_was_made(
    failure: str, weed_admin_bucket: stores.Bucket, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckptdoctor.stores import _bucket

    url = _run(weed_admin_bucket, tmp_path)
    before = weed_admin_bucket.stored()
    made: list[str] = []
    create = _bucket.Bucket.create

    def remembered(self: _bucket.Bucket, key: str, data: bytes) -> str | None:
        made.append(key)
        return create(self, key, data)

    def fails(self: _bucket.Bucket, key: str) -> bytes:
        assert made and weed_admin_bucket.s3.head_object(Bucket=weed_admin_bucket.name, Key=made[0])  # it exists now
        if failure == "store":
            raise session.StoreError(f"{url}: cannot reach the store (the network went away)")
        raise KeyboardInterrupt

    monkeypatch.setattr(_bucket.Bucket, "create", remembered)
    monkeypatch.setattr(_bucket.Bucket, "first_byte", fails)
    if failure == "store":
        result = cli("diskcheck", url)
        assert result.exit_code == 2 and "cannot reach the store" in result.stderr
    else:
        with pytest.raises(KeyboardInterrupt):
            ckptdoctor.preflight(url)
    assert weed_admin_bucket.stored() == before
    assert _left_behind(weed_admin_bucket) == ([], [])


# --- denials, for real -------------------------------------------------------------------------


def test_a_read_only_identity_is_told_what_it_may_not_do_and_nothing_is_left(
    reader_bucket: stores.Bucket, tmp_path: Path, cli: Any
) -> None:
    url = _run(reader_bucket, tmp_path)  # written by the test's own identity
    before = reader_bucket.stored()
    code, document = _diskcheck(cli, url)
    assert code == 1
    access = _access(document)
    assert access["list"] == access["read"] == "granted"
    assert access["write"] == access["delete"] == access["abort uploads"] == "denied"
    by_code: dict[str, list[str]] = {}
    for finding in document["findings"]:
        by_code.setdefault(finding["code"], []).append(finding["message"])
    [unwritable] = by_code["CKD503"]
    assert "s3:PutObject" in unwritable
    missing = by_code["CKD511"]
    assert any("grant s3:DeleteObject" in message and "prune, repair need it" in message for message in missing)
    assert any("s3:AbortMultipartUpload" in message and "prune --abort-uploads needs it" in message for message in missing)
    assert not any("s3:PutObject" in message for message in missing)  # the write is CKD503's, said once
    fixes = next(f["fixes"] for f in document["findings"] if f["code"] == "CKD503")
    assert any("arn:aws:s3:::ckpt-reader/" in fix for fix in fixes)
    assert not any("chmod" in fix or "findmnt" in fix for fix in fixes)  # a bucket has no folder modes or mounts
    assert reader_bucket.stored() == before
    assert _left_behind(reader_bucket) == ([], [])


def test_errors_are_one_line_and_exit_2(moto_bucket: stores.Bucket, cli: Any) -> None:
    missing = cli("diskcheck", "s3://no-such-bucket-here/run")
    assert missing.exit_code == 2
    assert "no such bucket" in missing.stderr
    bad_name = cli("diskcheck", "s3://B/run")
    assert bad_name.exit_code == 2 and "not a bucket name" in bad_name.stderr
    for result in (missing, bad_name):
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_credentials_the_store_refuses_are_one_line_and_exit_2(
    weed_admin_bucket: stores.Bucket, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _run(weed_admin_bucket, tmp_path)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    result = cli("diskcheck", url)
    assert result.exit_code == 2
    assert "did not accept the credentials" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


# --- lifecycle rules and versioning ---------------------------------------------------------------

_ABORT = {"ID": "abort", "Status": "Enabled", "Filter": {"Prefix": ""}, "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}}
_EXPIRE = {"ID": "expire", "Status": "Enabled", "Filter": {"Prefix": ""}, "NoncurrentVersionExpiration": {"NoncurrentDays": 7}}


def _lifecycle(bucket: stores.Bucket, *rules: dict[str, Any]) -> None:
    bucket.s3.put_bucket_lifecycle_configuration(Bucket=bucket.name, LifecycleConfiguration={"Rules": list(rules)})


def test_a_bucket_without_an_upload_abort_rule_is_told_and_the_rule_quiets_it(own_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url = _run(own_bucket, tmp_path)
    _, document = _diskcheck(cli, url)
    assert "CKD509" in _codes(document)
    fixes = next(f["fixes"] for f in document["findings"] if f["code"] == "CKD509")
    assert any(
        f"put-bucket-lifecycle-configuration --bucket {own_bucket.name}" in fix and "AbortIncompleteMultipartUpload" in fix for fix in fixes
    )
    assert document["disk"]["bucket"]["aborts_incomplete_uploads"] is False
    # a rule for another prefix, or one disabled, does not cover the run
    _lifecycle(own_bucket, {**_ABORT, "Filter": {"Prefix": "elsewhere/"}}, {**_ABORT, "ID": "off", "Status": "Disabled"})
    assert "CKD509" in _codes(_diskcheck(cli, url)[1])
    _lifecycle(own_bucket, {**_ABORT, "Filter": {"Prefix": own_bucket.prefix + "/"}})
    code, quiet = _diskcheck(cli, url)
    assert code == 0 and "CKD509" not in _codes(quiet)
    assert quiet["disk"]["bucket"]["aborts_incomplete_uploads"] is True
    assert quiet["disk"]["bucket"]["lifecycle_rules"] == 1


def test_a_versioned_bucket_without_noncurrent_expiry_frees_nothing_by_deletes(own_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    own_bucket.s3.put_bucket_versioning(Bucket=own_bucket.name, VersioningConfiguration={"Status": "Enabled"})
    url = _run(own_bucket, tmp_path)
    _lifecycle(own_bucket, _ABORT)
    _, document = _diskcheck(cli, url, "--keep-last", "2")
    assert _codes(document) == ["CKD510"]
    bucket = document["disk"]["bucket"]
    assert bucket["versioning"] == "Enabled" and bucket["expires_noncurrent_versions"] is False
    growth = document["disk"]["growth"]
    assert growth["deletes_free_nothing"] is True and growth["steady_bytes"] is None  # retention holds nothing back
    _lifecycle(own_bucket, _ABORT, _EXPIRE)
    code, quiet = _diskcheck(cli, url, "--keep-last", "2")
    assert code == 0 and _codes(quiet) == []
    assert quiet["disk"]["growth"]["steady_bytes"] == 2 * quiet["disk"]["growth"]["bytes_per_save"]
    assert "CKD510" not in _codes(_diskcheck(cli, url)[1])


def test_an_unversioned_bucket_is_not_asked_for_version_expiry(own_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url = _run(own_bucket, tmp_path)
    _lifecycle(own_bucket, _ABORT)
    code, document = _diskcheck(cli, url)
    assert code == 0 and _codes(document) == []
    assert document["disk"]["bucket"]["versioning"] == "never"


# --- growth -------------------------------------------------------------------------------------


def test_growth_per_save_and_per_month_follow_the_runs_checkpoints(own_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    write_burn_run(tmp_path / "run", range(1, 4), roles=("model", "optim"))
    write_burn_run(tmp_path / "run", [4], roles=("model",))  # a smaller save: the mean is not any one size
    for epoch in range(1, 5):  # saved over seconds, as a run saves over hours
        for path in sorted((tmp_path / "run").glob(f"*-{epoch}.bpk")):
            own_bucket.s3.put_object(Bucket=own_bucket.name, Key=own_bucket.key("run", path.name), Body=path.read_bytes())
        time.sleep(1.1)
    url = own_bucket.url("run")
    _lifecycle(own_bucket, _ABORT)

    # what the bucket itself says, computed here on its own
    listed = own_bucket.s3.list_objects_v2(Bucket=own_bucket.name, Prefix=own_bucket.key("run") + "/")["Contents"]
    sizes: dict[int, int] = {}
    times: dict[int, float] = {}
    for item in listed:
        epoch = int(re.search(r"-(\d+)\.bpk$", item["Key"]).group(1))  # type: ignore[union-attr]
        sizes[epoch] = sizes.get(epoch, 0) + item["Size"]
        times[epoch] = max(times.get(epoch, 0.0), item["LastModified"].timestamp())
    per_save = round(sum(sizes.values()) / 4)
    saves_a_month = 3 * MONTH / (max(times.values()) - min(times.values()))

    code, document = _diskcheck(cli, url, "--keep-last", "2")
    assert code == 0
    growth = document["disk"]["growth"]
    assert growth["checkpoints"] == 4
    assert growth["stored_bytes"] == sum(sizes.values())
    assert growth["bytes_per_save"] == per_save
    assert growth["saves_per_month"] == pytest.approx(saves_a_month)
    assert growth["bytes_per_month"] == round(per_save * growth["saves_per_month"])
    assert growth["keep_last"] == 2 and growth["steady_bytes"] == 2 * per_save
    # without a retention, the run grows for good: said so, never held within a figure
    _, unbounded = _diskcheck(cli, url)
    assert unbounded["disk"]["growth"]["steady_bytes"] is None and unbounded["disk"]["growth"]["keep_last"] is None
    assert "grows for good" in cli("diskcheck", url).stdout


def test_the_retention_comes_from_the_configuration(own_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url = _run(own_bucket, tmp_path)
    config = tmp_path / "ckptdoctor.toml"
    config.write_text("[prune]\nkeep-last = 2\n")
    _, document = _diskcheck(cli, url, "--config", str(config))
    assert document["disk"]["keep_last"] == 2
    assert document["disk"]["growth"]["steady_bytes"] == 2 * document["disk"]["growth"]["bytes_per_save"]


def test_an_empty_prefix_is_a_run_not_saved_yet(moto_bucket: stores.Bucket, cli: Any) -> None:
    code, document = _diskcheck(cli, moto_bucket.url("new-run"))
    assert code == 0
    assert document["disk"]["writable"] is True and document["disk"]["growth"] is None
    assert _access(document)["read"] == "granted"  # the probe object itself was read
    assert moto_bucket.stored() == []


# --- without boto3 ------------------------------------------------------------------------------


def test_without_boto3_what_could_not_be_checked_is_said_never_passed(
    moto_bucket: stores.Bucket, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _run(moto_bucket, tmp_path)
    before = moto_bucket.stored()
    s3 = moto_bucket.s3  # the test's own client was made before boto3 went away
    monkeypatch.setitem(__import__("sys").modules, "boto3", None)
    code, document = _diskcheck(cli, url)
    assert code == 0
    access = _access(document)
    assert access["write"] == access["delete"] == access["read"] == access["list"] == "granted"  # obstore alone
    assert access["list uploads"] == access["abort uploads"] == "not checked"
    bucket = document["disk"]["bucket"]
    assert bucket["versioning"] is None and bucket["aborts_incomplete_uploads"] is None
    assert any("boto3" in note for note in bucket["not_checked"])
    assert "CKD509" not in _codes(document)  # unknown is not a finding, and not a pass either
    human = cli("diskcheck", url, "--keep-last", "2")
    assert "not checked: multipart uploads, versioning and lifecycle rules" in human.stdout
    assert "versioning not checked: on a versioned bucket they free nothing" in " ".join(human.stdout.split())  # no bound promised
    assert moto_bucket.stored() == before
    assert s3.list_objects_v2(Bucket=moto_bucket.name, Prefix=moto_bucket.key("run", ".ckptdoctor")).get("Contents", []) == []


# --- gs:// and az:// ------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["gs", "az"])
def test_on_other_stores_the_write_probe_is_made_and_the_rest_is_said_not_checked(
    scheme: str, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GCS or Azure emulator installs here: obstore's in-memory store stands in for the
    bucket (the probes go through the same ``Bucket`` calls as on a real one)."""
    obstore = pytest.importorskip("obstore")
    from obstore.store import MemoryStore

    from ckptdoctor.stores import _bucket
    from ckptdoctor.stores.urls import parse

    location = parse(f"{scheme}://ckpt-mem/run")
    memory = MemoryStore()
    write_burn_run(tmp_path / "run", range(1, 3))
    for path in sorted((tmp_path / "run").iterdir()):
        obstore.put(memory, f"run/{path.name}", path.read_bytes())
    bucket = _bucket.Bucket(location, memory, None)
    monkeypatch.setattr(session, "bucket", lambda wanted: bucket)
    code, document = _diskcheck(cli, location.url, "--keep-last", "1")
    assert code == 0 and _codes(document) == []
    access = _access(document)
    assert access == {"list": "granted", "read": "granted", "write": "granted", "delete": "granted"}  # no upload actions here
    names = {p["action"]: p["permission"] for p in document["disk"]["bucket"]["permissions"]}
    assert names["write"] == ("storage.objects.create" if scheme == "gs" else "the Storage Blob Data Contributor role")
    checked = document["disk"]["bucket"]
    assert checked["quota"] == "not checked on this store" and checked["versioning"] is None and checked["lifecycle_rules"] is None
    assert any(f"not checked on this store ({scheme}://)" in note for note in checked["not_checked"])
    assert document["disk"]["growth"]["steady_bytes"] == document["disk"]["growth"]["bytes_per_save"]
    assert sorted(meta["path"] for page in obstore.list(memory) for meta in page) == sorted(
        f"run/{p.name}" for p in (tmp_path / "run").iterdir()
    )


def test_a_file_url_is_the_local_folder_measured_as_before(tmp_path: Path, cli: Any) -> None:
    write_burn_run(tmp_path / "run", range(1, 3))
    code, document = _diskcheck(cli, f"file://{tmp_path / 'run'}")
    assert code == 0
    assert document["disk"]["free_bytes"] is not None and "bucket" not in document["disk"]
    assert document["disk"]["next_save_bytes"] > 0
