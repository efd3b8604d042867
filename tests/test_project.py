"""The project's own promises: README commands and table, examples, parallel probing."""

from __future__ import annotations

import json
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


def test_readme_rule_table_is_current():
    text = README.read_text(encoding="utf-8")
    assert with_table(text) == text, "run `python -m ckptdoctor.render.markdown` to refresh README.md"
    assert rule_table() in text


def test_readme_opens_with_the_install_and_test_commands():
    commands = [line for line in README.read_text(encoding="utf-8").splitlines() if line.startswith("python -m pip")]
    assert commands[0] == "python -m pip install . && ckptdoctor inspect --exit-zero examples/runs"
    assert commands[1] == "python -m pip install torch==2.13.0 -e '.[test]' && python -m pytest"
    assert "python -m pip install torch==2.13.0 -e '.[test]'" in (ROOT / ".ci" / "run").read_text()


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
