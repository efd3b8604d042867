"""A command loads what it runs, not what the others would (issue 17, start-up): a subcommand's
module is imported and its options built only when it runs or shows its own help, ``--help``
builds none and loads no data model, and a project's ``pyproject.toml`` with no table of
ckptdoctor's is not parsed. What users see is the same (``tests/test_cli.py``, ``tests/test_wording.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.models import CommandInfo
from typer.testing import CliRunner

import ckptdoctor.cli
from ckptdoctor.cli import SUBCOMMANDS, app
from ckptdoctor.config import ConfigError, settings

ROOT = Path(__file__).resolve().parents[1]
_PROBE = """
import sys
sys.argv = ["ckptdoctor", *sys.argv[1:]]
from ckptdoctor.cli import main
try:
    main()
except SystemExit:
    pass
print(" ".join(sorted(sys.modules)))
"""


def _loaded(where: Path, *args: str) -> set[str]:
    """The modules a command imported, run in its own process in ``where``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], cwd=where, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return set(done.stdout.splitlines()[-1].split())


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The subcommands whose options typer builds, in order."""
    names: list[str] = []
    build = ckptdoctor.cli.get_command_from_info

    def counting(info: CommandInfo, **settings: Any) -> Any:
        names.append(info.callback.__name__ if info.callback else "")
        return build(info, **settings)

    monkeypatch.setattr(ckptdoctor.cli, "get_command_from_info", counting)
    return names


def test_the_help_lists_every_command_and_builds_none(built: list[str]) -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    rows = result.stdout.split("Commands:\n", 1)[1].splitlines()
    assert [row.split()[0] for row in rows if row.startswith("  ") and not row.startswith("   ")] == list(SUBCOMMANDS)
    assert built == []


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_a_command_builds_its_own_options_alone(built: list[str], name: str) -> None:
    result = CliRunner().invoke(app, [name, "--help"])
    assert result.exit_code == 0 and f"Usage: ckptdoctor {name} " in result.stdout
    assert built == [name]


def test_a_misspelt_command_is_still_matched(built: list[str]) -> None:
    result = CliRunner().invoke(app, ["inspec"])
    assert result.exit_code == 2 and "(did you mean 'inspect'?)" in result.stderr
    assert built == []


def test_the_help_loads_no_data_model(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, "--help")
    assert {f"ckptdoctor.cli.{name}" for name in SUBCOMMANDS} <= loaded, "the summaries are the commands' docstrings"
    assert not {"ckptdoctor.model", "ckptdoctor.config", "ckptdoctor.cli._progress"} & loaded


@pytest.mark.slow
def test_a_command_loads_no_other_command(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples" / "runs" / "burn-healthy", tmp_path / "run")
    loaded = _loaded(tmp_path, "inspect", "--json", "run")
    assert "ckptdoctor.cli.inspect" in loaded
    others = {f"ckptdoctor.cli.{name}" for name in SUBCOMMANDS if name != "inspect"} | {"ckptdoctor.cli._acting"}
    assert not others & loaded


def test_an_empty_folder_loads_no_layout_format_reader_or_rule(tmp_path: Path) -> None:
    """Issue 37: start-up decides small runs. A folder that holds nothing needs no layout, no
    reader of a format and no rule table, the bulk of the package; its report is the same."""
    (tmp_path / "empty").mkdir()
    loaded = _loaded(tmp_path, "inspect", "--json", "empty")
    heavy = {"ckptdoctor.layouts.registry", "ckptdoctor.readers.files", "ckptdoctor.rules.registry", "ckptdoctor.planners.retention"}
    assert not heavy & loaded
    assert not {module for module in loaded if module.startswith("ckptdoctor.layouts.") and module != "ckptdoctor.layouts.context"}


@pytest.mark.slow
def test_a_pyproject_that_names_no_ckptdoctor_is_not_parsed(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.ruff]\nline-length = 100\n')
    shutil.copytree(ROOT / "examples" / "runs" / "burn-healthy", tmp_path / "run")
    assert "tomllib" not in _loaded(tmp_path, "inspect", "run")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.ckptdoctor]\nignore = ["CKD101"]\n')
    assert "tomllib" in _loaded(tmp_path, "inspect", "run")


@pytest.mark.parametrize(
    "table",
    ["[tool.ckptdoctor]", '[tool."ckptdoctor"]', '[tool."ckpt\\u0064octor"]', "[tool.'ckptdoctor']", '[tool]\n"ckpt\\U00000064octor" = {}'],
)
def test_every_spelling_of_the_table_is_read(tmp_path: Path, table: str) -> None:
    """Only a file in which no key can be ckptdoctor's is skipped: a quoted key may escape its letters."""
    body = 'ignore = ["CKD101"]' if table.endswith("]") else ""
    (tmp_path / "pyproject.toml").write_text(f"{table}\n{body}\n")
    found = settings(environ={}, start=str(tmp_path))
    assert found.source == str(tmp_path / "pyproject.toml")
    assert found.ignore == (("CKD101",) if body else ())


def test_a_pyproject_of_another_tool_is_left_alone_even_broken(tmp_path: Path) -> None:
    """Not ckptdoctor's file to check: it names no ckptdoctor, so no setting of ours is in it."""
    (tmp_path / "pyproject.toml").write_text("[tool.black\nline-length = \n")
    assert settings(environ={}, start=str(tmp_path)).source is None
    (tmp_path / "pyproject.toml").write_text("[tool.ckptdoctor\nignore = \n")
    with pytest.raises(ConfigError, match=r"pyproject\.toml"):
        settings(environ={}, start=str(tmp_path))
