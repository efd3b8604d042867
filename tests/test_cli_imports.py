"""The command line reaches the core through one seam (issue 33): ``ckptdoctor.api``, with the
renderers (``ckptdoctor.render``), the error taxonomy (``ckptdoctor.errors``) and the version beside it, and
its own helpers (``ckptdoctor.cli.*``). Every import counts: at the top of a module, inside a
function, for type checking only, and a module named to ``importlib.import_module``."""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parents[1] / "ckptdoctor" / "cli"
SEAM = ("ckptdoctor.api", "ckptdoctor.render", "ckptdoctor.errors", "ckptdoctor.version", "ckptdoctor.cli")


def _imported(source: str, module: str) -> list[tuple[str, int]]:
    """(what is imported, line) for every import in ``source`` (the module ``module``); a name
    imported from a package counts as its module (``from ckptdoctor import api``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module, f"line {node.lineno}: a relative import"
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.Call) and _is_import_module(node.func):
            found.append((_named(node.args[0], module, node.lineno), node.lineno))
    return found


def _is_import_module(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (isinstance(func, ast.Name) and func.id == "import_module")


def _named(argument: ast.expr, module: str, line: int) -> str:
    """The module an ``import_module`` call names: a string, or an f-string of ``__name__`` and
    a name below it (``f"{__name__}.{name}"``: a module of the command line's own package)."""
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value
    if isinstance(argument, ast.JoinedStr) and argument.values:
        first = argument.values[0]
        if isinstance(first, ast.FormattedValue) and isinstance(first.value, ast.Name) and first.value.id == "__name__":
            return f"{module}.*"
    raise AssertionError(f"line {line}: import_module of a name this test cannot tell: say it as a string")


def _outside_the_seam(source: str, module: str) -> list[str]:
    wrong = []
    for name, line in _imported(source, module):
        if name.split(".")[0] != "ckptdoctor":
            continue
        if not any(name == seam or name.startswith(f"{seam}.") for seam in SEAM):
            wrong.append(f"{module}:{line}: {name}")
    return wrong


def test_the_command_line_imports_the_core_through_the_api_only() -> None:
    wrong = []
    for path in sorted(CLI.glob("*.py")):
        module = "ckptdoctor.cli" if path.stem == "__init__" else f"ckptdoctor.cli.{path.stem}"
        wrong += _outside_the_seam(path.read_text(), module)
    assert wrong == [], "the command line imports the core past the API:\n" + "\n".join(wrong)


def test_the_check_sees_every_kind_of_import() -> None:
    """The check itself can fail: an import inside a function, one for type checking, and a
    module named to import_module are each found."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "import importlib\n"
        "if TYPE_CHECKING:\n    from ckptdoctor.model import Report\n"
        "def f():\n    from ckptdoctor.config import settings\n    import ckptdoctor.pipelines.scan\n"
        "    return importlib.import_module('ckptdoctor.acting')\n"
        "from ckptdoctor import places\n"
        "from ckptdoctor.api import run_inspect\n"
        "from ckptdoctor.version import __version__\n"
    )
    assert sorted(_outside_the_seam(source, "ckptdoctor.cli.x")) == [
        "ckptdoctor.cli.x:4: ckptdoctor.model.Report",
        "ckptdoctor.cli.x:6: ckptdoctor.config.settings",
        "ckptdoctor.cli.x:7: ckptdoctor.pipelines.scan",
        "ckptdoctor.cli.x:8: ckptdoctor.acting",
        "ckptdoctor.cli.x:9: ckptdoctor.places",
    ]
