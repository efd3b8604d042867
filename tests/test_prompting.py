"""Asking follows stdin, as git and apt do: with stdin on a terminal ``prune`` and ``repair`` ask
there, wherever stdout goes (``> plan.txt``, ``| tee``), the prompt on the terminal and never in
the plan; with no terminal on stdin they need ``--yes``. A "no" changes nothing and exits 1.

Each test runs the real CLI in a pseudo-terminal and answers it as a user would."""

from __future__ import annotations

import hashlib
import os
import pty
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest
from terminal import PROMPT, in_terminal

from ckptdoctor.testing import write_burn_run


def _burn_run(tmp_path: Path) -> Path:
    folder = tmp_path / "run" / "checkpoint"
    write_burn_run(folder, range(1, 8))
    when = time.time() - 86400  # older than --min-age
    for path in folder.rglob("*"):
        os.utime(path, (when, when))
    return folder


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()}


def _env() -> dict[str, str]:
    return {**os.environ, "NO_COLOR": "1", "COLUMNS": "120", "TERM": "xterm"}


def _answered(args: list[str], answer: bytes | None, stdout: int | IO[bytes]) -> tuple[int, bytes, bytes]:
    """The CLI with stdin and stderr on a terminal and stdout as given, answered ``answer``."""
    return in_terminal([sys.executable, "-m", "ckptdoctor", *args], _env(), stdout, answer)


@pytest.mark.parametrize("to", ["file", "pipe"])
def test_yes_on_the_terminal_deletes_with_stdout_redirected(tmp_path: Path, to: str) -> None:
    folder = _burn_run(tmp_path)
    plan_file = tmp_path / "plan.txt"
    with plan_file.open("wb") as plan:
        code, shown, piped = _answered(["prune", "--keep-last", "2", str(folder)], b"y", plan if to == "file" else subprocess.PIPE)
    plan_text = plan_file.read_bytes() if to == "file" else piped
    assert code == 0, shown
    assert b"Delete them? [y/N]: " in shown, "asked on the terminal"
    assert b"About to delete 5 checkpoints" in plan_text, "the plan went where stdout goes"
    assert PROMPT not in plan_text and b"Delete them?" not in plan_text, "the prompt is not part of the plan"
    assert sorted(int(p.stem.split("-")[1]) for p in folder.glob("model-*.bpk")) == [6, 7]


@pytest.mark.parametrize("to", ["file", "pipe"])
@pytest.mark.parametrize("answer", [b"n", b""])
def test_no_on_the_terminal_changes_nothing_and_exits_1(tmp_path: Path, to: str, answer: bytes) -> None:
    folder = _burn_run(tmp_path)
    before = _digests(folder)
    with (tmp_path / "plan.txt").open("wb") as plan:
        code, shown, _ = _answered(["prune", "--keep-last", "2", str(folder)], answer, plan if to == "file" else subprocess.PIPE)
    assert code == 1, shown
    assert b"Nothing was deleted." in shown
    assert _digests(folder) == before


@pytest.mark.slow
def test_repair_asks_on_the_terminal_and_a_no_exits_1(tmp_path: Path) -> None:
    folder = _burn_run(tmp_path)
    (folder / "optim-7.bpk").unlink()  # epoch 7 lacks its optimizer: repair would quarantine it
    before = _digests(folder)
    with (tmp_path / "plan.txt").open("wb") as plan:
        code, shown, _ = _answered(["repair", str(folder)], b"n", plan)
    assert code == 1, shown
    assert PROMPT in shown and _digests(folder) == before
    assert b"About to quarantine" in (tmp_path / "plan.txt").read_bytes()


def test_stdin_off_a_terminal_needs_yes_even_with_stdout_on_one(tmp_path: Path) -> None:
    folder = _burn_run(tmp_path)
    before = _digests(folder)
    master, slave = pty.openpty()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "ckptdoctor", "prune", "--keep-last", "2", str(folder)],
            stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE, env=_env(), timeout=120, check=False,
        )  # fmt: skip
    finally:
        os.close(slave)
        os.close(master)
    assert result.returncode == 2
    assert b"--yes" in result.stderr and PROMPT not in result.stderr
    assert _digests(folder) == before
