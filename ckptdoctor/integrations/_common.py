"""What both callbacks share: sizing a model and its optimizer without importing torch, the
preflight call that never breaks training, the words that explain why training stopped, and the
error that ends ``train()`` / ``fit()`` after such a stop."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from ckptdoctor.errors import RefusedError
from ckptdoctor.model import Finding, Report, Severity

log = logging.getLogger("ckptdoctor")

_OPTIMIZER_NAMES = {
    "adam": "adam",
    "adamw": "adamw",
    "fusedadam": "adam",
    "deepspeedcpuadam": "adam",
    "adam8bit": "adam",
    "adamw8bit": "adamw",
    "adagrad": "adagrad",
    "rmsprop": "rmsprop",
    "lion": "lion",
    "adafactor": "adafactor",
}
UNKNOWN_OPTIMIZER = "adamw"
"""What an optimizer ckptdoctor does not know (NAdam, RAdam, a custom one) is sized as: two
buffers per parameter, as most adaptive optimizers keep."""


def parameter_bytes(model: Any) -> int:
    """Bytes of a torch module's parameters (duck-typed: no torch import here)."""
    return sum(int(p.numel()) * int(p.element_size()) for p in model.parameters())


def optimizer_kind(optimizer: Any) -> str:
    """``adamw``, ``sgd-momentum``, … for a torch optimizer (or a wrapper holding one)."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate / Lightning wrappers
    name = type(inner).__name__.lower()
    if name == "sgd":
        groups = getattr(inner, "param_groups", [{}])
        return "sgd-momentum" if any(group.get("momentum", 0) for group in groups) else "sgd"
    return _OPTIMIZER_NAMES.get(name, UNKNOWN_OPTIMIZER)


@dataclass(frozen=True)
class Judge:
    """One save's preflight, as a callback asks it."""

    margin: float
    keep_last: int | None

    def preflight(self, folder: str | os.PathLike[str], model: Any, optimizer: Any) -> Report | None:
        """The report for a save into ``folder`` of ``model`` with ``optimizer``'s state (None:
        weights only). None when it cannot be made: a callback never breaks training."""
        # loaded when the callback first runs: importing it costs a trainer nothing
        from ckptdoctor.api import preflight
        from ckptdoctor.planners.space import EstimateError
        from ckptdoctor.stores.session import StoreError

        try:
            return preflight(
                folder,
                model_bytes=parameter_bytes(model) if model is not None else None,
                optimizer=optimizer_kind(optimizer) if optimizer is not None else "sgd",
                keep_last=self.keep_last,
                margin=self.margin,
            )
        except (EstimateError, OSError, ValueError, StoreError) as error:  # StoreError: a bucket that cannot be reached
            log.warning("ckptdoctor could not check the disk before this save: %s", error)
            return None

    def blocking(self, report: Report | None) -> Finding | None:
        """The finding that stops training: an error (the save does not fit, or cannot be written)."""
        if report is None:
            return None
        return next((f for f in report.findings if f.severity is Severity.ERROR), None)

    def staging(self, report: Report | None, folder: str, why: str) -> Finding | None:
        """CKD501 when the save is first written whole to ``folder`` (another volume) and does not fit there."""
        # loaded when the callback first runs: importing it costs a trainer nothing
        from ckptdoctor.planners.space import volume
        from ckptdoctor.rules.disk import staging_space

        disk = report.disk if report is not None else None
        if disk is None or disk.estimate is None or disk.volume is None:
            return None
        try:
            there = volume(folder)
        except OSError:
            return None
        if there.mountpoint == disk.volume.mountpoint or there.free_bytes >= disk.needed_bytes:
            return None
        return staging_space(disk, folder, there.free_bytes, why)


class DiskCheckFailed(RefusedError):
    """What ``train()`` / ``fit()`` raise when a callback stopped training before a save that would
    not fit or could not be written: a script that does not catch it ends with exit status 1 (as
    ``ckptdoctor diskcheck`` with findings does), so a pipeline sees the failure. Raised once the
    trainer has stopped, after every checkpoint already saved was left whole. ``finding``: why."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(explain(finding))
        self.finding = finding


class Watch:
    """What both callbacks keep: their settings, the last report, and why training stopped."""

    def __init__(self, keep_last: int | None = None, margin: float = 0.10, raise_on_stop: bool = True) -> None:
        super().__init__()
        self.keep_last = keep_last
        """Retention to project the runway with (default: the trainer's own)."""
        self.raise_on_stop = raise_on_stop
        """Whether training that was stopped ends in ``DiskCheckFailed`` (else it returns normally,
        and only ``.stopped`` and the log say why)."""
        self.margin = margin
        self.report: Report | None = None
        """The last preflight report (rank 0)."""
        self.stopped: Finding | None = None
        """Why training was stopped, if it was."""

    def judge(self, trainer_keep_last: int | None) -> Judge:
        return Judge(self.margin, self.keep_last if self.keep_last is not None else trainer_keep_last)

    def stop(self, finding: Finding, rank_zero: bool) -> None:
        self.stopped = finding
        if rank_zero:
            log.error(explain(finding))

    def fail_if_stopped(self) -> None:
        """At the end of training (every rank): a training stopped for the disk is a failure, not
        a success that a pipeline would carry on from."""
        if self.stopped is not None and self.raise_on_stop:
            raise DiskCheckFailed(self.stopped)


def explain(finding: Finding) -> str:
    """The finding and its fixes, for a training log."""
    lines = [f"ckptdoctor stopped training before a save: {finding.code} {finding.name}: {finding.message}"]
    lines += [f"  fix: {fix}" for fix in finding.fixes[:3]]
    lines.append(f"  more: ckptdoctor rules {finding.code}")
    return "\n".join(lines)
