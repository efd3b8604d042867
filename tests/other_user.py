"""ckptdoctor run by a real other user (``nobody``), for the tests of issue 32: the kernel holds
that user to the modes, which root bypasses. Making files another user's and running as that user
need root and ``setpriv``; the tests that ask skip elsewhere, saying why."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

NOBODY = 65534
ROOT = Path(__file__).resolve().parents[1]
_DROP = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--")
_FAKE_TABLE = "from ckptdoctor import processes\nprocesses.open_by = lambda paths, identities=None, said=None: ({}, None)\n"
"""An empty process table, so that nothing else running on the machine changes what a test sees."""
_LAUNCH = "import sys\n{fake}from ckptdoctor.cli import main\nsys.argv[0] = 'ckptdoctor'\nmain()\n"


@functools.cache
def _interpreter() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | str:
    """The command that runs a Python ``nobody`` may run, with this checkout and this
    environment's packages, and its environment: this one where its folders are open to all,
    else the system's of the same version (a venv made by root links into root's own folders);
    or why there is none."""
    if os.geteuid() != 0:
        return "making a file another user's, and running ckptdoctor as that other user, needs root"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not here to run ckptdoctor as another user"
    paths = [str(ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "NO_COLOR": "1", "COLUMNS": "200", "HOME": "/nonexistent"}
    candidates = [sys.executable, f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"]
    for python in candidates:
        probe = subprocess.run([*_DROP, python, "-c", "import ckptdoctor.cli, numpy"], env=env, capture_output=True, check=False)
        if probe.returncode == 0:
            return (*_DROP, python), tuple(env.items())
    return f"no Python that user {NOBODY} may run with this environment's packages ({', '.join(candidates)})"


def require() -> None:
    """Skip, saying why, where ckptdoctor cannot be run as another user here."""
    found = _interpreter()
    if isinstance(found, str):
        pytest.skip(found)


def as_nobody(*args: str | os.PathLike[str], where: Path | None = None, real_table: bool = False) -> subprocess.CompletedProcess[str]:
    """``ckptdoctor *args`` run by ``nobody`` from ``where``, with an empty process table unless
    ``real_table`` (skips where it cannot be run)."""
    require()
    command, env = _interpreter()  # type: ignore[misc]
    launch = _LAUNCH.format(fake="" if real_table else _FAKE_TABLE)
    return subprocess.run(
        [*command, "-c", launch, *map(str, args)], cwd=where, env=dict(env), capture_output=True, text=True, timeout=300, check=False
    )


@contextlib.contextmanager
def shared_folder() -> Iterator[Path]:
    """A folder ``nobody`` may reach (pytest's own are root's, mode 700), removed after the block
    whatever modes a test left inside it."""
    folder = Path(tempfile.mkdtemp(prefix="ckptdoctor-other-user-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in [folder, *folder.rglob("*")]:
            if not path.is_symlink():
                path.chmod(0o700)
        shutil.rmtree(folder, ignore_errors=True)
