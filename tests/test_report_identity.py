"""Reports do not change when the code under them is reworked for speed: the JSON of `inspect`,
`verify`, `prune --dry-run` and `repair --dry-run` over a tree of every layout, each healthy and
broken the common ways, the bundled example runs and the shared corpus, byte for byte against
golden files (tests/golden/reports/).

The trees are written by the frameworks' own save code where the tests have it (``torch.save``,
``safetensors``, burn's record format, DeepSpeed's and Megatron's layouts as
``test_layout_recognition`` builds them), dated to one instant, on one disk, with no process
holding a file, so that a report differs only when what ckptdoctor says differs.
``CKPTDOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/test_report_identity.py`` rewrites the golden
files after an intended change of wording.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy
import pytest
from shared_corpus import CORPUS, SHARED
from test_ci_output import DATED, SAME_VOLUME, golden
from test_layout_recognition import trees  # noqa: F401  (the fixture: a tree of every layout)

from ckptdoctor import processes, volumes
from ckptdoctor.discover import natural_key

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "inspect": ["inspect", "--format", "json"],
    "verify": ["verify", "--format", "json"],
    "verify-deep": ["verify", "--deep", "--format", "json"],
    "prune": ["prune", "--dry-run", "--keep-last", "1", "--min-age", "0", "--format", "json"],
    "repair": ["repair", "--dry-run", "--min-age", "0", "--format", "json"],
}
BREAKAGES = ("healthy", "truncated-newest", "deleted-newest-smallest", "empty-newest-largest")


def broken(tree: Path, breakage: str) -> None:
    """``tree`` broken as runs break, in its last folder (by name, as numbered saves sort): its
    largest file cut in half or emptied, or its smallest deleted (the folder's files ordered by
    size, then name, so that the same file breaks every time)."""
    if breakage == "healthy":
        return
    files = [path for path in tree.rglob("*") if path.is_file() and not path.is_symlink()]
    last = max({path.parent for path in files}, key=lambda folder: natural_key(str(folder.relative_to(tree))))
    here = sorted((path for path in files if path.parent == last), key=lambda path: (path.stat().st_size, path.name))
    if breakage == "truncated-newest":
        with open(here[-1], "r+b") as file:
            file.truncate(here[-1].stat().st_size // 2)
    elif breakage == "deleted-newest-smallest":
        here[0].unlink()
    elif breakage == "empty-newest-largest":
        here[-1].write_bytes(b"")


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A folder whose path has the same length in every run, and the random generators seeded:
    Megatron pickles its save folder's path and the generators' states into each checkpoint,
    whose size the reports then say (pytest's own folders are numbered; pytest-randomly seeds
    each session anew)."""
    random.seed(0)
    numpy.random.seed(0)
    if (torch := sys.modules.get("torch")) is not None:
        torch.manual_seed(0)
    folder = Path(tempfile.mkdtemp(prefix="ckptdoctor-identity-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> None:
    """One disk and no process holding any file, as in ``test_ci_output``'s reports."""
    monkeypatch.setattr(volumes, "volume", lambda path: SAME_VOLUME)
    real = processes.open_by
    monkeypatch.setattr(processes, "open_by", lambda *args, **kwargs: (real(*args, **kwargs)[0], None))


def reports(cli, folder: Path, root: Path) -> str:
    """Every command's JSON report of ``folder``, run from ``root`` (paths in them relative to it)."""
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (DATED, DATED), follow_symlinks=False)
    said = {}
    for name, args in COMMANDS.items():
        result = cli(*args, os.path.relpath(folder, root))
        said[name] = {"exit": result.exit_code, "report": json.loads(result.stdout)}
    return json.dumps(said, indent=1, sort_keys=True) + "\n"


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_every_layouts_reports_are_unchanged(trees, breakage, cli, world, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    for layout, folder in sorted(trees.items()):
        broken(folder, breakage)
        golden(f"reports/{layout}-{breakage}.json", reports(cli, folder, tmp_path))


def test_the_examples_and_the_corpus_reports_are_unchanged(cli, world, monkeypatch, tmp_path):
    work = tmp_path / "work"
    runs = {f"example-{path.name}": path for path in sorted((ROOT / "examples" / "runs").iterdir()) if path.is_dir()}
    # the shared corpus where it is beside the project, else the part of it committed: each has its own golden files
    corpus = "corpus" if CORPUS == SHARED else "committed-corpus"
    runs |= {f"{corpus}-{path.name}": path for path in sorted(CORPUS.iterdir()) if path.is_dir()}
    monkeypatch.chdir(work.parent)
    for name, source in runs.items():
        copy = work / name
        shutil.copytree(source, copy, symlinks=True)
        golden(f"reports/{name}.json", reports(cli, copy, tmp_path))


def test_an_empty_folder_and_a_folder_of_other_files_report_as_before(cli, world, monkeypatch, tmp_path):
    """No layout loads for a folder that holds nothing (issue 37's start-up): the report is the same."""
    monkeypatch.chdir(tmp_path)
    empty, others = tmp_path / "empty", tmp_path / "others"
    (empty / "logs").mkdir(parents=True)
    (others / "logs").mkdir(parents=True)
    (others / "README.md").write_text("notes\n")
    (others / "weights.pt").write_bytes(b"not a checkpoint")
    (others / "logs" / "train.log").write_text("step 1\n")
    golden("reports/empty.json", reports(cli, empty, tmp_path))
    golden("reports/other-files.json", reports(cli, others, tmp_path))
