"""``ckptdoctor verify``: read every file whole, statically, and say what is wrong, unsafe or inconsistent."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from ckptdoctor.cli._errors import say
from ckptdoctor.cli._output import EXIT_USAGE, Paths, ReportOptions, emit, number, reporting
from ckptdoctor.render import HUMAN, JSON

if TYPE_CHECKING:
    from ckptdoctor.api import Scanned
    from ckptdoctor.cli._progress import ScanStatus

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
YesFlag = Annotated[bool, typer.Option("--yes", "-y", help="Download from object stores above --max-download without asking.")]
MaxDownloadOption = Annotated[
    str | None,
    typer.Option(
        "--max-download",
        help="Bytes read from object stores without asking, e.g. 20GiB (default: 1GiB; max-download in the config; "
        "CKPTDOCTOR_MAX_DOWNLOAD).",
        metavar="SIZE",
        show_default=False,
    ),
]
ResumeFlag = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Read only the files of the checkpoint inspect --resume names, whole, and print its index as inspect does; "
        "exit 1, printing nothing, where a file it needs is unsafe or damaged (an older one is printed only if it verifies); "
        "with --json, the object inspect --resume --json prints.",
    ),
]
ResumePathFlag = Annotated[
    bool,
    typer.Option(
        "--resume-path",
        help="As --resume, printing the path inspect --resume-path prints: for job scripts that resume from it.",
    ),
]
RayOption = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        show_default=False,
        help="With --deep: the byte ranges it reads go to tasks on the Ray cluster at ADDRESS (HOST:PORT), each reading "
        "its range itself; auto: RAY_ADDRESS, else the cluster on this machine; off: read here (ray in the config; "
        "CKPTDOCTOR_RAY). Local files must be on a filesystem every node mounts at the same path. "
        "Needs pip install 'ckptdoctor[ray]'.",
    ),
]
JobsOption = Annotated[
    int,
    typer.Option(
        "--jobs", "-j", parser=number(int, 0), metavar="N", help="Files read at once; 0 means one per CPU core.", show_default="0"
    ),
]


@reporting
def verify(
    paths: Paths = None,
    deep: DeepFlag = False,
    load: LoadFlag = False,
    jobs: JobsOption = 0,
    yes: YesFlag = False,
    max_download: MaxDownloadOption = None,
    resume: ResumeFlag = False,
    resume_path: ResumePathFlag = False,
    ray: RayOption = None,
    *,
    options: ReportOptions,
) -> None:
    """Read every file whole: what inspect does, and more.

    Everything inspect does, plus a full static read of every file: integrity, tensors, pickle safety,
    and consistency between the files of a checkpoint and between checkpoints.

    Nothing from a checkpoint is ever executed: pickles are parsed, never loaded.

    Examples:

    \b
      ckptdoctor verify runs/exp1
      ckptdoctor verify --deep downloads/model.pt
      ckptdoctor verify --json -o verify.json tests/fixtures/checkpoints
      ckptdoctor verify s3://bucket/runs/exp1 --max-download 50GiB
      path=$(ckptdoctor verify --resume-path out) && python train.py --resume_from_checkpoint "$path"
    """
    # loaded when the command runs: --help stays fast
    from ckptdoctor import api
    from ckptdoctor.cli._progress import ScanStatus

    if resume and resume_path:
        say("ckptdoctor: error: --resume and --resume-path print one thing each: pass one of them")
        raise typer.Exit(EXIT_USAGE)
    if load:
        _require_torch()
    if ray not in (None, "off") and not deep:
        say("ckptdoctor: error: --ray fans out what --deep reads: pass --deep too")
        raise typer.Exit(EXIT_USAGE)
    limit = api.parse_size(max_download, "--max-download") if max_download is not None else options.settings.max_download
    with ScanStatus(options.quiet) as status:
        asked = api.VerifyOptions(
            tuple(paths or ["."]), settings=options.settings, select=options.select, ignore=options.ignore, tally=status.tally,
            deep=deep, load=load, jobs=jobs, resume=resume or resume_path, ray=ray,
        )  # fmt: skip
        fanned = asked.cluster(options.settings) is not None
        asked = dataclasses.replace(asked, download=_download_asker(limit, yes, options, status, fanned))
        scanned = api.run_verify(asked)
    if resume or resume_path:
        _print_verified_resume(scanned, "--resume-path" if resume_path else "--resume", paths or ["."], options.format == JSON)
    emit(scanned.report, options, scanned.empty)


def _print_verified_resume(scanned: Scanned, flag: str, given: list[str], as_json: bool) -> None:
    """``inspect``'s resume answer for the checkpoint that verified; where none did, the
    damage and dangers found in the files read (on stderr), and exit 1 with nothing on stdout."""
    # loaded when the command runs: --help stays fast
    from ckptdoctor.api import RESUME_TRIES, Severity, find_rule
    from ckptdoctor.cli.inspect import print_resume

    report = scanned.report
    if not report.errors and not any(run.resume for run in report.runs):
        for finding in report.findings:
            rule = find_rule(finding.code)
            if finding.severity is Severity.ERROR and rule is not None and rule.family in FILE_FAMILIES:
                say(f"ckptdoctor: {finding.code} {finding.path or finding.run}: {finding.message}")
    unverified = (
        f" that verifies: the newest complete checkpoint is read whole and, where it is damaged, up to {RESUME_TRIES - 1} "
        "older ones in turn, none older than a file that would run code, and none where a pointer leads out of the run"
    )
    print_resume(scanned, flag, given, unverified, as_json=as_json)


FILE_FAMILIES = (200, 400)
"""Rule families of what a whole read finds in a file: the damage (2xx) and danger (4xx) said
where ``verify --resume`` names no checkpoint."""


def _download_asker(limit: int, yes: bool, options: ReportOptions, status: ScanStatus, fanned: bool) -> Callable[[int, int], bool]:
    """What ``verify`` asks before reading objects from a store whole: it says the most the
    command will have received from the store in all (the headers it read to find them, then
    each object whole, once), and above ``limit`` goes on only with --yes or the user's yes on a
    terminal. ``fanned`` (``--ray``): the cluster reads the bytes of tensors and zip members, and
    this machine less than that most, which is still the bound: what is read here depends on
    each file's layout, known only once it is read."""
    # loaded when the command runs: --help stays fast
    from ckptdoctor.api import size
    from ckptdoctor.cli._acting import ask

    def answer(count: int, total: int) -> bool:
        status.stop()
        what = f"{count:,} object{'s' if count != 1 else ''} from the store: at most {size(total)} ({total:,} bytes) in all, headers included (each whole, once{'; under --ray the cluster reads their tensors, and this machine less' if fanned else ''})"
        if total <= limit or yes:
            if not options.quiet:
                say(f"Reading {what}.")
            return True
        if options.format == HUMAN and sys.stdin.isatty():
            return ask(f"About to download {what} (over --max-download {size(limit)}; egress may be billed). Go ahead?")
        say(f"ckptdoctor: error: verify would download {what}, over --max-download {size(limit)}: pass --yes, or a larger --max-download")
        raise typer.Exit(EXIT_USAGE)

    return answer


def _require_torch() -> None:
    # loaded when the command runs: --help stays fast
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        say("ckptdoctor: error: --load needs torch: pip install 'ckptdoctor[torch]'")
        raise typer.Exit(2)
