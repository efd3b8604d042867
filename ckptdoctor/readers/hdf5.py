"""HDF5 files (Keras' ``.weights.h5``, the weights inside a ``.keras`` archive, legacy ``.h5`` models).

The superblock at the start of the file records where the file ends (the end-of-file address).
libhdf5 writes it when the file is closed and then truncates the file to it, so a whole file is
exactly as long as it says. A file shorter than that was cut short (libhdf5: "truncated file");
a longer one was never closed: the writer was killed mid-save and the metadata that places the
datasets was never written (libhdf5: "bad object header version number"). Superblock versions
2 and 3 also carry a flag that stays set while a writer holds the file open.

Everything past the superblock (object headers, B-trees, datasets) is read with h5py, which
``verify`` uses where it is installed: every object's metadata is read and every dataset's
bytes placed inside the file; ``--deep`` reads every byte and counts NaN and Inf. Without
h5py only the superblock is checked; the attributes, where a legacy Keras model keeps the
configuration ``keras.models.load_model`` builds it from (and runs its code, with
``safe_mode=False``), cannot be read, so the file cannot be proven free of code (CKD404) — what
``load_model`` reads whatever the file is called (``.h5``, ``.hdf5``, ``.weights.h5`` alike).
Only a ``.keras`` archive's weights member, whose attributes its loader never reads
(``read_weights``), is then just partly checked (CKD213). Nothing is read from
outside the file: external links, external storage and virtual datasets are refused, since
Keras never writes them and reading them would read other files.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, NamedTuple

from ckptdoctor.model import FileIssue, FileReport, Problem, Tensor
from ckptdoctor.parallel import forked
from ckptdoctor.readers import _kerasconfig, deep_scan
from ckptdoctor.readers._registry import Library, Naming, Rank, ReaderSpec, Sniff
from ckptdoctor.readers.compressed import MAX_OUTPUT, MAX_RATIO
from ckptdoctor.readers.sample import Sample, SampleReader
from ckptdoctor.readers.sniff import Format, begins

SIGNATURE = b"\x89HDF\r\n\x1a\n"
HDF5 = Format.declare("hdf5")
STORED_END = "hdf5-end"
"""A fact: the end-of-file address the superblock records, plus its base address."""
MODEL_CONFIG = "model_config"
"""The root attribute in which legacy Keras ``.h5`` models keep their configuration
(``legacy_h5_format.save_model_to_hdf5``)."""
CONFIGS = (MODEL_CONFIG, "training_config")
"""The root attributes ``legacy_h5_format.load_model_from_hdf5`` deserialises: the model's
configuration, and with ``compile=True`` its loss, metrics and optimizer."""
WITHOUT_H5PY = "h5py is not installed: only the HDF5 superblock and the file's size were checked (pip install h5py)"
CONFIG_UNREAD = (
    "cannot check: h5py is not installed (pip install h5py), and only it reads the file's HDF5 attributes, where a "
    f"legacy Keras model keeps the configuration ({', '.join(CONFIGS)}) keras.models.load_model builds it from: with "
    "safe_mode=False that runs any Lambda layer or pickled torch module in it, so the file cannot be proven free of code"
)
MAX_OBJECTS = 8_000
"""Objects (groups, datasets and other links) and stored chunks ``verify`` walks in one HDF5
file. Keras writes two groups per layer and one dataset per variable, and the optimizer's variables beside them:
a 200-layer Dense stack compiled with Adam holds 1,606 objects, ResNet50 1,108,
EfficientNetB7 (816 layers, the most in ``keras.applications``) about 4,100 (counted with h5py,
Keras 3.15; legacy ``.h5`` files hold as many), and no chunked dataset. Each object or chunk
costs libhdf5 some 50 to 150 µs to open and describe, so a file of 200,000 took 33 s and
371 MiB; 8,000, twice the most Keras writes, stay within 2 s of CPU with the rest of
``verify`` (16,384 took 2.8 s: libhdf5's own walk, ``visititems``, costs as much). Past them the
file is an error that says it could not be checked, never clean."""
MAX_PATH_CHARACTERS = 8 * 1024 * 1024
"""Characters in the paths of the objects ``verify`` walks in one HDF5 file, all together. libhdf5
keeps the whole path of every object open, and the walk holds each group on its way down open, so
groups nested thousands deep cost memory and time in the square of their depth (20,000 levels:
1.4 GiB); a Keras model of thousands of layers totals a few MB."""
_TOO_MANY = FileIssue(
    Problem.MALFORMED,
    f"cannot check it fully: it holds more than {MAX_OBJECTS:,} objects and chunks, twice what the largest Keras model "
    "writes, and ckptdoctor does not read past them",
)
_UNDEFINED = -1
_LIBRARY_SIZES = frozenset({2, 4, 8, 16})
"""The sizes of offsets and lengths libhdf5 accepts."""


class Superblock(NamedTuple):
    version: int
    base: int
    end: int
    """The end-of-file address, relative to ``base``."""
    open_for_writing: bool


def superblock(head: bytes) -> Superblock | FileIssue:
    """The superblock at the start of ``head`` (format spec, "Disk Format: Level 0A"), or why it
    cannot be read."""
    if len(head) < 16:  # no superblock version is shorter
        return FileIssue(Problem.TRUNCATED, "cut inside its HDF5 superblock")
    version = head[8]
    if version in (0, 1):
        offsets, lengths = head[13], head[14]
        addresses = 24 if version == 0 else 28
        flags = 0  # version 0 and 1 superblocks keep no flags
    elif version in (2, 3):
        offsets, lengths = head[9], head[10]
        addresses = 12
        flags = head[11]
    else:
        return FileIssue(Problem.MALFORMED, f"HDF5 superblock version {version}, which libhdf5 does not write")
    if offsets not in _LIBRARY_SIZES or lengths not in _LIBRARY_SIZES:
        return FileIssue(Problem.MALFORMED, f"its HDF5 superblock declares {offsets}-byte offsets and {lengths}-byte lengths")
    # base address, then (0/1) free-space address or (2/3) superblock extension address, then the end
    needed = addresses + 3 * offsets
    if len(head) < needed:
        return FileIssue(Problem.TRUNCATED, "cut inside its HDF5 superblock")
    base, _, end = (_address(head, addresses + i * offsets, offsets) for i in range(3))
    if base == _UNDEFINED or end == _UNDEFINED:
        return FileIssue(Problem.MALFORMED, "its HDF5 superblock records no base or end-of-file address")
    return Superblock(version, base, end, bool(flags & 0x1) and version >= 3)


def _address(head: bytes, at: int, size: int) -> int:
    value = int.from_bytes(head[at : at + size], "little")
    return _UNDEFINED if value == (1 << (8 * size)) - 1 else value


def extent_issues(block: Superblock, size: int) -> list[FileIssue]:
    """How the file's length agrees with the end its superblock records."""
    stored = block.base + block.end
    if block.open_for_writing:
        return [
            FileIssue(
                Problem.TRUNCATED,
                "its HDF5 superblock says a writer still holds it open: the save was killed before the file was "
                "closed (h5py: file is already open for write)",
            )
        ]
    if size < stored:
        return [
            FileIssue(
                Problem.TRUNCATED,
                f"{size} of the {stored} bytes its HDF5 superblock records: the file was cut short "
                f"(h5py: truncated file: eof = {size}, stored_eof = {stored})",
            )
        ]
    if size > stored:
        return [
            FileIssue(
                Problem.TRUNCATED,
                f"never closed: {size} bytes, but its HDF5 superblock still records {stored}, as written when the save "
                "began; the writer was killed before it closed the file, so the metadata that places the datasets is "
                "missing or out of date (h5py: bad object header version number)",
            )
        ]
    return []


def probe(sample: Sample) -> FileReport:
    """The superblock against the file's size: all ``inspect`` reads."""
    block = superblock(sample.head(128))
    if isinstance(block, FileIssue):
        return FileReport(HDF5.value, (block,))
    facts = ((STORED_END, str(block.base + block.end)),)
    return FileReport(HDF5.value, tuple(extent_issues(block, sample.size)), facts)


def read_whole(sample: Sample, deep: int = 0) -> FileReport:
    """The superblock, then every object with h5py where it is installed; ``deep`` > 0 also
    reads every dataset's bytes (NaN and Inf in float datasets). h5py reads in a forked process:
    libhdf5 is C, and a crafted file that crashes it ends that process, not ckptdoctor."""
    return _read_whole(sample, deep, FileIssue(Problem.CODE_IN_CONFIG, CONFIG_UNREAD))


def read_weights(sample: Sample, deep: int = 0) -> FileReport:
    """``read_whole`` of a ``.keras`` archive's weights member, which ``H5IOStore`` reads dataset
    by dataset: without h5py its attributes, which no loader reads, leave it partly checked."""
    return _read_whole(sample, deep, FileIssue(Problem.PARTLY_CHECKED, WITHOUT_H5PY))


def _read_whole(sample: Sample, deep: int, without_h5py: FileIssue) -> FileReport:
    header = probe(sample)
    if header.issues:
        return header
    if _h5py() is None:
        return FileReport(HDF5.value, (without_h5py,), header.facts)
    try:
        outcome = [result for _, result in forked(lambda _: _read(sample, deep), 1, 1)]
    except Exception as error:  # libhdf5's errors come as OSError, KeyError, RuntimeError...: each is damage
        detail = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        return FileReport(HDF5.value, (FileIssue(Problem.MALFORMED, f"h5py cannot read it: {detail}"),), header.facts)
    if not outcome:
        crashed = FileIssue(Problem.MALFORMED, "libhdf5 crashed reading it: the file is damaged, or crafted to crash readers")
        return FileReport(HDF5.value, (crashed,), header.facts)
    issues, tensors, top, regions, chunked = outcome[0]
    if deep and not issues:  # read here, not in the fork: a --ray fan-out's connection lives in this process
        issues = deep_scan.scan(sample, regions, deep)[0] + chunked
    return FileReport(HDF5.value, tuple(issues), header.facts, tuple(tensors), tuple(top), sum(t.nbytes for t in tensors))


def _read(sample: Sample, deep: int) -> tuple[list[FileIssue], list[Tensor], list[str], list[deep_scan.Region], list[FileIssue]]:
    """The walk's issues, tensors, names at the top and contiguous regions, and (``deep``) what
    the values of the chunked datasets hold, which only h5py reads."""
    h5py = _h5py()
    with _opened(h5py, sample) as opened:
        walked = _walk(h5py, opened, sample.size)
        chunked = _chunked_issues(sample, opened, walked) if deep and not walked.issues else []
    return walked.issues, walked.tensors, walked.top, walked.regions, chunked


def _opened(h5py: Any, sample: Sample) -> Any:
    """``sample`` opened by h5py: by name where it has one, since libhdf5 then reads with its own
    calls, not back through Python for each read (a walk of thousands of objects takes a third
    less), else through a file object. Never locked, so a writer's lock stops nothing."""
    name = sample.reopened()
    if name is not None:
        try:
            return h5py.File(name, "r", locking=False)
        except OSError:
            if sample.reopened() is not None:
                raise  # the file itself is at fault
            # else it was deleted or replaced as libhdf5 opened it, which resolves its path
    return h5py.File(SampleReader(sample), "r", locking=False)


class _Walked(NamedTuple):
    tensors: list[Tensor]
    top: list[str]
    issues: list[FileIssue]
    regions: list[deep_scan.Region]
    chunked: list[tuple[str, str]]
    """Datasets whose bytes are not one run in the file, with their element types: ``--deep``
    reads them through h5py."""


def _walk(h5py: Any, opened: Any, size: int) -> _Walked:
    walked = _Walked([], [], [], [], [])
    budget = [MAX_OBJECTS]
    for attribute in CONFIGS:  # a legacy Keras model (`model.save("x.h5")`): its configuration, as JSON
        config = opened.attrs.get(attribute)
        if config is not None:
            walked.issues.extend(_kerasconfig.code_in(config.encode() if isinstance(config, str) else bytes(config), attribute))
    # each dataset is asked through h5py's low-level calls, each question once: its high-level
    # properties ask libhdf5 again on every use (a third of the walk's time)
    for name, dataset in _datasets(h5py, opened.id, walked, budget):
        kind = dataset.dtype  # each asking builds a numpy dtype again
        dtype = _dtype(h5py, dataset, kind)
        space = dataset.get_space()
        empty = space.get_simple_extent_type() == h5py.h5s.NULL
        shape = () if empty else tuple(int(n) for n in space.shape)
        nbytes = 0 if empty else math.prod(shape) * kind.itemsize
        walked.tensors.append(Tensor(name.replace("/", "."), dtype, shape, nbytes))
        offset = dataset.get_offset()
        if offset is not None:  # contiguous, written and inside this file, as Keras writes every dataset
            if offset + nbytes > size:
                walked.issues.append(_past_end(name, offset + nbytes, size))
            else:
                walked.regions.append(deep_scan.Region(offset, nbytes, dtype if dtype in deep_scan.FLOAT_BITS else None))
            continue
        plist = dataset.get_create_plist()
        layout = plist.get_layout()
        if layout == h5py.h5d.VIRTUAL or plist.get_external_count():
            walked.issues.append(_outside(name, "a dataset whose data lives in other files (external storage or a virtual dataset)"))
        elif layout == h5py.h5d.CHUNKED:  # libhdf5 compresses only chunked datasets
            walked.chunked.append((name, dtype))
            expected = math.prod(-(-n // c) for n, c in zip(shape, plist.get_chunk(), strict=True)) if shape else 1
            stored = dataset.get_num_chunks()
            if stored > budget[0]:
                walked.issues.append(_TOO_MANY)
                break
            budget[0] -= stored
            if stored < expected:
                walked.issues.append(
                    FileIssue(
                        Problem.MALFORMED,
                        f"dataset {name} has {stored} of its {expected} chunks stored: the rest read as its fill value "
                        "(frameworks write every dataset whole)",
                    )
                )
            for chunk in range(stored):
                info = dataset.get_chunk_info(chunk)
                if info.byte_offset + info.size > size:
                    walked.issues.append(_past_end(name, info.byte_offset + info.size, size))
                    break
        # else compact (inside its object header), or never written: reads as its fill value, as h5py and Keras read it
    return walked


class _Link(NamedTuple):
    encoded: bytes
    """The name as the file stores it, by which libhdf5 opens the object."""
    name: str
    kind: int
    """``h5l.TYPE_HARD``, ``TYPE_SOFT`` or ``TYPE_EXTERNAL``."""
    address: int
    """Where a hard link's object lives in the file."""


def _datasets(h5py: Any, root: Any, walked: _Walked, budget: list[int]) -> Iterator[tuple[str, Any]]:
    """Every dataset below the group ``root`` (a ``GroupID``), depth first, through hard links
    only (a soft link names an object that is visited where it lives; an external link names
    another file); the names at the top go to ``walked.top``. Walked with a stack, not by
    recursion: HDF5 nests groups as deep as a writer likes (h5py writes 1,500 levels), and each
    group once, though hard links may lead back to it (libhdf5 allows a link to a group's own
    parent). Links are listed from each group's own index (``H5Literate``), which tells a hard
    link from the others and where its object lives without opening it: only the objects hard
    links lead to are opened, once each. Bounded by ``budget``, what is left of ``MAX_OBJECTS``
    (counted as links are listed), and by ``MAX_PATH_CHARACTERS``."""
    listed = _links(h5py, root, budget)
    if listed is None:
        walked.issues.append(_TOO_MANY)
        return
    walked.top.extend(link.name for link in listed)
    pending: list[tuple[Iterator[_Link], Any, str]] = [(iter(listed), root, "")]
    seen = {h5py.h5o.get_info(root).addr}
    characters = 0
    while pending:
        links, group, prefix = pending[-1]
        link = next(links, None)
        if link is None:
            pending.pop()
            continue
        path = f"{prefix}{link.name}"
        characters += len(path)
        if characters > MAX_PATH_CHARACTERS:
            walked.issues.append(
                FileIssue(
                    Problem.MALFORMED,
                    f"the paths of its objects run past {MAX_PATH_CHARACTERS:,} characters ({path[:40]}… is nested "
                    f"{len(pending)} groups deep), more than frameworks write: not read past them",
                )
            )
            return
        if link.kind == h5py.h5l.TYPE_EXTERNAL:
            target = group.links.get_val(link.encoded)[0].decode(errors="replace")
            walked.issues.append(_outside(path, f"an external link to {target!r}"))
            continue
        if link.kind != h5py.h5l.TYPE_HARD or link.address in seen:
            continue  # a soft link, or another hard link to a group already walked
        item = h5py.h5o.open(group, link.encoded)
        if isinstance(item, h5py.h5g.GroupID):
            seen.add(link.address)
            inside = _links(h5py, item, budget)
            if inside is None:
                walked.issues.append(_TOO_MANY)
                return
            pending.append((iter(inside), item, f"{path}/"))
        elif isinstance(item, h5py.h5d.DatasetID):
            yield path, item


def _links(h5py: Any, group: Any, budget: list[int]) -> list[_Link] | None:
    """The links in ``group``, in name order (as h5py lists them), each counted against what is
    left of ``budget``; None once they are more than it allows (the listing stops there)."""
    listed: list[_Link] = []

    def take(name: bytes, info: Any) -> bool:
        if len(listed) == budget[0]:
            return True  # stops the listing
        address = info.u if info.type == h5py.h5l.TYPE_HARD else -1
        listed.append(_Link(name, name.decode("utf-8", "surrogateescape"), info.type, address))
        return False

    stopped, _ = group.links.iterate(take, info=True, order=h5py.h5.ITER_INC)
    if stopped:
        return None
    budget[0] -= len(listed)
    return listed


def _outside(name: str, what: str) -> FileIssue:
    return FileIssue(
        Problem.MALFORMED, f"{name} is {what}: frameworks never write one, and reading it would read files outside the checkpoint"
    )


def _past_end(name: str, end: int, size: int) -> FileIssue:
    return FileIssue(Problem.TRUNCATED, f"dataset {name} reaches byte {end} of a {size}-byte file: the file was cut short")


def _dtype(h5py: Any, dataset: Any, kind: Any) -> str:
    """torch's spelling of ``kind``, the element type of ``dataset`` (a ``DatasetID``); Keras marks
    bfloat16, which it stores in 16 bits, with an attribute (asked of 16-bit datasets only, and
    read only where there is one: each question costs libhdf5 more than the rest)."""
    if kind.itemsize == 2 and h5py.h5a.exists(dataset, b"dtype") and h5py.Dataset(dataset).attrs.get("dtype") == "bfloat16":
        return "bfloat16"
    names = {"f": "float", "i": "int", "u": "uint", "b": "bool", "c": "complex"}
    base = names.get(kind.kind)
    if base is None:
        return str(kind)
    return "bool" if base == "bool" else f"{base}{kind.itemsize * 8}"


def _chunked_issues(sample: Sample, opened: Any, walked: _Walked) -> list[FileIssue]:
    """NaN and Inf in the float datasets whose bytes are not one run in the file (chunked or
    filtered, which Keras does not write), read through h5py, where their stored chunks inflate
    to no more than a compressed stream may (``compressed.MAX_RATIO``). The contiguous ones are
    read straight from the file (``_read_whole``)."""
    issues: list[FileIssue] = []
    # bfloat16: h5py hands it over as raw 16-bit words, counted only where contiguous
    chunked = [(opened[name], dtype) for name, dtype in walked.chunked if dtype in deep_scan.FLOAT_BITS and dtype != "bfloat16"]
    inflated = sum(d.id.get_num_chunks() * math.prod(d.chunks) * d.dtype.itemsize for d, _ in chunked)
    bound = max(MAX_RATIO * sample.size, MAX_OUTPUT)
    if inflated > bound:  # a few MB of compressed zeros inflate to GBs: a bomb, not weights
        issues.append(
            FileIssue(
                Problem.PARTLY_CHECKED,
                f"the values of its chunked datasets were not read: their stored chunks inflate to {inflated:,} bytes, "
                f"more than {MAX_RATIO} times the file's size or {MAX_OUTPUT:,} bytes",
            )
        )
        return issues
    found = 0
    for dataset, dtype in chunked:
        for chunk in _stored_chunks(dataset):
            found += deep_scan.count_nonfinite(dataset[chunk].tobytes(), dtype)
    if found:
        issues.append(FileIssue(Problem.NONFINITE, f"{found} NaN or Inf values in its chunked datasets"))
    return issues


def _stored_chunks(dataset: Any) -> Iterator[tuple[slice, ...]]:
    """The slices of a chunked dataset's chunks that are stored: a chunk never written reads as
    the fill value, and a crafted shape can claim far more chunks than the file holds."""
    for number in range(dataset.id.get_num_chunks()):
        corner = dataset.id.get_chunk_info(number).chunk_offset
        yield tuple(slice(start, start + size) for start, size in zip(corner, dataset.chunks, strict=True))


def _h5py() -> Any:
    """h5py where it is installed (an optional extra), else None."""
    try:
        # an optional library, imported only by verify of an HDF5 file
        import h5py
    except ImportError:
        return None
    return h5py


def _hdf5(head: bytes, sample: Sample) -> bool:
    return begins(head, SIGNATURE)


SPECS = (
    ReaderSpec(
        HDF5,
        (Sniff(Rank.MAGIC, _hdf5),),
        ((".weights.h5", Naming.CHECKPOINT_ONLY), (".h5", Naming.CHECKPOINT), (".hdf5", Naming.CHECKPOINT)),
        probe,
        read_whole,
        read_any_name=True,
        loaded_by=Library.H5PY,
    ),
)
