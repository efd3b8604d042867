"""ckptdoctor: a checkpoint doctor for machine-learning training runs."""

from __future__ import annotations

from ckptdoctor.version import __version__ as __version__

# typing's flag, without importing typing: the program sets its Ctrl-C handling only once this
# module is imported (ckptdoctor/__main__.py), and typing would be most of its time
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["__version__", "preflight"]


def __getattr__(name: str) -> Any:
    # `ckptdoctor.preflight` without importing the scanner for every command-line start
    if name == "preflight":
        # loaded on first use: `import ckptdoctor` stays free of the scanner
        from ckptdoctor.api import preflight

        return preflight
    raise AttributeError(f"module 'ckptdoctor' has no attribute {name!r}")
