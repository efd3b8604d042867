"""A damaged object in a versioned bucket, and the older version of it that restores it (CKD216).

A hand-written torch loop (``frameworks.torch_loop``, split saves: ``model_N.safetensors`` by
safetensors' ``save_file``, ``optimizer_N.pt`` by ``torch.save``) is uploaded, then one of its
objects is overwritten by a cut copy, as a re-upload or a rewrite killed part-way leaves it. The
report names the newest older version that reads whole and the command that restores it; the test
runs that very command (the AWS CLI where it is installed, else boto3 with its arguments) and lets
the framework's own loaders decide: the loop resumes from the restored run.

Against moto's server (tests/stores.py): it keeps versions as S3 does (ListObjectVersions newest
first, GetObject and CopyObject of a ``versionId``, HeadObject's ``ChecksumMode``), where
SeaweedFS's versioning does not return the ``x-amz-checksum-*`` of an older version.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import frameworks
import pytest
import stores

from ckptdoctor.stores import control_plane, session

pytestmark = pytest.mark.slow  # a real S3 server on 127.0.0.1

pytest.importorskip("obstore")
pytest.importorskip("boto3")


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two epochs of the torch loop, split saves."""
    folder = tmp_path_factory.mktemp("loop") / "run"
    frameworks.torch_loop(folder, 2, "split")
    return folder


def _cut_over(bucket: stores.Bucket, name: str, whole: bytes) -> str:
    """``name`` overwritten by the first two thirds of ``whole``; the version id it replaced."""
    before = _versions(bucket, name)[0]["VersionId"]
    bucket.put(f"run/{name}", whole[: len(whole) * 2 // 3])
    return str(before)


def _versions(bucket: stores.Bucket, name: str) -> list[dict[str, Any]]:
    listed = bucket.s3.list_object_versions(Bucket=bucket.name, Prefix=bucket.key("run", name))
    return [item for item in listed.get("Versions", []) if item["Key"] == bucket.key("run", name)]


def _previous(report: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [f for f in report["findings"] if f["code"] == "CKD216" and f["path"].endswith("/" + name)]
    return found


def _restore(bucket: stores.Bucket, finding: dict[str, Any]) -> None:
    """The restore command the finding prints, run as printed (the AWS CLI), or with boto3 and the
    same arguments where the CLI is not installed."""
    (command,) = [m[1] for fix in finding["fixes"] if (m := re.search(r"`(aws s3api copy-object [^`]*)`", fix))]
    words = shlex.split(command)
    if shutil.which("aws"):
        done = subprocess.run(words, env={**os.environ, **bucket.env}, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return
    arguments = dict(zip(words[3::2], words[4::2], strict=True))
    bucket.s3.copy_object(Bucket=arguments["--bucket"], Key=arguments["--key"], CopySource=arguments["--copy-source"])


def _download(bucket: stores.Bucket, into: Path) -> Path:
    folder = into / "downloaded"
    for relative in bucket.stored():
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(bucket.get(relative))
    return folder / "run"


def test_a_cut_overwrite_names_the_whole_previous_version_and_its_command_restores_the_run(
    versioned_bucket: stores.Bucket, loop_run: Path, tmp_path: Path, inspect_json: Any, cli: Any
) -> None:
    url = versioned_bucket.upload(loop_run, "run")
    whole = (loop_run / "model_2.safetensors").read_bytes()
    previous = _cut_over(versioned_bucket, "model_2.safetensors", whole)
    report = inspect_json(url).json
    assert any(f["code"] == "CKD203" and f["path"].endswith("/model_2.safetensors") for f in report["findings"])
    found = _previous(report, "model_2.safetensors")
    assert found["severity"] == "info"
    assert f"a whole previous version exists: {previous} (" in found["message"]
    # boto3 sends a CRC32 with every put, which the store keeps; a header read did not compute it, and says so
    assert "checked by its length; its CRC32 checksum, which the store keeps, was not computed" in found["message"]
    session.forget()

    _restore(versioned_bucket, found)
    assert versioned_bucket.get("run/model_2.safetensors") == whole
    session.forget()
    checked = cli("verify", "--json", url)
    assert checked.exit_code == 0, checked.stdout
    assert not {"CKD203", "CKD216"} & set(checked.codes())
    # the framework decides: safetensors opens the restored object, and the loop resumes from the run
    from safetensors import safe_open

    folder = _download(versioned_bucket, tmp_path)
    with safe_open(str(folder / "model_2.safetensors"), framework="pt") as opened:
        assert set(opened.keys()) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    *_, epoch = frameworks.loop_resume(folder / "model_2.safetensors", "split")
    assert epoch == 2


def test_two_cut_overwrites_name_the_whole_version_two_back_checked_by_its_checksum_in_verify(
    versioned_bucket: stores.Bucket, loop_run: Path, tmp_path: Path, cli: Any, inspect_json: Any
) -> None:
    url = versioned_bucket.upload(loop_run, "run")
    whole = (loop_run / "optimizer_2.pt").read_bytes()
    # the first version is put again with a SHA-256 the store keeps, as `aws s3 cp --checksum-algorithm SHA256` does
    versioned_bucket.s3.put_object(
        Bucket=versioned_bucket.name, Key=versioned_bucket.key("run", "optimizer_2.pt"), Body=whole, ChecksumAlgorithm="SHA256"
    )
    kept = base64.b64encode(hashlib.sha256(whole).digest()).decode()
    good = _versions(versioned_bucket, "optimizer_2.pt")[0]["VersionId"]
    _cut_over(versioned_bucket, "optimizer_2.pt", whole)
    _cut_over(versioned_bucket, "optimizer_2.pt", whole[: len(whole) * 9 // 10])
    assert len(_versions(versioned_bucket, "optimizer_2.pt")) == 4

    found = _previous(inspect_json(url).json, "optimizer_2.pt")
    assert f"a whole previous version exists: {good} (" in found["message"]
    assert "its SHA256 checksum, which the store keeps, was not computed" in found["message"]
    session.forget()
    verified = cli("verify", "--json", url).json
    found = _previous(verified, "optimizer_2.pt")
    assert f"a whole previous version exists: {good} (" in found["message"]
    assert "checked by its length and its SHA256 checksum" in found["message"], found["message"]
    stored = versioned_bucket.s3.head_object(
        Bucket=versioned_bucket.name, Key=versioned_bucket.key("run", "optimizer_2.pt"), VersionId=good, ChecksumMode="ENABLED"
    )
    assert stored["ChecksumSHA256"] == kept  # the checksum computed is the one put with that version
    session.forget()

    _restore(versioned_bucket, found)
    import torch

    folder = _download(versioned_bucket, tmp_path)
    state = torch.load(folder / "optimizer_2.pt", weights_only=True)
    assert set(state) == {"state", "param_groups"}
    *_, epoch = frameworks.loop_resume(folder / "model_2.safetensors", "split")
    assert epoch == 2


def test_older_versions_damaged_too_or_none_kept_are_said(versioned_bucket: stores.Bucket, loop_run: Path, inspect_json: Any) -> None:
    run = versioned_bucket.key("run")
    whole = (loop_run / "model_1.safetensors").read_bytes()
    for path in sorted(loop_run.iterdir()):
        data = path.read_bytes()
        # model_1's every upload was cut; scheduler_2.pt's one upload was cut, and it was never overwritten
        if path.name in ("model_1.safetensors", "scheduler_2.pt"):
            data = data[: len(data) // 2]
        versioned_bucket.s3.put_object(Bucket=versioned_bucket.name, Key=f"{run}/{path.name}", Body=data)
    versioned_bucket.put("run/model_1.safetensors", whole[: len(whole) * 3 // 4])
    report = inspect_json(versioned_bucket.url("run")).json
    damaged = _previous(report, "model_1.safetensors")
    assert "no whole previous version to restore: its older version is damaged too (truncated)" in damaged["message"]
    assert not any("copy-object" in fix for fix in damaged["fixes"])
    never = _previous(report, "scheduler_2.pt")
    assert "no whole previous version to restore: no older version of it is kept" in never["message"]
    # the healthy files of the run have no such finding
    assert {f["path"].rsplit("/", 1)[-1] for f in report["findings"] if f["code"] == "CKD216"} == {"model_1.safetensors", "scheduler_2.pt"}


def test_a_healthy_versioned_run_has_no_previous_version_finding_and_reads_no_version(
    versioned_bucket: stores.Bucket, loop_run: Path, inspect_json: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = versioned_bucket.upload(loop_run, "run")
    versioned_bucket.upload(loop_run, "run")  # every object overwritten whole: older versions, none needed
    asked = _asked(monkeypatch)
    report = inspect_json(url).json
    assert "CKD216" not in {f["code"] for f in report["findings"]}
    assert "head_object" not in asked and asked.count("list_object_versions") == 1


def test_an_unversioned_bucket_asks_for_no_version(
    moto_bucket: stores.Bucket, loop_run: Path, inspect_json: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = moto_bucket.upload(loop_run, "run")
    whole = (loop_run / "model_2.safetensors").read_bytes()
    moto_bucket.put("run/model_2.safetensors", whole[: len(whole) // 2])
    asked = _asked(monkeypatch)
    versioned_reads: list[str] = []
    from ckptdoctor.stores._bucket import Bucket

    read = Bucket.read

    def counted(self: Bucket, key: str, start: int, length: int, *more: Any) -> bytes:
        if more and more[0] is not None:
            versioned_reads.append(key)
        return read(self, key, start, length, *more)

    monkeypatch.setattr(Bucket, "read", counted)
    report = inspect_json(url).json
    assert "CKD203" in {f["code"] for f in report["findings"]} and "CKD216" not in {f["code"] for f in report["findings"]}
    assert asked == ["list_multipart_uploads", "get_bucket_versioning"] and versioned_reads == []


def _asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The control plane's calls by operation, as they are made."""
    asked: list[str] = []
    call = control_plane.Control._call

    def recorded(self: control_plane.Control, what: str, operation: str, **arguments: Any) -> Any:
        asked.append(operation)
        return call(self, what, operation, **arguments)

    monkeypatch.setattr(control_plane.Control, "_call", recorded)
    return asked


def test_verify_says_the_older_versions_it_reads_in_what_it_will_download_and_reads_no_other(
    versioned_bucket: stores.Bucket, loop_run: Path, cli: Any
) -> None:
    from test_verify_egress import _verified

    url = versioned_bucket.upload(loop_run, "run")
    _cut_over(versioned_bucket, "model_2.safetensors", (loop_run / "model_2.safetensors").read_bytes())  # the header read sees it
    flipped = bytearray((loop_run / "optimizer_2.pt").read_bytes())
    member = zipfile.ZipFile(loop_run / "optimizer_2.pt").getinfo("optimizer_2/data/1")
    name, extra = struct.unpack("<HH", flipped[member.header_offset + 26 : member.header_offset + 30])
    flipped[member.header_offset + 30 + name + extra + 100] ^= 0xFF  # a tensor's byte: only the CRC-32 of a whole read sees it
    versioned_bucket.put("run/optimizer_2.pt", bytes(flipped))
    result, _, received, said = _verified(cli, "--deep", "--json", url)
    assert said is not None and received <= said, (received, said)
    assert "CKD206" in result.codes()
    model = _previous(result.json, "model_2.safetensors")
    assert "a whole previous version exists" in model["message"]
    optimizer = _previous(result.json, "optimizer_2.pt")
    assert "older versions were not read" in optimizer["message"] and "copy-object" not in " ".join(optimizer["fixes"])


@pytest.mark.parametrize("where", ["exp 1+é", "it's & $(x)"])
def test_the_restore_command_is_right_for_a_key_that_needs_quoting_and_encoding(
    where: str, versioned_bucket: stores.Bucket, loop_run: Path, cli: Any, inspect_json: Any
) -> None:
    url = versioned_bucket.upload(loop_run, where, "run")
    whole = (loop_run / "model_2.safetensors").read_bytes()
    versioned_bucket.put(f"{where}/run/model_2.safetensors", whole[: len(whole) // 2])
    report = inspect_json(url).json
    found = next(f for f in report["findings"] if f["code"] == "CKD216" and f["path"].endswith("/model_2.safetensors"))
    session.forget()
    _restore(versioned_bucket, found)  # as printed: the CLI (or boto3) encodes the copy source itself
    assert versioned_bucket.get(f"{where}/run/model_2.safetensors") == whole
    session.forget()
    assert cli("verify", url).exit_code == 0
