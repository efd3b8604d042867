"""``read_edges``: the heads and tails of many files in one call, in C and in Python alike.

Every case runs through both implementations (the compiled one skips, saying so, where the
extension was not built) and checks what each returns against the bytes on disk; a last test
runs every case through both at once and compares the lists. ``CKPTDOCTOR_REQUIRE_CEDGES=1``
turns the skip into a failure, so that CI proves the compiled path is built and runs.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest
from _leaks import assert_nothing_left_behind

from ckptdoctor.readers._edges import Edges, ReadEdges, compiled_read_edges, python_read_edges

ROOT = Path(__file__).resolve().parents[1]
HEAD, TAIL = 16, 8
HANG = 60
"""Seconds after which a read counts as hung."""

NOT_BUILT = "ckptdoctor.readers._cedges is not built (no compiler at install time): the Python reader alone is tested"


@pytest.fixture(params=["python", "compiled"])
def read_edges(request: pytest.FixtureRequest) -> ReadEdges:
    if request.param == "python":
        return python_read_edges
    if compiled_read_edges is None:
        pytest.skip(NOT_BUILT)
    return compiled_read_edges


def edges(read: ReadEdges, path: Path | bytes, size: int, head: int = HEAD, tail: int = TAIL) -> Edges:
    (found,) = read([path if isinstance(path, bytes) else os.fsencode(path)], [size], head, tail, 1)
    return found


def written(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


def pattern(n: int) -> bytes:
    """``n`` bytes in which every offset reads differently, so that a read at the wrong place shows."""
    return bytes(i * 7 % 251 for i in range(n))


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (0, b""),
        (1, pattern(1)),
        (HEAD, pattern(HEAD)),
        (HEAD + TAIL, pattern(HEAD + TAIL)),
        (HEAD + TAIL + 1, (pattern(HEAD + TAIL + 1)[:HEAD], pattern(HEAD + TAIL + 1)[-TAIL:])),
        (1000, (pattern(1000)[:HEAD], pattern(1000)[-TAIL:])),
    ],
    ids=["empty", "one byte", "head", "head+tail", "head+tail+1", "longer"],
)
def test_a_small_file_is_read_whole_and_a_longer_one_by_its_ends(read_edges: ReadEdges, tmp_path: Path, size: int, expected: Edges) -> None:
    assert edges(read_edges, written(tmp_path, "f", pattern(size)), size) == expected


def test_a_large_file_gives_its_first_and_last_bytes(read_edges: ReadEdges, tmp_path: Path) -> None:
    data = os.urandom(6 * 1024 * 1024 + 123)
    path = written(tmp_path, "big", data)
    assert edges(read_edges, path, len(data), 16 * 1024, 4 * 1024) == (data[: 16 * 1024], data[-4 * 1024 :])


@pytest.mark.parametrize(
    ("actual", "listed", "expected"),
    [
        (10, 20, pattern(10)),  # whole, shrank: what is there
        (10, 100, (pattern(10), b"")),  # by its ends, shrank below the tail's start
        (95, 100, (pattern(95)[:HEAD], pattern(95)[92:])),  # shrank into the tail
        (30, 10, pattern(10)),  # whole, grew: no more than listed
        (100, 40, (pattern(100)[:HEAD], pattern(100)[32:40])),  # by its ends, grew: the tail as of the listed size
    ],
    ids=["whole shrank", "shrank past the tail", "shrank into the tail", "whole grew", "grew"],
)
def test_a_file_that_changed_since_listed_gives_what_was_there(
    read_edges: ReadEdges, tmp_path: Path, actual: int, listed: int, expected: Edges
) -> None:
    assert edges(read_edges, written(tmp_path, "f", pattern(actual)), listed) == expected


def test_what_is_no_readable_regular_file_gives_none(read_edges: ReadEdges, tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert edges(read_edges, tmp_path / "folder", 4096) is None
    assert edges(read_edges, tmp_path / "dangling", 10) is None
    assert edges(read_edges, tmp_path / "missing", 10) is None
    assert edges(read_edges, b"/dev/null", 0) is None  # a character device


def test_a_fifo_gives_none_without_blocking(tmp_path: Path) -> None:
    """Run in a child, so that a read that blocks fails the test instead of hanging the suite."""
    fifo = tmp_path / "model.bpk"
    os.mkfifo(fifo)
    code = (
        "import os, sys\n"
        "from ckptdoctor.readers._edges import compiled_read_edges, python_read_edges\n"
        "for read in (python_read_edges, compiled_read_edges):\n"
        "    if read is not None:\n"
        "        print(read([os.fsencode(sys.argv[1])], [100], 16, 8, 1))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=HANG, cwd=ROOT, check=True)
    assert done.stdout.split("\n")[:-1] == ["[None]"] * (1 + (compiled_read_edges is not None))


def test_a_symlink_to_a_file_is_followed(read_edges: ReadEdges, tmp_path: Path) -> None:
    target = written(tmp_path, "target", pattern(50))
    (tmp_path / "link").symlink_to(target)
    assert edges(read_edges, tmp_path / "link", 50) == (pattern(50)[:HEAD], pattern(50)[-TAIL:])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_a_file_that_may_not_be_read_gives_none(read_edges: ReadEdges, tmp_path: Path) -> None:
    path = written(tmp_path, "secret", b"abc")
    path.chmod(0)
    assert edges(read_edges, path, 3) is None


def test_names_are_bytes_of_any_encoding_and_relative_to_the_working_folder(
    read_edges: ReadEdges, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = b"model-\xff\xfe.bin"
    (tmp_path / os.fsdecode(name)).write_bytes(b"latin")
    assert edges(read_edges, os.path.join(os.fsencode(tmp_path), name), 5) == b"latin"
    monkeypatch.chdir(tmp_path)
    assert edges(read_edges, name, 5) == b"latin"


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[bytes], list[int], list[Edges]]:
    """300 files of every kind above, and what each reads as (made once: do not change them)."""
    tmp_path = tmp_path_factory.mktemp("many")
    paths, sizes, expected = [], [], []
    for i in range(300):
        size = (i * 37) % 90
        kind = i % 10
        path = tmp_path / f"f{i:03d}"
        if kind == 7:
            path.mkdir()
            found: Edges = None
        elif kind == 8:
            found = None  # missing
        else:
            path.write_bytes(pattern(size))
            found = pattern(size) if size <= HEAD + TAIL else (pattern(size)[:HEAD], pattern(size)[-TAIL:])
        paths.append(os.fsencode(path))
        sizes.append(size)
        expected.append(found)
    return paths, sizes, expected


@pytest.mark.parametrize("threads", [-1, 0, 1, 2, 4, 1000])
def test_many_files_on_any_number_of_threads_give_one_list_in_order(
    read_edges: ReadEdges, many: tuple[list[bytes], list[int], list[Edges]], threads: int
) -> None:
    paths, sizes, expected = many
    assert read_edges(paths, sizes, HEAD, TAIL, threads) == expected
    assert read_edges(iter(paths), tuple(sizes), HEAD, TAIL, threads) == expected  # any iterable
    assert read_edges([], [], HEAD, TAIL, threads) == []


def test_both_readers_agree_on_every_case(many: tuple[list[bytes], list[int], list[Edges]], tmp_path: Path) -> None:
    if compiled_read_edges is None:
        pytest.skip(NOT_BUILT)
    paths = [*many[0], os.fsencode(written(tmp_path, "big", os.urandom(1 << 20))), b"/dev/null", b"\xff\xfe"]
    sizes = [*many[1], 1 << 20, 0, 3]
    for head, tail in [(0, 0), (0, 5), (5, 0), (HEAD, TAIL), (16384, 4096)]:
        assert compiled_read_edges(paths, sizes, head, tail, 2) == python_read_edges(paths, sizes, head, tail, 1)


BAD_CALLS: list[tuple[Callable[[bytes], tuple[object, ...]], type[Exception]]] = [
    (lambda p: ([p, os.fsdecode(p)], [1, 1], HEAD, TAIL), TypeError),  # str, not bytes
    (lambda p: ([p, b"a\0b"], [1, 1], HEAD, TAIL), ValueError),
    (lambda p: ([p, p], [1], HEAD, TAIL), ValueError),
    (lambda p: ([p, p], [1, -1], HEAD, TAIL), ValueError),
    (lambda p: ([p, p], [1, 1.0], HEAD, TAIL), TypeError),
    (lambda p: ([p], [1], -1, TAIL), ValueError),
    (lambda p: ([p], [1], HEAD, -1), ValueError),
]


@pytest.mark.parametrize(("call", "error"), BAD_CALLS)
def test_bad_arguments_are_refused_before_anything_is_read(
    read_edges: ReadEdges, tmp_path: Path, call: Callable[[bytes], tuple[object, ...]], error: type[Exception]
) -> None:
    path = os.fsencode(written(tmp_path, "f", b"x"))
    with pytest.raises(error):
        read_edges(*call(path))  # type: ignore[arg-type]


CALLS = 20
"""Calls in the leak test: a leak of one result per call would add more than it allows."""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_no_descriptor_or_memory_is_left_behind(read_edges: ReadEdges, many: tuple[list[bytes], list[int], list[Edges]]) -> None:
    """Reads that succeed, fail, come up short, and calls refused half-way through their checks."""
    paths, sizes = [*many[0][:100], many[0][0]], [*many[1][:100], 10_000]  # the last read comes up short

    def calls() -> None:
        for _ in range(CALLS):
            read_edges(paths, sizes, HEAD, TAIL, 2)
            try:
                read_edges([*paths, "str"], [*sizes, 1], HEAD, TAIL, 2)  # type: ignore[list-item]
            except TypeError:
                pass
            else:
                raise AssertionError("a str path was read")

    assert_nothing_left_behind(calls, CALLS)


_TWINS = [
    # the module that picks, the name it picks under, its compiled and its Python twin
    ("ckptdoctor.readers._edges", "read_edges", "compiled_read_edges", "python_read_edges"),
    ("ckptdoctor.discover", "_list", "compiled_list", "python_list"),
]


@pytest.mark.parametrize(("module", "chosen", "compiled", "python"), _TWINS)
def test_each_module_says_which_twin_it_uses(module: str, chosen: str, compiled: str, python: str) -> None:
    owner = importlib.import_module(module)
    assert (getattr(owner, chosen) is getattr(owner, compiled)) == owner.COMPILED
    assert (getattr(owner, compiled) is not None and os.environ.get("CKPTDOCTOR_NO_CEDGES") != "1") == owner.COMPILED
    code = f"import {module} as m; print(m.COMPILED, m.{chosen}.__name__)"
    env = {**os.environ, "CKPTDOCTOR_NO_CEDGES": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG, cwd=ROOT, env=env, check=True)
    assert done.stdout.split() == ["False", python]


@pytest.mark.skipif(
    os.environ.get("CKPTDOCTOR_REQUIRE_CEDGES") != "1", reason="CKPTDOCTOR_REQUIRE_CEDGES=1 asks for the compiled extensions"
)
@pytest.mark.parametrize(("module", "chosen", "compiled", "python"), _TWINS)
def test_each_compiled_twin_is_built_where_required(module: str, chosen: str, compiled: str, python: str) -> None:
    owner = importlib.import_module(module)
    assert getattr(owner, compiled) is not None, f"{module}'s extension did not build: see the compiler's output in the install log"
    assert owner.COMPILED or os.environ.get("CKPTDOCTOR_NO_CEDGES") == "1"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("source", ["readers/_cedges.c", "_clisting.c"])
def test_the_c_source_compiles_without_a_warning(tmp_path: Path, source: str) -> None:
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        pytest.skip(f"no Python headers in {include}")
    # the headers as system headers: their own warnings vary with the Python version, not with this file
    command = ["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Wpedantic", "-Wconversion", "-Wshadow", "-Werror"]
    command += ["-fPIC", "-shared", "-pthread", "-isystem", include, str(ROOT / "ckptdoctor" / source), "-o", str(tmp_path / "built.so")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=HANG)
    assert done.returncode == 0, done.stderr
