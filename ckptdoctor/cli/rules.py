"""``ckptdoctor rules``: the rule table, one rule explained, or the rules behind a pasted error."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptdoctor.cli._output import (
    EXIT_FINDINGS,
    JsonFlag,
    chosen,
    format_option,
    stderr_console,
    write,
)
from ckptdoctor.render import Kind, RenderOptions, named

Query = Annotated[
    str | None,
    typer.Argument(help="A rule code (CKD101), a name (missing-optimizer), or a pasted error message."),
]
RulesFormat = Annotated[str | None, format_option(Kind.RULES, "Output format (default: human).")]


def rules(query: Query = None, fmt: RulesFormat = None, as_json: JsonFlag = False) -> None:
    """Show the rule table, one rule, or the rules an error matches.

    Lists the rule table, explains one rule, or finds the rules that explain an error message.

    Examples:

      ckptdoctor rules

      ckptdoctor rules CKD101

      ckptdoctor rules "Can load optimizer checkpoint."
    """
    # the rule table and renderers load only when the command runs: `--help` stays fast
    from ckptdoctor.rules.registry import RULES, Rule, find_rule, rules_explaining

    selected: tuple[Rule, ...]
    if query is None:
        selected = RULES
    else:
        exact = find_rule(query)
        selected = (exact,) if exact else tuple(rules_explaining(query))
    if not selected:
        stderr_console().print(f"No rule matches {query!r}. `ckptdoctor rules` lists them all.", markup=False)
        raise typer.Exit(EXIT_FINDINGS)
    renderer = named(chosen(fmt, as_json), Kind.RULES)
    write(renderer.module().render_rules(selected, RenderOptions(explain=query is not None)), None)
