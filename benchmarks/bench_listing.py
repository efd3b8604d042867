"""Time listing and stat (what ``inspect`` does before it reads) against ``find``.

    python benchmarks/bench_listing.py [--epochs 50000] [--repeat 7] [--dir DIR] [--folder FOLDER]

Writes a burn run of EPOCHS epochs (3 small files each: 150,000 files by default) into a
temporary folder (made in DIR, by default the system's), or lists FOLDER as it is, then measures,
interleaved (one round runs each measure once, in a rotating order) and as the median of REPEAT
rounds, all from the same warm cache:

- ``find FOLDER -type f -printf '%s %p\\n'``: listing and stat, the baseline;
- ``python_list``: ``discover``'s lister on ``os.scandir``, one ``Entry`` per file;
- ``compiled_list``: the same listing from ``ckptdoctor/_clisting.c``.

The listers run with the cyclic garbage collector off, as the program runs them
(``ckptdoctor/__main__.py``), and each listing is dropped before the next measure. Each is
printed with its ratio to ``find``, and the compiled one with its ratio to the Python one. The
compiled row is missing where the extension was not built (``pip install -e .`` with a compiler
builds it).
"""

from __future__ import annotations

import argparse
import gc
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

from ckptdoctor.discover import Lister, compiled_list, python_list
from ckptdoctor.testing import write_burn_run


def listing(lister: Lister, folder: str) -> Callable[[], object]:
    def run() -> object:
        entries, _ = lister(folder, folder)
        return len(entries)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--dir", default=None, help="where to make the temporary folder")
    parser.add_argument("--folder", default=None, help="list this folder instead of writing a run")
    args = parser.parse_args()

    scratch = None if args.folder else Path(tempfile.mkdtemp(prefix="ckptdoctor-bench-listing-", dir=args.dir))
    try:
        if scratch is not None:
            folder = str(scratch / "run")
            started = time.perf_counter()
            write_burn_run(folder, range(1, args.epochs + 1))
            print(f"wrote {args.epochs:,} epochs in {time.perf_counter() - started:.1f} s")
        else:
            folder = args.folder
        files = len(os.listdir(folder))
        find = ["find", folder, "-type", "f", "-printf", "%s %p\\n"]
        measures: dict[str, Callable[[], object]] = {
            "find -printf": lambda: subprocess.run(find, stdout=subprocess.DEVNULL, check=True),
            "python_list": listing(python_list, folder),
        }
        if compiled_list is not None:
            measures["compiled_list"] = listing(compiled_list, folder)
        else:
            print("ckptdoctor._clisting is not built: the compiled row is missing")
        gc.disable()
        times = interleaved(measures, args.repeat)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    medians = {name: statistics.median(runs) for name, runs in times.items()}
    print(f"{files:,} entries, median of {args.repeat} interleaved rounds, {os.cpu_count()} cpus, Python {sys.version.split()[0]}:")
    for name, median in medians.items():
        per_file = median / files * 1e6
        print(f"  {name:14} {median:7.3f} s  {per_file:6.2f} µs/file  {median / medians['find -printf']:5.2f}x find")
    if "compiled_list" in medians:
        print(f"  compiled_list takes {medians['compiled_list'] / medians['python_list']:.2f}x python_list's time")


if __name__ == "__main__":
    main()
