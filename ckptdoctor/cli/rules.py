"""``ckptdoctor rules``: the rule table, one rule explained, or the rules behind a pasted error."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptdoctor.cli._output import (
    EXIT_FINDINGS,
    ColorOption,
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
Full = Annotated[bool, typer.Option("--full", help="Explain every rule a pasted message matches, not one line each.")]


def rules(query: Query = None, fmt: RulesFormat = None, as_json: JsonFlag = False, full: Full = False, color: ColorOption = None) -> None:
    """Show the rule table, one rule, or the rules an error matches.

    Lists the rule table, explains one rule, or ranks the rules that explain an error message
    (one line each; --full explains them all).

    Examples:

    \b
      ckptdoctor rules
      ckptdoctor rules CKD101
      ckptdoctor rules "Can load optimizer checkpoint."
    """
    # the rule table and renderers load only when the command runs: `--help` stays fast
    from ckptdoctor import api

    renderer = named(chosen(fmt, as_json), Kind.RULES)
    answer = api.run_rules(api.RulesOptions(query, full))
    if not answer.rules:
        stderr_console().print(f"No rule matches {query!r}. `ckptdoctor rules` lists them all.", markup=False)
        raise typer.Exit(EXIT_FINDINGS)
    write(renderer.module().render_rules(answer.rules, RenderOptions(explain=answer.explain), answer.matches), None)
