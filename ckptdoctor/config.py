"""``[tool.ckptdoctor]`` in the nearest ``pyproject.toml`` above the working directory, or a
``ckptdoctor.toml`` there: settings the command line does not give (the command line wins)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]

PRUNE_KEYS = frozenset({"keep-last", "keep-best", "metric", "mode", "keep-every", "keep-within", "keep", "min-age", "metrics-file"})


class ConfigError(ValueError):
    """A configuration file that cannot be used (exit 2, naming the file and key)."""


def prune_settings(start: str | None = None) -> tuple[Mapping[str, Any], str | None]:
    """The ``[tool.ckptdoctor.prune]`` table (or ``[prune]`` of ``ckptdoctor.toml``) and its file."""
    found = _find(start or os.getcwd())
    if found is None:
        return {}, None
    path, table = found
    prune = table.get("prune", {})
    if not isinstance(prune, dict):
        raise ConfigError(f"{path}: [tool.ckptdoctor.prune] must be a table")
    unknown = sorted(set(prune) - PRUNE_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} in [tool.ckptdoctor.prune] (known: {', '.join(sorted(PRUNE_KEYS))})")
    return prune, path


def _find(folder: str) -> tuple[str, Mapping[str, Any]] | None:
    folder = os.path.abspath(folder)
    while True:
        own = os.path.join(folder, "ckptdoctor.toml")
        if os.path.isfile(own):
            return own, _load(own)
        project = os.path.join(folder, "pyproject.toml")
        if os.path.isfile(project):
            tool = _load(project).get("tool", {})
            table = tool.get("ckptdoctor") if isinstance(tool, dict) else None
            if isinstance(table, dict):
                return project, table
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            document: dict[str, Any] = tomllib.load(handle)
            return document
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: {error}") from error
