"""The project's own promises: the README and docs/ (commands, example output, screens, rule
table, links), the examples, parallel probing."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ckptdoctor import parallel
from ckptdoctor.discover import discover
from ckptdoctor.readers.files import probe
from ckptdoctor.readers.named import NO_NAMES
from ckptdoctor.render.markdown import rule_table, with_table
from ckptdoctor.testing import write_burn_run

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RULES_DOC = ROOT / "docs" / "rules.md"


def test_rule_table_is_current():
    text = RULES_DOC.read_text(encoding="utf-8")
    assert with_table(text) == text, "run `python -m ckptdoctor.render.markdown` to refresh docs/rules.md"
    assert rule_table() in text


@functools.cache
def _make_screens():
    """docs/make_screens.py, the script that writes the example output (docs/ is no package)."""
    spec = importlib.util.spec_from_file_location("make_screens", ROOT / "docs" / "make_screens.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_example_output_and_screens_are_current():
    """The README's blocks, docs/commands.md's output and --help, and docs/screens/*.svg are what
    ckptdoctor prints now on the shipped examples (an SVG by the text it shows)."""
    screens = _make_screens()
    stale = [str(path.relative_to(ROOT)) for path in screens.stale(screens.expected())]
    assert not stale, f"{', '.join(stale)}: run `python docs/make_screens.py` to regenerate"


def test_every_screen_is_embedded_or_linked():
    screens = _make_screens()
    shown = README.read_text(encoding="utf-8") + (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert "![" in README.read_text(encoding="utf-8") and "(docs/screens/inspect.svg)" in README.read_text(encoding="utf-8")
    for screen in screens.SCREEN_LIST:
        assert f"<!-- screen:{screen.name}:start -->" in shown
        assert (ROOT / "docs" / "screens" / f"{screen.name}.svg").is_file()


def test_screen_text_is_read_back_from_the_svg():
    """The check compares what an SVG shows, so it must read back exactly what was drawn."""
    screens = _make_screens()
    lines = ["\x1b[1mEPOCH\x1b[0m  \x1b[32m✓ complete\x1b[0m  <a & b>", "  indented, then    spaced", "x" * 85]
    assert screens.svg_text(screens.svg("t", [("$ ckptdoctor t", lines)])) == "\n".join(
        ["$ ckptdoctor t", "EPOCH  ✓ complete  <a & b>", "  indented, then    spaced", "x" * 80, "x" * 5]
    )


def test_transient_lines_are_gone_from_a_screen():
    """A progress line rich draws and erases on stderr is not in the screenshot."""
    screens = _make_screens()
    drawn = "\x1b[?25lreading 3/9\r\x1b[2Kreading 9/9\r\x1b[2K\x1b[?25hrun  burn\r\nResume from epoch 4\r\n"
    assert screens.settle(drawn) == ["run  burn", "Resume from epoch 4"]
    with pytest.raises(ValueError, match="does not draw"):
        screens.settle("\x1b[5;1Hmoved")


def test_readme_is_a_guide_with_the_resume_recipe_on_its_first_screen():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 260, f"the README is a guide of about 250 lines ({len(lines)}): move reference to docs/"
    first_screen = "\n".join(lines[:25])
    # the script pattern reads the resume point's files whole before a job loads them (issue 31)
    assert "$(ckptdoctor verify --resume " in first_screen and "$(ckptdoctor verify --resume-path " in first_screen


def _anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown`` (outside code blocks)."""
    outside = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)
    headings = re.findall(r"^#+ (.+)$", outside, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_links_in_readme_and_docs_lead_somewhere():
    for document in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", document.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            where = (document.parent / path).resolve() if path else document
            assert where.exists(), f"{document.relative_to(ROOT)} links to {target}, which does not exist"
            if anchor:
                assert anchor in _anchors(where.read_text(encoding="utf-8")), (
                    f"{document.relative_to(ROOT)} links to {target}: no such heading"
                )


def test_docs_name_nothing_the_repository_lacks():
    """Issue 35, item 7: ``rev: v0.1.0`` named a tag that does not exist (pre-commit failed), "DESIGN
    §3.3" a file the repository does not ship, and the README and docs/commands.md each sent the
    reader to the other for the GitHub workflow."""
    tags = subprocess.run(["git", "tag", "--list"], capture_output=True, text=True, cwd=ROOT).stdout.split()
    shown = [README, ROOT / ".pre-commit-hooks.yaml", *sorted((ROOT / "docs").glob("*.md"))]
    for document in shown:
        text = document.read_text(encoding="utf-8")
        for tag in re.findall(r"(?:rev: |\.git@)(v\d[\w.]*)", text):
            assert tag in tags, f"{document.relative_to(ROOT)} names the tag {tag}, which does not exist"
        assert (ROOT / "DESIGN.md").exists() or "DESIGN" not in text, f"{document.relative_to(ROOT)} names DESIGN, not in the repository"
    commands = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert "README.md#in-ci" not in commands and "### A GitHub workflow" in commands, "the workflow lives in docs/commands.md"


def test_examples_say_what_the_readme_says(inspect_json):
    """The bundled runs show the seed scenario, a cut save, and a healthy run."""
    report = inspect_json(ROOT / "examples" / "runs").json
    by_name = {Path(run["path"]).parts[-2] if run["layout"] == "burn" else Path(run["path"]).name: run for run in report["runs"]}
    assert by_name["burn-healthy"]["resume"]["index"] == 5
    assert by_name["burn-missing-optimizer"]["resume"]["index"] == 4
    assert by_name["burn-truncated"]["resume"]["index"] == 4
    assert by_name["torch-split"]["resume"]["index"] == 2
    codes = {(Path(f["path"]).name, f["code"]) for f in report["findings"]}
    assert codes == {("model-5.bpk", "CKD101"), ("optim-5.bpk", "CKD203"), ("optimizer_3.pt", "CKD203")}


def test_parallel_probing_gives_the_serial_reports(tmp_path, monkeypatch):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, range(1, 40))
    (folder / "optim-7.bpk").write_bytes((folder / "optim-7.bpk").read_bytes()[:100])
    (folder / "model-9.bpk").write_bytes(b"")
    entries = [e for e in discover(str(folder)).listings[0].entries]
    serial = [probe(e, NO_NAMES) for e in entries]
    monkeypatch.setattr(parallel, "PARALLEL_MIN", 1)
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    chunks = parallel.map_chunks(lambda start, stop: [probe(e, NO_NAMES) for e in entries[start:stop]], len(entries), chunk=16)
    assert len(chunks) == -(-len(entries) // 16)
    together = [report for chunk in chunks for report in chunk]
    assert together == serial
    assert sum(1 for r in together if r.issues) == 2


def test_a_big_run_is_probed_in_parallel_end_to_end(tmp_path, monkeypatch, inspect_json):
    write_burn_run(tmp_path / "checkpoint", range(1, 30))
    (tmp_path / "checkpoint" / "scheduler-29.bpk").unlink()
    monkeypatch.setattr(parallel, "PARALLEL_MIN", 1)
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    report = inspect_json(tmp_path).json
    assert report["runs"][0]["resume"]["index"] == 28
    assert [f["code"] for f in report["findings"]] == ["CKD103"]


@pytest.mark.skipif(shutil.which("ckptdoctor") is None, reason="the console script is not installed")
def test_console_script_runs_the_example():
    done = subprocess.run(
        ["ckptdoctor", "inspect", "--json", str(ROOT / "examples" / "runs" / "burn-healthy")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["runs"][0]["layout"] == "burn"


def test_python_dash_m_runs_rules():
    done = subprocess.run([sys.executable, "-m", "ckptdoctor", "rules", "CKD101"], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert "missing-optimizer" in done.stdout


def test_one_optimizer_state_table_serves_the_size_rule_and_diskcheck():
    """Issue 15's drift: RMSprop was 2.0 in the size rule and 1.0 in diskcheck's estimate."""
    from ckptdoctor import optimizers
    from ckptdoctor.planners import space as disk

    assert disk.OPTIMIZER_STATE["rmsprop"] == optimizers.state_size("rmsprop").typical == 1.0
    assert {kind: size.typical for kind, size in optimizers.STATE.items()} == dict(disk.OPTIMIZER_STATE)
    assert all(size.typical <= size.at_most for size in optimizers.STATE.values())
