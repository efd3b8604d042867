"""Keras 3's ``.keras`` archive: a zip of ``metadata.json``, ``config.json`` and ``model.weights.h5``.

``keras/src/saving/saving_lib.py`` (``save_model``, ``_save_model_to_fileobj``) writes the members
in that order, stored, straight into the target: a killed save leaves a zip with no central
directory. ``load_model`` (``_load_model_from_fileobj``) needs ``config.json`` and the weights
(``model.weights.h5``, or ``model.weights.npz`` when saved so); ``assets/`` is optional. The
weights member is an HDF5 file, judged by ``readers.hdf5`` in place; the configuration is parsed
for code a loader would run (``readers._kerasconfig``).

``saving_lib.save_model(model, path, weights_format="npz")`` (``NpzIOStore``) writes the weights
with ``numpy.savez`` as one member per layer path, each a dict of arrays: NumPy stores a dict as an
array of Python objects, pickled, and ``NpzIOStore`` reads with ``numpy.load(allow_pickle=False)``,
so ``keras.models.load_model`` of Keras 3.15 refuses every such archive it writes (``Object arrays
cannot be loaded when allow_pickle=False``). The member is read as an ``.npz`` (``readers.torchzip``,
its pickles walked, never run) and judged as Keras' loader would judge it.

``model.save(folder, zipped=False)`` (``_save_model_to_dir``) writes the same three files into a
folder, and ``load_model(folder)`` (``_load_model_from_dir``, for any folder that holds a
``config.json``) builds the model from that ``config.json`` before it reads the weights beside it:
``verify`` judges the weights with it (``config_beside``), as the archive's member is judged.
"""

from __future__ import annotations

import dataclasses
import zlib

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers import _kerasconfig, hdf5, npy, torchzip
from ckptdoctor.readers._registry import Library, Naming, Rank, ReaderSpec, Sniff
from ckptdoctor.readers.sample import BytesSample, Sample, Window, held
from ckptdoctor.readers.sniff import ZIP_LOCAL, Format

KERAS = Format.declare("keras")
CONFIG = "config.json"
METADATA = "metadata.json"
WEIGHTS = ("model.weights.h5", "model.weights.npz")
_H5, _NPZ = WEIGHTS
_FIRST = frozenset({METADATA.encode(), CONFIG.encode(), *(name.encode() for name in WEIGHTS)})
MAX_WEIGHTS_INFLATED = 1 << 30
"""A compressed weights member is inflated into memory to be read: no larger than this."""


_LOADER = "keras.saving.load_model"
"""Through zipfile, which checks a member's bytes against the directory's CRC-32 alone: a torn
copy whose directory and bytes are an older save's loads as that save, under the newer's name."""


def probe(sample: Sample) -> FileReport:
    """The archive's end records and member list, and the weights' HDF5 superblock: all
    ``inspect`` reads."""
    listed = _listed(sample)
    if isinstance(listed, FileReport):
        return listed
    members, issues = listed
    issues += torchzip.disagreements(sample, members, held(sample), _LOADER)
    weights = next((m for m in members if m.name in WEIGHTS), None)
    if weights is not None and weights.method == 0 and weights.data >= 0:
        stored = Window(sample, weights.data, weights.size)
        header = hdf5.probe(stored) if weights.name == _H5 else _first_array(stored)
        issues += _as_keras_reads(header.issues, weights.name)
    return FileReport(KERAS.value, tuple(issues), (("members", str(len(members))),))


def read_whole(sample: Sample, deep: int = 0) -> FileReport:
    """Every member: the configuration parsed for code, the weights read as HDF5 (with ``deep``
    every float's value), and every member's CRC-32, as ``load_model`` checks it."""
    listed = _listed(sample)
    if isinstance(listed, FileReport):
        return listed
    members, issues = listed
    issues += torchzip.disagreements(sample, members, sample.size, _LOADER)
    by_name = {member.name: member for member in members}
    for name in (CONFIG, METADATA):
        member = by_name.get(name)
        data = torchzip.member_bytes(sample, member) if member is not None else None
        if isinstance(data, FileIssue):
            issues.append(data)
        elif data is not None and name == CONFIG:
            issues += _kerasconfig.code_in(data, CONFIG)
    weights = by_name.get(_H5) or by_name.get(_NPZ)
    report = FileReport(KERAS.value)
    if weights is not None:
        inner = _weights_sample(sample, weights)
        if isinstance(inner, FileIssue):
            issues.append(inner)
        else:
            report = hdf5.read_weights(inner, deep) if weights.name == _H5 else torchzip.read_whole(inner, deep)
            issues += _as_keras_reads(report.issues, weights.name)
    if not any(i.problem in (Problem.TRUNCATED, Problem.MALFORMED) for i in issues):
        # load_model reads each member whole through zipfile, which checks its CRC-32: so does verify
        refused = "keras.models.load_model refuses the archive (zipfile: Bad CRC-32 for file …)"
        issues += [i for i in torchzip.crc_issues(sample, members, [], max(deep, 1), refused) if i.problem is not Problem.NONFINITE]
    facts = (("members", str(len(members))), *report.facts)
    return FileReport(KERAS.value, tuple(issues), facts, report.tensors, report.keys, report.tensor_bytes)


def config_beside(config: Sample) -> list[FileIssue]:
    """What ``load_model(folder)`` would run of the ``config.json`` of a model saved unzipped: judged
    as the archive's member is, the same way, no more of it read than is parsed."""
    return _kerasconfig.code_in(config.head(min(config.size, _kerasconfig.MAX_CONFIG + 1)), CONFIG, config.size)


def _listed(sample: Sample) -> tuple[list[torchzip.Member], list[FileIssue]] | FileReport:
    located = torchzip.locate(sample)
    if isinstance(located, FileIssue):
        if located.problem is Problem.TRUNCATED:
            located = dataclasses.replace(
                located,
                detail="no zip end record at its end: the save was cut short (keras: Please ensure the file is an accessible `.keras` zip file)",
            )
        return FileReport(KERAS.value, (located,))
    members, issues = torchzip.list_members(sample, located)
    if located.end < sample.size:
        issues.append(FileIssue(Problem.TRAILING_BYTES, f"{sample.size - located.end} bytes after the archive's end record"))
    names = {member.name for member in members}
    if CONFIG not in names or not names.intersection(WEIGHTS):
        lacking = " and ".join(
            what for what, present in ((CONFIG, CONFIG in names), ("model.weights.h5", bool(names.intersection(WEIGHTS)))) if not present
        )
        issues.insert(0, FileIssue(Problem.MALFORMED, f"the archive has no {lacking}: keras.models.load_model cannot load it"))
    issues += [FileIssue(Problem.ZIP_ANOMALY, f"member {m.name} is encrypted") for m in members if m.flags & 0x1]
    return members, issues


def _weights_sample(sample: Sample, member: torchzip.Member) -> Sample | FileIssue:
    """The weights member as a file of its own: in place where stored, inflated where not."""
    if member.data < 0:
        return FileIssue(Problem.MALFORMED, f"member {member.name} cannot be located")
    if member.method == 0:
        return Window(sample, member.data, member.size)
    if member.method != 8 or member.size > MAX_WEIGHTS_INFLATED:
        return FileIssue(Problem.PARTLY_CHECKED, f"member {member.name} is compressed in a way ckptdoctor does not inflate: not read")
    try:
        data = zlib.decompressobj(-15).decompress(sample.range(member.data, member.compressed), MAX_WEIGHTS_INFLATED)
    except zlib.error as error:
        return FileIssue(Problem.MALFORMED, f"member {member.name} does not inflate ({error})")
    return BytesSample(data)


def _inside(issue: FileIssue, member: str) -> FileIssue:
    return dataclasses.replace(issue, detail=f"{member}: {issue.detail}")


def _first_array(npz: Sample) -> FileReport:
    """``inspect``'s look at ``NpzIOStore``'s weights: the header of the first array (the model's
    own, ``__root__``), which says whether they are arrays or pickled objects."""
    located = torchzip.locate(npz)
    if isinstance(located, FileIssue):
        return FileReport(Format.NUMPY.value, (located,))
    members, issues = torchzip.list_members(npz, located)
    first = members[0] if members else None
    if first is None or first.method != 0 or first.data < 0:
        return FileReport(Format.NUMPY.value, tuple(issues))
    return FileReport(Format.NUMPY.value, (*issues, *npy.read_header(Window(npz, first.data, first.size)).issues))


def _as_keras_reads(issues: tuple[FileIssue, ...], member: str) -> list[FileIssue]:
    """What was found in the weights member, as Keras' loader meets it: arrays of Python objects
    (pickles) are arrays ``NpzIOStore`` refuses, told once; what numpy.load(allow_pickle=True)
    would run of them stays an unsafe pickle; torch's allowlist of benign pickled globals does
    not apply to a Keras file."""
    found = [_inside(issue, member) for issue in issues if issue.problem not in (Problem.NOT_A_CHECKPOINT, Problem.NON_WEIGHTS)]
    objects = [issue for issue in issues if issue.problem is Problem.NOT_A_CHECKPOINT]
    if objects:
        more = f" (and {len(objects) - 1} more)" if len(objects) > 1 else ""
        refused = (
            f"{objects[0].detail}{more}: keras.models.load_model refuses it (numpy: Object arrays cannot be loaded when allow_pickle=False)"
        )
        found.insert(0, _inside(FileIssue(Problem.MALFORMED, refused), member))
    return found


def _keras_archive(head: bytes, sample: Sample) -> bool:
    """A zip whose first member is one ``save_model`` writes (it writes ``metadata.json`` first)."""
    return len(head) >= 30 and head.startswith(ZIP_LOCAL) and torchzip.first_member(head) in _FIRST


SPECS = (
    ReaderSpec(
        KERAS,
        (Sniff(Rank.MAGIC + 1, _keras_archive),),
        ((".keras", Naming.CHECKPOINT_ONLY),),
        probe,
        read_whole,
        read_any_name=True,
        loaded_by=Library.H5PY,
    ),
)
