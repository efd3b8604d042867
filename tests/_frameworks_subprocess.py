"""Run a framework's script in a fresh Python (TensorFlow and Keras stay out of the test process)."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}


def run_python(script: str, *args: str) -> str:
    """The script's stdout; its stderr in the failure when it exits non-zero."""
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def run_function(module: str, function: str, *args: str) -> str:
    """``module.function(*args)`` (a module of tests/, its arguments strings) in a fresh Python."""
    tests = str(Path(__file__).resolve().parent)
    return run_python(f"import sys\nsys.path.insert(0, {tests!r})\nimport {module}\n{module}.{function}(*sys.argv[1:])", *args)


class Refused(Exception):
    """The framework failed where a :class:`Worker`'s function asked it to load or restore."""


_SERVE = r"""
import importlib, json, os, sys, traceback
replies = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # what the framework prints goes to the log, not among the replies
sys.path.insert(0, sys.argv[1])
from _frameworks_subprocess import Refused
module = importlib.import_module(sys.argv[2])
for line in sys.stdin:
    function, args = json.loads(line)
    try:
        reply = {"result": getattr(module, function)(*args)}
    except Refused as refused:
        reply = {"refused": str(refused)}
    except Exception:
        reply = {"crashed": traceback.format_exc()}
    replies.write(json.dumps(reply) + "\n")
    replies.flush()
"""


class Worker:
    """One long-lived Python that imports ``module`` (of tests/) once and calls its functions for
    the test process: a framework that takes seconds to import is imported once a session, and
    stays out of the test process. Started at the first call, and again after a crash."""

    def __init__(self, module: str, refused: type[Exception] = Refused) -> None:
        self.module = module
        self.refused = refused
        """What a call raises where the function raised :class:`Refused` (the framework failed)."""
        self._process: subprocess.Popen[str] | None = None
        self._log = Path(tempfile.mkdtemp(prefix=f"worker-{module}-")) / "stderr"

    def __call__(self, function: str, *args: str) -> Any:
        """``module.function(*args)``'s (JSON) result; :attr:`refused` where it raised
        :class:`Refused`, or where the process died (the framework crashed on what it was given)."""
        process = self._started()
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps([function, list(args)]) + "\n")
        process.stdin.flush()
        line = process.stdout.readline()
        if not line:
            self._process = None
            raise self.refused(f"the {self.module} process died (exit {process.wait()}): {self._tail()}")
        reply = json.loads(line)
        if "refused" in reply:
            raise self.refused(reply["refused"])
        if "crashed" in reply:
            raise RuntimeError(f"{self.module}.{function}{args}:\n{reply['crashed']}")
        return reply["result"]

    def _started(self) -> subprocess.Popen[str]:
        if self._process is None:
            tests = str(Path(__file__).resolve().parent)
            with self._log.open("a") as log:
                self._process = subprocess.Popen(
                    [sys.executable, "-c", _SERVE, tests, self.module],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    env={**ENV, "PYTHONWARNINGS": "ignore"},
                )
            atexit.register(self._stop, self._process)
        return self._process

    @staticmethod
    def _stop(process: subprocess.Popen[str]) -> None:
        if process.poll() is None:
            assert process.stdin is not None
            process.stdin.close()
            process.wait(timeout=60)

    def _tail(self) -> str:
        return self._log.read_text(errors="replace")[-2000:] if self._log.exists() else ""
