"""How long ``prune`` and ``repair`` take to plan a big run (issue 5: 50,000 checkpoints in
under a second).

Builds a burn run of 50,000 epochs × 3 files, scans it once, then times the pure planning step
(``retention.plan``: every keep rule, the invariants, freed bytes) with the cyclic collector off,
as the CLI runs, best of 5; and, for scale, the whole ``prune --dry-run --json`` command next to
``inspect --json`` on the same run. Then it breaks the newest 1,000 epochs (optimizer file gone,
a staging file beside each) and times ``repair.plan`` and ``repair --dry-run --json`` the same way.

    python benchmarks/bench_prune.py [--epochs 50000]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time

from ckptdoctor.layouts.registry import layout_named
from ckptdoctor.model import Run
from ckptdoctor.pipelines.scan import inspect, scan
from ckptdoctor.planners import repair
from ckptdoctor.planners.retention import Circumstances, Policy, plan
from ckptdoctor.testing import write_burn_run


def _bare_walk(run: Run) -> float:
    """Best of 5: reading each file's size once, the least any plan must do (a baseline that
    says how fast this machine is right now)."""
    times = []
    for _ in range(5):
        started = time.perf_counter()
        for checkpoint in run.checkpoints:
            for file in checkpoint.files:
                file.entry.size  # noqa: B018 (the read is the point)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=50_000)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="ckptdoctor-prune-")
    try:
        folder = os.path.join(work, "checkpoint")
        write_burn_run(folder, range(1, args.epochs + 1))
        (run,) = scan([work]).runs
        layout = layout_named(run.layout)
        policy = Policy(keep_last=5, keep_every=100)
        circumstances = Circumstances(now=time.time() + 7200)
        gc.disable()
        times = []
        for _ in range(5):
            started = time.perf_counter()
            result = plan(run, layout, policy, circumstances)
            times.append(time.perf_counter() - started)
        walk = _bare_walk(run)
        gc.enable()
        kept = sum(1 for item in result.items if item.action.value == "keep")
        print(
            f"plan of {args.epochs:,} checkpoints: best {min(times):.3f} s (target < 1 s: {'met' if min(times) < 1 else 'NOT met'}); "
            f"keeps {kept}; {min(times) / walk:.1f}x a bare walk over the files ({walk:.3f} s, the machine's baseline)"
        )
        for command in (
            ["inspect", "--json"],
            ["prune", "--json", "--dry-run", "--keep-last", "5", "--keep-every", "100", "--min-age", "0"],
        ):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "ckptdoctor", *command, work], stdout=subprocess.DEVNULL, check=False)
            print(f"ckptdoctor {' '.join(command[:2])}: {time.perf_counter() - started:.2f} s")
        broken = range(args.epochs - 999, args.epochs + 1)
        for epoch in broken:
            os.unlink(os.path.join(folder, f"optim-{epoch}.bpk"))
            with open(os.path.join(folder, f"model-{epoch}.bpk.tmp"), "wb"):
                pass
        report, _ = inspect([work])
        (run,) = report.runs
        gc.disable()
        times = []
        for _ in range(5):
            started = time.perf_counter()
            fixed = repair.plan(run, layout, report.findings, circumstances, 0.0)
            times.append(time.perf_counter() - started)
        gc.enable()
        moved = sum(len(item.entries) for item in fixed.items if item.action.value == "quarantine")
        print(
            f"repair plan of {args.epochs:,} checkpoints ({len(broken):,} broken): best {min(times):.3f} s "
            f"(target < 1 s: {'met' if min(times) < 1 else 'NOT met'}); quarantines {moved:,} files"
        )
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "ckptdoctor", "repair", "--json", "--dry-run", "--min-age", "0", work],
            stdout=subprocess.DEVNULL,
            check=False,
        )
        print(f"ckptdoctor repair --json --dry-run: {time.perf_counter() - started:.2f} s")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
