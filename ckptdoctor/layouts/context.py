"""What each scan sets once for all the layouts it asks: the project's role hints and the
globals the user declared trusted, each in a context variable.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from types import MappingProxyType

from ckptdoctor.model import Role
from ckptdoctor.readers.trust import Trusted

_ROLE_HINTS: contextvars.ContextVar[Mapping[str, Role]] = contextvars.ContextVar("role_hints", default=MappingProxyType({}))
"""Name prefixes a project's own checkpointers use (``ema-3.bpk``, ``teacher_3.pt``), with the
role each holds: ``[tool.ckptdoctor.roles]``. A context variable, not module state: each scan
uses the hints of its own configuration (a command's, or ``preflight``'s run's), never those an
earlier caller in the same process left behind.

Why a context variable rather than an argument: the hints change what ``claim`` and ``stray``
answer, and those are asked well after the scan, by code that finds the layout by the run's
name (``layout_named(run.layout)``: the rules' CKD111 index, the planners) and holds no
configuration. Passing them explicitly would mean a hints argument on every naming hook and on
every caller of ``layout_named``, or per-configuration layout objects carried on each ``Run``.
``api`` sets them around each command (``hinted_roles``), and a context variable keeps them to
that call."""


def role_hints() -> Mapping[str, Role]:
    """The role hints of the scan in progress (prefix, lower case -> role)."""
    return _ROLE_HINTS.get()


def _lowered(hints: Mapping[str, Role]) -> Mapping[str, Role]:
    return MappingProxyType({prefix.lower(): role for prefix, role in hints.items()})


@contextlib.contextmanager
def hinted_roles(hints: Mapping[str, Role]) -> Iterator[None]:
    """Scan with ``hints`` (prefix -> role) inside the block."""
    token = _ROLE_HINTS.set(_lowered(hints))
    try:
        yield
    finally:
        _ROLE_HINTS.reset(token)


NO_TRUST = Trusted()
_TRUSTED: contextvars.ContextVar[Trusted] = contextvars.ContextVar("trusted_globals", default=NO_TRUST)
"""The globals the user declared trusted (``trusted-globals``) for the scan in progress: a context
variable, as the role hints are, and for the same reason (set once by each entry point, read by
every layout's content check)."""


def trusted_globals() -> Trusted:
    return _TRUSTED.get()


@contextlib.contextmanager
def trusting(trusted: Trusted) -> Iterator[None]:
    """Scan with the globals ``trusted`` declares trusted inside the block."""
    token = _TRUSTED.set(trusted)
    try:
        yield
    finally:
        _TRUSTED.reset(token)
