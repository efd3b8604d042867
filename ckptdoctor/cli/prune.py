"""``ckptdoctor prune``: keep what a retention policy keeps, delete the rest, safely and explainably."""

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
    Paths,
    number,
)

KeepLast = Annotated[
    int | None, typer.Option("--keep-last", parser=number(int, 0), help="Keep the N newest complete checkpoints.", metavar="N")
]
KeepBest = Annotated[int | None, typer.Option("--keep-best", parser=number(int, 0), help="Keep the N best by --metric.", metavar="N")]
Metric = Annotated[
    str | None, typer.Option("--metric", help="Metric for --keep-best (burn valid/ logs, HF log_history, Lightning file names).")
]
Mode = Annotated[str | None, typer.Option("--mode", help="min (loss) or max (accuracy).", metavar="min|max")]
KeepEvery = Annotated[
    int | None, typer.Option("--keep-every", parser=number(int, 1), help="Keep checkpoints whose index is divisible by K.", metavar="K")
]
KeepWithin = Annotated[
    str | None,
    typer.Option("--keep-within", help="Keep everything saved in the last DURATION (7d, 36h), by the clock.", metavar="DURATION"),
]
Keep = Annotated[
    list[int] | None, typer.Option("--keep", parser=number(int), help="Pin a checkpoint by index (repeatable).", metavar="INDEX")
]
VerifyKept = Annotated[
    bool | None,
    typer.Option(
        "--verify/--no-verify",
        help="Read the checkpoints that would be the newest kept whole first; keep older ones in place of any that fail (config: verify).",
    ),
]
MaxRuns = Annotated[
    int | None,
    typer.Option(
        "--max-runs",
        parser=number(int, 1),
        help="Refuse to delete in more than N runs at once (default 50; config: max-runs).",
        metavar="N",
    ),
]
DiscardJournal = Annotated[
    bool,
    typer.Option(
        "--discard-journal", help="Drop what an interrupted prune left pending, putting back what it had moved, instead of finishing it."
    ),
]
AbortUploads = Annotated[
    str | None,
    typer.Option(
        "--abort-uploads",
        help="Runs in buckets: also abort incomplete multipart uploads under the run older than AGE (by the store's clock), e.g. 7d.",
        metavar="AGE",
    ),
]
MetricsFile = Annotated[str | None, typer.Option("--metrics-file", help="CSV or JSON of index -> metric value.", metavar="FILE")]


@acting_command
def prune(
    paths: Paths = None,
    keep_last: KeepLast = None,
    keep_best: KeepBest = None,
    metric: Metric = None,
    mode: Mode = None,
    keep_every: KeepEvery = None,
    keep_within: KeepWithin = None,
    keep: Keep = None,
    metrics_file: MetricsFile = None,
    discard_journal: DiscardJournal = False,
    verify_kept: VerifyKept = None,
    max_runs: MaxRuns = None,
    abort_uploads: AbortUploads = None,
    *,
    options: ActingOptions,
) -> None:
    """Delete the checkpoints a retention policy does not keep.

    Never deleted: the resume point, the framework's best or pointed-to checkpoint, an incomplete
    checkpoint newer than the resume point, files modified within --min-age or dated in the
    future, files a live process holds open, or anything outside the run.

    A checkpoint is kept if any rule keeps it; the plan shows the reasons. Deletion is journalled:
    a prune killed at any moment loses nothing that was to be kept, and the next one finishes it.
    The policy may also come from [tool.ckptdoctor.prune] in pyproject.toml or ckptdoctor.toml.

    Examples:

    \b
      ckptdoctor prune --keep-last 3 --dry-run runs/exp1/checkpoint
      ckptdoctor prune --keep-last 2 --keep-best 1 --metric Loss --yes runs/exp1/checkpoint
      0 3 * * * ckptdoctor prune -q --yes --keep-last 5 /data/runs
      ckptdoctor prune --keep-last 3 --abort-uploads 7d s3://bucket/runs/exp1
    """
    # loaded when the command runs: --help stays fast
    from ckptdoctor import api

    asked = api.PruneSettings(
        keep_last=keep_last, keep_best=keep_best, metric=metric, mode=mode, keep_every=keep_every, keep_within=keep_within,
        keep=None if keep is None else tuple(keep), min_age=options.min_age, metrics_file=metrics_file, verify=verify_kept,
        max_runs=max_runs, abort_uploads=abort_uploads,
    )  # fmt: skip
    outcome = carried_out(api.run_prune, api.PruneOptions, paths, options, prune=asked, discard_journal=discard_journal)
    declined(outcome)
    if not outcome.acted and options.human and not options.quiet:
        if options.dry_run:
            say("Dry run: no files were deleted.")
        elif options.output is not None:  # on stdout, the plan's last line has said so
            say("Nothing to delete.")
    _fail_with(outcome.problems, outcome.skipped)
    raise typer.Exit(EXIT_OK)


def _fail_with(problems: tuple[str, ...], skipped: tuple[str, ...]) -> None:
    """Exit 1 naming each entry that could not be deleted and each checkpoint skipped because this
    user cannot read it, once the rest of the work is done."""
    if not problems and not skipped:
        return
    for line in (*problems, *skipped):
        say(f"ckptdoctor: error: {line}")
    if problems:
        say(
            f"ckptdoctor: {len(problems)} entr{'y' if len(problems) == 1 else 'ies'} could not be deleted (above); the rest of the plan "
            "was done, and the next prune tries them again if its policy still deletes them."
        )
    if skipped:
        say(
            f"ckptdoctor: {len(skipped)} checkpoint{'s' if len(skipped) != 1 else ''} this user cannot read {'was' if len(skipped) == 1 else 'were'} "
            "skipped (above); the rest of the plan was done. A prune by this user skips them again: one by a user who can "
            "read them (their owner), or a change of their permissions, deletes them."
        )
    raise typer.Exit(EXIT_FINDINGS)
