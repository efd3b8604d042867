"""FIFOs, devices and odd encodings where ckptdoctor expects files (issue 13, items 6 and 7).

A FIFO named like a checkpoint used to block `open` in every command, and `/dev/zero` given as an
option file fed memory without end. Each command runs here as its own process with a timeout, so
that a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "runs"
HANG = 60
"""Seconds after which a command counts as hung (each finishes in about one)."""


def ckptdoctor(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckptdoctor", *map(str, args)],
        capture_output=True, text=True, timeout=HANG, stdin=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip


@pytest.fixture()
def run_with_fifo(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(EXAMPLES / "burn-healthy", run)
    os.mkfifo(run / "checkpoint" / "model-9.bpk")
    return run


@pytest.mark.parametrize("command", [["inspect"], ["verify"], ["verify", "--deep"]])
def test_a_fifo_named_like_a_checkpoint_is_reported_not_opened(run_with_fifo: Path, command: list[str]) -> None:
    done = ckptdoctor(*command, "--json", run_with_fifo)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert done.returncode == 1
    assert "CKD211" in done.stdout and "a FIFO, not a regular file" in done.stdout


@pytest.mark.parametrize("command", [["prune", "--dry-run", "--keep-last", "1"], ["repair", "--dry-run"], ["diskcheck"]])
def test_acting_and_disk_commands_do_not_hang_on_a_fifo(run_with_fifo: Path, command: list[str]) -> None:
    done = ckptdoctor(*command, run_with_fifo)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert done.returncode in (0, 1), done.stderr
    assert (run_with_fifo / "checkpoint" / "model-9.bpk").exists()


@pytest.mark.parametrize("option", ["--baseline", "--config"])
@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_option_files_that_are_no_files_are_a_usage_error(tmp_path: Path, option: str, special: str) -> None:
    path = special
    if special == "fifo":
        path = str(tmp_path / "option.fifo")
        os.mkfifo(path)
    done = ckptdoctor("inspect", option, path, EXAMPLES / "burn-healthy")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert done.stderr.count("\n") <= 2


@pytest.mark.parametrize("special", ["/dev/zero", "folder", "big", "not toml"])
def test_a_config_that_exists_but_cannot_be_one_says_what_is_wrong(tmp_path: Path, special: str) -> None:
    """Issue 32, item 10: `--config /dev/zero` said "no such configuration file"."""
    path, said = {
        "/dev/zero": ("/dev/zero", "a character device, not a regular file"),
        "folder": (str(tmp_path), "a folder, not a regular file"),
        "big": (str(tmp_path / "big.toml"), "more than the"),
        "not toml": (str(tmp_path / "bad.toml"), "not TOML"),
    }[special]
    if special == "big":
        Path(path).write_bytes(b"#" * (2 << 20))
    if special == "not toml":
        Path(path).write_text("this is = = not toml\n")
    done = ckptdoctor("inspect", "--config", path, EXAMPLES / "burn-healthy")
    assert done.returncode == 2 and said in done.stderr and path in done.stderr, done.stderr
    assert "no such configuration file" not in done.stderr
    assert "no such configuration file" in ckptdoctor("inspect", "--config", tmp_path / "absent.toml", EXAMPLES / "burn-healthy").stderr


@pytest.mark.parametrize("option", ["-o", "--write-baseline"])
def test_a_report_or_baseline_into_a_fifo_nobody_reads_is_refused_not_waited_for(tmp_path: Path, option: str) -> None:
    """Issue 32, item 10: `--write-baseline FIFO` waited forever where `-o FIFO` refused."""
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    done = ckptdoctor("inspect", option, fifo, EXAMPLES / "burn-healthy")  # a hang is the timeout's failure
    assert done.returncode == 2 and f"{fifo}: a FIFO no process reads" in done.stderr.replace(
        "cannot write the baseline ", "cannot write "
    ), done.stderr


@pytest.mark.parametrize("special", ["/dev/zero", "fifo", "latin-1"])
def test_a_metrics_file_that_cannot_be_read_says_why(tmp_path: Path, special: str) -> None:
    path = tmp_path / "metrics.csv"
    if special == "/dev/zero":
        path = Path(special)
    elif special == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes("épochs,loss\n1,0.5\n".encode("latin-1"))
    run = tmp_path / "run"
    shutil.copytree(EXAMPLES / "burn-healthy", run)
    done = ckptdoctor("prune", "--dry-run", "--keep-best", "1", "--metric", "loss", "--metrics-file", path, run)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert ("not a regular file" in done.stderr) if special != "latin-1" else ("not UTF-8" in done.stderr)


def test_the_regular_file_reader_refuses_what_it_cannot_bound(tmp_path: Path) -> None:
    from ckptdoctor.regular import NotRegular, read_regular

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotRegular):
        read_regular(str(fifo), 10)
    with pytest.raises(NotRegular):
        read_regular("/dev/zero", 10)
    big = tmp_path / "big"
    big.write_bytes(bytes(11))
    with pytest.raises(OSError, match="more than the 10"):
        read_regular(str(big), 10)
    assert read_regular(str(big), 11) == bytes(11)
