"""Where one in-process ``inspect --format json`` spends its time, phase by phase.

Each phase is a function of the pipeline wrapped with an exclusive timer: time spent in a phase
nested inside another (the reads grouping asks for) counts for the inner one only. Work done in
forked workers shows as the time the parent waits for it.

    python benchmarks/_phases.py DIR
"""

from __future__ import annotations

import functools
import io
import sys
import time
from collections.abc import Callable
from typing import Any

_spent: dict[str, float] = {}
_stack: list[list[float]] = []  # per active phase: [started, time spent in nested phases]


def _timed(phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        frame = [time.perf_counter(), 0.0]
        _stack.append(frame)
        try:
            return function(*args, **kwargs)
        finally:
            _stack.pop()
            total = time.perf_counter() - frame[0]
            _spent[phase] = _spent.get(phase, 0.0) + total - frame[1]
            if _stack:
                _stack[-1][1] += total

    return wrapper


# (phase, module, attribute): the attribute is replaced where the pipeline looks it up
PHASES = (
    ("listing and stat", "ckptdoctor.pipelines.scan", "discover"),
    ("grouping", "ckptdoctor.pipelines.scan", "find_run"),
    ("name claims", "ckptdoctor.layouts.registry", "claim_all"),
    ("name claims", "ckptdoctor.layouts._base", "claim_all"),
    ("reading and judging", "ckptdoctor.layouts._base", "probe_batch"),
    ("reading and judging", "ckptdoctor.layouts.registry", "probe_batch"),
    ("reading and judging", "ckptdoctor.pipelines.scan", "probe"),
    ("reading and judging", "ckptdoctor.layouts._base", "with_keys"),
    ("rules", "ckptdoctor.pipelines.scan", "check"),
    ("JSON: building", "ckptdoctor.render.json", "document"),
    ("JSON: encoding and writing", "ckptdoctor.cli._output", "emit"),
)


def phases(folder: str) -> tuple[dict[str, float], float]:
    """Seconds per phase of one ``inspect --format json folder``, and the whole."""
    import importlib

    for phase, module, attribute in PHASES:
        owner = importlib.import_module(module)
        setattr(owner, attribute, _timed(phase, getattr(owner, attribute)))
    from ckptdoctor.cli import main

    argv, stdout = sys.argv, sys.stdout
    sys.argv, sys.stdout = ["ckptdoctor", "inspect", "--format", "json", folder], io.TextIOWrapper(io.BytesIO())
    started = time.perf_counter()
    try:
        main()
    except SystemExit:
        pass
    finally:
        whole = time.perf_counter() - started
        sys.argv, sys.stdout = argv, stdout
    return dict(_spent), whole


def main() -> None:
    spent, whole = phases(sys.argv[1])
    for phase, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"  {phase:<28} {seconds:7.3f} s  {seconds / whole:5.1%}")
    rest = whole - sum(spent.values())
    print(f"  {'other':<28} {rest:7.3f} s  {rest / whole:5.1%}")
    print(f"  {'whole, in process':<28} {whole:7.3f} s")


if __name__ == "__main__":
    main()
