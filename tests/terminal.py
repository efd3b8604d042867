"""Run a command with a pseudo-terminal as its user's terminal, as the tests of prompting and
colour need: stdin and stderr on the terminal, stdout on it too or wherever the test says."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import threading
import time
from typing import IO

PROMPT = b"[y/N]: "


def in_terminal(
    command: list[str], env: dict[str, str], stdout: int | IO[bytes] | None = None, answer: bytes | None = None, cwd: str | None = None
) -> tuple[int, bytes, bytes]:
    """Run ``command``; type ``answer`` once the prompt shows (None: type nothing). ``stdout``:
    None for the terminal, else a file or ``subprocess.PIPE``. Returns the exit code, what the
    terminal showed, and what a pipe on stdout got."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        command, stdin=slave, stdout=slave if stdout is None else stdout, stderr=slave, env=env, close_fds=True, cwd=cwd
    )
    os.close(slave)
    piped: list[bytes] = []
    reader = threading.Thread(target=lambda: piped.append(proc.stdout.read() if proc.stdout else b""))
    reader.start()
    deadline = time.monotonic() + 120
    shown = b""
    if answer is not None:
        shown = shown_until(master, proc, PROMPT, deadline)
        if PROMPT in shown:
            os.write(master, answer + b"\n")
    shown += shown_until(master, proc, None, deadline)
    os.close(master)
    code = proc.wait(timeout=60)
    reader.join(timeout=60)
    return code, shown, b"".join(piped)


def shown_until(terminal: int, process: subprocess.Popen[bytes], wanted: bytes | None, deadline: float) -> bytes:
    """What the pseudo-terminal ``terminal`` shows until ``wanted`` shows (None: until
    ``process`` has closed it or ended), or ``deadline`` (a ``time.monotonic()``) has passed."""
    shown = b""
    while time.monotonic() < deadline and (wanted is None or wanted not in shown):
        if not select.select([terminal], [], [], 1)[0]:
            if process.poll() is not None:
                break
            continue
        try:
            chunk = os.read(terminal, 65536)
        except OSError:  # EIO once the child has closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    return shown


_TOKEN = re.compile(rb"\x1b\[([0-9;?]*)([A-Za-z])|\r|\n|[^\x1b\r\n]+|\x1b")


def screen(shown: bytes) -> list[str]:
    """The lines a terminal shows once it has been sent ``shown``: text, line feeds, carriage
    returns, erasing a line and moving up (what a transient line is drawn and erased with);
    other escapes (colours, the cursor's visibility) change no text."""
    lines, row, column = [""], 0, 0
    for match in _TOKEN.finditer(shown):
        token = match.group()
        if token == b"\n":
            row += 1
            lines += [""] * (row + 1 - len(lines))
        elif token == b"\r":
            column = 0
        elif match.group(2) == b"K":  # erase in line: 2 the whole line, else from the cursor on
            lines[row] = "" if match.group(1) == b"2" else lines[row][:column]
        elif match.group(2) == b"A":
            row = max(0, row - int(match.group(1) or b"1"))
        elif not token.startswith(b"\x1b"):
            text = token.decode("utf-8", "replace")
            line = lines[row].ljust(column)
            lines[row] = line[:column] + text + line[column + len(text) :]
            column += len(text)
    return [line.rstrip() for line in lines]
