"""Issue 31, items 2, 4 and 5: compressions and archives a loader infers from a file's name.

Composer pipes a ``*.pt.<ext>`` save through the tool of its suffix (``composer/utils/compression.py``,
``_write_checkpoint_file`` and ``download_checkpoint`` in ``composer/utils/checkpoint.py`` at
mosaicml/composer 6405188805a0054b4551ec49e4919c54c971d0e8); Composer cannot be installed here
(every release pins torch < 2.7.1), so ``frameworks.composer_save``/``composer_load`` do what those
functions do. pandas' ``read_pickle`` infers ``.zst``, ``.tar``, ... from the name; NeMo's
``SaveRestoreConnector._tar_open`` opens a ``.nemo`` with ``"r:"`` and then ``"r:gz"``. The live
payloads and the real libraries' benign files are in ``sample_set.py`` (``test_fail_closed.py``).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import built_once
from frameworks import composer_autoresume, composer_load, composer_run
from sample_set import COMPRESSED_BOMBS, build_bombs, verify_measured

from ckptdoctor.pipelines.scan import inspect

pytestmark = pytest.mark.slow  # compression bombs, each held to its time and memory bound

torch = pytest.importorskip("torch")
needs_zstd = pytest.mark.skipif(shutil.which("zstd") is None, reason="Composer compresses with the zstd tool")


class _Payload:
    def __init__(self, canary: Path) -> None:
        self.canary = canary

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.canary}",))


def errors(result) -> set[str]:  # type: ignore[no-untyped-def]
    return {f["code"] for f in result.json["findings"] if f["severity"] == "error"}


@needs_zstd
def test_a_composer_run_of_zstd_saves_is_read_and_resumes_where_it_says(tmp_path, cli, inspect_json):
    """It was "No checkpoints found", exit 0: no layout claimed `*.pt.zst` and no reader opened it."""
    folder = composer_run(tmp_path / "checkpoints", ((1, 4), (2, 8)), compression="zst")
    (run,) = inspect_json(folder).json["runs"]
    assert (run["layout"], run["resume"]["index"]) == ("composer", 8)
    assert [c["index"] for c in run["checkpoints"]] == [4, 8]
    result = cli("verify", "--json", folder)
    assert result.exit_code == 0, result.json["findings"]
    assert {f["code"] for f in result.json["findings"]} == {"CKD402"}  # Composer's own allowed globals, as uncompressed
    resume = cli("inspect", "--resume-path", folder).stdout.strip()
    assert resume == str(folder / "ep2-ba8-rank0.pt.zst")
    assert composer_load(resume)[0] == 8  # Composer's decompress-then-load agrees
    # autoresume with save_latest_filename="latest-rank{rank}.pt.zst" loads the same save
    _, found = inspect([str(folder)])
    (scanned,) = found.runs
    assert "autoresume=True" in scanned.resume_how
    assert os.path.samefile(composer_autoresume(folder, "latest-rank0.pt.zst"), resume)


@needs_zstd
def test_a_payload_in_a_composer_zstd_save_is_unsafe(tmp_path, cli):
    folder = composer_run(tmp_path / "checkpoints", ((1, 4),), compression="zst")
    canary = tmp_path / "canary"
    buffer = io.BytesIO()
    torch.save({"state": {"model": {}}, "rng": [_Payload(canary)]}, buffer)
    save = folder / "ep2-ba8-rank0.pt.zst"
    save.write_bytes(subprocess.run(["zstd"], input=buffer.getvalue(), stdout=subprocess.PIPE, check=True).stdout)
    result = cli("verify", "--json", folder)
    assert result.exit_code == 1
    unsafe = [f for f in result.json["findings"] if f["code"] == "CKD401" and f["severity"] == "error"]
    assert any(Path(f["path"]).name == save.name and "posix.system" in f["message"] for f in unsafe), unsafe
    assert not canary.exists()


def test_a_zstd_pickle_named_by_pandas_is_unsafe_not_a_wrong_suffix(tmp_path, cli):
    """It was CKD207/CKD205 ("invalid opcode"): the zstd magic read as a broken pickle."""
    canary = tmp_path / "canary"
    try:  # ckptdoctor's own zstd dependency
        from compression.zstd import compress  # type: ignore[import-not-found]
    except ImportError:
        from backports.zstd import compress
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "frame.pkl.zst").write_bytes(compress(pickle.dumps(_Payload(canary))))
    result = cli("verify", "--json", tmp_path / "run")
    assert result.exit_code == 1
    assert errors(result) == {"CKD401"}, result.json["findings"]


def test_an_lz4_stream_without_the_lz4_package_cannot_be_checked_and_says_what_to_install(tmp_path):
    if shutil.which("lz4") is None:
        pytest.skip("the lz4 tool writes the frame joblib and pandas read")
    (tmp_path / "run").mkdir()
    data = subprocess.run(["lz4", "-c"], input=pickle.dumps({"epoch": 1}), stdout=subprocess.PIPE, check=True).stdout
    (tmp_path / "run" / "model.pkl.lz4").write_bytes(data)
    blocked = "import sys; sys.modules['lz4'] = None; sys.modules['lz4.frame'] = None; from ckptdoctor.__main__ import program; program()"
    child = subprocess.run(
        [sys.executable, "-c", blocked, "verify", "--json", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert child.returncode == 1, child.stderr
    (finding,) = json.loads(child.stdout)["findings"]
    assert (finding["code"], finding["severity"]) == ("CKD401", "error")
    assert "cannot check:" in finding["message"]
    assert "pip install lz4" in finding["message"]


def _tar(path: Path, members: list[tuple[str, bytes]], mode: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode) as archive:
        for name, content in members:
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return path


@pytest.mark.parametrize("mode", ["w:gz", "w"])
def test_a_nemo_archive_of_bare_names_with_a_payload_is_unsafe_not_corrupt_data(tmp_path, cli, mode):
    """It was CKD205 "holds gzip data, not the tar" (gzipped) or CKD207 of a torch tar: the payload
    in model_weights.ckpt, which NeMo's restore extracts and torch.loads, went unseen."""
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(2), "x": _Payload(tmp_path / "canary")}, buffer)
    nemo = _tar(tmp_path / "run" / "model.nemo", [("model_config.yaml", b"a: 1\n"), ("model_weights.ckpt", buffer.getvalue())], mode)
    result = cli("verify", "--json", nemo.parent)
    assert result.exit_code == 1
    assert "CKD401" in errors(result) and not {c for c in errors(result) if c.startswith("CKD2")}, result.json["findings"]
    # the same archive with a state dict: read as NeMo reads it, nothing wrong
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buffer)
    _tar(nemo, [("model_config.yaml", b"a: 1\n"), ("model_weights.ckpt", buffer.getvalue())], mode)
    result = cli("verify", "--json", nemo.parent)
    assert result.exit_code == 0, result.json["findings"]
    assert all(c["status"] != "corrupt" for r in result.json["runs"] for c in r["checkpoints"])


def test_a_pandas_pkl_tar_is_read_as_pandas_reads_it(tmp_path, cli):
    """It was CKD207 (a torch tar without its members): pandas unpickles the tar's one member."""
    pandas = pytest.importorskip("pandas")
    evil = _tar(tmp_path / "evil" / "frame.pkl.tar", [("frame.pkl", pickle.dumps(_Payload(tmp_path / "canary")))], "w")
    result = cli("verify", "--json", evil.parent)
    assert result.exit_code == 1 and errors(result) == {"CKD401"}, result.json["findings"]
    benign = tmp_path / "benign" / "frame.pkl.tar"
    benign.parent.mkdir()
    pandas.to_pickle({"epoch": 3, "lr": [0.1, 0.01]}, benign)
    assert pandas.read_pickle(benign) == {"epoch": 3, "lr": [0.1, 0.01]}
    result = cli("verify", "--json", benign.parent)
    assert result.exit_code == 0 and not result.json["findings"], result.json["findings"]


@pytest.fixture(scope="module")
def compressed_bombs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    paths = built_once(tmp_path_factory, "bombs", build_bombs)
    return {path.parent.name: path for path in paths if path.parent.name in COMPRESSED_BOMBS}


@pytest.mark.parametrize("name", COMPRESSED_BOMBS)
def test_compressed_bombs_finish_under_two_seconds_and_256_mib(compressed_bombs, name):
    """Measured in a child process (its CPU time and peak memory), an error finding each."""
    path = compressed_bombs[name]
    measured = verify_measured(path.parent)
    assert measured.exit_code == 1, measured.report
    mine = [f for f in measured.report["findings"] if Path(f.get("path") or "/").name == path.name]
    assert any(f["code"] == "CKD401" and f["severity"] == "error" for f in mine), mine
    assert measured.cpu < 2.0, f"{name}: {measured.cpu:.2f} s of CPU"
    assert measured.peak < 256 * 1024 * 1024, f"{name}: {measured.peak >> 20} MiB at most"


# An independent attack on issue 31's fixes (C2, P3, C6b/C6c, F2): what a loader infers from a name is
# opened as it opens it, or the file cannot be checked; each payload is fired by its real victim in a
# child process first, so the test proves the file is live.

_SKIPPABLE_FRAME = b"\x50\x2a\x4d\x18" + (8).to_bytes(4, "little") + b"\0" * 8
"""A zstd skippable frame (magic 0x184D2A50, then its length): zstd, zstandard and pandas pass over it."""


def _fires(victim: str, canary: Path) -> bool:
    """Whether loading as ``victim`` (Python source) in a child process runs the payload."""
    subprocess.run([sys.executable, "-c", victim], capture_output=True, check=False, timeout=120)
    fired = canary.exists()
    canary.unlink(missing_ok=True)
    return fired


def _zstd(data: bytes) -> bytes:
    try:  # ckptdoctor's own zstd dependency
        from compression.zstd import compress  # type: ignore[import-not-found]
    except ImportError:
        from backports.zstd import compress
    return bytes(compress(data))


def _unsafe_only(result) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == 1
    assert errors(result) == {"CKD401"}, result.json["findings"]


def test_a_zstd_pickle_after_a_skippable_frame_is_read_as_pandas_reads_it(tmp_path, cli):
    """C2: it was format unknown, no finding, exit 0: the skippable frame hid the zstd magic."""
    pytest.importorskip("pandas")
    canary = tmp_path / "canary"
    run = tmp_path / "run"
    run.mkdir()
    frame = run / "val_preds.pkl.zst"
    frame.write_bytes(_SKIPPABLE_FRAME + _zstd(pickle.dumps(_Payload(canary))))
    assert _fires(f"import pandas; pandas.read_pickle({str(frame)!r})", canary)
    result = cli("verify", "--json", run)
    _unsafe_only(result)
    assert "posix.system" in result.json["findings"][0]["message"]


@needs_zstd
def test_a_composer_zstd_save_after_a_skippable_frame_is_unsafe_not_corrupt(tmp_path, cli):
    """P3: it was CKD205 "holds no checkpoint format": `zstd -dc` (Composer's decompression)
    passes over a skippable frame between or before its frames."""
    folder = composer_run(tmp_path / "checkpoints", ((1, 4),), compression="zst")
    canary = tmp_path / "canary"
    buffer = io.BytesIO()
    torch.save({"state": {"model": {}}, "rng": [_Payload(canary)]}, buffer)
    save = folder / "ep2-ba8-rank0.pt.zst"
    save.write_bytes(b"\x5f\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"ABCD" + _zstd(buffer.getvalue()))
    victim = (
        "import io, subprocess, torch; "
        f"torch.load(io.BytesIO(subprocess.run(['zstd', '-dc', {str(save)!r}], capture_output=True).stdout), weights_only=False)"
    )
    assert _fires(victim, canary)
    result = cli("verify", "--json", folder)
    assert result.exit_code == 1
    mine = [f for f in result.json["findings"] if Path(f["path"]).name == save.name]
    assert any(f["code"] == "CKD401" and f["severity"] == "error" and "posix.system" in f["message"] for f in mine), mine
    assert not [f for f in mine if f["code"] == "CKD205"], mine


@pytest.mark.parametrize(("lc", "pb", "properties"), [(0, 0, 0x00), (4, 4, 0xB8)])
def test_an_lzma_alone_pickle_named_xz_is_read_whatever_its_properties_byte(tmp_path, cli, lc, pb, properties):
    """C6b/C6c: it was format unknown, exit 0: only the properties byte 0x5D was told as LZMA-alone,
    while LZMAFile (pandas' `.xz`, FORMAT_AUTO) reads any valid one."""
    import lzma

    canary = tmp_path / "canary"
    run = tmp_path / "run"
    run.mkdir()
    frame = run / "val_preds.pkl.xz"
    lzma1 = {"id": lzma.FILTER_LZMA1, "lc": lc, "lp": 0, "pb": pb, "dict_size": 1 << 16}
    frame.write_bytes(lzma.compress(pickle.dumps(_Payload(canary)), format=lzma.FORMAT_ALONE, filters=[lzma1]))
    assert frame.read_bytes()[0] == properties
    assert _fires(f"import lzma, pickle; pickle.load(lzma.LZMAFile({str(frame)!r}))", canary)
    _unsafe_only(cli("verify", "--json", run))


def test_a_pandas_pkl_zip_is_read_as_pandas_reads_it(tmp_path, cli):
    """F2: pandas' own `.pkl.zip` (one member) was CKD205 "a zip archive, not a torch checkpoint";
    read_pickle unpickles its one member, so a dict of floats is clean and a payload unsafe."""
    pandas = pytest.importorskip("pandas")
    benign = tmp_path / "benign" / "metrics.pkl.zip"
    benign.parent.mkdir()
    pandas.to_pickle({"step": [1.0, 2.0], "loss": [0.5, 0.4]}, benign)
    assert pandas.read_pickle(benign) == {"step": [1.0, 2.0], "loss": [0.5, 0.4]}
    result = cli("verify", "--json", benign.parent)
    assert result.exit_code == 0 and not result.json["findings"], result.json["findings"]
    canary = tmp_path / "canary"
    evil = tmp_path / "evil" / "metrics.pkl.zip"
    evil.parent.mkdir()
    pandas.to_pickle(_Payload(canary), evil)
    assert _fires(f"import pandas; pandas.read_pickle({str(evil)!r})", canary)
    _unsafe_only(cli("verify", "--json", evil.parent))


def test_a_pandas_pkl_zip_ckptdoctor_cannot_open_cannot_be_checked(tmp_path, cli):
    """The general rule: zipfile finds a zip behind any leading bytes, which ckptdoctor does not
    open as a zip; it was no finding, exit 0, while read_pickle ran the payload."""
    pandas = pytest.importorskip("pandas")
    canary = tmp_path / "canary"
    written = tmp_path / "written.pkl.zip"
    pandas.to_pickle(_Payload(canary), written)
    (tmp_path / "run").mkdir()
    hidden = tmp_path / "run" / "metrics.pkl.zip"
    hidden.write_bytes(b"\0junk" * 20 + written.read_bytes())
    assert _fires(f"import pandas; pandas.read_pickle({str(hidden)!r})", canary)
    result = cli("verify", "--json", hidden.parent)
    assert result.exit_code == 1
    assert any(f["code"] == "CKD401" and "cannot check: its name says zip" in f["message"] for f in result.json["findings"])


def test_a_compression_suffix_over_content_that_is_not_that_stream_cannot_be_checked(tmp_path, cli):
    """The general rule: a `.pkl.zst` ckptdoctor cannot decompress is never merely corrupt (it was
    CKD207 "the record cannot be decoded"); the zstd tool (Composer) and pandas fail on it too."""
    (tmp_path / "run").mkdir()
    frame = tmp_path / "run" / "val_preds.pkl.zst"
    frame.write_bytes(b"\x28\xb5\x2f\xfe" + bytes(range(256)))
    result = cli("verify", "--json", frame.parent)
    assert result.exit_code == 1
    unsafe = [f for f in result.json["findings"] if f["code"] == "CKD401" and f["severity"] == "error"]
    assert any("cannot check: its name says zstd" in f["message"] for f in unsafe), result.json["findings"]


def _pandas_unpickles(path: Path, canary: Path) -> bool:
    """Whether ``pandas.read_pickle`` of ``path``, in a child, creates ``canary``: the payload is live."""
    subprocess.run([sys.executable, "-c", f"import pandas; pandas.read_pickle({str(path)!r})"], capture_output=True, check=False)
    return canary.exists()


def _retyped(archive: bytes, kind: bytes) -> bytes:
    """``archive`` with its first header's type set to ``kind`` and its checksum made right again."""
    header = bytearray(archive[:512])
    header[156:157] = kind
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header) + archive[512:]


def test_a_sparse_tar_member_cannot_be_checked(tmp_path, cli):
    """A GNU sparse member (``tar --sparse`` of a file with holes): tarfile, and so pandas'
    read_pickle, unpacks it with zeros in its holes, where a string's length swallows them; read as
    stored, without the holes, the same member was a harmless pickle, and verify said nothing."""
    pytest.importorskip("pandas")
    if shutil.which("tar") is None:
        pytest.skip("GNU tar writes sparse members")
    canary = tmp_path / "canary"
    hole = 64 * 1024
    payload = pickle.dumps(_Payload(canary), protocol=2)[2:]
    member = tmp_path / "stage" / "stats.pkl"
    member.parent.mkdir()
    with member.open("wb") as out:  # a BINSTRING over the hole, then the payload after it
        out.write(b"\x80\x02T" + (4096 + hole - 7).to_bytes(4, "little") + b"\0" * (4096 - 7))
        out.seek(4096 + hole)
        out.write(b"0" + payload)
    run = tmp_path / "run"
    run.mkdir()
    subprocess.run(["tar", "--sparse", "-cf", str(run / "stats.pkl.tar"), "-C", str(member.parent), "stats.pkl"], check=True)
    with tarfile.open(run / "stats.pkl.tar") as archive:
        if not archive.getmembers()[0].issparse():
            pytest.skip("this filesystem reports no holes, so tar wrote a plain member")
    assert _pandas_unpickles(run / "stats.pkl.tar", canary)
    result = cli("verify", "--json", run)
    assert result.exit_code == 1
    (finding,) = [f for f in result.json["findings"] if f["severity"] == "error"]
    assert finding["code"] == "CKD401" and "cannot check" in finding["message"] and "sparse" in finding["message"]


def test_a_pax_size_and_an_unknown_member_type_are_read_as_tarfile_reads_them(tmp_path, cli):
    """tarfile takes a member's size from its PAX header over the ustar field, and reads a member
    of a type it does not know as a file: the payload pandas unpickles was past the ustar size (a
    harmless pickle of its first bytes) or in a member this reader skipped."""
    pytest.importorskip("pandas")
    canary = tmp_path / "canary"
    payload = pickle.dumps(_Payload(canary), protocol=2)
    record = f"size={len(payload)}\n"
    record = f"{len(record) + 3} {record}"  # "NN size=...\n", its length counting itself
    pax = tarfile.TarInfo("././@PaxHeader")
    pax.type, pax.size = tarfile.XHDTYPE, len(record)
    info = tarfile.TarInfo("frame.pkl")
    info.size = 3  # the ustar field: tarfile reads the PAX size instead
    buffer = io.BytesIO()
    buffer.write(pax.tobuf(tarfile.USTAR_FORMAT) + record.encode().ljust(512, b"\0"))
    buffer.write(info.tobuf(tarfile.USTAR_FORMAT) + payload.ljust(-(-len(payload) // 512) * 512, b"\0"))
    buffer.write(b"\0" * 1024)
    archive = buffer.getvalue().ljust(-(-len(buffer.getvalue()) // 10240) * 10240, b"\0")
    cases = {
        "pax": archive,
        "unknown-type": _retyped(_tar(tmp_path / "plain.tar", [("frame.pkl", payload)], "w").read_bytes(), b"Z"),
    }
    for case, content in cases.items():
        canary.unlink(missing_ok=True)
        path = tmp_path / case / "frame.pkl.tar"
        path.parent.mkdir()
        path.write_bytes(content)
        assert _pandas_unpickles(path, canary), case
        result = cli("verify", "--json", path.parent)
        assert result.exit_code == 1, (case, result.json["findings"])
        (finding,) = [f for f in result.json["findings"] if f["severity"] == "error"]
        assert finding["code"] == "CKD401" and "system" in finding["message"], (case, finding)


@pytest.mark.parametrize("name", ["frame.pkl.zip", "frame.pkl.tar", "frame.pkl.tar.gz"])
def test_a_pandas_archive_verified_alone_is_judged_by_its_pickle(tmp_path, cli, name):
    """The second attack (issue 31): a benign `to_pickle` archive verified as one file was CKD205
    "holds zip data", exit 1, though the same file in a run folder was clean."""
    pandas = pytest.importorskip("pandas")
    benign = tmp_path / name
    pandas.to_pickle({"epoch": 3}, benign)
    assert pandas.read_pickle(benign) == {"epoch": 3}
    result = cli("verify", "--json", benign)
    assert result.exit_code == 0 and not result.json["findings"], result.json["findings"]
    pandas.to_pickle(_Payload(tmp_path / "canary"), benign)
    result = cli("verify", "--json", benign)
    assert result.exit_code == 1 and errors(result) == {"CKD401"}, result.json["findings"]


@pytest.mark.parametrize(("module", "suffix", "compress"), [("lzma", "xz", "lzma"), ("bz2", "bz2", "bz2")])
def test_a_stream_whose_standard_module_is_missing_names_no_pip_package(tmp_path, module, suffix, compress):
    """The second attack (issue 31): the fix said `pip install xz`, and `xz` on PyPI is another
    package: lzma and bz2 come with Python, or not at all."""
    import importlib

    data = importlib.import_module(compress).compress(pickle.dumps({"epoch": 3}))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / f"model.pkl.{suffix}").write_bytes(data)
    blocked = f"import sys; sys.modules[{module!r}] = None; from ckptdoctor.__main__ import program; program()"
    child = subprocess.run(
        [sys.executable, "-c", blocked, "verify", "--json", str(tmp_path / "run")], capture_output=True, text=True, check=False
    )
    assert child.returncode == 1, child.stderr
    (finding,) = json.loads(child.stdout)["findings"]
    assert finding["code"] == "CKD401" and "cannot check:" in finding["message"]
    assert f"built without its {module} module" in finding["message"] and "pip install" not in finding["message"]


def test_a_folder_of_small_compressed_bombs_stops_being_followed(tmp_path):
    """The second attack (issue 31): 100 files of 2.7 KB of zstd, each 16M NONE/POP pairs, took
    22 s of CPU: each stopped at its own bound (CKD401), and each bound cost a fifth of a second.
    After three of a run's files went past a bound, the rest are not followed, still CKD401."""
    zstandard = pytest.importorskip("zstandard")
    bomb = zstandard.ZstdCompressor(level=19).compress(b"\x80\x02" + b"N0" * (16 * 1024 * 1024) + b"N.")
    assert len(bomb) < 4096
    for number in range(100):
        (tmp_path / f"stats_{number}.pkl.zst").write_bytes(bomb)
    measured = verify_measured(tmp_path)
    codes = [f["code"] for f in measured.report["findings"] if f["severity"] == "error"]
    assert codes == ["CKD401"] * 100, measured.report["findings"]
    assert all("could not be fully checked" in f["message"] for f in measured.report["findings"] if f["code"] == "CKD401")
    assert measured.cpu < 2.0, f"{measured.cpu:.2f} s of CPU"


def test_a_gzip_bomb_is_not_inflated_to_its_end_by_inspect(tmp_path, cli):
    """The second attack (issue 31): the header read of a gzip file inflated it whole to find its
    end, 2 GB of zeros from 8 MB; it stops at 64 times the file's size (at least 128 MiB)."""
    import resource
    import zlib

    compressor = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(16 * 1024 * 1024)
    with (tmp_path / "model-1.mpk.gz").open("wb") as out:
        for _ in range(64):  # 1 GiB
            out.write(compressor.compress(zeros))
        out.write(compressor.flush())
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = cli("inspect", "--json", tmp_path)
    after = resource.getrusage(resource.RUSAGE_SELF)
    (bomb,) = [f for f in result.json["findings"] if f["code"] == "CKD401"]
    assert "cannot check: its gzip stream inflates to more than" in bomb["message"]
    assert after.ru_utime - before.ru_utime < 2.0
