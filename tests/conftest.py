"""Shared fixtures: run builders over real files, the CLI runner, and the shared corpus."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ckptdoctor.cli import app

pytest_plugins = ["_fired_rules"]  # every finding from a check that declares its rule; every rule fired

CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"


@pytest.fixture
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is absent (a user's own clone has none; CI always has it)")
    return CORPUS.resolve()


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)

    def codes(self) -> list[str]:
        return [f["code"] for f in self.json["findings"]]


@pytest.fixture
def cli() -> Callable[..., Result]:
    runner = CliRunner()

    def invoke(*args: str | os.PathLike[str], env: dict[str, str] | None = None) -> Result:
        result = runner.invoke(app, [str(a) for a in args], env={"NO_COLOR": "1", "COLUMNS": "200", **(env or {})})
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return Result(result.exit_code, result.stdout, result.stderr)

    return invoke


@pytest.fixture
def inspect_json(cli: Callable[..., Result]) -> Callable[..., Result]:
    def run(*paths: str | os.PathLike[str], args: Sequence[str] = ()) -> Result:
        return cli("inspect", "--json", *args, *paths)

    return run
