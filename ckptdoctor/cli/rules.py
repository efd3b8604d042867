"""``ckptdoctor rules``: the rule table, one rule explained, or the rules behind a pasted error."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptdoctor.cli._errors import explained, say
from ckptdoctor.cli._output import (
    EXIT_FINDINGS,
    ColorOption,
    ConfigOption,
    JsonFlag,
    chosen,
    configured,
    format_option,
    write,
)
from ckptdoctor.render import HUMAN, Kind, RenderOptions, formats, named

Query = Annotated[
    str | None,
    typer.Argument(help="A rule code (CKD101), a name (missing-optimizer), or a pasted error message."),
]
RulesFormat = Annotated[
    str | None,
    format_option(Kind.RULES, "Output format (default: human, or CKPTDOCTOR_FORMAT or format = in the config where it is one of these)."),
]
Full = Annotated[bool, typer.Option("--full", help="Explain every rule a pasted message matches, not one line each.")]


def rules(
    query: Query = None,
    fmt: RulesFormat = None,
    as_json: JsonFlag = False,
    full: Full = False,
    config: ConfigOption = None,
    color: ColorOption = None,
) -> None:
    """Show the rule table, one rule, or the rules an error matches.

    Lists the rule table, explains one rule, or ranks the rules that explain an error message
    (one line each, even for one; --full explains them all). The configuration (--config, else
    the nearest) gives the output format, as for the other commands; its select and ignore
    choose what a scan reports, so every rule is still listed and searched here.

    Examples:

    \b
      ckptdoctor rules
      ckptdoctor rules CKD101
      ckptdoctor rules "Can load optimizer checkpoint."
    """
    # the rule table and renderers load only when the command runs: `--help` stays fast
    from ckptdoctor import api

    with explained("rules"):  # a configuration that cannot be used: exit 2 naming it, as for every command
        configured_format = chosen(fmt, as_json, configured(config, None))
    # a format configured for scans that renders no rules (junit, github: a CI job's) leaves the human one
    renderer = named(configured_format if configured_format in formats(Kind.RULES) else HUMAN, Kind.RULES)
    answer = api.run_rules(api.RulesOptions(query, full))
    if not answer.rules:
        say(f"No rule matches {query!r}. `ckptdoctor rules` lists them all.")
        raise typer.Exit(EXIT_FINDINGS)
    write(renderer.module().render_rules(answer.rules, RenderOptions(explain=answer.explain), answer.matches), None)
