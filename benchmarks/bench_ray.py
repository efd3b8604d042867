"""`verify --deep --ray` against local `verify --deep`: throughput by Ray worker processes and by
local `--jobs`, each a ratio to local `--jobs 1` measured in the same run.

A run of safetensors files (`--files` of `--mib` MiB each, float32, page-cached after writing) is
verified `--deep` by this machine with `--jobs 1` and `--jobs 2`, then through a Ray cluster
started here with 1 and then 2 CPUs (one task per CPU). `wall` is the whole command (Ray's driver
connects in about a second); `deep` is, for Ray, the `executor` block's seconds from the first
task submitted to the last result in, and for local runs the wall less the same command without
`--deep` (the header reads and judging both share). On a machine of N cores every variant is
bound by N cores' block scan: Ray adds scheduling and a process per worker, not cores.

With ``--bucket``, the same run is put in a SeaweedFS bucket on 127.0.0.1 (the tests' own
server) and verified by its URL: local ``--deep`` downloads every object, ``--ray`` has the
workers read their ranges from the bucket with their own keys; ``fetched`` is what the driver
itself took from the store. There ``verify`` without ``--deep`` downloads every object too, so
local runs have no deep phase of their own to show (``—``), and their rate is the whole command's.

    python benchmarks/bench_ray.py [--files 8] [--mib 256] [--repeat 2] [--bucket]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ray_cluster import head


def write_run(folder: Path, files: int, mib: int) -> int:
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for number in range(files):
        save_file({"w": rng.standard_normal(mib * 1024 * 1024 // 4, dtype=np.float32)}, str(folder / f"model-{number}.safetensors"))
    return sum(path.stat().st_size for path in folder.iterdir())


def timed(*arguments: str) -> tuple[float, dict[str, object]]:
    start = time.perf_counter()
    ran = subprocess.run([sys.executable, "-m", "ckptdoctor", "verify", "--json", *arguments], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if not ran.stdout:
        raise SystemExit(f"verify {' '.join(arguments)} failed: {ran.stderr}")
    return wall, json.loads(ran.stdout)


def best(repeat: int, *arguments: str) -> tuple[float, dict[str, object]]:
    runs = [timed(*arguments) for _ in range(repeat)]
    return min(runs, key=lambda run: run[0])


def fetched(report: dict[str, object]) -> str:
    store = report.get("store")
    return f"{store['bytes_read'] / 2**20:>8.1f} MiB" if isinstance(store, dict) else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--bucket", action="store_true", help="verify the run from a SeaweedFS bucket on 127.0.0.1")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        run = Path(scratch) / "run"
        total = write_run(run, options.files, options.mib)
        target, env, consent = str(run), None, []
        if options.bucket:
            import stores

            endpoint = stack.enter_context(stores.seaweed_server(Path(scratch)))
            stores.client(endpoint).create_bucket(Bucket="bench")
            env = {**stores.CLEAN_ENV, "AWS_ENDPOINT_URL": endpoint}  # the driver's, and each node's own
            os.environ.update(env)
            target = stores.Bucket(endpoint, "bench", "runs", stores.client(endpoint)).upload(run, "run")
            consent = ["--yes"]  # local --deep downloads every object: over --max-download's 1 GiB
        print(
            f"{options.files} files, {total / 2**30:.2f} GiB, {os.cpu_count()} cores, from {'a bucket' if options.bucket else 'the page cache'}"
        )
        # from a bucket, verify without --deep downloads every object too: the difference is noise
        headers = None if options.bucket else best(options.repeat, target)[0]
        rows: list[tuple[str, float, float | None, dict[str, object]]] = []
        for jobs in (1, 2):
            wall, report = best(options.repeat, "--deep", "--jobs", str(jobs), *consent, target)
            rows.append((f"local --jobs {jobs}", wall, None if headers is None else wall - headers, report))
        reference = rows[0][1:3]
        for cpus in (1, 2):
            with head(cpus, env) as address:
                wall, report = best(options.repeat, "--deep", "--ray", address, *consent, target)
            executor = report["executor"]
            assert isinstance(executor, dict)
            rows.append((f"ray, {cpus} worker{'s' if cpus > 1 else ''}", wall, float(executor["seconds"]), report))
        print(f"{'variant':<20} {'wall s':>7} {'deep s':>7} {'GB/s':>6} {'wall ratio':>10} {'deep ratio':>10} {'fetched':>12}  tasks")
        for name, wall, deep, report in rows:
            executor = report.get("executor")
            tasks = f"  {executor['tasks']} tasks, {executor['workers']} workers" if isinstance(executor, dict) else ""
            rate = total / (deep or wall) / 1e9  # from a bucket, local's rate is its whole command's
            ratio = f"{reference[1] / deep:>9.2f}×" if deep and reference[1] else f"{'—':>10}"
            shown = f"{deep:>7.2f}" if deep is not None else f"{'—':>7}"
            print(f"{name:<20} {wall:>7.2f} {shown} {rate:>6.2f} {reference[0] / wall:>9.2f}× {ratio} {fetched(report):>12}{tasks}")


if __name__ == "__main__":
    main()
