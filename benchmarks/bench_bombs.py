"""How long `verify` takes on hostile inputs, as ratios against a benign file of the same size.

Target (issue 12): a file of a few KiB verifies in well under a second, whatever it holds, and the
cost of any input is linear in its size. Each resource bomb of the sample set (memo-shared
tuples 64 levels deep, mark/pop chains, huge declared lengths, deep nesting, …) is read the way
`verify` reads a file (`ckptdoctor.readers.verify_sample`, in this process, after a warm-up); the
baseline is a plain pickle of the same size (a list of floats), read the same way in the same run.

    python benchmarks/bench_bombs.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sample_set import build_bombs

from ckptdoctor.readers.files import verify_sample
from ckptdoctor.readers.sample import FileSample


def seconds(path: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        with FileSample.open(str(path)) as sample:
            verify_sample(sample, path.name)
        best = min(best, time.perf_counter() - start)
    return best


def baseline(folder: Path, size: int) -> Path:
    """A benign pickle of about ``size`` bytes: a list of floats (9 bytes an item at protocol 2)."""
    path = folder / f"baseline-{size}.pkl"
    path.write_bytes(pickle.dumps([float(i) for i in range(max(1, size // 9))], protocol=2))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        bombs = build_bombs(root / "bombs")
        seconds(baseline(root, 1024), 1)  # imports and first-call costs are nobody's
        print(f"{'bomb':<34} {'size':>12} {'seconds':>9} {'baseline':>9} {'ratio':>7}")
        worst_small = 0.0
        for path in bombs:
            size = os.path.getsize(path)
            took = seconds(path, options.repeat)
            base = seconds(baseline(root, size), options.repeat) if size < 64 << 20 else float("nan")
            if size <= 100 * 1024:
                worst_small = max(worst_small, took)
            print(f"{path.parent.name:<34} {size:>12,} {took:>9.3f} {base:>9.3f} {took / base if base else float('nan'):>7.1f}")
        print(f"\nslowest bomb under 100 KiB: {worst_small:.3f} s (target: well under 1 s)")


if __name__ == "__main__":
    main()
