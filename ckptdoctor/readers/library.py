"""``verify --load``: load each file that passed the static checks with the library that reads it.

Only here is torch imported. Files are loaded with ``torch.load(weights_only=True)`` (memory-mapped
when the format allows) or the safetensors library, and only when the static pass found nothing
wrong with them: nothing the static pass calls unsafe is ever handed to an unpickler.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ckptdoctor.model import Entry, FileIssue, FileReport, Problem
from ckptdoctor.readers._registry import Library, current

_HARMLESS = frozenset({Problem.LEGACY})
"""Issues that do not stop a file from being loaded."""

_EXPLAINED: tuple[tuple[str, Problem], ...] = (
    ("failed finding central directory", Problem.TRUNCATED),
    ("not a ZIP archive", Problem.TRUNCATED),
    ("incomplete metadata", Problem.TRUNCATED),
    ("Unsupported operand", Problem.UNSAFE_PICKLE),
    ("Unsupported global", Problem.NON_WEIGHTS),
    ("Weights only load failed", Problem.NON_WEIGHTS),
    ("invalid load key", Problem.NOT_A_CHECKPOINT),
    ("header too large", Problem.NOT_A_CHECKPOINT),
)
"""What the libraries say, and the rule that explains it; anything else is a malformed file."""


def load_all(entries: Iterable[Entry], reports: dict[str, FileReport]) -> dict[str, FileReport]:
    """The reports of files that failed to load, with the failure added."""
    # the libraries load only for verify --load
    import torch

    failed: dict[str, FileReport] = {}
    for entry in entries:
        report = reports[entry.os_path]
        spec = current().by_format.get(report.format)
        if spec is None or spec.loaded_by is None or any(i.problem not in _HARMLESS for i in report.issues):
            continue
        error = _load(torch, entry.os_path, spec.loaded_by)
        if error is not None:
            issue = FileIssue(_explain(error), f"loading it fails: {error.splitlines()[0][:300]}")
            failed[entry.os_path] = dataclasses.replace(report, issues=(*report.issues, issue))
    return failed


def _load(torch: object, path: str, library: Library) -> str | None:
    try:
        if library is Library.SAFETENSORS:
            # the libraries load only for verify --load
            from safetensors.torch import load_file

            load_file(path, device="cpu")
        else:
            mmap = library is Library.TORCH_MMAP
            torch.load(path, weights_only=True, mmap=mmap, map_location="cpu")  # type: ignore[attr-defined]
    except Exception as error:  # the libraries raise many types; each becomes a finding
        return f"{type(error).__name__}: {error}"
    return None


def _explain(message: str) -> Problem:
    return next((problem for text, problem in _EXPLAINED if text in message), Problem.MALFORMED)
