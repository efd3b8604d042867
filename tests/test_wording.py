"""What a user reads first: ``--help`` summaries that are whole sentences, examples that are whole
commands, each thing said once, and counts in the right number."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer

from ckptdoctor.cli import SUBCOMMANDS, app
from ckptdoctor.rules.registry import RULES
from ckptdoctor.testing import write_burn_run


def _help(*args: str, columns: int) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"}
    result = subprocess.run([sys.executable, "-m", "ckptdoctor", *args, "--help"], capture_output=True, text=True, env=env, check=True)
    return result.stdout


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_command_summaries_are_whole_sentences_at_any_width(columns: int) -> None:
    listed = _help(columns=columns).split("Commands:\n", 1)[1]
    # a summary may wrap onto lines of its own, indented under it: join them back
    summaries = dict(re.findall(r"^  (\w+) +(.+(?:\n {4,}.+)*)", listed, re.MULTILINE))
    assert sorted(summaries) == sorted(SUBCOMMANDS)
    for name, summary in summaries.items():
        sentence = " ".join(summary.split())
        assert "..." not in sentence and sentence.endswith("."), f"{name}: {sentence!r} is cut"
        assert len(sentence) <= 63, f"{name}: a summary is one short sentence (it fits beside the name at 80 columns)"


COMMANDS = ("inspect", "verify", "prune", "repair", "diskcheck", "rules")


def _ckptdoctor_words(example: str) -> list[str]:
    """The ckptdoctor command in an example line: inside ``$(...)``, after a cron schedule, before
    a redirection or a pipe."""
    inner = re.search(r"\$\((ckptdoctor [^)]*)\)", example)
    words = shlex.split(inner.group(1) if inner else example)
    assert "ckptdoctor" in words, f"{example!r} runs no ckptdoctor command"
    words = words[words.index("ckptdoctor") :]
    ends = [at for at, word in enumerate(words) if word in {">", ">>", "|", "&&", ";"}]
    return words[: ends[0]] if ends else words


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("columns", [60, 80])
def test_help_examples_are_whole_commands_that_parse(command: str, columns: int) -> None:
    """Each line under "Examples:" is a whole command, even on a narrow terminal (never wrapped
    onto a second line), and the command line parser takes it: the command exists, every option
    is one of its own and every value is valid."""
    text = _help(command, columns=columns)
    examples = [line.strip() for line in text.split("Examples:", 1)[1].split("Arguments:", 1)[0].splitlines() if line.strip()]
    assert examples, f"{command} --help shows examples"
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    for example in examples:
        words = _ckptdoctor_words(example)
        assert words[1] == command, f"{example!r} is not an example of {command}"
        context = group.commands[command].make_context(command, words[2:])  # parses, runs nothing
        assert not context.args, f"{example!r}: {context.args} left over"


_DECIMAL_UNIT = re.compile(r"(?<![A-Za-z])[kKMGT]B(?![A-Za-z])")


@pytest.mark.slow
def test_sizes_are_binary_in_every_command_output(tmp_path: Path, cli) -> None:
    """One unit system: KiB, MiB, GiB (as ``du -h`` and disk quotas count), never kB, MB, GB,
    in what any command prints for people, its help included (JSON keeps bytes)."""
    shutil.copytree(Path(__file__).resolve().parents[1] / "examples" / "runs", tmp_path / "runs")
    runs = tmp_path / "runs"
    when = time.time() - 86400  # older than --min-age: prune and repair plan to act
    for path in runs.rglob("*"):
        os.utime(path, (when, when))
    rules = [rule.code for rule in RULES]
    said = [
        cli("inspect", runs),
        cli("verify", "--deep", runs),
        cli("prune", "--keep-last", "1", "--dry-run", runs),
        cli("repair", "--dry-run", runs),
        cli("diskcheck", runs / "burn-healthy", "--keep-last", "3"),
        cli("diskcheck", tmp_path / "new", "--model-bytes", "800MB", "--optimizer", "adamw"),
        cli("rules"),
        *(cli("rules", code) for code in rules),
        *(cli(command, "--help") for command in COMMANDS),
    ]
    for result in said:
        for stream in (result.stdout, result.stderr):
            assert not _DECIMAL_UNIT.search(stream), _DECIMAL_UNIT.findall(stream)
    assert "KiB" in said[0].stdout and "GiB" in said[4].stdout  # sizes were printed at all


def _aged_burn_run(tmp_path: Path, epochs: range) -> Path:
    folder = tmp_path / "run" / "checkpoint"
    write_burn_run(folder, epochs)
    when = time.time() - 86400  # older than --min-age
    for path in folder.rglob("*"):
        os.utime(path, (when, when))
    return folder


def test_nothing_to_delete_is_said_once(tmp_path: Path, cli) -> None:
    folder = _aged_burn_run(tmp_path, range(1, 3))
    result = cli("prune", "--keep-last", "5", folder)
    assert result.exit_code == 0, result.stderr
    assert (result.stdout + result.stderr).count("Nothing to delete") == 1
    to_file = cli("prune", "--keep-last", "5", "-o", tmp_path / "plan.txt", folder)
    assert "Nothing to delete" in to_file.stderr, "with the plan in a file, the terminal is told"


def test_one_is_singular_in_the_policy(tmp_path: Path, cli) -> None:
    folder = _aged_burn_run(tmp_path, range(1, 4))
    result = cli("prune", "--keep-last", "1", "--keep", "2", "--dry-run", folder)
    assert "keep the last complete epoch; epoch 2" in result.stdout, result.stdout
    assert "1 complete epochs" not in result.stdout and "epochs 2" not in result.stdout
    several = cli("prune", "--keep-last", "2", "--keep", "1", "--keep", "2", "--dry-run", folder)
    assert "keep the last 2 complete epochs; epochs 1, 2" in several.stdout, several.stdout


def test_a_run_of_one_checkpoint_is_one_checkpoint_in_every_header(tmp_path, cli) -> None:
    from ckptdoctor.testing import write_burn_run

    run = tmp_path / "run"
    write_burn_run(run, [3])
    for command in ("inspect", "diskcheck"):
        shown = cli(command, run).stdout
        assert "burn · 1 checkpoint (epoch 3) · " in shown, (command, shown)
        assert "1 epochs" not in shown and "1 checkpoints" not in shown, (command, shown)
