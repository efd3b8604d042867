"""ckptdoctor: a checkpoint doctor for machine-learning training runs."""

from __future__ import annotations

from typing import Any

from ckptdoctor.version import __version__ as __version__

__all__ = ["__version__", "preflight"]


def __getattr__(name: str) -> Any:
    # `ckptdoctor.preflight` without importing the scanner for every command-line start
    if name == "preflight":
        # loaded on first use: `import ckptdoctor` stays free of the scanner
        from ckptdoctor.api import preflight

        return preflight
    raise AttributeError(f"module 'ckptdoctor' has no attribute {name!r}")
