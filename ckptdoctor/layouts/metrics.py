"""Where a run's metrics are when its framework keeps none of its own (``name=value`` in file
names), and the JSON-lines logs some frameworks write them to (``Layout.metric_values``).
"""

from __future__ import annotations

import json
import re

from ckptdoctor.model import Run

_METRIC_PAIR = re.compile(r"(?:^|[-_])([A-Za-z][\w/]*?)=(-?[0-9]+(?:\.[0-9]+)?(?:e-?[0-9]+)?)", re.IGNORECASE)


def values_in_names(run: Run, metric: str) -> dict[int, float]:
    """``name=value`` in file names, as Lightning's ``filename`` templates write them
    (``epoch=3-val_loss=0.21.ckpt``): where a framework keeps no metrics of its own, a loop may."""
    values: dict[int, float] = {}
    wanted = metric.replace("/", "_")
    for checkpoint in run.checkpoints:
        names = [checkpoint.folder.name] if checkpoint.folder is not None else []
        for stem in (name.rsplit(".", 1)[0] for name in (*names, *(file.name for file in checkpoint.files))):
            for name, value in _METRIC_PAIR.findall(stem):
                if name.replace("/", "_") == wanted:
                    values[checkpoint.index] = float(value)
    return values


def logged_values(data: bytes | None, metric: str, index: str, unless: str | None = None) -> dict[int, float]:
    """``metric`` by ``index`` from a JSON-lines log (mmengine's ``vis_data/scalars.json``,
    Detectron2's ``metrics.json``), from the rows that hold no ``unless`` key (training rows,
    where evaluation rows are wanted). An index logged twice with two values is left out: the
    log does not say which one a checkpoint of that index saw (mmengine logs evaluations of
    iteration-based runs under epoch 0)."""
    values: dict[int, float] = {}
    clashes: set[int] = set()
    try:
        lines = data.decode("utf-8").splitlines() if data is not None else []
    except UnicodeDecodeError:
        return {}
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill, or not JSON
        if not isinstance(row, dict) or (unless is not None and unless in row):
            continue
        step, value = row.get(index), row.get(metric)
        if type(step) is not int or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if step in values and values[step] != value:
            clashes.add(step)
        values[step] = float(value)
    return {step: value for step, value in values.items() if step not in clashes}
