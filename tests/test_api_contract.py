"""The Python API's promises (docs/api.md), as a caller meets them: every name it exports loads,
every command has its keyword function, an argument of the wrong type is a ``TypeError`` before
anything runs, and a value it cannot use is a ``CkptdoctorError`` with exit code 2, never an
``AttributeError`` from deep inside. Found by the attack on issue 33."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ckptdoctor.api as ckd
from ckptdoctor.errors import CkptdoctorError

EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "runs" / "burn-healthy")


def test_every_name_the_api_exports_loads_and_a_star_import_works() -> None:
    missing = [name for name in ckd.__all__ if getattr(ckd, name, None) is None]
    assert missing == []
    done = subprocess.run([sys.executable, "-c", "from ckptdoctor.api import *; print(Outcome.__name__, Settings.__name__)"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0 and done.stdout.split() == ["Outcome", "Settings"], done.stderr


def test_rules_has_its_keyword_function_as_every_command() -> None:
    answer = ckd.rules("CKD101")
    assert [rule.code for rule in answer.rules] == ["CKD101"] and answer.explain
    assert len(ckd.rules().rules) == len(ckd.run_rules(ckd.RulesOptions()).rules) > 50


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: ckd.repair(EXAMPLE, min_age=5), "min_age"),
        (lambda: ckd.repair(EXAMPLE, min_age=datetime.timedelta(0)), "min_age"),
        (lambda: ckd.repair(EXAMPLE, undo="yes"), "undo"),
        (lambda: ckd.rules(5), "query"),  # type: ignore[arg-type]
        (lambda: ckd.verify(EXAMPLE, jobs="2"), "jobs"),
        (lambda: ckd.verify(EXAMPLE, deep=1), "deep"),
        (lambda: ckd.inspect(EXAMPLE, config=5), "config"),
        (lambda: ckd.run_inspect(ckd.InspectOptions((EXAMPLE,), select=5)), "select"),  # type: ignore[arg-type]
        (lambda: ckd.run_inspect(ckd.InspectOptions((EXAMPLE,), ignore="CKD101")), "ignore"),
    ],
)
def test_an_argument_of_the_wrong_type_is_a_type_error_naming_it(call: Any, named: str) -> None:
    with pytest.raises(TypeError, match=rf"^{named} must be"):
        call()


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda: ckd.verify(EXAMPLE, jobs=-1), "jobs must be 0"),
        (lambda: ckd.run_inspect(ckd.InspectOptions((EXAMPLE,), select=("CKD999",))), "'CKD999' is no rule"),
        (lambda: ckd.run_verify(ckd.VerifyOptions((EXAMPLE,), ignore=("no-such-rule",))), "'no-such-rule' is no rule"),
        (lambda: ckd.prune(EXAMPLE, keep_last=-1), "keep-last must be a whole number of at least 0"),
        (lambda: ckd.prune(EXAMPLE, keep_last=0), "an empty policy"),
        (lambda: ckd.PruneSettings(keep_every=-3), "keep-every must be a whole number of at least 0"),
        (lambda: ckd.PruneSettings(max_runs=0), "max-runs must be a whole number of at least 1"),
        (lambda: ckd.PruneSettings(mode="bogus"), "mode must be min or max"),
        (lambda: ckd.PruneSettings(min_age="bogus"), "min-age: not a duration"),
        (lambda: ckd.PruneSettings(keep_within="nan"), "keep-within: not a duration"),
    ],
)
def test_a_value_the_api_cannot_use_is_refused_with_exit_code_2(call: Any, said: str) -> None:
    with pytest.raises(CkptdoctorError, match=said) as refused:
        call()
    assert refused.value.exit_code == 2


def test_options_that_are_right_still_run() -> None:
    assert ckd.run_inspect(ckd.InspectOptions((EXAMPLE,), select=["CKD1"], config=None)).report.runs
    assert ckd.verify(EXAMPLE, jobs=1).runs
    assert ckd.PruneSettings(keep_last=3, mode="max", min_age="0", keep_within="7d").keep_last == 3


@pytest.mark.parametrize("line", ["keep-last = -1", 'keep-within = "nan"', "min-age = -3", 'mode = "avg"', "keep-every = -2"])
@pytest.mark.parametrize("command", [["diskcheck"], ["diskcheck", "--keep-last", "2"], ["prune", "--dry-run", "--keep-last", "2"]])
def test_an_unusable_prune_table_is_refused_naming_the_file_by_every_command_that_reads_it(
    tmp_path: Path, cli: Any, line: str, command: list[str]
) -> None:
    config = tmp_path / "ckptdoctor.toml"
    config.write_text(f"[prune]\n{line}\n", encoding="utf-8")
    result = cli(*command, "--config", config, EXAMPLE)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert f"{config}: [tool.ckptdoctor.prune] {line.split(' =')[0]}" in result.stderr


def test_an_ignore_that_names_no_rule_says_ignore(cli: Any) -> None:
    result = cli("inspect", "--ignore", "bogus-name", EXAMPLE)
    assert result.exit_code == 2 and "--ignore: ignore: 'bogus-name' is no rule" in result.stderr


@pytest.mark.parametrize(
    "command", [["inspect"], ["verify"], ["diskcheck"], ["prune", "--dry-run", "--keep-last", "1"], ["repair", "--dry-run"]]
)
def test_every_command_reads_the_runs_project_configuration_from_anywhere_as_the_api_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any, command: list[str]
) -> None:
    """Found by the attack on issue 33: from outside the project, ``inspect proj/run`` read the
    working folder's configuration (none), not the project's ``[roles]``, and named as resume point
    an epoch whose optimizer the project's own checkpointer had not written, where the API and
    ``diskcheck`` read the project's. Every command now looks above the first path first, then
    above the working folder."""
    from ckptdoctor.testing import write_burn_run

    run = tmp_path / "proj" / "run"
    write_burn_run(run, range(1, 4))
    for epoch in range(1, 4):
        (run / f"ema-{epoch}.bpk").write_bytes((run / f"model-{epoch}.bpk").read_bytes())
    (run.parent / "ckptdoctor.toml").write_text('[roles]\nema = "model"\n', encoding="utf-8")
    elsewhere = tmp_path / "cron"
    elsewhere.mkdir()
    (elsewhere / "ckptdoctor.toml").write_text('format = "json"\n', encoding="utf-8")  # the working folder's: not the run's
    monkeypatch.chdir(elsewhere)
    result = cli(*command, "--json", run)
    assert result.exit_code in (0, 1), result.stderr
    said = result.json
    runs = said["runs"] if "runs" in said else said["report"]["runs"] if "report" in said else []
    roles = {f["path"].rsplit("/", 1)[-1]: f["role"] for r in runs for c in r["checkpoints"] for f in c["files"]}
    if roles:
        assert roles.get("ema-3.bpk") == "model", roles
    if command == ["inspect"]:  # the API, from the same working folder, says the same
        from ckptdoctor.render.json import document

        assert json.loads(json.dumps(document(ckd.inspect(str(run))))) == said
    # the working folder's configuration is still read where the run's project has none
    (run.parent / "ckptdoctor.toml").unlink()
    assert cli("inspect", run).stdout.lstrip().startswith("{")  # format = "json" from the working folder
