"""CKD117: one finding per save that stopped part-way, its cause read from the world, on real HF
Trainer runs: killed mid-save, its first save on a full disk, a save going on now; and a healthy
run's ``verify`` in one screen. Each screen is what a terminal at 80 columns shows
(``terminal.screen``), stored as the expectation in ``tests/golden/screens/`` with what changes
from run to run (paths, ages, free space, pids) put in words; ``CKPTDOCTOR_UPDATE_GOLDEN=1``
rewrites them."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from terminal import in_terminal, screen

pytest.importorskip("transformers")
TESTS = Path(__file__).resolve().parent
SCREENS = TESTS / "golden" / "screens"
COLUMNS = 80


def _train(script: str, stop: bool = False) -> subprocess.Popen[bytes]:
    """A real HF Trainer in a child process, ``killer`` armed in it where ``script`` says."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}
    code = f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nimport killer\nfrom pathlib import Path\nfrom frameworks import hf_trainer\n{script}"
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _resumed(run: Path, stop: bool) -> subprocess.Popen[bytes]:
    """The run resumed to step 8 and cut in its save's third file (``model.safetensors``), half written."""
    return _train(f"killer.arm(3, 0.5, stop={stop})\nhf_trainer(Path({str(run)!r}), 8).train(resume_from_checkpoint=True)")


def _shown(*args: str, run: Path) -> tuple[int, list[str]]:
    """What ``ckptdoctor ARGS RUN`` shows in a terminal, typed in the run's parent folder as a user would."""
    env = {**os.environ, "COLUMNS": str(COLUMNS), "NO_COLOR": "1", "TERM": "xterm"}
    code, shown, _ = in_terminal([sys.executable, "-m", "ckptdoctor", *args, run.name], env, cwd=str(run.parent))
    lines = screen(shown)
    while lines and not lines[-1]:
        lines.pop()
    wide = [line for line in lines if len(line) > COLUMNS and " " in line.strip()]
    assert not wide, f"lines wider than the terminal:\n{wide}"  # one unbreakable path or command alone may be
    return code, lines


def _joined(lines: list[str]) -> str:
    """The screen's text as one line: what it says, wherever its lines broke."""
    return re.sub(r"\s+", " ", " ".join(lines))


def _worded(lines: list[str]) -> str:
    """The screen with what changes from run to run in words (a value may wrap onto the next line)."""
    text = "\n".join(lines)
    text = re.sub(r"\b\d+(\.\d+)?(s|min|h)\b", "AGE", text)
    text = re.sub(r"\b\d+(\.\d+)?\s+(B|KiB|MiB|GiB|TiB)\s+free\s+on\s+\w+\s+[^\s;)]+", "FREE free on VOLUME", text)
    text = re.sub(r"\b\d\d:\d\d\s+UTC\b", "HH:MM UTC", text)
    # which processes hide their files from this user is the machine's, not the run's
    text = re.sub(r"\s+this\s+user\s+can\s+see", "", text)
    text = re.sub(r"\s+\(some\s+processes\s+are\s+hidden\s+from\s+this\s+user\)", "", text)
    return re.sub(r"pid\s+\d+\s+\([^)]*\)", "pid PID (COMMAND, USER)", text)


def _expected(name: str, screen_text: str) -> None:
    """``screen_text`` says what the stored screen says. Where lines break is left out of the
    comparison: it moves with the length of what changes (an age of 3 s or 12 s); the tests hold
    the lines to the width and count themselves."""
    path = SCREENS / f"{name}.txt"
    if os.environ.get("CKPTDOCTOR_UPDATE_GOLDEN"):
        SCREENS.mkdir(parents=True, exist_ok=True)
        path.write_text(screen_text + "\n", encoding="utf-8")
    stored = path.read_text(encoding="utf-8")
    assert _joined(screen_text.splitlines()) == _joined(stored.splitlines()), f"{name}: the screen changed:\n{screen_text}"


def _json(run: Path) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "ckptdoctor", "inspect", "--json", str(run)], capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout)


@pytest.fixture
def killed(hf_trained: Path, tmp_path: Path) -> Path:
    run = Path(shutil.copytree(hf_trained, tmp_path / "out"))
    child = _resumed(run, stop=False)
    _, err = child.communicate(timeout=600)
    assert child.returncode == -signal.SIGKILL, err.decode()[-2000:]
    return run


def test_a_save_killed_mid_way_is_one_error_that_says_so_in_20_lines(killed: Path) -> None:
    code, lines = _shown("inspect", run=killed)
    assert code == 1
    assert len(lines) <= 20, "\n".join(lines)
    text = _joined(lines)
    # moments after the kill: a kill, or a save between two files, as no process table can tell
    assert "1 error" in text and "killed, or between two files of a save" in text and "holds its files" in text
    _expected("hf-killed-mid-save", _worded(lines))
    findings = _json(killed)["findings"]
    assert isinstance(findings, list)
    parent = [f for f in findings if f["code"] == "CKD117"]
    assert len(parent) == 1 and parent[0]["index"] == 8 and parent[0]["severity"] == "error"
    parts = {f["code"] for f in findings if f.get("part_of") == {"code": "CKD117", "index": 8}}
    assert parts == {f["code"] for f in findings} - {"CKD117"} and {"CKD203", "CKD114"} <= parts


def test_following_the_killed_saves_fix_at_once_lets_hf_resume_by_itself(killed: Path) -> None:
    """The printed repair, with the `--min-age 0` a fresh crash needs, moves step 8 aside: the
    Trainer's own `resume_from_checkpoint=True` then resumes step 6 and saves step 8 whole."""
    _, lines = _shown("inspect", run=killed)
    text = _joined(lines)
    command = re.search(r"`(ckptdoctor repair \S+ --min-age 0)`", text)
    assert command, text
    done = subprocess.run(
        [sys.executable, "-m", *command.group(1).split(), "--yes"], capture_output=True, text=True, timeout=120, cwd=killed.parent
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (killed / "checkpoint-8").exists()
    child = _train(f"hf_trainer(Path({str(killed)!r}), 8).train(resume_from_checkpoint=True)")
    _, err = child.communicate(timeout=600)
    assert child.returncode == 0, err.decode()[-2000:]
    assert _json(killed)["summary"] == {"error": 0, "warning": 0, "info": 0}


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("a small tmpfs needs root")
    volume = tmp_path / "small"
    volume.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=60k", "tmpfs", str(volume)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield volume
    finally:
        subprocess.run(["umount", "-l", str(volume)], check=False)


def test_a_first_save_on_a_full_disk_names_the_disk_in_one_error(full_disk: Path) -> None:
    run = full_disk / "out"
    child = _train(f"hf_trainer(Path({str(run)!r}), 6).train()")
    _, err = child.communicate(timeout=600)
    assert child.returncode != 0 and b"RuntimeError" in err, err.decode()[-2000:]
    code, lines = _shown("inspect", run=run)
    assert code == 1
    assert len(lines) <= 20, "\n".join(lines)
    text = _joined(lines)
    assert "the disk is full" in text and str(full_disk) in text and "1 error" in text
    assert "diskcheck" in text and "backup" not in text and "zero_to_fp32" not in text and "the last line names" not in text
    _expected("hf-first-save-full-disk", _worded(lines).replace(str(full_disk), "MOUNT"))


def test_a_save_going_on_now_is_being_written_by_its_pid_and_no_error(hf_trained: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(hf_trained, tmp_path / "out"))
    child = _resumed(run, stop=True)
    try:
        for _ in range(600):  # until the save stops itself half-way through model.safetensors
            if child.poll() is not None or _stopped(child.pid):
                break
            time.sleep(0.1)
        assert _stopped(child.pid), (
            child.poll(),
            child.stderr.read().decode()[-2000:] if child.stderr and child.poll() is not None else "",
        )
        code, lines = _shown("inspect", run=run)
        text = _joined(lines)
        assert code == 0, "\n".join(lines)
        assert f"being written now, by pid {child.pid}" in text and "1 warning" in text
        assert "backup" not in text and "quarantines" not in text and "--min-age 0" not in text  # nothing to undo a live save
        _expected("hf-save-going-on", _worded(lines))
    finally:
        child.kill()
        child.wait(timeout=60)


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def test_a_healthy_runs_verify_fits_in_12_lines_and_names_hfs_own_files_once(hf_trained: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(hf_trained, tmp_path / "out"))
    code, lines = _shown("verify", run=run)
    assert code == 0
    assert len(lines) <= 12, "\n".join(lines)
    text = _joined(lines)
    assert text.count("CKD402") == 1 and "rng_state.pth" in text and "--verbose" in text and "CKD117" not in text
    _expected("hf-healthy-verify", _worded(lines))
    _, verbose = _shown("verify", "--verbose", run=run)
    assert sum("rng_state.pth" in line for line in verbose) >= 3  # each checkpoint's, with its fixes
