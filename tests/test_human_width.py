"""The human output fits the screen it is read on (issue 16, items 1, 2, 3 and 6): the index and
the status of every row are whole at 60, 80 and 120 columns; piped, nothing is padded; a code
span (a command to paste) is never broken across lines; each finding is shown once, under its file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from frameworks import copy_run

from ckptdoctor.model import Finding, Report
from ckptdoctor.render import human
from ckptdoctor.rules.registry import RULES

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "runs"
WIDTHS = (60, 80, 120)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def runs(hf_trained: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    copies = tmp_path_factory.mktemp("width")
    return [*sorted(EXAMPLES.iterdir()), copy_run(hf_trained, copies / "hf")]


def _rows_whole(text: str, cells: list[tuple[str, str]]) -> None:
    """Each (index, status) is one row's first cell and its last words, neither cut."""
    for index, status in cells:
        rows = [line for line in text.splitlines() if re.match(rf"\s*{re.escape(index)}\s\s", line)]
        assert rows, (index, text)
        assert any(line.rstrip().endswith(status) or f"  {status}  " in line or f"  {status}" in line for line in rows), (status, text)
    for line in text.splitlines():
        first = line.split()[0] if line.split() else ""
        assert not first.endswith("…") or line.startswith("…"), line


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_every_commands_table_keeps_index_and_status_whole(cli, runs, width):
    env = {"COLUMNS": str(width)}
    for run in runs:
        report = cli("verify", "--json", run).json
        unit_rows = [(str(c["index"]), c["status"]) for r in report["runs"] for c in r["checkpoints"][-20:]]
        for command in ("inspect", "verify"):
            out = cli(command, run, env=env).stdout
            _rows_whole(out, [(i, s.replace("complete-roles-unread", "complete")) for i, s in unit_rows])
            # only a word or a code span longer than a line is left longer, alone on its line
            assert all(len(line) <= width or len(human._WORD.findall(line)) == 1 for line in out.splitlines()), out
        disk = cli("diskcheck", run, env=env).stdout
        _rows_whole(disk, [(i, "") for i, _ in unit_rows])
        pruned = cli("prune", "--dry-run", "--keep-last", "1", run, env=env).stdout
        _rows_whole(pruned, [(i, "") for i, _ in unit_rows])
        assert re.search(r"^\s*\d+\s\s(keep|delete)\b", pruned, re.MULTILINE), pruned
        repaired = cli("repair", "--dry-run", run, env=env).stdout
        for line in repaired.splitlines()[2:]:
            assert not line.split() or not line.split()[0].endswith("…"), repaired
    rules = cli("rules", env=env).stdout
    for rule in RULES:
        assert re.search(rf"^{rule.code}\s+{re.escape(rule.name)}\s+{rule.severity.value}\b", rules, re.MULTILINE), rules


def test_notes_leave_the_status_cell_and_hf_file_names_shorten_before_anything_is_cut(cli, runs):
    hf = runs[-1]
    out = cli("inspect", hf, env={"COLUMNS": "80"}).stdout
    assert "…" not in out
    assert "files: model.safetensors, optimizer.pt, scheduler.pt, trainer_state.json" in out  # said once, in the columns' order
    assert re.search(r"^STEP\s+MODEL\s+OPTIMIZER", out, re.MULTILINE)
    narrow = cli("inspect", hf, env={"COLUMNS": "60"}).stdout
    assert "not shown at this width: TRAINER-STATE" in narrow and "…" not in narrow
    wide = cli("inspect", hf, env={"COLUMNS": "120"}).stdout
    assert "model.safetensors  optimizer.pt" in wide  # full names where they fit


def _piped(*args: str, columns: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    if columns is not None:
        env["COLUMNS"] = columns
    done = subprocess.run(
        [sys.executable, "-m", "ckptdoctor", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    return done.stdout


@pytest.mark.slow
def test_piped_output_is_not_padded():
    run = "examples/runs/burn-missing-optimizer"
    bare = _piped("inspect", run, columns=None)
    assert bare and not [line for line in bare.splitlines() if line != line.rstrip()]
    fixes = [line for line in bare.splitlines() if line.lstrip().startswith("fix:")]
    assert fixes and all(line.rstrip().endswith((".", ")")) for line in fixes), "with no width, a fix is one line"
    assert not [line for line in bare.splitlines() if line.startswith("      ")], "nothing wrapped"
    narrow = _piped("inspect", run, columns="80")
    assert not [line for line in narrow.splitlines() if line != line.rstrip()]
    assert max(len(line) for line in narrow.splitlines()) <= 80
    rules = _piped("rules", columns=None)
    assert not [line for line in rules.splitlines() if line != line.rstrip()]


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_code_spans_and_commands_are_never_broken(width, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    run = "runs/a-rather-long-experiment-name/with/some/depth/checkpoints"
    fixes = (
        f"Restore it from a copy (`aws s3 cp`, `gsutil cp`, `rsync`) into {run}, then run `ckptdoctor verify {run}`.",
        "Compare its first bytes with `head -c 64` and its hash with `sha256sum`.",
        f"`ckptdoctor repair --undo {run}` puts it back.",
    )
    findings = [Finding(r.code, r.name, r.severity, None, None, None, f"{run}: something", (*fixes, *r.fix_texts())) for r in RULES]
    out = human.render(Report("verify", (), tuple(findings)))
    spans = {span for finding in findings for fix in finding.fixes[: human.MAX_FIXES] for span in re.findall(r"`[^`]+`", fix)}
    assert spans
    lines = out.splitlines()
    for span in spans:
        assert any(span in line for line in lines), (span, width)
    pages = human.render_rules(RULES, human.RenderOptions(explain=True))
    for span in {s for r in RULES for text in (r.meaning, r.causes, *r.fix_texts()) for s in re.findall(r"`[^`]+`", text)}:
        assert span in pages, span


def test_several_files_each_finding_once_under_its_file(cli, tmp_path):
    torch.save({"w": torch.ones(4)}, tmp_path / "a.pt")
    torch.save({"w": torch.ones(400)}, tmp_path / "b.pt")
    whole = (tmp_path / "b.pt").read_bytes()
    (tmp_path / "b.pt").write_bytes(whole[: len(whole) // 2])
    torch.save({"w": torch.tensor([1.0, float("nan")])}, tmp_path / "c.pt")
    files = [tmp_path / name for name in ("a.pt", "b.pt", "c.pt")]
    report = cli("verify", "--deep", "--json", *files).json
    assert {(f["code"], Path(f["path"]).name) for f in report["findings"]} == {("CKD203", "b.pt"), ("CKD304", "c.pt")}
    out = cli("verify", "--deep", *files).stdout
    assert out.count("CKD203 truncated") == 1 and out.count("CKD304 nonfinite-values") == 1, out
    blocks = out.split("\n\n")
    assert len(blocks) >= 3
    where = {code: next(b for b in blocks if code in b) for code in ("CKD203", "CKD304")}
    assert "b.pt" in where["CKD203"].split("\n", 3)[2] and "c.pt" in where["CKD304"].split("\n", 3)[2]
    assert "CKD" not in next(b for b in blocks if " a.pt " in b or "a.pt:" in b)
    # what the findings say, torch says too
    with pytest.raises(RuntimeError):
        torch.load(tmp_path / "b.pt", weights_only=True)
    assert torch.isnan(torch.load(tmp_path / "c.pt", weights_only=True)["w"]).any()
    assert torch.equal(torch.load(tmp_path / "a.pt", weights_only=True)["w"], torch.ones(4))
