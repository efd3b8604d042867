"""``ckptdoctor rules``: the rule table, one rule explained, or the rules behind a pasted error."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptdoctor.cli._output import (
    EXIT_FINDINGS,
    EXIT_USAGE,
    FormatOption,
    JsonFlag,
    OutputFormat,
    stderr_console,
    stdout_console,
)

Query = Annotated[
    str | None,
    typer.Argument(help="A rule code (CKD101), a name (missing-optimizer), or a pasted error message."),
]


def rules(query: Query = None, fmt: FormatOption = None, as_json: JsonFlag = False) -> None:
    """List the rule table, explain one rule, or find the rules that explain an error message.

    Examples:

      ckptdoctor rules

      ckptdoctor rules CKD101

      ckptdoctor rules "Can load optimizer checkpoint."
    """
    # the rule table and renderers load only when the command runs: `--help` stays fast
    from ckptdoctor.render import human
    from ckptdoctor.render import json as json_render
    from ckptdoctor.rules import RULES, Rule, find_rule, rules_explaining

    selected: tuple[Rule, ...]
    if query is None:
        selected = RULES
    else:
        exact = find_rule(query)
        selected = (exact,) if exact else tuple(rules_explaining(query))
    if not selected:
        stderr_console().print(
            f"No rule matches {query!r}. `ckptdoctor rules` lists them all.", markup=False
        )
        raise typer.Exit(EXIT_FINDINGS)
    if fmt is OutputFormat.JSON or as_json:
        typer.echo(json_render.rules_document(selected), nl=False)
        return
    if fmt is OutputFormat.SARIF:
        from ckptdoctor.render import sarif

        typer.echo(sarif.render_rules(selected), nl=False)
        return
    if fmt is not None and fmt is not OutputFormat.HUMAN:
        stderr_console().print(f"`rules` prints the rule table: --format human, json or sarif, not {fmt.value}", markup=False)
        raise typer.Exit(EXIT_USAGE)
    console = stdout_console()
    if query is None:
        console.print(human.rule_table(selected))
        return
    for position, rule in enumerate(selected):
        if position:
            console.print()
        console.print(human.rule_page(rule, console.width))
