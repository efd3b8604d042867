"""What ckptdoctor raises to its user: one base, :class:`CkptdoctorError`, and a few kinds, each
with the exit code the command line gives it (docs/commands.md, "Exit codes"). Every exception the package
raises for its user derives from one kind; the command line maps them in one place
(``cli/_errors.py``), and anything else that escapes is a bug ("internal error").

This module imports nothing of ckptdoctor: every layer may raise its errors.
"""

from __future__ import annotations

from typing import ClassVar

EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_LOCKED = 3


class CkptdoctorError(Exception):
    """The base of every error ckptdoctor raises for its user. ``lines``: what the user is told,
    one line each (most errors have one)."""

    exit_code: ClassVar[int] = EXIT_USAGE
    lines: tuple[str, ...]

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.lines = (str(self),)


class UsageError(CkptdoctorError):
    """A value, option, path or configuration that cannot be used as given; nothing was done
    (exit 2)."""

    exit_code = EXIT_USAGE


class InvalidValue(UsageError, ValueError):
    """A value given to the Python API (or the command line) that cannot be used: a
    ``ValueError`` too, as the API has always raised."""


class RefusedError(CkptdoctorError):
    """Refused for safety: the run cannot be changed as asked, or a change stopped part-way,
    leaving nothing that was to be kept touched (exit 1)."""

    exit_code = EXIT_FINDINGS


class StoreError(CkptdoctorError):
    """The store cannot be used as asked (no extra, no credentials, denied, unreachable): one
    line that says what to do (exit 2)."""

    exit_code = EXIT_USAGE


class LockedError(CkptdoctorError):
    """Another ckptdoctor is acting on the run (exit 3)."""

    exit_code = EXIT_LOCKED
