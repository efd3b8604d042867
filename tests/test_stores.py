"""Runs in object stores: ``inspect`` and ``verify`` of ``s3://`` URLs against real S3 servers on
127.0.0.1 (tests/stores.py), held to what the same runs on disk give.

A bucket has keys, not folders, so the one thing that can go wrong is the store's view of a run
differing from the disk's. Every verdict here is compared with a scan of the very same files on
disk, and paths are the only difference allowed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import stores
from safetensors.numpy import save_file

from ckptdoctor import units
from ckptdoctor.readers import sample as sampling
from ckptdoctor.stores import _bucket, session
from ckptdoctor.stores.listing import discover_store
from ckptdoctor.stores.urls import BadURL, Location, Store, local_path, parse
from ckptdoctor.testing import write_burn_run

pytestmark = pytest.mark.slow  # real S3 servers on 127.0.0.1

pytest.importorskip("obstore")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "runs"


# --- URLs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://bkt/runs/exp1", Location(Store.S3, "bkt", "runs/exp1")),
        ("s3a://bkt/runs/exp1/", Location(Store.S3, "bkt", "runs/exp1")),
        ("s3://bkt", Location(Store.S3, "bkt", "")),
        ("S3://bkt//runs", Location(Store.S3, "bkt", "runs")),
        ("gs://my-bucket/a/b", Location(Store.GCS, "my-bucket", "a/b")),
        ("az://container/run", Location(Store.AZURE, "container", "run")),
        ("abfs://container@account.dfs.core.windows.net/run", Location(Store.AZURE, "container", "run", "account")),
    ],
)
def test_store_urls_name_their_bucket_and_prefix(url: str, expected: Location) -> None:
    assert parse(url) == expected


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://host/run", "not a store"),
        ("s3://b/run", "not a bucket name"),
        ("s3://Bucket/run", "not a bucket name"),
        ("s3://bkt/runs/../other", "'.' and '..'"),
        ("s3://bkt/run?versionId=1", "query"),
        ("hdfs://nn/run", "not a store"),
    ],
)
def test_urls_ckptdoctor_cannot_read_are_refused_saying_why(url: str, why: str) -> None:
    with pytest.raises(BadURL, match=why.replace("(", r"\(").replace(".", r"\.")):
        parse(url)


def test_file_urls_are_local_paths(tmp_path: Path) -> None:
    assert local_path(f"file://{tmp_path}") == str(tmp_path)
    assert local_path("file:///a%20b") == "/a b"
    assert local_path("/plain/path") is None
    with pytest.raises(BadURL, match="host"):
        local_path("file://server/share")


def test_a_file_url_is_scanned_as_the_local_folder(tmp_path: Path, inspect_json: Any) -> None:
    write_burn_run(tmp_path / "run", [1, 2])
    via_url = inspect_json(f"file://{tmp_path}")
    direct = inspect_json(str(tmp_path))
    assert via_url.exit_code == direct.exit_code == 0
    assert via_url.json == direct.json


def test_a_local_folder_named_like_a_url_stays_local(tmp_path: Path, inspect_json: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_burn_run(tmp_path / "s3:" / "bkt" / "run", [1])
    result = inspect_json("s3://bkt/run")
    assert result.exit_code == 0, result.stderr
    assert [run["path"] for run in result.json["runs"]] == ["s3://bkt/run"]
    assert "store" not in result.json  # no request was made to any store


# --- inspect: the bucket's view is the disk's ----------------------------------------------------


def test_inspect_of_a_bucket_agrees_with_inspect_of_the_same_files_on_disk(moto_bucket: stores.Bucket, inspect_json: Any) -> None:
    url = moto_bucket.upload(EXAMPLES, "runs")
    local = inspect_json(str(EXAMPLES))
    remote = inspect_json(url)
    assert remote.exit_code == local.exit_code == 1  # the examples hold a truncated and a partial run
    stores.same_but_paths(remote.json, local.json, url, EXAMPLES)
    statuses = {c["status"] for run in remote.json["runs"] for c in run["checkpoints"]}
    assert {"complete", "partial"} <= statuses


def test_verify_deep_of_a_bucket_agrees_with_verify_deep_on_disk(moto_bucket: stores.Bucket, cli: Any) -> None:
    url = moto_bucket.upload(EXAMPLES, "runs")
    local = cli("verify", "--deep", "--json", str(EXAMPLES))
    remote = cli("verify", "--deep", "--json", url)
    assert remote.exit_code == local.exit_code
    stores.same_but_paths(json.loads(remote.stdout), json.loads(local.stdout), url, EXAMPLES)


def test_a_truncated_object_is_found_as_on_disk(moto_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    """An exception inside ``fs.open(p, "wb")`` commits what was written so far under the final name."""
    torch = pytest.importorskip("torch")
    run = tmp_path / "run"
    run.mkdir()
    for epoch in (1, 2):
        torch.save({"w": torch.ones(4096)}, run / f"model-{epoch}.pt")
    whole = (run / "model-2.pt").read_bytes()
    (run / "model-2.pt").write_bytes(whole[: len(whole) // 2])
    url = moto_bucket.upload(run, "run")
    for command in ("inspect", "verify"):
        local = json.loads(cli(command, "--json", str(run)).stdout)
        remote = json.loads(cli(command, "--json", url).stdout)
        stores.same_but_paths(remote, local, url, run)
        [found] = remote["runs"]
        assert [c["status"] for c in found["checkpoints"]] == ["complete", "partial"]


def test_the_summary_says_how_many_requests_and_bytes_the_scan_cost(moto_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    write_burn_run(tmp_path / "run", range(1, 11))
    url = moto_bucket.upload(tmp_path / "run", "run")
    files = len(list((tmp_path / "run").iterdir()))
    result = cli("inspect", "--json", url)
    cost = json.loads(result.stdout)["store"]
    # one listing, and each (small) file read whole in one ranged GET: nothing asked per object twice;
    # then the control plane's ListMultipartUploads and GetBucketVersioning (tests/test_store_findings.py)
    assert cost["requests"] == 1 + files + 2
    assert cost["bytes_read"] == sum(path.stat().st_size for path in (tmp_path / "run").iterdir())
    human = cli("inspect", url)
    assert f"{1 + files + 2} requests to the store" in human.stdout.splitlines()[-1]


def test_big_objects_are_read_by_their_head_and_tail_only(moto_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    numpy = pytest.importorskip("numpy")
    run = tmp_path / "run" / "checkpoint-2"
    run.mkdir(parents=True)
    save_file({"w": numpy.ones(1 << 20, dtype=numpy.float32)}, str(run / "model.safetensors"))
    url = moto_bucket.upload(tmp_path / "run", "run")
    cost = json.loads(cli("inspect", "--json", url).stdout)["store"]
    assert cost["requests"] == 3 + 2  # the listing, the head, the tail; uploads and versioning
    assert cost["bytes_read"] == sampling.HEAD + sampling.TAIL


# --- what a bucket holds that a folder does not -----------------------------------------------


def test_ckptdoctors_own_records_and_odd_keys_are_never_part_of_a_run(
    moto_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any
) -> None:
    write_burn_run(tmp_path / "run", [1, 2])
    url = moto_bucket.upload(tmp_path / "run", "run")
    moto_bucket.put("run/.ckptdoctor/journal-1.json", b"{}")
    moto_bucket.put("run/.ckptdoctor-quarantine/model-9.bpk", b"x")
    moto_bucket.put("run//model-3.bpk", b"x")
    moto_bucket.put("run/./model-4.bpk", b"x")
    result = inspect_json(url)
    [run] = result.json["runs"]
    assert [c["index"] for c in run["checkpoints"]] == [1, 2]
    assert ".ckptdoctor" not in json.dumps(result.json)
    # a key no path can name (obstore refuses to list it; boto3 lists it) is reported, never judged clean
    odd = [f for f in result.json["findings"] if f["code"] == "CKD211"]
    assert sorted(f["path"] for f in odd) == sorted([url + "//model-3.bpk", url + "/./model-4.bpk"])
    assert result.exit_code == 1
    files = [f["path"] for c in run["checkpoints"] for f in c["files"]] + run.get("other_files", [])
    assert not any("model-3" in path or "model-4" in path for path in files)


def test_a_folder_marker_object_is_a_folder(moto_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any) -> None:
    write_burn_run(tmp_path / "run", [1])
    url = moto_bucket.upload(tmp_path / "run", "run")
    moto_bucket.put("run/", b"")
    moto_bucket.put("run/logs/", b"")
    result = inspect_json(url)
    assert result.exit_code == 0
    [run] = result.json["runs"]
    assert run["path"] == url


def test_one_object_named_is_checked_alone(moto_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any) -> None:
    write_burn_run(tmp_path / "run", [1, 2])
    moto_bucket.upload(tmp_path / "run", "run")
    result = inspect_json(moto_bucket.url("run", "model-2.bpk"))
    assert result.exit_code == 0, result.stderr
    [run] = result.json["runs"]
    assert [f["path"] for c in run["checkpoints"] for f in c["files"]] == [moto_bucket.url("run", "model-2.bpk")]


# --- errors: one line, exit 2, never a traceback ---------------------------------------------------


def test_an_empty_prefix_or_a_missing_bucket_is_one_line_and_exit_2(moto_bucket: stores.Bucket, cli: Any) -> None:
    empty = cli("inspect", moto_bucket.url("nothing-here"))
    assert empty.exit_code == 2
    assert "no objects under" in empty.stderr
    missing = cli("inspect", "s3://no-such-bucket-here/run")
    assert missing.exit_code == 2
    assert "no such bucket" in missing.stderr
    assert "Traceback" not in empty.stderr + missing.stderr


@pytest.mark.usefixtures("no_retries")  # a closed port answers at once, not after ten backoffs
def test_an_unreachable_endpoint_names_the_fix(moto_bucket: stores.Bucket, cli: Any) -> None:
    result = cli("inspect", moto_bucket.url("run"), "--endpoint-url", f"http://127.0.0.1:{stores.free_port()}")
    assert result.exit_code == 2
    assert "cannot reach" in result.stderr and "--endpoint-url" in result.stderr


@pytest.mark.usefixtures("no_retries")  # a closed port answers at once, not after ten backoffs
def test_a_password_in_the_endpoint_url_is_never_printed(moto_bucket: stores.Bucket, cli: Any) -> None:
    result = cli("inspect", moto_bucket.url("run"), "--endpoint-url", f"http://admin:hunter2@127.0.0.1:{stores.free_port()}")
    assert result.exit_code == 2
    assert "cannot reach http://127.0.0.1:" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout


def test_wrong_credentials_name_the_fix(weed_bucket: stores.Bucket, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    write_burn_run(tmp_path / "run", [1])
    url = weed_bucket.upload(tmp_path / "run", "run")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    result = cli("inspect", url)
    assert result.exit_code == 2
    assert "did not accept the credentials" in result.stderr
    assert "AWS_ACCESS_KEY_ID" in result.stderr


def test_no_credentials_at_all_is_one_line_naming_where_they_come_from(
    moto_bucket: stores.Bucket, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    result = cli("inspect", moto_bucket.url("run"))
    assert result.exit_code == 2
    assert "no AWS credentials" in result.stderr


def test_a_missing_obstore_is_one_line_naming_the_extra(moto_bucket: stores.Bucket) -> None:
    blocked = "import sys; sys.modules['obstore'] = None\nfrom ckptdoctor.cli import main\nmain()"
    result = subprocess.run(
        [sys.executable, "-c", blocked, "inspect", moto_bucket.url("run")], capture_output=True, text=True, env={**os.environ}, check=False
    )
    assert result.returncode == 2
    assert "pip install 'ckptdoctor[s3]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_endpoint_url_is_refused(cli: Any) -> None:
    result = cli("inspect", "s3://bkt/run", "--endpoint-url", "localhost:9000")
    assert result.exit_code == 2
    assert "http:// or https://" in result.stderr


# --- verify: whole objects, in parts, after saying what it will download -------------------------


def test_verify_says_what_it_downloads_and_asks_above_the_limit(moto_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    write_burn_run(tmp_path / "run", [1, 2])
    url = moto_bucket.upload(tmp_path / "run", "run")
    total = sum(path.stat().st_size for path in (tmp_path / "run").iterdir())
    within = cli("verify", "--json", url)
    assert within.exit_code == 0
    # small objects: their header reads held them whole, and nothing more is read
    assert f"Reading 6 objects from the store: at most {units.size(total)} ({total:,} bytes) in all" in within.stderr
    assert json.loads(within.stdout)["store"]["bytes_read"] <= total  # never more than it said
    over = cli("verify", url, "--max-download", "1KiB")
    assert over.exit_code == 2
    assert "pass --yes" in over.stderr
    assert cli("verify", url, "--max-download", "1KiB", "--yes").exit_code == 0
    configured = cli("verify", url, env={"CKPTDOCTOR_MAX_DOWNLOAD": str(total - 1)})
    assert configured.exit_code == 2
    assert cli("verify", url, env={"CKPTDOCTOR_MAX_DOWNLOAD": str(total)}).exit_code == 0


def test_big_objects_are_read_in_parallel_parts_and_judged_as_on_disk(
    moto_bucket: stores.Bucket, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    numpy = pytest.importorskip("numpy")
    run = tmp_path / "run" / "checkpoint-1"
    run.mkdir(parents=True)
    values = numpy.ones(300_000, dtype=numpy.float32)
    values[123_456] = numpy.nan
    save_file({"w": values}, str(run / "model.safetensors"))
    url = moto_bucket.upload(tmp_path / "run", "run")
    monkeypatch.setattr(_bucket, "PART", 64 * 1024)
    for in_memory in (sampling.IN_MEMORY, 1024):  # held in memory, then spooled to a temporary file
        monkeypatch.setattr(sampling, "IN_MEMORY", in_memory)
        session.forget()
        remote = json.loads(cli("verify", "--deep", "--json", url).stdout)
        local = json.loads(cli("verify", "--deep", "--json", str(tmp_path / "run")).stdout)
        stores.same_but_paths(remote, local, url, tmp_path / "run")
        assert any(f["code"] == "CKD304" for f in remote["findings"])  # the NaN, found in the object's middle
        parts = -(-(tmp_path / "run" / "checkpoint-1" / "model.safetensors").stat().st_size // (64 * 1024))
        assert remote["store"]["requests"] >= parts


def test_an_object_that_changed_size_since_it_was_listed_is_never_called_clean(moto_bucket: stores.Bucket, tmp_path: Path) -> None:
    write_burn_run(tmp_path / "run", [1])
    url = moto_bucket.upload(tmp_path / "run", "run")
    discover_store(url)  # what a scan lists: only listed objects are read from the store
    bucket = session.bucket(parse(url))
    model = url + "/model-1.bpk"
    size = (tmp_path / "run" / "model-1.bpk").stat().st_size
    moto_bucket.put("run/model-1.bpk", b"short")
    [sample] = sampling.object_samples([(model, size)])
    assert isinstance(sample, OSError)
    with pytest.raises(OSError, match="changed while it was read"):
        bucket.read_into(bucket.location.key_of(model), size, lambda offset, data: None)


def test_the_local_start_up_does_not_import_obstore(tmp_path: Path) -> None:
    write_burn_run(tmp_path / "run", [1])
    code = "import sys\nfrom ckptdoctor.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\nprint('obstore' in sys.modules, 'boto3' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code, "inspect", str(tmp_path)], capture_output=True, text=True, check=False)
    assert result.stdout.strip().splitlines()[-1] == "False False"


def test_weed_is_started_on_localhost_with_its_telemetry_off(seaweed_endpoint: str) -> None:
    assert seaweed_endpoint.startswith("http://127.0.0.1:")
    port = seaweed_endpoint.rsplit(":", 1)[1]
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in os.listdir("/proc") if pid.isdigit() and _readable(pid)]
    [weed] = [command for command in commands if f"-s3.port={port}".encode() in command]
    assert b"-master.telemetry=false" in weed and b"-ip.bind=127.0.0.1" in weed


def _readable(pid: str) -> bool:
    try:
        Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return True


# --- what an attack on the listing found (issue 19's attack) ----------------------------------------


def test_an_object_and_a_prefix_of_one_name_never_make_a_checkpoint_a_folder(
    moto_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any
) -> None:
    """S3 holds `optim-3.bpk` and `optim-3.bpk/` both; a folder marker planted so once made a
    healthy checkpoint partial and prune deleted it."""
    write_burn_run(tmp_path / "run", range(1, 6))
    url = moto_bucket.upload(tmp_path / "run", "run")
    moto_bucket.put("run/optim-3.bpk/", b"")  # an empty marker beside the file: no folder of the run
    moto_bucket.put("run/model-5.bpk/extra.txt", b"x")  # objects below a file's name: left alone, reported
    result = inspect_json(url)
    [run] = result.json["runs"]
    assert [c["status"] for c in run["checkpoints"]] == ["complete"] * 5
    assert run["resume"]["index"] == 5
    left = {f["path"] for f in result.json["findings"] if f["code"] == "CKD211"}
    assert left == {url + "/model-5.bpk/"}


def test_the_runs_own_folder_marker_is_the_run_folder(moto_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any) -> None:
    write_burn_run(tmp_path / "run", range(1, 3))
    url = moto_bucket.upload(tmp_path / "run", "run")
    moto_bucket.put("run/", b"")
    result = inspect_json(url)
    assert result.exit_code == 0 and result.json["findings"] == []


def test_a_key_with_a_control_character_is_left_alone_and_shown_escaped(moto_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    write_burn_run(tmp_path / "run", range(1, 3))
    url = moto_bucket.upload(tmp_path / "run", "run")
    moto_bucket.put("run/model-7\x1b[31m.bpk", b"x")
    result = cli("inspect", "--json", url)
    assert result.exit_code == 1, result.stderr  # reported, not a crash
    assert "\x1b" not in result.stdout + result.stderr
    [left] = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "CKD211"]
    assert "control character" in left["message"]
    assert [c["index"] for c in json.loads(result.stdout)["runs"][0]["checkpoints"]] == [1, 2]


def test_the_summary_of_several_runs_names_their_prefix_as_a_url(moto_bucket: stores.Bucket, cli: Any) -> None:
    url = moto_bucket.upload(EXAMPLES, "runs")
    result = cli("inspect", url)
    said = result.stdout + result.stderr
    assert url in said
    assert url.replace("s3://", "s3:/") + " " not in said.replace(url, "")  # no `//` folded away
