"""The rule table as Markdown, for docs/rules.md (kept in sync by a test).

python -m ckptdoctor.render.markdown   # rewrites the table in docs/rules.md
"""

from __future__ import annotations

import sys
from pathlib import Path

from ckptdoctor.rules.registry import BEHIND_RESUME, RULES, Rule

START = "<!-- rules:start -->"
END = "<!-- rules:end -->"


def rule_table(rules: tuple[Rule, ...] = RULES) -> str:
    lines = ["| code | name | severity | summary |", "| --- | --- | --- | --- |"]
    lines += [f"| {r.code} | `{r.name}` | {_severity(r)} | {_cell(r.summary)} |" for r in rules]
    lowered = next((r.behind_resume for r in rules if r.lowered_behind_resume), None)
    if lowered is not None:
        lines += ["", f"¹ {lowered.value} {BEHIND_RESUME}."]
    return "\n".join(lines)


def _severity(rule: Rule) -> str:
    return f"{rule.severity.value}¹" if rule.lowered_behind_resume else rule.severity.value


def _cell(text: str) -> str:
    return text.replace("|", r"\|")


def with_table(readme: str) -> str:
    """``readme`` with the text between the markers replaced by the current table."""
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{rule_table()}\n{END}{tail}"


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/rules.md")
    path.write_text(with_table(path.read_text(encoding="utf-8")), encoding="utf-8")
