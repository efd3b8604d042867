"""A command imports only what it needs (issue 17, start-up): no library a file of another
format would need, no terminal toolkit for JSON, no array library before ``--deep`` (the
safetensors library checks a header without numpy), no TOML parser without a configuration file. Each command runs as a user runs it, in a folder with no
configuration, under ``python -X importtime``; the time budget itself belongs to
``benchmarks/bench_startup.py``, not to a timed test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ckptdoctor.readers.deep_scan import compiled_scan_block

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "runs"
HEAVY = frozenset({"rich", "numpy", "torch", "safetensors", "cbor2", "zlib_ng", "tomllib", "multiprocessing", "concurrent"})
"""Top-level packages a plain start or a torch run's header read has no use for."""


def _imported(where: Path, *args: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ckptdoctor", *args], cwd=where, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    lines = [line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    return {name.split(".")[0] for name in lines}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A torch run in a folder with no configuration file above it that ckptdoctor would read."""
    where = tmp_path_factory.mktemp("startup")
    shutil.copytree(EXAMPLES / "torch-split", where / "run")
    return where


@pytest.mark.parametrize(
    ("args", "allowed"),
    [
        (("--help",), frozenset()),
        (("inspect", "--format", "json", "run"), frozenset()),
        (("inspect", "run"), frozenset({"rich"})),
        (("verify", "--format", "json", "run"), frozenset({"safetensors"})),
    ],
    ids=["help", "inspect-json", "inspect-human", "verify-json"],
)
def test_a_command_loads_no_heavy_library_it_does_not_use(folder: Path, args: tuple[str, ...], allowed: frozenset[str]) -> None:
    loaded = _imported(folder, *args) & HEAVY
    assert loaded <= allowed, f"`ckptdoctor {' '.join(args)}` imported {sorted(loaded - allowed)}"


@pytest.mark.slow
def test_a_library_loads_when_a_file_needs_it(tmp_path: Path) -> None:
    """The lazy imports still happen where they are needed: a burn run's metadata is CBOR, and a
    configuration file is TOML (the check above would pass as well if they were never loaded)."""
    shutil.copytree(EXAMPLES / "burn-healthy", tmp_path / "burn")
    assert "cbor2" in _imported(tmp_path, "inspect", "--format", "json", "burn")
    (tmp_path / "ckptdoctor.toml").write_text('format = "json"\n')
    assert "tomllib" in _imported(tmp_path, "inspect", "burn")


@pytest.mark.slow
def test_verify_deep_loads_numpy_only_without_the_compiled_tests_and_the_json_verify_only_the_safetensors_library(folder: Path) -> None:
    """The run holds safetensors files: ``verify`` asks their library (which the check above
    allows); ``--deep`` scans their floats with the compiled extension's tests, or with numpy
    where those are not built or ``CKPTDOCTOR_NO_CEDGES=1`` turns them off."""
    assert _imported(folder, "verify", "--format", "json", "run") & HEAVY == {"safetensors"}
    deep = _imported(folder, "verify", "--deep", "--format", "json", "run") & HEAVY
    assert "safetensors" in deep and ("numpy" in deep) == (compiled_scan_block is None)


@pytest.mark.skipif(compiled_scan_block is None, reason="numpy tests the blocks: the compiled extension is not built or not chosen")
def test_verify_deep_of_a_torch_file_loads_no_array_library(folder: Path) -> None:
    assert not _imported(folder, "verify", "--deep", "--format", "json", "run/optimizer_1.pt") & HEAVY - {"zlib_ng"}
