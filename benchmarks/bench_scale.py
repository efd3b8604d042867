"""How `inspect --format json` and `prune --dry-run` grow with the number of files (issue 17: the
cost must grow linearly, with no super-linear step).

    python benchmarks/bench_scale.py [--sizes 10000,50000,150000,500000] [--repeat 3] [--folder DIR]

One burn `checkpoint/` folder (3 files per epoch) grows through the sizes: it is built up to the
first, measured, extended with new epochs up to the next, measured, and so on. Every file is its
own: no hard link (inspect de-duplicates files by inode) and no copy of another size's folder. At
each size, --repeat rounds interleaved (find, inspect, prune, ...) after one untimed run each give,
per command, the median wall time; the time per file (µs) net of the fixed costs, which are the same
command's median time on a run of one epoch measured in the same rounds (start-up weighs most on
the smallest size, and would hide a super-linear step there); the marginal time per file since the
previous size; and the peak RSS of the child (ru_maxrss, read by a wrapper process). At the end,
per command: the least-squares slope of time against files (µs per file) and its intercept, the
slope of peak RSS (KiB per file), and
each step where the net time per file grows by more than 25% from one size to the next: a
super-linear step. `find -printf` is the machine's baseline: each command's time is given over find's at each size
(issue 37: inspect <= 4x find at 500,000 files; peak RSS <= 0.6 KiB a file), and
each super-linear step shows find's growth over the same step (where find slowed as much, the
machine did: this one is shared and noisy).

The commands: `ckptdoctor inspect --format json DIR` and `ckptdoctor prune --dry-run --keep-last 3
--min-age 0 --format json DIR`, run from a wheel of this tree installed in a temporary venv
(`_installed.py`). Disk: one block per small file, about 2 GB for 500,000 files; free space and
inodes are checked first, and everything is removed at the end.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from _installed import first_run, installed, measure
from bench_inspect import build_burn, commands

SUPER_LINEAR = 1.25
"""Time per file growing by more than this factor from one size to the next is a super-linear step."""
MEASURED = ("find", "inspect", "prune")
RATIO_TARGETS = {"inspect": 4.0}
"""Issue 37: inspect within 4x find at 500,000 files (and 3x at 150,000, as bench_inspect.py says)."""
MEMORY_TARGET_KIB = 0.6
"""Issue 37: inspect's peak RSS at most this many KiB a file."""


@dataclass(frozen=True)
class Point:
    files: int
    seconds: float
    fixed: float
    """The same command's time on a run of one epoch, in the same rounds: start-up and fixed costs."""
    rss_mib: float

    @property
    def per_file(self) -> float:
        """Seconds per file, the fixed costs left out."""
        return max(self.seconds - self.fixed, 0.0) / self.files


def slope(points: list[Point], value: Callable[[Point], float] = lambda point: point.seconds) -> tuple[float, float]:
    """Least-squares fit of ``value`` (seconds unless told) against files: (its growth per file,
    its intercept)."""
    mean_n = statistics.fmean(p.files for p in points)
    mean_v = statistics.fmean(value(p) for p in points)
    spread = sum((p.files - mean_n) ** 2 for p in points)
    per_file = sum((p.files - mean_n) * (value(p) - mean_v) for p in points) / spread if spread else 0.0
    return per_file, mean_v - per_file * mean_n


def growths(points: list[Point]) -> list[float]:
    """How much the net time per file grows from each size to the next."""
    return [after.per_file / before.per_file if before.per_file else 1.0 for before, after in itertools.pairwise(points)]


def super_linear_steps(points: list[Point], baseline: list[Point]) -> list[str]:
    """Steps where the net time per file grows by more than SUPER_LINEAR, each with find's growth
    over the same step: where find slowed as much, the machine did."""
    steps = []
    for before, growth, machine in zip(points, growths(points), growths(baseline), strict=False):
        if growth > SUPER_LINEAR:
            steps.append(f"from {before.files:,} files x{growth:.2f} (find x{machine:.2f})")
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,50000,150000,500000", help="file counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()), help="where to build (default: the temp folder)")
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    epochs_at = [-(-size // 3) for size in sizes]
    usage, inodes = shutil.disk_usage(args.folder), os.statvfs(args.folder).f_favail
    needed = epochs_at[-1] * 3 * 4096 * 1.2
    if usage.free < needed + 1e9 or inodes < epochs_at[-1] * 3 * 1.2:
        raise SystemExit(
            f"{args.folder}: {usage.free / 1e9:.1f} GB and {inodes:,} inodes free; {sizes[-1]:,} files need ~{needed / 1e9:.1f} GB"
        )
    print(f"{args.folder}: {usage.free / 1e9:.1f} GB free; the biggest size takes ~{needed / 1.2 / 1e9:.1f} GB")

    scratch = Path(tempfile.mkdtemp(prefix="ckptdoctor-scale-", dir=args.folder))
    points: dict[str, list[Point]] = {name: [] for name in MEASURED}
    try:
        with installed() as ckptdoctor:
            print(f"ckptdoctor: {ckptdoctor.origin}")
            print(f"cpus: {os.cpu_count()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            run, tiny = scratch / "burn" / "checkpoint", scratch / "tiny" / "checkpoint"
            build_burn(ckptdoctor, tiny, 1, 1)
            fixed = {f"{name}, 1 epoch": argv for name, argv in commands(ckptdoctor, tiny, reference=False).items() if name in MEASURED}
            built = 0
            for epochs in epochs_at:
                build_burn(ckptdoctor, run, built + 1, epochs)
                built, files = epochs, epochs * 3
                measured = {name: argv for name, argv in commands(ckptdoctor, run, reference=False).items() if name in MEASURED}
                measured |= fixed
                for argv in measured.values():
                    first_run(argv, ckptdoctor.env, scratch)
                rounds = [{name: measure(argv, ckptdoctor.env, scratch) for name, argv in measured.items()} for _ in range(args.repeat)]
                print(f"{files:,} files ({epochs:,} epochs), median of {args.repeat}:")
                for name in MEASURED:
                    seconds = statistics.median(r[name].seconds for r in rounds)
                    one = statistics.median(r[f"{name}, 1 epoch"].seconds for r in rounds)
                    point = Point(files, seconds, one, max(r[name].rss_mib for r in rounds))
                    previous = points[name][-1] if points[name] else None
                    marginal = f"{(seconds - previous.seconds) / (files - previous.files) * 1e6:7.2f}" if previous else "      —"
                    points[name].append(point)
                    over_find = "" if name == "find" else f"  {seconds / points['find'][-1].seconds:5.2f}x find"
                    print(
                        f"  {name:<8} {seconds:8.3f} s (1 epoch: {one:6.3f} s)  {point.per_file * 1e6:7.2f} µs/file net  "
                        f"marginal {marginal} µs/file  peak RSS {point.rss_mib:7.1f} MiB ({point.rss_mib * 1024 / files:5.2f} KiB a file){over_find}"
                    )
                for name, target in RATIO_TARGETS.items():
                    ratio = points[name][-1].seconds / points["find"][-1].seconds
                    if files >= 500_000:
                        print(
                            f"  {name} / find at {files:,} files: {ratio:.2f}x (target <= {target:g}x: {'met' if ratio <= target else 'NOT met'})"
                        )
            print(
                f"growth (least squares over {len(sizes)} sizes; super-linear: net time per file x>{SUPER_LINEAR} from one size to the next):"
            )
            for name, series in points.items():
                per_file, intercept = slope(series)
                steps = super_linear_steps(series, points["find"])
                verdict = "; ".join(steps) if steps else "none"
                memory, _ = slope(series, lambda point: point.rss_mib * 1024)
                print(
                    f"  {name:<8} slope {per_file * 1e6:7.2f} µs/file, intercept {intercept:6.3f} s; memory {memory:5.2f} KiB/file; "
                    f"super-linear steps: {verdict}"
                )
            peak = points["inspect"][-1]
            memory = peak.rss_mib * 1024 / peak.files
            verdict = "met" if memory <= MEMORY_TARGET_KIB else "NOT met"
            print(f"inspect's peak RSS at {peak.files:,} files: {memory:.2f} KiB a file (target <= {MEMORY_TARGET_KIB:g}: {verdict})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
