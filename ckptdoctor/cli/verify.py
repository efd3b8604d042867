"""``ckptdoctor verify``: read every file whole, statically, and say what is wrong, unsafe or inconsistent."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Annotated

import typer

from ckptdoctor.cli._output import Paths, ReportOptions, emit, reporting, say, stderr_console

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

PROGRESS_AFTER = 1.0
"""Seconds of work after which a progress bar appears (on a terminal only)."""


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
    from ckptdoctor.pipelines.verify import VerifyOptions
    from ckptdoctor.pipelines.verify import verify as verify_paths

    if load:
        _require_torch()
    with _progress_bar(options.quiet) as progress:
        report, found = verify_paths(paths or ["."], VerifyOptions(deep, load, jobs), options.settings.thresholds, progress=progress)
    emit(report, options, found.empty)


def _require_torch() -> None:
    # loaded when the command runs: --help stays fast
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        say("ckptdoctor: error: --load needs torch: pip install 'ckptdoctor[torch]'")
        raise typer.Exit(2)


class _progress_bar:
    """A rich progress bar on stderr, shown only on a terminal and only once the work is long."""

    def __init__(self, quiet: bool) -> None:
        self._enabled = sys.stderr.isatty() and not quiet
        self._started = time.monotonic()
        self._bar: object = None
        self._task: object = None

    def __enter__(self) -> Callable[[int, int], None] | None:
        return self._update if self._enabled else None

    def _update(self, done: int, total: int) -> None:
        # loaded when the command runs: --help stays fast
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

        if self._bar is None:
            if time.monotonic() - self._started < PROGRESS_AFTER or done >= total:
                return
            bar = Progress("verifying", BarColumn(), DownloadColumn(), TimeRemainingColumn(), console=stderr_console(), transient=True)
            bar.start()
            self._bar, self._task = bar, bar.add_task("verify", total=total)
        assert isinstance(self._bar, Progress)
        self._bar.update(self._task, completed=done)  # type: ignore[arg-type]

    def __exit__(self, *exc: object) -> None:
        if self._bar is None:
            return
        # loaded when the command runs: --help stays fast
        from rich.progress import Progress

        assert isinstance(self._bar, Progress)
        self._bar.stop()
