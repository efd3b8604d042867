"""Start-up cost of ckptdoctor, against `python -c pass` and, optionally, another checkout, measured
in the same run (interleaved, so that a noisy machine weighs on both alike).

For each tree: the wall time of `--help`, of `inspect --format json` and of `inspect` (human) on a
bundled example run, and of `verify --format json` on it; and how many of ckptdoctor's modules
`--help` and `import ckptdoctor.rules._rule` load. Each command runs as its own process (median of
--repeat runs), with the tree first on PYTHONPATH and byte-compiled first.

    python benchmarks/bench_startup.py [--repeat 15] [--baseline PATH]

PATH is another checkout of the project, e.g. the commit before a change:
    git worktree add /tmp/ckptdoctor-before <commit>
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
EXAMPLE = "examples/runs/burn-missing-optimizer"
COMMANDS = {
    "--help": ["--help"],
    "inspect --format json": ["inspect", "--format", "json", EXAMPLE],
    "inspect (human)": ["inspect", EXAMPLE],
    "verify --format json": ["verify", "--format", "json", EXAMPLE],
}
IMPORTS = {
    "modules loaded by --help": ["-m", "ckptdoctor", "--help"],
    "modules loaded by import rules._rule": ["-c", "import ckptdoctor.rules._rule"],
}


def _env(tree: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    env["COLUMNS"] = "120"
    return env


def _time(argv: list[str], tree: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=tree, env=_env(tree), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def _modules(argv: list[str], tree: Path) -> int:
    """ckptdoctor's modules that ``argv`` imports (from ``-X importtime``)."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], cwd=tree, env=_env(tree), capture_output=True, text=True, check=False
    )
    return sum(1 for line in result.stderr.splitlines() if line.rsplit("|", 1)[-1].strip().startswith("ckptdoctor"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--baseline", type=Path, help="another checkout of the project to compare with")
    args = parser.parse_args()
    trees = {"this tree": HERE} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    for tree in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "ckptdoctor")], check=True)
    floor: list[float] = []
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeat):
        floor.append(_time([sys.executable, "-c", "pass"], HERE))
        for label, command in COMMANDS.items():
            for name, tree in trees.items():
                times.setdefault((name, label), []).append(_time([sys.executable, "-m", "ckptdoctor", *command], tree))
    base = statistics.median(floor)
    print(f"python -c pass: {base * 1000:6.1f} ms (median of {args.repeat})")
    header = "".join(f" | {name:>22}" for name in trees)
    print(f"\n| {'command':<38}{header}{' | this / baseline' if args.baseline else ''} |")
    print(f"| {'-' * 38}" + " | ---" * len(trees) + (" | ---" if args.baseline else "") + " |")
    for label in COMMANDS:
        medians = {name: statistics.median(times[(name, label)]) for name in trees}
        cells = "".join(f" | {medians[name] * 1000:9.1f} ms ({medians[name] / base:4.1f}x)" for name in trees)
        ratio = f" | {medians['this tree'] / medians['baseline']:.2f}" if args.baseline else ""
        print(f"| {label:<38}{cells}{ratio} |")
    for label, argv in IMPORTS.items():
        counts = {name: _modules(argv, tree) for name, tree in trees.items()}
        cells = "".join(f" | {counts[name]:>22}" for name in trees)
        ratio = f" | {counts['this tree'] - counts['baseline']:+d}" if args.baseline else ""
        print(f"| {label:<38}{cells}{ratio} |")


if __name__ == "__main__":
    main()
