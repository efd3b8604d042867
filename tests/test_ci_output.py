"""CI-native output and configuration: SARIF, JUnit and GitHub renderers (golden files, parsed
back), configuration discovery and precedence, --select / --ignore / severity overrides, and
baselines.

Golden files live in tests/golden/; ``CKPTDOCTOR_UPDATE_GOLDEN=1 python -m pytest
tests/test_ci_output.py`` rewrites them after an intended change.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from ckptdoctor import processes, volumes
from ckptdoctor.model import Volume
from ckptdoctor.rules.registry import RULES

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
RUNS = ["examples/runs/burn-missing-optimizer", "examples/runs/burn-truncated", "examples/runs/burn-healthy"]


DATED = 1_767_225_600
"""2026-01-01: the examples' files' time in the copy the reports are made of (a checkout dates them now)."""
SAME_VOLUME = Volume("/", "/", "ext4", 500 * 2**30, 64 * 2**30, 30_000_000)
"""The disk every report is made on: a save's cause names its free space (CKD117)."""


@pytest.fixture
def at_root(monkeypatch, tmp_path):
    """Run from a copy of the project's examples, dated, on one disk, with no process hidden:
    the reports' paths, words and times are the same everywhere."""
    work = tmp_path / "work"  # below the test's own folder, which is then outside the working directory
    for run in RUNS:
        shutil.copytree(ROOT / run, work / run, symlinks=True)
    for path in work.rglob("*"):
        os.utime(path, (DATED, DATED), follow_symlinks=False)
    monkeypatch.setattr(volumes, "volume", lambda path: SAME_VOLUME)
    real = processes.open_by
    monkeypatch.setattr(processes, "open_by", lambda *args, **kwargs: (real(*args, **kwargs)[0], None))
    monkeypatch.chdir(work)
    for variable in (
        "CKPTDOCTOR_FORMAT",
        "CKPTDOCTOR_FAIL_ON",
        "CKPTDOCTOR_SELECT",
        "CKPTDOCTOR_IGNORE",
        "CKPTDOCTOR_CONFIG",
        "GITHUB_STEP_SUMMARY",
    ):
        monkeypatch.delenv(variable, raising=False)


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("CKPTDOCTOR_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} changed (CKPTDOCTOR_UPDATE_GOLDEN=1 rewrites it)"


@pytest.mark.parametrize(("fmt", "name"), [("sarif", "inspect.sarif"), ("junit", "inspect.junit.xml"), ("github", "inspect.github.txt")])
def test_golden_output_for_every_format(at_root, cli, fmt, name):
    result = cli("inspect", "--format", fmt, *RUNS)
    assert result.exit_code == 1
    golden(name, result.stdout)


def test_sarif_parses_back_with_rules_locations_and_stable_fingerprints(at_root, cli):
    body = json.loads(cli("inspect", "--format", "sarif", *RUNS).stdout)
    assert body["version"] == "2.1.0" and body["$schema"].endswith("sarif-2.1.0.json")
    (run,) = body["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == [rule.code for rule in RULES]
    assert all(rule["help"]["markdown"].startswith(f"**{rule['id']} ") for rule in rules)
    results = run["results"]
    report = cli("inspect", "--json", *RUNS).json
    assert [(r["ruleId"], r["level"]) for r in results] == [
        (f["code"], {"error": "error", "warning": "warning", "info": "note"}[f["severity"]]) for f in report["findings"]
    ]
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert uri.startswith("examples/runs/") and not uri.startswith("/")
    again = json.loads(cli("inspect", "--format", "sarif", *RUNS).stdout)["runs"][0]["results"]
    assert [r["partialFingerprints"] for r in again] == [r["partialFingerprints"] for r in results]
    assert len({r["partialFingerprints"]["ckptdoctor/v1"] for r in results}) == len(results)


def test_junit_parses_back_a_suite_per_run_a_case_per_checkpoint_a_failure_per_finding(at_root, cli):
    root = ET.fromstring(cli("inspect", "--format", "junit", *RUNS).stdout)
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    assert set(suites) == {f"{run}/checkpoint" for run in RUNS}
    healthy = suites["examples/runs/burn-healthy/checkpoint"]
    assert [case.get("name") for case in healthy.iter("testcase")] == ["run", "epoch 3", "epoch 4", "epoch 5"]
    assert healthy.get("failures") == "0" and healthy.find(".//failure") is None
    failures = [kind for f in root.iter("failure") for kind in (f.get("type") or "").split(", ")]  # a checkpoint's findings, in one
    report = cli("inspect", "--json", *RUNS).json
    assert sorted(failures) == sorted(f"{f['code']} {f['name']}" for f in report["findings"] if f["severity"] != "info")
    assert root.get("failures") == str(sum(int(s.get("failures")) for s in suites.values()))


def test_junit_has_a_passing_case_when_there_is_nothing_to_check(tmp_path, cli):
    root = ET.fromstring(cli("inspect", "--format", "junit", tmp_path).stdout)
    cases = list(root.iter("testcase"))
    assert len(cases) == 1 and cases[0].find("failure") is None


def test_github_annotations_and_the_step_summary(at_root, cli, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = cli("inspect", "--format", "github", *RUNS, env={"GITHUB_STEP_SUMMARY": str(summary)})
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith(("::error file=", "::warning file=", "::notice file=")) for line in lines)
    assert "::error file=examples/runs/burn-missing-optimizer/checkpoint/model-5.bpk,title=CKD101 missing-optimizer::" in result.stdout
    text = summary.read_text()
    assert text.startswith("earlier step\n### ckptdoctor inspect"), "appended, not overwritten"
    assert "| `examples/runs/burn-healthy/checkpoint` | burn | 3 | epoch 5 |" in text
    assert "CKD101 missing-optimizer" in text


def test_github_escapes_what_would_break_an_annotation():
    from ckptdoctor.model import Finding, Report, Severity
    from ckptdoctor.render import github

    finding = Finding("CKD211", "unreadable", Severity.ERROR, "runs/a,b", None, "runs/a,b/x:y.pt", "line one\nline two 100%")
    line = github.render(Report("inspect", (), (finding,)))
    assert line == "::error file=runs/a%2Cb/x%3Ay.pt,title=CKD211 unreadable::line one%0Aline two 100%25\n"


def test_github_annotations_escape_control_characters_of_a_file_name(tmp_path, cli):
    """A name holding ESC sequences, BEL, CR, a newline and the characters GitHub's workflow
    commands escape (``%``, ``:``, ``,``): each annotation stays one line, no control character
    reaches the runner, and the name is still there, written as every other format writes it."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "examples" / "runs" / "burn-missing-optimizer" / "checkpoint", run)
    odd = "x\x1b]0;owned\x07\x1b[31m\r\nred 100%:a,b.bpk"
    (run / odd).write_bytes((run / "model-5.bpk").read_bytes()[:100])
    result = cli("verify", "--format", "github", run)
    assert result.exit_code == 1, result.stderr
    lines = result.stdout.split("\n")
    assert lines[-1] == "" and all(line.startswith(("::error ", "::warning ", "::notice ")) for line in lines[:-1]), lines
    assert not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in result.stdout), repr(result.stdout)
    escaped = "x\\x1b]0;owned\\x07\\x1b[31m\\x0d%0Ared 100%25"
    expected = f"::error file={run}/{escaped}%3Aa%2Cb.bpk,title=CKD203 truncated::{escaped}:a,b.bpk: cut inside its metadata"
    assert any(line.startswith(expected) for line in lines), lines


@pytest.mark.parametrize("command", [("verify",), ("diskcheck",), ("prune", "--keep-last", "1", "--dry-run"), ("repair", "--dry-run")])
@pytest.mark.parametrize("fmt", ["sarif", "junit", "github"])
def test_every_command_renders_every_format(tmp_path, cli, command, fmt):
    run = tmp_path / "run"
    shutil.copytree(ROOT / "examples" / "runs" / "burn-missing-optimizer" / "checkpoint", run)
    result = cli(*command, "--format", fmt, run)
    assert result.exit_code in (0, 1), result.stderr
    if fmt == "sarif":
        assert json.loads(result.stdout)["version"] == "2.1.0"
    elif fmt == "junit":
        assert ET.fromstring(result.stdout).tag == "testsuites"
    else:
        assert all(line.startswith("::") for line in result.stdout.splitlines())


def test_output_file_gets_the_format(at_root, cli, tmp_path):
    out = tmp_path / "report.sarif"
    assert cli("inspect", "--format", "sarif", "-o", out, RUNS[0]).exit_code == 1
    assert json.loads(out.read_text())["runs"][0]["results"][0]["ruleId"] == "CKD101"


def test_rules_renders_sarif_and_refuses_what_does_not_apply(cli):
    body = json.loads(cli("rules", "--format", "sarif").stdout)
    assert len(body["runs"][0]["tool"]["driver"]["rules"]) == len(RULES) and body["runs"][0]["results"] == []
    refused = cli("rules", "--format", "junit")
    assert refused.exit_code == 2 and "human, json or sarif" in refused.stderr


# --- configuration -----------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A repository with a broken run, worked in from a subfolder."""
    for variable in ("CKPTDOCTOR_FORMAT", "CKPTDOCTOR_FAIL_ON", "CKPTDOCTOR_SELECT", "CKPTDOCTOR_IGNORE", "CKPTDOCTOR_CONFIG"):
        monkeypatch.delenv(variable, raising=False)
    shutil.copytree(ROOT / "examples" / "runs" / "burn-missing-optimizer", tmp_path / "runs" / "exp1")
    (tmp_path / "src").mkdir()
    monkeypatch.chdir(tmp_path / "src")
    return tmp_path


def test_no_configuration_means_defaults(project, cli):
    assert cli("inspect", "../runs").exit_code == 1


def test_pyproject_is_found_above_the_working_directory(project, cli):
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.ckptdoctor]\nignore = ["CKD101"]\n')
    result = cli("inspect", "--json", "../runs")
    assert result.exit_code == 0 and "CKD101" not in result.codes()


def test_a_pyproject_without_the_table_means_defaults(project, cli):
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert cli("inspect", "../runs").exit_code == 1


@pytest.mark.parametrize(
    ("setting", "args", "expected_exit", "codes"),
    [
        ('select = ["CKD2"]', (), 0, []),
        ('select = ["missing-optimizer"]', (), 1, ["CKD101"]),
        ('ignore = ["CKD1"]', (), 0, []),
        ('fail-on = "warning"', (), 1, ["CKD101"]),
        ('[severity]\nCKD101 = "warning"', (), 0, ["CKD101"]),
        ('[severity]\nmissing-optimizer = "info"', ("--fail-on", "warning"), 0, ["CKD101"]),
        ('[severity]\nCKD101 = "warning"', ("--fail-on", "warning"), 1, ["CKD101"]),
        ('ignore = ["CKD101"]', ("--select", "CKD101"), 0, []),
        ('select = ["CKD2"]', ("--select", "CKD1"), 1, ["CKD101"]),
    ],
)
def test_each_key_and_the_exit_code(project, cli, setting, args, expected_exit, codes):
    (project / "ckptdoctor.toml").write_text(setting + "\n")
    result = cli("inspect", "--json", *args, "../runs")
    assert result.exit_code == expected_exit, result.stderr
    assert result.codes() == codes


def test_thresholds_change_what_is_an_outlier(project, cli):
    torch = pytest.importorskip("torch")
    run = project / "runs" / "grown"
    run.mkdir()
    for epoch, width in ((1, 1000), (2, 1000), (3, 1000), (4, 1800)):  # the last model file is ~1.6x its peers
        torch.save({"w": torch.zeros(width)}, run / f"model_{epoch}.pt")
        torch.save({"state": {}, "param_groups": []}, run / f"optimizer_{epoch}.pt")
    assert "CKD209" not in cli("inspect", "--json", "../runs/grown").codes(), "below the default 2x"
    (project / "ckptdoctor.toml").write_text("[thresholds]\noversized = 1.5\n")
    assert "CKD209" in cli("inspect", "--json", "../runs/grown").codes()
    (project / "ckptdoctor.toml").write_text("[thresholds]\noversized = 1.5\nmin-peers = 10\n")
    assert "CKD209" not in cli("inspect", "--json", "../runs/grown").codes(), "too few peers for a median"


def test_format_from_the_file_and_the_environment_and_the_command_line_wins(project, cli):
    (project / "ckptdoctor.toml").write_text('format = "junit"\n')
    assert cli("inspect", "../runs").stdout.startswith("<?xml")
    assert cli("inspect", "../runs", env={"CKPTDOCTOR_FORMAT": "github"}).stdout.startswith("::error")
    assert cli("inspect", "--format", "json", "../runs", env={"CKPTDOCTOR_FORMAT": "github"}).stdout.startswith("{")


def test_environment_over_file_for_fail_on_select_and_ignore(project, cli):
    (project / "ckptdoctor.toml").write_text('fail-on = "info"\nignore = ["CKD101"]\n')
    assert cli("inspect", "../runs").exit_code == 0
    assert cli("inspect", "../runs", env={"CKPTDOCTOR_IGNORE": "CKD2"}).exit_code == 1
    assert cli("inspect", "../runs", env={"CKPTDOCTOR_SELECT": "CKD2,CKD3"}).exit_code == 0


def test_an_explicit_config_file_wins_over_discovery(project, cli, tmp_path):
    (project / "ckptdoctor.toml").write_text('ignore = ["CKD101"]\n')
    other = tmp_path / "strict.toml"
    other.write_text('fail-on = "error"\n')
    assert cli("inspect", "../runs").exit_code == 0
    assert cli("inspect", "--config", other, "../runs").exit_code == 1
    assert cli("inspect", "../runs", env={"CKPTDOCTOR_CONFIG": str(other)}).exit_code == 1


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("selekt = []", "'selekt'"),
        ('fail-on = "fatal"', "fail-on"),
        ('format = "xml"', "format"),
        ('select = ["CKD999"]', "select"),
        ('ignore = "CKD101"', "ignore"),
        ('[severity]\nCKD999 = "error"', "severity.CKD999"),
        ('[severity]\nCKD101 = "fatal"', "severity.CKD101"),
        ("[thresholds]\noversized = -1", "thresholds.oversized"),
        ("[thresholds]\nbiggest = 2", "thresholds.biggest"),
        ("select = [", "ckptdoctor.toml"),
    ],
)
def test_an_unknown_key_or_bad_value_is_exit_2_naming_it(project, cli, setting, named):
    (project / "ckptdoctor.toml").write_text(setting + "\n")
    result = cli("inspect", "../runs")
    assert result.exit_code == 2
    assert named in result.stderr and "Traceback" not in result.stderr


def test_a_bad_environment_value_is_exit_2_naming_the_variable(project, cli):
    result = cli("inspect", "../runs", env={"CKPTDOCTOR_FAIL_ON": "sometimes"})
    assert result.exit_code == 2 and "CKPTDOCTOR_FAIL_ON" in result.stderr


# --- baselines --------------------------------------------------------------------------------------------


def test_a_baseline_hides_known_findings_and_reports_new_ones(project, cli, tmp_path):
    baseline = tmp_path / "baseline.json"
    written = cli("inspect", "--write-baseline", baseline, "../runs")
    assert written.exit_code == 0 and "Recorded 1 finding" in written.stderr
    assert json.loads(baseline.read_text())["findings"][0]["code"] == "CKD101"
    known = cli("inspect", "--json", "--baseline", baseline, "../runs")
    assert known.exit_code == 0 and known.codes() == [] and "1 finding recorded" in known.stderr
    (project / "runs" / "exp1" / "checkpoint" / "optim-4.bpk").unlink()  # a new regression
    new = cli("inspect", "--json", "--baseline", baseline, "../runs")
    assert new.exit_code == 1
    assert [(f["code"], f["index"]) for f in new.json["findings"]] == [("CKD101", 4)]


def test_a_baseline_survives_wording_changes_and_other_working_trees(project, cli, tmp_path):
    from ckptdoctor.model import Finding, Severity

    first = Finding("CKD101", "missing-optimizer", Severity.ERROR, "runs/a", 5, "runs/a/model-5.bpk", "old words")
    reworded = Finding("CKD101", "missing-optimizer", Severity.ERROR, "runs/a", 5, "runs/a/model-5.bpk", "new words, 12 MiB")
    assert first.fingerprint == reworded.fingerprint
    assert first.fingerprint != Finding("CKD101", "missing-optimizer", Severity.ERROR, "runs/a", 6, "runs/a/model-6.bpk", "x").fingerprint


def test_a_damaged_baseline_is_a_usage_error(project, cli, tmp_path):
    bad = tmp_path / "baseline.json"
    bad.write_text("{}")
    result = cli("inspect", "--baseline", bad, "../runs")
    assert result.exit_code == 2 and "not a ckptdoctor baseline" in result.stderr
    assert cli("inspect", "--baseline", tmp_path / "missing.json", "../runs").exit_code == 2


def test_role_hints_claim_a_projects_own_checkpointers(project, cli):
    run = project / "runs" / "exp1" / "checkpoint"
    for epoch in (3, 4):
        (run / f"ema-{epoch}.bpk").write_bytes((run / f"model-{epoch}.bpk").read_bytes())
    before = cli("inspect", "--json", "../runs")
    assert "CKD111" in before.codes(), "an unknown prefix is a stray"
    (project / "ckptdoctor.toml").write_text('[roles]\nema = "model"\n')
    after = cli("inspect", "--json", "../runs")
    assert "CKD111" not in after.codes()
    files = {f["path"].rsplit("/", 1)[-1]: f["role"] for c in after.json["runs"][0]["checkpoints"] for f in c["files"]}
    assert files["ema-3.bpk"] == "model"
    (project / "ckptdoctor.toml").write_text('[roles]\nema = "weights"\n')
    bad = cli("inspect", "../runs")
    assert bad.exit_code == 2 and "roles.ema" in bad.stderr


def test_min_age_from_the_configuration_applies_to_repair(project, cli):
    run = project / "runs" / "exp1" / "checkpoint"
    for path in run.iterdir():
        os.utime(path)  # written just now: only a min-age of 0 lets repair act
    (project / "ckptdoctor.toml").write_text('min-age = "0s"\n')
    result = cli("repair", "--json", "--dry-run", run)
    assert any(item["action"] == "quarantine" for item in result.json["plan"])
    (project / "ckptdoctor.toml").write_text("")
    result = cli("repair", "--json", "--dry-run", run)
    assert not any(item["action"] == "quarantine" for item in result.json["plan"])


def test_the_pre_commit_hooks_run_real_commands():
    import yaml

    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    from ckptdoctor.cli import SUBCOMMANDS

    registered = set(SUBCOMMANDS)
    assert {hook["id"] for hook in hooks} == {"ckptdoctor-verify", "ckptdoctor-inspect"}
    for hook in hooks:
        program, command = hook["entry"].split()
        assert program == "ckptdoctor" and command in registered
        assert hook["pass_filenames"] is False and hook["language"] == "python"


# --- what a review found ----------------------------------------------------------------------------


def test_a_baseline_holds_however_the_path_is_typed(project, cli, tmp_path):
    baseline = tmp_path / "baseline.json"
    cli("inspect", "--write-baseline", baseline, "../runs")
    for spelling in ("./../runs", str(project / "runs"), "../runs/"):
        result = cli("inspect", "--json", "--baseline", baseline, spelling)
        assert result.exit_code == 0 and result.codes() == [], spelling


def test_an_explicit_config_file_gives_the_prune_policy_and_diskcheck_retention(project, cli, tmp_path):
    (project / "ckptdoctor.toml").write_text("[prune]\nkeep-last = 2\n")
    explicit = tmp_path / "explicit.toml"
    explicit.write_text("[prune]\nkeep-last = 1\n")
    plan = cli("prune", "--json", "--dry-run", "--min-age", "0", "../runs", env={"CKPTDOCTOR_CONFIG": str(explicit)})
    assert [item["index"] for item in plan.json["plan"] if item["action"] == "keep"] == [4, 5]  # keep-last 1 (4) and the newer incomplete 5
    checked = cli("diskcheck", "--json", "--config", explicit, "../runs/exp1/checkpoint")
    assert checked.json["disk"]["keep_last"] == 1


def test_output_with_control_characters_and_undecodable_names_stays_valid(tmp_path, cli):
    from ckptdoctor.model import Finding, Report, Severity
    from ckptdoctor.render import junit

    odd = Finding("CKD211", "unreadable", Severity.ERROR, "runs/a", 3, "runs/a/\udcffmodel\x01.pt", "key '\x00\udcff' \x1b[31m")
    root = ET.fromstring(junit.render(Report("inspect", (), (odd,))))
    assert root.find(".//failure") is not None
    run = tmp_path / "run"
    shutil.copytree(ROOT / "examples" / "runs" / "burn-missing-optimizer" / "checkpoint", run)
    os.rename(run / "model-5.bpk", os.fsdecode(os.fsencode(str(run)) + b"/model-\xff5.bpk"))
    for fmt in ("human", "json", "sarif", "junit", "github"):
        result = cli("inspect", "--format", fmt, run)
        assert "internal error" not in result.stderr, (fmt, result.stderr)
        if fmt == "junit":
            ET.fromstring(result.stdout)
        if fmt == "sarif":
            json.loads(result.stdout)


def test_a_mistyped_rule_on_the_command_line_is_exit_2(project, cli):
    result = cli("inspect", "--select", "CKD9999", "../runs")
    assert result.exit_code == 2 and "--select" in result.stderr and "CKD9999" in result.stderr


def test_quiet_still_writes_a_report_asked_for_in_a_file(at_root, cli, tmp_path):
    out = tmp_path / "q.sarif"
    result = cli("verify", "--format", "sarif", "-o", out, "-q", "--exit-zero", RUNS[0])
    assert result.exit_code == 0 and result.stdout == ""
    assert json.loads(out.read_text())["runs"][0]["results"]


def test_a_baseline_is_not_written_from_a_scan_with_errors(project, cli, tmp_path):
    baseline = tmp_path / "baseline.json"
    result = cli("inspect", "--write-baseline", baseline, "../runs", "../nonexistent")
    assert result.exit_code == 2 and "nonexistent" in result.stderr and not baseline.exists()


def test_a_path_that_cannot_be_scanned_is_a_junit_error(tmp_path, cli):
    root = ET.fromstring(cli("inspect", "--format", "junit", tmp_path / "nonexistent").stdout)
    assert root.get("errors") == "1" and root.find(".//error") is not None


def test_prune_and_repair_print_their_plan_whatever_format_the_config_names(project, cli):
    (project / "ckptdoctor.toml").write_text('format = "junit"\n')
    result = cli("repair", "--dry-run", "--min-age", "0", "../runs")
    assert "About to" in result.stdout or "Nothing to repair" in result.stdout
    assert not result.stdout.startswith("<?xml")


def test_an_environment_error_names_the_variable_not_the_file(project, cli):
    (project / "ckptdoctor.toml").write_text('fail-on = "error"\n')
    result = cli("inspect", "../runs", env={"CKPTDOCTOR_FORMAT": "xml", "CKPTDOCTOR_SELECT": "CKD1"})
    assert result.exit_code == 2 and "CKPTDOCTOR_FORMAT" in result.stderr and "ckptdoctor.toml" not in result.stderr


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_non_finite_thresholds_are_refused(project, cli, value):
    (project / "ckptdoctor.toml").write_text(f"[thresholds]\nmin-peers = {value}\n")
    result = cli("inspect", "../runs")
    assert result.exit_code == 2 and "thresholds.min-peers" in result.stderr


def test_role_hints_do_not_outlive_their_command(project, cli, tmp_path_factory, monkeypatch):
    run = project / "runs" / "exp1" / "checkpoint"
    (run / "ema-4.bpk").write_bytes((run / "model-4.bpk").read_bytes())
    (project / "ckptdoctor.toml").write_text('[roles]\nema = "model"\n')
    assert "CKD111" not in cli("inspect", "--json", "../runs").codes()
    (project / "ckptdoctor.toml").unlink()  # the run's project found above it, as from anywhere: gone now
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))  # no configuration above it
    assert "CKD111" in cli("inspect", "--json", run).codes(), "no [roles] here"


def test_sarif_locations_outside_the_working_directory_are_file_uris(tmp_path, cli, at_root):
    run = tmp_path / "run with space"
    shutil.copytree(ROOT / "examples" / "runs" / "burn-missing-optimizer" / "checkpoint", run)
    result = json.loads(cli("inspect", "--format", "sarif", run).stdout)["runs"][0]["results"][0]
    uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri.startswith("file:///") and "run%20with%20space" in uri


def test_prune_and_repair_reports_follow_the_configured_rules(project, cli):
    shutil.copytree(ROOT / "examples" / "runs" / "burn-truncated", project / "runs" / "cut")
    (project / "ckptdoctor.toml").write_text('ignore = ["CKD203"]\n')
    for command in (("repair", "--dry-run"), ("prune", "--dry-run", "--keep-last", "1")):
        result = cli(*command, "--format", "github", "../runs")
        assert "CKD101" in result.stdout and "CKD203" not in result.stdout, command
