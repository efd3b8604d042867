"""``ckptdoctor verify``: read every file whole, statically, and say what is wrong, unsafe or inconsistent."""

from __future__ import annotations

from typing import Annotated

import typer

from ckptdoctor.cli._output import Paths, ReportOptions, emit, reporting, say

DeepFlag = Annotated[
    bool,
    typer.Option("--deep", help="Read every byte: CRC-32 of every zip member, NaN and Inf in every float tensor."),
]
LoadFlag = Annotated[
    bool,
    typer.Option(
        "--load",
        help="Also load each file that passed with torch.load(weights_only=True, mmap=True) or safetensors "
        "(needs the torch extra: pip install 'ckptdoctor[torch]').",
    ),
]
JobsOption = Annotated[
    int,
    typer.Option("--jobs", "-j", min=0, help="Files read at once; 0 means one per CPU core.", show_default="0"),
]


@reporting
def verify(paths: Paths = None, deep: DeepFlag = False, load: LoadFlag = False, jobs: JobsOption = 0, *, options: ReportOptions) -> None:
    """Read every file whole: what inspect does, and more.

    Everything inspect does, plus a full static read of every file: integrity, tensors, pickle safety,
    and consistency between the files of a checkpoint and between checkpoints.

    Nothing from a checkpoint is ever executed: pickles are parsed, never loaded.

    Examples:

    \b
      ckptdoctor verify runs/exp1
      ckptdoctor verify --deep downloads/model.pt
      ckptdoctor verify --json -o verify.json tests/fixtures/checkpoints
    """
    # loaded when the command runs: --help stays fast
    from ckptdoctor.cli._progress import ScanStatus
    from ckptdoctor.pipelines.verify import VerifyOptions
    from ckptdoctor.pipelines.verify import verify as verify_paths

    if load:
        _require_torch()
    with ScanStatus(options.quiet) as status:
        report, found = verify_paths(paths or ["."], VerifyOptions(deep, load, jobs), options.settings.thresholds, status.tally)
    emit(report, options, found.empty)


def _require_torch() -> None:
    # loaded when the command runs: --help stays fast
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        say("ckptdoctor: error: --load needs torch: pip install 'ckptdoctor[torch]'")
        raise typer.Exit(2)
