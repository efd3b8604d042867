"""What both callbacks share: sizing a model and its optimizer without importing torch, and the
words that explain why training stopped."""

from __future__ import annotations

from typing import Any

from ckptdoctor.model import Finding, Report, Severity

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


def parameter_bytes(model: Any) -> int:
    """Bytes of a torch module's parameters (duck-typed: no torch import here)."""
    return sum(int(p.numel()) * int(p.element_size()) for p in model.parameters())


def optimizer_kind(optimizer: Any) -> str | None:
    """``adamw``, ``sgd-momentum``, … for a torch optimizer (or a wrapper holding one), or None."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate / Lightning wrappers
    name = type(inner).__name__.lower()
    if name == "sgd":
        groups = getattr(inner, "param_groups", [{}])
        return "sgd-momentum" if any(group.get("momentum", 0) for group in groups) else "sgd"
    return _OPTIMIZER_NAMES.get(name)


def blocking(report: Report) -> Finding | None:
    """The finding that stops training: an error (the save does not fit, or cannot be written)."""
    return next((f for f in report.findings if f.severity is Severity.ERROR), None)


def explain(finding: Finding) -> str:
    """The finding and its fixes, for a training log."""
    lines = [f"ckptdoctor stopped training before a save: {finding.code} {finding.name}: {finding.message}"]
    lines += [f"  fix: {fix}" for fix in finding.fixes[:3]]
    lines.append(f"  more: ckptdoctor rules {finding.code}")
    return "\n".join(lines)
