"""Child processes that start with torch and the frameworks already imported.

A test that kills a framework inside its save (``matrix.killed_mid_save``) runs the framework in a
child process. Started fresh, each child spends 2–8 s of CPU importing torch and the framework, and
a fraction of that training and saving. :func:`run` instead asks a warm process, which imported
them once per test session, to fork the child: the fork holds every module already imported and
runs its script as a fresh ``python -c`` would, with the environment, folder and output files it
is given. Forking a process that has imported torch but computed nothing is what torch's own
``DataLoader`` workers do on Linux.

:mod:`killer` is installed (disarmed) before anything is imported, so that the frameworks bind its
``torch.save`` and ``safetensors.torch.save_file`` as they would in a fresh child armed first.

Run as a script, this is the warm process: it imports the modules named on its command line, then
forks one child per request read from stdin (a JSON line: ``script``, ``args``, ``env``, ``cwd``,
``stdout``, ``stderr``), answering ``{"pid": N}`` at once and ``{"status": S}`` when the child ends (``S`` as
``subprocess`` gives it: negative for a signal).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

TESTS = Path(__file__).resolve().parent
WARM = ("torch", "numpy", "safetensors.torch", "lightning", "transformers.trainer", "accelerate", "frameworks")
"""What the warm process imports where it is installed: torch and the frameworks of the ``test``
extra, whose imports are most of a kill test's time. Others (TensorFlow, JAX, DeepSpeed) are
imported by the child that needs them: TensorFlow and JAX start threads of their own on import,
which a fork must not copy."""

_LOCK = threading.Lock()
_warm: subprocess.Popen[str] | None = None


def run(script: str, env: Mapping[str, str], timeout: float, args: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """``python -c script *args`` with ``env``, forked from the warm process: its exit status
    (negative for a signal), stdout and stderr. Killed with SIGKILL after ``timeout`` seconds
    (:class:`subprocess.TimeoutExpired`)."""
    with _LOCK, tempfile.TemporaryDirectory(prefix="warm-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        warm = _started()
        assert warm.stdin is not None and warm.stdout is not None
        request = {"script": script, "args": list(args), "env": dict(env), "cwd": os.getcwd(), "stdout": str(out), "stderr": str(err)}
        warm.stdin.write(json.dumps(request) + "\n")
        warm.stdin.flush()
        pid = _answer(warm.stdout, "pid")
        expired = threading.Event()
        timer = threading.Timer(timeout, _expire, (pid, expired))
        timer.start()
        try:
            status = _answer(warm.stdout, "status")
        finally:
            timer.cancel()
        said = ["python", "-c", script, *args], out.read_text(errors="replace"), err.read_text(errors="replace")
        if expired.is_set():
            raise subprocess.TimeoutExpired(said[0], timeout, said[1], said[2])
        return subprocess.CompletedProcess(said[0], status, said[1], said[2])


def _expire(pid: int, expired: threading.Event) -> None:
    expired.set()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _answer(stream: IO[str], key: str) -> int:
    line = stream.readline()
    if not line:
        raise RuntimeError("the warm process died (its stderr is the test session's)")
    return int(json.loads(line)[key])


def _started() -> subprocess.Popen[str]:
    global _warm
    if _warm is None or _warm.poll() is not None:
        _warm = subprocess.Popen(
            [sys.executable, __file__, *WARM],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"},
        )
        atexit.register(_stop, _warm)
    return _warm


def _stop(warm: subprocess.Popen[str]) -> None:
    if warm.stdin is not None:
        warm.stdin.close()  # the warm process ends at the end of its input
    try:
        warm.wait(timeout=10)
    except subprocess.TimeoutExpired:
        warm.kill()


# --- the warm process ---------------------------------------------------------------------------


def _serve(modules: list[str]) -> None:
    sys.path.insert(0, str(TESTS))
    import killer

    killer.install()
    for module in modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    answers = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        answers.write(json.dumps({"status": code}) + "\n")
        answers.flush()


def _child(request: dict[str, Any]) -> None:
    """Run the request's script as ``python -c`` would, then exit without returning to the loop."""
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path, mode in (
            (0, os.devnull, os.O_RDONLY),
            (1, request["stdout"], os.O_WRONLY | os.O_CREAT),
            (2, request["stderr"], os.O_WRONLY | os.O_CREAT),
        ):
            os.dup2(os.open(path, mode, 0o600), fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the descriptors above, for the script's print and input
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        sys.argv = ["-c", *request["args"]]
        exec(compile(request["script"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if not isinstance(exit_.code, int | None):
            print(exit_.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    _serve(sys.argv[1:])
