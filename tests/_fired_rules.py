"""A pytest plugin that holds the rule registry to its word, over every test.

- Every finding comes from a check that declares its rule. Findings are made in one place
  (``rules.context.make_finding`` builds each ``Finding``); for the session the plugin wraps
  that construction, looks down the call stack for the nearest check of ``rules.CHECKS`` (a
  check's own frame is on the stack while it makes a finding, generators included) and records
  the rule's code. A finding of a rule its check does not declare, or one made outside every
  check, fails the test that made it, at its teardown.
- Every rule of the table is fired by some test. When the whole suite ran and passed, a rule
  that no check fired fails the session with the list of such rules. A part of the suite (`-k`,
  `-m`, a file or test id, `--lf`, `--deselect`, `--ignore`) fires only part of the table, so
  the check is left out there.

Findings made in a child process (tests that run the CLI as a subprocess) are not seen: some
in-process test must fire each rule. Under pytest-xdist each worker hands what it saw (the codes
fired, whether it deselected anything) to the controller, which judges the whole session.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from ckptdoctor.model import Finding
from ckptdoctor.rules import context
from ckptdoctor.rules.registry import CHECKS, RULES, Check

_BY_CODE_OBJECT = {check.run.__code__: check for check in CHECKS}
FIRED: set[str] = set()
"""Codes of the rules fired in this session."""
_WRONG: list[str] = []
"""Findings made against the registry and not yet reported."""
_PATCH = pytest.MonkeyPatch()
_deselected = False


def check_of(frame: FrameType | None) -> Check[..., object] | None:
    """The nearest check of ``rules.CHECKS`` on the stack from ``frame`` down."""
    while frame is not None:
        check = _BY_CODE_OBJECT.get(frame.f_code)
        if check is not None:
            return check
        frame = frame.f_back
    return None


def broken_promise(code: str, check: Check[..., object] | None, where: str) -> str | None:
    """Why a finding of rule ``code`` breaks the registry, made by ``check`` (None: made outside
    every check) at ``where``; None when its check declares it."""
    if check is None:
        return f"{code} was made in {where}, outside every check of rules.CHECKS (declare it with @fires)"
    if code not in {rule.code for rule in check.fires}:
        declared = ", ".join(sorted(rule.code for rule in check.fires))
        return f"{code} was fired by {check.name}, which declares only {declared} (add it to its @fires)"
    return None


def unfired(fired: set[str]) -> list[str]:
    """The rules of the table that no check fired, as ``CODE name``."""
    return [f"{rule.code} {rule.name}" for rule in RULES if rule.code not in fired]


def _maker(frame: FrameType | None) -> str:
    """The function that asked ``rules.context`` for a finding."""
    while frame is not None and frame.f_globals.get("__name__") == context.__name__:
        frame = frame.f_back
    return frame.f_code.co_name if frame is not None else "?"


def _recording_finding(**fields: Any) -> Finding:
    finding = Finding(**fields)
    caller = sys._getframe(1)
    FIRED.add(finding.code)
    wrong = broken_promise(finding.code, check_of(caller), _maker(caller))
    if wrong is not None:
        _WRONG.append(wrong)
    return finding


def pytest_configure(config: pytest.Config) -> None:
    _PATCH.setattr(context, "Finding", _recording_finding)


def pytest_unconfigure(config: pytest.Config) -> None:
    _PATCH.undo()


@pytest.fixture(autouse=True)
def _checks_fire_what_they_declare() -> Iterator[None]:
    before = len(_WRONG)
    yield
    wrong = _WRONG[before:]
    del _WRONG[before:]
    if wrong:
        pytest.fail(_BROKEN + "\n".join(sorted(set(wrong))), pytrace=False)


_BROKEN = "a finding broke the rule registry:\n"


def pytest_deselected(items: list[pytest.Item]) -> None:
    global _deselected
    _deselected = _deselected or bool(items)


def whole_suite(config: pytest.Config) -> bool:
    """Whether this session collected every test: each of ``testpaths`` named whole, nothing
    chosen by keyword, mark, last failure or id, nothing ignored or deselected."""
    option = config.option
    if (
        _deselected
        or option.collectonly
        or option.keyword
        or option.markexpr
        or getattr(option, "lf", False)
        or getattr(option, "stepwise", False)
    ):
        return False
    if option.ignore or option.ignore_glob or option.deselect:
        return False
    given = [Path(config.invocation_params.dir, arg).resolve() for arg in config.args if "::" not in arg]
    if len(given) != len(config.args):
        return False
    wanted = [Path(config.rootpath, path).resolve() for path in config.getini("testpaths")] or [config.rootpath]
    return all(any(path == root or path.is_relative_to(root) for root in given) for path in wanted)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """An xdist worker finished: take what it saw into the controller's session."""
    global _deselected
    seen = getattr(node, "workeroutput", {})
    FIRED.update(seen.get(_FIRED_KEY, ()))
    _deselected = _deselected or bool(seen.get(_DESELECTED_KEY))


_FIRED_KEY = "ckptdoctor_fired_rules"
_DESELECTED_KEY = "ckptdoctor_deselected"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # findings a fixture wider than one test made, outside every test's window
    if _WRONG:
        _fail(session, "findings against the rule registry", _BROKEN, sorted(set(_WRONG)))
    if _is_worker(session.config):
        # a worker ran part of the suite: the controller judges the whole (pytest_testnodedown)
        session.config.workeroutput.update({_FIRED_KEY: sorted(FIRED), _DESELECTED_KEY: _deselected})
        return
    if exitstatus == pytest.ExitCode.OK and whole_suite(session.config) and (never := unfired(FIRED)):
        why = "Every rule needs a test that fires it (and one that shows it quiet); none fired:"
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        skipped = len(reporter.stats.get("skipped", ())) if reporter is not None else 0
        if skipped:
            # a clone without ../shared/corpus or the orbax extra skips tests: they may be the ones
            why = f"{why[:-1]} ({skipped} tests were skipped: run them, or add a test that always runs):"
        _fail(session, "rules no test fires", why, never)


def _fail(session: pytest.Session, title: str, why: str, lines: list[str]) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", title, red=True)
        reporter.write_line(why.rstrip("\n"))
        for line in lines:
            reporter.write_line(f"  {line}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
