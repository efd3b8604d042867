"""How fast ``inspect`` of a run in a bucket is, as a ratio against bare obstore making the same
requests in the same run (issue 19: within 1.5x).

Starts a local S3 server itself (SeaweedFS's ``weed`` by default, as tests/stores.py starts it;
``--server moto`` for moto's, slower), writes a burn run of ``--checkpoints`` epochs x 3 files
(model, optimizer, scheduler) to disk once and uploads it, many objects at once, then times, best
of ``--repeat``, in interleaved rounds (benchmarks/_rounds.py):

  - ``inspect`` in this process (``pipelines.scan.inspect``, every client and listing forgotten
    before each round, so that each round connects and lists afresh),
  - the baseline: bare obstore making the requests ckptdoctor makes: one recursive listing, then
    the head and tail of each object (the whole object where it is no longer than HEAD + TAIL,
    readers/sample.py), at the same concurrency (stores/_bucket.py ``CONCURRENCY``),
  - the retention planning of ``prune --dry-run --keep-last 3`` on the scanned run,

then ``ckptdoctor inspect --json`` and ``prune --dry-run --json --keep-last 3`` once each as a
process (start-up included; a ckptdoctor whose ``prune`` refuses URLs says so). It prints the
ratio inspect/baseline, the requests per checkpoint both made, and the bytes both read.

    python benchmarks/bench_objstore.py [--checkpoints 2000] [--repeat 5] [--server weed|moto]
        [--profile FILE]

``--profile FILE`` writes cProfile's statistics of one more in-process ``inspect`` to FILE.

``--latency MS`` measures instead what bounds ``inspect`` where every request waits on the network
(issue 36: is fanning header reads out to a cluster worth it?): each GET and listing passes a
proxy that holds it ``MS`` ms (tests/faultproxy.py), and ``inspect`` is timed with 48 requests in
flight (``CONCURRENCY``), then 96 and 192, from this one process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import obstore
from _rounds import interleaved
from obstore.store import S3Store

from ckptdoctor.layouts.registry import layout_named
from ckptdoctor.pipelines.scan import inspect
from ckptdoctor.planners.retention import Circumstances, Policy, plan
from ckptdoctor.readers.sample import HEAD, TAIL
from ckptdoctor.stores import session
from ckptdoctor.stores._bucket import CONCURRENCY
from ckptdoctor.testing import write_burn_run

TREE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TREE / "tests"))
import stores  # noqa: E402 (the tests' server starters, shared rather than copied)

BUCKET = "bench"
PREFIX = "run"
TARGET = 1.5


@contextlib.contextmanager
def server(kind: str, folder: Path) -> Iterator[str]:
    """The endpoint of a fresh S3 server of ``kind`` on 127.0.0.1, its bucket made."""
    with stores.moto_server() if kind == "moto" else stores.seaweed_server(folder) as endpoint:
        stores.client(endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint


def s3(endpoint: str) -> Any:
    """A bare obstore client for the benchmark's bucket."""
    return S3Store(
        BUCKET,
        config={
            "endpoint": endpoint,
            "access_key_id": stores.ACCESS_KEY,
            "secret_access_key": stores.SECRET_KEY,
            "region": "us-east-1",
            "virtual_hosted_style_request": False,
        },
        client_options={"allow_http": True},
    )


async def _gated(jobs: list[Any]) -> list[Any]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(job: Any) -> Any:
        async with gate:
            return await job

    return await asyncio.gather(*(one(job) for job in jobs))


def upload(endpoint: str, folder: Path) -> int:
    """Every file of ``folder`` put under PREFIX, ``CONCURRENCY`` at a time; how many."""
    store = s3(endpoint)
    files = sorted(path for path in folder.rglob("*") if path.is_file())

    async def put(path: Path) -> None:
        await obstore.put_async(store, f"{PREFIX}/{path.relative_to(folder).as_posix()}", path.read_bytes())

    asyncio.run(_gated([put(path) for path in files]))
    return len(files)


def baseline(endpoint: str) -> tuple[int, int]:
    """Bare obstore: one recursive listing, then each object's head and tail (or all of it);
    the requests made and the bytes read."""
    store = s3(endpoint)
    pages = 0
    objects: list[tuple[str, int]] = []
    for page in obstore.list(store, PREFIX + "/", chunk_size=1000):
        pages += 1
        objects += [(meta["path"], meta["size"]) for meta in page]
    ranges: list[tuple[str, int, int]] = []
    for key, size in objects:
        if size <= HEAD + TAIL:
            ranges.append((key, 0, size))
        else:
            ranges += [(key, 0, HEAD), (key, size - TAIL, TAIL)]

    async def read(key: str, start: int, length: int) -> int:
        return len(await obstore.get_range_async(store, key, start=start, length=length))

    got = asyncio.run(_gated([read(*r) for r in ranges]))
    return max(pages, 1) + len(ranges), sum(got)


def latency_sweep(checkpoints: int, delay: float, repeat: int) -> int:
    """``inspect`` of the run through a proxy that holds each request ``delay`` s, at 48, 96 and
    192 requests in flight: where the time falls as the requests in flight rise, one machine's
    header reads are bound by the round trips, which more in flight pay for, not by its network
    or its CPU, which more machines would add."""
    from faultproxy import FaultProxy, Rule

    from ckptdoctor.stores import _bucket

    os.environ.update(stores.CLEAN_ENV)
    url = f"s3://{BUCKET}/{PREFIX}"
    with tempfile.TemporaryDirectory(prefix="ckptdoctor-objstore-") as work, server("weed", Path(work)) as endpoint:
        folder = Path(work, "local", "checkpoint")
        write_burn_run(folder, range(1, checkpoints + 1))
        count = upload(endpoint, folder.parent)
        with FaultProxy(endpoint, [Rule("delay", method="GET", seconds=delay)]) as proxy:
            os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
            times: dict[int, float] = {}
            for concurrency in (48, 96, 192):
                _bucket.CONCURRENCY = concurrency
                best = float("inf")
                for _ in range(repeat):
                    session.forget()
                    started = time.perf_counter()
                    report, _ = inspect([url])
                    best = min(best, time.perf_counter() - started)
                requests = report.transfer.requests if report.transfer else 0
                times[concurrency] = best
                print(
                    f"{count:,} objects, {delay * 1000:.0f} ms a request, {concurrency} in flight: inspect best {best:.2f} s of {repeat}, "
                    f"{requests:,} requests, {requests / best:,.0f} a second, {times[48] / best:.2f}x the speed at 48"
                )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--server", choices=("weed", "moto"), default="weed")
    parser.add_argument("--profile", type=Path, help="write cProfile statistics of one in-process inspect here")
    parser.add_argument("--latency", type=float, help="ms each request is held by a proxy: time inspect at 48, 96, 192 in flight")
    args = parser.parse_args()
    if args.latency is not None:
        return latency_sweep(args.checkpoints, args.latency / 1000, args.repeat)
    os.environ.update(stores.CLEAN_ENV)
    url = f"s3://{BUCKET}/{PREFIX}"
    with tempfile.TemporaryDirectory(prefix="ckptdoctor-objstore-") as work, server(args.server, Path(work)) as endpoint:
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        folder = Path(work, "local", "checkpoint")
        write_burn_run(folder, range(1, args.checkpoints + 1))
        started = time.perf_counter()
        count = upload(endpoint, folder.parent)
        print(f"{args.server}: {count:,} objects uploaded in {time.perf_counter() - started:.1f} s ({args.checkpoints:,} checkpoints x 3)")

        found: dict[str, Any] = {}

        def ckptdoctor_inspect() -> None:
            session.forget()
            found["report"], found["scan"] = inspect([url])

        def bare() -> None:
            found["baseline"] = baseline(endpoint)

        times = interleaved({"inspect": ckptdoctor_inspect, "baseline": bare}, args.repeat)
        report = found["report"]
        ours, theirs = min(times["inspect"]), min(times["baseline"])
        checkpoints = sum(len(run.checkpoints) for run in report.runs)
        if checkpoints != args.checkpoints or report.transfer is None:
            raise SystemExit(f"inspect found {checkpoints:,} checkpoints, not {args.checkpoints:,}: {report.errors}")
        requests, received = report.transfer.requests, report.transfer.received
        base_requests, base_bytes = found["baseline"]
        ratio = ours / theirs
        print(
            f"inspect {url}: best {ours:.3f} s of {args.repeat}; bare obstore, the same requests: best {theirs:.3f} s; "
            f"ratio {ratio:.2f}x (target <= {TARGET}x: {'met' if ratio <= TARGET else 'NOT met'})"
        )
        print(
            f"requests per checkpoint: ckptdoctor {requests / checkpoints:.3f} ({requests:,}), "
            f"baseline {base_requests / checkpoints:.3f} ({base_requests:,}); "
            f"bytes read: ckptdoctor {received:,}, baseline {base_bytes:,}"
        )

        (run,) = found["scan"].runs
        layout = layout_named(run.layout)
        policy = Policy(keep_last=3)
        circumstances = Circumstances(now=time.time() + 7200)
        planned = interleaved({"plan": lambda: plan(run, layout, policy, circumstances)}, args.repeat)["plan"]
        print(f"prune --dry-run --keep-last 3: the retention plan of the scanned run, best {min(planned) * 1000:.1f} ms")

        commands = {
            "inspect": ["inspect", "--json", url],
            "prune": ["prune", "--dry-run", "--json", "--keep-last", "3", "--min-age", "0", url],
        }
        walls: dict[str, float] = {}
        for name, command in commands.items():
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "ckptdoctor", *command], capture_output=True, text=True, check=False)
            walls[name] = time.perf_counter() - started
            if done.returncode == 2:  # refused (prune of a URL before it acted on buckets): say why
                print(f"ckptdoctor {' '.join(command)}: refused: {done.stderr.strip().splitlines()[-1]}")
                continue
            store = json.loads(done.stdout).get("store", {}) if done.stdout.startswith("{") else {}
            print(f"ckptdoctor {' '.join(command)} (a process, start-up included): {walls[name]:.2f} s, exit {done.returncode}, {store}")
        if len(walls) == 2:
            print(f"prune --dry-run / inspect, as processes: {walls['prune'] / walls['inspect']:.2f}x")

        if args.profile:
            session.forget()
            cProfile.runctx("inspect([url])", globals(), {"url": url}, str(args.profile))
            print(f"profile of one inspect: {args.profile} (python -m pstats {args.profile})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
