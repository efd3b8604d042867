"""How fast and lean `ckptdoctor verify` is, as ratios against baselines measured in the same run.

Targets (issue 17):
  1. `verify` (structural) of a 1 GB `torch.save` state dict >= 25x faster than
     `python -c "import torch; torch.load(f, weights_only=True)"`;
  2. `verify --deep` of a 4 GB `torch.save` file (warm cache) at >= 60% of `cat FILE > /dev/null`'s
     throughput, peak RSS <= 128 MiB;
  3. `verify --deep --jobs 2` >= 1.7x faster than `--jobs 1` on a set where the work dominates
     start-up: 400 files of 20 MB (8 GB) by default.
Both state dicts hold 250 float32 tensors (--tensors): the 4 GB one is the 1 GB one with layers
four times as big, as a bigger model has. verify's structural read costs per tensor (~0.2 ms: the
pickle walk), --deep per byte.

The package measured is installed, as users have it, not the editable checkout: the working tree
is copied, built and installed with pip into a fresh virtual environment (byte-compiled by pip, no
editable finder on the path); its dependencies come from this interpreter's environment through a
`.pth` file (`--system-site-packages` would give the base interpreter's packages, not this venv's).
Every command runs as its own process; each pair of commands alternates, so that a noisy
neighbour slows both alike, and the ratio of the medians is reported, with every run's time. Peak
RSS is the child's ru_maxrss, read by a small wrapper process per run.

    python benchmarks/bench_verify.py [--size-mb 1000] [--deep-size-mb 4000] [--files 400]
        [--file-mb 20] [--tensors 250] [--repeat 7] [--only load,deep,jobs] [--keep DIR]

The files take --size-mb + --deep-size-mb + --files x --file-mb of disk (13 GB by default), and
each set must fit in the page cache while it is measured; they are deleted at the end unless
--keep names a folder to keep (and reuse) them in.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TREE = Path(__file__).resolve().parents[1]
_MEASURE = """
import resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode)
"""
TARGETS = {
    "verify_vs_torch_load": (">=", 25.0),
    "deep_throughput_vs_cat": (">=", 0.6),
    "deep_rss_mib": ("<=", 128.0),
    "jobs2_vs_jobs1": (">=", 1.7),
}


class Runs:
    """Wall seconds and peak RSS of each run of one command."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.rss_mib: list[float] = []

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def __str__(self) -> str:
        return f"median {self.median:.3f} s ({', '.join(f'{s:.2f}' for s in self.seconds)}), peak RSS {max(self.rss_mib):.0f} MiB"


def run_once(command: list[str], runs: Runs) -> None:
    output = subprocess.run([sys.executable, "-c", _MEASURE, *command], capture_output=True, text=True, check=True)
    seconds, rss_kib, code = output.stdout.split()
    if int(code) not in (0, 1):
        raise SystemExit(f"{command} exited {code}")
    runs.seconds.append(float(seconds))
    runs.rss_mib.append(int(rss_kib) / 1024)


def alternate(first: list[str], second: list[str], repeat: int) -> tuple[Runs, Runs]:
    """Both commands, in turn, ``repeat`` times each, after one unmeasured run of each (warm-up)."""
    runs = Runs(), Runs()
    for command in (first, second):
        run_once(command, Runs())
    for _ in range(repeat):
        run_once(first, runs[0])
        run_once(second, runs[1])
    return runs


def install(work: Path) -> Path:
    """The working tree installed with pip into a fresh venv under ``work``; its console script."""
    source = work / "source"
    shutil.copytree(TREE, source, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", ".*cache", ".venv"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    )
    Path(site.stdout.strip(), "zz_bench_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(source)], check=True)
    shutil.rmtree(source)
    return venv / "bin" / "ckptdoctor"


def make_torch_file(path: Path, size_mb: int, tensors: int) -> None:
    """A state dict of ``tensors`` float32 tensors of equal size, saved by torch."""
    code = (
        "import sys, torch; count = int(sys.argv[3]); n = int(sys.argv[2]) * 1024 * 1024 // 4 // count; torch.manual_seed(0); "
        "torch.save({f'layer{i}.weight': torch.randn(n) for i in range(count)}, sys.argv[1])"
    )
    subprocess.run([sys.executable, "-c", code, str(path), str(size_mb), str(tensors)], check=True)


def make_many(folder: Path, count: int, size_mb: int) -> None:
    """``count`` files of one float32 tensor, each saved by torch (then copied: same bytes, own inode)."""
    folder.mkdir(parents=True)
    code = "import sys, torch; torch.manual_seed(0); torch.save({'w': torch.randn(int(sys.argv[2]) * 1024 * 1024 // 4)}, sys.argv[1])"
    subprocess.run([sys.executable, "-c", code, str(folder / "model_0.pt"), str(size_mb)], check=True)
    for index in range(1, count):
        shutil.copyfile(folder / "model_0.pt", folder / f"model_{index}.pt")


def prepared(path: Path, make: Callable[[Path], None]) -> Path:
    """``path``, made by ``make`` unless an earlier run kept it (``--keep``), read once into the page cache."""
    if not path.exists():
        make(path)
    warm(path)
    return path


def warm(*paths: Path) -> None:
    for path in paths:
        files = sorted(path.iterdir()) if path.is_dir() else [path]
        for file in files:
            with file.open("rb") as data:
                while data.read(1 << 24):
                    pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1000, help="the torch.load comparison's file")
    parser.add_argument("--deep-size-mb", type=int, default=4000, help="the --deep against cat file")
    parser.add_argument("--tensors", type=int, default=250, help="in each of those two files (the bigger file, the bigger tensors)")
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--file-mb", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", default="load,deep,jobs", help="which of load, deep, jobs to measure")
    parser.add_argument("--keep", type=Path, help="reuse/keep the generated files in this folder")
    args = parser.parse_args()
    only = set(args.only.split(","))
    work = Path(tempfile.mkdtemp(prefix="ckptdoctor-bench-"))
    data = args.keep or work / "data"
    data.mkdir(parents=True, exist_ok=True)
    results: dict[str, float] = {}
    try:
        ckptdoctor = str(install(work))
        print(f"measuring {ckptdoctor} (installed with pip from {TREE}); {os.cpu_count()} CPUs; {args.repeat} runs of each")
        if "load" in only:
            big = prepared(
                data / f"state-{args.size_mb}mb-{args.tensors}.pt", lambda path: make_torch_file(path, args.size_mb, args.tensors)
            )
            torch_load = [sys.executable, "-c", f"import torch; torch.load({str(big)!r}, weights_only=True)"]
            torch_runs, verify_runs = alternate(torch_load, [ckptdoctor, "verify", str(big)], args.repeat)
            print(f"{big.stat().st_size / 1e6:.0f} MB torch.save file:\n  torch.load   {torch_runs}\n  verify       {verify_runs}")
            results |= {"torch_load_s": torch_runs.median, "verify_s": verify_runs.median, "verify_rss_mib": max(verify_runs.rss_mib)}
            results["verify_vs_torch_load"] = torch_runs.median / verify_runs.median
        if "deep" in only:
            deep = prepared(
                data / f"state-{args.deep_size_mb}mb-{args.tensors}.pt", lambda path: make_torch_file(path, args.deep_size_mb, args.tensors)
            )
            size = deep.stat().st_size
            cat_runs, deep_runs = alternate(
                ["sh", "-c", f"cat {str(deep)!r} > /dev/null"], [ckptdoctor, "verify", "--deep", str(deep)], args.repeat
            )
            print(f"{size / 1e6:.0f} MB torch.save file, warm:\n  cat          {cat_runs}\n  verify --deep {deep_runs}")
            results |= {"cat_s": cat_runs.median, "deep_s": deep_runs.median, "deep_rss_mib": max(deep_runs.rss_mib)}
            results |= {"cat_gb_per_s": size / cat_runs.median / 1e9, "deep_gb_per_s": size / deep_runs.median / 1e9}
            results["deep_throughput_vs_cat"] = cat_runs.median / deep_runs.median
        if "jobs" in only:
            many = prepared(data / f"many-{args.files}x{args.file_mb}mb", lambda path: make_many(path, args.files, args.file_mb))
            one, two = alternate(
                [ckptdoctor, "verify", "--deep", "--jobs", "1", str(many)],
                [ckptdoctor, "verify", "--deep", "--jobs", "2", str(many)],
                args.repeat,
            )
            print(f"{args.files} files of {args.file_mb} MB, warm:\n  --jobs 1     {one}\n  --jobs 2     {two}")
            results |= {"jobs1_s": one.median, "jobs2_s": two.median, "jobs2_vs_jobs1": one.median / two.median}
        print("targets (ratios of medians):")
        for name, (op, bound) in TARGETS.items():
            if name in results:
                value = results[name]
                met = value >= bound if op == ">=" else value <= bound
                print(f"  {name:24s} {value:8.3f} {op} {bound:<6} {'met' if met else 'NOT MET'}")
        print(json.dumps({k: round(v, 4) for k, v in results.items()}))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"benchmark took {time.perf_counter() - started:.0f} s")
    sys.exit(code)
