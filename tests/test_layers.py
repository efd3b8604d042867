"""The import direction of ARCHITECTURE.md, enforced: cli → api/acting → pipelines/planners →
rules/layouts → readers → model. Every import of ckptdoctor by ckptdoctor counts — at the top of
a module, inside a function, or for type checking only — so that no layering inversion hides in a
function-local import. A module may import its own package, and any unit on a lower layer."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ckptdoctor"

LAYERS: dict[str, int] = {
    # the error taxonomy, which every layer raises
    "errors": -1,
    # the data, and facts about the frameworks that every layer shares
    "model": 0, "units": 0, "progress": 0, "quoting": 0,
    "bundles": 1, "optimizers": 1, "places": 1, "regular": 1, "parallel": 1, "processes": 1,
    "_clisting": 1,  # compiled (its .pyi stub stands for it): imports nothing of ckptdoctor
    # input: listings, files, and the records ckptdoctor keeps in a run
    "discover": 2,
    # object stores: their URLs, clients and listings (as discover lists folders)
    "stores": 3,
    "readers": 4, "records": 4,
    # what a name or a file means; the executor, which acts on entries and knows no framework
    "layouts": 5, "actions": 5,
    # what is wrong
    "rules": 6,
    # pipelines (paths → report) and planners (run → plan or verdict)
    "pipelines": 7, "planners": 7, "baseline": 7,
    # output
    "render": 8,
    # settings (which name rules and output formats); what users call: the acting pass, the Python
    # API, trainer callbacks, the command line
    "config": 9, "acting": 9, "api": 10, "integrations": 11, "testing": 11,
    "cli": 12, "__main__": 13, "ckptdoctor": 13,
}  # fmt: skip

ALLOWED: dict[tuple[str, str], str] = {
    ("places", "layouts"): "places.home asks the run's layout whether its framework reads every name in the run folder "
    "(then ckptdoctor's folder goes beside the run); imported inside home(), so that the executor, which needs only "
    "home_of, never loads the layouts",
}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _imports(path: Path) -> list[tuple[str, int]]:
    """(ckptdoctor module imported, line) for every import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "ckptdoctor":
            if node.module == "ckptdoctor":  # a module of the package, or a name its light __init__ defines
                found += [(f"ckptdoctor.{alias.name}", node.lineno) for alias in node.names if _is_module(alias.name)]
            else:
                found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "ckptdoctor"]
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}:{node.lineno}: a relative import; the project imports by absolute name")
    return found


def _is_module(name: str) -> bool:
    return (PACKAGE / f"{name}.py").is_file() or (PACKAGE / name / "__init__.py").is_file()


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_unit_of_the_package_has_a_layer() -> None:
    units = {_unit(_module(path)) for pattern in ("*.py", "*.pyi") for path in PACKAGE.rglob(pattern)}
    assert units - set(LAYERS) == set(), "a new module or package: give it its layer here and its row in ARCHITECTURE.md"
    assert set(LAYERS) - units == set(), "a unit that no longer exists"


def test_imports_go_down_the_layers_only() -> None:
    wrong = []
    used = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _unit(_module(path))
        for imported, line in _imports(path):
            target = _unit(imported)
            if target == source or LAYERS[target] < LAYERS[source]:
                continue
            if (source, target) in ALLOWED:
                used.add((source, target))
                continue
            wrong.append(
                f"{path.relative_to(PACKAGE.parent)}:{line}: {source} (layer {LAYERS[source]}) imports {imported} (layer {LAYERS[target]})"
            )
    assert wrong == [], "imports against the direction of ARCHITECTURE.md:\n" + "\n".join(wrong)
    assert set(ALLOWED) - used == set(), "an allowed exception nothing needs any more: remove it"


def test_the_layer_check_catches_an_inversion(tmp_path: Path) -> None:
    """The check itself can fail: a reader importing a layout is found."""
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from ckptdoctor.layouts import layout_named\n    return layout_named\n")
    ((imported, line),) = _imports(module)
    assert (imported, line) == ("ckptdoctor.layouts", 2)
    assert LAYERS[_unit(imported)] > LAYERS["readers"]


def test_a_package_init_loads_nothing_heavy() -> None:
    """Importing one module of a package loads that module's needs, not the whole package: the
    rule type loads no layout, no reader and no rule family."""
    import subprocess
    import sys

    code = "import sys, ckptdoctor.rules._rule; print(' '.join(m for m in sys.modules if m.startswith('ckptdoctor')))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert "ckptdoctor.rules._rule" in loaded
    assert not {m for m in loaded if m.startswith(("ckptdoctor.layouts", "ckptdoctor.readers", "ckptdoctor.rules.integrity"))}, loaded


def test_every_import_inside_a_function_says_why() -> None:
    """Imports belong at the top of a module; one inside a function is there to keep start-up lean
    (or an optional library out of every other path), and a comment on it, or just above the block
    of imports it belongs to, says so."""
    silent = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
        spans = sorted(
            {(n.lineno, n.end_lineno or n.lineno) for f in functions for n in ast.walk(f) if isinstance(n, ast.Import | ast.ImportFrom)}
        )
        blocks: list[list[int]] = []
        for first, last in spans:  # consecutive import statements are one block
            if blocks and first == blocks[-1][1] + 1:
                blocks[-1][1] = last
            else:
                blocks.append([first, last])
        for first, last in blocks:
            said = any("#" in lines[i] for i in range(first - 1, last)) or lines[first - 2].strip().startswith("#")
            if not said:
                silent.append(f"{path.relative_to(PACKAGE.parent)}:{first}: {lines[first - 1].strip()}")
    assert silent == [], "imports inside functions that do not say why:\n" + "\n".join(silent)
