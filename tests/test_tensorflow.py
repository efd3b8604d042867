"""TensorFlow checkpoint bundles (``tf.train.CheckpointManager``), made and restored by real TensorFlow.

The runs are written by tensorflow-cpu 2.21 in a subprocess (TensorFlow stays out of the test
process); each break is one a kill, a full disk or a cleanup leaves, and each verdict is checked
against what TensorFlow itself does with the folder: ``tf.train.latest_checkpoint`` and
``Checkpoint.restore(...).assert_consumed()`` after ``repair``. What a killed save leaves
(``<prefix>_temp/`` with ``*.tempstate<n>`` shards, ``checkpoint.tmp<hex>``) follows
``python/checkpoint/functional_saver.py`` (``MultiDeviceSaver.save``), ``tensor_bundle.cc``
(``BundleWriter``) and ``python/lib/io/file_io.py`` (``atomic_write_string_to_file``), and was
seen on a real SIGKILL of a 100 MB save. The index is built and damaged byte by byte as
``third_party/xla/xla/tsl/lib/io/format.cc`` lays it out.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from _frameworks_subprocess import run_python
from reports import codes

from ckptdoctor.model import Problem, Role, Status
from ckptdoctor.pipelines.scan import inspect
from ckptdoctor.pipelines.verify import VerifyOptions, verify
from ckptdoctor.readers import tfbundle
from ckptdoctor.readers.sample import BytesSample

pytest.importorskip("tensorflow", reason="needs tensorflow-cpu (pip install -e '.[tensorflow]')")


_MAKE = r"""
import sys, numpy as np, keras, tensorflow as tf
out = sys.argv[1]
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(2)])
model.compile(optimizer="adam", loss="mse")
model.fit(np.ones((16, 4), "float32"), np.ones((16, 2), "float32"), epochs=1, batch_size=8, verbose=0)
step = tf.Variable(0, dtype=tf.int64)
checkpoint = tf.train.Checkpoint(step=step, optimizer=model.optimizer, model=model)
manager = tf.train.CheckpointManager(checkpoint, out + "/manager", max_to_keep=3)
for _ in range(4):
    step.assign_add(1)
    manager.save()
big = tf.train.Checkpoint(a=tf.Variable(tf.ones((64, 64))), b=tf.Variable(tf.zeros((64, 64))), step=tf.Variable(7))
policy = tf.train.experimental.MaxShardSizePolicy(max_shard_size=16 * 1024)
small = tf.train.Checkpoint(a=tf.Variable(tf.ones((4,))))
for epoch in (1, 2):
    small.write(out + f"/written/cp-{epoch:04d}.ckpt")  # the Keras 2 tutorials' template: no state file
big.write(out + "/sharded/weights", options=tf.train.CheckpointOptions(experimental_sharding_callback=policy))
iterator = iter(tf.data.Dataset.range(100).shuffle(10, seed=1).batch(4))
next(iterator)
tf.train.Checkpoint(iterator=iterator, names=tf.Variable(["a", "bb", "ccc"])).write(out + "/iterator/ckpt")  # variant and string tensors
"""

_RESTORE = r"""
import sys, json, numpy as np, keras, tensorflow as tf
for folder in sys.argv[1:]:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((16, 4), "float32"), np.ones((16, 2), "float32"), epochs=1, batch_size=8, verbose=0)
    step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(step=step, optimizer=model.optimizer, model=model)
    manager = tf.train.CheckpointManager(checkpoint, folder, max_to_keep=3)
    latest = tf.train.latest_checkpoint(folder)
    error = None
    try:
        checkpoint.restore(manager.latest_checkpoint).assert_consumed()
    except Exception as caught:
        error = type(caught).__name__ + ": " + str(caught).splitlines()[0]
    print(json.dumps({"latest": latest, "manager": manager.latest_checkpoint, "step": int(step.numpy()), "error": error}))
"""
_READ_ITERATOR = r"""
import sys, json, tensorflow as tf
for prefix in sys.argv[1:]:
    iterator = iter(tf.data.Dataset.range(100).shuffle(10, seed=1).batch(4))
    names = tf.Variable(["", "", ""])
    error = None
    try:
        tf.train.Checkpoint(iterator=iterator, names=names).read(prefix).assert_consumed()
    except Exception as caught:
        error = type(caught).__name__ + ": " + str(caught).splitlines()[0]
    print(json.dumps({"names": [n.decode() for n in names.numpy()], "error": error}))
"""


def restored(folder: Path) -> dict[str, object]:
    """What TensorFlow itself makes of ``folder``: the prefix ``latest_checkpoint`` returns and the
    step a manager's ``restore(manager.latest_checkpoint)`` restores (0: it started afresh)."""
    (result,) = restorations([folder])
    return result


def restorations(folders: list[Path], script: str = _RESTORE) -> list[dict[str, object]]:
    """``restored`` of each of ``folders`` (or what another ``script`` prints of each), in one TensorFlow process."""
    return [json.loads(line) for line in run_python(script, *map(str, folders)).splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def tf_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tf")
    run_python(_MAKE, str(root))
    return root


@pytest.fixture
def manager(tf_runs: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tf_runs / "manager", tmp_path / "manager"))


def found_in(folder: Path, deep: bool = False) -> list[tuple[str, int | None]]:
    """The findings' ``(code, index)`` of ``inspect`` (``verify --deep`` with ``deep``) on ``folder``."""
    report, _ = verify([str(folder)], VerifyOptions(deep=True)) if deep else inspect([str(folder)])
    return codes(report, index=True)


def only_run(folder: Path):  # type: ignore[no-untyped-def]
    _, found = inspect([str(folder)])
    (run,) = found.runs
    return run


def test_a_manager_run_is_read_as_tensorflow_saves_clean_under_deep_verify(manager: Path, cli) -> None:
    run = only_run(manager)
    assert run.layout == "tensorflow"
    assert [c.index for c in run.checkpoints] == [2, 3, 4]  # max_to_keep=3 deleted ckpt-1
    assert all(c.status is Status.COMPLETE for c in run.checkpoints)
    assert run.resume_path == str(manager / "ckpt-4")  # what Checkpoint.restore takes: the prefix
    assert cli("verify", "--deep", "--load", str(manager)).exit_code == 0
    assert restored(manager)["step"] == 4


def test_the_index_lists_every_tensor_and_how_long_each_shard_must_be(manager: Path) -> None:
    index = (manager / "ckpt-4.index").read_bytes()
    report = tfbundle.read_index(BytesSample(index))
    assert report.issues == ()
    assert report.fact(tfbundle.SHARDS) == "1"
    names = {t.name for t in report.tensors or ()}
    assert "step/.ATTRIBUTES/VARIABLE_VALUE" in names
    assert "optimizer" in report.keys  # Keras 3 variables are tracked through the optimizer's
    assert tfbundle.extents(report) == {0: (manager / "ckpt-4.data-00000-of-00001").stat().st_size}


def test_a_cut_data_shard_makes_its_save_partial_and_repair_leaves_tensorflow_restoring_the_previous(manager: Path, cli) -> None:
    # a disk that filled during the newest save: the shard is shorter than its index says
    shard = manager / "ckpt-4.data-00000-of-00001"
    os.truncate(shard, shard.stat().st_size // 2)
    found = found_in(manager)
    assert ("CKD203", 4) in found
    assert ("CKD114", 4) in found  # latest_checkpoint still names it
    assert only_run(manager).resume.index == 3
    before = restored(manager)
    assert before["latest"] == str(manager / "ckpt-4") and before["error"]  # TensorFlow follows it, and fails
    assert cli("repair", "--yes", "--min-age", "0", str(manager)).exit_code == 0
    after = restored(manager)
    assert after["latest"] == str(manager / "ckpt-3")
    assert (after["error"], after["step"]) == (None, 3)  # restored whole: assert_consumed() passed
    assert cli("repair", "--undo", "--yes", str(manager)).exit_code == 0
    assert shard.exists() and "ckpt-4" in (manager / "checkpoint").read_text()


def test_a_save_killed_before_its_index_was_written_is_partial(manager: Path) -> None:
    (manager / "ckpt-4.index").unlink()  # MergeV2Checkpoints moved the shard in, then died
    run = only_run(manager)
    assert (run.checkpoints[-1].status, run.checkpoints[-1].missing) == (Status.INCOMPLETE, (Role.METADATA,))
    assert run.resume.index == 3
    assert ("CKD114", 4) in found_in(manager)  # the state file names it: latest_checkpoint would give it


def test_an_index_cut_short_is_truncated_as_tensorflow_says(manager: Path) -> None:
    index = manager / "ckpt-4.index"
    os.truncate(index, 500)
    found = found_in(manager)
    assert ("CKD203", 4) in found
    report, _ = inspect([str(manager)])
    assert any("not an sstable" in f.message for f in report.findings)


def test_a_flipped_byte_in_an_index_block_fails_its_crc32c(manager: Path) -> None:
    index = manager / "ckpt-4.index"
    data = bytearray(index.read_bytes())
    data[40] ^= 0x01  # inside the first data block, before any handle the footer needs
    index.write_bytes(bytes(data))
    assert ("CKD206", 4) in found_in(manager)


def test_a_flipped_bit_in_a_shard_is_found_by_deep_verify_as_tensorflow_finds_it(manager: Path) -> None:
    shard = manager / "ckpt-4.data-00000-of-00001"
    data = bytearray(shard.read_bytes())
    data[600] ^= 0x01  # inside a float tensor (the index places the object graph after it)
    shard.write_bytes(bytes(data))
    assert found_in(manager) == []  # the length is right: only the bytes can tell
    assert ("CKD206", 4) in found_in(manager, deep=True)
    _, found = verify([str(manager)], VerifyOptions(deep=True))
    assert found.runs[0].resume.index == 3
    assert "Checksum does not match" in str(restored(manager)["error"])  # what the finding quotes


def test_what_only_verify_sees_repair_verify_quarantines_and_tensorflow_restores_the_save_before(manager: Path, cli) -> None:
    """A flipped bit in the newest shard: only a whole read sees it, so `verify`'s fixes name
    `repair --verify`, which reads the newest save whole, quarantines it and re-points the state
    file; TensorFlow's own resume then restores ckpt-3. A plain `repair` sees nothing to do."""
    flipped(manager, "ckpt-4", [600])
    assert "Checksum does not match" in str(restored(manager)["error"])
    report = cli("verify", "--json", str(manager)).json
    fixes = [fix for f in report["findings"] if f["index"] == 4 for fix in f["fixes"] if "ckptdoctor repair " in fix]
    assert fixes and all("`ckptdoctor repair --verify " in fix or "repair --undo" in fix for fix in fixes)
    assert [item for item in cli("repair", "--dry-run", "--json", str(manager)).json["plan"] if item["action"] != "keep"] == []
    done = cli("repair", "--verify", "--yes", "--min-age", "0", str(manager))
    assert done.exit_code == 0 and "does not pass verify" in done.stderr + done.stdout
    assert "Resume from save 3" in done.stdout and "ckpt-4" not in done.stdout.split("Resume from")[-1]  # the one it kept
    after = restored(manager)
    assert (after["latest"], after["error"], after["step"]) == (str(manager / "ckpt-3"), None, 3)
    assert "--verify" not in " ".join(fix for f in cli("inspect", "--json", str(manager)).json["findings"] for fix in f["fixes"])


def flipped(folder: Path, prefix: str, offsets: list[int]) -> Path:
    """``folder`` with one bit of ``prefix``'s data shard flipped at each of ``offsets``: the length stays."""
    shard = folder / f"{prefix}.data-00000-of-00001"
    data = bytearray(shard.read_bytes())
    for offset in offsets:
        data[offset] ^= 0x01
    shard.write_bytes(bytes(data))
    return folder


def test_a_flipped_bit_in_any_tensor_fails_verify_as_it_fails_tensorflows_restore(manager: Path, tmp_path: Path) -> None:
    # the string tensor that holds the object graph is most of the shard: its length varint, the
    # checksum of its lengths and its bytes are each checksummed otherwise than a float's bytes
    _, entries = tfbundle.bundle_entries((manager / "ckpt-4.index").read_bytes()) or (0, [])
    by_key = {entry.key: entry for entry in entries}
    graph, step = by_key["_CHECKPOINTABLE_OBJECT_GRAPH"], by_key["step/.ATTRIBUTES/VARIABLE_VALUE"]
    weights = next(e for e in entries if e.dtype == "float32" and e.size >= 64)
    shard = (manager / "ckpt-4.data-00000-of-00001").read_bytes()
    varint = 1 + next(i for i, byte in enumerate(shard[graph.offset :]) if not byte & 0x80)
    where = {
        "graph-length": graph.offset,
        "graph-length-checksum": graph.offset + varint,
        "graph-bytes": graph.offset + graph.size - 1,
        "step": step.offset,
        "weights": weights.offset + 5,
    }
    folders = {what: flipped(Path(shutil.copytree(manager, tmp_path / what)), "ckpt-4", [offset]) for what, offset in where.items()}
    said = dict(zip(folders, restorations(list(folders.values())), strict=True))
    for what, folder in folders.items():
        assert "does not match" in str(said[what]["error"]), (what, said[what])  # TensorFlow refuses the save
        assert found_in(folder) == [], what  # every length is right: inspect cannot tell
        for deep in (False, True):
            report, found = verify([str(folder)], VerifyOptions(deep=deep))
            assert ("CKD206", 4) in [(f.code, f.index) for f in report.findings], (what, deep)
            assert found.runs[0].resume.index == 3, (what, deep)
    assert restored(manager)["error"] is None
    assert found_in(manager, deep=True) == []


def test_variant_and_string_tensors_are_checked_as_tensorflow_checks_them(tf_runs: Path, tmp_path: Path) -> None:
    written = Path(shutil.copytree(tf_runs / "iterator", tmp_path / "iterator"))
    _, entries = tfbundle.bundle_entries((written / "ckpt.index").read_bytes()) or (0, [])
    assert {e.dtype for e in entries} == {"string", "variant"}
    report, _ = verify([str(written)], VerifyOptions())
    assert report.findings == ()  # the checksums computed match the ones TensorFlow recorded
    variant = next(e for e in entries if e.dtype == "variant")
    names = next(e for e in entries if e.key.startswith("names/"))
    folders = [
        flipped(Path(shutil.copytree(written, tmp_path / str(offset))), "ckpt", [offset])
        for offset in (variant.offset + 100, variant.offset + variant.size - 1, names.offset, names.offset + names.size - 1)
    ]
    said = restorations([written / "ckpt", *(folder / "ckpt" for folder in folders)], _READ_ITERATOR)
    assert said[0] == {"names": ["a", "bb", "ccc"], "error": None}
    for folder, result in zip(folders, said[1:], strict=True):
        assert "does not match" in str(result["error"]), result
        report, _ = verify([str(folder)], VerifyOptions())
        assert "CKD206" in [f.code for f in report.findings], folder


def test_a_state_file_naming_a_deleted_save_or_none_is_a_stale_pointer(manager: Path, cli) -> None:
    state = manager / "checkpoint"
    state.write_text(state.read_text().replace('"ckpt-4"', '"ckpt-9"'))
    assert ("CKD113", 9) in found_in(manager)
    assert restored(manager)["step"] == 0  # latest_checkpoint is None: TensorFlow silently starts afresh
    assert cli("repair", "--yes", "--min-age", "0", str(manager)).exit_code == 0
    assert restored(manager)["step"] == 4
    state.unlink()
    assert any(code == "CKD113" for code, _ in found_in(manager))
    assert cli("repair", "--yes", "--min-age", "0", str(manager)).exit_code == 0
    assert restored(manager)["step"] == 4


def test_what_a_killed_save_leaves_is_staging_and_repair_moves_it_aside(manager: Path, cli) -> None:
    temp = manager / "ckpt-5_temp"
    temp.mkdir()
    (temp / "part-00000-of-00001.data-00000-of-00001.tempstate15889886598725582139").write_bytes(b"\0" * 4096)
    (manager / "checkpoint.tmp0a1b2c3d4e5f60718293a4b5c6d7e8f9").write_text('model_checkpoint_path: "ckpt-5"\n')
    assert [code for code, _ in found_in(manager)].count("CKD202") == 2
    assert only_run(manager).resume.index == 4
    assert cli("repair", "--yes", "--min-age", "0", str(manager)).exit_code == 0
    assert not temp.exists()
    assert found_in(manager) == []
    assert restored(manager)["step"] == 4


def test_a_sharded_bundle_needs_every_shard_its_index_counts(tf_runs: Path, tmp_path: Path, cli) -> None:
    sharded = Path(shutil.copytree(tf_runs / "sharded", tmp_path / "sharded"))
    shards = sorted(sharded.glob("weights.data-*"))
    assert len(shards) > 1, "the sharding policy should have split the bundle"
    assert cli("verify", "--deep", "--load", str(sharded)).exit_code == 0  # written, not saved: no state file is due
    shards[-1].unlink()
    assert ("CKD105", 0) in found_in(sharded)


def test_bundles_written_under_a_template_are_indexed_by_its_number_and_need_no_state_file(tf_runs: Path, cli) -> None:
    run = only_run(tf_runs / "written")
    assert (run.layout, [c.index for c in run.checkpoints]) == ("tensorflow", [1, 2])
    assert run.resume_path == str(tf_runs / "written" / "cp-0002.ckpt")
    assert cli("verify", str(tf_runs / "written")).exit_code == 0


def test_prune_keeps_what_tensorflow_restores(manager: Path, cli) -> None:
    assert cli("prune", "--keep-last", "1", "--yes", "--min-age", "0", str(manager)).exit_code == 0
    assert sorted(p.name for p in manager.glob("ckpt-*.index")) == ["ckpt-4.index"]
    assert restored(manager)["step"] == 4


def test_an_index_with_bad_handles_or_varints_is_malformed_never_a_traceback() -> None:
    footer = b"\xff" * 40 + tfbundle.MAGIC
    for data in (footer, b"\0" * 10 + footer, b"\x80" * 60 + tfbundle.MAGIC, tfbundle.MAGIC):
        report = tfbundle.read_index(BytesSample(data))
        assert [issue.problem for issue in report.issues] in ([Problem.MALFORMED], [Problem.TRUNCATED]), data
