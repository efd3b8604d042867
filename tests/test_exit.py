"""The ``ckptdoctor`` program ends without freeing its heap (``ckptdoctor.__main__.program``, issue
17, start-up), and that changes nothing anyone can see: the same bytes on stdout and stderr and the
same exit code as the ordinary exit of :func:`ckptdoctor.cli.main`, through a pipe, a closed pipe
or a full device; exit handlers run and threads are waited for, and an error writing what is left
is still reported. Each command runs as its own process, as users run it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ckptdoctor import __version__

pytestmark = pytest.mark.slow  # every test runs the program as its own process, some of them twice

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "runs"

FREED = "the heap was freed"
FREED_LINE = FREED.encode() + b"\n"
_START = """
import os, sys
class Freed:
    def __del__(self):  # runs only when the interpreter frees the heap at exit
        os.write(2, b"{freed}\\n")
kept = Freed()
{prelude}
sys.argv[0] = "ckptdoctor"
from ckptdoctor.__main__ import program
from ckptdoctor.cli import main
{entry}()
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the example runs, in a folder with no configuration file above it."""
    where = tmp_path_factory.mktemp("exit")
    shutil.copytree(EXAMPLES, where / "runs")
    return where


def _run(
    entry: str, args: tuple[str, ...], where: Path, stdout: int | None = subprocess.PIPE, prelude: str = ""
) -> subprocess.CompletedProcess[bytes]:
    code = _START.format(freed=FREED, prelude=prelude, entry=entry)
    # stdout buffered, as users have it (a test runner may set PYTHONUNBUFFERED)
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}, "NO_COLOR": "1", "COLUMNS": "100", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=where, env=env, stdout=stdout, stderr=subprocess.PIPE, timeout=120)


def _same(
    args: tuple[str, ...], where: Path, stdout: int | None = subprocess.PIPE, prelude: str = ""
) -> subprocess.CompletedProcess[bytes]:
    """The program's run of ``args``, once checked against the ordinary exit's."""
    program = _run("program", args, where, stdout, prelude)
    ordinary = _run("main", args, where, stdout, prelude)
    assert program.returncode == ordinary.returncode, (program.stderr, ordinary.stderr)
    assert program.stdout == ordinary.stdout
    assert program.stderr.replace(FREED_LINE, b"") == ordinary.stderr.replace(FREED_LINE, b"")
    return program


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("inspect", "--json", "runs"), 1),
        (("inspect", "runs"), 1),
        (("inspect", "--json", "runs/burn-healthy"), 0),
        (("inspect", "runs/burn-missing-optimizer"), 1),
        (("verify", "--json", "runs/torch-split"), 1),
        (("rules", "--json"), 0),
        (("--help",), 0),
        (("--version",), 0),
        (("no-such-command",), 2),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else str(value),
)
def test_the_program_prints_and_exits_as_the_ordinary_exit_does(runs: Path, args: tuple[str, ...], code: int) -> None:
    done = _same(args, runs)
    assert done.returncode == code, done.stderr
    assert FREED.encode() not in done.stderr, "the heap was freed: the program took the slow exit"
    if args[:2] == ("rules", "--json"):
        assert len(done.stdout) > 64 * 1024, "more than a pipe holds: written in several pieces"


_DRY_RUNS = (
    ("prune", "--dry-run", "--keep-last", "1", "--min-age", "0", "--json", "runs/burn-healthy"),
    ("repair", "--dry-run", "--json", "runs"),
)
"""Acting commands that act on nothing: stdout failing is stdout's, as for any other command."""


@pytest.mark.parametrize("args", [("inspect", "--json", "runs/burn-healthy"), ("rules",), ("--help",), *_DRY_RUNS], ids=" ".join)
def test_a_closed_pipe_ends_the_command_as_before(runs: Path, args: tuple[str, ...]) -> None:
    """``ckptdoctor ... | head -1``: the reader is gone (EPIPE); exit 1, no traceback, and no
    acting command's word about what it kept (a dry run keeps nothing back to finish)."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = _same(args, runs, stdout=write)
    finally:
        os.close(write)
    assert done.returncode == 1 and b"Traceback" not in done.stderr, done.stderr
    assert b"ckptdoctor: error" not in done.stderr, done.stderr


@pytest.mark.parametrize("args", [("inspect", "--json", "runs/burn-healthy"), ("inspect", "runs/burn-healthy"), _DRY_RUNS[0]], ids=" ".join)
def test_a_closed_stdout_is_said_in_one_line(runs: Path, args: tuple[str, ...]) -> None:
    """``ckptdoctor ... >&-``: no stdout at all (Python's ``sys.stdout`` is None); exit 2 and one
    line, not an internal error."""
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    command = " ".join([sys.executable, "-m", "ckptdoctor", *args])
    done = subprocess.run(["sh", "-c", f"exec {command} >&-"], cwd=runs, env=env, stderr=subprocess.PIPE, timeout=120, check=False)
    lines = [line for line in done.stderr.splitlines() if not line.startswith(b"note:")]
    assert done.returncode == 2 and lines == [b"ckptdoctor: error: cannot write the output: stdout is closed"], done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ("inspect", "--json", "runs/burn-healthy"),
        ("inspect", "runs/burn-healthy"),
        ("verify", "runs"),
        ("diskcheck", "runs"),
        ("--help",),
        *_DRY_RUNS,
    ],
    ids=" ".join,
)
def test_a_full_device_is_an_error(runs: Path, args: tuple[str, ...]) -> None:
    """``ckptdoctor ... > file`` on a full disk: said, and a failing exit code (2, or the
    interpreter's 120 when its own last flush fails again, for typer's help), as the ordinary
    exit gives; never called a bug of ckptdoctor's."""
    with open("/dev/full", "wb") as full:
        done = _same(args, runs, stdout=full.fileno())
    assert done.returncode != 0 and b"No space left on device" in done.stderr, done.stderr
    if args != ("--help",):
        assert done.returncode == 2 and b"cannot write" in done.stderr and b"internal error" not in done.stderr, done.stderr


_LAST_WORDS = "import atexit\natexit.register(lambda: sys.stdout.write('last words\\n'))  # left in the buffer"


def test_exit_handlers_run_and_what_they_write_is_written(runs: Path) -> None:
    done = _same(("inspect", "-q", "runs/burn-healthy"), runs, prelude=_LAST_WORDS)
    assert done.returncode == 0 and done.stdout == b"last words\n"
    assert FREED.encode() not in done.stderr, "nothing needed the slow exit"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_what_is_left_to_write_at_the_end_still_fails_loudly(runs: Path) -> None:
    """The last flush fails: the interpreter's own exit says so, with its exit code (120)."""
    with open("/dev/full", "wb") as full:
        done = _same(("inspect", "-q", "runs/burn-healthy"), runs, stdout=full.fileno(), prelude=_LAST_WORDS)
    assert done.returncode == 120 and b"No space left on device" in done.stderr, done.stderr


def test_a_thread_still_working_is_waited_for(runs: Path) -> None:
    late = "import threading, time\nthreading.Thread(target=lambda: (time.sleep(0.5), print('late', flush=True))).start()"
    done = _same(("--version",), runs, prelude=late)
    assert done.stdout.splitlines() == [f"ckptdoctor {__version__}".encode(), b"late"]


def test_main_returns_to_its_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests and programs that run the command line in their own process call ``main``: it
    raises SystemExit, as a command line does, and never ends the process."""
    from ckptdoctor.cli import main

    monkeypatch.setattr(sys, "argv", ["ckptdoctor", "--version"])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0


def test_the_console_script_is_the_program() -> None:
    assert 'ckptdoctor = "ckptdoctor.__main__:program"' in (ROOT / "pyproject.toml").read_text().splitlines()


@pytest.mark.parametrize(
    "error",
    [
        OSError(5, "Input/output error"),
        OSError(28, "No space left on device", "run/.ckptdoctor/journal"),
        OSError(2, "No such file or directory"),
    ],
    ids=["a read's EIO", "a named file's ENOSPC", "ENOENT"],
)
def test_only_an_unnamed_write_error_is_taken_for_the_outputs(error: OSError) -> None:
    """A damaged checkpoint's read (EIO) or a file ckptdoctor writes itself (named) is not the
    output's failure: it stays an error to report, and stdout stays where it was."""
    from ckptdoctor import cli

    assert not cli._output_failed(error)
