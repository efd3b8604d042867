"""Several runs end with one summary table (issue 16, item 11): each run (below the folder they
share), its layout, its checkpoints, how many have each status, where it resumes, and what a
prune deletes and frees or a repair quarantines and re-points; fitted to 60, 80 and 120 columns
as every table is (the run and the status whole, columns dropped before they are crushed). A
prune over several runs says its grand total, then asks its one question.

The runs are real: an HF Trainer's, a Lightning fit's, and the burn and plain-torch examples."""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from frameworks import copy_run
from terminal import PROMPT, in_terminal, screen

from ckptdoctor.testing import write_burn_run
from ckptdoctor.units import size

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "runs"
WIDTHS = (60, 80, 120)
STATUSES = ("complete", "incomplete", "partial", "corrupt")
COMMANDS = (("inspect",), ("verify",), ("prune", "--dry-run", "--keep-last", "1"), ("repair", "--dry-run"))


def _age(folder: Path) -> None:
    """Older than --min-age, so that prune and repair act on everything their policy says."""
    when = time.time() - 86400
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (when, when), follow_symlinks=False)


@pytest.fixture(scope="module")
def parent(hf_trained: Path, lightning_saved: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of four runs of four layouts, each with something to prune and two to repair."""
    folder = tmp_path_factory.mktemp("summary") / "runs"
    copy_run(hf_trained, folder / "hf")
    copy_run(lightning_saved["copy"], folder / "lightning")
    shutil.copytree(EXAMPLES / "burn-missing-optimizer", folder / "burn")
    shutil.copytree(EXAMPLES / "torch-split", folder / "torch")
    _age(folder)
    return folder


def _status_counts(run: dict[str, Any]) -> str:
    counts = Counter(c["status"].replace("complete-roles-unread", "complete") for c in run["checkpoints"])
    return ", ".join(f"{counts[status]} {status}" for status in STATUSES if counts[status])


def _unspaced(text: str) -> str:
    return "".join(text.split())


def _summary(out: str, parent: Path, runs: int) -> tuple[list[str], list[str]]:
    """The summary's header line and every line under it."""
    lines = out.splitlines()
    title, start = f"{runs} runs in {parent}", next(i for i, line in enumerate(lines) if line.startswith(f"{runs} runs in"))
    end = start + 1  # a title wider than the terminal goes on over more lines, cut at a space or a path's separator
    while _unspaced("".join(lines[start:end])) != _unspaced(title):
        end += 1
        assert end <= len(lines), (title, out)
    return lines[end].split(), lines[end + 1 :]


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_the_summary_fits_60_80_and_120_columns_with_each_run_and_its_status_whole(cli, parent: Path, width: int) -> None:
    for command in COMMANDS:
        report = cli(*command, "--json", parent).json
        runs = report["runs"]
        assert len({run["layout"] for run in runs}) == 4, runs
        out = cli(*command, parent, env={"COLUMNS": str(width)}).stdout
        headers, rows = _summary(out, parent, 4)
        assert all(len(line) <= width for line in [*headers, *rows]), (width, out)
        for run in runs:
            below = os.path.relpath(run["path"], parent)
            row = next(line for line in rows if line.startswith(below + "  "))
            assert f"  {_status_counts(run)}" in row, (row, run["path"])
            if "RESUME" in headers:
                assert f"  {run['unit']} {run['resume']['index']}" in row, row
            if "LAYOUT" in headers:
                assert f"  {run['layout']}  " in row, row
        acting = {"prune": ["DELETE", "FREES"], "repair": ["QUARANTINE", "RE-POINT"]}.get(command[0], [])
        expected = ["RUN", "LAYOUT", "CHECKPOINTS", "STATUS", "RESUME", *acting]
        note = [i for i, line in enumerate(rows) if line.startswith("not shown at this width: ")]
        dropped = (
            " ".join(rows[note[0] : next((i for i in range(note[0] + 1, len(rows)) if not rows[i].startswith("  ")), len(rows))])
            if note
            else ""
        )
        assert [h for h in expected if h not in headers] == [h for h in expected if re.search(rf"\b{h}\b", dropped)], (headers, dropped)
        assert headers[0] == "RUN" and "STATUS" in headers, "the run and its status are never dropped"
        assert "…" not in "\n".join(rows), out
        if width == 120:
            assert headers == expected, "everything fits at 120 columns"


def test_the_grand_total_is_the_sum_of_each_runs_plan(cli, parent: Path) -> None:
    args = ("prune", "--dry-run", "--keep-last", "1", parent)
    report = cli(*args, "--json").json
    doomed = [item for item in report["plan"] if item["action"] == "delete"]
    runs = {item["run"] for item in doomed}
    assert len(doomed) > len(runs) > 1, "several runs, several checkpoints: the total is a sum"
    out = cli(*args, env={"COLUMNS": "120"}).stdout
    total = f"About to delete {len(doomed)} checkpoints from {len(runs)} runs, totalling {size(report['freed_bytes'])}."
    assert out.rstrip().splitlines()[-1] == total, out
    per_plan = [int(n) for n in re.findall(r"^About to delete (\d+) checkpoints? \(", out, re.MULTILINE)]
    assert sum(per_plan) == len(doomed) and len(per_plan) == len(runs)
    headers, rows = _summary(out, parent, 4)
    assert headers[-2:] == ["DELETE", "FREES"]
    cells = [re.search(r"\s(\d+|—)\s+(?:[\d.]+ \w+|—)$", line).group(1) for line in rows[: len(report["runs"])]]  # type: ignore[union-attr]
    assert sum(int(cell) for cell in cells if cell != "—") == len(doomed)
    narrow = cli(*args, env={"COLUMNS": "60"}).stdout
    assert narrow.rstrip().endswith(f"{size(report['freed_bytes'])}."), "a size is never split from its unit"
    assert not re.search(r"\d\n\s*(?:[KMG]iB|B)\b", narrow), narrow


def test_the_repair_summary_says_what_is_quarantined_in_each_run(cli, parent: Path) -> None:
    report = cli("repair", "--dry-run", "--json", parent).json
    out = cli("repair", "--dry-run", parent, env={"COLUMNS": "120"}).stdout
    _, rows = _summary(out, parent, 4)
    moved = [item for item in report["plan"] if item["action"] == "quarantine"]
    for run in report["runs"]:
        mine = [item for item in moved if item["run"] == run["path"]]
        row = next(line for line in rows if line.startswith(os.path.relpath(run["path"], parent) + "  "))
        cell = f"{sum(len(item['paths']) for item in mine)} ({size(sum(item['bytes'] for item in mine))})" if mine else "—"
        assert re.search(rf"  {re.escape(cell)}\s+—$", row), (row, cell)
    entries = sum(len(item["paths"]) for item in moved)
    bytes_moved = size(sum(item["bytes"] for item in moved))
    runs = len({item["run"] for item in moved})
    assert out.rstrip().splitlines()[-1] == f"About to quarantine {entries} entries totalling {bytes_moved} in {runs} runs."


def _two_burn_runs(folder: Path) -> Path:
    write_burn_run(folder / "a", range(1, 3))
    write_burn_run(folder / "a", [3], roles=("model",))  # epoch 3: a model alone, which repair moves aside
    write_burn_run(folder / "b", [1])
    _age(folder)
    return folder


def test_singular_wording_and_one_run_has_no_summary(cli, tmp_path: Path) -> None:
    parent = _two_burn_runs(tmp_path / "runs")
    out = cli("prune", "--dry-run", "--keep-last", "1", parent, env={"COLUMNS": "120"}).stdout
    headers, rows = _summary(out, parent, 2)
    assert headers == ["RUN", "LAYOUT", "CHECKPOINTS", "STATUS", "RESUME", "DELETE", "FREES"]
    assert re.match(r"b\s+burn\s+1\s+1 complete\s+epoch 1\s+—\s+—$", rows[1]), rows
    freed = sum((parent / "a" / f"{role}-1.bpk").stat().st_size for role in ("model", "optim", "scheduler"))
    assert rows[2] == f"About to delete 1 checkpoint from 1 run, totalling {size(freed)}.", rows
    repaired = cli("repair", "--dry-run", parent, env={"COLUMNS": "120"}).stdout
    model = size((parent / "a" / "model-3.bpk").stat().st_size)
    assert repaired.rstrip().splitlines()[-1] == f"About to quarantine 1 entry totalling {model} in 1 run."
    for command in COMMANDS:
        alone = cli(*command, parent / "a", env={"COLUMNS": "120"}).stdout
        assert not re.search(r"^\d+ runs", alone, re.MULTILINE), alone


@pytest.mark.slow
def test_prune_over_several_runs_says_its_grand_total_then_asks_once(cli, parent: Path, tmp_path: Path) -> None:
    runs = copy_run(parent, tmp_path / "runs")
    before = cli("prune", "--dry-run", "--keep-last", "1", "--json", runs).json
    doomed = [item for item in before["plan"] if item["action"] == "delete"]
    total = f"About to delete {len(doomed)} checkpoints from {len({item['run'] for item in doomed})} runs"
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120", "TERM": "xterm"}
    command = [sys.executable, "-m", "ckptdoctor", "prune", "--keep-last", "1", str(runs)]
    code, shown, _ = in_terminal(command, env, answer=b"n")
    assert code == 1 and shown.count(PROMPT) == 1, shown
    seen = "\n".join(screen(shown))
    assert total in seen and seen.index(total) < seen.index(PROMPT.decode()), "the total, then the one question"
    assert cli("prune", "--dry-run", "--keep-last", "1", "--json", runs).json["plan"] == before["plan"], "a no changes nothing"
    code, shown, _ = in_terminal(command, env, answer=b"y")
    assert code == 0 and shown.count(PROMPT) == 1, shown
    for item in doomed:
        assert not any(os.path.lexists(path) for path in item["paths"]), item
    # the framework resumes from what ckptdoctor kept: HF's own search finds the resume point
    from transformers.trainer_utils import get_last_checkpoint

    hf = next(run for run in before["runs"] if run["layout"] == "hf-trainer")
    assert get_last_checkpoint(hf["path"]) == os.path.dirname(hf["resume"]["paths"][0])
    after = cli("inspect", "--json", runs).json
    assert [run["resume"]["index"] for run in after["runs"]] == [run["resume"]["index"] for run in before["runs"]]


def test_several_loose_files_have_no_summary(cli, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    for name in ("a.pt", "b.pt"):
        torch.save({"w": torch.ones(2)}, tmp_path / name)
    out = cli("verify", tmp_path / "a.pt", tmp_path / "b.pt", env={"COLUMNS": "120"}).stdout
    assert not re.search(r"^\d+ runs", out, re.MULTILINE), out
