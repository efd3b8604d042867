"""A Ray cluster on 127.0.0.1 for tests/test_ray.py and benchmarks/bench_ray.py, a worker setup
hook that kills the workers that read ranges, and a driver that runs ``verify --deep --ray`` with
that hook: ``python tests/ray_cluster.py ADDRESS RUN COUNTER``.

Nothing here connects the calling process to Ray: a driver's process keeps Ray's gRPC threads and
exit hooks after ``ray.shutdown()``, which must not outlive one test in a pytest worker."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def head(cpus: int, env: dict[str, str] | None = None) -> Iterator[str]:
    """A Ray head with ``cpus`` CPUs on free ports, its address; stopped after, and only it (``ray
    stop`` would stop every cluster of the machine). Its workers can import this module, and
    have ``env`` (a node's own credentials) in their environment. Started again on other ports,
    up to three times, where ``ray start`` exits: a port free when chosen can be taken before
    Ray binds it, by a process beside it or by Ray's own ports, which it picks at random."""
    for attempt in range(3):
        process, address, said = _start(cpus, env)
        try:
            _wait_for(address, process, said)
        except _StartFailed:
            _stop(process, said)
            if attempt == 2:
                raise
            continue
        try:
            yield address
        finally:
            _stop(process, said)
        return


class _StartFailed(RuntimeError):
    pass


def _start(cpus: int, env: dict[str, str] | None) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    ports = ["--port", str(port), "--ray-client-server-port", str(free_port()), "--dashboard-agent-listen-port", str(free_port())]
    # tasks return a few numbers: Ray's default store (30 % of memory, in /dev/shm, or a file in /tmp
    # where /dev/shm is small) would take what the tests running beside it need
    store = ["--object-store-memory", str(100 * 1000 * 1000)]
    said = Path(tempfile.mkstemp(prefix="ray-start-", suffix=".log")[1])
    with said.open("wb") as log:
        process = subprocess.Popen(
            [
                "ray",
                "start",
                "--head",
                "--block",
                "--num-cpus",
                str(cpus),
                *ports,
                *store,
                "--include-dashboard",
                "false",
                "--disable-usage-stats",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the head and every process it starts: one group to stop
            # a cluster on loopback for one test module or benchmark needs no token
            env={**os.environ, **(env or {}), "PYTHONPATH": str(HERE), "RAY_AUTH_MODE": "disabled"},
        )
    return process, f"127.0.0.1:{port}", said


def _stop(process: subprocess.Popen[bytes], said: Path) -> None:
    with contextlib.suppress(ProcessLookupError):  # a test may have killed it
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    said.unlink(missing_ok=True)


def _wait_for(address: str, process: subprocess.Popen[bytes], said: Path) -> None:
    """Until a driver finds the head's node alive in the cluster at ``address``."""
    probe = "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); print(sum(node['Alive'] for node in ray.nodes()) + 1)"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise _StartFailed(f"ray start exited with {process.returncode}: {said.read_text(errors='replace')[-2000:]}")
        try:
            ran = subprocess.run([sys.executable, "-c", probe, address], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            continue
        if ran.stdout.strip() == "2":
            return
        time.sleep(1)
    raise TimeoutError(f"no Ray cluster answered at {address} within 120 s: {said.read_text(errors='replace')[-2000:]}")


def dying_reads() -> None:
    """In each new worker (``runtime_env={"worker_process_setup_hook": "ray_cluster.dying_reads"}``):
    the worker that reads a range dies, as a node killed mid-task does, as often as the file
    ``CKPTDOCTOR_TEST_DEATHS`` names says."""
    from ckptdoctor.readers import deep_scan

    deaths = Path(os.environ["CKPTDOCTOR_TEST_DEATHS"])
    check_at = deep_scan.check_at

    def dying(*args: Any) -> Any:
        with open(deaths, "r+") as counter:
            fcntl.flock(counter, fcntl.LOCK_EX)  # workers die one at a time
            left = int(counter.read() or 0)
            if left > 0:
                counter.seek(0)
                counter.truncate()
                counter.write(str(left - 1))
                counter.flush()
                os._exit(9)  # as SIGKILL leaves it: no cleanup, no exception for Ray to see
        return check_at(*args)

    deep_scan.check_at = dying


def cluster_dies() -> None:
    """In each new worker (``RAY_JOB_CONFIG_JSON_ENV_VAR``): the first range read kills the whole
    cluster (the head's processes, and this worker), as a head node lost mid-run does."""
    from ckptdoctor.readers import deep_scan

    def dying(*args: Any) -> Any:
        os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)  # the raylet's group: the head's processes (workers have their own)
        os._exit(9)

    deep_scan.check_at = dying


def slow_reads() -> None:
    """In each new worker: a range read first writes its worker's pid to the file
    ``CKPTDOCTOR_TEST_MARK`` names, then takes 60 s, then writes ``done`` beside it."""
    from ckptdoctor.readers import deep_scan

    mark = Path(os.environ["CKPTDOCTOR_TEST_MARK"])
    check_at = deep_scan.check_at

    def slow(*args: Any) -> Any:
        mark.write_text(str(os.getpid()))
        time.sleep(60)
        mark.with_suffix(".done").write_text("done")
        return check_at(*args)

    deep_scan.check_at = slow


def drive_with_deaths(address: str, run: str, counter: str) -> int:
    """``verify --deep --ray`` of ``run`` from this process, the driver, while the first range
    reads on the cluster kill their worker, as many as the file ``counter`` says: the report on
    stdout, its exit code returned. Where a worker died, it waits (10 s at most) for the
    cluster's message of it, which Ray prints from a thread of its own, before it disconnects."""
    import ray

    from ckptdoctor import api
    from ckptdoctor.fanout.ray import to_stderr
    from ckptdoctor.render.json import render

    deaths = int(Path(counter).read_text())
    if "CKPTDOCTOR_TEST_TASK_BYTES" in os.environ:  # files of a few MiB dealt into several tasks
        from ckptdoctor.fanout import ray as fanout

        fanout.TASK_BYTES = int(os.environ["CKPTDOCTOR_TEST_TASK_BYTES"])
    ray.init(
        address=address,
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": "ray_cluster.dying_reads", "env_vars": {"CKPTDOCTOR_TEST_DEATHS": counter}},
    )
    to_stderr(ray)  # as connect() does where it connects itself
    printed = threading.Event()
    printer = ray._private.worker.print_to_stdstream

    def watched(*args: Any, **kwargs: Any) -> Any:
        printed.set()
        return printer(*args, **kwargs)

    watched.ckptdoctor = True  # type: ignore[attr-defined]
    ray._private.worker.print_to_stdstream = watched
    try:
        scanned = api.run_verify(api.VerifyOptions((run,), deep=True, ray=address))
        if deaths:
            printed.wait(10)
    finally:
        ray.shutdown()
    sys.stdout.buffer.writelines(render(scanned.report))
    return 0 if scanned.report.ok else 1


if __name__ == "__main__":
    sys.exit(drive_with_deaths(*sys.argv[1:]))
