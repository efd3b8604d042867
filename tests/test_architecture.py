"""ARCHITECTURE.md stays true: every package and top-level module has its paragraph, in the order
of the layers ``tests/test_layers.py`` enforces; every file it names exists; no paragraph grows
past what a newcomer reads at a glance."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from test_layers import LAYERS, PACKAGE

ROOT = PACKAGE.parent
PAGE = ROOT / "ARCHITECTURE.md"
LONGEST_PARAGRAPH = 80
"""Words: the issue asked for no cell over ~60; a paragraph naming a package's modules may run a
little longer."""


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _packages() -> str:
    return _section(PAGE.read_text(), "Packages, bottom layer up")


def _mentions(unit: str) -> list[str]:
    return [f"`{unit}.py`", f"`{unit}/`", f"`{unit}.c`"]


def test_every_unit_has_its_paragraph_in_layer_order() -> None:
    section = _packages()
    named = {unit: min((i for i in (section.find(m) for m in _mentions(unit)) if i >= 0), default=-1) for unit in LAYERS}
    missing = sorted(unit for unit, at in named.items() if at < 0 and unit != "ckptdoctor")
    assert missing == [], f"ARCHITECTURE.md names no paragraph for {missing}"
    order = sorted((at, LAYERS[unit], unit) for unit, at in named.items() if at >= 0)
    inversions = [(a[2], b[2]) for a, b in itertools.pairwise(order) if b[1] < a[1]]
    assert inversions == [], f"units named out of their layers' order: {inversions}"


def test_no_paragraph_is_long() -> None:
    paragraphs = [p for p in re.split(r"\n\s*\n", _packages()) if p.strip() and not p.lstrip().startswith("#")]
    long = [(len(p.split()), p.split("\n")[0]) for p in paragraphs if len(p.split()) > LONGEST_PARAGRAPH]
    assert long == [], f"paragraphs over {LONGEST_PARAGRAPH} words: {long}"


def _named_paths(text: str) -> set[str]:
    return {match for match in re.findall(r"`([\w./-]+\.(?:py|c|md))`", text) if "<" not in match}


def _exists(name: str) -> bool:
    if (ROOT / name).exists() or (PACKAGE / name).exists():
        return True
    # a module named inside its package's paragraph (`hooks.py` under layouts/)
    return any(PACKAGE.rglob(name)) or any((ROOT / "tests").glob(name)) or (ROOT / "docs" / name).exists()


def test_every_file_it_names_exists() -> None:
    stale = sorted(name for name in _named_paths(PAGE.read_text()) if not _exists(name))
    assert stale == [], f"ARCHITECTURE.md names files that do not exist: {stale}"


def test_the_checks_see_a_stale_page(tmp_path: Path) -> None:
    assert not _exists("layouts/_base.py")
    assert _named_paths("see `layouts/_base.py` and `readers/<format>.py`") == {"layouts/_base.py"}
