"""Run a framework's script in a fresh Python (TensorFlow and Keras stay out of the test process)."""

from __future__ import annotations

import os
import subprocess
import sys

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}


def run_python(script: str, *args: str) -> str:
    """The script's stdout; its stderr in the failure when it exits non-zero."""
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
