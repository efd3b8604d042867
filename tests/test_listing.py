"""The folder listers: ``discover.python_list`` and its compiled twin give the same listing.

Every kind of entry a run folder can hold is listed by both and compared through ``repr`` (so
that ``True`` and ``1``, ``0.0`` and ``0`` differ), and what each gives is checked against the OS
too: twins that agreed on a wrong answer would pass a comparison alone. What depends on the
user or the file system is made to happen: permissions bite in a child without capabilities
(root reads and searches any folder), and a small ``LD_PRELOAD`` library makes ``readdir`` name
entries that are gone by the time they are stat'ed, or give no type (``DT_UNKNOWN``, as some
file systems do). The compiled tests skip, saying so, where the extension was not built;
``CKPTDOCTOR_REQUIRE_CEDGES=1`` turns that into a failure.
"""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from _leaks import assert_nothing_left_behind

from ckptdoctor.discover import SKIPPED_FOLDERS, Listed, Lister, compiled_list, display, python_list
from ckptdoctor.model import Entry
from ckptdoctor.places import MOVED_ASIDE, OWN_FOLDER
from ckptdoctor.testing import SMALL_MODEL, write_burn_run

ROOT = Path(__file__).resolve().parents[1]
HANG = 120
"""Seconds after which a child counts as hung."""
NOT_BUILT = "ckptdoctor._clisting is not built (no compiler at install time): the Python lister alone is tested"
BURNPACK = SMALL_MODEL.model_record()


@pytest.fixture(params=["python", "compiled"])
def lister(request: pytest.FixtureRequest) -> Lister:
    if request.param == "python":
        return python_list
    if compiled_list is None:
        pytest.skip(NOT_BUILT)
    return compiled_list


def needs_compiled() -> Lister:
    if compiled_list is None:
        pytest.skip(NOT_BUILT)
    return compiled_list


def folder_of(path: Path | str | bytes) -> str:
    return os.fsdecode(path)


def listed(lister: Lister, folder: Path | str | bytes) -> Listed:
    return lister(folder_of(folder), display(folder_of(folder)))


def same(folder: Path | str | bytes) -> Listed:
    """Both listers' listing of ``folder``, which must be the same to the byte; the Python one's."""
    compiled = needs_compiled()
    python = listed(python_list, folder)
    assert repr(listed(compiled, folder)) == repr(python), folder
    return python


def by_name(found: Listed) -> dict[str, Entry]:
    return {entry.name: entry for entry in found[0]}


def make(folder: Path, name: str | bytes, data: bytes = b"") -> Path:
    path = Path(os.fsdecode(os.path.join(os.fsencode(folder), os.fsencode(name))))
    path.write_bytes(data)
    return path


# --- a tree of every kind of entry ---------------------------------------------------------------

ODD_NAMES: list[str | bytes] = [
    b"\xff\xfe.bpk",  # not UTF-8
    b"\xe9t\xe9.bpk",  # Latin-1
    "café.bpk",
    "emoji😀.bpk",
    "new\nline.bpk",
    "sp ace.bpk",
    "back\\slash.bpk",
    "tab\t.bpk",
    "mo\x1bdel.bpk",
    "'quote\".bpk",
]
MTIMES = [1_700_000_000_123_456_789 + i * 7_777_777_777 for i in range(40)] + [0, 1, 999_999_999, -1_000_000_001]
"""Modification times (ns), many of which ``sec + nsec * 1e-9`` and ``ns / 1e9`` round apart."""


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every kind of entry a scan meets (made once: do not change it)."""
    root = tmp_path_factory.mktemp("tree")
    make(root, "model-1.bpk", BURNPACK)
    make(root, "optim-1.bpk", BURNPACK[:100])
    make(root, "empty.bpk")
    os.link(root / "model-1.bpk", root / "hard.bpk")
    for i, ns in enumerate(MTIMES):
        os.utime(make(root, f"time-{i}.bpk", b"t"), ns=(ns, ns))
    for name in ODD_NAMES:
        make(root, name, b"odd")
    (root / "sub" / "nested" / "deeper").mkdir(parents=True)
    make(root / "sub", "inner.bpk", BURNPACK)
    make(root / "sub" / "nested" / "deeper", "deep.bpk", b"deep")
    odd_folder = Path(os.fsdecode(os.fsencode(root) + b"/dir-\xff"))
    odd_folder.mkdir()
    make(odd_folder, b"\xfe-inner.bpk", b"inner")
    (root / "link-file").symlink_to("model-1.bpk")
    (root / "link-folder").symlink_to("sub")
    (root / "link-chain").symlink_to("link-file")
    (root / "link-device").symlink_to("/dev/null")
    (root / "link-git").symlink_to(".git")
    (root / "dangling").symlink_to("nowhere")
    (root / "loop").symlink_to("loop")
    make(root, b"\xff-target", b"target")
    os.symlink(b"\xff-target", os.fsencode(root / "link-odd-target"))
    os.mkfifo(root / "fifo")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(root / "sock"))
    for skipped in sorted({*SKIPPED_FOLDERS, OWN_FOLDER, MOVED_ASIDE}):
        (root / skipped).mkdir()
        make(root / skipped, "model-9.bpk", BURNPACK)
    return root


def walk(lister: Lister, top: Path) -> dict[str, Listed]:
    """Every folder the lister reaches from ``top``, with its listing."""
    found = {}
    pending = [(folder_of(top), display(folder_of(top)))]
    while pending:
        os_dir, shown_dir = pending.pop()
        found[os_dir] = lister(os_dir, shown_dir)
        pending.extend(found[os_dir][1])
    return found


def test_both_listers_list_every_folder_of_the_tree_alike(tree: Path) -> None:
    compiled = needs_compiled()
    python = walk(python_list, tree)
    assert repr(walk(compiled, tree)) == repr(python)
    assert len(python) == 5  # the tree, sub, nested, deeper, dir-\xff: no skipped folder, no link followed
    for skipped in {*SKIPPED_FOLDERS, OWN_FOLDER, MOVED_ASIDE}:  # named directly, each is listed
        same(tree / skipped)
    same(folder_of(tree) + "/")  # a folder ending with "/": no second one in the paths


def test_each_lister_lists_what_the_os_holds(lister: Lister, tree: Path) -> None:
    found = listed(lister, tree)
    entries = by_name(found)
    on_disk = set(os.listdir(tree))
    assert [entry.name for entry in found[0]] == [name for name in os.listdir(tree) if name not in {OWN_FOLDER, MOVED_ASIDE}]
    assert set(entries) == on_disk - {OWN_FOLDER, MOVED_ASIDE}
    assert {os.path.basename(path) for path, _ in found[1]} == {"sub", "dir-\udcff"}
    for entry in found[0]:
        assert type(entry) is Entry
        assert entry.os_path == os.path.join(tree, entry.name)
        assert entry.path == f"{tree}/{display(entry.name)}"  # a backslash doubled too (issue 32)
        if entry.dangling or (entry.is_dir and not entry.is_symlink):
            assert (entry.size, entry.inode, entry.mtime, entry.link, entry.links) == (0, None, 0.0, None, 1)
            continue
        info = os.stat(entry.os_path)
        assert entry.inode == (info.st_dev, info.st_ino)
        assert repr(entry.mtime) == repr(info.st_mtime)
        assert entry.links == info.st_nlink
        assert entry.size == (0 if stat.S_ISDIR(info.st_mode) else info.st_size)
        assert entry.is_symlink == os.path.islink(entry.os_path)
        assert entry.link == (os.readlink(entry.os_path) if entry.is_symlink else None)
    assert entries["link-folder"][4:6] == (True, True) and entries["link-folder"].link == "sub"
    assert entries["link-odd-target"].link == "\udcff-target"
    assert entries["hard.bpk"].links == 2 and entries["hard.bpk"].inode == entries["model-1.bpk"].inode
    assert entries["fifo"].size == 0 and not entries["fifo"].dangling
    assert not entries["sock"].dangling and stat.S_ISSOCK(os.lstat(tree / "sock").st_mode)
    assert entries["loop"].dangling and entries["dangling"].dangling
    assert entries["\udcff\udcfe.bpk"].path == f"{tree}/\\xff\\xfe.bpk"


@pytest.mark.slow
def test_ten_thousand_entries_of_every_kind_come_in_the_order_the_os_gives(tmp_path: Path) -> None:
    """Many batches of the compiled lister's reads, with their ends in the middle of anything."""
    for i in range(10_000):
        kind = i % 50
        if kind == 7:
            (tmp_path / f"link-{i}").symlink_to(f"file-{i - 1}")
        elif kind == 13:
            (tmp_path / f"gone-{i}").symlink_to("nowhere")
        elif kind == 29:
            (tmp_path / f"folder-{i}").mkdir()
        else:
            make(tmp_path, f"file-{i}", b"x" * (i % 7))
    found = same(tmp_path)
    assert len(found[0]) == 10_000 and len(found[1]) == 200


def test_a_path_too_long_for_the_kernel_is_not_stat_ed_as_a_shorter_one(tmp_path: Path) -> None:
    """The folder's path fits in PATH_MAX, the paths of its entries do not: ``os.scandir``'s
    stat of them fails (ENAMETOOLONG), and the compiled lister's relative stat must fail alike."""
    deep = tmp_path
    while len(os.fsencode(deep)) < 3900:
        deep = deep / ("d" * min(200, 3900 - len(os.fsencode(deep))))
        deep.mkdir()
    folder = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    try:
        long = "f" * 250
        os.close(os.open(long, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=folder))
        os.mkdir("g" * 250, dir_fd=folder)
        os.symlink(long, "l" * 250, dir_fd=folder)
    finally:
        os.close(folder)
    make(deep, "short", b"s")
    entries = by_name(same(deep))
    assert entries["f" * 250].dangling and entries["l" * 250].dangling and entries["g" * 250].is_dir
    assert not entries["short"].dangling and entries["short"].size == 1


def _raised(lister: Lister, folder: str) -> tuple[object, ...]:
    with pytest.raises(OSError) as error:
        lister(folder, folder)
    return type(error.value), error.value.errno, error.value.filename, error.value.strerror, str(error.value)


def test_a_folder_that_cannot_be_listed_raises_as_os_scandir_does(tree: Path) -> None:
    compiled = needs_compiled()
    for folder in [*(folder_of(tree / name) for name in ("missing", "model-1.bpk", "fifo", "dangling", "loop")), ""]:
        assert _raised(compiled, folder) == _raised(python_list, folder), folder
    assert _raised(python_list, folder_of(tree / "missing"))[:2] == (FileNotFoundError, 2)
    for lister_ in (python_list, compiled):
        with pytest.raises(ValueError, match="embedded null"):
            lister_(f"{tree}/a\0b", "shown")


# --- what only a child can see: permissions, and readdir as other file systems give it -------------

_CHILD = """
import os, pickle, sys
from ckptdoctor.discover import compiled_list, display, python_list
def listed(lister, folder):
    try:
        return lister(folder, display(folder))
    except OSError as error:
        return (type(error), error.errno, error.filename, error.strerror)
listers = [lister for lister in (python_list, compiled_list) if lister is not None]
sys.stdout.buffer.write(pickle.dumps({folder: [listed(lister, folder) for lister in listers] for folder in sys.argv[1:]}))
"""


def in_child(folders: list[Path], preload: Path | None = None) -> dict[str, object]:
    """Each folder as each lister lists it (or the error it raises), from a child without
    capabilities (when root: so that permissions bite) and with ``preload`` loaded first; the
    listers must agree. The Python lister's result, by folder."""
    command = [sys.executable, "-c", _CHILD, *map(folder_of, folders)]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root searches and reads any folder, and setpriv is not here to drop that")
        command = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--", *command]
    env = {**os.environ, **({"LD_PRELOAD": str(preload)} if preload else {})}
    done = subprocess.run(command, capture_output=True, timeout=HANG, cwd=ROOT, env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    found: dict[str, list[object]] = pickle.loads(done.stdout)
    results = {}
    for folder, each in found.items():
        assert all(repr(other) == repr(each[0]) for other in each[1:]), folder
        results[folder] = each[0]
    return results


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A folder that may be searched but not read, and one that may be read but not searched."""
    unreadable, unsearchable = tmp_path / "unreadable", tmp_path / "unsearchable"
    for folder in (unreadable, unsearchable):
        folder.mkdir()
        make(folder, "model-1.bpk", BURNPACK)
        (folder / "sub").mkdir()
        (folder / "link").symlink_to("model-1.bpk")
        os.mkfifo(folder / "fifo-unknown")  # given no type by the preloaded readdir
    unreadable.chmod(0o300)
    unsearchable.chmod(0o600)
    try:
        yield unreadable, unsearchable
    finally:
        unreadable.chmod(0o700)
        unsearchable.chmod(0o700)


def test_folders_that_may_not_be_read_or_searched_are_listed_alike(locked: tuple[Path, Path]) -> None:
    unreadable, unsearchable = locked
    found = in_child([unreadable, unsearchable])
    assert found[str(unreadable)] == (PermissionError, 13, str(unreadable), "Permission denied")
    listing = found[str(unsearchable)]
    assert isinstance(listing, tuple)
    entries = by_name(listing)
    # readdir gives the names, but no stat can reach them: each is denied to this user, not dangling
    # (issue 32), a symlink only where readdir's type says so
    assert all(entries[name].denied and not entries[name].dangling for name in ("model-1.bpk", "link", "fifo-unknown"))
    assert entries["link"].is_symlink and not entries["model-1.bpk"].is_symlink and not entries["fifo-unknown"].is_symlink
    assert entries["sub"].is_dir and listing[1] == [(str(unsearchable / "sub"), str(unsearchable / "sub"))]


_SHIM = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <string.h>

/* Names beginning "vanish" come back as "absent...", which does not exist: listed, then gone when
 * stat'ed. Names holding "unknown" come back without a type, as some file systems give them. */
static void fake(char *name, unsigned char *type) {
    if (strncmp(name, "vanish", 6) == 0) {
        memcpy(name, "absent", 6);
    }
    if (strstr(name, "unknown") != NULL) {
        *type = DT_UNKNOWN;
    }
}

struct dirent *readdir(DIR *dir) {
    static struct dirent *(*real)(DIR *);
    if (real == NULL) {
        real = (struct dirent * (*)(DIR *)) dlsym(RTLD_NEXT, "readdir");
    }
    struct dirent *d = real(dir);
    if (d != NULL) {
        fake(d->d_name, &d->d_type);
    }
    return d;
}

struct dirent64 *readdir64(DIR *dir) {
    static struct dirent64 *(*real)(DIR *);
    if (real == NULL) {
        real = (struct dirent64 * (*)(DIR *)) dlsym(RTLD_NEXT, "readdir64");
    }
    struct dirent64 *d = real(dir);
    if (d != NULL) {
        fake(d->d_name, &d->d_type);
    }
    return d;
}
"""


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None or not sys.platform.startswith("linux"):
        pytest.skip("needs gcc and glibc's readdir to interpose")
    folder = tmp_path_factory.mktemp("shim")
    (folder / "shim.c").write_text(_SHIM)
    command = ["gcc", "-shared", "-fPIC", "-O2", str(folder / "shim.c"), "-o", str(folder / "shim.so"), "-ldl"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=HANG)
    assert done.returncode == 0, done.stderr
    return folder / "shim.so"


def test_entries_that_vanish_or_come_without_a_type_are_listed_alike(tmp_path: Path, shim: Path, locked: tuple[Path, Path]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    make(run, "vanish-file", b"gone")
    (run / "vanish-link").symlink_to("model-1.bpk")
    make(run, "vanish-unknown", b"gone")
    (run / "vanish-folder").mkdir()  # a folder is not stat'ed: listed, and entered later
    make(run, "model-1.bpk", BURNPACK)
    make(run, "file-unknown", b"12345")
    (run / "folder-unknown").mkdir()
    (run / "link-unknown").symlink_to("model-1.bpk")
    (run / "folder-link-unknown").symlink_to("folder-unknown")
    (run / "dangling-unknown").symlink_to("nowhere")
    (run / "loop-unknown").symlink_to("loop-unknown")
    os.mkfifo(run / "fifo-unknown")
    _, unsearchable = locked
    found = in_child([run, unsearchable], preload=shim)
    listing = found[str(run)]
    assert isinstance(listing, tuple)
    entries = by_name(listing)
    assert "absent-link" in entries, "the preloaded readdir did not take: this test tests nothing"
    assert "absent-file" not in entries and "absent-unknown" not in entries  # vanished: no longer part of the run
    assert entries["absent-link"].dangling and entries["absent-link"].is_symlink  # a symlink whose stat fails
    assert entries["absent-folder"].is_dir
    assert entries["file-unknown"].size == 5 and not entries["file-unknown"].is_symlink
    assert entries["folder-unknown"].is_dir and not entries["folder-unknown"].is_symlink
    assert entries["link-unknown"].is_symlink and entries["link-unknown"].link == "model-1.bpk"
    assert entries["folder-link-unknown"].is_dir and entries["folder-link-unknown"].is_symlink
    assert entries["dangling-unknown"].dangling and entries["loop-unknown"].dangling
    assert not entries["fifo-unknown"].dangling
    assert sorted(os.path.basename(path) for path, _ in listing[1]) == ["absent-folder", "folder-unknown"]
    locked_listing = found[str(unsearchable)]
    assert isinstance(locked_listing, tuple)
    assert by_name(locked_listing)["fifo-unknown"].denied  # its lstat, asked for its type, is refused


# --- the compiled function itself ---------------------------------------------------------------


def _list_folder() -> Callable[..., Listed]:
    needs_compiled()
    from ckptdoctor._clisting import list_folder  # only where it was built

    return list_folder


def test_an_entry_type_that_is_not_a_bare_named_tuple_is_called() -> None:
    list_folder = _list_folder()
    folder = folder_of(ROOT / "examples" / "runs")
    args = (folder + "/", display, frozenset(), frozenset())
    expected = list_folder(folder, *args[:1], Entry, *args[1:])

    class WithDict(Entry):  # no __slots__: its instances are bigger than a tuple
        pass

    class Three(NamedTuple):
        a: object
        b: object
        c: object

    as_dicts = list_folder(folder, *args[:1], WithDict, *args[1:])
    assert [type(entry) for entry in as_dicts[0]] == [WithDict] * len(expected[0]) and as_dicts == expected
    assert list_folder(folder, *args[:1], lambda *fields: fields, *args[1:]) == (tuple(map(tuple, expected[0])), expected[1])
    with pytest.raises(TypeError):
        list_folder(folder, *args[:1], Three, *args[1:])


def test_display_shows_only_names_that_are_not_ascii(tmp_path: Path) -> None:
    list_folder = _list_folder()
    make(tmp_path, "plain.bpk")
    make(tmp_path, b"\xff.bpk")
    make(tmp_path, "café.bpk")
    asked: list[str] = []

    def shown(name: str) -> str:
        asked.append(name)
        return "<" + display(name) + ">"

    entries = by_name(list_folder(str(tmp_path), "P/", Entry, shown, frozenset(), frozenset()))
    assert sorted(asked) == sorted(["\udcff.bpk", "café.bpk"])
    assert [entries[name].path for name in ("plain.bpk", "\udcff.bpk", "café.bpk")] == ["P/plain.bpk", "P/<\\xff.bpk>", "P/<café.bpk>"]

    def refuses(name: str) -> str:
        raise LookupError(name)

    with pytest.raises(LookupError):
        list_folder(str(tmp_path), "P/", Entry, refuses, frozenset(), frozenset())


CALLS = 100
"""Calls in the leak test: a leak of one object per call would add more than it allows."""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_no_descriptor_or_memory_is_left_behind(tree: Path) -> None:
    """Listings that succeed, fail to open, and fail half-way (a display that raises)."""
    list_folder = _list_folder()
    folder = folder_of(tree)

    def refuses(name: str) -> str:
        raise LookupError(name)

    def calls() -> None:
        for _ in range(CALLS):
            needs_compiled()(folder, folder)
            for bad, show in ((folder + "/missing", display), (folder, refuses)):
                try:
                    list_folder(bad, "p/", Entry, show, frozenset(), frozenset())
                except (OSError, LookupError):
                    pass
                else:
                    raise AssertionError("a listing that must fail did not")

    assert_nothing_left_behind(calls, CALLS)


# --- the switch, and whole reports ---------------------------------------------------------------


def _inspect_json(path: Path, compiled: bool) -> tuple[int, bytes]:
    env = {**os.environ, "CKPTDOCTOR_NO_CEDGES": "0" if compiled else "1"}
    command = [sys.executable, "-m", "ckptdoctor", "inspect", "--format", "json", str(path)]
    done = subprocess.run(command, capture_output=True, timeout=HANG, cwd=ROOT, env=env, check=False)
    assert done.returncode in (0, 1), done.stderr.decode()
    return done.returncode, done.stdout


@pytest.mark.slow
def test_inspect_writes_the_same_json_with_either_lister(tmp_path: Path) -> None:
    needs_compiled()
    write_burn_run(tmp_path / "run", range(1, 40))
    run = tmp_path / "run"
    os.link(run / "model-3.bpk", run / "model-40.bpk")
    (run / "model-41.bpk").symlink_to("model-2.bpk")
    (run / "model-42.bpk").symlink_to("gone.bpk")
    (run / "optim-42.bpk").symlink_to("optim-42.bpk")
    os.mkfifo(run / "scheduler-43.bpk")
    make(run, b"model-44-\xff.bpk", BURNPACK)
    make(run, "model-45\n.bpk", BURNPACK)
    make(run, "model-46.bpk")
    (run / "latest").symlink_to(run)
    write_burn_run(tmp_path / "other" / "nested", range(1, 4))
    (tmp_path / "other" / ".git").mkdir()
    write_burn_run(tmp_path / "other" / ".git" / "hidden", range(1, 3))
    for each in (tmp_path / "run", tmp_path):
        assert _inspect_json(each, compiled=True) == _inspect_json(each, compiled=False)
