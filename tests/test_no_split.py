"""Every line fits the screen and no word is split (issue 35, item 4): each command's output for
people, on stdout and stderr, at 60, 80, 100 and 200 columns, is its unbounded output broken at
spaces only; a path or a command (a code span) longer than a line stands whole on a line of its
own. Piped with no width, a message on stderr stays one line."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Result
from rich.console import Console
from terminal import in_terminal, screen

from ckptdoctor.cli._progress import shortened
from ckptdoctor.model import Action, Entry, Plan, PlanItem
from ckptdoctor.render import human
from ckptdoctor.render.lines import WORD

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "runs"
ROOT = Path(__file__).resolve().parents[1]
WIDTHS = (60, 80, 100, 200)
LONG = "lr-3e-4-warmup-2000-seed-1234-batch-512-a-sweep-whose-name-goes-on-and-on"
"""A run's folder longer than a line at 60 columns: its path is never broken."""
AGO = 2 * 24 * 3600
"""How old the runs' files are made: older than ``--min-age``, so that ``repair`` moves them."""


@pytest.fixture
def sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three runs of a sweep, named as given on the command line (relative to it): two with a
    truncated or partial newest checkpoint, one in a folder longer than a line."""
    monkeypatch.chdir(tmp_path)
    for example, name in (("burn-truncated", "lr-3e-4"), ("torch-split", "lr-1e-3"), ("burn-missing-optimizer", LONG)):
        shutil.copytree(EXAMPLES / example, tmp_path / "sweep" / name)
    for path in (tmp_path / "sweep").rglob("*"):
        os.utime(path, (path.stat().st_mtime - AGO,) * 2)
    return Path("sweep")


Outputs = dict[str, tuple[str, str]]
"""Each command's (stdout, stderr), by a name that says what ran."""


def _outputs(cli: Callable[..., Result], sweep: Path, columns: str | None) -> Outputs:
    """Every command's output for people on the sweep, at ``columns`` (None: no width, as piped)."""
    env = {"COLUMNS": columns}  # None: unset
    short = sweep / "lr-3e-4" / "checkpoint"
    commands: dict[str, tuple[str, ...]] = {
        "inspect": ("inspect", str(short)),
        "verify": ("verify", str(sweep / "lr-1e-3")),
        "diskcheck": ("diskcheck", str(short)),
        "prune": ("prune", "--dry-run", "--keep-last", "1", str(sweep)),
        "repair": ("repair", "--dry-run", str(sweep)),
        "repair asked": ("repair", str(sweep)),  # no terminal: an error that names --yes
        "repair done": ("repair", "--yes", str(sweep)),
        "undo": ("repair", "--undo", "--dry-run", str(sweep)),
        "rules": ("rules",),
        "rules page": ("rules", "CKD203"),
        "rules search": ("rules", "safetensors_rust.SafetensorError: Error while deserializing header: incomplete metadata"),
        "rules none": ("rules", "nothing at all matches this rather long message about a well-known quarantine"),
        "missing": ("inspect", str(sweep / LONG / "checkpoint" / "that-does-not-exist" / "model-5.bpk")),
    }
    outputs: Outputs = {}
    for name, args in commands.items():
        result = cli(*args, env=env)
        outputs[name] = (result.stdout, result.stderr)
        if name == "undo":  # what the repair moved is put back: every width sees the same runs
            cli("repair", "--undo", "--yes", str(sweep))
    return outputs


def _fits(text: str, width: int) -> list[str]:
    """The lines of ``text`` longer than ``width`` that are more than one word, path or command."""
    return [line for line in text.splitlines() if len(line) > width and len(WORD.findall(line)) > 1]


def _words(text: str) -> list[str]:
    """The words of ``text``, each number and repair's name (``20261206-101502-8f3a…``) in them as ``0`` (free space,
    times and names change between runs)."""
    return _CHANGING.sub("0", text).split()


_CHANGING = re.compile(r"\d{8}-\d{6}-[0-9a-f]+|\d[\d,.]*")


_NOTES = re.compile(r"^\s*(not shown at this width:.*|files:.*|\d+:( \S+)?)$")
"""What a table says under it only where it is too narrow (columns left out, names shortened,
runs numbered), wrapped onto indented lines of its own."""


def _table_words(text: str) -> set[str]:
    """The words of a table's output, less those its notes on the width add."""
    kept, noting = [], False
    for line in text.splitlines():
        noting = bool(_NOTES.match(line)) or (noting and line.startswith("  ") and not line.startswith("   "))
        if not noting:
            kept.append(line)
    return set(_words("\n".join(kept)))


@pytest.mark.slow
def test_every_line_fits_and_no_word_is_split(cli: Callable[..., Result], sweep: Path) -> None:
    whole = _outputs(cli, sweep, None)
    assert any(LONG in line and len(line) > 100 for line in whole["repair done"][1].splitlines())
    for width in WIDTHS:
        narrow = _outputs(cli, sweep, str(width))
        for name, (stdout, stderr) in narrow.items():
            assert not _fits(stdout, width), (name, width, _fits(stdout, width), stdout)
            # a table's cells wrap anywhere their words may: each word printed is one of the unbounded output's
            split = _table_words(stdout) - set(_words(whole[name][0]))
            assert not split, (name, width, split, stdout)
            # stderr on no terminal, whatever $COLUMNS says: each message one line, as scripts grep it
            assert _CHANGING.sub("0", stderr) == _CHANGING.sub("0", whole[name][1]), (name, width, stderr)


def _on_terminal(args: tuple[str, ...], width: int, answer: bytes | None = None) -> tuple[str, str]:
    """What a terminal ``width`` columns wide shows on stderr (stdin on it too: ``answer`` is
    typed at a prompt), and stdout, piped, as ``(screen, stdout)``."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "ckptdoctor", *args]
    _, shown, piped = in_terminal(command, env, subprocess.PIPE, answer, columns=width)
    return "\n".join(screen(shown)), piped.decode()


@pytest.mark.slow
def test_on_a_terminal_every_message_is_wrapped_to_its_width(cli: Callable[..., Result], sweep: Path) -> None:
    """Errors, notes, what a repair did (with its undo command) and the question before acting,
    on a terminal of each width: the words of the piped message, broken at spaces only."""
    said = {
        "missing": ("inspect", str(sweep / LONG / "checkpoint" / "that-does-not-exist" / "model-5.bpk")),
        "no rule": ("rules", "nothing at all matches this rather long message about a well-known quarantine"),
        "repair": ("repair", "--yes", str(sweep)),
        "undo": ("repair", "--undo", "--yes", str(sweep)),
    }
    piped = {name: cli(*args, env={"COLUMNS": None}).stderr for name, args in said.items()}
    assert "\n" not in piped["missing"].rstrip("\n"), "piped with no width: one message, one line"
    for width in WIDTHS:
        for name, args in said.items():
            shown, _ = _on_terminal(args, width)
            assert not _fits(shown, width), (name, width, _fits(shown, width), shown)
            assert _words(shown) == _words(piped[name]), (name, width, shown)
            if name == "repair":  # the undo command it prints, and the quarantine it names, whole on their lines
                run = re.escape(str(sweep / LONG / "checkpoint"))
                assert re.search(rf"^ *`ckptdoctor repair --undo --no-recurse {run}`", shown, re.MULTILINE), shown
                assert re.search(rf"^ *{run}/\.ckptdoctor/quarantine/\d{{8}}-\d{{6}}-\w+;$", shown, re.MULTILINE), shown
        # piped into a pager, the plan is fitted to the terminal the question is asked on
        asked, plan = _on_terminal(("prune", "--keep-last", "1", str(sweep)), width, answer=b"n")
        assert not _fits(asked, width) and "[y/N]: n" in asked, (width, asked)
        assert "About to delete" in plan and not _fits(plan, width), plan


@pytest.mark.parametrize("width", WIDTHS)
def test_a_plans_paths_are_never_folded(width: int) -> None:
    """What an undo puts back from its quarantine: each path whole in WHAT where it fits beside
    the reasons, else under its row; the reasons wrapped at their words."""
    run = "runs/sweep/checkpoint"
    quarantined = f"{run}/.ckptdoctor/quarantine/20261206-101502-8f3a9c1e/checkpoint-500/optimizer.pt"
    reasons = ("quarantined: incomplete and newer than the resume point (step 400)", "put back")
    items = tuple(
        PlanItem(step, Action.RESTORE, reasons, (Entry(path.rsplit("/", 1)[-1], path, path, 1536),), 1536)
        for step, path in ((500, quarantined), (600, f"{run}/model.safetensors"))
    )
    plan = Plan(run, run, run, items, 0, "undo repair 20261206-101502-8f3a9c1e")
    console = Console(width=width, file=io.StringIO(), no_color=True)
    console.print(human.plan_block(plan, "step", summary=human.repair_summary, width=width), crop=False)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert not _fits(out, width), out
    where = quarantined[len(run) + 1 :]
    assert any(line.strip() == where or f"  {where}  " in line for line in out.splitlines()), out
    assert set(_words(out)) >= set(_words("; ".join(reasons))), "every word of the reasons whole"


def test_the_status_line_keeps_the_parts_that_fit() -> None:
    """A long scan's status line drops its last parts on a narrow terminal, never cuts one."""
    line = "reading: 312 of 4,000 files · 1.2 GiB of 9.8 GiB · about 2 min left"
    assert shortened(line, 200) == line
    assert shortened(line, 60) == "reading: 312 of 4,000 files · 1.2 GiB of 9.8 GiB"
    assert shortened(line, 30) == "reading: 312 of 4,000 files"
    assert shortened(line, 10) == "reading: 312 of 4,000 files", "the first part whole: the terminal cuts it, no word of ours"
