"""Keras 3 runs (``ModelCheckpoint`` ``.keras`` and ``.weights.h5`` files), made and loaded by real Keras.

The runs are written by Keras 3.15 on tensorflow-cpu 2.21 in a subprocess, and each verdict is
checked against Keras itself: ``keras.models.load_model`` of the resume point restores the
optimizer's step count, and refuses the ``Lambda`` layers CKD404 reports. A killed save is made
by libhdf5 itself (h5py, the file never closed: the process exits first), and a cut copy by
truncating a real file; ``keras/src/saving/saving_lib.py`` (``save_model``) writes in place, so
neither leaves a temporary name.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest
from _frameworks_subprocess import run_python

from ckptdoctor.model import Problem, Status
from ckptdoctor.pipelines.scan import inspect
from ckptdoctor.pipelines.verify import verify
from ckptdoctor.readers import hdf5, keras
from ckptdoctor.readers._sample import BytesSample

pytest.importorskip("tensorflow", reason="needs tensorflow-cpu with Keras 3 (pip install -e '.[tensorflow]')")
h5py = pytest.importorskip("h5py")

STEPS_PER_EPOCH = 4

_MAKE = r"""
import os, sys, numpy as np, keras
out = sys.argv[1]
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer="adam", loss="mse")
x, y = np.random.rand(32, 4).astype("float32"), np.random.rand(32, 2).astype("float32")
callbacks = [
    keras.callbacks.ModelCheckpoint(out + "/models/ep{epoch:02d}-{loss:.3f}.keras"),
    keras.callbacks.ModelCheckpoint(out + "/weights/weights.{epoch:02d}-{loss:.2f}.weights.h5", save_weights_only=True),
    keras.callbacks.ModelCheckpoint(out + "/best/best.keras", save_best_only=True, monitor="loss"),
]
model.fit(x, y, epochs=3, batch_size=8, callbacks=callbacks, verbose=0)
class Killed(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 2:
            raise RuntimeError("killed after the backup of epoch 3")
backed = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
backed.compile(optimizer="adam", loss="mse")
backup = keras.callbacks.BackupAndRestore(out + "/backup", double_checkpoint=True)
try:
    backed.fit(x, y, epochs=5, batch_size=8, callbacks=[backup, Killed()], verbose=0)
except RuntimeError:
    pass
os.makedirs(out + "/sharded")
wide = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64), keras.layers.Dense(64), keras.layers.Dense(1)])
wide.compile(optimizer="adam", loss="mse")
wide.fit(np.zeros((4, 64), "float32"), np.zeros((4, 1), "float32"), verbose=0)
wide.save_weights(out + "/sharded/model.weights.json", max_shard_size=0.00002)  # GB: about 20 KB a shard
lam = keras.Sequential([keras.Input((4,)), keras.layers.Lambda(lambda t: t * 2), keras.layers.Dense(2)])
os.makedirs(out + "/lambda")
lam.save(out + "/lambda/ep01.keras")
lam.save(out + "/lambda/legacy-01.h5")
"""

_LOAD = r"""
import sys, json, keras
error, iterations = None, None
try:
    model = keras.models.load_model(sys.argv[1])
    iterations = int(model.optimizer.iterations.numpy())
except Exception as caught:
    error = str(caught)
print(json.dumps({"error": error, "iterations": iterations}))
"""

_RESUME_BACKUP = r"""
import sys, json, numpy as np, keras
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer="adam", loss="mse")
begun = []
class Record(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        begun.append(epoch)
x, y = np.random.rand(32, 4).astype("float32"), np.random.rand(32, 2).astype("float32")
model.fit(x, y, epochs=5, batch_size=8, verbose=0,
          callbacks=[keras.callbacks.BackupAndRestore(sys.argv[1], double_checkpoint=True, delete_checkpoint=False), Record()])
print(json.dumps({"first_epoch": begun[0] if begun else None}))
"""

_NEVER_CLOSED = r"""
import os, sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "w")
for i in range(8):
    f.create_dataset(f"layers/dense_{i}/vars/0", data=np.ones((256, 256), "float32"))
f.create_dataset("optimizer/vars/0", data=np.int64(3))
os._exit(0)  # killed before close: libhdf5 never writes the final end-of-file address
"""


def loaded(path: Path) -> dict[str, object]:
    """What ``keras.models.load_model`` makes of ``path``: the optimizer's step count, or its error."""
    result: dict[str, object] = json.loads(run_python(_LOAD, str(path)).splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def keras_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("keras")
    run_python(_MAKE, str(root))
    return root


@pytest.fixture
def models(keras_runs: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(keras_runs / "models", tmp_path / "models"))


def only_run(folder: Path):  # type: ignore[no-untyped-def]
    _, found = inspect([str(folder)])
    (run,) = found.runs
    return run


def codes(folder: Path) -> list[tuple[str, int | None]]:
    report, _ = verify([str(folder)])
    return [(f.code, f.index) for f in report.findings]


def test_model_checkpoint_files_are_keras_saves_by_epoch_clean_under_deep_verify(models: Path, cli) -> None:
    run = only_run(models)
    assert run.layout == "keras"
    assert [c.index for c in run.checkpoints] == [1, 2, 3]  # the loss in the name is no index
    assert run.resume.files[0].name.startswith("ep03-")
    result = cli("verify", "--deep", "--load", str(models))
    assert result.exit_code == 0, result.stdout
    assert "CKD205" not in result.stdout  # a .keras archive is no "zip archive, not a torch checkpoint"
    assert loaded(Path(run.resume_path))["iterations"] == 3 * STEPS_PER_EPOCH


def test_weights_files_hold_the_optimizer_too(keras_runs: Path, cli) -> None:
    folder = keras_runs / "weights"
    report, found = verify([str(folder)])
    (run,) = found.runs
    assert [c.index for c in run.checkpoints] == [1, 2, 3]
    assert report.findings == ()
    newest = run.checkpoints[-1].files[0].report
    assert "optimizer" in newest.keys and "layers" in newest.keys
    assert any(t.name == "optimizer.vars.0" and t.dtype == "int64" for t in newest.tensors or ())  # `iterations`
    assert cli("verify", "--deep", "--load", str(folder)).exit_code == 0


def test_a_cut_newest_save_falls_back_and_keras_loads_the_one_named(models: Path) -> None:
    newest = sorted(models.glob("ep03-*.keras"))[0]
    os.truncate(newest, newest.stat().st_size // 2)
    report, found = inspect([str(models)])
    assert ("CKD203", 3) in [(f.code, f.index) for f in report.findings]
    run = found.runs[0]
    assert (run.resume.index, run.checkpoints[-1].status) == (2, Status.PARTIAL)
    assert "Please ensure the file is an accessible `.keras` zip file" in loaded(newest)["error"]  # what the finding quotes
    assert loaded(Path(run.resume_path))["iterations"] == 2 * STEPS_PER_EPOCH


def test_a_weights_file_whose_save_was_killed_is_never_closed(tmp_path: Path, keras_runs: Path) -> None:
    folder = Path(shutil.copytree(keras_runs / "weights", tmp_path / "weights"))
    newest = sorted(folder.glob("weights.03-*"))[0]
    newest.unlink()
    run_python(_NEVER_CLOSED, str(newest))
    report, found = inspect([str(folder)])
    (finding,) = [f for f in report.findings if f.code == "CKD203"]
    assert finding.index == 3 and "never closed" in finding.message
    assert found.runs[0].resume.index == 2
    with pytest.raises(OSError, match="bad object header version number"):
        h5py.File(newest, "r")  # what libhdf5 says of it, as the finding quotes


def test_a_weights_file_cut_short_says_what_libhdf5_says(tmp_path: Path, keras_runs: Path) -> None:
    folder = Path(shutil.copytree(keras_runs / "weights", tmp_path / "weights"))
    newest = sorted(folder.glob("weights.03-*"))[0]
    os.truncate(newest, newest.stat().st_size - 100)
    report, _ = inspect([str(folder)])
    (finding,) = [f for f in report.findings if f.code == "CKD203"]
    assert "truncated file" in finding.message
    with pytest.raises(OSError, match="truncated file"):
        h5py.File(newest, "r")


def resumed_backup(folder: Path) -> int:
    """The epoch (0-based) at which ``fit`` with ``BackupAndRestore(folder)`` goes on."""
    first: int = json.loads(run_python(_RESUME_BACKUP, str(folder)).splitlines()[-1])["first_epoch"]
    return first


def test_a_backup_folder_is_indexed_by_the_epoch_its_metadata_records(keras_runs: Path, tmp_path: Path, cli) -> None:
    backup = Path(shutil.copytree(keras_runs / "backup", tmp_path / "backup"))
    run = only_run(backup)
    assert (run.layout, [c.index for c in run.checkpoints]) == ("keras", [2, 3])  # .bkp: the previous pair
    assert run.resume.index == 3 and run.resume.files[0].name == "latest.weights.h5"
    assert cli("verify", "--deep", str(backup)).exit_code == 0
    assert resumed_backup(backup) == 3  # Keras goes on at epoch index 3: after the 3 epochs recorded


def test_a_cut_backup_falls_back_to_its_previous_pair_as_keras_does(keras_runs: Path, tmp_path: Path) -> None:
    backup = Path(shutil.copytree(keras_runs / "backup", tmp_path / "backup"))
    os.truncate(backup / "latest.weights.h5", 3000)
    run = only_run(backup)
    assert (run.checkpoints[-1].status, run.resume.index) == (Status.PARTIAL, 2)
    assert resumed_backup(backup) == 2  # on_train_begin's OSError fallback: the .bkp pair


def test_repair_and_prune_leave_the_pair_keras_falls_back_from(keras_runs: Path, tmp_path: Path, cli) -> None:
    backup = Path(shutil.copytree(keras_runs / "backup", tmp_path / "backup"))
    os.truncate(backup / "latest.weights.h5", 3000)
    before = sorted(p.name for p in backup.iterdir())
    assert cli("repair", "--yes", "--min-age", "0", str(backup)).exit_code == 0
    assert cli("prune", "--yes", "--min-age", "0", "--keep-last", "1", str(backup)).exit_code == 0
    assert sorted(p.name for p in backup.iterdir() if p.name != ".ckptdoctor") == before
    assert resumed_backup(backup) == 2  # Keras still finds the damaged weights and falls back by itself


@pytest.mark.parametrize("damage", ["empty progress record", "weights gone"])
def test_a_newest_backup_keras_cannot_fall_back_from_is_an_unsafe_auto_resume(keras_runs: Path, tmp_path: Path, damage: str) -> None:
    backup = Path(shutil.copytree(keras_runs / "backup", tmp_path / "backup"))
    if damage == "empty progress record":
        (backup / "training_metadata.json").write_bytes(b"")  # killed after open("w"): Keras' json.loads fails, no fallback
    else:
        (backup / "latest.weights.h5").unlink()  # Keras then goes on at epoch 3 with fresh weights
    report, found = inspect([str(backup)])
    assert ("CKD114", 3) in [(f.code, f.index) for f in report.findings]
    assert found.runs[0].resume.index == 2
    # the fix CKD114 gives a BackupAndRestore folder: the .bkp pair over the newest, as Keras does itself
    shutil.copy(backup / "latest.weights.h5.bkp", backup / "latest.weights.h5")
    shutil.copy(backup / "training_metadata.json.bkp", backup / "training_metadata.json")
    assert resumed_backup(backup) == 2


def test_a_sharded_save_is_one_save_never_pruned_as_epochs(keras_runs: Path, tmp_path: Path, cli) -> None:
    sharded = Path(shutil.copytree(keras_runs / "sharded", tmp_path / "sharded"))
    shards = sorted(p.name for p in sharded.glob("model_*.weights.h5"))
    assert len(shards) > 1, "the shard size should have split the save"
    _, found = inspect([str(sharded)])
    assert not any(c.index > 0 for run in found.runs for c in run.checkpoints)
    assert cli("prune", "--yes", "--min-age", "0", "--keep-last", "1", str(sharded)).exit_code in (0, 1)
    assert sorted(p.name for p in sharded.glob("model_*.weights.h5")) == shards


def test_a_lambda_layer_is_code_keras_refuses_in_safe_mode(keras_runs: Path) -> None:
    folder = keras_runs / "lambda"
    report, _ = verify([str(folder)])
    flagged = {f.path.rsplit("/", 1)[-1] for f in report.findings if f.code == "CKD404"}
    assert flagged == {"ep01.keras", "legacy-01.h5"}
    for name in flagged:
        assert "Lambda" in loaded(folder / name)["error"]  # CKD404's messages: what Keras says when it refuses


def test_without_h5py_verify_checks_the_superblock_and_says_so(keras_runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hdf5, "_h5py", lambda: None)
    report, found = verify([str(keras_runs / "weights")])
    assert {f.code for f in report.findings} == {"CKD213"}
    assert found.runs[0].resume.index == 3  # nothing wrong was found: it stays the resume point


def test_a_best_only_file_stands_for_a_save_and_alone_is_a_keras_run(keras_runs: Path) -> None:
    best = keras_runs / "best" / "best.keras"
    _, found = inspect([str(best)])
    (run,) = found.runs
    assert run.layout == "keras" and run.resume is not None


def test_a_keras_archive_without_its_weights_is_malformed() -> None:
    archive = keras_archive(members={"metadata.json": b"{}", "config.json": b"{}"})
    report = keras.read_whole(BytesSample(archive))
    assert [i.problem for i in report.issues] == [Problem.MALFORMED]
    assert "model.weights.h5" in report.issues[0].detail


def keras_archive(members: dict[str, bytes]) -> bytes:
    """A zip laid out as ``saving_lib._save_model_to_fileobj`` writes one (stored members, in order)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()
