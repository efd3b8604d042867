"""The README's example output and ``docs/screens/*.svg``, made by running ckptdoctor on the
shipped example runs (``examples/runs``, made by ``examples/make_examples.py``).

    python docs/make_screens.py           # rewrite the blocks in README.md and docs/commands.md, and the SVGs
    python docs/make_screens.py --check   # say what is stale, exit 1 (tests/test_project.py does this)

Each screen is run twice, as a user would see it, at 80 columns:
- piped (``COLUMNS=80``, stdout and stderr in one pipe, in the order written): the text block
  between ``<!-- screen:NAME:start -->`` and ``<!-- screen:NAME:end -->`` in README.md, for
  copy-paste and search;
- in a pseudo-terminal 80 columns wide, with colour: ``docs/screens/NAME.svg``, rendered by
  rich's ``Console(record=True).export_svg``. Both runs must show the same text, or nothing is written.

``--help`` of every command goes between ``<!-- help:COMMAND:start -->`` and its end marker in
``docs/commands.md``.

What would change from machine to machine is fixed on purpose, and only that:
- every screen runs in a fresh temporary copy of ``examples/runs``, from a folder in which the copy
  is ``examples/runs``: the paths shown are the shipped ones, and ``prune`` and ``repair`` change
  only the copy;
- the copy's files are dated 2026-01-01 (a checkout dates them now, and ``--min-age`` would keep
  them all);
- the volume ``diskcheck`` measures is a fixed ext4 disk (``VOLUME``), not this machine's free space;
- what other users' processes hide of their open files (which processes a machine runs) is left
  out: the note that says so, and "this user can see" in a save's cause.
"""

from __future__ import annotations

import contextlib
import difflib
import html
import io
import os
import pty
import re
import select
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COMMANDS_DOC = ROOT / "docs" / "commands.md"
SCREENS = ROOT / "docs" / "screens"
WIDTH = 80
DATED = 1_767_225_600  # 2026-01-01T00:00:00Z
VOLUME = ("ext4", "/", 500 * 2**30, 64 * 2**30, 30_000_000)
"""fstype, mount point, total and free bytes, free inodes: the disk the screens show."""
HELP = ("inspect", "verify", "prune", "repair", "diskcheck", "rules")

# Runs the command as the console script does, named `ckptdoctor` in usage lines, on VOLUME.
_BOOT = """
import os, sys
from ckptdoctor.model import Volume
from ckptdoctor import volumes
from ckptdoctor.planners import space
fstype, mount, total, free, inodes = os.environ["SCREENS_VOLUME"].split(",")
volumes.volume = space.volume = lambda path: Volume(os.path.abspath(path), mount, fstype, int(total), int(free), int(inodes))
from ckptdoctor import processes
_open_by = processes.open_by
processes.open_by = lambda *args, **kwargs: (_open_by(*args, **kwargs)[0], None)  # which processes a machine hides
sys.argv[0] = "ckptdoctor"
from ckptdoctor.cli import main
main()
"""
_MACHINE_NOTE = re.compile(r"^note: .*process(es)? .* cannot be read by this user", re.MULTILINE)


@dataclass(frozen=True)
class Screen:
    name: str
    commands: tuple[tuple[str, ...], ...]
    """ckptdoctor's arguments, one tuple per command; run in order on one copy of the examples."""


SCREEN_LIST = (
    Screen("inspect", (("inspect", "examples/runs/burn-missing-optimizer"),)),
    Screen(
        "resume",
        (
            ("inspect", "--resume", "examples/runs/burn-missing-optimizer"),
            ("inspect", "--resume-path", "examples/runs/torch-split"),
        ),
    ),
    Screen("rules", (("rules", "Can load optimizer checkpoint."),)),
    Screen("verify", (("verify", "examples/runs/torch-split"),)),
    Screen("prune", (("prune", "examples/runs/burn-healthy", "--keep-last", "1", "--dry-run"),)),
    Screen("repair", (("repair", "examples/runs/burn-missing-optimizer", "--dry-run"),)),
    Screen("diskcheck", (("diskcheck", "examples/runs/burn-healthy", "--keep-last", "3"),)),
    Screen("diskcheck-new", (("diskcheck", "runs/new", "--model-bytes", "30GiB", "--optimizer", "adamw"),)),
)


def shown(arguments: tuple[str, ...]) -> str:
    return f"$ ckptdoctor {shlex.join(arguments)}"


def _environment(terminal: bool) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in {"COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR"}}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
        PYTHONUNBUFFERED="1",  # stdout and stderr in the order written
        SCREENS_VOLUME=",".join(map(str, VOLUME)),
        TERM="xterm-256color",
    )
    if not terminal:
        env["COLUMNS"] = str(WIDTH)
    return env


def _piped(arguments: tuple[str, ...], folder: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _BOOT, *arguments],
        cwd=folder,
        env=_environment(terminal=False),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=300,
        check=False,
    )
    return done.stdout.decode()


def _in_terminal(arguments: tuple[str, ...], folder: Path) -> str:
    """What the command writes to a terminal 80 columns wide (stdin, stdout and stderr on it)."""
    import fcntl  # POSIX only, as pty
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, WIDTH, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-c", _BOOT, *arguments], cwd=folder, env=_environment(terminal=True), stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    written = b""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if not select.select([master], [], [], 1)[0]:
            if process.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the command has closed the terminal
            break
        if not chunk:
            break
        written += chunk
    os.close(master)
    process.wait(timeout=60)
    return written.decode()


_CONTROL = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\r\n|\r|\n")


def settle(written: str) -> list[str]:
    """The lines a terminal shows once the command has ended, with their colour codes: a line
    rich erased (a progress bar, a transient status) is gone. Only what rich writes is understood
    (colours, carriage return, erase line, cursor up, cursor shown or hidden); anything else stops
    the script rather than draw a wrong screen."""
    lines = [""]
    row, at = 0, 0
    for control in _CONTROL.finditer(written):
        text = written[at : control.start()]
        at = control.end()
        lines[row] += text
        code, letter = control.group(1), control.group(2)
        if control.group(0) in ("\r\n", "\n"):
            row += 1
            if row == len(lines):
                lines.append("")
        elif control.group(0) == "\r":
            continue  # rich erases the line next
        elif letter == "m":
            lines[row] += control.group(0)
        elif letter == "K" and code in ("", "2"):
            lines[row] = ""
        elif letter == "A":
            row = max(0, row - int(code or "1"))
        elif code in ("?25",) and letter in "hl":
            continue
        else:
            raise ValueError(f"the terminal output holds {control.group(0)!r}, which this script does not draw")
    lines[row] += written[at:]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _plain(lines: list[str]) -> str:
    return "\n".join(re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip() for line in lines)


def _cleaned(text: str) -> str:
    kept = [line.rstrip() for line in text.replace("\r\n", "\n").splitlines() if not _MACHINE_NOTE.match(line)]
    return "\n".join(kept).strip("\n")


def svg(name: str, blocks: list[tuple[str, list[str]]]) -> str:
    """One SVG of a terminal 80 columns wide: each command's line, then what it wrote, folded
    at the edge as a terminal folds a longer line."""
    from rich.console import Console
    from rich.text import Text

    console = Console(record=True, width=WIDTH, file=io.StringIO(), force_terminal=True, color_system="truecolor", legacy_windows=False)
    for command, lines in blocks:
        console.print(Text(command, style="bold"))
        for line in lines:
            if _MACHINE_NOTE.match(_plain([line])):
                continue
            text = Text.from_ansi(line)
            for piece in text.divide(range(WIDTH, len(text), WIDTH)) if len(text) > WIDTH else [text]:
                console.print(piece, no_wrap=True, overflow="ignore", crop=False)
    return console.export_svg(title="ckptdoctor", unique_id=f"ckptdoctor-{name}")


_SVG_TEXT = re.compile(
    r'<text class="[^"]*" x="([^"]*)" y="[^"]*" textLength="([^"]*)" clip-path="url\(#[^)]*-line-(\d+)\)">(.*?)</text>', re.S
)


def svg_text(document: str) -> str:
    """The text an SVG made by ``svg`` shows, line by line (what tests compare: rich's markup may
    change between its versions, the text may not). Spaces alone are drawn as nothing, so each
    piece of text is put at the column its position says."""
    pieces = [
        (float(x), float(length), int(line), html.unescape(text).replace("\xa0", " "))
        for x, length, line, text in _SVG_TEXT.findall(document)
    ]
    cell = next((length / len(text) for _, length, _, text in pieces if text.strip()), 1.0)
    lines: dict[int, str] = {}
    for x, _, line, text in pieces:
        column = round(x / cell)
        lines[line] = lines.get(line, "").ljust(column)[:column] + text.rstrip("\n")
    return "\n".join(lines.get(n, "").rstrip() for n in range(max(lines, default=-1) + 1)).strip("\n")


@dataclass(frozen=True)
class Made:
    text: str
    """The README's block: commands and their output, as piped."""
    svg: str


@contextlib.contextmanager
def _copy_of_examples() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ckptdoctor-screens-") as temporary:
        folder = Path(temporary)
        shutil.copytree(ROOT / "examples" / "runs", folder / "examples" / "runs", ignore=shutil.ignore_patterns(".ckptdoctor"))
        for path in sorted(folder.rglob("*"), reverse=True):
            os.utime(path, (DATED, DATED), follow_symlinks=False)
        yield folder


def make(screen: Screen) -> Made:
    text: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    for mode in ("piped", "terminal"):
        with _copy_of_examples() as folder:
            for arguments in screen.commands:
                if mode == "piped":
                    text += [shown(arguments), _cleaned(_piped(arguments, folder))]
                else:
                    blocks.append((shown(arguments), settle(_in_terminal(arguments, folder))))
    piped_text = "\n".join(part for part in text if part)
    drawn = svg(screen.name, blocks)
    if svg_text(drawn) != piped_text:
        difference = "\n".join(
            difflib.unified_diff(piped_text.splitlines(), svg_text(drawn).splitlines(), "piped", "terminal", lineterm="")
        )
        raise RuntimeError(f"screen {screen.name}: the terminal showed other text than the pipe got:\n{difference}")
    return Made(piped_text, drawn)


def _help(command: str) -> str:
    with tempfile.TemporaryDirectory(prefix="ckptdoctor-help-") as folder:
        return _cleaned(_piped((command, "--help"), Path(folder)))


def _between(document: str, start: str, end: str, block: str) -> str:
    head, found, rest = document.partition(start)
    _, ended, tail = rest.partition(end)
    if not (found and ended):
        raise ValueError(f"the markers {start} and {end} are missing")
    return f"{head}{start}\n```text\n{block}\n```\n{end}{tail}"


def expected() -> dict[Path, str]:
    """Every file this script writes, with what it should hold now. A screen's block goes wherever
    its markers are (README.md or docs/commands.md); a screen shown nowhere is an error."""
    documents = {path: path.read_text(encoding="utf-8") for path in (README, COMMANDS_DOC)}
    files: dict[Path, str] = {}
    with ThreadPoolExecutor() as pool:  # each screen runs in its own copy: they may run side by side
        screens = list(pool.map(make, SCREEN_LIST))
        helps = list(pool.map(_help, HELP))
    for screen, made in zip(SCREEN_LIST, screens, strict=True):
        start, end = f"<!-- screen:{screen.name}:start -->", f"<!-- screen:{screen.name}:end -->"
        holding = [path for path, text in documents.items() if start in text]
        if not holding:
            raise ValueError(f"no document has the markers of screen {screen.name} ({start})")
        for path in holding:
            documents[path] = _between(documents[path], start, end, made.text)
        files[SCREENS / f"{screen.name}.svg"] = made.svg
    for command, text in zip(HELP, helps, strict=True):
        documents[COMMANDS_DOC] = _between(documents[COMMANDS_DOC], f"<!-- help:{command}:start -->", f"<!-- help:{command}:end -->", text)
    return {**documents, **files}


def stale(files: dict[Path, str]) -> list[Path]:
    """The files that differ from ``files`` (an SVG by the text it shows)."""

    def same(path: Path, text: str) -> bool:
        if not path.exists():
            return False
        now = path.read_text(encoding="utf-8")
        return svg_text(now) == svg_text(text) if path.suffix == ".svg" else now == text

    left = sorted(set(SCREENS.glob("*.svg")) - set(files))  # a screen no longer made
    return [path for path, text in files.items() if not same(path, text)] + left


def main(arguments: list[str]) -> int:
    files = expected()
    if arguments == ["--check"]:
        outdated = stale(files)
        for path in outdated:
            print(f"{path.relative_to(ROOT)} is stale: run `python docs/make_screens.py`")
        return 1 if outdated else 0
    SCREENS.mkdir(exist_ok=True)
    for path in set(SCREENS.glob("*.svg")) - set(files):
        path.unlink()
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
