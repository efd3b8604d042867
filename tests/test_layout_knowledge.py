"""Framework knowledge lives in ``layouts/`` only (issue 15, item 3).

Adding a framework touches its layout module and its registration in ``layouts/registry.py``.
That holds while no other module knows a framework: none compares a run's layout to a name,
names a framework's files, or imports one framework's layout module. These are static checks of
the source (AST), so they hold for code no test runs.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import itertools
import re
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from ckptdoctor.layouts.base import FolderLayout, Layout
from ckptdoctor.layouts.folders import FolderHooks
from ckptdoctor.layouts.hooks import LayoutHooks
from ckptdoctor.layouts.registry import LAYOUTS, NAMED_FILES

PACKAGE = Path(__file__).resolve().parent.parent / "ckptdoctor"
LAYOUTS_DIR = PACKAGE / "layouts"

FRAMEWORK_FILES = frozenset({
    *NAMED_FILES,
    "trainer_state.json", "training_args.bin", "optimizer.pt", "scheduler.pt",  # HF Trainer
    "last.ckpt",  # Lightning
    "latest", "latest_universal",  # DeepSpeed
    "latest_checkpointed_iteration.txt",  # Megatron-LM
    "model_optim_rng.pt", "distrib_optim.pt",  # Megatron-LM
    "random_states_0.pkl",  # accelerate
}) - {"checkpoint"}  # fmt: skip
"""File names one framework gives its files (the layouts' ``named_files`` and a few more); but
TensorFlow's state file, which is called by the word every module says (``Naming.CHECKPOINT``)."""
FRAMEWORK_NAMES = frozenset(name for layout in LAYOUTS for name in (layout.name, *layout.aliases))

ALLOWED: dict[str, str] = {
    "testing.py": "builds framework runs (an HF Trainer folder among them) for tests and demos: it writes their files on purpose",
}
"""Modules outside ``layouts/`` that may know one framework, each with why."""


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if LAYOUTS_DIR in path.parents:
            continue
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in ALLOWED:
            continue
        yield relative, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _prose(tree: ast.Module) -> set[int]:
    """Ids of the string constants that are documentation: docstrings and the text of a
    ``Rule(...)`` (a rule's meaning, causes and fixes name frameworks as examples; issue 16 keys
    fixes per layout)."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            for first, second in itertools.pairwise(body):
                # a docstring, and the attribute docstring after each assignment
                if (
                    isinstance(second, ast.Expr)
                    and isinstance(second.value, ast.Constant)
                    and isinstance(first, (ast.Assign, ast.AnnAssign))
                ):
                    ids.add(id(second.value))
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Rule":
            ids.update(id(inner) for inner in ast.walk(node) if isinstance(inner, ast.Constant))
    return ids


def _strings(node: ast.AST) -> Iterator[str]:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            yield inner.value


def _about_layout(node: ast.expr) -> bool:
    """``run.layout``, ``layout.name``, ``ctx.layout.name``, ``self.layout.name``."""
    if not isinstance(node, ast.Attribute):
        return False
    if node.attr == "layout":
        return True
    return node.attr == "name" and "layout" in ast.unparse(node.value).lower()


def test_no_module_outside_layouts_compares_a_layout_to_a_framework_name() -> None:
    found = []
    for relative, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if any(_about_layout(side) for side in sides):
                named = [text for side in sides for text in _strings(side) if text in FRAMEWORK_NAMES]
                if named:
                    found.append(f"{relative}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "framework names compared outside layouts/ (give the layout a hook):\n" + "\n".join(found)


def test_no_module_outside_layouts_names_a_framework_file() -> None:
    found = []
    for relative, tree in _modules():
        prose = _prose(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in prose:
                continue
            text = node.value
            # a bare word (`latest`) only as the whole string; a file name (`trainer_state.json`) anywhere in it
            hits = [name for name in FRAMEWORK_FILES if text == name or (("." in name or "_" in name) and name in text)]
            if hits:
                found.append(f"{relative}:{node.lineno}: {text[:80]!r} names {', '.join(sorted(hits))}")
    assert not found, "framework file names outside layouts/ (declare them on the layout):\n" + "\n".join(found)


def test_no_module_outside_layouts_imports_one_framework() -> None:
    shared = {
        "ckptdoctor.layouts",
        "ckptdoctor.layouts.registry",
        "ckptdoctor.layouts.base",
        "ckptdoctor.layouts.context",
        "ckptdoctor.layouts.pointers",
    }
    found = []
    for relative, tree in _modules():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("ckptdoctor.layouts")
                and node.module not in shared
            ):
                found.append(f"{relative}:{node.lineno}: from {node.module} import ...")
            if isinstance(node, ast.Import):
                found += [
                    f"{relative}:{node.lineno}: import {a.name}"
                    for a in node.names
                    if a.name.startswith("ckptdoctor.layouts.") and a.name not in shared
                ]
    assert not found, "\n".join(found)


FORMAT_OWNERS: dict[str, str] = {
    "torch": "readers read torch.save's zip, tar and pickle formats, and judge pickles by torch's own allowlist",
    "safetensors": "a format the readers read (the torch layout's alias)",
    "dcp": "readers read torch.distributed.checkpoint's .metadata and .distcp files",
    "keras": "readers read the .keras archive and its config.json, as keras.models.load_model does",
    "tensorflow": "readers read TensorFlow's checkpoint bundle (its index and data files)",
    "orbax": "readers read Orbax's OCDBT and checkpoint metadata",
    "burn": "readers read burn's burnpack and record formats, and the versions they record",
}
"""Frameworks whose names are those of file formats the readers read: a reader says what that
format's library does with a file. Every other framework is known only to its layout."""

KNOWS_NO_FRAMEWORK = ("rules", "readers", "planners", "render")


def _framework_words() -> dict[str, str]:
    """Each name a framework is known by outside its layout (its layout's name and aliases, its
    Python packages), with the layout's name; but the format owners'."""
    return {
        word: layout.name
        for layout in LAYOUTS
        for word in (layout.name, *layout.aliases, *layout.packages)
        if layout.name not in FORMAT_OWNERS and word not in FORMAT_OWNERS
    }


def _names_a_framework(text: str, words: dict[str, str]) -> list[str]:
    """The framework words in ``text``: alone, or as a dotted name's first part (``lightning.pytorch``)."""
    return [word for word in words if re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", text)]


def test_no_module_outside_layouts_names_a_framework() -> None:
    """Adding a framework touches its layout module, the registry and its test fixture: rules,
    readers, planners and renderers say no framework's name nor import path in any string but
    their documentation (a fix is worded by the layout: ``Layout.fix_wordings``)."""
    words = _framework_words()
    found = []
    for relative, tree in _modules():
        if relative.split("/")[0] not in KNOWS_NO_FRAMEWORK:
            continue
        skipped = _prose(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in skipped:
                continue
            if named := _names_a_framework(node.value, words):
                found.append(f"{relative}:{node.lineno}: {node.value[:80]!r} names {', '.join(named)}")
    assert not found, "frameworks named outside layouts/ (ask the run's layout):\n" + "\n".join(found)


def test_no_rule_words_a_fix_for_a_framework() -> None:
    """A rule's fix has general words and a slot; each framework's words for it are its
    layout's (``Layout.fix_wordings``), never a keyword of ``fix(...)`` in a rule module."""
    keyed = [
        f"{relative}:{node.lineno}: {', '.join(k.arg or '**' for k in node.keywords if k.arg not in ('slot', 'case'))}"
        for relative, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "fix"
        and any(k.arg not in ("slot", "case") for k in node.keywords)
    ]  # fmt: skip
    assert not keyed, "fixes worded per framework outside layouts/ (give the layout fix_wordings):\n" + "\n".join(keyed)


def test_the_framework_check_sees_a_name() -> None:
    words = _framework_words()
    assert _names_a_framework("transformers.training_args.TrainingArguments", words) == ["transformers"]
    assert _names_a_framework("Keep fewer: `ModelCheckpoint(save_top_k=n)` in lightning", words) == ["lightning"]
    assert _names_a_framework("hf-trainer: pass it", words) == ["hf-trainer"]
    assert not _names_a_framework("a torch.save zip of a keras model; the accelerated path", words)
    assert _names_a_framework("accelerate.state.PartialState", words) == ["accelerate"]


def test_the_check_sees_a_leak() -> None:
    """The checks above find what they look for (a check that finds nothing proves nothing)."""
    tree = ast.parse('def f(run):\n    """latest"""\n    if run.layout == "burn":\n        return open("trainer_state.json")\n')
    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare) and _about_layout(n.left)]
    assert compares and "burn" in FRAMEWORK_NAMES
    prose = _prose(tree)
    named = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in prose and n.value in FRAMEWORK_FILES]
    assert named == ["trainer_state.json"]


def test_a_layout_that_reads_versions_of_taken_names_is_looked_at_by_ckd115() -> None:
    """``versions_taken`` (what CKD115 asks before it looks) follows ``resaved``: a new layout
    that overrides it is looked at without declaring anything more."""

    class Versioning(Layout):
        def resaved(self, name: str) -> tuple[str, int] | None:
            return (name, 1)

    assert Versioning.versions_taken and not Layout.versions_taken and not FolderLayout.versions_taken
    looked_at = {layout.name for layout in LAYOUTS if layout.versions_taken}
    assert looked_at == {layout.name for layout in LAYOUTS if type(layout).resaved is not LayoutHooks.resaved}
    assert "lightning" in looked_at and "burn" not in looked_at


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.name)
def test_every_hook_a_layout_overrides_is_documented_on_the_base_class(layout: Layout) -> None:
    """The hook tables list every hook (a new one is documented where it is declared)."""
    documented = (LayoutHooks.__doc__ or "") + (FolderHooks.__doc__ or "")
    for cls in type(layout).__mro__:
        if cls in (LayoutHooks, FolderHooks, Layout, FolderLayout, object):
            continue
        for hook in vars(cls):
            if hook.startswith("_") or not (hasattr(Layout, hook) or hasattr(FolderLayout, hook)):
                continue
            assert f"``{hook}" in documented, f"{cls.__name__}.{hook} overrides a hook the base class does not document"


def _hook_table(doc: str | None) -> dict[str, str]:
    """Each hook a docstring's table lists, with what its "default" column says (its lines joined)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    rules = [at for at, line in enumerate(lines) if line.startswith("====")]
    assert len(rules) == 3, "a table: its top rule, the rule under its header, its bottom rule"
    (first, _), (second, second_end), _ = (match.span() for match in re.finditer("=+", lines[rules[0]]))
    rows: dict[str, str] = {}
    hook = ""
    for line in lines[rules[1] + 1 : rules[2]]:
        named, default = line[first:second].strip(), line[second:second_end].strip()
        if named.startswith("``"):
            hook = re.match(r"``(\w+)", named).group(1)  # type: ignore[union-attr]
            assert hook not in rows, f"{hook} listed twice"
            rows[hook] = default
        elif not named and default:
            rows[hook] += " " + default
    return rows


def _plain_default(owner: type, hook: str) -> str | None:
    """How the table must begin to describe ``hook``'s default where the code says it plainly (a
    value, or a method that only returns a constant or raises); None where only prose can."""
    value = inspect.getattr_static(owner, hook)
    if isinstance(value, property):
        return None
    if inspect.isfunction(value):
        body = ast.parse(textwrap.dedent(inspect.getsource(value))).body[0].body  # type: ignore[attr-defined]
        code = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(code) != 1:
            return None
        if isinstance(code[0], ast.Raise):
            return "required"
        if not isinstance(code[0], ast.Return):
            return None
        returned = code[0].value
        if isinstance(returned, ast.Tuple) and not returned.elts:
            value = ()
        elif isinstance(returned, ast.Constant):
            value = returned.value
        else:
            return None
    if value is None or isinstance(value, bool):
        return str(value)
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, str):
        return f'``"{value}"``'
    if isinstance(value, (tuple, frozenset, Mapping)) and not value:
        return "none|empty"
    if dataclasses.is_dataclass(value) and value == type(value)():
        return "none|empty"
    return None


def _declared(*classes: type) -> set[str]:
    return {name for cls in classes for name in vars(cls) if not name.startswith("_")}


def test_the_hook_tables_name_exactly_the_declared_hooks_with_their_defaults() -> None:
    """``LayoutHooks``' table lists every hook a layout has (``Layout.build`` among them) and
    ``FolderHooks``' every one a folder layout adds, nothing else; where a hook's default is
    plain in its code (a value, a method that returns a constant or raises), the table says it."""
    files, folders = _hook_table(LayoutHooks.__doc__), _hook_table(FolderHooks.__doc__)
    assert set(files) == _declared(LayoutHooks, Layout)
    assert set(folders) == _declared(FolderHooks, FolderLayout) - set(files)
    wrong = []
    for owner, table in ((Layout, files), (FolderLayout, folders)):
        for hook, said in table.items():
            plain = _plain_default(owner, hook)
            if plain is not None and not said.startswith(tuple(plain.split("|"))):
                wrong.append(f"{hook}: the table says {said!r}, the code {plain!r}")
    assert not wrong, "\n".join(wrong)


def test_the_hook_table_check_sees_a_wrong_table() -> None:
    """The check above can fail: a table that lists a hook nobody declares, or gives a default
    the code does not have, is found."""
    table = _hook_table(LayoutHooks.__doc__)
    assert table["name"] == '``"unknown"``' and table["claimable"].startswith("None")
    assert _plain_default(Layout, "whole_saves") == "False" and _plain_default(FolderLayout, "role_of") == "required"
    assert _plain_default(Layout, "aliases") == "none|empty" and _plain_default(Layout, "own_objects") == "none|empty"
    doc = (LayoutHooks.__doc__ or "").replace("``stray(name)``  ", "``strays(name)`` ")
    assert set(_hook_table(doc)) != _declared(LayoutHooks, Layout)


def test_the_named_files_tables_agree() -> None:
    """Two layouts that name the same file read it alike (``layouts.NAMED_FILES`` joins them)."""
    for layout in LAYOUTS:
        for name, named in layout.named_files.items():
            assert NAMED_FILES[name] == named, (layout.name, name)
