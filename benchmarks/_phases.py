"""Where one in-process ``inspect --format json`` spends its time, phase by phase.

Each phase is a function of the pipeline wrapped with an exclusive timer: time spent in a phase
nested inside another (the reads grouping asks for) counts for the inner one only. Work done in
forked workers shows as the time the parent waits for it. A function the pipeline no longer has
is named under the table, not hooked: the breakdown then shows less, and says so.

    python benchmarks/_phases.py DIR
"""

from __future__ import annotations

import functools
import importlib
import io
import os
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


# (phase, module, attribute): the attribute is replaced where the pipeline looks it up (a
# `from m import f` binds its own name: `emit` is looked up in cli/inspect.py, not cli/_output.py)
PHASES = (
    ("listing and stat", "ckptdoctor.pipelines.scan", "discover"),
    ("grouping", "ckptdoctor.layouts.registry", "find_run"),
    ("name claims", "ckptdoctor.layouts.registry", "claim_all"),
    ("reading and judging", "ckptdoctor.layouts.folders", "probe_batch"),
    ("reading and judging", "ckptdoctor.layouts.registry", "probe_batch"),
    ("reading and judging", "ckptdoctor.readers.files", "probe_many"),
    ("reading and judging", "ckptdoctor.layouts.grouping", "with_keys"),
    ("reading and judging", "ckptdoctor.layouts.copies", "with_keys"),
    ("rules", "ckptdoctor.rules.registry", "check"),
    ("JSON: building", "ckptdoctor.render.json", "document"),
    ("JSON: encoding and writing", "ckptdoctor.cli.inspect", "emit"),
)


class _Exited(BaseException):
    """``os._exit`` called by the command: the process must live on to print the table."""


_real_exit, _measured = os._exit, os.getpid()


def _exit(code: int) -> None:
    if os.getpid() != _measured:  # a forked worker ends as it would have
        _real_exit(code)
    raise _Exited(code)


def phases(folder: str) -> tuple[dict[str, float], float, list[str]]:
    """Seconds per phase of one ``inspect --format json folder``, the whole, and the hooks missing."""
    missing = []
    for phase, module, attribute in PHASES:
        try:
            owner = importlib.import_module(module)
        except ModuleNotFoundError:
            owner = None
        if owner is not None and hasattr(owner, attribute):
            setattr(owner, attribute, _timed(phase, getattr(owner, attribute)))
        else:
            missing.append(f"{module}.{attribute} ({phase})")
    from ckptdoctor.cli import main

    os._exit = _exit  # type: ignore[assignment]  # a command that ends with os._exit ends here

    argv, stdout, fd = sys.argv, sys.stdout, os.dup(1)
    sys.argv, sys.stdout = ["ckptdoctor", "inspect", "--format", "json", folder], io.TextIOWrapper(io.BytesIO())
    with open(os.devnull, "wb") as null:  # for output written to the descriptor, past sys.stdout
        os.dup2(null.fileno(), 1)
    started = time.perf_counter()
    try:
        main()
    except (SystemExit, _Exited):
        pass
    finally:
        whole = time.perf_counter() - started
        os.dup2(fd, 1)
        os.close(fd)
        sys.argv, sys.stdout = argv, stdout
    return dict(_spent), whole, missing


def main() -> None:
    spent, whole, missing = phases(sys.argv[1])
    for phase, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"  {phase:<28} {seconds:7.3f} s  {seconds / whole:5.1%}")
    rest = whole - sum(spent.values())
    print(f"  {'other':<28} {rest:7.3f} s  {rest / whole:5.1%}")
    print(f"  {'whole, in process':<28} {whole:7.3f} s")
    for hook in missing:
        print(f"  not hooked, no such function: {hook}")


if __name__ == "__main__":
    main()
