"""``verify``'s safety verdicts: unsafe pickles and zip tricks are flagged, nothing is ever run,
and real checkpoints written by torch, HF Trainer, accelerate and Lightning are not flagged.

Nothing here loads an untrusted pickle. The malicious files are built from raw opcodes (or are the
picklescan corpus); every payload would create a canary file, and every test checks after each
command that the canary does not exist. ``verify --load`` is watched with a spy on ``torch.load``.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import pickletools
import struct
import tarfile
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from frameworks import copy_run
from shared_corpus import CORPUS
from typer.testing import CliRunner

from ckptdoctor.cli import app
from ckptdoctor.model import Problem
from ckptdoctor.readers.files import BytesSample, verify_sample

torch = pytest.importorskip("torch")

PICKLESCAN = CORPUS / "picklescan"
FOLDERS = ("data", "data2")

UNSAFE_CODES = {"CKD401", "CKD403"}
NEVER_CLEAN_CODES = {"CKD205", "CKD207", "CKD403", "CKD401"}


# --- running the CLI outside a function-scoped fixture --------------------------------------------


def _invoke(*args: str | os.PathLike[str]) -> tuple[int, dict[str, Any], str]:
    """``ckptdoctor ARGS`` in-process: (exit code, parsed JSON, stdout + stderr)."""
    result = CliRunner().invoke(app, [str(a) for a in args], env={"NO_COLOR": "1", "COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    text = result.stdout + result.stderr
    assert "Traceback" not in text
    assert "internal error" not in text
    return result.exit_code, json.loads(result.stdout), text


def _verify(*args: str | os.PathLike[str]) -> tuple[int, dict[str, Any]]:
    code, report, _ = _invoke("verify", "--json", *args)
    return code, report


def _by_name(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for finding in report["findings"]:
        if finding["path"]:
            found.setdefault(Path(finding["path"]).name, []).append(finding)
    return found


def _for_path(report: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """Findings about one file (paths in the report are as given, joined below)."""
    return [f for f in report["findings"] if f["path"] and Path(f["path"]).resolve() == path.resolve()]


def _file_entries(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        f
        for run in report["runs"]
        for group in (
            *(c["files"] for c in run["checkpoints"]),
            run["loose_files"],
            run["extra_files"],
        )
        for f in group
    ]


def _entry(report: dict[str, Any], path: Path) -> dict[str, Any]:
    (entry,) = [f for f in _file_entries(report) if Path(f["path"]).resolve() == path.resolve()]
    return entry


def _flagged_unsafe(findings: list[dict[str, Any]]) -> bool:
    return any(f["code"] in UNSAFE_CODES and f["severity"] == "error" for f in findings)


# --- 1. the picklescan corpus, held to the labels of ../shared/corpus/README.md -------------------

EXPLICIT_UNSAFE = {
    "sys_module_override_sploit.pkl", "pytorch_magic_bypass.pt", "cloudpickle_codeinjection.pkl",
    "types_CodeType.pkl", "io_FileIO.pkl", "logging_FileHandler.pkl", "urllib_request_urlopen.pkl",
    "dns_exfiltration.npy",
}  # fmt: skip
NOT_UNSAFE = {
    "benign0_v0.pkl", "benign0_v3.pkl", "benign0_v4.pkl", "new_pytorch_model.bin", "pytorch_model.bin",
    "int_array.npy", "int_arrays.npz", "int_arrays_compressed.npz",
}  # fmt: skip
NEVER_CLEAN = {
    "bad_pytorch.pt", "not_a_pickle.bin", "broken_model.pkl", "benign_password_protected.zip",
    "malicious1.7z", "object_array.npy", "object_arrays.npz", "object_arrays_compressed.npz",
}  # fmt: skip
"""Listed by name in the README; ``malicious1.7z`` is listed here although it matches
``malicious*``: a 7z cannot be opened statically, so what it must get is a finding that says so."""


def label(name: str) -> str | None:
    if name in NEVER_CLEAN:
        return "never-clean"
    if name in NOT_UNSAFE:
        return "not-unsafe"
    if name.startswith(("malicious", "GHSA-")) or "exploit" in name or name in EXPLICIT_UNSAFE:
        return "unsafe"
    return None


def _corpus_files(folder: str) -> list[str]:
    path = PICKLESCAN / folder
    return sorted(p.name for p in path.iterdir() if p.is_file()) if path.is_dir() else []


def _cases(wanted: str) -> list[Any]:
    cases = [
        pytest.param(folder, name, id=f"{folder}/{name}") for folder in FOLDERS for name in _corpus_files(folder) if label(name) == wanted
    ]
    return cases or [pytest.param("data", "(corpus absent)", id="corpus-absent")]


@pytest.fixture(scope="module")
def picklescan_reports() -> dict[str, tuple[int, dict[str, Any]]]:
    """One ``verify --json`` per corpus folder."""
    if not PICKLESCAN.is_dir():
        pytest.skip("../shared/corpus is absent (a user's own clone has none; CI always has it)")
    return {folder: _verify(PICKLESCAN.resolve() / folder) for folder in FOLDERS}


@pytest.mark.parametrize("folder", FOLDERS)
def test_picklescan_every_file_is_labelled(corpus: Path, folder: str) -> None:
    """A new corpus file cannot slip by without a verdict to hold it to."""
    names = _corpus_files(folder)
    assert names
    assert [n for n in names if label(n) is None] == []


@pytest.mark.parametrize("folder", FOLDERS)
def test_picklescan_every_file_is_reported_and_exit_is_1(corpus: Path, picklescan_reports, folder: str) -> None:
    code, report = picklescan_reports[folder]
    assert code == 1
    reported = sorted(Path(f["path"]).name for f in _file_entries(report))
    assert reported == _corpus_files(folder), "a file was skipped silently (or reported twice)"
    assert report["unrecognised"] == []
    assert {run["layout"] for run in report["runs"]} == {"unknown"}


@pytest.mark.parametrize(("folder", "name"), _cases("unsafe"))
def test_picklescan_malicious_is_flagged_unsafe(corpus: Path, picklescan_reports, folder: str, name: str) -> None:
    findings = _by_name(picklescan_reports[folder][1]).get(name, [])
    assert _flagged_unsafe(findings), f"{name}: {[(f['code'], f['severity']) for f in findings]}"


@pytest.mark.parametrize(("folder", "name"), _cases("not-unsafe"))
def test_picklescan_benign_is_not_flagged_unsafe(corpus: Path, picklescan_reports, folder: str, name: str) -> None:
    findings = _by_name(picklescan_reports[folder][1]).get(name, [])
    assert [f["code"] for f in findings if f["code"] in UNSAFE_CODES] == [], findings


@pytest.mark.parametrize(("folder", "name"), _cases("never-clean"))
def test_picklescan_unanalysable_is_never_clean(corpus: Path, picklescan_reports, folder: str, name: str) -> None:
    findings = _by_name(picklescan_reports[folder][1]).get(name, [])
    assert {f["code"] for f in findings} & NEVER_CLEAN_CODES, f"{name} was called clean: {findings}"
    assert any(f["severity"] == "error" for f in findings if f["code"] in NEVER_CLEAN_CODES)


# --- 2. canary payloads built from raw opcodes ----------------------------------------------------


def _u(text: str) -> bytes:
    """BINUNICODE."""
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _touch(canary: Path) -> str:
    return f"touch {canary}"


def posix_system(canary: Path) -> bytes:
    """What a torch-style malicious ``data.pkl`` looks like (protocol 2, memoised)."""
    return b"\x80\x02cposix\nsystem\nq\x00" + _u(_touch(canary)) + b"\x85q\x01Rq\x02."


def os_system_proto0(canary: Path) -> bytes:
    return b"cos\nsystem\n(V" + _touch(canary).encode() + b"\ntR."


def builtins_eval(canary: Path) -> bytes:
    expr = f"open({str(canary)!r}, 'w')"
    return b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93" + _u(expr) + b"\x85R."


def subprocess_run(canary: Path) -> bytes:
    return b"\x80\x02csubprocess\nrun\n](" + _u("touch") + _u(str(canary)) + b"e\x85R."


def memo_binput_shuffle(canary: Path) -> bytes:
    """``os``/``system`` stored in the memo between decoys, fetched back for STACK_GLOBAL."""
    return (
        b"\x80\x04" + _u("os") + b"q\x05" + b"0" + _u("system") + b"q\x06" + b"0"
        + _u("torch") + b"q\x01" + b"0" + _u("FloatStorage") + b"q\x02" + b"0"
        + b"h\x05h\x06\x93" + _u(_touch(canary)) + b"\x85R."
    )  # fmt: skip


def memo_memoize_shuffle(canary: Path) -> bytes:
    """The same with MEMOIZE (memo slots 0, 1, 2) and a decoy first."""
    return (
        b"\x80\x04" + _u("torch") + b"\x94" + b"0" + _u("posix") + b"\x94" + b"0" + _u("system") + b"\x94" + b"0"
        + b"h\x01h\x02\x93" + _u(_touch(canary)) + b"\x85R."
    )  # fmt: skip


def dotted_eval_call(canary: Path) -> bytes:
    """``builtins`` + ``eval.__call__``: protocol 4's find_class walks the attribute chain."""
    expr = f"open({str(canary)!r}, 'w')"
    return b"\x80\x04" + _u("builtins") + _u("eval.__call__") + b"\x93" + _u(expr) + b"\x85R."


def frame_divergence(canary: Path) -> bytes:
    """A FRAME of 3 bytes ends inside BINBYTES's length field. ``pickletools.genops`` reads one
    bytes literal that swallows ``GLOBAL os system … REDUCE``; the C unpickler reading a file-like
    object (torch's BytesIO) refills past the frame, reads a zero length and runs the hidden ops."""
    hidden = b"cos\nsystem\n(V" + _touch(canary).encode() + b"\ntR."
    return b"\x80\x04\x95" + struct.pack("<Q", 3) + b"B" + struct.pack("<H", 2 + len(hidden)) + b"\x00" * 4 + hidden + b"."


def inst_form(canary: Path) -> bytes:
    return b"(V" + _touch(canary).encode() + b"\nios\nsystem\n."


def obj_form(canary: Path) -> bytes:
    return b"\x80\x02(cos\nsystem\n" + _u(_touch(canary)) + b"o."


def ext1_code(canary: Path) -> bytes:
    """EXT1: the callable comes from copyreg's extension registry, never named in the pickle."""
    return b"\x80\x02\x82\x01" + _u(_touch(canary)) + b"\x85R."


# torch archives, rewritten with zipfile (members in torch.save's order, the ``archive/`` prefix kept)


def _benign_zip() -> bytes:
    buffer = io.BytesIO()
    torch.save(
        {"weight": torch.arange(6, dtype=torch.float32).reshape(2, 3), "bias": torch.ones(2)},
        buffer,
    )
    return buffer.getvalue()


def _members(archive: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(archive)) as opened:  # our own benign torch.save output
        return [(info.filename, opened.read(info)) for info in opened.infolist()]


def _zip(members: list[tuple[str, bytes]], deflate: frozenset[str] = frozenset()) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Duplicate name": on purpose
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
            for name, data in members:
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                method = zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED
                archive.writestr(info, data, compress_type=method)
    return buffer.getvalue()


def _replaced(evil: bytes, name: str = "archive/data.pkl") -> list[tuple[str, bytes]]:
    return [(n, evil if n == name else data) for n, data in _members(_benign_zip())]


def _central_entries(archive: bytes) -> list[tuple[int, str]]:
    """(offset of each central directory entry, its name)."""
    end = archive.rindex(b"PK\x05\x06")
    count, _, offset = struct.unpack_from("<HII", archive, end + 10)
    entries = []
    for _ in range(count):
        assert archive[offset : offset + 4] == b"PK\x01\x02"
        name_length, extra_length, comment_length = struct.unpack_from("<HHH", archive, offset + 28)
        entries.append((offset, archive[offset + 46 : offset + 46 + name_length].decode()))
        offset += 46 + name_length + extra_length + comment_length
    return entries


def _local_offset(archive: bytes, name: str) -> int:
    (offset,) = [struct.unpack_from("<I", archive, at + 42)[0] for at, n in _central_entries(archive) if n == name]
    assert archive[offset : offset + 4] == b"PK\x03\x04"
    return offset


def _patched(archive: bytes, name: str, *, flags: int = 0, crc_xor: int = 0, local_name: str | None = None) -> bytes:
    data = bytearray(archive)
    local = _local_offset(archive, name)
    for at, entry_name in _central_entries(archive):
        if entry_name == name:
            struct.pack_into("<H", data, at + 8, struct.unpack_from("<H", data, at + 8)[0] | flags)
            struct.pack_into("<I", data, at + 16, struct.unpack_from("<I", data, at + 16)[0] ^ crc_xor)
    struct.pack_into("<H", data, local + 6, struct.unpack_from("<H", data, local + 6)[0] | flags)
    if local_name is not None:
        assert len(local_name) == len(name)
        data[local + 30 : local + 30 + len(name)] = local_name.encode()
    return bytes(data)


def zip_data_pkl_replaced(canary: Path) -> bytes:
    return _zip(_replaced(posix_system(canary)))


def zip_duplicate_member(canary: Path) -> bytes:
    """The benign data.pkl first, a malicious copy last (the copy loaders take)."""
    return _zip([*_members(_benign_zip()), ("archive/data.pkl", posix_system(canary))])


def zip_deflated_member(canary: Path) -> bytes:
    return _zip(_replaced(posix_system(canary)), deflate=frozenset({"archive/data.pkl"}))


def zip_name_mismatch(canary: Path) -> bytes:
    """The central directory says archive/data.pkl (what torch reads), the local header datap.kl."""
    return _patched(zip_data_pkl_replaced(canary), "archive/data.pkl", local_name="archive/datap.kl")


def zip_flag_0x1(canary: Path) -> bytes:
    """Marked encrypted, stored in the clear: torch ignores the bit, zipfile refuses the member."""
    return _patched(zip_data_pkl_replaced(canary), "archive/data.pkl", flags=0x1)


def zip_two_prefixes_evil_first(canary: Path) -> bytes:
    """torch takes its prefix from the first member: this one would run."""
    return _zip([("evil/data.pkl", posix_system(canary)), *_members(_benign_zip())])


def zip_two_prefixes_evil_last(canary: Path) -> bytes:
    return _zip([*_members(_benign_zip()), ("evil/data.pkl", posix_system(canary))])


def zip_frame_divergence(canary: Path) -> bytes:
    return _zip(_replaced(frame_divergence(canary)))


def _pickle_ends(data: bytes, count: int) -> list[int]:
    """Offsets just past each of the first ``count`` back-to-back pickles (parsed, never run)."""
    stream = io.BytesIO(data)
    ends = []
    for _ in range(count):
        for opcode, _, _ in pickletools.genops(stream):
            if opcode.name == "STOP":
                break
        ends.append(stream.tell())
    return ends


def _legacy_bytes() -> bytes:
    buffer = io.BytesIO()
    torch.save({"weight": torch.ones(2, 3)}, buffer, _use_new_zipfile_serialization=False)
    return buffer.getvalue()


def legacy_object_replaced(canary: Path) -> bytes:
    """torch's legacy format: magic, protocol, sys_info, *the object*, storage keys, storages."""
    data = _legacy_bytes()
    ends = _pickle_ends(data, 4)
    return data[: ends[2]] + posix_system(canary) + data[ends[3] :]


def legacy_storage_keys_replaced(canary: Path) -> bytes:
    """The fifth pickle (storage keys) is unpickled by torch's legacy loader too."""
    data = _legacy_bytes()
    ends = _pickle_ends(data, 5)
    return data[: ends[3]] + posix_system(canary) + data[ends[4] :]


# torch's oldest (tar) format: torch.load unpickles the ``storages`` member first, then ``tensors``,
# then ``pickle`` (torch.serialization._legacy_load.legacy_load); ``sys_info`` is never unpickled


def _tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _tar_members() -> dict[str, bytes]:
    """A benign tar-format file holding no storages (plain values, dumped, never loaded)."""
    return {
        "sys_info": pickle.dumps({"protocol_version": 1001, "little_endian": True}, 2),
        "pickle": pickle.dumps({"epoch": 3}, 2),
        "storages": pickle.dumps(0, 2) + pickle.dumps([], 2),
        "tensors": pickle.dumps(0, 2),
    }


def _tar_with(member: str, canary: Path) -> bytes:
    members = _tar_members()
    members[member] = posix_system(canary) + members[member]
    return _tar(members)


def tar_pickle_member(canary: Path) -> bytes:
    return _tar_with("pickle", canary)


def tar_storages_member(canary: Path) -> bytes:
    return _tar_with("storages", canary)


def tar_tensors_member(canary: Path) -> bytes:
    return _tar_with("tensors", canary)


def tar_header_pickle_polyglot(canary: Path) -> bytes:
    """A tar header (``ustar`` at 257) with a bad checksum whose first bytes are a pickle. tarfile
    raises ReadError, and torch.load then falls back to the legacy loader, which unpickles the
    file's first bytes as the magic number: the payload runs."""
    evil = posix_system(canary)
    assert len(evil) < 257
    return (evil.ljust(257, b"\0") + b"ustar\x0000").ljust(512, b"\0") + bytes(1024)


PAYLOADS: dict[str, tuple[str, Callable[[Path], bytes]]] = {
    "os_system_proto0": ("payload.pkl", os_system_proto0),
    "posix_system_proto2": ("payload.pkl", posix_system),
    "builtins_eval": ("payload.pkl", builtins_eval),
    "subprocess_run": ("payload.pkl", subprocess_run),
    "memo_binput_shuffle": ("payload.pkl", memo_binput_shuffle),
    "memo_memoize_shuffle": ("payload.pkl", memo_memoize_shuffle),
    "dotted_eval_call": ("payload.pkl", dotted_eval_call),
    "frame_divergence": ("payload.pkl", frame_divergence),
    "inst_form": ("payload.pkl", inst_form),
    "obj_form": ("payload.pkl", obj_form),
    "ext1_code": ("payload.pkl", ext1_code),
    "zip_data_pkl_replaced": ("model.pt", zip_data_pkl_replaced),
    "zip_duplicate_member": ("model.pt", zip_duplicate_member),
    "zip_deflated_member": ("model.pt", zip_deflated_member),
    "zip_name_mismatch": ("model.pt", zip_name_mismatch),
    "zip_flag_0x1": ("model.pt", zip_flag_0x1),
    "zip_two_prefixes_evil_first": ("model.pt", zip_two_prefixes_evil_first),
    "zip_two_prefixes_evil_last": ("model.pt", zip_two_prefixes_evil_last),
    "zip_frame_divergence": ("model.pt", zip_frame_divergence),
    "legacy_object_replaced": ("model.pt", legacy_object_replaced),
    "legacy_storage_keys_replaced": ("model.pt", legacy_storage_keys_replaced),
    "tar_pickle_member": ("model.tar", tar_pickle_member),
    "tar_storages_member": ("model.tar", tar_storages_member),
    "tar_tensors_member": ("model.tar", tar_tensors_member),
    "tar_header_pickle_polyglot": ("model.pt", tar_header_pickle_polyglot),
}


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    path = tmp_path / "CANARY"
    yield path
    assert not path.exists(), "a payload ran"


def _write(folder: Path, name: str, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("case", list(PAYLOADS))
def test_payload_is_flagged_and_nothing_runs(cli, tmp_path: Path, canary: Path, case: str) -> None:
    name, build = PAYLOADS[case]
    path = _write(tmp_path / "case", name, build(canary))
    result = cli("verify", "--json", path)
    assert not canary.exists()
    findings = _for_path(result.json, path)
    assert _flagged_unsafe(findings), [(f["code"], f["severity"], f["message"]) for f in findings]
    assert result.exit_code == 1
    human = cli("verify", path)
    assert not canary.exists()
    assert human.exit_code == 1


@pytest.mark.parametrize("case", list(PAYLOADS))
def test_payload_is_unsafe_through_the_pure_api(canary: Path, case: str) -> None:
    name, build = PAYLOADS[case]
    report = verify_sample(BytesSample(build(canary)), name, deep=0)
    problems = {issue.problem for issue in report.issues}
    assert problems & {Problem.UNSAFE_PICKLE, Problem.ZIP_ANOMALY}, report.issues
    assert not canary.exists()


ZIP_TRICKS = {
    "zip_duplicate_member": "stored twice",
    "zip_deflated_member": "compressed",
    "zip_name_mismatch": "local header",
    "zip_flag_0x1": "encrypted",
    "zip_two_prefixes_evil_last": "outside",
}


@pytest.mark.parametrize("case", list(ZIP_TRICKS))
def test_zip_tricks_are_zip_anomalies(cli, tmp_path: Path, canary: Path, case: str) -> None:
    """The container trick itself is reported (CKD403), not only the pickle it hides."""
    name, build = PAYLOADS[case]
    path = _write(tmp_path / "case", name, build(canary))
    findings = _for_path(cli("verify", "--json", path).json, path)
    anomalies = [f for f in findings if f["code"] == "CKD403"]
    assert anomalies and all(f["severity"] == "error" for f in anomalies), findings
    assert any(ZIP_TRICKS[case] in f["message"] for f in anomalies), anomalies


def test_frame_divergence_hides_its_global_from_genops(canary: Path) -> None:
    """The fixture is the real trick: a genops-based scanner sees no import at all."""
    ops = [op.name for op, _, _ in pickletools.genops(frame_divergence(canary))]
    assert ops == ["PROTO", "FRAME", "BINBYTES", "STOP"]


def test_legacy_payload_keeps_the_legacy_header(canary: Path) -> None:
    data = legacy_object_replaced(canary)
    benign = _legacy_bytes()
    assert data[: _pickle_ends(benign, 3)[2]] == benign[: _pickle_ends(benign, 3)[2]]
    assert verify_sample(BytesSample(benign), "model.pt").format == "torch-legacy"
    assert verify_sample(BytesSample(data), "model.pt").format == "torch-legacy"


def test_tar_control_is_only_legacy(tmp_path: Path) -> None:
    """The control for the tar payloads: the same archive without them is only obsolete."""
    report = verify_sample(BytesSample(_tar(_tar_members())), "model.tar", deep=0)
    assert report.format == "torch-tar"
    assert [issue.problem for issue in report.issues] == [Problem.LEGACY]


def test_polyglot_is_a_real_tar_failure(canary: Path) -> None:
    """The fixture is the real trick: tarfile refuses it with the error torch catches."""
    data = io.BytesIO(tar_header_pickle_polyglot(canary))
    with (
        pytest.raises(tarfile.ReadError),
        tarfile.open(fileobj=data, mode="r:", format=tarfile.PAX_FORMAT),
    ):
        pass
    ops = [op.name for op, _, _ in pickletools.genops(tar_header_pickle_polyglot(canary))]
    assert ops[:2] == ["PROTO", "GLOBAL"]


@pytest.mark.parametrize("name", ["model.weights", "weights"])
def test_unsafe_archive_under_an_unusual_name_in_a_folder(cli, tmp_path: Path, canary: Path, name: str) -> None:
    """torch.load takes any file name; a folder verify must not pass over a torch archive whose
    name it does not know (integrity reference §12 row 3, §15.1: sniff by content)."""
    path = _write(tmp_path / "downloads", name, zip_data_pkl_replaced(canary))
    named = cli("verify", "--json", path)
    assert _flagged_unsafe(_for_path(named.json, path))
    result = cli("verify", "--json", path.parent)
    assert not canary.exists()
    assert _flagged_unsafe(_for_path(result.json, path)), result.stdout + result.stderr
    assert result.exit_code == 1


@pytest.fixture
def load_spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path ``torch.load`` is asked for during the test (and it still loads benign files)."""
    calls: list[str] = []
    real = torch.load

    def spy(f: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(str(f))
        return real(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    return calls


def test_deep_and_load_never_run_a_malicious_zip(cli, tmp_path: Path, canary: Path, load_spy: list[str]) -> None:
    path = _write(tmp_path / "case", "model.pt", zip_data_pkl_replaced(canary))
    for flags in (("--deep",), ("--load",), ("--deep", "--load")):
        result = cli("verify", "--json", *flags, path)
        assert not canary.exists(), flags
        assert _flagged_unsafe(_for_path(result.json, path)), flags
        assert result.exit_code == 1
        assert not any("loading it fails" in f["message"] for f in result.json["findings"])
    assert not any(Path(call).name == "model.pt" for call in load_spy), load_spy


def test_load_spy_sees_a_benign_file(cli, tmp_path: Path, load_spy: list[str]) -> None:
    """The control for the test above: ``--load`` does go through torch.load for a clean file."""
    path = _write(tmp_path / "case", "model.pt", _benign_zip())
    result = cli("verify", "--json", "--load", path)
    assert result.exit_code == 0, result.json["findings"]
    assert [Path(call).name for call in load_spy] == ["model.pt"]


# --- 3. CRC ----------------------------------------------------------------------------------------


def test_altered_crc_does_not_hide_an_unsafe_pickle(cli, tmp_path: Path, canary: Path) -> None:
    """modelscan skips such a file; torch still loads it (integrity reference §12)."""
    tampered = _patched(zip_data_pkl_replaced(canary), "archive/data.pkl", crc_xor=0xDEADBEEF)
    path = _write(tmp_path / "case", "model.pt", tampered)
    for flags in ((), ("--deep",)):
        result = cli("verify", "--json", *flags, path)
        assert not canary.exists()
        findings = _for_path(result.json, path)
        assert any(f["code"] == "CKD401" and f["severity"] == "error" for f in findings), findings
        assert result.exit_code == 1


def _flipped_tensor_bytes() -> bytes:
    archive = _benign_zip()
    data = bytearray(archive)
    start = _local_offset(archive, "archive/data/0")
    name_length, extra_length = struct.unpack_from("<HH", data, start + 26)
    at = start + 30 + name_length + extra_length
    data[at] ^= 0x40  # 0.0 → 2.0: still finite, only the CRC can tell
    return bytes(data)


def test_flipped_tensor_bytes_are_crc_mismatch_only_with_deep(cli, tmp_path: Path) -> None:
    path = _write(tmp_path / "case", "model.pt", _flipped_tensor_bytes())
    plain = cli("verify", "--json", path)
    assert "CKD206" not in plain.codes()
    assert plain.exit_code == 0, plain.json["findings"]
    deep = cli("verify", "--json", "--deep", path)
    crc = [f for f in _for_path(deep.json, path) if f["code"] == "CKD206"]
    assert crc and "archive/data/0" in crc[0]["message"], deep.json["findings"]
    assert not {"CKD401", "CKD403", "CKD304"} & set(deep.codes())
    assert deep.exit_code == 1


def test_untouched_archive_passes_deep(cli, tmp_path: Path) -> None:
    path = _write(tmp_path / "case", "model.pt", _benign_zip())
    result = cli("verify", "--json", "--deep", path)
    assert result.json["findings"] == []
    assert result.exit_code == 0


# --- 4. benign checkpoints are not flagged ----------------------------------------------------------


def _model() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def _adam_state() -> dict[str, Any]:
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    return optimizer.state_dict()


def _scheduler_state() -> dict[str, Any]:
    optimizer = torch.optim.SGD(_model().parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    optimizer.step()
    scheduler.step()
    return scheduler.state_dict()


def _bundled() -> dict[str, Any]:
    model = _model()
    return {"model": model.state_dict(), "optimizer": _adam_state(), "epoch": 3}


def _shared_views() -> dict[str, Any]:
    base = torch.arange(24, dtype=torch.float32)
    return {
        "base": base,
        "view": base.view(4, 6),
        "slice": base[5:17],
        "transposed": base.view(4, 6).t(),
        "again": base,
    }


BENIGN: dict[str, Callable[[], Any]] = {
    "state_dict": lambda: _model().state_dict(),
    "adam_state_dict": _adam_state,
    "lr_scheduler_state_dict": _scheduler_state,
    "bundled": _bundled,
    "parameter": lambda: torch.nn.Parameter(torch.randn(3, 3)),
    "half_precision_and_int8": lambda: {
        "bf16": torch.randn(4, dtype=torch.bfloat16),
        "f16": torch.randn(4, dtype=torch.float16),
        "i8": torch.arange(-4, 4, dtype=torch.int8),
    },
    "shared_storages_and_views": _shared_views,
}


def _assert_not_flagged(result: Any, path: Path) -> None:
    findings = _for_path(result.json, path)
    assert [f["code"] for f in findings if f["code"] in UNSAFE_CODES] == [], findings
    assert [f for f in result.json["findings"] if f["severity"] == "error"] == []
    assert {f["code"] for f in result.json["findings"] if f["severity"] == "warning"} <= {"CKD402"}
    assert result.exit_code == 0


@pytest.mark.parametrize("case", list(BENIGN))
def test_real_torch_save_is_not_flagged(cli, tmp_path: Path, case: str) -> None:
    path = tmp_path / "case" / "model.pt"
    path.parent.mkdir()
    torch.save(BENIGN[case](), path)
    result = cli("verify", "--json", path)
    _assert_not_flagged(result, path)
    assert result.json["findings"] == []  # all of these are weights-only: nothing at all to say
    deep = cli("verify", "--json", "--deep", path)
    assert deep.json["findings"] == []


@pytest.mark.parametrize("case", ["state_dict", "bundled", "shared_storages_and_views"])
def test_real_legacy_torch_save_is_only_legacy(cli, tmp_path: Path, case: str) -> None:
    path = tmp_path / "case" / "model.pt"
    path.parent.mkdir()
    torch.save(BENIGN[case](), path, _use_new_zipfile_serialization=False)
    result = cli("verify", "--json", path)
    _assert_not_flagged(result, path)
    assert [(f["code"], f["severity"]) for f in result.json["findings"]] == [("CKD210", "info")]


@pytest.mark.parametrize("case", ["state_dict", "bundled"])
def test_real_torch_save_passes_load(cli, tmp_path: Path, case: str) -> None:
    path = tmp_path / "case" / "model.pt"
    path.parent.mkdir()
    torch.save(BENIGN[case](), path)
    result = cli("verify", "--json", "--load", path)
    _assert_not_flagged(result, path)


# real training frameworks (each run once per module)

SELF_LOADED = {"rng_state.pth", "training_args.bin", "random_states_0.pkl"}
"""Files the framework that wrote them loads itself: CKD402 there is info, not a warning."""


@pytest.fixture(scope="module")
def hf_run(hf_trained: Path, tmp_path_factory) -> tuple[Path, int, dict[str, Any]]:
    """The shared real Trainer run (steps 2, 4 and 6), and ``verify --json`` of its output_dir."""
    output = copy_run(hf_trained, tmp_path_factory.mktemp("hf") / "out")
    return (output, *_verify(output))


HF_FILES = [
    "optimizer.pt",
    "scheduler.pt",
    "rng_state.pth",
    "training_args.bin",
    "model.safetensors",
]


@pytest.mark.parametrize("name", HF_FILES)
@pytest.mark.parametrize("step", [2, 6])
def test_hf_trainer_file_is_not_flagged_unsafe(hf_run, name: str, step: int) -> None:
    output, _, report = hf_run
    path = output / f"checkpoint-{step}" / name
    assert path.is_file()
    _entry(report, path)  # verify read it
    findings = _for_path(report, path)
    assert [f for f in findings if f["code"] in UNSAFE_CODES] == [], findings
    assert [f for f in findings if f["severity"] == "error"] == [], findings


@pytest.mark.parametrize("name", ["rng_state.pth", "training_args.bin"])
def test_hf_trainer_self_loaded_file_is_at_most_info(hf_run, name: str) -> None:
    output, _, report = hf_run
    findings = _for_path(report, output / "checkpoint-6" / name)
    assert [(f["code"], f["severity"]) for f in findings if f["severity"] != "info"] == [], findings


def test_hf_trainer_run_verifies_clean(hf_run) -> None:
    _, code, report = hf_run
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    assert code == 0
    assert {run["layout"] for run in report["runs"]} == {"hf-trainer"}


@pytest.fixture(scope="module")
def accelerate_state(tmp_path_factory) -> dict[str, tuple[Path, int, dict[str, Any]]]:
    """Two real ``save_state`` calls: automatic naming (``checkpoints/checkpoint_0``) and an explicit folder."""
    accelerate = pytest.importorskip("accelerate")
    from accelerate.utils import ProjectConfiguration

    project = tmp_path_factory.mktemp("acc")
    config = ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True)
    accelerator = accelerate.Accelerator(project_config=config, cpu=True)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    accelerator.backward(model(torch.randn(2, 4)).sum())
    optimizer.step()
    scheduler.step()
    accelerator.save_state()
    explicit = tmp_path_factory.mktemp("acc_explicit") / "my_checkpoint"
    accelerator.project_configuration.automatic_checkpoint_naming = False  # else output_dir is ignored
    accelerator.save_state(str(explicit))
    automatic = project / "checkpoints" / "checkpoint_0"
    return {
        "automatic": (automatic, *_verify(project / "checkpoints")),
        "explicit": (explicit, *_verify(explicit)),
    }


@pytest.mark.parametrize("name", ["random_states_0.pkl", "optimizer.bin", "scheduler.bin", "model.safetensors"])
@pytest.mark.parametrize("how", ["automatic", "explicit"])
def test_accelerate_file_is_not_flagged_unsafe(accelerate_state, how: str, name: str) -> None:
    folder, _, report = accelerate_state[how]
    path = folder / name
    assert path.is_file()
    _entry(report, path)
    findings = _for_path(report, path)
    assert [f for f in findings if f["code"] in UNSAFE_CODES] == [], findings
    assert [f for f in findings if f["severity"] == "error"] == [], findings


def test_accelerate_random_states_is_at_most_info(accelerate_state) -> None:
    folder, code, report = accelerate_state["automatic"]
    assert {run["layout"] for run in report["runs"]} == {"accelerate"}
    findings = _for_path(report, folder / "random_states_0.pkl")
    assert [(f["code"], f["severity"]) for f in findings if f["severity"] != "info"] == [], findings
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    assert code == 0


@pytest.fixture(scope="module")
def lightning_run(lightning_saved: dict[str, Path], tmp_path_factory) -> tuple[Path, int, dict[str, Any]]:
    """The shared real fit whose ``last.ckpt`` is a copy, and ``verify --json`` of it."""
    root = copy_run(lightning_saved["copy"], tmp_path_factory.mktemp("pl") / "checkpoints")
    return (root, *_verify(root))


def test_lightning_ckpt_is_not_flagged_unsafe(lightning_run) -> None:
    root, code, report = lightning_run
    saved = sorted(root.rglob("*.ckpt"))
    assert len(saved) == 4  # three epochs and last.ckpt
    for ckpt in saved:
        entry = _entry(report, ckpt)
        assert "hyper_parameters" in entry.get("keys", [])
        findings = _for_path(report, ckpt)
        assert [f for f in findings if f["code"] in UNSAFE_CODES] == [], findings
        assert [f for f in findings if f["severity"] == "error"] == [], findings
    assert code == 0


# --- 5. verify lists tensors ---------------------------------------------------------------------


def test_verify_lists_tensors_per_file(cli, tmp_path: Path) -> None:
    """DESIGN §3.3: verify adds per file "tensors" (count), "tensor_bytes", "dtypes" and "devices"."""
    path = tmp_path / "case" / "model.pt"
    path.parent.mkdir()
    torch.save(
        {
            "w": torch.zeros(3, 4),
            "b": torch.zeros(4, dtype=torch.bfloat16),
            "i": torch.zeros(5, dtype=torch.int8),
        },
        path,
    )
    result = cli("verify", "--json", path)
    assert result.exit_code == 0
    entry = _entry(result.json, path)
    assert entry["format"] == "torch-zip"
    assert entry["tensors"] == 3
    assert entry["tensor_bytes"] == 3 * 4 * 4 + 4 * 2 + 5
    assert entry["dtypes"] == ["bfloat16", "float32", "int8"]
    assert entry["devices"] == ["cpu"]


def test_verify_sample_lists_tensors(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    torch.save(_model().state_dict(), buffer)
    report = verify_sample(BytesSample(buffer.getvalue()), "model.pt", deep=0)
    assert report.format == "torch-zip"
    assert report.issues == ()
    assert {(t.name, t.dtype, t.shape, t.nbytes, t.device) for t in report.tensors} == {
        ("0.weight", "float32", (3, 4), 48, "cpu"),
        ("0.bias", "float32", (3,), 12, "cpu"),
        ("2.weight", "float32", (2, 3), 24, "cpu"),
        ("2.bias", "float32", (2,), 8, "cpu"),
    }
    assert report.keys == ("0.weight", "0.bias", "2.weight", "2.bias")


def test_inspect_does_not_list_tensors(cli, tmp_path: Path) -> None:
    """Only verify reads files whole: inspect's entries carry no tensor fields."""
    path = tmp_path / "case" / "model.pt"
    path.parent.mkdir()
    torch.save(_model().state_dict(), path)
    entry = _entry(cli("inspect", "--json", path).json, path)
    assert "tensors" not in entry


# --- what an unsafe pickle rebuilds: the reader's report, for a layout to vouch for or not -------------


def _rebuilt(body: bytes) -> object:
    from ckptdoctor.readers.pickle_safety import judge
    from ckptdoctor.readers.unpickler import walk

    (unsafe,) = [i for i in judge(walk(b"\x80\x02" + body + b"."), "the pickle") if i.problem is Problem.UNSAFE_PICKLE]
    return unsafe.rebuilt


_CLS = b"cpkg.mod\nThing\n"
_ENUM = b"cpkg.mod\nStage\n"


@pytest.mark.parametrize(
    ("body", "instances", "values", "methods"),
    [
        (_CLS + b")\x81}(X\x01\x00\x00\x00aK\x01ub", {"pkg.mod.Thing"}, set(), set()),  # Thing.__new__(Thing), fields set
        (b"ccopyreg\n_reconstructor\n(" + _CLS + b"c__builtin__\nobject\nNtR", {"pkg.mod.Thing"}, set(), set()),
        (_ENUM + b"K\x02\x85R", set(), {"pkg.mod.Stage"}, set()),  # Stage(2)
        (b"]q\x00(" + _CLS + b"q\x01)\x81h\x01)\x81e", {"pkg.mod.Thing"}, set(), set()),  # twice, through the memo
        (b"c__builtin__\ngetattr\n" + _CLS + b"X\x03\x00\x00\x00min\x86R", set(), set(), {"pkg.mod.Thing.min"}),
    ],
)
def test_a_pickle_that_only_rebuilds_plain_objects_says_which(body, instances, values, methods):
    found = _rebuilt(body)
    assert found is not None
    assert (set(found.instances), set(found.values), set(found.methods)) == (instances, values, methods)


@pytest.mark.parametrize(
    "body",
    [
        _CLS + b"]\x85R",  # called with a list
        _CLS + b"X\x01\x00\x00\x00a\x85\x81",  # NEWOBJ with an argument
        _CLS + b"}(X\x01\x00\x00\x00aK\x01ub",  # BUILD on the class itself
        _CLS + b")\x81X\x01\x00\x00\x00a\x85R",  # its object called
        _ENUM + b"K\x02\x85R}(X\x07\x00\x00\x00_value_K\x03ub",  # an enum member given fields
        b"]q\x00(" + _CLS + b"e",  # the class itself kept as a value
        b"c__builtin__\ngetattr\n" + _CLS + b"X\x03\x00\x00\x00min\x86R)R",  # a looked-up method called
        b"]q\x00(" + _CLS + b")\x81\x8c\x02os\x8c\x06system\x93e",  # a hidden import beside it
    ],
)
def test_a_pickle_that_does_more_with_a_class_is_not_plain(body):
    """Nothing a framework vouches for as plain objects covers it: only a user's declaration (as
    torch's ``add_safe_globals``) of what it uses otherwise could (``Rebuilt.other``)."""
    found = _rebuilt(body)
    assert found is None or not found.plain


@pytest.mark.parametrize(
    "body",
    [
        _CLS + b"X\x01\x00\x00\x00a\x85R",  # a class called with one literal, as an enum's member is
        b"]q\x00(" + _CLS + b")\x81cos\nsystem\nX\x04\x00\x00\x00true\x85Re",  # os.system("true") beside a plain object
    ],
)
def test_a_call_with_one_literal_is_reported_and_no_layout_writes_it(body):
    """The reader cannot tell an enum from a function: it reports the call, and only a layout
    that declares that class among its enums would vouch for it; none declares these."""
    from ckptdoctor.layouts.registry import LAYOUTS

    found = _rebuilt(body)
    assert found is not None and found.values
    assert not any(layout.own_objects.writes(found) for layout in LAYOUTS)


@pytest.mark.parametrize("resume", [False, True], ids=["verify", "verify-resume"])
def test_a_file_renamed_into_the_run_while_it_is_verified_is_never_called_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resume: bool
) -> None:
    """An attack on issue 36: a damaged file renamed after its bytes were read (a save renamed into
    place, or another process) was found by the second listing under its new name, only probed,
    and its checkpoint called complete (exit 0, no tensors read)."""
    from safetensors.torch import save_file

    from ckptdoctor.pipelines import verify as pipeline

    for epoch in (1, 2, 3):
        weights = torch.ones(64)
        weights[5] = float("nan") if epoch == 3 else 1.0
        save_file({"w": weights}, tmp_path / f"model_{epoch}.safetensors")
    read_all = pipeline._read_all

    def then_renamed(*args: Any, **kwargs: Any) -> Any:
        read = read_all(*args, **kwargs)
        if (tmp_path / "model_3.safetensors").exists():
            (tmp_path / "model_3.safetensors").rename(tmp_path / "model_4.safetensors")
        return read

    monkeypatch.setattr(pipeline, "_read_all", then_renamed)
    if resume:  # its JSON is the resume point alone: the newest checkpoint whose files read whole
        code, point, _ = _invoke("verify", "--deep", "--resume", "--json", tmp_path)
        assert code == 0 and point["index"] == 2 and point["resume_path"].endswith("model_2.safetensors"), point
        from safetensors.torch import load_file

        assert bool(torch.isfinite(load_file(point["resume_path"])["w"]).all())  # what the framework loads from it is whole
        return
    code, report = _verify("--deep", tmp_path)
    assert code == 1
    (finding,) = [f for f in report["findings"] if f["path"].endswith("model_4.safetensors") and f["severity"] == "error"]
    assert finding["code"] == "CKD211" and "appeared while the run was being verified" in finding["message"], finding
    (run,) = report["runs"]
    assert {c["index"]: c["status"] for c in run["checkpoints"]}.get(4) != "complete", run["checkpoints"]
