"""A long scan says how far it has got (issue 16, item 10): on a terminal, a status line on stderr
(folders and files seen, runs found; for verify, files and bytes read) once the scan has taken
about a second, erased when it ends. Nothing on stdout changes, nothing is shown off a terminal,
under -q, or for a scan quicker than the delay, and the core (``ckptdoctor.api``) prints nothing.

The CLI runs in a pseudo-terminal; the delay is lowered to 0 (``CKPTDOCTOR_PROGRESS_AFTER``, a
setting for the tests) so that a scan of the examples counts as a long one."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from terminal import in_terminal, screen

import ckptdoctor.api as ckd
from ckptdoctor.cli._progress import ScanStatus
from ckptdoctor.testing import write_burn_run

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "runs"
LINES = (b"scanning:", b"reading:")


def _env(delay: str | None = "0") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CKPTDOCTOR_PROGRESS_AFTER"}
    env |= {"NO_COLOR": "1", "COLUMNS": "120", "TERM": "xterm", "PYTHONPATH": str(ROOT)}
    return env | ({"CKPTDOCTOR_PROGRESS_AFTER": delay} if delay is not None else {})


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "ckptdoctor", *args]


def _off_a_terminal(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(_command(*args), stdin=subprocess.DEVNULL, capture_output=True, env=env, cwd=ROOT, timeout=120, check=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The examples, copied: prune and repair lock the runs they scan. Their files are dated a
    month back, so that a plan's "modified N ago" reads the same in two runs seconds apart (at
    minutes it could tick over between them)."""
    copy = tmp_path_factory.mktemp("progress") / "runs"
    shutil.copytree(EXAMPLES, copy)
    month_ago = time.time() - 30 * 86400
    for folder, _, names in os.walk(copy):
        for name in names:
            os.utime(os.path.join(folder, name), (month_ago, month_ago))
    return copy


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [("inspect",), ("inspect", "--json"), ("verify",), ("prune", "--dry-run", "--keep-last", "1"), ("repair", "--dry-run")],
    ids=lambda args: " ".join(args),
)
def test_a_long_scan_shows_its_line_on_stderr_then_erases_it_and_stdout_is_unchanged(runs: Path, args: tuple[str, ...]) -> None:
    command = _command(*args, str(runs))
    code, shown, piped = in_terminal(command, _env(), subprocess.PIPE)
    plain = _off_a_terminal(*args, str(runs), env=_env())
    if args[0] == "verify":  # the line is drawn a last time as it ends: the read is the last it says
        assert b"scanning:" in shown and b"reading: 35 of 35 files" in shown, shown
    else:
        assert b"scanning: 8 folders \xc2\xb7 36 files \xc2\xb7 4 runs" in shown, shown
    assert not [line for line in screen(shown) if line.lstrip("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏ ").startswith(("scanning:", "reading:"))], screen(shown)
    assert piped == plain.stdout and code == plain.returncode, "stdout is the same on a terminal or not"
    assert not any(line in plain.stderr for line in LINES), "no line when stderr is no terminal"
    if "--json" in args:
        assert json.loads(piped)["command"] == "inspect"


def test_the_line_follows_stderr_not_stdout(runs: Path) -> None:
    """stdout on a terminal and stderr piped: no line (the line is stderr's)."""
    master, slave = pty.openpty()
    try:
        done = subprocess.run(
            _command("inspect", str(runs)),
            stdin=slave,
            stdout=slave,
            stderr=subprocess.PIPE,
            env=_env(),
            cwd=ROOT,
            timeout=120,
            check=False,
        )
    finally:
        os.close(slave)
        os.close(master)
    assert done.returncode == 1 and done.stderr == b"", done.stderr  # the count of findings ends the report, on stdout


def test_a_scan_quicker_than_the_delay_shows_nothing(runs: Path) -> None:
    _, shown, piped = in_terminal(_command("inspect", str(runs)), _env(delay=None), subprocess.PIPE)
    assert piped and not any(line in shown for line in LINES), shown


def test_quiet_shows_no_line(tmp_path: Path) -> None:
    write_burn_run(tmp_path / "a", range(1, 4))
    write_burn_run(tmp_path / "b", range(1, 4))
    code, shown, _ = in_terminal(_command("inspect", "-q", str(tmp_path)), _env())
    assert code == 0 and shown == b"", shown


@pytest.mark.slow
def test_the_line_appears_after_the_delay_counts_as_it_goes_and_is_erased(monkeypatch: pytest.MonkeyPatch) -> None:
    """The status itself, in this process: nothing during the delay, then the tally's figures
    (one folder, one file and one run said in the singular), and nothing left at the end."""
    master, slave = pty.openpty()
    terminal = os.fdopen(slave, "w", encoding="utf-8")
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("CKPTDOCTOR_PROGRESS_AFTER", "0.3")
    monkeypatch.setenv("TERM", "xterm")
    shown = b""

    def drain() -> bytes:
        got = b""
        while select.select([master], [], [], 0.05)[0]:
            got += os.read(master, 65536)
        return got

    try:
        with ScanStatus(quiet=False) as status:
            assert status.tally is not None
            status.tally.folders, status.tally.files, status.tally.runs = 1, 1, 1
            time.sleep(0.1)
            assert drain() == b"", "nothing within the delay"
            time.sleep(0.6)
            shown += drain()
            assert b"scanning: 1 folder \xc2\xb7 1 file \xc2\xb7 1 run" in shown, shown
            status.tally.folders, status.tally.files, status.tally.runs = 1204, 503112, 3
            time.sleep(0.4)
        shown += drain()
        assert b"scanning: 1,204 folders \xc2\xb7 503,112 files \xc2\xb7 3 runs" in shown, shown
        assert not [line for line in screen(shown) if "scanning" in line], screen(shown)
        with ScanStatus(quiet=False):
            pass  # ended within the delay
        time.sleep(0.4)
        assert drain() == b""
    finally:
        terminal.close()
        os.close(master)


def test_the_core_prints_nothing(runs: Path, capfd: pytest.CaptureFixture[str]) -> None:
    ckd.inspect([str(runs)])
    ckd.verify([str(runs)])
    assert capfd.readouterr() == ("", "")
