"""ckptdoctor as users run it, and how the benchmarks time one command.

`installed(tree)` measures an installed package, not an editable one: an editable install (or
PYTHONPATH) finds the sources through an import hook and, without bytecode, compiles them on every
start. It copies the tree's package and metadata aside (an in-tree build would leave a `build/`
whose stale modules later wheels pick up), builds a wheel (`pip wheel --no-deps
--no-build-isolation`), creates a venv from this interpreter with `--system-site-packages`, adds a
`.pth` line naming this interpreter's own site-packages (a venv made from a venv sees only the base
Python's otherwise), and installs the wheel there with `--no-deps`; pip byte-compiles it. The
dependencies are this interpreter's: any the wheel asks for that it lacks are named. Where a step
fails, it says why and falls back on the tree itself (`python -m ckptdoctor`, PYTHONPATH, sources
byte-compiled first), which starts slower.

`measure(argv)` runs one command as its own process, under a small wrapper that reports its wall
time and peak RSS (the child's ru_maxrss), as `bench_verify.py` does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what a wheel is built from: the package and the files pyproject.toml names
_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "setup.py", "setup.cfg")
_WHERE = "import ckptdoctor, sys; print(ckptdoctor.__file__)"
_MISSING = """
import importlib.metadata as metadata
from packaging.requirements import Requirement
for text in metadata.requires("ckptdoctor") or []:
    wanted = Requirement(text)
    if wanted.marker is not None and not wanted.marker.evaluate({"extra": ""}):
        continue
    try:
        found = metadata.version(wanted.name)
    except metadata.PackageNotFoundError:
        print(text)
        continue
    if not wanted.specifier.contains(found, prereleases=True):
        print(f"{text} (found {found})")
"""
_MEASURE = """
import resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode)
"""


@dataclass(frozen=True)
class Ckptdoctor:
    """How to run one ckptdoctor: its command, the Python that imports it, their environment."""

    command: tuple[str, ...]
    python: str
    env: Mapping[str, str]
    origin: str
    """What is measured, in words (said at the top of every benchmark's output)."""

    def argv(self, *args: str) -> list[str]:
        return [*self.command, *args]


@dataclass(frozen=True)
class Measured:
    seconds: float
    rss_mib: float


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without what would change which ckptdoctor runs or how it starts."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONHOME")}
    return env | extra


def _run(argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv[:5])} …` exited {done.returncode}: {(done.stderr or done.stdout).strip()[-600:]}")
    return done.stdout


def _install(tree: Path, scratch: Path) -> Ckptdoctor:
    source = scratch / "source"
    source.mkdir()
    for name in _SOURCES:
        if (tree / name).exists():
            shutil.copy2(tree / name, source / name)
    shutil.copytree(tree / "ckptdoctor", source / "ckptdoctor", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run([*pip, "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(scratch / "wheel"), str(source)])
    (wheel,) = (scratch / "wheel").glob("ckptdoctor-*.whl")
    venv = scratch / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python")
    env = clean_env()
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], env).strip())
    ours = dict.fromkeys(sysconfig.get_path(kind) for kind in ("purelib", "platlib"))
    # plain path lines: the .pth files there (an editable ckptdoctor's import hook) stay unread
    (site / "_benchmark_dependencies.pth").write_text("".join(f"{path}\n" for path in ours))
    _run([*pip, "--python", python, "install", "--quiet", "--no-deps", str(wheel)], env)
    # from the scratch folder: `python -c` imports from the working folder first (a checkout's)
    where = _run([python, "-c", _WHERE], env, cwd=scratch).strip()
    if not where.startswith(str(venv)):
        raise RuntimeError(f"the venv imports ckptdoctor from {where}, not from its own install")
    try:
        missing = _run([python, "-c", _MISSING], env, cwd=scratch).split("\n")
    except RuntimeError as error:
        missing = [f"(could not check the dependencies: {error})"]
    for line in filter(None, missing):
        print(f"warning: the installed ckptdoctor needs {line}, which {sys.executable} does not have", file=sys.stderr)
    script = venv / "bin" / "ckptdoctor"
    return Ckptdoctor((str(script),), python, env, f"installed wheel {wheel.name} in a temporary venv ({script})")


def _from_tree(tree: Path, why: str) -> Ckptdoctor:
    print(f"warning: measuring the tree itself, not an installed package ({why})", file=sys.stderr)
    _run([sys.executable, "-m", "compileall", "-q", str(tree / "ckptdoctor")])
    env = clean_env(PYTHONPATH=str(tree))
    origin = f"FALLBACK, the tree by PYTHONPATH ({tree}), byte-compiled: start-up is slower than installed"
    return Ckptdoctor((sys.executable, "-m", "ckptdoctor"), sys.executable, env, origin)


@contextmanager
def installed(tree: Path = ROOT) -> Iterator[Ckptdoctor]:
    """ckptdoctor built from ``tree`` and installed in a temporary venv, removed afterwards."""
    scratch = Path(tempfile.mkdtemp(prefix="ckptdoctor-installed-"))
    try:
        try:
            found = _install(tree, scratch)
        except (RuntimeError, OSError, ValueError) as error:
            found = _from_tree(tree, str(error))
        yield found
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def first_run(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> bytes:
    """The output of one untimed run (it warms the page cache); stops the benchmark if it failed:
    a command that fails is not worth timing (exit 1 is ckptdoctor's "findings")."""
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    if done.returncode not in (0, 1) or not done.stdout:
        tail = done.stderr.decode(errors="replace").strip()[-1500:]
        raise SystemExit(f"`{' '.join(argv)}` exited {done.returncode} with no report:\n{tail}")
    return done.stdout


def measure(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> Measured:
    """Wall seconds and peak RSS of one run of ``argv`` as its own process, output discarded."""
    output = _run([sys.executable, "-I", "-c", _MEASURE, *argv], env, cwd)
    seconds, rss_kib, code = output.split()
    if int(code) not in (0, 1):
        raise SystemExit(f"`{' '.join(argv)}` exited {code}")
    return Measured(float(seconds), int(rss_kib) / 1024)
