"""A bucket prefix -> the folders ``discover`` makes of a local tree, from one recursive listing.

An object store has keys, not folders: ``run/checkpoint-4/model.safetensors`` is one key. The
folders a layout looks at are the key prefixes up to each ``/``. One listing gives every key's
size, ETag and time, so no object is asked about on its own. Keys no filesystem could hold as a
path (an empty, ``.`` or ``..`` part) are not made into paths: they are reported as left unread,
and nothing acts on them.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from ckptdoctor.discover import NEVER_PART_OF_A_RUN, SKIPPED_FOLDERS, Discovery, Listing, PathNotFound, Unlisted, natural_key
from ckptdoctor.model import Entry
from ckptdoctor.progress import Tally
from ckptdoctor.quoting import printable
from ckptdoctor.stores import session
from ckptdoctor.stores.urls import BadURL, Location, parse

if TYPE_CHECKING:
    from ckptdoctor.stores._bucket import ObjectInfo

_ODD_PARTS = frozenset({"", ".", ".."})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _reachable(subfolders: dict[str, set[str]]) -> set[str]:
    """The folders still reached from the top once clashing prefixes are cut off."""
    seen = {""}
    pending = [""]
    while pending:
        folder = pending.pop()
        for name in subfolders.get(folder, ()):
            path = f"{folder}/{name}" if folder else name
            if path not in seen:
                seen.add(path)
                pending.append(path)
    return seen


def discover_store(url: str, tally: Tally | None = None) -> Discovery:
    """Every folder at or below the prefix ``url`` names (or just the object it names), from one
    listing; :class:`session.StoreError` when the store cannot be listed."""
    try:
        location = parse(url)
    except BadURL as error:
        raise PathNotFound(str(error)) from None
    bucket = session.bucket(location)
    below = location.prefix + "/" if location.prefix else ""
    objects = bucket.objects(below)
    if not objects and location.prefix:
        try:
            info = bucket.head(location.prefix)
        except FileNotFoundError:
            pass
        except OSError as error:
            raise session.StoreError(error.strerror or str(error)) from None
        else:  # the user named one object
            session.remember(bucket, [info])
            parent, _, name = location.url.rpartition("/")
            entry = Entry(name, location.url, location.url, info.size, mtime=info.modified)
            return Discovery((Listing(parent, parent, (entry,), single_file=True),), ())
    objects = _without_markers(objects)
    if not objects:
        raise PathNotFound(f"{location.url}/: no objects under this prefix")
    session.remember(bucket, objects)
    return _folders(location, [(info.key[len(below) :], info.size, info.modified) for info in objects], tally)


def _without_markers(objects: list[ObjectInfo]) -> list[ObjectInfo]:
    """The objects less the empty folder markers (``logs/``, what consoles make for "create
    folder"), which obstore lists without their slash: an empty object named as another object
    is, or as a prefix of others, is such a marker, and no file of the run."""
    keys = Counter(info.key for info in objects)
    prefixes = {info.key.rsplit("/", 1)[0] for info in objects if "/" in info.key}
    while True:  # every level up: `a/b/c` makes `a/b` and `a` prefixes too
        above = {prefix.rsplit("/", 1)[0] for prefix in prefixes if "/" in prefix} - prefixes
        if not above:
            break
        prefixes |= above
    return [info for info in objects if not (info.size == 0 and (keys[info.key] > 1 or info.key in prefixes))]


def _folders(location: Location, keys: list[tuple[str, int, float]], tally: Tally | None) -> Discovery:
    """The listings of the folders the ``keys`` (relative to the prefix) make."""
    files: dict[str, list[Entry]] = {}
    subfolders: dict[str, set[str]] = {"": set()}
    unlisted: list[Unlisted] = []
    base = location.url
    for relative, size, modified in keys:
        if relative == "":
            continue  # the prefix's own folder marker: the run's folder itself
        parts = relative.split("/")
        if _CONTROL.search(relative):
            unlisted.append(Unlisted(f"{base}/{printable(relative)}", "an object key with a control character: left alone"))
            continue
        if relative.endswith("/") and not any(part in _ODD_PARTS for part in parts[:-1]):
            parts = parts[:-1]  # a folder marker (what consoles make for "create folder"): the folder alone
            name = None
        else:
            name = parts.pop()
        if any(part in _ODD_PARTS for part in parts) or name in _ODD_PARTS:
            unlisted.append(
                Unlisted(f"{base}/{relative}", "an object key with an empty, '.' or '..' part: no path names it, so it is left alone")
            )
            continue
        folder = ""
        for part in parts:
            if part in NEVER_PART_OF_A_RUN:
                break
            subfolders[folder].add(part)
            if part in SKIPPED_FOLDERS:
                break  # listed as a folder of its parent, never entered (as on disk)
            folder = f"{folder}/{part}" if folder else part
            subfolders.setdefault(folder, set())
        else:
            if name is not None and name not in NEVER_PART_OF_A_RUN:
                url = f"{base}/{folder}/{name}" if folder else f"{base}/{name}"
                files.setdefault(folder, []).append(Entry(name, url, url, size, mtime=modified))
    for folder, below in subfolders.items():  # S3 holds `a` and `a/x` both; no folder can: the prefix is left alone
        names = {entry.name for entry in files.get(folder, [])}
        for clash in sorted(below & names):
            below.discard(clash)
            path = f"{folder}/{clash}" if folder else clash
            unlisted.append(
                Unlisted(
                    f"{base}/{path}/", f"objects below {path}/ beside an object named {clash}: no path names both, so they are left alone"
                )
            )
            for gone in [name for name in subfolders if name == path or name.startswith(path + "/")]:
                subfolders[gone] = set()
                files.pop(gone, None)
    reachable = _reachable(subfolders)
    subfolders = {folder: below for folder, below in subfolders.items() if folder in reachable}
    listings: list[Listing] = []
    for folder, below in subfolders.items():
        path = f"{base}/{folder}" if folder else base
        entries = [Entry(name, f"{path}/{name}", f"{path}/{name}", 0, is_dir=True) for name in sorted(below)]
        entries += sorted(files.get(folder, []), key=lambda entry: entry.name)
        listings.append(Listing(path, path, tuple(entries)))
        if tally is not None:
            tally.folders += 1
            tally.files += len(entries) - len(below)
    listings.sort(key=lambda listing: natural_key(listing.path))
    return Discovery(tuple(listings), tuple(unlisted))
