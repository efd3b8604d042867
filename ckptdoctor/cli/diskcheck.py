"""``ckptdoctor diskcheck``: will the next save fit, how many more will, and can this folder take them?"""

from __future__ import annotations

import math
from typing import Annotated

import typer

from ckptdoctor.cli._errors import say
from ckptdoctor.cli._output import EXIT_USAGE, ReportOptions, emit, number, reporting

Folder = Annotated[
    str, typer.Argument(help="The run's checkpoint folder (it need not exist yet), or its URL (s3://bucket/run).", show_default=".")
]
ModelBytes = Annotated[
    str | None,
    typer.Option(
        "--model-bytes",
        help="The model's size (1.5GiB, 800MiB, or bytes), with --optimizer: sizes the next save, even for a run that has saved.",
        metavar="SIZE",
    ),
]
ModelFile = Annotated[
    str | None,
    typer.Option("--model", help="A saved model whose size to use as --model-bytes (with --optimizer).", metavar="FILE"),
]
Optimizer = Annotated[
    str | None,
    typer.Option(
        "--optimizer",
        help="With --model or --model-bytes: adam, adamw, sgd, sgd-momentum, adagrad, rmsprop, lion or adafactor.",
        metavar="KIND",
    ),
]
KeepLast = Annotated[
    int | None,
    typer.Option(
        "--keep-last", parser=number(int, 1), help="The run's retention (default: [tool.ckptdoctor.prune] keep-last, if set).", metavar="N"
    ),
]
Margin = Annotated[
    float, typer.Option("--margin", parser=number(float), metavar="FRACTION", help="Headroom on top of the estimate, as a fraction.")
]
Runway = Annotated[int, typer.Option("--runway", parser=number(int, 1), help="Warn (CKD502) when fewer saves than this fit.", metavar="N")]


@reporting
def diskcheck(
    path: Folder = ".",
    model_bytes: ModelBytes = None,
    model: ModelFile = None,
    optimizer: Optimizer = None,
    keep_last: KeepLast = None,
    margin: Margin = 0.10,
    runway: Runway = 3,
    *,
    options: ReportOptions,
) -> None:
    """Check that the next save fits, before a job or from cron.

    Will the next save fit, how many more will under the run's retention, and is the folder a safe
    place to save (writable, enough inodes, not a network filesystem)? Exit 1 when the next save does not fit or cannot be written.

    A run in a bucket (s3://, gs://, az://) has no free space to read: a probe object is created
    and deleted under its .ckptdoctor/ prefix, the permissions the other commands need are tried,
    and its growth per save and per month, and the bucket's lifecycle rules, are reported.

    The next save is the model's size plus the optimizer's state where --model or --model-bytes
    (and --optimizer) give them, even for a run that has saved (a bigger model next: the line says
    what the run's saves measure too); else the largest of the run's last 3 complete checkpoints.

    Examples:

    \b
      ckptdoctor diskcheck runs/exp1/checkpoint --keep-last 3
      ckptdoctor diskcheck /scratch/new-run --model-bytes 7GiB --optimizer adamw
      ckptdoctor diskcheck s3://my-bucket/runs/exp1 --keep-last 3
    """
    # loaded when the command runs: --help stays fast
    from ckptdoctor import api

    if not math.isfinite(margin) or not 0 <= margin <= api.MAX_MARGIN:
        say(f"ckptdoctor: error: --margin must be a fraction between 0 and {api.MAX_MARGIN:g}, not {margin}")
        raise typer.Exit(EXIT_USAGE)
    # the run's settings (its retention, roles, trusted globals) are those of --config, else the
    # configuration nearest the run, not the working folder's: cron runs it from anywhere
    asked = api.DiskcheckOptions(
        (path,), config=options.config, select=options.select, ignore=options.ignore,
        model_bytes=api.parse_size(model_bytes, "--model-bytes") if model_bytes is not None else None, model=model,
        optimizer=optimizer.lower() if optimizer else None, keep_last=keep_last, margin=margin, runway=runway,
    )  # fmt: skip
    emit(api.run_diskcheck(asked), options)
