"""Paths the user gave -> folders with their entries, without following symlinks out.

Discovery never reads file contents; it only lists folders and stats files. Folder symlinks
are listed but not entered (no loops, nothing outside the tree), and folders that cannot be
listed are reported rather than skipped silently.

A folder is listed by the optional C extension ``ckptdoctor._clisting`` when it was built
(``setup.py``; on a folder of 150,000 files it costs about what ``find`` does, half of what
``os.scandir`` and an ``Entry`` per file cost in Python), else by :func:`python_list`, its
twin: the same entries, byte for byte. ``COMPILED`` says which; ``CKPTDOCTOR_NO_CEDGES=1`` in the
environment when this module is first imported makes it the Python one, as it does for
``readers._edges``.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from ckptdoctor.model import Entry
from ckptdoctor.places import MOVED_ASIDE, OWN_FOLDER
from ckptdoctor.progress import Tally
from ckptdoctor.quoting import shown
from ckptdoctor.regular import DENIED

SKIPPED_FOLDERS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", ".ckptdoctor", ".venv", "node_modules", ".tox", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
)
"""Folders below a user's path that never hold a run's checkpoints (ckptdoctor's own trash and
journal included, and virtual environments, whose packages ship test ``.pt`` files). Naming
one of them directly still scans it."""

_DIGITS = re.compile(r"(\d+)")


class PathNotFound(Exception):
    """A path the user gave does not exist or cannot be looked at (exit 2)."""


@dataclass(frozen=True)
class Listing:
    """One folder and everything directly inside it."""

    path: str
    """The folder as the user gave it, joined with its path below that."""
    os_path: str
    entries: tuple[Entry, ...]
    single_file: bool = False
    """The user named one file: the listing holds just that file."""

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        """Every entry's name, in order: what the layouts sift for names they claim."""
        return tuple(entry.name for entry in self.entries)

    @functools.cached_property
    def by_suffix(self) -> dict[str, list[str]]:
        """The names by their suffix from the first dot (``.bpk``, ``.pth.tar``, ``""`` without
        one), each group in order: a big folder has few, and a layout sifts them, not every name."""
        groups: dict[str, list[str]] = {}
        for name in self.names:
            dot = name.find(".")
            groups.setdefault(name[dot:] if dot >= 0 else "", []).append(name)
        return groups

    @functools.cached_property
    def file_names(self) -> frozenset[str]:
        """The names of the entries that are files, not folders: what a folder layout's signature
        looks at, asked of one big folder by every folder layout."""
        return frozenset(entry.name for entry in self.entries if not entry.is_dir)

    @functools.cached_property
    def folders(self) -> tuple[Entry, ...]:
        """The entries that are folders (a folder layout's checkpoints are among them)."""
        return tuple(entry for entry in self.entries if entry.is_dir)


@dataclass(frozen=True)
class Unlisted:
    """A folder below a user's path that could not be listed."""

    path: str
    reason: str
    os_path: str = ""
    denied: bool = False
    """This user may not list it (EACCES, EPERM): nothing is known of what it holds, and it is
    no damage (the checkpoint it belongs to is ``Status.UNREADABLE``)."""


@dataclass(frozen=True)
class Discovery:
    listings: tuple[Listing, ...]
    unlisted: tuple[Unlisted, ...]


display = shown
"""A path as it is printed (``quoting.shown``): a literal backslash doubled, bytes that are not
UTF-8 as ``\\xNN``; the lister calls it for every name that is not plain ASCII."""


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")

NOT_LOCAL = "an object-store URL: this command acts on local folders only, for now (mount the bucket, or copy the run)"
"""Why a URL (``s3://…``, ``gs://…``) is refused (exit 2) where a command cannot use one yet."""


def remote(path: str) -> bool:
    """Whether ``path`` is a URL rather than a local path (a local folder of that name wins)."""
    return bool(_URL.match(path)) and not os.path.lexists(path)


def discover(path: str, tally: Tally | None = None) -> Discovery:
    """List every folder at or below ``path`` (or just ``path`` when it names a file), counting
    the folders and files in ``tally`` as it goes."""
    if remote(path):
        raise PathNotFound(NOT_LOCAL)  # a store's listing is made in ``stores.listing``
    try:
        info = os.stat(path)
    except OSError as error:
        raise PathNotFound(_reason(error)) from error
    if not stat.S_ISDIR(info.st_mode):
        parent = os.path.dirname(path) or "."
        entry = _entry(os.path.basename(path), display(path), path, info, os.path.islink(path))
        return Discovery((Listing(display(parent), parent, (entry,), single_file=True),), ())

    listings: list[Listing] = []
    unlisted: list[Unlisted] = []
    pending = [(path, display(path))]
    while pending:
        os_dir, shown_dir = pending.pop()
        try:
            entries, subfolders = _list(os_dir, shown_dir)
        except OSError as error:
            unlisted.append(Unlisted(shown_dir, _reason(error), os_dir, error.errno in DENIED))
            continue
        listings.append(Listing(shown_dir, os_dir, entries))
        pending.extend(reversed(subfolders))
        if tally is not None:  # once per folder: the loop over its entries stays as it is
            tally.folders += 1
            tally.files += len(entries) - len(subfolders)
    listings.sort(key=lambda listing: natural_key(listing.path))
    return Discovery(tuple(listings), tuple(unlisted))


Listed: TypeAlias = tuple[tuple[Entry, ...], list[tuple[str, str]]]
"""A folder's entries, in the order the OS lists them, and the folders below it to list next
(each as its path to open and its path as shown)."""
Lister: TypeAlias = Callable[[str, str], Listed]
"""One folder (its path to open, its path as shown) -> what it holds. Raises ``OSError`` when
the folder cannot be opened or listed, as ``os.scandir`` raises it."""


def python_list(os_dir: str, shown_dir: str) -> Listed:
    """A :data:`Lister` on ``os.scandir``: the fallback, and the reference the compiled one matches."""
    entries: list[Entry] = []
    subfolders: list[tuple[str, str]] = []
    with os.scandir(os_dir) as scan:
        prefix = _shown_prefix(shown_dir)
        for item in scan:
            name = item.name
            if name in NEVER_PART_OF_A_RUN:
                continue
            shown = prefix + (name if name.isascii() and "\\" not in name else display(name))
            if shown == item.path:  # as it most often is: one string serves both
                shown = item.path
            is_symlink = False  # where the lstat that tells it fails, as in the compiled twin
            try:
                is_symlink = item.is_symlink()
                if item.is_dir(follow_symlinks=False):
                    entries.append(Entry(name, shown, item.path, 0, is_dir=True))
                    if name not in SKIPPED_FOLDERS:
                        subfolders.append((item.path, shown))
                    continue
                info = item.stat(follow_symlinks=True)
            except FileNotFoundError:
                if is_symlink:
                    entries.append(Entry(name, shown, item.path, 0, is_symlink=True, dangling=True))
                # else: it vanished between listing and stat; it is no longer part of the run
                continue
            except OSError as error:
                if error.errno in DENIED:  # a folder that may be read but not searched: this user may not look
                    entries.append(Entry(name, shown, item.path, 0, is_symlink=is_symlink, denied=True))
                    continue
                # ELOOP and friends: a symlink that cannot be resolved is as good as dangling
                entries.append(Entry(name, shown, item.path, 0, is_symlink=True, dangling=True))
                continue
            entries.append(_entry(name, shown, item.path, info, is_symlink, _readlink(item.path) if is_symlink else None))
    return tuple(entries), subfolders


def _shown_prefix(shown_dir: str) -> str:
    return shown_dir.rstrip(os.sep) + os.sep


NEVER_PART_OF_A_RUN = frozenset({OWN_FOLDER, MOVED_ASIDE})
"""ckptdoctor's lock, journal and trash, and what a fix moved aside."""


compiled_list: Lister | None
try:
    from ckptdoctor._clisting import list_folder
except ImportError:  # built without a compiler: the Python lister lists
    compiled_list = None
else:

    def compiled_list(os_dir: str, shown_dir: str) -> Listed:
        """:func:`python_list` in C (``ckptdoctor/_clisting.c``): the same entries, at near ``find``'s cost."""
        return list_folder(os_dir, _shown_prefix(shown_dir), Entry, display, NEVER_PART_OF_A_RUN, SKIPPED_FOLDERS)


_list: Lister = compiled_list if compiled_list is not None and os.environ.get("CKPTDOCTOR_NO_CEDGES") != "1" else python_list
COMPILED = _list is compiled_list
"""Whether folders are listed by the compiled lister (else by :func:`python_list`)."""


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _entry(name: str, shown: str, os_path: str, info: os.stat_result, is_symlink: bool, link: str | None = None) -> Entry:
    is_dir = stat.S_ISDIR(info.st_mode)
    # positional: a big run makes one per file, and keywords cost a NamedTuple several times more
    size = 0 if is_dir else info.st_size
    return Entry(name, shown, os_path, size, is_dir, is_symlink, False, (info.st_dev, info.st_ino), info.st_mtime, link, info.st_nlink)


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def natural_key(text: str) -> list[tuple[int, int | str]]:
    """Sort key that orders ``run-10`` after ``run-9``."""
    parts: list[tuple[int, int | str]] = []
    for chunk in _DIGITS.split(text):
        if chunk.isdigit():
            parts.append((0, int(chunk)))
        elif chunk:
            parts.append((1, chunk))
    return parts
