"""The renderer registry and the shared report options: every format is declared once, in
``ckptdoctor.render.RENDERERS``, and what each command's ``--format`` offers and what ``format =``
in the configuration accepts are read from it; the report commands share one set of options."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest
import typer

from ckptdoctor import render
from ckptdoctor.cli import app
from ckptdoctor.cli._output import report_options
from ckptdoctor.config import ConfigError, settings
from ckptdoctor.model import Report
from ckptdoctor.render import RENDERERS, Kind, Renderer, formats

RUN = Path(__file__).resolve().parents[1] / "examples" / "runs" / "burn-missing-optimizer"
REPORT_COMMANDS = ("inspect", "verify", "diskcheck")


def _options(command: str) -> dict[str, typer.core.TyperOption]:
    """The options of a subcommand, by each of their names (``--format``, ``-f``)."""
    group = typer.main.get_command(app)
    return {name: param for param in group.commands[command].params for name in param.opts}  # type: ignore[attr-defined]


def _configured(tmp_path: Path, fmt: str) -> str | None:
    path = tmp_path / "ckptdoctor.toml"
    path.write_text(f'format = "{fmt}"\n')
    return settings(str(path), environ={}).format


def test_each_renderer_module_gives_what_its_declaration_says():
    empty = Report("inspect", (), ())
    for renderer in RENDERERS:
        module = importlib.import_module(f"ckptdoctor.render.{renderer.name}")
        assert renderer.module() is module
        text = module.render(empty)
        if renderer.name == "json":  # made a part at a time, in UTF-8: a big run's document is written as it is made
            text = b"".join(text).decode()
        assert isinstance(text, str), renderer.name
        assert hasattr(module, "render_rules") == (Kind.RULES in renderer.kinds), renderer.name
        assert hasattr(module, "summary") == renderer.job_summary, renderer.name


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda r: r.name)
def test_every_renderer_is_accepted_by_format_and_by_the_config(renderer, cli, tmp_path):
    assert Kind.REPORT in renderer.kinds
    assert _configured(tmp_path, renderer.name) == renderer.name
    result = cli("inspect", "--format", renderer.name.upper(), "--exit-zero", RUN)
    assert result.exit_code == 0 and "CKD101" in result.stdout, result.stderr


def test_format_offers_what_the_registry_declares():
    for command in (*REPORT_COMMANDS, "prune", "repair"):
        assert _options(command)["--format"].metavar == f"<{'|'.join(formats(Kind.REPORT))}>", command
    assert _options("rules")["--format"].metavar == f"<{'|'.join(formats(Kind.RULES))}>"


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda r: r.name)
def test_rules_format_takes_exactly_what_renders_rules(renderer, cli):
    result = cli("rules", "--format", renderer.name, "CKD101")
    if Kind.RULES in renderer.kinds:
        assert result.exit_code == 0 and "CKD101" in result.stdout, result.stderr
    else:
        assert result.exit_code == 2
        assert f"must be one of {'human, json or sarif'}, not {renderer.name!r}" in result.stderr


def test_an_unregistered_format_is_refused_alike_on_the_command_line_and_in_the_config(cli, tmp_path):
    expected = "format: must be one of human, json, sarif, junit or github, not 'xml'"
    with pytest.raises(ConfigError, match=expected):
        _configured(tmp_path, "xml")
    refused = cli("inspect", "--format", "xml", RUN)
    assert refused.exit_code == 2 and expected.removeprefix("format: ") in refused.stderr
    from_environment = cli("inspect", RUN, env={"CKPTDOCTOR_FORMAT": "xml"})
    assert from_environment.exit_code == 2 and expected in from_environment.stderr


def test_a_format_registered_once_is_accepted_everywhere(cli, tmp_path, monkeypatch):
    """What adding an output format takes: its module and one line in RENDERERS."""
    module = types.ModuleType("ckptdoctor.render.tally")
    module.render = lambda report, options=render.PLAIN: f"{len(report.findings)} findings\n"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(render, "RENDERERS", (*RENDERERS, Renderer("tally", frozenset({Kind.REPORT}))))
    assert cli("inspect", "--format", "tally", RUN).stdout == "1 findings\n"
    assert _configured(tmp_path, "tally") == "tally"
    (tmp_path / "ckptdoctor.toml").write_text('format = "tally"\n')
    assert cli("inspect", "--config", tmp_path / "ckptdoctor.toml", RUN).stdout == "1 findings\n"
    assert cli("rules", "--format", "tally").exit_code == 2, "it renders no rules"


def test_every_report_command_takes_the_shared_report_options():
    probe = typer.Typer(add_completion=False)
    probe.command()(report_options)
    # `paths` is the command's own argument, which `sharing` hands the builder (where its settings are looked for)
    shared = {param.name: set(param.opts) for param in typer.main.get_command(probe).params if param.name != "paths"}
    assert {
        "fmt",
        "as_json",
        "output",
        "fail_on",
        "exit_zero",
        "quiet",
        "color",
        "show_all",
        "verbose",
        "baseline",
        "write_baseline",
        "config",
        "select",
        "ignore",
        "endpoint",
    } == set(shared)
    for command in REPORT_COMMANDS:
        options = _options(command)
        for name, opts in shared.items():
            assert opts <= set(options), (command, name)
            assert {options[opt].name for opt in opts} == {name}, (command, name)


def test_the_acting_commands_take_the_shared_acting_options():
    from ckptdoctor.cli._acting import acting_options

    probe = typer.Typer(add_completion=False)
    probe.command()(acting_options)
    # `paths` is the command's own argument, which `sharing` hands the builder (where its settings are looked for)
    shared = {param.name: set(param.opts) for param in typer.main.get_command(probe).params if param.name != "paths"}
    assert {
        "min_age",
        "dry_run",
        "yes",
        "fmt",
        "as_json",
        "output",
        "quiet",
        "color",
        "show_all",
        "config",
        "no_recurse",
        "no_lock",
        "endpoint",
    } == set(shared)
    for command in ("prune", "repair"):
        options = _options(command)
        assert {
            "--format",
            "-f",
            "--json",
            "--output",
            "-o",
            "--quiet",
            "-q",
            "--all",
            "--config",
            "--dry-run",
            "--yes",
            "--min-age",
            "--no-recurse",
        } <= set(options), command
        for name, opts in shared.items():
            assert {options[opt].name for opt in opts} == {name}, (command, name)
