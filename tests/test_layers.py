"""The import rules of ARCHITECTURE.md, enforced over every import of ckptdoctor by ckptdoctor.

What counts as an import: every ``import`` and ``from … import`` statement, wherever it sits (at the
top of a module, inside a function, or for type checking only), and every
``importlib.import_module`` call whose argument is a string or an f-string: the module it names, or
for an f-string the package its constant start names (``f"{__name__}.{name}"``: a module of the
importing module's own package; ``__name__`` is read as that module's name). An argument computed
at run time cannot be followed (``api.__getattr__``'s table of names loaded on first use is one).
Loading a module's parent packages, which Python does before the module, is not an import of
them: ``ckptdoctor/__init__.py`` loads the API lazily, and no module imports the package's own
``__init__`` (the version lives in ``version.py``).

The rules, each a test below, each with a test that shows it failing on a crafted package:

- **Layers.** cli → api/acting → pipelines/planners → rules/layouts → readers → model: a module
  imports its own unit (top-level module or package) and units on lower layers only.
- **Privacy.** A module whose name, or a package above it, starts with an underscore (``_name.py``,
  ``_name/``) is private to the package that holds it: ``ckptdoctor.X._y`` is imported only from
  inside ``ckptdoctor.X``.
- **Order inside a package**, where the package declares one (``INSIDE``): its modules in tiers
  from the top, each importing modules of its own package on lower tiers only.
- **No loop.** No module reaches itself again through imports, counted as above: a function-local
  import closes a loop as much as one at the top does (it only defers it), so the direction inside
  a package is a strict order too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ckptdoctor"

LAYERS: dict[str, int] = {
    # the error taxonomy, which every layer raises, and the version, which reports name
    "errors": -1, "version": -1,
    # the data, and facts about the frameworks that every layer shares
    "model": 0, "units": 0, "progress": 0, "quoting": 0,
    "bundles": 1, "optimizers": 1, "places": 1, "volumes": 1, "regular": 1, "parallel": 1, "processes": 1,
    "_clisting": 1,  # compiled (its .pyi stub stands for it): imports nothing of ckptdoctor
    # input: listings, files, and the records ckptdoctor keeps in a run
    "discover": 2,
    # object stores: their URLs, clients and listings (as discover lists folders)
    "stores": 3,
    "readers": 4, "records": 4,
    # what a name or a file means; the executor, which acts on entries and knows no framework
    "layouts": 5, "actions": 5, "fanout": 5,
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

INSIDE: dict[str, tuple[tuple[str, ...], ...]] = {
    # the passes act through the one protocol and never through each other
    "ckptdoctor.acting": (("__init__",), ("prune", "repair", "undo"), ("protocol",)),
    # a family of checks names the rule type and the run's context; integrity's checks of a whole
    # file defer to the other families' own checks of what they found
    "ckptdoctor.rules": (
        ("__init__", "search"), ("registry",), ("integrity",), ("_harm", "completeness", "consistency", "disk", "safety"), ("context",), ("rule",),
    ),
    # a subcommand's module over the shared options over the one place errors are said
    "ckptdoctor.cli": (
        ("__init__",), ("verify",), ("diskcheck", "inspect", "prune", "repair", "rules"), ("_acting",), ("_progress",), ("_output",),
        ("_errors",),
    ),
    # what the commands ask of a store over the clients over the URLs
    "ckptdoctor.stores": (("__init__", "leftovers", "listing", "probe"), ("session",), ("_bucket",), ("control_plane",), ("urls",)),
}  # fmt: skip
"""Packages that declare the order of their modules (``__init__`` for the package's own)."""

Imports = dict[str, list[tuple[str, int]]]
"""Each module of a package: (the module of the package it imports, line), as resolved by ``_graph``."""


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _modules(package: Path) -> dict[str, Path]:
    """Every module of ``package`` by name: its source, or for a compiled one its ``.pyi`` stub."""
    found: dict[str, Path] = {}
    for path in sorted(package.rglob("*.pyi")) + sorted(package.rglob("*.py")):  # a source wins over a stub
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(path: Path, module: str) -> Iterator[tuple[str, int]]:
    """(what is imported, line) for every import in ``path`` (the module ``module``) of its own
    root package: a dotted name, and for ``from X import a`` both ``X`` and ``X.a`` (``_graph``
    keeps the longest that is a module)."""
    root = module.split(".")[0]
    package = module if path.stem == "__init__" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}:{node.lineno}: a relative import; the project imports by absolute name")
            if node.module and node.module.split(".")[0] == root:
                yield from ((f"{node.module}.{alias.name}", node.lineno) for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == root)
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            named = _named(node.args[0], package if path.stem == "__init__" else module)
            if named is None:
                continue
            if named.split(".")[0] == root:
                yield named, node.lineno


def _is_import_module(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (isinstance(func, ast.Name) and func.id == "import_module")


def _named(argument: ast.expr, module: str) -> str | None:
    """What an ``import_module`` argument names: a string; for an f-string, its constant start up
    to the last dot (the package the rest picks a module of), with ``{__name__}`` read as
    ``module``; None for a name computed at run time."""
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value
    if not isinstance(argument, ast.JoinedStr):
        return None
    start = ""
    for value in argument.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            start += value.value
        elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name) and value.value.id == "__name__":
            start += module
        else:
            break
    named, dot, partial = start.rpartition(".")
    if not dot:
        return None
    # a module of ``named`` whose name starts with ``partial``: private when ``partial`` starts with "_"
    return f"{named}.{partial}*" if partial.startswith("_") else named


def _graph(package: Path) -> Imports:
    """The imports of every module of ``package``, each resolved to the module of the package it
    loads: the longest dotted prefix of what is named that is a module (``from P import name``
    is an import of ``P.name`` where that is a module, else of ``P``)."""
    modules = _modules(package)
    graph: Imports = {}
    for module, path in modules.items():
        resolved = []
        for name, line in _imports(path, module):
            if name.endswith("*"):  # an import_module of a private name pattern: kept as named
                resolved.append((name, line))
                continue
            target = name
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module:
                resolved.append((target, line))
        graph[module] = sorted(set(resolved), key=lambda found: (found[1], found[0]))
    return graph


def _where(package: Path, module: str) -> str:
    path = _modules(package)[module]
    return str(path.relative_to(package.parent))


def _inversions(package: Path, layers: dict[str, int]) -> list[str]:
    wrong = []
    for module, imported in _graph(package).items():
        source = _unit(module)
        for target_module, line in imported:
            target = _unit(target_module)
            if target != source and layers[target] >= layers[source]:
                wrong.append(
                    f"{_where(package, module)}:{line}: {source} (layer {layers[source]}) imports {target_module} (layer {layers[target]})"
                )
    return wrong


def _disorders(package: Path, inside: Mapping[str, tuple[tuple[str, ...], ...]]) -> list[str]:
    wrong = []
    modules = _modules(package)
    for declared, tiers in inside.items():
        tier = {f"{declared}.{name}" if name != "__init__" else declared: at for at, names in enumerate(tiers) for name in names}
        members = {module for module in modules if module == declared or module.rpartition(".")[0] == declared}
        wrong += [f"{module}: a module of {declared} with no tier in its declared order" for module in sorted(members - set(tier))]
        wrong += [f"{module}: declared in the order of {declared}, but no such module" for module in sorted(set(tier) - members)]
        for module, imported in _graph(package).items():
            for target, line in imported:
                if module in tier and target in tier and tier[target] <= tier[module]:
                    wrong.append(f"{_where(package, module)}:{line}: {module} imports {target}, not below it in the order of {declared}")
    return wrong


def _owner(module: str) -> str | None:
    """The package a private module is private to: the one holding its first part that starts
    with an underscore (``a.b._c.d`` → ``a.b``); None for a public module."""
    parts = module.split(".")
    for at, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:at])
    return None


def _trespasses(package: Path) -> list[str]:
    wrong = []
    for module, imported in _graph(package).items():
        for target, line in imported:
            owner = _owner(target)
            if owner is not None and module != owner and not module.startswith(f"{owner}."):
                wrong.append(f"{_where(package, module)}:{line}: {module} imports {target}, private to {owner}")
    return wrong


def _loops(package: Path) -> list[list[str]]:
    """Every set of modules that reach each other through imports (strongly connected, Tarjan's
    algorithm, iterative: a deep import chain needs no recursion limit)."""
    modules = _modules(package)
    graph = {module: [target for target, _ in imported if target in modules] for module, imported in _graph(package).items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    break
                if target in on_stack:
                    low[module] = min(low[module], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == module:
                            break
                    if len(members) > 1:
                        loops.append(sorted(members))
    return loops


def test_every_unit_of_the_package_has_a_layer() -> None:
    units = {_unit(module) for module in _modules(PACKAGE)}
    assert units - set(LAYERS) == set(), "a new module or package: give it its layer here and its row in ARCHITECTURE.md"
    assert set(LAYERS) - units == set(), "a unit that no longer exists"


def test_imports_go_down_the_layers_only() -> None:
    wrong = _inversions(PACKAGE, LAYERS)
    assert wrong == [], "imports against the direction of ARCHITECTURE.md:\n" + "\n".join(wrong)


def test_no_module_imports_a_module_private_to_another_package() -> None:
    wrong = _trespasses(PACKAGE)
    assert wrong == [], "make the module public where it is shared, or reach it through its package's public module:\n" + "\n".join(wrong)


def test_imports_inside_a_package_follow_its_declared_order() -> None:
    wrong = _disorders(PACKAGE, INSIDE)
    assert wrong == [], "imports against a package's declared order (INSIDE):\n" + "\n".join(wrong)


def test_no_import_loop() -> None:
    loops = _loops(PACKAGE)
    assert loops == [], "modules that import each other, directly or around a loop:\n" + "\n".join(map(str, loops))


def _package(root: Path, files: dict[str, str]) -> Path:
    """A crafted package ``ckptdoctor`` under ``root``: each file's path (``readers/x.py``) and
    source; every folder is a package."""
    package = root / "ckptdoctor"
    for name, source in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.relative_to(package).parents:
            (package / folder / "__init__.py").touch()
        path.write_text(source)
    return package


def test_the_layer_check_catches_an_inversion(tmp_path: Path) -> None:
    """The check itself can fail: a reader importing a layout inside a function, or naming one to
    import_module, is found; a layout importing a reader is not."""
    package = _package(
        tmp_path,
        {
            "readers/bad.py": "import importlib\ndef f():\n    from ckptdoctor.layouts import registry\n"
            "    return importlib.import_module('ckptdoctor.layouts.registry')\n",
            "readers/worse.py": "import importlib\nloaded = importlib.import_module(f'ckptdoctor.layouts.{1}')\n",
            "layouts/registry.py": "from ckptdoctor.readers import bad\n",
        },
    )
    assert _inversions(package, LAYERS) == [
        "ckptdoctor/readers/bad.py:3: readers (layer 4) imports ckptdoctor.layouts.registry (layer 5)",
        "ckptdoctor/readers/bad.py:4: readers (layer 4) imports ckptdoctor.layouts.registry (layer 5)",
        "ckptdoctor/readers/worse.py:2: readers (layer 4) imports ckptdoctor.layouts (layer 5)",
    ]


def test_the_privacy_check_catches_a_private_module_of_another_package(tmp_path: Path) -> None:
    """The check itself can fail: a module reaching into another package's ``_name.py``, its
    ``_name/`` package, or a private module named to import_module, is found; a package's own
    modules and its subpackages may import its private modules."""
    package = _package(
        tmp_path,
        {
            "readers/_sample.py": "",
            "readers/own.py": "from ckptdoctor.readers import _sample\n",
            "readers/inner/deeper.py": "from ckptdoctor.readers._sample import x\n",
            "stores/_bucket/client.py": "",
            "rules/bad.py": "import importlib\nfrom ckptdoctor.readers import _sample\nimport ckptdoctor.stores._bucket.client\n"
            "importlib.import_module(f'ckptdoctor.stores._{1}')\n",
            "layouts/bad.py": "def f():\n    from ckptdoctor.readers._sample import x\n",
        },
    )
    assert sorted(_trespasses(package)) == [
        "ckptdoctor/layouts/bad.py:2: ckptdoctor.layouts.bad imports ckptdoctor.readers._sample, private to ckptdoctor.readers",
        "ckptdoctor/rules/bad.py:2: ckptdoctor.rules.bad imports ckptdoctor.readers._sample, private to ckptdoctor.readers",
        "ckptdoctor/rules/bad.py:3: ckptdoctor.rules.bad imports ckptdoctor.stores._bucket.client, private to ckptdoctor.stores",
        "ckptdoctor/rules/bad.py:4: ckptdoctor.rules.bad imports ckptdoctor.stores._*, private to ckptdoctor.stores",
    ]


def test_the_order_check_catches_an_import_up_a_package_or_across_a_tier(tmp_path: Path) -> None:
    """The check itself can fail: a module importing one on its own tier or above, and a module
    the order leaves out, are found; an import down the tiers is not."""
    package = _package(
        tmp_path,
        {
            "acting/protocol.py": "def f():\n    from ckptdoctor.acting import prune\n",
            "acting/prune.py": "from ckptdoctor.acting import protocol, undo\n",
            "acting/undo.py": "from ckptdoctor.acting.protocol import x\n",
            "acting/stray.py": "",
        },
    )
    order = {"ckptdoctor.acting": (("__init__",), ("prune", "undo"), ("protocol",))}
    assert sorted(_disorders(package, order)) == [
        "ckptdoctor.acting.stray: a module of ckptdoctor.acting with no tier in its declared order",
        "ckptdoctor/acting/protocol.py:2: ckptdoctor.acting.protocol imports ckptdoctor.acting.prune, not below it in the order of ckptdoctor.acting",
        "ckptdoctor/acting/prune.py:1: ckptdoctor.acting.prune imports ckptdoctor.acting.undo, not below it in the order of ckptdoctor.acting",
    ]


def test_the_loop_check_catches_a_loop_closed_inside_a_function(tmp_path: Path) -> None:
    """The check itself can fail: two modules of one package that import each other, one of them
    only inside a function or for type checking, or through import_module, are a loop; a chain is not."""
    package = _package(
        tmp_path,
        {
            "readers/a.py": "from ckptdoctor.readers import b\n",
            "readers/b.py": "def f():\n    from ckptdoctor.readers.a import x\n",
            "stores/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ckptdoctor.stores import d\n",
            "stores/d.py": "import importlib\nimportlib.import_module('ckptdoctor.stores.c')\n",
            "rules/e.py": "from ckptdoctor.readers import a\nfrom ckptdoctor.stores import c\n",
        },
    )
    assert sorted(_loops(package)) == [
        ["ckptdoctor.readers.a", "ckptdoctor.readers.b"],
        ["ckptdoctor.stores.c", "ckptdoctor.stores.d"],
    ]


def test_a_package_init_loads_nothing_heavy() -> None:
    """Importing one module of a package loads that module's needs, not the whole package: the
    rule type loads no layout, no reader and no rule family."""
    import subprocess
    import sys

    code = "import sys, ckptdoctor.rules.rule; print(' '.join(m for m in sys.modules if m.startswith('ckptdoctor')))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert "ckptdoctor.rules.rule" in loaded
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
