"""The rule table: DESIGN §3.4 as data, complete documentation per rule, and `ckptdoctor rules`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ckptdoctor.layouts.registry import LAYOUTS
from ckptdoctor.model import Severity
from ckptdoctor.rules.registry import RULES, find_rule
from ckptdoctor.rules.rule import GENERIC_CONTEXT

DESIGN = Path(__file__).resolve().parents[1] / ".." / "shared" / "DESIGN.md"
_ROW = re.compile(r"^\|\s*(CKD\d{3})\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|", re.MULTILINE)
_KEBAB = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
BY_CODE = {rule.code: rule for rule in RULES}


def design_rows() -> list[tuple[str, str, str]]:
    """(code, name, default severity) of every row of DESIGN §3.4."""
    text = DESIGN.read_text(encoding="utf-8")
    section = text[text.index("### 3.4") :]
    section = section[: section.index("\n## ", 1)] if "\n## " in section else section
    rows = []
    for code, name, severity in _ROW.findall(section):
        # "error where the framework requires it (burn), else warning": the first word is the default
        rows.append((code, name, severity.split()[0]))
    return rows


def test_every_design_rule_is_in_the_table_with_its_name_and_severity():
    if not DESIGN.is_file():
        pytest.skip("../shared/DESIGN.md is absent")
    rows = design_rows()
    assert len(rows) >= 30, "the §3.4 table was not parsed"
    for code, name, severity in rows:
        assert code in BY_CODE, f"{code} ({name}) from DESIGN §3.4 is not in RULES"
        rule = BY_CODE[code]
        assert rule.name == name, code
        assert rule.severity is Severity(severity), code


def test_codes_are_well_formed_unique_and_sorted():
    codes = [rule.code for rule in RULES]
    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"CKD[1-9]\d{2}", code) for code in codes), codes
    assert codes == sorted(codes)


def test_names_are_unique_and_kebab_case():
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    for name in names:
        assert _KEBAB.match(name), name
    # a name never reads as a code, so lookups by either cannot collide
    assert not {name.lower() for name in names} & {rule.code.lower() for rule in RULES}


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_every_rule_is_documented(rule):
    assert rule.summary.strip() and "\n" not in rule.summary
    assert len(rule.meaning.strip()) > 40
    assert len(rule.causes.strip()) > 40
    # every run, whatever its framework, is told at least two things to do
    for layout in LAYOUTS:
        assert len(rule.fix_texts(GENERIC_CONTEXT, layout.fix_keys)) >= 2, layout.name
    assert all((record.generic or "").strip() or any(text.strip() for _, text in record.frameworks) for record in rule.fix_records)
    assert rule.placeholders() <= set(GENERIC_CONTEXT), rule.placeholders() - set(GENERIC_CONTEXT)
    # the documentation renders every wording of every fix (no stray braces, no unknown fields)
    rendered = rule.fix_texts()
    assert len(rendered) == sum(len(generic) + len(own) for generic, own in rule.documented_fixes())
    assert not any("{" in fix and "}" in fix and re.search(r"\{[a-z_]+\}", fix) for fix in rendered)
    assert rule.family == int(rule.code[3]) * 100


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_related_codes_exist(rule):
    for code in rule.related:
        assert code in BY_CODE, f"{rule.code} names unknown related rule {code}"
        assert code != rule.code


def test_find_rule_by_code_and_name():
    for rule in RULES:
        assert find_rule(rule.code) is rule
        assert find_rule(rule.code.lower()) is rule
        assert find_rule(rule.name) is rule
    assert find_rule("no-such-rule") is None


def test_rules_table_lists_every_rule(cli):
    result = cli("rules")
    assert result.exit_code == 0
    for rule in RULES:
        assert re.search(rf"^{rule.code}\s+{re.escape(rule.name)}\s", result.stdout, re.MULTILINE), rule.code


@pytest.mark.parametrize("query", ["CKD101", "ckd101", "missing-optimizer"])
def test_rules_explains_one_rule(cli, query):
    result = cli("rules", query)
    assert result.exit_code == 0
    out = result.stdout
    rule = BY_CODE["CKD101"]
    assert out.startswith("CKD101 missing-optimizer")
    for heading in ("What it means", "When it happens", "How to fix it", "Messages it explains", "Related"):
        assert heading in out
    assert "Can load optimizer checkpoint." in out
    assert "CKD102" in out  # a related rule
    assert out.count("•") >= len([generic for generic, _ in rule.documented_fixes() if generic])
    # one rule only, not the table
    assert "CKD201" not in out


def test_rules_finds_the_rule_behind_a_pasted_burn_save_error(cli):
    result = cli("rules", "Can save optimizer checkpoint.")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[1].split()[:2] == ["CKD501", "insufficient-space"]  # one line per match, best first


def test_rules_json_has_every_rule(cli):
    result = cli("rules", "--json")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    entries = {entry["code"]: entry for entry in document["rules"]}
    assert set(entries) == set(BY_CODE)
    for code, entry in entries.items():
        rule = BY_CODE[code]
        assert entry["name"] == rule.name
        assert entry["severity"] == rule.severity.value
        assert entry["summary"] == rule.summary
        assert entry["fixes"] == [text for generic, _ in rule.documented_fixes() for text in generic]
        by_framework = entry["fixes_by_framework"]
        assert sum(map(len, by_framework.values())) == sum(len(own) for _, own in rule.documented_fixes())
        assert entry["related"] == list(rule.related)
    assert cli("rules", "--format", "json").stdout == result.stdout


def test_rules_json_for_one_rule(cli):
    document = json.loads(cli("rules", "--json", "CKD203").stdout)
    assert [entry["code"] for entry in document["rules"]] == ["CKD203"]


def test_unknown_query_exits_1_with_a_clear_message(cli):
    result = cli("rules", "zzzz-no-rule-like-this")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "zzzz-no-rule-like-this" in result.stderr
    assert "ckptdoctor rules" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_every_command_a_fix_names_exists():
    """Fixes name commands users can run: every one of the design is registered, and no fix
    names another."""
    import re

    from ckptdoctor.cli import SUBCOMMANDS

    registered = set(SUBCOMMANDS)
    assert registered == {"inspect", "verify", "prune", "repair", "diskcheck", "rules"}
    for rule in RULES:
        for fix in rule.fix_texts():
            for command in re.findall(r"`ckptdoctor (\w+)", fix):
                assert command in registered, (rule.code, fix)
