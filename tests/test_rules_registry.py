"""The rule registry: every rule is declared by a check, every reader problem names its rule and
the status it gives, and the suite's plugin (tests/_fired_rules.py) holds checks to their word and
fails a whole run in which some rule is never fired."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ckptdoctor
from ckptdoctor.layouts.judging import checkpoint_of
from ckptdoctor.model import CheckpointFile, Entry, FileIssue, FileReport, Problem, Role, Status
from ckptdoctor.rules import completeness, consistency, integrity
from ckptdoctor.rules.registry import CHECKS, RULES, find_rule
from ckptdoctor.rules.rule import fires

PACKAGE = Path(ckptdoctor.__file__).parent
TESTS = Path(__file__).parent


def test_every_rule_is_declared_by_a_check_and_every_declared_rule_is_in_the_table():
    declared = {rule for check in CHECKS for rule in check.fires}
    assert [rule.code for rule in RULES if rule not in declared] == []
    assert [rule.code for rule in declared if rule not in RULES] == []


def test_every_check_of_every_family_is_registered_once():
    names = [check.name for check in CHECKS]
    assert len(names) == len(set(names)), names
    for family in (completeness, integrity, consistency):
        assert set(family.CHECKS) <= set(CHECKS), family.__name__
        assert family.CHECKS, family.__name__


@pytest.mark.parametrize("problem", list(Problem), ids=lambda problem: problem.name)
def test_every_problem_names_a_rule_that_a_check_declares(problem):
    rule = find_rule(problem.value)
    assert rule is not None, f"Problem.{problem.name} names no rule ({problem.value!r})"
    assert any(rule in check.fires for check in CHECKS)
    assert problem.status in (None, Status.PARTIAL, Status.CORRUPT, Status.UNREADABLE, Status.ARCHIVED)


@pytest.mark.parametrize("problem", list(Problem), ids=lambda problem: problem.name)
def test_a_file_with_a_problem_gives_its_checkpoint_the_status_the_problem_names(problem):
    entry = Entry("model-3.bpk", "run/model-3.bpk", "run/model-3.bpk", 1024)
    report = FileReport("burnpack", (FileIssue(problem, "what the reader found"),))
    checkpoint = checkpoint_of(3, (CheckpointFile(entry, (Role.MODEL,), "model", report),), (Role.MODEL,), single=False)
    assert checkpoint.status is (problem.status or Status.COMPLETE)


def test_findings_are_made_in_one_place():
    """The plugin watches ``rules.context.make_finding``: a ``Finding`` built anywhere else
    would escape it."""
    building = re.compile(r"(?<![\w.])Finding\(")
    makers = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if building.search(path.read_text(encoding="utf-8")))
    assert makers == [os.path.join("rules", "context.py")]


def test_the_plugin_names_a_rule_a_check_does_not_declare():
    import _fired_rules

    check = fires(integrity.UNREADABLE)(integrity.unlisted_folders.run)
    assert _fired_rules.broken_promise("CKD211", check, "unlisted_folders") is None
    wrong = _fired_rules.broken_promise("CKD205", check, "unlisted_folders")
    assert wrong is not None and "CKD205" in wrong and "declares only CKD211" in wrong
    outside = _fired_rules.broken_promise("CKD205", None, "somewhere")
    assert outside is not None and "outside every check" in outside
    assert _fired_rules.unfired({rule.code for rule in RULES}) == []
    assert _fired_rules.unfired(set())[0] == f"{RULES[0].code} {RULES[0].name}"


# --- the plugin end to end, in a small suite of its own ---------------------------------------

_FIRES_ONE = """
from ckptdoctor.discover import Unlisted
from ckptdoctor.rules import integrity

def test_an_unlisted_folder():
    assert [f.code for f in integrity.unlisted_folders([Unlisted("run/locked", "Permission denied")])] == ["CKD211"]
"""

_OUTSIDE = """
from ckptdoctor.rules.context import make_finding
from ckptdoctor.rules.integrity import TRUNCATED

def test_a_finding_made_outside_every_check():
    make_finding(TRUNCATED, "made by hand", "run")
"""


def _suite(tmp_path: Path, test: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n", encoding="utf-8")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text('pytest_plugins = ["_fired_rules"]\n', encoding="utf-8")
    (tmp_path / "tests" / "test_one.py").write_text(textwrap.dedent(test), encoding="utf-8")
    path = os.pathsep.join([str(PACKAGE.parent), str(TESTS), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["one-process", "xdist"])
def test_a_whole_suite_that_leaves_a_rule_unfired_fails_and_names_it(tmp_path, workers):
    # under xdist the rule is fired in a worker: the controller must hear of it, or it names CKD211 too
    result = _suite(tmp_path, _FIRES_ONE, *workers)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert "rules no test fires" in result.stdout
    unfired = set(re.findall(r"^  (CKD\d{3}) ", result.stdout, re.MULTILINE))
    assert unfired == {rule.code for rule in RULES} - {"CKD211"}


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["one-process", "xdist"])
def test_part_of_a_suite_is_not_held_to_the_whole_table(tmp_path, workers):
    result = _suite(tmp_path, _FIRES_ONE, "-k", "unlisted", *workers)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rules no test fires" not in result.stdout


def test_a_finding_made_outside_every_check_fails_its_test(tmp_path):
    result = _suite(tmp_path, _OUTSIDE, "-k", "outside")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed, 1 error" in result.stdout
    assert "CKD203 was made in test_a_finding_made_outside_every_check, outside every check" in result.stdout
