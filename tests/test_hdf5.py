"""HDF5 files as libhdf5 writes them (through h5py), and as a killed writer, a cut copy or an
attacker leaves them: what ``readers.hdf5`` says of each, checked against what h5py says.

Superblock layouts follow the HDF5 file format specification ("Disk Format: Level 0A"); a
version-3 superblock (``libver="latest"``) keeps a flag set while a writer holds the file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sample_set import Measured, verify_measured

from ckptdoctor.model import Problem
from ckptdoctor.readers import hdf5
from ckptdoctor.readers.sample import BytesSample, FileSample

h5py = pytest.importorskip("h5py", reason="needs h5py (pip install 'ckptdoctor[keras]')")
np = pytest.importorskip("numpy")


def problems(path: Path, deep: int = 0) -> list[Problem]:
    return [issue.problem for issue in hdf5.read_whole(BytesSample(path.read_bytes()), deep).issues]


def weights(path: Path, **options: object) -> Path:
    """A file laid out as Keras' ``H5IOStore`` writes one (``layers/<name>/vars/<i>``, ``optimizer/vars``)."""
    with h5py.File(path, "w", **options) as f:
        f.create_dataset("layers/dense/vars/0", data=np.ones((4, 8), "float32"))
        f.create_dataset("layers/dense/vars/1", data=np.zeros((8,), "float32"))
        f.create_dataset("optimizer/vars/0", data=np.int64(12))
    return path


def walk_cpu(tmp_path: Path, measured: Measured, *options: str) -> float:
    """CPU seconds ``measured`` spent beyond a ``verify`` (same options) of a small healthy
    weights file: what reading its file cost, without the interpreter's start-up, the imports
    and the reader's fork, which are most of 2 s on these cores and not what issue 31 bounds."""
    healthy = tmp_path / "healthy"
    healthy.mkdir(parents=True)
    weights(healthy / "model.weights.h5")
    return measured.cpu - verify_measured(healthy, *options).cpu


def test_a_whole_file_is_clean_and_lists_its_datasets(tmp_path: Path) -> None:
    path = weights(tmp_path / "w.weights.h5")
    report = hdf5.read_whole(BytesSample(path.read_bytes()), deep=1)
    assert report.issues == ()
    assert {(t.name, t.dtype, t.shape) for t in report.tensors or ()} == {
        ("layers.dense.vars.0", "float32", (4, 8)),
        ("layers.dense.vars.1", "float32", (8,)),
        ("optimizer.vars.0", "int64", ()),
    }
    assert report.keys == ("layers", "optimizer")
    assert hdf5.probe(BytesSample(path.read_bytes())).issues == ()


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_a_file_cut_short_is_truncated_as_libhdf5_says(tmp_path: Path, libver: str) -> None:
    path = weights(tmp_path / "w.h5", libver=libver)
    os.truncate(path, path.stat().st_size - 1)
    assert problems(path) == [Problem.TRUNCATED]
    with pytest.raises(OSError, match="truncated file"):
        h5py.File(path, "r")


def test_a_writer_killed_with_the_file_open_leaves_its_flag_set(tmp_path: Path) -> None:
    path = tmp_path / "v3.h5"
    code = "import os, h5py, numpy as np\nf = h5py.File(os.environ['OUT'], 'w', libver='latest')\nf.create_dataset('a', data=np.ones(1000))\nf.flush()\nos._exit(0)"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "OUT": str(path)})
    assert problems(path) == [Problem.TRUNCATED]
    with pytest.raises(OSError, match="already open for write"):
        h5py.File(path, "r")


def test_links_and_storage_outside_the_file_are_refused_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "secret.bin"
    outside.write_bytes(b"\x7f" * 64)
    path = tmp_path / "evil.weights.h5"
    with h5py.File(path, "w") as f:
        f["layers/link"] = h5py.ExternalLink(str(outside), "/x")
        f.create_dataset("layers/ext", shape=(4,), dtype="f4", external=[(str(outside), 0, 16)])
    report = hdf5.read_whole(BytesSample(path.read_bytes()), deep=1)
    assert [i.problem for i in report.issues] == [Problem.MALFORMED, Problem.MALFORMED]
    assert all("outside the checkpoint" in i.detail for i in report.issues)


def test_deep_finds_nan_in_contiguous_and_in_chunked_datasets(tmp_path: Path) -> None:
    for chunked in (False, True):
        path = tmp_path / f"nan-{chunked}.h5"
        with h5py.File(path, "w") as f:
            data = np.array([1.0, np.nan] * 100, "float32")
            f.create_dataset("layers/d/vars/0", data=data, **({"chunks": (10,), "compression": "gzip"} if chunked else {}))
        assert problems(path) == []
        assert problems(path, deep=1) == [Problem.NONFINITE], chunked


def test_a_crash_inside_libhdf5_is_damage_not_a_crash_of_ckptdoctor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = weights(tmp_path / "w.h5")
    monkeypatch.setattr(hdf5, "_read", lambda sample, deep: os.abort())  # as a segfault in C would end it
    report = hdf5.read_whole(BytesSample(path.read_bytes()))
    assert [i.problem for i in report.issues] == [Problem.MALFORMED]
    assert "crashed" in report.issues[0].detail


def test_groups_nested_1500_deep_are_read_whole_as_h5py_reads_them(tmp_path: Path) -> None:
    """Issue 31, item 7: libhdf5 nests groups as deep as a writer likes; ckptdoctor's own walk
    recursed once per level and called such a valid file malformed (maximum recursion depth)."""
    path = tmp_path / "deep.weights.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("g/" * 1500 + "w", data=np.array([1.0, np.nan], "float32"))
    with h5py.File(path, "r") as f:  # h5py reads it
        assert f["g/" * 1500 + "w"].shape == (2,)
    report = hdf5.read_whole(BytesSample(path.read_bytes()))
    assert report.issues == ()
    assert [(t.name, t.shape) for t in report.tensors or ()] == [("g." * 1500 + "w", (2,))]
    assert problems(path, deep=1) == [Problem.NONFINITE]
    cut = tmp_path / "cut.weights.h5"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2] + bytes(path.stat().st_size - path.stat().st_size // 2))
    with h5py.File(cut, "r") as f, pytest.raises(KeyError, match="bad symbol table node signature"):
        f["g/" * 1500 + "w"][()]  # h5py cannot read the zeroed half
    unread = hdf5.read_whole(BytesSample(cut.read_bytes())).issues
    assert [i.problem for i in unread] == [Problem.MALFORMED] and "h5py cannot read it" in unread[0].detail


def test_a_file_on_disk_is_read_by_its_descriptor_whatever_takes_its_name_or_locks_it(tmp_path: Path) -> None:
    """libhdf5 reads a file on disk by name (twice as fast as through a Python file object): the
    name is the sample's own descriptor, so a file put in its place after it was opened is not
    what is read; and libhdf5's lock is not taken, so a writer holding its own lock on the file
    (h5py's ``locking``, the default) stops nothing."""
    path = weights(tmp_path / "model.weights.h5")
    with FileSample.open(str(path)) as sample:
        assert sample.reopened() is not None
        other = tmp_path / "other.weights.h5"
        with h5py.File(other, "w") as f:
            f.create_dataset("layers/other/vars/0", data=np.ones(3, "float32"))
        os.replace(other, path)
        assert sample.reopened() is None  # libhdf5 would resolve the path to the file now there
        read = hdf5.read_whole(sample)
    assert [t.name for t in read.tensors or ()] == ["layers.dense.vars.0", "layers.dense.vars.1", "optimizer.vars.0"]
    locker = "import h5py, sys, time; f = h5py.File(sys.argv[1], 'r+'); print('held', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", locker, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(OSError, match="lock"):
            h5py.File(path, "r")  # what a locking reader meets
        with FileSample.open(str(path)) as sample:
            read = hdf5.read_whole(sample)
        assert not read.issues and [t.name for t in read.tensors or ()] == ["layers.other.vars.0"]
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("deep", [False, True], ids=["verify", "deep"])
def test_groups_nested_20000_deep_are_refused_within_2_s_and_256_mib(tmp_path: Path, deep: bool) -> None:
    """Issue 31, an attack's B10b: a 20 MB weights file of groups nested 20,000 deep took 7.7 s
    and 1.4 GiB, with no finding. libhdf5 keeps the whole path of every open group, and the walk
    held every group on its way down open: memory and time in the square of the depth. (h5py's
    own ``File.visit`` crashes the interpreter on it.) Measured with the forked libhdf5 reader."""
    with h5py.File(tmp_path / "model.weights.h5", "w") as f:
        f.create_group("layers/" + "g/" * 19_999 + "g")
    options = ["--deep"] if deep else []
    measured = verify_measured(tmp_path, *options)
    errors = [f for f in measured.report["findings"] if f["severity"] == "error" and f["code"] != "CKD110"]
    assert [f["code"] for f in errors] == ["CKD207"] and "nested" in errors[0]["message"], measured.report["findings"]
    cpu = walk_cpu(tmp_path / "baseline", measured, *options)
    assert cpu < 2.0, f"{cpu:.2f} s of CPU"
    assert measured.peak < 256 * 1024 * 1024, f"{measured.peak >> 20} MiB at most"


def _many_objects(path: Path, kind: str) -> None:
    """More objects (or chunks) than ``hdf5.MAX_OBJECTS``, laid out so that the walk must open
    most of them before it can count past the bound."""
    with h5py.File(path, "w") as f:
        if kind == "datasets":  # as Keras lays out variables, 100 to a layer
            for i in range(hdf5.MAX_OBJECTS + 100):
                f.create_dataset(f"layers/l{i // 100}/vars/{i % 100}", data=np.float32(i))
        elif kind == "groups":  # a binary tree: each group must be opened to list its two
            for i in range(2, hdf5.MAX_OBJECTS + 100):
                f.create_group("/".join(f"g{bit}" for bit in bin(i)[3:]))
        else:  # one dataset of single-element chunks
            f.create_dataset("layers/dense/vars/0", data=np.ones(hdf5.MAX_OBJECTS + 100, "float32"), chunks=(1,))


@pytest.mark.parametrize(("kind", "deep"), [("datasets", False), ("datasets", True), ("groups", False), ("chunks", False)])
def test_many_objects_are_refused_within_2_s_and_256_mib(tmp_path: Path, kind: str, deep: bool) -> None:
    """Issue 31 item 4: a 152 MiB weights file of 200,001 sibling groups took 32.8 s of CPU and
    371 MiB before its CKD207, and 20,000 datasets some 5 s with none: the walk opened every
    object through h5py's high-level API, which asks libhdf5 again at each property. Measured
    with the forked libhdf5 reader."""
    _many_objects(tmp_path / "model.weights.h5", kind)
    options = ["--deep"] if deep else []
    measured = verify_measured(tmp_path, *options)
    errors = [f for f in measured.report["findings"] if f["severity"] == "error" and f["code"] != "CKD110"]
    assert [f["code"] for f in errors] == ["CKD207"] and "objects and chunks" in errors[0]["message"], errors
    cpu = walk_cpu(tmp_path / "baseline", measured, *options)
    assert cpu < 2.0, f"{cpu:.2f} s of CPU"
    assert measured.peak < 256 * 1024 * 1024, f"{measured.peak >> 20} MiB at most"


def test_the_largest_keras_models_stay_within_the_bound_and_read_clean(tmp_path: Path) -> None:
    """A 400-layer Dense stack compiled with Adam, its slots built: 3,206 objects, about what
    EfficientNetB7 (816 layers, the most in ``keras.applications``) holds, twice that under
    ``MAX_OBJECTS``. Keras reads both its files back; ``verify`` finds every variable in them."""
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((4,)), *(keras.layers.Dense(4) for _ in range(400))])
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)  # Adam's two slots per variable, as after a step
    model.save_weights(tmp_path / "model.weights.h5")
    model.save(tmp_path / "legacy.h5")
    model.load_weights(tmp_path / "model.weights.h5")  # Keras reads both
    keras.models.load_model(tmp_path / "legacy.h5", compile=False)
    for path in (tmp_path / "model.weights.h5", tmp_path / "legacy.h5"):
        objects: list[str] = []
        with h5py.File(path, "r") as f:
            f.visit(objects.append)
            datasets = sum(isinstance(f[name], h5py.Dataset) for name in objects)
        assert 3_000 < len(objects) < hdf5.MAX_OBJECTS / 2
        report = hdf5.read_whole(BytesSample(path.read_bytes()))
        assert report.issues == () and len(report.tensors or ()) == datasets
    measured = verify_measured(tmp_path)
    assert not [f for f in measured.report["findings"] if f["severity"] == "error"], measured.report["findings"]


def test_a_hard_link_back_to_a_parent_group_is_walked_once(tmp_path: Path) -> None:
    path = weights(tmp_path / "loop.weights.h5")
    with h5py.File(path, "a") as f:
        f["layers/dense/up"] = f  # a second hard link to the root group: libhdf5 allows the cycle
    report = hdf5.read_whole(BytesSample(path.read_bytes()))
    assert report.issues == () and len(report.tensors or ()) == 3


def test_a_legacy_model_config_with_a_lambda_is_code(tmp_path: Path) -> None:
    path = weights(tmp_path / "legacy.h5")
    with h5py.File(path, "a") as f:
        f.attrs["model_config"] = '{"class_name": "Lambda", "config": {"function": ["4wEAAA==", null, null], "function_type": "lambda"}}'
    assert problems(path) == [Problem.CODE_IN_CONFIG]


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=0, max_value=3))
def test_any_bytes_after_the_signature_give_a_report_never_a_traceback(tail: bytes, version: int) -> None:
    data = hdf5.SIGNATURE + bytes([version]) + tail
    for report in (hdf5.probe(BytesSample(data)), hdf5.read_whole(BytesSample(data))):
        assert report.format == "hdf5"
        assert report.issues, "random bytes are never a whole HDF5 file"


def test_compressed_chunks_that_inflate_to_gigabytes_are_not_inflated_by_deep(tmp_path: Path) -> None:
    """The second attack (issue 31): a 1 MiB weights file of gzip chunks of zeros (1 GiB of float32)
    took `verify --deep` 5 s of CPU, and a 4 MiB one 16 s, exit 0. Its values are left unread, which
    `verify` says (partly checked); weights of the same file compressed as real ones are read."""
    h5py = pytest.importorskip("h5py")
    import numpy as np

    bomb = tmp_path / "bomb" / "model.weights.h5"
    bomb.parent.mkdir()
    with h5py.File(bomb, "w") as f:
        dataset = f.create_dataset("layers/dense/vars/0", shape=(2**28,), dtype="f4", chunks=(2**22,), compression="gzip")
        for start in range(0, 2**28, 2**22):
            dataset[start : start + 2**22] = np.zeros(2**22, "f4")
    assert bomb.stat().st_size < 2 * 1024 * 1024
    measured = verify_measured(bomb.parent, "--deep")
    (finding,) = [f for f in measured.report["findings"] if f["code"] not in ("CKD107", "CKD110")]  # weights only
    assert finding["code"] == "CKD213" and "not read" in finding["message"], measured.report["findings"]
    cpu = walk_cpu(tmp_path / "baseline", measured, "--deep")
    assert cpu < 2.0, f"{cpu:.2f} s of CPU"
    assert measured.peak < 256 * 1024 * 1024, f"{measured.peak >> 20} MiB at most"
    weights = tmp_path / "weights" / "model.weights.h5"
    weights.parent.mkdir()
    values = np.random.default_rng(0).standard_normal(2**16).astype("f4")
    values[7] = np.nan
    with h5py.File(weights, "w") as f:
        f.create_dataset("layers/dense/vars/0", data=values, chunks=(2**12,), compression="gzip")
    report = hdf5.read_whole(BytesSample(weights.read_bytes()), deep=1)
    assert [i.problem for i in report.issues] == [Problem.NONFINITE], report.issues
