"""The Python API. ``ckptdoctor.preflight``: the ``diskcheck`` report, for training code to call
before a save.

    report = ckptdoctor.preflight("runs/exp1/checkpoint", keep_last=3)
    if not report.ok:
        raise SystemExit(report.findings[0].message)
"""

from __future__ import annotations

import os

from ckptdoctor.disk import MARGIN, RUNWAY, check
from ckptdoctor.model import Report, Run


def preflight(
    run_dir: str | os.PathLike[str],
    *,
    model_bytes: int | None = None,
    model: str | os.PathLike[str] | None = None,
    optimizer: str | None = None,
    keep_last: int | None = None,
    margin: float = MARGIN,
    runway: int = RUNWAY,
) -> Report:
    """Will the next save into ``run_dir`` fit, and can it be written safely? The same report as
    ``ckptdoctor diskcheck`` (``report.disk``, CKD5xx ``report.findings``; ``report.ok``).

    The next save is estimated from the run's newest complete checkpoints; for a run with none,
    from ``model_bytes`` (or the size of the file ``model``) and the ``optimizer``'s state
    (``adam``, ``adamw``, ``sgd``, ``sgd-momentum``, ``adagrad``, ``rmsprop``, ``lion``,
    ``adafactor``). Raises ``ckptdoctor.disk.EstimateError`` for an unusable model or optimizer,
    and ``ckptdoctor.config.ConfigError`` for a configuration file it cannot use. Role hints
    (``[tool.ckptdoctor.roles]``) come from the configuration nearest ``run_dir``.
    """
    from ckptdoctor.config import settings
    from ckptdoctor.discover import NOT_LOCAL, remote
    from ckptdoctor.layouts import layout_named
    from ckptdoctor.layouts._base import hinted_roles
    from ckptdoctor.rules.disk import findings
    from ckptdoctor.scan import scan

    path = os.fspath(run_dir)
    if remote(path):
        raise ValueError(f"{path} is {NOT_LOCAL}")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise ValueError(f"{path} is not a folder: give the folder the run saves into")
    if model is not None and model_bytes is None:
        if not os.path.isfile(model):
            raise ValueError(f"--model {os.fspath(model)}: not a file")
        model_bytes = os.stat(model).st_size
    # the run's own configuration names its checkpointers' prefixes ([tool.ckptdoctor.roles])
    with hinted_roles(settings(start=path if os.path.isdir(path) else None).roles):
        scanned = scan([path]) if os.path.isdir(path) else None
    runs: tuple[Run, ...] = scanned.runs if scanned else ()
    run = _largest(runs)
    layout = layout_named(run.layout) if run is not None else None
    disk = check(path, run, model_bytes, optimizer, keep_last, margin)
    return Report("diskcheck", runs, findings(disk, run, layout, runway), scanned.errors if scanned else (), disk=disk)


def _largest(runs: tuple[Run, ...]) -> Run | None:
    """The run whose next save is the biggest: the one that decides whether saves fit."""
    with_checkpoints = [run for run in runs if run.checkpoints and not run.single_file]
    if not with_checkpoints:
        return None
    return max(with_checkpoints, key=lambda run: max(c.bytes for c in run.checkpoints))

