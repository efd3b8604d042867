"""Time ``read_edges`` (the bytes ``inspect`` judges) on many small files against ``find``.

    python benchmarks/bench_edges.py [--files 150000] [--size 1500] [--repeat 5] [--chunk 2048] [--dir DIR]

Writes FILES files of SIZE random bytes into one folder of a temporary folder (made in DIR, by
default the system's: a file system as slow to create files as a busy VM's disk takes minutes
for 150,000, and tmpfs gives other figures), then measures,
interleaved (one round runs each measure once, in a rotating order) and as the median of
REPEAT rounds, all from the same warm page cache:

- ``find DIR -type f -printf '%s %p\\n'``: listing and stat, the baseline;
- ``scandir + stat``: the same in Python (what the scan does before it reads);
- ``read_edges`` in Python, and compiled on 1 and 2 threads: one open, fstat, read and close
  per file (each file is under HEAD + TAIL, so one read), CHUNK paths per call as a scan
  passes them. The listing is made once beforehand and is not timed.

Each is printed with its ratio to ``find``. The compiled rows are missing where the extension
was not built (``pip install -e .`` with a compiler builds it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _rounds import interleaved

from ckptdoctor.readers._edges import ReadEdges, compiled_read_edges, python_read_edges
from ckptdoctor.readers.sample import HEAD, TAIL


def build(folder: Path, files: int, size: int) -> None:
    folder.mkdir()
    data = os.urandom(size + 256)
    for i in range(files):
        (folder / f"model-{i}.bpk").write_bytes(data[i % 256 : i % 256 + size])


def listing(folder: Path) -> tuple[list[bytes], list[int]]:
    paths, sizes = [], []
    with os.scandir(os.fsencode(folder)) as entries:
        for entry in entries:
            paths.append(entry.path)
            sizes.append(entry.stat(follow_symlinks=False).st_size)
    return paths, sizes


def reading(read: ReadEdges, paths: list[bytes], sizes: list[int], threads: int, chunk: int) -> Callable[[], object]:
    def run() -> object:
        for start in range(0, len(paths), chunk):
            found = read(paths[start : start + chunk], sizes[start : start + chunk], HEAD, TAIL, threads)
            if None in found:
                raise SystemExit("a file could not be read")
        return None

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=150_000)
    parser.add_argument("--size", type=int, default=1500)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=2048)
    parser.add_argument("--dir", default=None, help="where to make the temporary folder")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="ckptdoctor-bench-edges-", dir=args.dir))
    try:
        folder = scratch / "run"
        started = time.perf_counter()
        build(folder, args.files, args.size)
        print(f"built {args.files:,} files of {args.size:,} bytes in {time.perf_counter() - started:.1f} s")
        paths, sizes = listing(folder)
        find = ["find", str(folder), "-type", "f", "-printf", "%s %p\\n"]
        measures: dict[str, Callable[[], object]] = {
            "find -printf": lambda: subprocess.run(find, stdout=subprocess.DEVNULL, check=True),
            "scandir + stat (Python)": lambda: listing(folder),
            "read_edges, Python": reading(python_read_edges, paths, sizes, 1, args.chunk),
        }
        if compiled_read_edges is not None:
            for threads in (1, 2):
                measures[f"read_edges, C, {threads} thread{'s' * (threads > 1)}"] = reading(
                    compiled_read_edges, paths, sizes, threads, args.chunk
                )
        else:
            print("ckptdoctor.readers._cedges is not built: the compiled rows are missing")
        times = interleaved(measures, args.repeat)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    find_s = statistics.median(times["find -printf"])
    print(f"{args.files:,} files, median of {args.repeat} interleaved rounds, {os.cpu_count()} cpus, Python {sys.version.split()[0]}:")
    for name, runs in times.items():
        median = statistics.median(runs)
        per_file = median / args.files * 1e6
        print(f"  {name:26} {median:7.3f} s  {per_file:6.2f} µs/file  {median / find_s:5.2f}x find")


if __name__ == "__main__":
    main()
