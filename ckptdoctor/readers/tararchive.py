"""A tar archive of a saved folder (``tar -C folder .``): its members, and the checkpoints inside.

Such archives are written by ``tarfile`` with ``arcname="."`` (NeMo's ``.nemo``:
``save_restore_connector.py``, ``_make_nemo_file_from_folder``): the first member is the folder
itself, ``.``, and the others are named ``./<path>``; others archive files by their bare names
(NeMo's ``tarfile`` reads those too; pandas' ``to_pickle`` to ``*.tar`` writes one member). A first
member that is none of torch's own legacy tar's (``sys_info``, ``pickle``, ``tensors``,
``storages``: ``readers/torchtar.py``) tells them apart.
``tarfile`` pads every archive with zeros to a whole 10240-byte record, after two zero blocks that
end it: an archive that stops anywhere else was cut short.

``inspect`` reads the first header and the file's end; ``verify`` walks every member's header,
checks that each member's data is there, and reads each member that is itself a checkpoint file
(``.ckpt``, ``.pt``, ``.pth``: a ``torch.save`` zip), or a pickle (which ``pandas.read_pickle``
unpickles from a ``.tar``), through the reader of its content, as a stretch of the archive
(members are stored, never compressed). The names of the members are kept
(``MEMBERS``), so that a layout can ask for the ones its framework needs.

Such an archive may be gzipped whole: NeMo before 1.7 wrote ``.nemo`` files with ``"w:gz"``, and
reads either (``_tar_open``: ``"r:"``, then ``"r:gz"`` where that fails). Its tar stream is told
by inflating the head; ``inspect`` inflates the whole stream (a gzip stream says it is whole only
at its end) to find a cut in it or in the tar it holds, and ``verify`` inflates it into a
temporary file and reads that as it reads a plain archive.
"""

from __future__ import annotations

import tempfile
import zlib

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers._registry import Naming, Rank, ReaderSpec, Sniff, current
from ckptdoctor.readers.compressed import gzip_parts
from ckptdoctor.readers.sample import EdgeSample, FileSample, Sample, Window
from ckptdoctor.readers.sniff import Format, sniff

TAR = Format.declare("tar")
MEMBERS = "members"
"""A fact: the archive's member names (files only), one a line, without the leading ``./``."""
BLOCK = 512
RECORD = 20 * BLOCK
"""``tarfile.RECORDSIZE``: an archive's length is a multiple of it."""
_CHECKPOINT_SUFFIXES = (".ckpt", ".pt", ".pth")
"""Members read as checkpoint files of their own (a ``torch.save`` of a state dict)."""
COMPRESSION = "compression"
"""A fact: ``gzip`` for an archive gzipped whole."""
_GZIP = b"\x1f\x8b"
_GZIP_WBITS = 16 + zlib.MAX_WBITS


def _folder_tar(head: bytes, sample: Sample) -> bool:
    """``ustar`` at 257 and a first member that is none of torch's own: a folder archived whole
    (``.``, ``./…``), or files archived by name (a ``.nemo`` made with bare names, which NeMo's
    ``tarfile`` reads as well; pandas' ``.pkl.tar``, one member)."""
    if len(head) < 262 or head[257:262] != b"ustar":
        return False
    name = head[:100].split(b"\0", 1)[0]
    return bool(name) and name not in _TORCH_MEMBERS


_TORCH_MEMBERS = (b"sys_info", b"pickle", b"tensors", b"storages")
"""The members of torch's own legacy tar (``readers/torchtar.py``), in any order."""


def _gzipped_folder_tar(head: bytes, sample: Sample) -> bool:
    """A gzip stream whose first inflated bytes are a folder archived whole (an old ``.nemo``)."""
    if not head.startswith(_GZIP):
        return False
    try:
        inflated = zlib.decompressobj(_GZIP_WBITS).decompress(head, BLOCK)
    except zlib.error:
        return False
    return _folder_tar(inflated, sample)


def _probe_gzipped(sample: Sample) -> FileReport:
    """The whole gzip stream inflated, kept only at its two ends: cut or damaged, or the tar it holds cut."""
    head, tail, size = b"", b"", 0
    for part in gzip_parts(sample):
        if isinstance(part, FileIssue):
            return FileReport(TAR.value, (part,), _GZIPPED)
        size += len(part)
        if len(head) < RECORD:
            head += part[: RECORD - len(head)]
        tail = (tail + part)[-RECORD:]
    issue = _ending(EdgeSample(head, tail, size))
    return FileReport(TAR.value, (issue,) if issue else (), _GZIPPED)


_GZIPPED = ((COMPRESSION, "gzip"),)


def _ending(sample: Sample) -> FileIssue | None:
    """A cut in the archive's last record: the length or its closing zero blocks."""
    if sample.size % RECORD:
        return FileIssue(Problem.TRUNCATED, f"{sample.size} bytes: a tar archive ends on a whole {RECORD}-byte record")
    if sample.range(sample.size - 2 * BLOCK, 2 * BLOCK).strip(b"\0"):
        return FileIssue(Problem.TRUNCATED, "the archive does not end with the two zero blocks that close a tar")
    return None


def probe(sample: Sample) -> FileReport:
    if sample.head(len(_GZIP)) == _GZIP:
        return _probe_gzipped(sample)
    issue = _ending(sample)
    return FileReport(TAR.value, (issue,) if issue else ())


def read_whole(sample: Sample, deep: int = 0) -> FileReport:
    """Every member's header and data, and each checkpoint member read whole as its content; a
    gzipped archive inflated into a temporary file first, as NeMo unpacks one."""
    if sample.head(len(_GZIP)) == _GZIP:
        return _read_gzipped(sample, deep)
    return _read_tar(sample, deep)


def _read_gzipped(sample: Sample, deep: int) -> FileReport:
    with tempfile.TemporaryFile(prefix="ckptdoctor-") as inflated:
        for part in gzip_parts(sample):
            if isinstance(part, FileIssue):
                return FileReport(TAR.value, (part,), _GZIPPED)
            inflated.write(part)
        inflated.flush()
        report = _read_tar(FileSample(inflated.fileno()), deep)
    return FileReport(report.format, report.issues, (*report.facts, *_GZIPPED))


def _read_tar(sample: Sample, deep: int) -> FileReport:
    issues: list[FileIssue] = []
    names: list[str] = []
    offset, end = 0, 0
    extended: dict[str, str] = {}  # what a GNU long name or a PAX header says of the next member
    while offset + BLOCK <= sample.size:
        header = sample.range(offset, BLOCK)
        if not header.strip(b"\0"):
            break  # the end of the archive: zero blocks
        member = _header(header)
        if member is None:
            issues.append(FileIssue(Problem.MALFORMED, f"the tar header at byte {offset} cannot be read"))
            break
        name, size, kind = member
        start = offset + BLOCK
        if kind in _EXTENSIONS:
            end = start + size
        else:
            name, size = extended.get("path", name), int(extended.get("size", size))
            end = start + size
        if end > sample.size:
            issues.append(FileIssue(Problem.TRUNCATED, f"{name}: its data stops {end - sample.size} bytes short"))
            break
        if kind in _EXTENSIONS:
            record = sample.range(start, size)
            unread = _extension(kind, record, extended)
            if unread is not None:
                issues.append(_unchecked(f"{extended.get('path', name)}: {unread}"))
                break
        else:
            extended = {}
            if kind == _SPARSE:
                issues.append(_unchecked(f"{name}: a sparse member, which tarfile unpacks with zeros in its holes"))
                break
            if _read_as_file(kind, name):
                relative = name.removeprefix("./")
                names.append(relative)
                content = Window(sample, start, size)
                # a checkpoint member by its name (NeMo's torch.load), or a pickle by its content: pandas'
                # read_pickle unpickles a `.tar`'s one member whatever it is called
                if relative.lower().endswith(_CHECKPOINT_SUFFIXES) or sniff(content) is Format.PICKLE:
                    issues += (FileIssue(i.problem, f"{relative}: {i.detail}") for i in _inner(content, deep))
        offset = start + -(-size // BLOCK) * BLOCK
    else:
        if not issues:
            issues.append(FileIssue(Problem.TRUNCATED, "the archive stops before the zero blocks that close a tar"))
    if not issues and (ending := _ending(sample)) is not None:
        issues.append(ending)
    if not issues and sample.range(offset, sample.size - offset).strip(b"\0"):
        issues.append(FileIssue(Problem.TRAILING_BYTES, "bytes after the end of the archive"))
    return FileReport(TAR.value, tuple(issues), ((MEMBERS, "\n".join(names)),))


_SPARSE = b"S"
_EXTENSIONS = frozenset({b"L", b"K", b"x", b"g", b"X"})
"""Headers that describe the next member (GNU long names, PAX records), which ``tarfile`` applies."""
_NOT_FILES = frozenset({b"1", b"2", b"3", b"4", b"5", b"6"})
"""Links, devices, folders and FIFOs: every other type ``tarfile`` unpacks as a regular file."""
_PAX_APPLIED = ("path", "size", "GNU.sparse.")
"""PAX keys that change which bytes ``tarfile`` reads as a member, or where."""


def _read_as_file(kind: bytes, name: str) -> bool:
    """Whether ``tarfile`` reads the member as a file: any type it does not know is one, but an
    old-style member named like a folder is a folder."""
    return kind not in _NOT_FILES and not (kind == b"\0" and name.endswith("/"))


def _extension(kind: bytes, record: bytes, extended: dict[str, str]) -> str | None:
    """Apply a GNU long name or a PAX header to ``extended``, as ``tarfile`` does; why not, where
    it would change what ``tarfile`` reads in a way this reader does not follow."""
    if kind == b"L":
        extended["path"] = record.split(b"\0", 1)[0].decode("utf-8", "replace")
        return None
    if kind == b"K":
        return None  # a long link target: links are not read
    fields: dict[str, str] = {}
    rest = record
    while rest.strip(b"\0"):
        length, _, _ = rest.partition(b" ")
        try:
            line = rest[: int(length)]
            key, _, value = line[len(length) + 1 : -1].decode("utf-8", "replace").partition("=")
        except ValueError:
            return "a PAX header that cannot be read"
        if not line:
            return "a PAX header that cannot be read"
        fields[key] = value
        rest = rest[len(line) :]
    applied = [key for key in fields if key.startswith(_PAX_APPLIED)]
    if kind == b"g" and applied:
        return f"a global PAX header that sets {', '.join(applied)} for every member"
    if any(key.startswith("GNU.sparse.") for key in applied):
        return "a sparse member (PAX GNU.sparse), which tarfile unpacks with zeros in its holes"
    if "size" in fields and not fields["size"].isdigit():
        return f"a PAX size that is not a number ({fields['size'][:20]!r})"
    extended.update({key: fields[key] for key in ("path", "size") if key in fields})
    return None


def _unchecked(why: str) -> FileIssue:
    return FileIssue(
        Problem.UNSAFE_PICKLE, f"cannot check: {why}, and ckptdoctor does not read it as tarfile does, so it cannot be proven safe"
    )


def _header(block: bytes) -> tuple[str, int, bytes] | None:
    """A member's name, data size and type from its ustar header; None where it is not one."""
    stored = sum(block[:148]) + 8 * 32 + sum(block[156:])
    try:
        checksum = int(block[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
        size = _number(block[124:136])
    except ValueError:
        return None
    if checksum != stored or block[257:262] != b"ustar":
        return None
    prefix = block[345:500].split(b"\0", 1)[0]
    name = block[:100].split(b"\0", 1)[0]
    full = (prefix + b"/" + name if prefix else name).decode("utf-8", "replace")
    return full, size, block[156:157]


def _number(field: bytes) -> int:
    """A header's number: octal, or GNU's base-256 for sizes past 8 GiB (first byte 0x80)."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    return int(field.split(b"\0", 1)[0].strip() or b"0", 8)


def _inner(member: Sample, deep: int) -> tuple[FileIssue, ...]:
    """A checkpoint member judged as the file it is."""
    kind = sniff(member)
    spec = current().by_format.get(kind)
    if spec is None or (spec.read_whole is None and spec.probe is None):
        return (FileIssue(Problem.NOT_A_CHECKPOINT, f"holds {kind.value} data, not a checkpoint file"),)
    report = spec.read_whole(member, deep) if spec.read_whole is not None else spec.probe(member)  # type: ignore[misc]
    return report.issues


SPECS = (
    ReaderSpec(
        TAR,
        (Sniff(Rank.STRUCTURE - 1, _folder_tar), Sniff(Rank.SIGNATURE - 1, _gzipped_folder_tar)),
        ((".nemo", Naming.CHECKPOINT_ONLY), (".tar", Naming.CHECKPOINT)),  # a `.tar`: pandas' and Composer's tarballs too
        probe,
        read_whole,
        read_any_name=True,
    ),
)
