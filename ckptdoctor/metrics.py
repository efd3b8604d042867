"""Metric values per checkpoint, from where each framework writes them (``prune --keep-best``).

burn: ``<artifact>/valid/epoch-N/<Metric>.log`` (last line ``"<v>,final"``, else the mean of the
lines, weighted by their counts); HF Trainer: ``trainer_state.json``'s ``log_history``; Lightning:
``name=value`` pairs in checkpoint file names (``epoch=3-val_loss=0.21.ckpt``); anything else: a
CSV or JSON file of index -> value given with ``--metrics-file``.
"""

from __future__ import annotations

import csv
import json
import os
import re

from ckptdoctor.model import Role, Run
from ckptdoctor.regular import read_regular

_PAIR = re.compile(r"(?:^|[-_])([A-Za-z][\w/]*?)=(-?\d+(?:\.\d+)?(?:e-?\d+)?)", re.IGNORECASE)
MAX_FILE = 64 * 1024 * 1024


class MetricsError(ValueError):
    """A metrics file that cannot be read."""


def metric_values(run: Run, root: str, metric: str, metrics_file: str | None = None) -> dict[int, float]:
    """Index -> value of ``metric`` for the run's checkpoints; empty when nothing records it."""
    if metrics_file:
        return _from_file(metrics_file)
    if run.layout == "burn":
        return _burn(run, root, metric)
    if run.layout == "hf-trainer":
        return _hf(run, metric)
    return _from_names(run, metric)


def _burn(run: Run, root: str, metric: str) -> dict[int, float]:
    """burn logs beside its ``checkpoint/`` folder: ``valid/epoch-N/<Metric>.log``."""
    values: dict[int, float] = {}
    for checkpoint in run.checkpoints:
        path = os.path.join(os.path.dirname(root), "valid", f"epoch-{checkpoint.index}", f"{metric}.log")
        value = _burn_log(path)
        if value is not None:
            values[checkpoint.index] = value
    return values


def _burn_log(path: str) -> float | None:
    try:
        lines = [line.strip() for line in read_regular(path, MAX_FILE).decode("utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError):
        return None
    try:
        if lines and lines[-1].endswith(",final"):
            return float(lines[-1].split(",")[0])
        total = weight = 0.0
        for line in lines:
            value, _, count = line.partition(",")
            n = float(count) if count else 1.0
            total += float(value) * n
            weight += n
    except ValueError:
        return None
    return total / weight if weight else None


def _hf(run: Run, metric: str) -> dict[int, float]:
    """The newest ``trainer_state.json`` holds the whole ``log_history``: eval rows by step."""
    for checkpoint in reversed(run.checkpoints):
        for file in checkpoint.files_for(Role.TRAINER_STATE):
            try:
                history = json.loads(read_regular(file.entry.os_path, MAX_FILE)).get("log_history", [])
            except (OSError, ValueError, AttributeError):
                continue
            names = (metric, f"eval_{metric}") if not metric.startswith("eval_") else (metric,)
            values: dict[int, float] = {}
            for row in history if isinstance(history, list) else []:
                if not isinstance(row, dict) or not isinstance(row.get("step"), int):
                    continue
                value = next((row[n] for n in names if isinstance(row.get(n), (int, float))), None)
                if value is not None:
                    values[row["step"]] = float(value)
            return values
    return {}


def _from_names(run: Run, metric: str) -> dict[int, float]:
    """``name=value`` in file names, as Lightning's ``filename`` templates write them."""
    values: dict[int, float] = {}
    wanted = metric.replace("/", "_")
    for checkpoint in run.checkpoints:
        for file in checkpoint.files:
            stem = file.name.rsplit(".", 1)[0]
            for name, value in _PAIR.findall(stem):
                if name.replace("/", "_") == wanted:
                    values[checkpoint.index] = float(value)
    return values


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
