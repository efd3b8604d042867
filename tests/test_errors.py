"""One error taxonomy (issue 33): every exception ckptdoctor raises for its user derives from a kind
of ``errors.CkptdoctorError``, and each kind carries the exit code of DESIGN.md §3.1."""

from __future__ import annotations

import importlib

import pytest

import ckptdoctor
from ckptdoctor import errors

USER_FACING = [
    ("ckptdoctor.config", "ConfigError", errors.UsageError, 2),
    ("ckptdoctor.baseline", "BaselineError", errors.UsageError, 2),
    ("ckptdoctor.planners.metrics", "MetricsError", errors.UsageError, 2),
    ("ckptdoctor.planners.space", "EstimateError", errors.UsageError, 2),
    ("ckptdoctor.planners.retention", "PolicyError", errors.UsageError, 2),
    ("ckptdoctor.stores.urls", "BadURL", errors.UsageError, 2),
    ("ckptdoctor.pipelines.verify", "NotDownloaded", errors.UsageError, 2),
    ("ckptdoctor.acting", "Refused", errors.UsageError, 2),
    ("ckptdoctor.stores.session", "StoreError", errors.StoreError, 2),
    ("ckptdoctor.stores.control_plane", "_StoreRefused", errors.StoreError, 2),
    ("ckptdoctor.acting", "Stopped", errors.RefusedError, 1),
    ("ckptdoctor.actions", "ActionError", errors.RefusedError, 1),
    ("ckptdoctor.planners.repair", "NotResumable", errors.RefusedError, 1),
    ("ckptdoctor.actions", "Locked", errors.LockedError, 3),
    ("ckptdoctor.actions._objects", "LockLost", errors.LockedError, 3),
]
"""Every exception the package raises for its user: its kind and exit code (DESIGN.md §3.1)."""


@pytest.mark.parametrize(("module", "name", "kind", "code"), USER_FACING, ids=[name for _, name, _, _ in USER_FACING])
def test_every_exception_the_user_sees_is_of_one_kind(module: str, name: str, kind: type[errors.CkptdoctorError], code: int) -> None:
    raised = getattr(importlib.import_module(module), name)
    assert issubclass(raised, kind) and raised.exit_code == code


@pytest.mark.parametrize(
    ("kind", "code"),
    [(errors.UsageError, 2), (errors.InvalidValue, 2), (errors.StoreError, 2), (errors.RefusedError, 1), (errors.LockedError, 3)],
)
def test_each_kind_carries_its_exit_code(kind: type[errors.CkptdoctorError], code: int) -> None:
    assert kind.exit_code == code
    assert kind("one line").lines == ("one line",)


def test_a_value_the_api_refuses_is_still_a_value_error() -> None:
    """Callers of the Python API have caught ValueError for a bad value: they still can."""
    with pytest.raises(ValueError, match="margin"):
        ckptdoctor.preflight(".", margin=-1)
