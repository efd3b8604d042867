"""Read one file statically: sniff its format from content, then let that format's reader judge it.

``probe`` is the only place that touches the file system; the readers it calls are pure
functions of a :class:`Sample` so that they can be tested and fuzzed on bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Sequence

from ckptdoctor.model import (
    ARCHIVE_TIER,
    NOT_RESTORED,
    RESTORE,
    RESTORE_UNKNOWN,
    RESTORING,
    STORAGE_CLASS,
    TOP_LEVEL_NUMBER,
    TOP_LEVEL_TENSORS,
    Entry,
    FileIssue,
    FileReport,
    Problem,
    Span,
)
from ckptdoctor.parallel import cores, map_chunks
from ckptdoctor.readers import (
    compressed,
    dcp,
    deep_scan,
    hfjson,
    keras,
    ocdbt,
    orbax,
    pickle,
    sniff,
    tfbundle,
    torchtar,
    torchzip,
)
from ckptdoctor.readers._edges import COMPILED, read_edges
from ckptdoctor.readers._registry import Naming, current
from ckptdoctor.readers.named import NO_NAMES, NamedFiles
from ckptdoctor.readers.pickle_safety import NO_HARMLESS, Harmless, harmless_known
from ckptdoctor.readers.sample import (
    HEAD,
    TAIL,
    TAIL_ZERO,
    BytesSample,
    Found,
    Sample,
    downloaded,
    kept_whole,
    object_samples,
    open_sample,
    remembered,
)
from ckptdoctor.readers.sniff import Format
from ckptdoctor.readers.unpickler import file_budget, one_budget
from ckptdoctor.regular import DENIED, owner
from ckptdoctor.stores import session
from ckptdoctor.stores.urls import Archive, ArchivedObject

__all__ = [
    "NO_HARMLESS",
    "BytesSample",
    "Format",
    "Harmless",
    "HeaderReads",
    "ReadAhead",
    "RecordedReads",
    "Sample",
    "checkpoint_suffixes",
    "ends_unchecked",
    "expected_formats",
    "harmless_known",
    "holds",
    "looks_like_checkpoint",
    "probe",
    "read_any_name",
    "read_header",
    "read_sample",
    "read_whole",
    "unpickled_by_name",
    "verify_sample",
    "whole_read_bytes",
    "with_keys",
]

_CHECKPOINT_NAMES = frozenset({Naming.CHECKPOINT, Naming.CHECKPOINT_ONLY})


def checkpoint_suffixes(formats: frozenset[Format]) -> tuple[str, ...]:
    """The suffixes frameworks give checkpoints of ``formats`` (as declared), longest first: what a
    layout that writes those formats claims by name."""
    return current().suffixes(formats, _CHECKPOINT_NAMES)


def read_any_name() -> frozenset[Format]:
    """Content ``verify`` reads whatever the file is called: it can carry code or tensors."""
    return current().read_any_name


def ends_unchecked() -> frozenset[Format]:
    """Formats whose end a header read cannot check: a file of them cut short may look whole to ``inspect``."""
    return current().ends_unchecked


def looks_like_checkpoint(name: str) -> bool:
    return name.lower().endswith(current().checkpoint_only)


def expected_formats(name: str) -> frozenset[Format] | None:
    """The formats a file of this name may hold, or None when its suffix says nothing."""
    parts = name.lower().rsplit(".", 2)
    by_suffix = current().by_suffix
    if len(parts) == 3 and (formats := by_suffix.get(f".{parts[1]}.{parts[2]}")):
        return formats
    return by_suffix.get(f".{parts[-1]}") if len(parts) > 1 else None


def read_header(sample: Sample, name: str = "", named: NamedFiles = NO_NAMES, harmless: Harmless | None = None) -> FileReport:
    """Judge a file from its header and trailer, and its content against its name (the few
    pickles this walks are small: each walk has a budget of its own); ``named``: the files a
    framework names, read as their name says, and ``harmless``: the classes beyond the formats'
    own that pickles may need, harmless to import (the layouts' tables; None: the table in force,
    ``harmless_known``)."""
    with harmless_known(harmless):
        report = _judge(sample, name, _probe_of, named)
        if compressed.inner_name(name) != name or (report.format in _PACKED and compressed.named_as_pickle(name)):
            return compressed.read_header(sample, name) or report
    return report


def verify_sample(
    sample: Sample, name: str = "", deep: int = 0, named: NamedFiles = NO_NAMES, harmless: Harmless | None = None
) -> FileReport:
    """Judge a file from all of its bytes; ``deep`` > 0 also checks every byte, with that many threads.

    Content is judged as the format it holds and, where the file's name is one that a loader
    unpickles (``torch.load``, ``pickle.load``, ``numpy.load``, ``joblib.load``), also the way
    each such loader reads content it does not recognise: as a tar, as pickles from the first byte,
    decompressed. Whatever any of them would run is reported (fail closed)."""

    def reader(kind: Format) -> Callable[[Sample], FileReport] | None:
        if kind is Format.UNKNOWN and unpickled_by_name(name) and torchtar.is_tar(sample):
            kind = Format.TORCH_TAR  # a tar without the ustar magic (V7), which torch.load still reads
        spec = current().by_format.get(kind)
        if spec is None or spec.read_whole is None:
            return _probe_of(kind)
        read_whole = spec.read_whole
        return lambda sample: read_whole(sample, deep)

    with one_budget(file_budget()), harmless_known(harmless):
        report = _judge(sample, name, reader, named)
        if name == dcp.METADATA and report.format == Format.PICKLE.value:
            report = _with_unsafe(report, pickle.read_whole_pickle(sample).issues)  # DCP reads its .metadata with pickle.load
        elif unpickled_by_name(name):
            report = _with_unsafe(report, _fallback_issues(sample, Format.named(report.format) or Format.UNKNOWN))
        elif report.format != Format.PICKLE.value and sniff.sniff(sample) is Format.PICKLE:
            # a pickle under a name whose reader does not unpickle (a pointer file, a .distcp)
            report = _with_unsafe(report, pickle.read_whole_pickle(sample).issues)
        inside = compressed.inner_name(name)
        packed = compressed.read(sample, lambda content: verify_sample(content, inside, deep, named, harmless), name)
    if packed is not None:  # joblib.load decompresses whatever the name; pandas and Composer by the name
        # a name with a compression suffix is read through it (a zstd stream's magic sniffs as a broken pickle),
        # unless it could not be: then what the content is read as stands beside why
        through = inside != name or (report.format in _PACKED and (compressed.named_as_pickle(name) or expected_formats(name) is None))
        if packed.format != Format.UNKNOWN.value and through:
            return packed
        report = _with_unsafe(report, packed.issues)
    return _with_unsafe(report, compressed.unopened_archive(name, report.format))


_PACKED = frozenset({Format.UNKNOWN.value, Format.GZIP.value})
"""What a compressed pickle sniffs as: gzip, or nothing known (zlib, bz2, xz, lzma, lz4)."""


def unpickled_by_name(name: str) -> bool:
    """Whether a loader of this file's name unpickles content it does not otherwise recognise."""
    lowered = name.lower()
    return Format.PICKLE in (expected_formats(lowered) or ()) or lowered.endswith(_FALLS_BACK_TO_PICKLE) or compressed.pickled_name(lowered)


_FALLS_BACK_TO_PICKLE = (".npy", ".npz", ".joblib", ".dill")
"""``numpy.load`` unpickles what is neither an array nor a zip; joblib and dill unpickle anything."""
_WALKED_FROM_START = frozenset({Format.PICKLE, Format.TORCH_LEGACY, Format.TORCH_TAR, Format.EMPTY})


def _fallback_issues(sample: Sample, kind: Format) -> list[FileIssue]:
    """What the loaders' other readings of the content would run: torch tries a tar and then pickles
    on anything that does not start like a zip; numpy, joblib and dill unpickle from the first byte
    (joblib's decompression is judged for every file, whatever its name)."""
    if sample.head(4) == sniff.ZIP_LOCAL or kind in (Format.TORCH_ZIP, Format.ZIP):
        return []
    issues: list[FileIssue] = []
    if kind is not Format.TORCH_TAR and torchtar.is_tar(sample):
        issues += torchtar.read_whole(sample).issues
    if kind not in _WALKED_FROM_START:
        issues += pickle.read_whole_pickle(sample).issues  # torch's legacy reading too, when the magic number leads
    return issues


def _with_unsafe(report: FileReport, issues: list[FileIssue] | tuple[FileIssue, ...]) -> FileReport:
    """``report`` plus the unsafe-pickle findings among ``issues`` that it does not have yet."""
    have = {(i.problem, i.detail) for i in report.issues}
    unsafe = tuple(i for i in issues if i.problem is Problem.UNSAFE_PICKLE and (i.problem, i.detail) not in have)
    return dataclasses.replace(report, issues=report.issues + unsafe) if unsafe else report


def _judge(
    sample: Sample, name: str, reader_for: Callable[[Format], Callable[[Sample], FileReport] | None], named: NamedFiles
) -> FileReport:
    report = _judge_content(sample, name, reader_for, named)
    if report.issues:
        return report
    # a full disk or a crash leaves a file's end as zeros: grouping compares this with the previous
    # checkpoint's same file (CKD212); the tail is the read every sample makes or shares
    zero = not sample.tail().strip(b"\0")
    return dataclasses.replace(report, facts=(*report.facts, (TAIL_ZERO, "yes" if zero else "no")))


def _judge_content(
    sample: Sample, name: str, reader_for: Callable[[Format], Callable[[Sample], FileReport] | None], named: NamedFiles
) -> FileReport:
    kind = sniff.sniff(sample)
    if kind is Format.EMPTY:
        return FileReport(kind.value, (FileIssue(Problem.EMPTY, "0 bytes"),))
    by_name = _named_reader(name, kind, named)
    if by_name is not None:
        return by_name(sample)
    spec = current().by_format.get(kind)
    if spec is not None and spec.not_a_checkpoint:
        return FileReport(kind.value, (FileIssue(Problem.NOT_A_CHECKPOINT, spec.not_a_checkpoint),))
    reader = reader_for(kind)
    report = reader(sample) if reader else FileReport(kind.value)
    known = named.get(name)
    if known is not None and known.annotate is not None:
        report = known.annotate(sample, report)
    expected = expected_formats(name)
    if expected is not None and Format(report.format) not in expected:
        wanted = " or ".join(sorted(f.value for f in expected))
        issue = FileIssue(
            Problem.NOT_A_CHECKPOINT,
            f"holds {report.format} data, not the {wanted} its name promises",
        )
        return dataclasses.replace(report, issues=(issue, *report.issues))
    return report


def _probe_of(kind: Format) -> Callable[[Sample], FileReport] | None:
    spec = current().by_format.get(kind)
    return spec.probe if spec else None


def _named_reader(name: str, kind: Format, named: NamedFiles) -> Callable[[Sample], FileReport] | None:
    """Files whose name fixes what they hold: those a framework names (``named``: pointer and
    state files), a format's own metadata files (Orbax's JSON, DCP's ``.metadata``, a shard
    index), and DCP's data files (raw tensor bytes, where zeros or any magic are fine)."""
    known = named.get(name)
    if known is not None and known.read is not None and known.when in (None, kind):
        return known.read
    if dcp.is_data_file(name):
        return dcp.read_data_file
    if tfbundle.is_data_file(name):
        return tfbundle.read_data_file
    if kind is Format.UNKNOWN and name.endswith(tfbundle.INDEX_SUFFIX):
        return tfbundle.read_index  # an index cut short lost the magic it is told by
    if name in orbax.NAMES:
        return functools.partial(orbax.read, name=name)
    if name == dcp.METADATA and kind is Format.PICKLE:
        return dcp.read_metadata
    if kind is Format.JSON and hfjson.is_index(name):
        return functools.partial(hfjson.read_index, name=name)
    return None


def probe(entry: Entry, named: NamedFiles, harmless: Harmless = NO_HARMLESS) -> FileReport:
    """Open, sample and judge one file; a file that cannot be read says why. An OCDBT manifest is
    judged with the nodes it names (metadata, small beside the values), whose CRCs ``verify`` checks.
    ``named`` and ``harmless``: the layouts' tables (``read_header``)."""
    if entry.name == ocdbt.MANIFEST:
        return _read_file(entry, functools.partial(_walk_ocdbt, folder=os.path.dirname(entry.os_path), crc=False, values=False))
    return _read_file(entry, functools.partial(_header_of, named=named, harmless=harmless))


def _header_of(sample: Sample, name: str, named: NamedFiles, harmless: Harmless) -> FileReport:
    whole = sample.whole()
    if whole is not None:
        return _judged_whole(whole, name, named, harmless)
    return _shared(read_header(sample, name, named, harmless))


def read_sample(sample: Sample, name: str, whole: bool, named: NamedFiles, harmless: Harmless = NO_HARMLESS) -> FileReport:
    """``sample`` judged as ``inspect`` judges a file from its header and trailer or, ``whole``,
    as ``verify`` judges it from all of its bytes: what a stored object's older version is read
    with (``readers`` know formats, the sample knows which version)."""
    if whole:
        return verify_sample(sample, name, 0, named, harmless)
    return _header_of(sample, name, named, harmless)


def _shared(report: FileReport) -> FileReport:
    """Clean reports of one run are alike: one object each (and its cached problem set)."""
    if report.issues or report.tensors:
        return report
    return _CLEAN.setdefault((report.format, report.facts), report)


def _judged_whole(whole: bytes, name: str, named: NamedFiles, harmless: Harmless) -> FileReport:
    """``read_header`` of a file read whole in one read, judged once per content: a run saves
    the same small files again and again (burn's scheduler and optimizer records, HF's
    ``training_args.bin``, pointer files). Readers are pure functions of the bytes, and the name
    picks how they are read in two ways only: a reader that is handed the name (a file a
    framework names, a format's metadata file, a shard index) may say it, so such a file is
    remembered under its whole name; any other is judged by its suffixes (what they promise, or
    a DCP data file's), so it is remembered under its suffixes, from the first dot on (and the
    table of harmless classes it was judged with)."""
    if name in named or name in _NAME_PICKS_READER or hfjson.is_index(name):
        key = (whole, True, name, harmless)
    else:
        dot = name.find(".")
        key = (whole, False, name[dot:] if dot >= 0 else "", harmless)
    report = _BY_CONTENT.get(key)
    if report is None:
        report = _shared(read_header(BytesSample(whole), name, named, harmless))
        if len(_BY_CONTENT) >= _BY_CONTENT_MAX:
            _BY_CONTENT.clear()  # a run of many distinct small files: keep memory bounded, not the memo
        _BY_CONTENT[key] = report
    return report


def probe_many(entries: Sequence[Entry], named: NamedFiles, threads: int = 1, harmless: Harmless = NO_HARMLESS) -> list[FileReport]:
    """``probe`` of each of ``entries``, in order. Small files (at most ``HEAD + TAIL`` bytes: a
    big run's pointers, configs and small states) are read whole in bulk, by the compiled
    reader on ``threads`` threads where it was built; a file that bulk read could not take (not
    regular, unreadable, changed size) is probed alone, which says why. Objects in a bucket have
    their heads and tails fetched many at once, then are judged from them."""
    if entries and session.owner(entries[0].os_path) is not None:
        return _probe_objects(entries, named, harmless)
    reports: list[FileReport | None] = [None] * len(entries)
    # an OCDBT manifest is judged with the files it names: ``probe`` reads it alone
    # (an entry this user may not look at has no size: probed alone, it says so)
    small = [i for i, entry in enumerate(entries) if entry.size <= HEAD + TAIL and entry.name != ocdbt.MANIFEST and not entry.denied]
    for start in range(0, len(small), _BULK):
        chunk = small[start : start + _BULK]
        read = read_edges([os.fsencode(entries[i].os_path) for i in chunk], [entries[i].size for i in chunk], HEAD, TAIL, threads)
        for i, whole in zip(chunk, read, strict=True):
            if isinstance(whole, bytes) and len(whole) == entries[i].size:
                reports[i] = _judged_whole(whole, entries[i].name, named, harmless)
    return [report if report is not None else probe(entry, named, harmless) for report, entry in zip(reports, entries, strict=True)]


_BULK = 2048
"""Files read per bulk call: their bytes are held until it returns (at most 40 MiB)."""


def _probe_objects(entries: Sequence[Entry], named: NamedFiles, harmless: Harmless) -> list[FileReport]:
    reports: list[FileReport] = []
    for start in range(0, len(entries), _BULK):
        chunk = entries[start : start + _BULK]
        for entry, sample in zip(chunk, object_samples([(e.os_path, e.size) for e in chunk], HEAD, TAIL), strict=True):
            if isinstance(sample, FileNotFoundError):
                reports.append(_unreadable("it vanished while being scanned"))
            elif isinstance(sample, ArchivedObject):
                reports.append(archived(sample.archive))
            elif isinstance(sample, OSError):
                reports.append(_unreadable(sample.strerror or str(sample)))
            elif entry.name == ocdbt.MANIFEST:
                reports.append(_walk_ocdbt(sample, entry.name, folder=os.path.dirname(entry.os_path), crc=False, values=False))
            else:
                reports.append(_header_of(sample, entry.name, named, harmless))
    return reports


class HeaderReads:
    """``inspect``'s read of a file (``probe``, with the files the layouts name read as named),
    and of many at once (``many``): what grouping reads a run's files with."""

    def __init__(self, named: NamedFiles, harmless: Harmless = NO_HARMLESS) -> None:
        self.named = named
        self.harmless = harmless

    def __call__(self, entry: Entry) -> FileReport:
        return probe(entry, self.named, self.harmless)

    def many(self, entries: Sequence[Entry]) -> list[FileReport]:
        """Each of ``entries`` probed, in order: in this process where the compiled reader reads
        (its threads share the reads out, and what is judged is mostly judged once), else over
        every core in forked workers (Python's own reads do not share out across threads)."""
        if COMPILED or (entries and session.owner(entries[0].os_path) is not None):  # objects: fetched by one thread's event loop
            return probe_many(entries, self.named, cores(), self.harmless)
        chunks = map_chunks(lambda start, stop: probe_many(entries[start:stop], self.named, harmless=self.harmless), len(entries))
        return [report for chunk in chunks for report in chunk]


class RecordedReads(HeaderReads):
    """Header reads that keep each report they make (``made``): ``verify`` judges again from them,
    with its whole reads, rather than read the same headers a second time."""

    def __init__(self, named: NamedFiles, harmless: Harmless = NO_HARMLESS) -> None:
        super().__init__(named, harmless)
        self.made: dict[str, FileReport] = {}

    def __call__(self, entry: Entry) -> FileReport:
        report = self.made[entry.os_path] = super().__call__(entry)
        return report

    def many(self, entries: Sequence[Entry]) -> list[FileReport]:
        reports = super().many(entries)
        self.made.update(zip((entry.os_path for entry in entries), reports, strict=True))
        return reports


_NAME_PICKS_READER = orbax.NAMES | {dcp.METADATA}
"""Names whose reader their name picks, whatever the table of named files says."""
_BY_CONTENT: dict[tuple[bytes, bool, str, Harmless], FileReport] = {}
_BY_CONTENT_MAX = 256
"""Distinct small contents remembered (each at most ``HEAD + TAIL`` bytes): a few MiB at most."""


def with_keys(entry: Entry, report: FileReport) -> FileReport:
    """``report`` with the top-level keys of the torch archive it judged, skimmed, for a file
    whose name says it bundles several roles (``inspect`` confirms them from its content)."""
    if report.format != Format.TORCH_ZIP.value or report.issues or report.keys_read:
        return report
    try:
        skimmed = _reading(entry, torchzip.top_level, "keys")
    except OSError:
        return report
    if skimmed is None:
        return report
    numbers = tuple((f"{TOP_LEVEL_NUMBER}{key}", str(value)) for key, value in skimmed.numbers)
    facts = (*report.facts, (TOP_LEVEL_TENSORS, str(skimmed.tensor_values)), *numbers)
    return dataclasses.replace(report, facts=facts, keys=skimmed.keys)


def same_save(copy: Entry, saves: Sequence[Entry]) -> int | None:
    """Which of ``saves`` (torch archives) holds the very save the archive ``copy`` holds: the
    position of the first whose ``data.pkl`` has the CRC-32 and size ``copy``'s central directory
    records (``torchzip.holds_pickle``: from that save's own directory, or from its first bytes
    where it was cut short). None where none does, or ``copy``'s directory cannot be read."""
    try:
        record = _reading(copy, torchzip.pickle_record, "pickle")
    except OSError:
        return None
    if record is None:
        return None
    for position, save in enumerate(saves):
        try:
            if _reading(save, lambda sample: torchzip.holds_pickle(sample, record.crc, record.size), "holds", record.crc, record.size):
                return position
        except OSError:
            continue
    return None


def _reading(entry: Entry, read: Callable[[Sample], Found], *asked: object) -> Found:
    """``read`` of the file's sample, made once while ``verify`` keeps what it read (``remembered``:
    ``asked`` names the reading)."""

    def made() -> Found:
        with open_sample(entry.os_path, entry.size) as sample:
            return read(sample)

    return remembered((entry.os_path, entry.size, *asked), made)


def read_whole(entry: Entry, deep: int, named: NamedFiles, harmless: Harmless = NO_HARMLESS) -> FileReport:
    """Read one file whole and judge it; a DCP ``.metadata`` is judged with the objects
    ``dcp.load`` would unpickle from its data files. ``named`` and ``harmless``: the layouts'
    tables (``read_header``)."""
    with harmless_known(harmless):
        return _read_whole(entry, deep, named)


def _read_whole(entry: Entry, deep: int, named: NamedFiles) -> FileReport:
    if entry.name == dcp.METADATA:
        report = _read_file(entry, functools.partial(_verify_metadata, folder=os.path.dirname(entry.os_path), deep=deep), whole=True)
    elif entry.name == ocdbt.MANIFEST:
        report = _read_file(
            entry, functools.partial(_walk_ocdbt, folder=os.path.dirname(entry.os_path), crc=True, values=deep > 0), whole=True
        )
    elif entry.name.endswith(tfbundle.INDEX_SUFFIX):
        report = _read_file(
            entry, functools.partial(_verify_bundle, folder=os.path.dirname(entry.os_path), deep=deep, named=named), whole=True
        )
    elif entry.name in keras.WEIGHTS:
        report = _read_file(
            entry, functools.partial(_verify_keras_weights, folder=os.path.dirname(entry.os_path), deep=deep, named=named), whole=True
        )
    else:
        report = _read_file(entry, functools.partial(verify_sample, deep=deep, named=named), whole=True)
    return report


def _verify_keras_weights(sample: Sample, name: str, folder: str, deep: int, named: NamedFiles) -> FileReport:
    """The weights of a Keras model saved unzipped, with the ``config.json`` beside them that
    ``keras.saving.load_model(folder)`` builds the model from first (``readers.keras``); weights
    with no ``config.json`` beside them (``save_weights``) are judged alone, as Keras loads them."""
    report = verify_sample(sample, name, deep, named)
    try:
        with _beside(folder, keras.CONFIG) as config:
            issues = keras.config_beside(config)
    except FileNotFoundError:
        return report
    except OSError as error:
        why = error.strerror or str(error)
        issues = [FileIssue(Problem.CODE_IN_CONFIG, f"cannot check {keras.CONFIG} beside it ({why}): it cannot be proven free of code")]
    return dataclasses.replace(report, issues=report.issues + tuple(issues)) if issues else report


def _verify_bundle(sample: Sample, name: str, folder: str, deep: int, named: NamedFiles) -> FileReport:
    """A TensorFlow index, with every tensor of its shards read against the CRC-32C it records
    (TensorFlow checks it on every restore, so ``verify`` does too, and ``--deep`` also counts NaN
    and Inf): the shards are raw bytes that only their index can judge."""
    report = verify_sample(sample, name, deep, named)
    parsed = tfbundle.bundle_entries(sample.head(sample.size)) if report.format == tfbundle.TF_INDEX.value else None
    if parsed is None or report.issues:
        return report
    shards, entries = parsed
    prefix = name.removesuffix(tfbundle.INDEX_SUFFIX)
    issues: list[FileIssue] = []
    for shard in range(min(shards, _MAX_SHARDS)):
        shard_name = tfbundle.data_file_name(prefix, shard, shards)
        try:
            with _beside(folder, shard_name) as data:
                issues += tfbundle.shard_issues(data, [e for e in entries if e.shard == shard], shard_name, nonfinite=deep > 0)
        except OSError:
            continue  # a missing or unreadable shard: its own report, or the layout, says so
    return dataclasses.replace(report, issues=tuple(issues)) if issues else report


_MAX_SHARDS = 100_000


def _verify_metadata(sample: Sample, name: str, folder: str, deep: int) -> FileReport:
    report = verify_sample(sample, name, deep)
    if report.format != Format.PICKLE.value:
        return report
    with one_budget(file_budget()):
        walked = pickle.walk_sample(sample, 0, None)
    if walked.error or walked.unproven:
        return report  # the metadata's own verdict says so
    items = dcp.storage_items(walked)
    report = _with_unsafe(report, _dcp_objects(items, folder))
    if deep and isinstance(items, list):
        report = dataclasses.replace(report, spans=_dcp_spans(items, folder, deep))
    return report


def _dcp_objects(items: list[dcp.StoredItem] | str, folder: str) -> list[FileIssue]:
    """Each object a DCP checkpoint holds besides its tensors, read where ``.metadata`` says, from
    the data files in ``folder``, as the ``torch.load(weights_only=False)`` that ``dcp.load`` runs."""
    if isinstance(items, str):
        return [
            FileIssue(
                Problem.UNSAFE_PICKLE,
                f"{items}: where dcp.load finds the objects it unpickles cannot be told, so they cannot be proven safe",
            )
        ]
    issues: list[FileIssue] = []
    read = set(dcp.objects_read(items))
    for item in items:
        if item.tensor:
            continue
        where = f"the DCP object {item.fqn!r} ({item.relative_path}, {item.length} bytes at {item.offset})"
        if not dcp.in_folder(item.relative_path):
            issues.append(
                FileIssue(
                    Problem.UNSAFE_PICKLE,
                    f"{where} lies outside the checkpoint's folder: what dcp.load would unpickle there cannot be proven safe",
                )
            )
            continue
        if item.length > dcp.MAX_OBJECT:
            issues.append(FileIssue(Problem.UNSAFE_PICKLE, f"{where} is longer than ckptdoctor reads: it cannot be proven safe"))
            continue
        try:
            with _beside(folder, item.relative_path) as data:
                chunk = data.range(item.offset, item.length) if item in read else b""
        except OSError:
            continue  # dcp.load fails on it too; the data file's own report says why
        found = verify_sample(BytesSample(chunk), "object.pt").issues
        issues += [dataclasses.replace(i, detail=f"{where}: {i.detail}") for i in found if i.problem is Problem.UNSAFE_PICKLE]
    return issues


def _beside(folder: str, name: str) -> Sample:
    """A file beside the one read whole, whose reader reads ranges of it that the file read
    names: each read exactly, as ``whole_read_bytes`` counts it before ``verify`` asks."""
    return open_sample(os.path.join(folder, name), blocks=False)


def whole_read_bytes(entry: Entry, header: FileReport | None, deep: bool) -> int:
    """The most bytes :func:`read_whole` of the object ``entry`` receives from its store: the
    object (none where its header read held it whole, ``sample.keeping_whole``), and what its
    reader reads of the files beside it: a DCP ``.metadata``'s objects (and with ``deep`` every
    item) in its data files, as its header read (``header``) counted them; a TensorFlow index's
    shards, an OCDBT manifest's nodes, and the ``config.json`` beside Keras weights, each at
    most whole, once."""
    own = 0 if kept_whole(entry.os_path, entry.size) else entry.size
    counted = header.fact(dcp.READ_BESIDE) if header is not None and entry.name == dcp.METADATA else None
    if counted is not None:
        objects, spans = map(int, counted.split("\t"))
        return own + objects + (spans if deep else 0)
    folder = os.path.dirname(entry.os_path)
    if entry.name == dcp.METADATA or entry.name == ocdbt.MANIFEST or entry.name.endswith(tfbundle.INDEX_SUFFIX):
        return own + sum(sibling.size for url in session.listed_under(folder) if (sibling := session.listed(url)) is not None)
    if entry.name in keras.WEIGHTS:
        config = session.listed(os.path.join(folder, keras.CONFIG))
        return own + (config.size if config is not None else 0)
    return own


def _walk_ocdbt(sample: Sample, name: str, folder: str, crc: bool, values: bool) -> FileReport:
    if sample.size > ocdbt.MAX_NODE_BYTES:
        return FileReport(
            Format.OCDBT.value, (FileIssue(Problem.MALFORMED, f"{sample.size:,} bytes: larger than any OCDBT manifest ckptdoctor reads"),)
        )
    return ocdbt.walk(sample.head(sample.size), _Folder(folder), crc, values)


class _Folder:
    """The files of one folder, for readers that follow references between them (OCDBT)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def size(self, path: str) -> int | None:
        try:
            with open_sample(os.path.join(self.folder, path)) as data:
                return data.size
        except OSError:
            return None

    def read(self, path: str, offset: int, length: int) -> bytes:
        try:
            with _beside(self.folder, path) as data:
                return data.range(offset, length)
        except OSError:
            return b""


def _dcp_spans(items: list[dcp.StoredItem], folder: str, threads: int) -> tuple[Span, ...]:
    """Every item of a DCP checkpoint read byte by byte, one data file at a time: which are all zero."""
    by_file: dict[str, list[dcp.StoredItem]] = {}
    for item in dcp.spans_read(items):
        by_file.setdefault(item.relative_path, []).append(item)
    spans: list[Span] = []
    for file, stored in sorted(by_file.items()):
        try:
            with _beside(folder, file) as data:
                _, checked = deep_scan.scan(data, [deep_scan.Region(i.offset, i.length, zeros=True) for i in stored], threads)
        except OSError:
            continue  # the data file's own report says why
        if checked:  # none where the file is shorter than its items: the layout reports it cut short
            spans += [Span(item.key, bool(result.zero), file) for item, result in zip(stored, checked, strict=True)]
    return tuple(spans)


class ReadAhead:
    """Reports made before the runs were grouped (``verify`` reads every file first), served as a
    probe; files not among them are probed as usual, or (``settled``) are unreadable: where
    ``reports`` hold every file of the first listing, such a file appeared after its files were
    read (a save renamed into place), and a probe would call it whole unread."""

    def __init__(self, reports: dict[str, FileReport], named: NamedFiles, harmless: Harmless = NO_HARMLESS, settled: bool = False) -> None:
        self.reports = reports
        self.named = named
        self.harmless = harmless
        self.settled = settled

    def __call__(self, entry: Entry) -> FileReport:
        report = self.reports.get(entry.os_path)
        if report is not None:
            return report
        if self.settled:
            return _unreadable("it appeared while the run was being verified, after its files were read: verify again")
        return probe(entry, self.named, self.harmless)


def holds(entry: Entry, formats: frozenset[Format]) -> bool:
    """Whether a file's first bytes are one of ``formats``, or a stream joblib.load decompresses;
    False when it cannot be opened."""
    try:
        with open_sample(entry.os_path, entry.size) as sample:
            return sniff.sniff(sample) in formats or compressed.compressed(sample)
    except OSError:
        return False


def _read_file(entry: Entry, judge: Callable[[Sample, str], FileReport], whole: bool = False) -> FileReport:
    """``judge`` of the file's sample; ``whole``: the file is read whole anyway (``verify``), so an
    object in a bucket is fetched whole first, in parallel parts, not range by range; but not
    where a cluster reads the deep check's ranges (``--ray``): this process then reads only what
    the readers walk, by ranges."""
    fetched = downloaded if whole and deep_scan.fanout() is None else open_sample
    try:
        with fetched(entry.os_path, entry.size) as sample:
            return judge(sample, entry.name)
    except FileNotFoundError:
        return _unreadable("it vanished while being scanned")
    except IsADirectoryError:
        return _unreadable("it is a folder, not a file")
    except ArchivedObject as error:
        return archived(error.archive)
    except OSError as error:
        if error.errno in DENIED:
            return denied(entry.os_path)
        return _unreadable(error.strerror or str(error))


def denied(os_path: str) -> FileReport:
    """The report of a file this user may not read: nothing is known of it (not damage), and who
    owns it, who can tell."""
    owned = owner(os_path)
    return FileReport(Format.UNKNOWN.value, (FileIssue(Problem.ACCESS_DENIED, f"owned by {owned}" if owned else "owner unknown"),))


def archived(archive: Archive) -> FileReport:
    """The report of an object in an archive tier, not restored: nothing is known of it (not
    damage), and its facts say where it is kept and whether a restore is under way (CKD217)."""
    where = f"{archive.storage_class}, {archive.tier}" if archive.tier else archive.storage_class
    restore = {True: RESTORING, False: NOT_RESTORED, None: RESTORE_UNKNOWN}[archive.restoring]
    facts = ((STORAGE_CLASS, archive.storage_class), (ARCHIVE_TIER, archive.tier or ""), (RESTORE, restore))
    return FileReport(Format.UNKNOWN.value, (FileIssue(Problem.ARCHIVED, f"archived ({where}): {restore}"),), facts)


_CLEAN: dict[tuple[str, tuple[tuple[str, str], ...]], FileReport] = {}


def _unreadable(why: str) -> FileReport:
    return FileReport(Format.UNKNOWN.value, (FileIssue(Problem.UNREADABLE, why),))
