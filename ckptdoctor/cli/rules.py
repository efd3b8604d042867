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
Full = Annotated[bool, typer.Option("--full", help="Explain every rule a pasted message matches, not one line each.")]


def rules(query: Query = None, fmt: RulesFormat = None, as_json: JsonFlag = False, full: Full = False) -> None:
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
    from ckptdoctor.rules.registry import RULES, find_rule
    from ckptdoctor.rules.search import Match, rank

    renderer = named(chosen(fmt, as_json), Kind.RULES)
    matches: tuple[Match, ...] = ()
    exact = find_rule(query) if query is not None else None
    if query is None:
        selected = RULES
    elif exact is not None:
        selected = (exact,)
    else:
        matches = rank(query)
        selected = tuple(match.rule for match in matches)
    if not selected:
        stderr_console().print(f"No rule matches {query!r}. `ckptdoctor rules` lists them all.", markup=False)
        raise typer.Exit(EXIT_FINDINGS)
    # a page for a rule asked for by name, for a search's only match, or for all with --full
    explain = query is not None and (exact is not None or len(matches) == 1 or full)
    write(renderer.module().render_rules(selected, RenderOptions(explain=explain), matches), None)
