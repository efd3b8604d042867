"""Start-up cost of ckptdoctor as installed, against `python -c pass` and, optionally, another
checkout, measured in the same run (interleaved, so that a noisy machine weighs on both alike).

For each tree: the wall time of `--help`, of `inspect --format json` of an empty folder (issue 37:
at most 60 ms on the machine the issue measured 112 ms on, where the prototype took 52 ms), of
`inspect --format json` and of `inspect` (human) on a bundled example run, and of `verify --format
json` on it; and how many of ckptdoctor's modules
`--help` and `import ckptdoctor.rules.rule` load. Each command runs as its own process through
the installed `ckptdoctor` script (median of --repeat runs), in a folder with no configuration
file above it, as a user runs it.

    python benchmarks/bench_startup.py [--repeat 15] [--baseline PATH] [--instructions]

PATH is another checkout of the project, e.g. the commit before a change:
    git archive <commit> | tar -x -C /tmp/ckptdoctor-before

--instructions also counts the instructions each command runs, under valgrind's callgrind (about
50 times slower, once each): wall times on a shared 2-core machine vary by half from one run to
the next, instruction counts do not; the time itself is what the targets are set in.

Each tree is installed as a user installs it, not run from its folder: its wheel is built and
installed, byte-compiled, into a virtual environment of its own, whose one `.pth` line puts this
interpreter's site-packages (typer, rich, ...) after it. A tree on PYTHONPATH is not what users
run: the editable install of a development environment adds its import hook to every start
(25 ms here), and `python -m` is not the console script.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
EXAMPLE = "burn-missing-optimizer"
EMPTY = "empty"
COMMANDS = {
    "--help": ["--help"],
    "inspect --format json (empty folder)": ["inspect", "--format", "json", EMPTY],
    "inspect --format json": ["inspect", "--format", "json", EXAMPLE],
    "inspect (human)": ["inspect", EXAMPLE],
    "verify --format json": ["verify", "--format", "json", EXAMPLE],
}
IMPORTS = {
    "modules loaded by --help": ["{script}", "--help"],
    "modules loaded by inspect of an empty folder": ["{script}", "inspect", "--format", "json", EMPTY],
    "modules loaded by import rules.rule": ["-c", "import ckptdoctor.rules.rule"],
}
SOURCES = ("pyproject.toml", "README.md", "ckptdoctor")
"""What a wheel is built from (copied out, so that the build leaves nothing in the tree)."""


def install(tree: Path, into: Path) -> Path:
    """The ``bin`` folder of a virtual environment in ``into`` where ``tree`` is installed from its
    wheel, byte-compiled, with this interpreter's packages as its dependencies."""
    source = into / "source"
    for name in SOURCES:
        if (tree / name).is_dir():
            shutil.copytree(tree / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tree / name, source / name)
    venv = into / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # after the environment's own site-packages: the installed ckptdoctor comes first, and the
    # .pth files of this interpreter's site-packages (an editable install's hook) are not run
    Path(purelib, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-build-isolation", str(source)],
        env=_env(),
        check=True,
    )
    return venv / "bin"


def _env() -> dict[str, str]:
    """The environment minus what would change how Python starts and writes, as users have it:
    bytecode written and read, stdout buffered, no tree but the installed one."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PYTHONUNBUFFERED")}
    env["COLUMNS"] = "120"
    return env


def _time(argv: list[str], where: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=where, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def _modules(argv: list[str], where: Path) -> int:
    """ckptdoctor's modules that ``argv`` (after ``python -X importtime``) imports."""
    result = subprocess.run([*argv[:1], "-X", "importtime", *argv[1:]], cwd=where, env=_env(), capture_output=True, text=True, check=False)
    return sum(1 for line in result.stderr.splitlines() if line.rsplit("|", 1)[-1].strip().startswith("ckptdoctor"))


def _instructions(argv: list[str], where: Path) -> float:
    """Millions of instructions ``argv`` runs (callgrind): the same on a busy machine as on an idle one."""
    result = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        cwd=where,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    collected = [line.split()[-1] for line in result.stderr.splitlines() if "Collected :" in line]
    return int(collected[-1]) / 1e6 if collected else float("nan")


def _rows(values: dict[tuple[str, str], float], trees: list[str], cell: str, floor: float | None = None) -> None:
    """One table row per command: each tree's value (and its multiple of ``floor``), and the ratio."""
    compared = "baseline" in trees
    print(f"\n| {'command':<38}" + "".join(f" | {name:>22}" for name in trees) + (" | this / baseline" if compared else "") + " |")
    print(f"| {'-' * 38}" + " | ---" * len(trees) + (" | ---" if compared else "") + " |")
    for label in COMMANDS:
        shown = "".join(
            f" | {cell.format(values[(name, label)])}" + (f" ({values[(name, label)] / floor:4.1f}x)" if floor else "") for name in trees
        )
        ratio = f" | {values[('this tree', label)] / values[('baseline', label)]:.2f}" if compared else ""
        print(f"| {label:<38}{shown}{ratio} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--baseline", type=Path, help="another checkout of the project to compare with")
    parser.add_argument("--instructions", action="store_true", help="also count each command's instructions with valgrind")
    args = parser.parse_args()
    trees = {"this tree": HERE} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as scratch:
        work = Path(scratch, "work")
        shutil.copytree(HERE / "examples" / "runs" / EXAMPLE, work / EXAMPLE)
        (work / EMPTY).mkdir()
        bins = {name: install(tree, Path(scratch, f"tree{number}")) for number, (name, tree) in enumerate(trees.items())}
        python = bins["this tree"] / "python"
        for command in COMMANDS.values():  # once untimed: a warm page cache for all
            for name in trees:
                _time([str(bins[name] / "ckptdoctor"), *command], work)
        floor: list[float] = []
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeat):
            floor.append(_time([str(python), "-c", "pass"], work))
            for label, command in COMMANDS.items():
                for name in trees:
                    times.setdefault((name, label), []).append(_time([str(bins[name] / "ckptdoctor"), *command], work))
        base = statistics.median(floor)
        print(f"python -c pass: {base * 1000:6.1f} ms; wall time, median of {args.repeat}:")
        _rows({key: statistics.median(values) * 1000 for key, values in times.items()}, list(trees), "{:9.1f} ms", base * 1000)
        if args.instructions:
            counted = {
                (name, label): _instructions([str(bins[name] / "ckptdoctor"), *command], work)
                for label, command in COMMANDS.items()
                for name in trees
            }
            pass_count = _instructions([str(python), "-c", "pass"], work)
            print(f"\npython -c pass: {pass_count:6.1f} M instructions; each command's (callgrind):")
            _rows(counted, list(trees), "{:11.1f} M", pass_count)
        print()
        for label, argv in IMPORTS.items():
            counts = {
                name: _modules([str(bins[name] / "python"), *(arg.format(script=bins[name] / "ckptdoctor") for arg in argv)], work)
                for name in trees
            }
            cells = "".join(f" | {counts[name]:>22}" for name in trees)
            ratio = f" | {counts['this tree'] - counts['baseline']:+d}" if args.baseline else ""
            print(f"| {label:<38}{cells}{ratio} |")


if __name__ == "__main__":
    main()
