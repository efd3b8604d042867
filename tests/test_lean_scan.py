"""The fast paths of a big scan give the reports the plain paths give.

A scan of a big run judges each distinct small content once and serves the rest from a memo;
these tests hold the memo to what judging each file afresh says, on names whose suffixes change
the verdict (what the name promises, a name-picked reader, a suffix's case)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from shared_corpus import CORPUS

from ckptdoctor.discover import discover
from ckptdoctor.layouts import judging
from ckptdoctor.layouts.registry import LAYOUTS, NAMED_FILES, layout_named
from ckptdoctor.model import (
    TOP_LEVEL_TENSORS,
    Checkpoint,
    CheckpointFile,
    Entry,
    FileIssue,
    FileReport,
    Problem,
    Role,
    Run,
    Status,
    Unit,
    Zeroed,
)
from ckptdoctor.pipelines.scan import inspect
from ckptdoctor.readers import _edges, files
from ckptdoctor.readers.sample import HEAD, TAIL, FileSample
from ckptdoctor.render import json as render_json
from ckptdoctor.rules.context import RunContext
from ckptdoctor.testing import SMALL_MODEL, write_burn_run
from tests.test_claims import CLAIMED

ROOT = Path(__file__).resolve().parents[1]
BURNPACK = SMALL_MODEL.model_record()
NAMES = [
    "model-1.bpk",
    "model-2.bpk",
    "model-3.BPK",
    "model-1.pt",  # burnpack bytes under a name that promises torch: CKD205
    "model-1.safetensors",
    "__0_0.distcp",  # a DCP data file: read as raw bytes whatever they are
    "__0_0.DISTCP",
    "model.safetensors.index.json",
    "latest",  # a name a framework names (DeepSpeed's pointer)
    "trainer_state.json",
    "training_args.bin",
    ".metadata",  # DCP's metadata: its name picks its reader ...
    "x.metadata",  # ... and a name that ends like it is judged by content
    "_CHECKPOINT_METADATA",
    "x.tmp",
    "noext",
]


def _fresh(path: Path) -> object:
    with FileSample.open(str(path)) as sample:
        return files.read_header(sample, path.name, NAMED_FILES)


@pytest.mark.parametrize("content", [BURNPACK, b"", b"\0" * 100, b'{"a": 1}', b"PK\x03\x04" + b"\0" * 40, b"\x80\x02}q\x00."])
def test_memoised_judging_says_what_judging_afresh_says(tmp_path: Path, content: bytes) -> None:
    for name in NAMES:
        (tmp_path / name).write_bytes(content)
    files._BY_CONTENT.clear()
    entries = [e for listing in discover(str(tmp_path)).listings for e in listing.entries]
    for _ in range(2):  # the second pass is served from the memo
        for entry in entries:
            assert files.probe(entry, NAMED_FILES) == _fresh(tmp_path / entry.name), entry.name


def test_the_memo_stays_bounded(tmp_path: Path) -> None:
    files._BY_CONTENT.clear()
    for number in range(files._BY_CONTENT_MAX + 10):
        path = tmp_path / f"model-{number}.bpk"
        path.write_bytes(BURNPACK + number.to_bytes(4, "little"))
    for listing in discover(str(tmp_path)).listings:
        for entry in listing.entries:
            files.probe(entry, NAMED_FILES)
    assert 0 < len(files._BY_CONTENT) <= files._BY_CONTENT_MAX


_FRAGMENTS = ["model", "optim", "scheduler", "epoch", "step", "=", "-", "_", ".", "3", "12", "v1", "ckpt", "checkpoint", "recovery"]
_SUFFIXES = [".bpk", ".mpk", ".mpk.gz", ".json", ".bin", ".pt", ".PT", ".pth", ".pth.tar", ".ckpt", ".safetensors", ".tmp", ""]


@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=6), st.sampled_from(_SUFFIXES), st.sampled_from(["", "\n", "x"]))
def test_a_layout_sifts_out_no_name_it_claims(parts: list[str], suffix: str, end: str) -> None:
    name = "".join(parts) + suffix + end
    for layout in LAYOUTS:
        if layout.claimable is not None and layout.claim(name) is not None:
            assert layout.claimable.search(name), (layout.name, name)


@pytest.mark.parametrize(("layout", "name"), [(layout, name) for layout, name, _ in CLAIMED])
def test_every_claimed_name_passes_its_layouts_sieve(layout: str, name: str) -> None:
    sieve = layout_named(layout).claimable
    assert sieve is None or sieve.search(name)


def _stdlib(body: dict[str, object]) -> bytes:
    """The document as the standard library writes it, encoded as the output encodes it."""
    return (json.dumps(body, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")


def _named_run(folder: Path) -> Path:
    """A burn run whose names hold what encoders disagree on: non-ASCII, control characters,
    bytes that are not UTF-8, quotes and backslashes."""
    names = ["model-1.bpk", "optim-1.bpk", "modèle-2.bpk", "mo\x1bdel-3.bpk", 'q"uote\\-4.bpk', "emoji😀-5.bpk"]
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(BURNPACK)
    os.close(os.open(os.fsencode(folder) + b"/bad\xff-6.bpk", os.O_CREAT | os.O_WRONLY, 0o644))
    return folder


def test_the_json_report_is_the_standard_librarys_document_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [str(p) for p in sorted((ROOT / "examples" / "runs").iterdir())]
    paths += [str(p) for p in sorted(CORPUS.iterdir())] if CORPUS.is_dir() else []
    paths.append(str(_named_run(tmp_path / "names")))
    reports = [inspect([path])[0] for path in paths]
    reports.append(inspect(paths)[0])  # several runs in one document: each one's checkpoints in place
    for report in reports:
        expected = _stdlib(render_json.document(report))
        assert b"".join(render_json.render(report)) == expected, report.runs
        monkeypatch.setattr(render_json, "BATCH", 2)  # the checkpoints of a big run, a few at a time
        assert b"".join(render_json.render(report)) == expected, report.runs
        monkeypatch.undo()


def test_a_string_orjson_refuses_is_written_by_the_standard_library() -> None:
    body: dict[str, object] = {"path": "bad\udcff.bpk", "bytes": 3}
    assert render_json.encoded(body) == _stdlib(body)
    assert render_json.encoded(body) == (json.dumps(body, separators=(",", ":")) + "\n").encode()


def test_a_report_orjson_refuses_in_part_is_the_standard_librarys_whole() -> None:
    """A lone surrogate in a run's checkpoints (written a batch at a time), or elsewhere in the
    document (its skeleton): the same bytes as the standard library's, no error."""
    report, _ = inspect([str(ROOT / "examples" / "runs" / "burn-healthy"), str(ROOT / "examples" / "runs" / "burn-truncated")])
    run = report.runs[0]
    first = run.checkpoints[0]
    odd_file = first.files[0]._replace(entry=first.files[0].entry._replace(path="bad\udcff.bpk"))
    odd_checkpoint = dataclasses.replace(first, files=(odd_file, *first.files[1:]))
    in_checkpoints = dataclasses.replace(
        report, runs=(dataclasses.replace(run, checkpoints=(odd_checkpoint, *run.checkpoints[1:])), *report.runs[1:])
    )
    in_skeleton = dataclasses.replace(report, runs=(dataclasses.replace(run, path="runs/\udcff"), *report.runs[1:]))
    for odd in (in_checkpoints, in_skeleton):
        written = b"".join(render_json.render(odd))
        assert written == _stdlib(render_json.document(odd)) and b"\\udcff" in written
        assert len(json.loads(written)["runs"]) == 2


def _inspect_json(path: Path, compiled: bool) -> str:
    env = {**os.environ, "CKPTDOCTOR_NO_CEDGES": "0" if compiled else "1"}
    done = subprocess.run(
        [sys.executable, "-m", "ckptdoctor", "inspect", "--format", "json", str(path)], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


def _odd_tree(folder: Path) -> Path:
    """A run with what a bulk read must hand back to the slow path: a FIFO and a folder under
    checkpoint names, a dangling symlink, a symlink to a file, an unreadable file (when not
    root), an empty file, and files just below, at and above what is read whole."""
    folder.mkdir()
    for epoch in (1, 2, 3):
        (folder / f"model-{epoch}.bpk").write_bytes(BURNPACK)
        (folder / f"optim-{epoch}.bpk").write_bytes(BURNPACK)
    os.mkfifo(folder / "scheduler-1.bpk")
    (folder / "scheduler-2.bpk").mkdir()
    (folder / "scheduler-3.bpk").symlink_to("model-3.bpk")
    (folder / "model-4.bpk").symlink_to("gone.bpk")
    (folder / "optim-4.bpk").write_bytes(b"")
    for epoch, size in ((5, HEAD + TAIL - 1), (6, HEAD + TAIL), (7, HEAD + TAIL + 1)):
        (folder / f"model-{epoch}.bpk").write_bytes(BURNPACK + b"\0" * (size - len(BURNPACK)))
    locked = folder / "optim-5.bpk"
    locked.write_bytes(BURNPACK)
    locked.chmod(0)
    return folder


@pytest.mark.slow
@pytest.mark.skipif(not _edges.COMPILED, reason="the compiled reader is not built here (no compiler when installed)")
def test_the_compiled_reader_and_the_python_one_give_the_same_report(tmp_path: Path) -> None:
    big = tmp_path / "big"  # past PARALLEL_MIN: the Python path reads in forked workers
    write_burn_run(big, range(1, 1600))
    folders = [ROOT / "examples" / "runs", _odd_tree(tmp_path / "odd"), big]
    folders += [CORPUS] if CORPUS.is_dir() else []
    for folder in folders:
        assert _inspect_json(folder, compiled=True) == _inspect_json(folder, compiled=False), folder


_REPORTS = (
    FileReport("burnpack"),
    FileReport("torch-zip", (FileIssue(Problem.TRUNCATED, "cut short"),)),
    FileReport("torch-zip", (FileIssue(Problem.NOT_A_CHECKPOINT, "not a checkpoint"),)),
    FileReport("msgpack", (FileIssue(Problem.LEGACY, "old"),)),
    FileReport("torch-zip", (), ((TOP_LEVEL_TENSORS, "0"),), keys=("model", "optimizer")),
    FileReport("torch-zip", (), ((TOP_LEVEL_TENSORS, "0"),), keys=("epoch",)),
    FileReport("torch-zip"),  # a bundle whose keys were not read
)
_ROLES = ((Role.MODEL,), (Role.OPTIMIZER,), (Role.SCHEDULER,), (Role.MODEL, Role.OPTIMIZER), (Role.TEMP,), (Role.POINTER,), (Role.CONFIG,))
_FILE = st.tuples(
    st.sampled_from(_ROLES), st.sampled_from(_REPORTS), st.sampled_from(["model-1.bpk", "optim-1.bpk", "a", "model-1.bpk.tmp", "b.tmp"])
)
_SHAPE = st.tuples(
    st.lists(_FILE, min_size=1, max_size=4),
    st.sampled_from([(Role.MODEL,), (Role.MODEL, Role.OPTIMIZER), (Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER)]),
    st.booleans(),  # single file
    st.sampled_from([frozenset(), frozenset({Role.CONFIG}), frozenset({Role.SCHEDULER})]),
    st.booleans(),  # absent files
    st.booleans(),  # zeros read whole
    st.booleans(),  # whole saves
)


_RESAVED = {"a": ("model-1.bpk", 1)}
"""``Layout.resaved`` of a layout that versions a taken name: ``a`` is a later save of ``model-1.bpk``."""


@pytest.mark.slow
@given(st.lists(_SHAPE, min_size=1, max_size=12))
def test_a_checkpoint_shapes_verdict_is_the_verdict_worked_out_afresh(shapes: list[tuple[Any, ...]]) -> None:
    """Checkpoints judged with one run's memo of verdicts by shape are the checkpoints judged
    one by one, whatever shapes repeat: names, staging files and whole saves included."""
    verdicts: judging.Verdicts = {}
    for index, (made, required, single, advisory, absent, whole, whole_saves) in enumerate(shapes * 2):
        files = tuple(
            CheckpointFile(Entry(name, f"run/{position}/{name}", f"run/{position}/{name}", 10), roles, name.split("-")[0], report)
            for position, (roles, report, name) in enumerate(made)
        )
        zeroed = (Zeroed(files[0].path, ("w",) if whole else (), index - 1),)
        resaved = _RESAVED.get if whole_saves else None  # a layout's whole saves, told apart by name
        args = (index, files, required, single, None, ("x",) if absent else (), advisory, zeroed, resaved)
        assert judging.checkpoint_of(*args, verdicts=verdicts) == judging.checkpoint_of(*args)


@pytest.mark.slow
@given(st.lists(st.lists(_FILE, min_size=1, max_size=4), min_size=1, max_size=10))
def test_files_by_report_and_kind_keep_the_runs_order(made: list[list[tuple[Any, ...]]]) -> None:
    """Every file once, in its report's and its kind's group; reports, kinds and files in the
    order of the run's files, which the checks that walk the groups rely on for their output."""
    checkpoints = tuple(
        Checkpoint(
            index,
            tuple(
                # equal roles as equal tuples that are not the same object, as claims make them
                CheckpointFile(Entry(name, f"run/{index}-{i}-{name}", "", 1), tuple(list(roles)), name[:1], report)
                for i, (roles, report, name) in enumerate(files)
            ),
            Status.COMPLETE,
        )
        for index, files in enumerate(made)
    )
    context = RunContext(Run("run", "burn", Unit.EPOCH, checkpoints, ()), layout_named("burn"))
    order = [file.path for _, file in context.files]
    grouped = [(report, kind) for report, kinds in context.by_report for kind in kinds]
    assert sorted(file.path for _, kind in grouped for _, file in kind.files) == sorted(order)
    for report, kind in grouped:
        assert kind.report is report
        assert all(file.report is report and file.roles == kind.roles and file.prefix == kind.prefix for _, file in kind.files)
        assert [file.path for _, file in kind.files] == [p for p in order if p in {f.path for _, f in kind.files}]
        assert len({(kind.roles, kind.prefix) for r, kind in grouped if r is report}) == sum(1 for r, _ in grouped if r is report)
    firsts = [kinds[0].files[0][1].path for _, kinds in context.by_report]
    assert firsts == [p for p in order if p in firsts]
    assert all(
        order.index(kinds[0].files[0][1].path) < order.index(f.path)
        for _, kinds in context.by_report
        for k in kinds[1:]
        for _, f in k.files
    )
