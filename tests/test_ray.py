"""``verify --deep --ray`` against a real Ray cluster on 127.0.0.1 (``ray start --head``, 2 CPUs),
started once for this module and stopped after it: on every run, the report equals the one this
machine writes alone, apart from the ``executor`` block, which shows the work went to the
cluster. Workers killed mid-task are retried by Ray; a range whose every try died is an
unreadable file, never a clean one.

The runs are real: HF Trainer (a tiny GPT-2), Lightning's ``ModelCheckpoint``, ``dcp.save``,
Keras-layout HDF5 through h5py, and the shared corpus of torch files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import stores
from conftest import Result
from frameworks import copy_run, dcp_loop
from ray_cluster import free_port, head

from ckptdoctor.readers.sample import HEAD, TAIL

pytest.importorskip("ray", reason="needs Ray (pip install 'ckptdoctor[ray]')")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A Ray head on 127.0.0.1 with 2 CPUs, its address; its workers hold the test S3 servers'
    keys, as a cluster's nodes hold their own credentials. One per pytest-xdist worker that runs
    these tests: a lock between workers held for the module's life deadlocked the suite (a worker
    keeps its last test, and the module's fixtures, until it is sent another, while the other
    waited on the lock), and CI timed out."""
    with head(2, stores.CLEAN_ENV) as address:
        yield address


def fanned(path: Path, address: str, *options: str) -> tuple[int, dict[str, Any]]:
    """``verify --deep --json --ray ADDRESS`` of ``path`` in a process of its own (a driver of the
    cluster), its exit code and report."""
    ran = subprocess.run(
        [sys.executable, "-m", "ckptdoctor", "verify", "--deep", "--json", "--ray", address, *options, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.stdout, ran.stderr
    return ran.returncode, json.loads(ran.stdout)


def assert_same(alone: Result, report: dict[str, Any], code: int) -> dict[str, Any]:
    """The report of the fan-out equals this machine's, but for its ``executor`` block, which it
    returns, and the requests this process made of a store and the bytes they brought, which are
    no more than alone (it downloads no object whole)."""
    executor = report.pop("executor")
    expected = alone.json
    if "store" in expected:
        assert report["store"].pop("bytes_read") <= expected["store"].pop("bytes_read")
        report["store"].pop("requests"), expected["store"].pop("requests")
    assert code == alone.exit_code
    assert stores.flat(report) == stores.flat(expected)  # a difference shows where it is
    assert executor["kind"] == "ray", executor
    return dict(executor)


def _hdf5_with_nan(folder: Path) -> Path:
    h5py = pytest.importorskip("h5py")
    import numpy as np

    values = np.ones((64, 64), "float32")
    values[3, 3] = np.nan
    with h5py.File(folder / "model.weights.h5", "w") as f:
        f.create_dataset("layers/dense/vars/0", data=values)
        f.create_dataset("layers/dense/vars/1", data=np.zeros(64, "float32"))
    return folder


def _safetensors_with_nan(folder: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    weights = torch.ones(1024, 2048)  # 8 MiB: more than a header read holds
    weights[700, 3] = float("nan")
    save_file({"w": weights, "b": torch.zeros(2048)}, folder / "model.safetensors")
    return folder


def _torch_with_flipped_byte(folder: Path) -> Path:
    import torch

    torch.save({"model": {"w": torch.ones(256, 256)}, "epoch": 3}, folder / "checkpoint-3.pt")
    data = bytearray((folder / "checkpoint-3.pt").read_bytes())
    at = data.index(bytes(torch.ones(4).numpy().tobytes()))  # inside the stored tensor, whose CRC-32 the zip records
    data[at + 1] ^= 0x01
    (folder / "checkpoint-3.pt").write_bytes(bytes(data))
    return folder


RUNS: dict[str, Callable[[pytest.FixtureRequest, Path], Path]] = {
    "hf-trainer": lambda request, tmp: copy_run(request.getfixturevalue("hf_trained"), tmp / "out"),
    "lightning": lambda request, tmp: copy_run(request.getfixturevalue("lightning_saved")["copy"], tmp / "checkpoints"),
    "dcp": lambda request, tmp: (dcp_loop(tmp / "run", 4), tmp / "run")[1],
    "hdf5-nan": lambda request, tmp: _hdf5_with_nan(tmp),
    "safetensors-nan": lambda request, tmp: _safetensors_with_nan(tmp),
    "torch-crc-mismatch": lambda request, tmp: _torch_with_flipped_byte(tmp),
    "corpus-torch": lambda request, tmp: request.getfixturevalue("corpus") / "torch-samples",
}


@pytest.mark.parametrize("name", RUNS)
def test_the_fanned_out_report_equals_this_machines(
    name: str, request: pytest.FixtureRequest, tmp_path: Path, cluster: str, cli: Callable[..., Result]
) -> None:
    run = RUNS[name](request, tmp_path)
    alone = cli("verify", "--deep", "--json", run)
    code, report = fanned(run, cluster)
    executor = assert_same(alone, report, code)
    assert executor["tasks"] >= 1 and executor["workers"] >= 1 and executor["bytes_read"] > 0, executor


@pytest.mark.parametrize("name", ["hf-trainer", "lightning", "dcp", "torch-crc-mismatch", "safetensors-nan"])
def test_a_run_in_a_bucket_fanned_out_equals_this_machines(
    name: str, request: pytest.FixtureRequest, tmp_path: Path, cluster: str, cli: Callable[..., Result], weed_bucket: stores.Bucket
) -> None:
    """The workers read the objects themselves, with their own keys, at the endpoint the driver
    reached; the driver reads headers by ranges and downloads no object whole."""
    run = RUNS[name](request, tmp_path)
    url = weed_bucket.upload(run, "run")
    alone = cli("verify", "--deep", "--json", url)
    code, report = fanned(url, cluster)
    fetched, downloaded = report["store"]["bytes_read"], alone.json["store"]["bytes_read"]
    executor = assert_same(alone, report, code)
    biggest = max(path.stat().st_size for path in run.rglob("*") if path.is_file())
    if biggest > HEAD + TAIL:  # read by no header read whole: its ranges went to the workers
        assert executor["tasks"] >= 1 and executor["bytes_read"] > 0, executor
    if biggest > 1024 * 1024:  # and the driver read its headers, not its tensors
        assert fetched < downloaded - biggest / 2, (fetched, downloaded, biggest)


def test_a_sweep_of_a_buckets_runs_is_one_fan_out_with_the_same_report(
    request: pytest.FixtureRequest, tmp_path: Path, cluster: str, cli: Callable[..., Result], weed_bucket: stores.Bucket
) -> None:
    for name in ("hf-trainer", "dcp", "safetensors-nan"):
        (tmp_path / name).mkdir()
        weed_bucket.upload(RUNS[name](request, tmp_path / name), "runs", name)
    alone = cli("verify", "--deep", "--json", weed_bucket.url("runs"))
    code, report = fanned(weed_bucket.url("runs"), cluster)
    executor = assert_same(alone, report, code)
    assert code == 1 and {run["path"].rsplit("/", 1)[-1] for run in report["runs"]} == {"hf-trainer", "dcp", "safetensors-nan"}
    assert executor["tasks"] >= 3, executor  # the NaN's file, and each run's files over 20 KiB


def test_a_task_reads_the_object_the_driver_listed_or_nothing(weed_bucket: stores.Bucket) -> None:
    """Each read of a task asks for the listed ETag (``If-Match``): an object written again since,
    even to the same size, is refused by the store, never read as the listed one."""
    from ckptdoctor.readers import deep_scan
    from ckptdoctor.readers.sample import ObjectAddress

    data = bytes(range(256)) * 4096
    address = ObjectAddress(weed_bucket.url("model.bin"), len(data), weed_bucket.put("model.bin", data), None, weed_bucket.endpoint)
    region = deep_scan.Region(0, len(data), crc=True)
    assert deep_scan.check_at(address, [region])[0].crc == zlib.crc32(data)
    weed_bucket.put("model.bin", bytes(reversed(data)))
    with pytest.raises(deep_scan.FileChanged, match="changed since it was listed"):
        deep_scan.check_at(address, [region])


def test_workers_that_may_not_read_the_bucket_stop_the_command_before_any_range(tmp_path: Path, weed_bucket: stores.Bucket) -> None:
    """Nodes whose own credentials the bucket refuses: one line, exit 2, before any range is
    dealt out; the driver's credentials are never sent to the cluster."""
    import torch
    from safetensors.torch import save_file

    (tmp_path / "run").mkdir()
    save_file({"w": torch.ones(64)}, tmp_path / "run" / "model.safetensors")
    url = weed_bucket.upload(tmp_path / "run", "run")
    with head(1, {"AWS_ACCESS_KEY_ID": "someone-else", "AWS_SECRET_ACCESS_KEY": "not-the-key"}) as address:
        ran = subprocess.run(
            [sys.executable, "-m", "ckptdoctor", "verify", "--deep", "--ray", address, url], capture_output=True, text=True, timeout=180
        )
    said = ran.stderr.strip().splitlines()
    assert ran.returncode == 2 and said[-1].startswith("ckptdoctor: error: "), ran.stderr
    assert f"the Ray workers cannot read {url}/model.safetensors as this machine does" in said[-1]
    assert "(InvalidAccessKeyId)" in said[-1] and said[-1].endswith(
        "give every node credentials that may read it (the workers use their own: environment, profile, instance role)"
    )
    assert len(said) == 2 and said[0].startswith("Reading 1 object from the store: at most "), said  # no retry, no traceback
    assert said[0].endswith("(each whole, once; under --ray the cluster reads their tensors, and this machine less)."), said


def test_the_python_api_leaves_no_thread_behind_call_after_call(tmp_path: Path, cluster: str) -> None:
    """``verify(..., ray=)`` in a long-lived process: the thread that watches the head ends with each call."""
    _safetensors_with_nan(tmp_path)
    script = (
        "import sys, threading, time\n"
        "from ckptdoctor import api\n"
        "for _ in range(3):\n"
        "    api.run_verify(api.VerifyOptions((sys.argv[1],), deep=True, ray=sys.argv[2]))\n"
        "time.sleep(0.5)\n"
        "print(sorted(t.name for t in threading.enumerate() if t.name.startswith('ckptdoctor')))\n"
    )
    ran = subprocess.run([sys.executable, "-c", script, str(tmp_path), cluster], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0 and ran.stdout.splitlines()[-1] == "[]", (ran.stdout, ran.stderr[-2000:])


@pytest.mark.parametrize(
    ("name", "in_bucket"),
    [
        *((name, False) for name in RUNS),
        *((name, True) for name in ("hf-trainer", "lightning", "dcp", "torch-crc-mismatch", "safetensors-nan")),
    ],
)
def test_a_worker_killed_mid_task_is_retried_and_the_report_is_the_same(
    name: str, in_bucket: bool, request: pytest.FixtureRequest, tmp_path: Path, cluster: str, cli: Callable[..., Result]
) -> None:
    """Every fixture, on a disk the workers share and in a bucket: the first range read kills its
    worker, and Ray's retry gives the report this machine writes alone."""
    (tmp_path / "run").mkdir()  # the file of deaths left goes beside it, not in it
    run = RUNS[name](request, tmp_path / "run")
    target = request.getfixturevalue("weed_bucket").upload(run, "run") if in_bucket else str(run)
    alone = cli("verify", "--deep", "--json", target)
    code, report, deaths, _ = _with_deaths(target, cluster, tmp_path, 1)
    tasks = report["executor"]["tasks"]
    assert_same(alone, report, code)
    assert deaths == (0 if tasks else 1), (tasks, deaths)  # a run read whole by its header reads has no task to kill


def test_a_range_whose_every_try_died_is_unreadable_never_clean(tmp_path: Path, cluster: str) -> None:
    """And the cluster's messages of it ("a worker died", "will be retried"), which Ray's driver
    prints on stdout, go to stderr: stdout holds the report alone."""
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.ones(512, 512)}, tmp_path / "model.safetensors")
    code, report, _, err = _with_deaths(tmp_path, cluster, tmp_path, 100)
    assert code == 1
    (finding,) = [f for f in report["findings"] if f["severity"] == "error"]
    assert finding["code"] == "CKD211" and finding["path"].endswith("model.safetensors"), finding
    # the tensor's bytes, after safetensors' 8-byte length and its 72-byte header
    assert "could not read bytes 80–1,048,656 of model.safetensors on the Ray cluster: its worker died 4 times" in finding["message"]
    assert report["executor"]["workers"] == 0 and report["executor"]["bytes_read"] == 0 and report["executor"]["seconds"] >= 0
    assert "(raylet)" in err, err  # and stdout was the report alone: it parsed


def test_a_file_whose_first_task_died_every_try_says_its_other_ranges_are_unchecked(tmp_path: Path, cluster: str) -> None:
    """An attack on issue 36: the finding named the first range that failed and nothing of the
    file's other tasks, cancelled with it. Tasks of 256 KiB here, four to the file."""
    import torch
    from safetensors.torch import save_file

    save_file({f"w{number}": torch.ones(256, 256) for number in range(4)}, tmp_path / "model.safetensors")
    code, report, _, _ = _with_deaths(tmp_path, cluster, tmp_path, 100, task_bytes=256 * 1024)
    (finding,) = [f for f in report["findings"] if f["severity"] == "error"]
    assert code == 1 and finding["code"] == "CKD211", finding
    assert "of model.safetensors on the Ray cluster: its worker died 4 times (its other 3 ranges are left unchecked)" in finding["message"]


def _with_deaths(
    run: Path | str, address: str, scratch: Path, deaths: int, task_bytes: int | None = None
) -> tuple[int, dict[str, Any], int, str]:
    """``verify --deep --ray`` of ``run`` from a driver process of its own while the first ``deaths``
    range reads on the cluster kill their worker; the exit code, the report, the deaths left, and
    what the driver printed on stderr. ``task_bytes``: the bytes dealt to a task, where not the
    command's own."""
    counter = scratch / "deaths"
    counter.write_text(str(deaths))
    ran = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("ray_cluster.py")), address, str(run), str(counter)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **({"CKPTDOCTOR_TEST_TASK_BYTES": str(task_bytes)} if task_bytes else {})},
    )
    assert ran.returncode in (0, 1) and ran.stdout, ran.stderr[-3000:]
    return ran.returncode, json.loads(ran.stdout), int(counter.read_text()), ran.stderr


def test_a_cluster_that_goes_away_mid_run_ends_the_command_with_one_line_and_exit_2(tmp_path: Path) -> None:
    """The head's processes killed as the first range is read: the command says so and exits 2
    within seconds, where Ray's own driver would end the process a minute later with exit 1 and
    no word of what happened."""
    _safetensors_with_nan(tmp_path)
    hook = {"runtime_env": {"worker_process_setup_hook": "ray_cluster.cluster_dies"}}  # how `ray job submit` hands a driver its runtime_env
    with head(1) as address:
        start = time.monotonic()
        ran = subprocess.run(
            [sys.executable, "-m", "ckptdoctor", "verify", "--deep", "--ray", address, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(hook)},
        )
        took = time.monotonic() - start
    assert ran.returncode == 2 and ran.stdout == "", (ran.returncode, ran.stdout, ran.stderr)
    # before it, at most the log line of Ray's core that its error for the dead worker found no driver
    said = ran.stderr.strip().splitlines()
    assert said[-1].startswith("ckptdoctor: error: the Ray cluster went away: its head at ") and "Traceback" not in ran.stderr, ran.stderr
    assert "has not answered for 10 s" in said[-1] and took < 55, took


def test_ctrl_c_cancels_the_tasks_under_way_and_exits_130_at_once(tmp_path: Path) -> None:
    """Each range read takes a minute (a hook): Ctrl-C while one runs ends the command within
    seconds, exit 130, and the task's worker is stopped, its read never finished."""
    _safetensors_with_nan(tmp_path)
    mark = tmp_path / "read.pid"
    hook = {"runtime_env": {"worker_process_setup_hook": "ray_cluster.slow_reads", "env_vars": {"CKPTDOCTOR_TEST_MARK": str(mark)}}}
    with head(1) as address:
        command = [sys.executable, "-m", "ckptdoctor", "verify", "--deep", "--ray", address, str(tmp_path)]
        env = {**os.environ, "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(hook)}
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as driver:
            deadline = time.monotonic() + 120
            while not mark.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert mark.exists(), "no range read began"
            driver.send_signal(signal.SIGINT)
            start = time.monotonic()
            _, err = driver.communicate(timeout=120)
            took = time.monotonic() - start
        worker = int(mark.read_text())
        deadline = time.monotonic() + 10
        while stores.alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert driver.returncode == 130 and took < 15, (driver.returncode, took, err)
        assert not stores.alive(worker) and not mark.with_suffix(".done").exists()


def test_without_ray_installed_ray_says_how_to_install_it(tmp_path: Path) -> None:
    """Nothing of Ray is imported by a verify that does not ask for it; ``--ray`` where it is not
    installed says how to install it, exit 2."""
    (tmp_path / "model.safetensors").write_bytes(b"")
    blocked = "import sys; sys.modules['ray'] = None; from ckptdoctor.cli import main; sys.argv[0] = 'ckptdoctor'; main()"
    ran = subprocess.run(
        [sys.executable, "-c", blocked, "verify", "--deep", "--ray", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 2 and "pip install 'ckptdoctor[ray]'" in ran.stderr, ran.stderr
    imported = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ckptdoctor", "verify", "--deep", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    ).stderr
    modules = {line.rsplit("|", 1)[-1].strip() for line in imported.splitlines()}
    assert "ckptdoctor.readers.deep_scan" in modules  # what importtime writes, read
    assert not {name for name in modules if name.split(".")[0] == "ray"}


def test_an_address_with_no_cluster_fails_within_seconds_with_exit_2(tmp_path: Path) -> None:
    start = time.monotonic()
    ran = subprocess.run(
        [sys.executable, "-m", "ckptdoctor", "verify", "--deep", "--ray", f"127.0.0.1:{free_port()}", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 2 and ran.stderr.startswith("ckptdoctor: error: no Ray cluster at 127.0.0.1:"), ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1 and time.monotonic() - start < 30


def test_auto_with_a_stopped_clusters_record_fails_within_seconds_with_exit_2(tmp_path: Path) -> None:
    """Ray records the address of the cluster last started on a machine, and keeps the record
    after that cluster stops: ``--ray auto`` checks it as it checks a given address, where Ray's
    client retried it for minutes."""
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{free_port()}")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "model.safetensors").write_bytes(b"")
    env = {**os.environ, "RAY_TMPDIR": str(tmp_path)}  # where Ray looks for its record
    env.pop("RAY_ADDRESS", None)
    # a cluster another test runs meanwhile is live, and auto would take it: none is, here
    alone = (
        "import functools, sys, ray._private.services as services; services.find_gcs_addresses = functools.cache(lambda: []); "
        "from ckptdoctor.cli import main; sys.argv[0] = 'ckptdoctor'; main()"
    )
    start = time.monotonic()
    ran = subprocess.run(
        [sys.executable, "-c", alone, "verify", "--deep", "--ray", "auto", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert ran.returncode == 2 and len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    assert "no Ray cluster at " in ran.stderr and "(--ray auto: RAY_ADDRESS, else the cluster last started here)" in ran.stderr
    assert time.monotonic() - start < 30


def test_ray_without_deep_is_refused_and_off_is_not(tmp_path: Path, cli: Callable[..., Result]) -> None:
    result = cli("verify", "--ray", "auto", tmp_path)
    assert result.exit_code == 2 and "--deep" in result.stderr
    assert cli("verify", "--ray", "off", tmp_path).exit_code == 0


def test_the_configured_cluster_is_used_for_deep_only_and_off_overrides_it(tmp_path: Path, cli: Callable[..., Result]) -> None:
    """``CKPTDOCTOR_RAY`` (``ray =`` in the configuration) reaches ``verify --deep``, not a plain
    ``verify``; ``--ray off`` reads here whatever it says."""
    (tmp_path / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    configured = {"CKPTDOCTOR_RAY": f"127.0.0.1:{free_port()}"}
    deep = cli("verify", "--deep", tmp_path, env=configured)
    assert deep.exit_code == 2 and f"no Ray cluster at {configured['CKPTDOCTOR_RAY']}" in deep.stderr, deep.stderr
    assert cli("verify", tmp_path, env=configured).exit_code == 0
    assert cli("verify", "--deep", "--ray", "off", tmp_path, env=configured).exit_code == 0


@pytest.mark.parametrize("address", ["127.0.0.1:99999", "127.0.0.1:0", "nonsense", ":6379", "http://127.0.0.1:6379"])
def test_what_is_no_address_is_said_so(tmp_path: Path, cli: Callable[..., Result], address: str) -> None:
    result = cli("verify", "--deep", "--ray", address, tmp_path)
    assert result.exit_code == 2 and "is not a Ray cluster's address" in result.stderr, result.stderr


def test_auto_never_starts_a_cluster_of_its_own(tmp_path: Path) -> None:
    """``RAY_ADDRESS=local`` makes ``ray.init`` start a cluster for the process: ``--ray`` is for an
    existing cluster, and a throwaway one would take every core of this machine."""
    (tmp_path / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    ran = subprocess.run(
        [sys.executable, "-m", "ckptdoctor", "verify", "--deep", "--ray", "auto", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAY_ADDRESS": "local"},
    )
    assert ran.returncode == 2 and ran.stderr.strip().endswith("give an existing cluster's address (--ray HOST:PORT, RAY_ADDRESS)"), (
        ran.stderr
    )
    assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr


def test_a_cluster_with_no_cpus_is_said_so_at_once(tmp_path: Path) -> None:
    """Its tasks would wait for a CPU for ever."""
    (tmp_path / "model.safetensors").write_bytes(b"")
    with head(0) as address:
        ran = subprocess.run(
            [sys.executable, "-m", "ckptdoctor", "verify", "--deep", "--ray", address, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert (
        ran.returncode == 2
        and ran.stderr.strip() == "ckptdoctor: error: the Ray cluster has no CPUs for tasks: start its nodes with --num-cpus above 0"
    )


def test_a_worker_that_sees_another_file_at_the_path_fails_closed(tmp_path: Path) -> None:
    """A node whose mount holds another file at the same path (a stale copy, a different
    volume) must not be read for this one: the task's check of size and modification time
    refuses it, and the range is unreadable."""
    from ckptdoctor.readers import deep_scan
    from ckptdoctor.readers.sample import FileSample

    path = tmp_path / "model.safetensors"
    path.write_bytes(bytes(4096))
    with FileSample.open(str(path)) as sample:
        address = sample.address()
    assert address is not None
    assert deep_scan.check_at(address, [deep_scan.Region(0, 4096, zeros=True)])[0].zero is True
    os.utime(path, ns=(0, address.mtime_ns + 1))
    with pytest.raises(deep_scan.FileChanged, match="another file here"):
        deep_scan.check_at(address, [deep_scan.Region(0, 4096, zeros=True)])
    # another file of the same size renamed over it, its modification time set back: not this one either
    (tmp_path / "other").write_bytes(bytes(4096))
    os.utime(tmp_path / "other", ns=(0, address.mtime_ns))
    os.replace(tmp_path / "other", path)
    assert os.stat(path).st_mtime_ns == address.mtime_ns and os.stat(path).st_size == address.size
    with pytest.raises(deep_scan.FileChanged, match="another file here"):
        deep_scan.check_at(address, [deep_scan.Region(0, 4096, zeros=True)])


def test_what_no_second_try_would_read_is_not_retried(tmp_path: Path) -> None:
    """A task's error that every try would meet (no file there, a folder) is said at once, not
    handed to Ray's retries (3 more tries, each printing a traceback)."""
    from ckptdoctor.fanout import ray as fanout
    from ckptdoctor.readers import deep_scan
    from ckptdoctor.readers.sample import FileAddress

    for there in (tmp_path / "gone.safetensors", tmp_path):
        address = FileAddress(str(there), 4096, 0)
        with pytest.raises(deep_scan.FileChanged, match=r"could not read bytes 0–4,096 of .* on the Ray cluster: ") as raised:
            fanout._check_task(address, [deep_scan.Region(0, 4096, zeros=True)])
        assert not isinstance(raised.value, OSError) and fanout.RETRIES == 3
