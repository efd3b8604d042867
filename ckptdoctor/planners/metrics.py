"""Metric values per checkpoint (``prune --keep-best``): from a CSV or JSON file of index -> value
given with ``--metrics-file``, else from where the run's framework writes them, which its layout
knows (``Layout.metric_values``: burn's validation logs, HF Trainer's ``log_history``, ``name=value``
pairs in file names for the others). This module does the reading; the layouts say what to read.
"""

from __future__ import annotations

import csv
import json

from ckptdoctor.errors import InvalidValue
from ckptdoctor.layouts.registry import layout_named
from ckptdoctor.model import Run
from ckptdoctor.regular import read_regular

MAX_FILE = 64 * 1024 * 1024


class MetricsError(InvalidValue):
    """A metrics file that cannot be read."""


def metric_values(run: Run, root: str, metric: str, metrics_file: str | None = None) -> dict[int, float]:
    """Index -> value of ``metric`` for the run's checkpoints; empty when nothing records it."""
    if metrics_file:
        return _from_file(metrics_file)
    return layout_named(run.layout).metric_values(run, root, metric, _read)


def _read(path: str) -> bytes | None:
    """A metrics file a layout names, whole; None where it cannot be read (that checkpoint has no value)."""
    try:
        return read_regular(path, MAX_FILE)
    except OSError:
        return None


def _from_file(path: str) -> dict[int, float]:
    """CSV (``index,value`` rows, a header allowed) or JSON (``{"3": 0.21}`` or ``[{"index": 3, "value": 0.21}]``)."""
    try:
        text = read_regular(path, MAX_FILE).decode("utf-8")
    except OSError as error:
        raise MetricsError(f"cannot read {path}: {error.strerror}") from error
    except UnicodeDecodeError as error:
        raise MetricsError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start})") from error
    try:
        if text.lstrip().startswith(("{", "[")):
            document = json.loads(text)
            rows = document.items() if isinstance(document, dict) else ((r["index"], r["value"]) for r in document)
            return {int(index): float(value) for index, value in rows}
        values: dict[int, float] = {}
        for row in csv.reader(text.splitlines()):
            if len(row) >= 2 and row[0].strip().lstrip("-").isdigit():
                values[int(row[0])] = float(row[1])
        return values
    except (ValueError, KeyError, TypeError) as error:
        raise MetricsError(f"{path} is not a CSV or JSON file of index -> value ({error})") from error
