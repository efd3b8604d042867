"""``ckptdoctor repair``: make a run resumable from its newest complete checkpoint, moving (never
deleting) what stands in the way; ``--undo`` puts it back."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptdoctor.cli._acting import (
    ActingOptions,
    acting_command,
    carried_out,
    declined,
)
from ckptdoctor.cli._errors import say
from ckptdoctor.cli._output import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    Paths,
    stdout_console,
)

Undo = Annotated[bool, typer.Option("--undo", help="Put back what the latest repair of each run moved and re-pointed.")]
ReadWhole = Annotated[
    bool,
    typer.Option(
        "--verify",
        help="Read the newest complete checkpoint whole first (as `verify --deep` does), and older ones in place of any that fail: damage only a whole read sees (a CRC, zeroed bytes) is repaired too.",
    ),
]
QuarantineId = Annotated[
    str | None, typer.Option("--id", help="With --undo: the quarantine to put back (default: the latest).", metavar="ID")
]


@acting_command
def repair(
    paths: Paths = None, undo: Undo = False, ident: QuarantineId = None, read_whole: ReadWhole = False, *, options: ActingOptions
) -> None:
    """Make a run resumable from its newest complete checkpoint.

    Moves incomplete, partial and corrupt checkpoints newer than it, empty files and staging
    leftovers into a quarantine in the run, and re-points `latest` (DeepSpeed), the Megatron
    tracker and a broken `last.ckpt` at it.

    Nothing is deleted and no checkpoint's bytes change; every action names the rule it fixes.
    Files modified within --min-age or held open are left alone. `repair --undo` puts everything
    back (never over a file that exists again).

    Examples:

    \b
      ckptdoctor repair --dry-run runs/exp1/checkpoint
      ckptdoctor repair --yes runs/exp1/checkpoint
      ckptdoctor repair --verify --yes runs/exp1/checkpoint
      ckptdoctor repair --undo runs/exp1/checkpoint
    """
    # loaded when the command runs: --help stays fast
    from ckptdoctor import api
    from ckptdoctor.render.human import resume_block

    if ident is not None and not undo:
        say("ckptdoctor: error: --id names a quarantine to put back: use it with --undo")
        raise typer.Exit(EXIT_USAGE)
    if read_whole and undo:
        say("ckptdoctor: error: --verify reads checkpoints before a repair: --undo puts back what one moved, and reads nothing")
        raise typer.Exit(EXIT_USAGE)
    human, quiet, dry_run = options.human, options.quiet, options.dry_run
    repaired = carried_out(
        api.run_repair, api.RepairOptions, paths, options, repair=True, undo=undo, ident=ident, min_age=options.min_age, verify=read_whole
    )
    outcome = repaired.outcome
    declined(outcome)
    blocked = undo and bool(outcome.refused)  # an undo that would put an entry over one that exists again does nothing
    if not outcome.acted and not blocked and human and not quiet:
        if dry_run:
            say(f"Dry run: nothing was {'restored' if undo else 'moved'}.")
        elif undo or options.output is not None:  # a repair's plan on stdout has said so in its last line
            say("Nothing to restore." if undo else "Nothing to repair.")
    if human and not quiet:  # the resume point is the one kept: the last lines say where each run goes on
        console = stdout_console()
        for run in repaired.advised:
            console.print(resume_block(run, console.width, named=repaired.changed > 1), crop=False)  # a path wider than the screen: whole
    for line in outcome.problems:
        say(f"ckptdoctor: error: {line}")
    if outcome.problems and not undo:
        count = len(outcome.problems)
        say(f"ckptdoctor: {count} entr{'y' if count == 1 else 'ies'} could not be moved (above); the rest of the plan was done.")
    raise typer.Exit(EXIT_FINDINGS if outcome.problems or outcome.refused else EXIT_OK)
