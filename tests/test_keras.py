"""Keras 3 runs (``ModelCheckpoint`` ``.keras`` and ``.weights.h5`` files), made and loaded by real Keras.

The runs are written by Keras 3.15 on tensorflow-cpu 2.21 in a subprocess, and each verdict is
checked against Keras itself: ``keras.models.load_model`` of the resume point restores the
optimizer's step count, and refuses the ``Lambda`` layers CKD404 reports. A killed save is made
by libhdf5 itself (h5py, the file never closed: the process exits first), and a cut copy by
truncating a real file; ``keras/src/saving/saving_lib.py`` (``save_model``) writes in place, so
neither leaves a temporary name.
"""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import re
import shutil
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from _frameworks_subprocess import run_python
from reports import codes

from ckptdoctor.model import Problem, Report, Role, Status
from ckptdoctor.pipelines.scan import inspect
from ckptdoctor.pipelines.verify import VerifyOptions, verify
from ckptdoctor.readers import hdf5, keras
from ckptdoctor.readers.sample import BytesSample

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
for folder, double in (("backup", True), ("single", False)):  # BackupAndRestore's default keeps one pair
    backed = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    backed.compile(optimizer="adam", loss="mse")
    try:
        backed.fit(x, y, epochs=5, batch_size=8, callbacks=[keras.callbacks.BackupAndRestore(out + "/" + folder, double_checkpoint=double), Killed()], verbose=0)
    except RuntimeError:
        pass
from keras.src.saving import saving_lib
os.makedirs(out + "/npz")
saving_lib.save_model(model, out + "/npz/ep03.keras", weights_format="npz")  # NpzIOStore's weights
os.makedirs(out + "/sharded")
wide = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64), keras.layers.Dense(64), keras.layers.Dense(1)])
wide.compile(optimizer="adam", loss="mse")
wide.fit(np.zeros((4, 64), "float32"), np.zeros((4, 1), "float32"), verbose=0)
wide.save_weights(out + "/sharded/model.weights.json", max_shard_size=0.00002)  # GB: about 20 KB a shard
lam = keras.Sequential([keras.Input((4,)), keras.layers.Lambda(lambda t: t * 2), keras.layers.Dense(2)])
os.makedirs(out + "/lambda")
lam.save(out + "/lambda/ep01.keras")
lam.save(out + "/lambda/legacy-01.h5")
# issue 31, item 3: a legacy model whose Lambda creates a file when it runs (as it does on every call,
# the save's included: the test removes the file before loading)
live = eval(f"lambda t: (open({out + '/lambda-ran'!r}, 'a').close(), t)[1]")
os.makedirs(out + "/canary")
keras.Sequential([keras.Input((4,)), keras.layers.Lambda(live), keras.layers.Dense(2)]).save(out + "/canary/legacy-01.h5")
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

_LOAD_UNSAFE = r"""
import os, sys, json
os.environ["KERAS_BACKEND"] = sys.argv[2]
import keras
refused = None
try:
    keras.saving.load_model(sys.argv[1])
except Exception as caught:
    refused = str(caught)
model = keras.saving.load_model(sys.argv[1], safe_mode=False)
print(json.dumps({"refused": refused, "layers": [type(layer).__name__ for layer in model.layers]}))
"""

_TORCH_WRAPPED = r"""
import os, sys
os.environ["KERAS_BACKEND"] = "torch"
import keras, torch
keras.utils.set_random_seed(0)
wrapped = keras.layers.TorchModuleWrapper(torch.nn.Linear(3, 2), output_shape=(None, 2))
model = keras.Sequential([keras.Input((3,)), wrapped])
model.compile(optimizer="adam", loss="mse")
model.fit(torch.rand(8, 3), torch.rand(8, 2), epochs=1, verbose=0)
model.save(sys.argv[1])
"""

_TORCH_FOLDERS = r"""
import os, sys
os.environ["KERAS_BACKEND"] = "torch"
import keras, torch
keras.utils.set_random_seed(0)
dense = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
wrapped = keras.Sequential([keras.Input((3,)), keras.layers.TorchModuleWrapper(torch.nn.Linear(3, 2), output_shape=(None, 2))])
for name, model in (("dense_model", dense), ("wrapped_model", wrapped)):
    model.compile(optimizer="adam", loss="mse")
    model.fit(torch.rand(8, 3), torch.rand(8, 2), epochs=1, verbose=0)
    model.save(os.path.join(sys.argv[1], name), zipped=False)  # a folder: config.json, metadata.json, model.weights.h5
live = eval(f"lambda t: (open({os.path.join(sys.argv[1], 'lambda-ran')!r}, 'a').close(), t)[1]")  # runs on every call
keras.Sequential([keras.Input((3,)), keras.layers.Lambda(live)]).save(os.path.join(sys.argv[1], "lambda_model"), zipped=False)
"""

_LOAD_FOLDER_UNSAFELY = r"""
import os, sys
os.environ["KERAS_BACKEND"] = "torch"
import keras
try:
    keras.saving.load_model(sys.argv[1], safe_mode=False)
except Exception:
    pass  # the payload ran while the layer was built; what it returned is no module
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


def test_a_flipped_byte_in_a_keras_member_fails_verify_as_it_fails_load_model(models: Path) -> None:
    """`load_model` reads each member through zipfile, which checks its CRC-32: so does `verify`,
    not only `verify --deep`; inspect, which reads no member whole, cannot tell."""
    newest = sorted(models.glob("ep03-*.keras"))[0]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside model.weights.h5, stored
    newest.write_bytes(bytes(data))
    assert "Bad CRC-32" in str(loaded(newest)["error"])
    assert ("CKD206", 3) in codes(verify([str(models)])[0], index=True)
    _, found = verify([str(models)])
    assert found.runs[0].resume.index == 2


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


_RESUMES = r"""
import sys, os, json, shutil, tempfile, numpy as np, keras
folders, references = json.loads(sys.argv[1]), json.loads(sys.argv[2])
x, y = np.random.rand(32, 4).astype("float32"), np.random.rand(32, 2).astype("float32")
def build():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    return model
def saved(path):
    copy = os.path.join(tempfile.mkdtemp(), "saved.weights.h5")  # load_weights goes by the suffix
    shutil.copy(path, copy)
    model = build()
    model.optimizer.build(model.trainable_variables)
    model.load_weights(copy)
    return [v.numpy() for v in model.weights]
known = {name: saved(path) for name, path in references.items()}
same = lambda a, b: all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
class Begun(Exception):
    pass
results = {}
for folder in folders:
    model, seen = build(), {}
    initial = [v.numpy().copy() for v in model.weights]
    class Record(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen["weights"] = [v.numpy().copy() for v in self.model.weights]  # after BackupAndRestore's
        def on_epoch_begin(self, epoch, logs=None):
            seen["epoch"] = epoch
            raise Begun()  # stop before the first save: the folder stays as it was found
    backup = keras.callbacks.BackupAndRestore(folder, double_checkpoint=True, delete_checkpoint=False)
    try:
        model.fit(x, y, epochs=5, batch_size=8, verbose=0, callbacks=[backup, Record()])
    except Begun:
        pass
    except Exception as error:
        results[folder] = {"error": f"{type(error).__name__}: {error}"}
        continue
    weights = next((name for name, w in known.items() if same(seen["weights"], w)), None)
    results[folder] = {"epoch": seen["epoch"], "weights": weights or ("fresh" if same(seen["weights"], initial) else "other")}
print(json.dumps(results))
"""

WEIGHTS, RECORD = "latest.weights.h5", "training_metadata.json"
EPOCHS_DONE = 3  # the backups were made when the run was killed after its third epoch


def keras_resumes(folders: dict[str, Path], keras_runs: Path) -> dict[str, dict[str, object]]:
    """What ``fit`` with ``BackupAndRestore`` makes of each folder, in one Keras process: the epoch
    (0-based) it goes on at and whose weights it starts from (a pristine save's, ``fresh``), or
    the error it fails with."""
    references = {
        "single": keras_runs / "single" / WEIGHTS,
        "newest": keras_runs / "backup" / WEIGHTS,
        "previous": keras_runs / "backup" / f"{WEIGHTS}.bkp",
    }
    out = run_python(_RESUMES, json.dumps([str(path) for path in folders.values()]), json.dumps({k: str(v) for k, v in references.items()}))
    by_path = json.loads(out.splitlines()[-1])
    return {name: by_path[str(path)] for name, path in folders.items()}


def _gone(name: str) -> Callable[[Path], None]:
    return lambda folder: (folder / name).unlink()


def _emptied(name: str) -> Callable[[Path], None]:
    return lambda folder: os.truncate(folder / name, 0)


def _halved(name: str) -> Callable[[Path], None]:
    return lambda folder: os.truncate(folder / name, (folder / name).stat().st_size // 2)


def _all(*damages: Callable[[Path], None]) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        for one in damages:
            one(folder)

    return damage


BROKEN_BACKUPS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "weights gone": ("single", _gone(WEIGHTS)),
    "record gone": ("single", _gone(RECORD)),
    "weights cut": ("single", _halved(WEIGHTS)),
    "weights emptied, previous pair there": ("backup", _emptied(WEIGHTS)),
    "record gone, previous pair there": ("backup", _gone(RECORD)),
    "weights gone, previous pair there": ("backup", _gone(WEIGHTS)),
    "weights cut, previous record gone": ("backup", _all(_halved(WEIGHTS), _gone(f"{RECORD}.bkp"))),
}


def _code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def _followed(report: Report, folder: Path, starts: str) -> None:
    """Runs, in a shell, the one command of the run's resume line or fixes that starts with ``starts``
    and names ``folder``."""
    texts = [run.resume_how or "" for run in report.runs] + [text for finding in report.findings for text in finding.fixes]
    commands = {span for text in texts for span in _code_spans(text) if span.startswith(starts) and str(folder) in span}
    if len(commands) == 1:  # where none is printed, the folder stays broken, and the test that asks says so
        subprocess.run(["sh", "-c", commands.pop()], check=True)


@pytest.fixture(scope="module")
def broken_backups(keras_runs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Report, dict[str, object]]]:
    """Each way of breaking a ``BackupAndRestore`` folder, with ckptdoctor's report on it and what
    Keras' own resume then makes of it; and the fixes ckptdoctor prints, followed (``… fixed``),
    each with what Keras makes of the folder then. Keras runs last, on folders ckptdoctor has
    judged already (its fallback rewrites the folder)."""
    root = tmp_path_factory.mktemp("broken-backups")
    folders: dict[str, Path] = {}
    for name, (base, damage) in BROKEN_BACKUPS.items():
        folders[name] = Path(shutil.copytree(keras_runs / base, root / name.replace(" ", "-").replace(",", "")))
        damage(folders[name])
    for name, command in (
        ("record gone, previous pair there", "cp -- "),  # the resume line: the previous pair in the newest's place
        ("weights gone, previous pair there", "cp -- "),
        ("weights gone", "rm -- "),  # CKD102's: start over, knowingly
    ):
        fixed = folders[f"{name} fixed"] = Path(shutil.copytree(folders[name], folders[name].with_name(folders[name].name + "-fixed")))
        _followed(verify([str(fixed)])[0], fixed, command)
    for name, record, epochs in (
        ("record gone", RECORD, EPOCHS_DONE),
        ("weights cut, previous record gone", f"{RECORD}.bkp", EPOCHS_DONE - 1),
    ):
        # CKD106's fix, with the epochs the test knows, into the record it names
        fixed = folders[f"{name} fixed"] = Path(shutil.copytree(folders[name], folders[name].with_name(folders[name].name + "-fixed")))
        fixes = [text for f in verify([str(fixed)])[0].findings if f.code == "CKD106" for text in f.fixes]
        if any(f"{fixed}/{record} (`" in text for text in fixes):
            (fixed / record).write_text(json.dumps({"epoch": epochs, "batch": 0}))
    reports = {name: verify([str(folder)])[0] for name, folder in folders.items()}
    resumed = keras_resumes(folders, keras_runs)
    return {name: (reports[name], resumed[name]) for name in folders}


def _fixes(report: Report, code: str) -> list[str]:
    return [text for finding in report.findings if finding.code == code for text in finding.fixes]


def test_a_backup_without_its_weights_is_a_run_keras_resumes_with_fresh_weights(broken_backups) -> None:  # type: ignore[no-untyped-def]
    report, keras_did = broken_backups["weights gone"]
    assert keras_did == {"epoch": EPOCHS_DONE, "weights": "fresh"}  # no error, no word: fresh weights at epoch 3
    (run,) = report.runs
    assert run.layout == "keras" and run.resume is None  # found, and nothing in it to resume from
    assert [(c.index, c.status) for c in run.checkpoints] == [(EPOCHS_DONE, Status.INCOMPLETE)]
    codes = {(f.code, f.index) for f in report.findings}
    assert {("CKD102", EPOCHS_DONE), ("CKD114", EPOCHS_DONE), ("CKD110", None)} <= codes
    (missing,) = [f for f in report.findings if f.code == "CKD102"]
    assert f"({WEIGHTS})" in missing.message and f"goes on after epoch {EPOCHS_DONE} with freshly initialised weights" in missing.message
    assert not any(".bkp" in text for text in _fixes(report, "CKD114")), "no .bkp copy to put back: double_checkpoint was off"
    assert broken_backups["weights gone fixed"][1] == {"epoch": 0, "weights": "fresh"}  # CKD102's `rm` followed: a fresh start, told


def test_a_backup_without_its_record_is_no_resume_point_keras_starts_at_epoch_0(broken_backups) -> None:  # type: ignore[no-untyped-def]
    report, keras_did = broken_backups["record gone"]
    assert keras_did == {"epoch": 0, "weights": "single"}  # the saved weights, counted from epoch 0 again
    (run,) = report.runs
    assert run.resume is None and not run.resume_how  # no "goes on after epoch 1"
    assert run.checkpoints[0].status is Status.INCOMPLETE and run.checkpoints[0].missing == (Role.METADATA,)
    (missing,) = [f for f in report.findings if f.code == "CKD106"]
    assert f"({RECORD})" in missing.message and "goes on from epoch 0" in missing.message
    assert any('{"epoch": 3, "batch": 0}' in text for text in missing.fixes)
    assert ("CKD114", 0) in {(f.code, f.index) for f in report.findings}
    # the fix followed, with the number of epochs the test knows: Keras goes on after them, with the saved weights
    assert broken_backups["record gone fixed"][1] == {"epoch": EPOCHS_DONE, "weights": "single"}


def test_a_fallback_to_a_previous_save_without_its_record_starts_at_epoch_0(broken_backups) -> None:  # type: ignore[no-untyped-def]
    """The newest weights cut, the ``.bkp`` record gone: Keras copies the ``.bkp`` weights over,
    deletes the newest record and goes on from epoch 0 with them."""
    report, keras_did = broken_backups["weights cut, previous record gone"]
    assert keras_did == {"epoch": 0, "weights": "previous"}
    assert report.runs[0].resume is None
    (missing,) = [f for f in report.findings if f.code == "CKD106"]
    assert missing.index == EPOCHS_DONE - 1 and f"({RECORD}.bkp)" in missing.message and "goes on from epoch 0" in missing.message
    assert broken_backups["weights cut, previous record gone fixed"][1] == {"epoch": EPOCHS_DONE - 1, "weights": "previous"}


@pytest.mark.parametrize("damage", ["record gone, previous pair there", "weights gone, previous pair there"])
def test_a_previous_pair_keras_does_not_fall_back_to_is_put_back_by_the_resume_line(broken_backups, damage: str) -> None:  # type: ignore[no-untyped-def]
    """Keras falls back to the ``.bkp`` pair only when the newest weights fail to load: with them
    gone, or the record gone, it goes on from the newest as it is. The resume line says to copy
    the previous pair over first, and Keras then goes on after its epoch with its weights."""
    report, keras_did = broken_backups[damage]
    assert keras_did == ({"epoch": 0, "weights": "newest"} if "record" in damage else {"epoch": EPOCHS_DONE, "weights": "fresh"})
    run = report.runs[0]
    assert run.resume is not None and run.resume.index == EPOCHS_DONE - 1
    assert run.resume_how is not None and f"goes on after epoch {EPOCHS_DONE - 1}" in run.resume_how
    assert broken_backups[f"{damage} fixed"][1] == {"epoch": EPOCHS_DONE - 1, "weights": "previous"}
    assert any(".bkp" in text for text in _fixes(report, "CKD114"))


@pytest.mark.parametrize(("damage", "code"), [("weights cut", "CKD203"), ("weights emptied, previous pair there", "CKD201")])
def test_a_broken_backup_file_is_never_offered_a_repair_that_leaves_it(broken_backups, damage: str, code: str) -> None:  # type: ignore[no-untyped-def]
    """``repair`` leaves BackupAndRestore's files where they are (and refuses a run with nothing to
    resume from), and moving one of them aside by hand changes what Keras resumes from (the
    weights alone gone: fresh weights): no fix of the file's finding moves it."""
    report, keras_did = broken_backups[damage]
    fixes = _fixes(report, code)
    assert fixes, report.findings
    assert not [span for text in fixes for span in _code_spans(text) if span.startswith(("ckptdoctor repair", "mkdir", "mv "))], fixes
    run = report.runs[0]
    if "previous" in damage:  # Keras copies the previous pair over by itself, as the resume line says
        assert keras_did == {"epoch": EPOCHS_DONE - 1, "weights": "previous"}
        assert run.resume_how is not None and f"copies {WEIGHTS}.bkp over it and goes on after epoch {EPOCHS_DONE - 1}" in run.resume_how
    else:
        assert "OSError" in str(keras_did.get("error")) and run.resume is None


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


def test_without_h5py_a_keras_archive_is_partly_checked_and_an_hdf5_file_cannot_be_checked(
    keras_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``.keras`` archive keeps its configuration in ``config.json``, read without h5py: only its
    weights member is left unread. A bare HDF5 file keeps a legacy model's configuration in its
    attributes, which only h5py reads, and ``load_model`` reads one whatever it is called
    (``.weights.h5`` too): it cannot be proven free of code (issue 31, item 3)."""
    monkeypatch.setattr(hdf5, "_h5py", lambda: None)
    report, found = verify([str(keras_runs / "best")])
    assert {f.code for f in report.findings} == {"CKD213"}
    assert found.runs[0].resume is not None  # nothing wrong was found: it stays the resume point
    report, _ = verify([str(keras_runs / "weights")])
    unchecked = [f for f in report.findings if f.code == "CKD404"]
    assert {f.path.rsplit("/", 1)[-1] for f in unchecked} == {p.name for p in (keras_runs / "weights").iterdir()}
    assert all(f.severity.value == "error" and f.message.startswith(f"{f.path.rsplit('/', 1)[-1]}: cannot check") for f in unchecked)
    assert all("pip install h5py" in f.message for f in unchecked)


_WITHOUT_H5PY = "import runpy, sys\nsys.modules['h5py'] = None  # as where it is not installed\nsys.argv[0] = 'ckptdoctor'\nrunpy.run_module('ckptdoctor', run_name='__main__')"


def test_without_h5py_a_legacy_model_with_a_live_lambda_is_never_clean(keras_runs: Path, tmp_path: Path) -> None:
    """Issue 31, item 3: verify without h5py read the superblock alone and passed a model whose
    Lambda runs when ``load_model(safe_mode=False)`` loads it (exit 0)."""
    folder = Path(shutil.copytree(keras_runs / "canary", tmp_path / "canary"))
    ran = keras_runs / "lambda-ran"
    ran.unlink(missing_ok=True)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_H5PY, "verify", "--json", str(folder)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root), "NO_COLOR": "1"},
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    findings = json.loads(done.stdout)["findings"]
    mine = [f for f in findings if (f["path"] or "").endswith("legacy-01.h5")]
    assert [(f["code"], f["severity"]) for f in mine] == [("CKD404", "error")], findings
    assert "cannot check" in mine[0]["message"] and "pip install h5py" in mine[0]["message"]
    assert not ran.exists(), "verify ran the Lambda"
    loaded_unsafely = json.loads(run_python(_LOAD_UNSAFE, str(folder / "legacy-01.h5"), "tensorflow").splitlines()[-1])
    assert "Lambda" in loaded_unsafely["refused"] and "Lambda" in loaded_unsafely["layers"]
    assert ran.exists(), "the payload is live: load_model(safe_mode=False) ran the Lambda"


def test_a_torch_module_wrapper_needs_full_unpickling_as_keras_loads_it(tmp_path: Path) -> None:
    """Issue 31, item 1: ``TorchModuleWrapper.get_config`` saves the module as base64 of
    ``torch.save(module)``, which ``from_config`` hands to ``torch.load(weights_only=False)``
    where ``safe_mode=False``. A real one, written by Keras on the torch backend, holds a whole
    ``nn.Module``: never clean, an error naming the field (its live payload twin is in
    ``sample_set``)."""
    pytest.importorskip("torch")
    path = tmp_path / "run" / "wrapped.keras"
    path.parent.mkdir()
    run_python(_TORCH_WRAPPED, str(path))
    loaded_unsafely = json.loads(run_python(_LOAD_UNSAFE, str(path), "torch").splitlines()[-1])
    assert "torch.nn.Module" in loaded_unsafely["refused"] and loaded_unsafely["layers"] == ["TorchModuleWrapper"]
    report, _ = verify([str(path.parent)])
    (finding,) = [f for f in report.findings if f.code == "CKD401"]
    assert finding.severity.value == "error" and finding.path.endswith("wrapped.keras")
    assert "config.json /config/layers/1/config/module" in finding.message
    assert "torch.load(weights_only=False)" in finding.message and "torch.nn.modules.linear.Linear" in finding.message


class _Touch:
    """Pickles as ``os.system("touch <canary>")``: what a ``torch.load`` of it runs."""

    def __init__(self, canary: Path) -> None:
        self.command = f"touch {canary}"

    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, (self.command,))


@pytest.fixture(scope="module")
def unzipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folders ``model.save(folder, zipped=False)`` writes on the torch backend: a healthy model's,
    a ``TorchModuleWrapper``'s and a live ``Lambda``'s (which creates ``lambda-ran`` when called)."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("unzipped")
    run_python(_TORCH_FOLDERS, str(root))
    return root


def test_an_unzipped_model_folder_is_judged_with_its_config_as_an_archive_is(unzipped: Path, tmp_path: Path, cli) -> None:
    """Issue 31, K16: ``model.save(folder, zipped=False)`` writes ``config.json`` beside
    ``model.weights.h5``, and ``keras.saving.load_model(folder, safe_mode=False)`` builds the
    model from it first. A ``TorchModuleWrapper``'s module put there ran on that load while
    ``verify`` never read the file and named the weights as the resume point (exit 0). A healthy
    folder stays clean, resumed from its weights as before."""
    healthy = Path(shutil.copytree(unzipped / "dense_model", tmp_path / "dense_model"))
    assert sorted(p.name for p in healthy.iterdir()) == ["assets", "config.json", "metadata.json", "model.weights.h5"]
    report, found = verify([str(healthy)])
    assert not report.findings and found.runs[0].resume_path == str(healthy / "model.weights.h5")
    assert cli("verify", "--resume-path", healthy).stdout.strip() == str(healthy / "model.weights.h5")
    iterations = loaded(healthy)["iterations"]  # keras.models.load_model(folder): the weights and the optimizer
    assert isinstance(iterations, int) and iterations > 0

    folder = Path(shutil.copytree(unzipped / "wrapped_model", tmp_path / "wrapped_model"))
    canary = tmp_path / "module-ran"
    config = json.loads((folder / "config.json").read_text())
    (layer,) = [layer for layer in config["config"]["layers"] if layer["class_name"] == "TorchModuleWrapper"]
    layer["config"]["module"] = base64.b64encode(pickle.dumps(_Touch(canary), protocol=2)).decode()
    (folder / "config.json").write_text(json.dumps(config))
    report, found = verify([str(folder)])
    (finding,) = [f for f in report.findings if f.code == "CKD401"]
    assert finding.severity.value == "error" and "config.json /config/layers/1/config/module" in finding.message
    assert "torch.load(weights_only=False)" in finding.message and "posix.system" in finding.message
    assert found.runs[0].resume is None
    refused = cli("verify", "--resume-path", folder)
    assert refused.exit_code == 1 and "model.weights.h5" not in refused.stdout
    assert not canary.exists(), "verify ran the payload"
    run_python(_LOAD_FOLDER_UNSAFELY, str(folder))
    assert canary.exists(), "the payload is live: load_model(folder, safe_mode=False) ran it"


def test_a_lambda_in_an_unzipped_model_folder_is_code_in_its_config(unzipped: Path) -> None:
    """Issue 31, K16: a ``Lambda``'s bytecode in the ``config.json`` of a folder Keras saved
    unzipped runs on ``load_model(folder, safe_mode=False)``: CKD404, as in a ``.keras`` archive."""
    folder, ran = unzipped / "lambda_model", unzipped / "lambda-ran"
    ran.unlink(missing_ok=True)  # the save called the Lambda
    report, found = verify([str(folder)])
    (finding,) = [f for f in report.findings if f.code == "CKD404"]
    assert finding.severity.value == "error" and "config.json holds Python bytecode" in finding.message
    assert found.runs[0].resume is None and not ran.exists()
    run_python(_LOAD_FOLDER_UNSAFELY, str(folder))
    assert ran.exists(), "the payload is live: load_model(folder, safe_mode=False) ran the Lambda"


def test_a_best_only_file_stands_for_a_save_and_alone_is_a_keras_run(keras_runs: Path) -> None:
    best = keras_runs / "best" / "best.keras"
    _, found = inspect([str(best)])
    (run,) = found.runs
    assert run.layout == "keras" and [c.status for c in run.checkpoints] == [Status.COMPLETE]


def test_a_folder_holding_one_best_only_save_is_a_run_resumed_from_it(keras_runs: Path, cli) -> None:
    """``ModelCheckpoint("best/best.keras", save_best_only=True)``: the folder holds that one save.
    Inspecting the file names the folder's run, and the folder is that run, resumed from the file
    ``keras.models.load_model`` loads with its optimizer's step count."""
    best = keras_runs / "best"
    shown = cli("inspect", best / "best.keras")
    assert shown.exit_code == 0 and "best.keras" in shown.stdout and "complete" in shown.stdout
    (folder,) = [span for span in re.findall(r"`ckptdoctor inspect ([^`]+)`", shown.stdout)]
    _, found = inspect([folder])
    (run,) = found.runs
    assert (run.layout, [c.index for c in run.checkpoints]) == ("keras", [0])
    assert run.resume_path == str(best / "best.keras") and "keras.models.load_model" in (run.resume_how or "")
    assert "initial_epoch=" in (run.resume_how or "") and "does not record" in (run.resume_how or "")
    iterations = loaded(best / "best.keras")["iterations"]
    assert isinstance(iterations, int) and iterations > 0 and iterations % STEPS_PER_EPOCH == 0


def test_a_best_only_save_beside_numbered_ones_stays_a_copy_of_one(models: Path) -> None:
    """Beside the numbered saves, ``best.keras`` is a copy of one of them: no save of its own,
    never counted among the epochs (``prune`` would rotate it away)."""
    shutil.copy(sorted(models.glob("ep02-*.keras"))[0], models / "best.keras")
    run = only_run(models)
    assert [c.index for c in run.checkpoints] == [1, 2, 3]
    assert [f.name for f in run.loose_files] == ["best.keras"]


def test_npz_weights_keras_writes_and_cannot_load_are_no_resume_point(keras_runs: Path) -> None:
    """``saving_lib.save_model(..., weights_format="npz")`` pickles each layer's dict of arrays,
    and ``NpzIOStore`` reads them with ``allow_pickle=False``: Keras 3.15 refuses its own file."""
    folder = keras_runs / "npz"
    refused = str(loaded(folder / "ep03.keras")["error"])
    assert "Object arrays cannot be loaded when allow_pickle=False" in refused
    for judge in (inspect, verify):
        report, found = judge([str(folder)])
        (run,) = found.runs
        assert run.resume is None and run.checkpoints[0].status is Status.CORRUPT
        (malformed,) = [f for f in report.findings if f.code == "CKD207"]
        assert "model.weights.npz" in malformed.message and "Object arrays cannot be loaded when allow_pickle=False" in malformed.message
        assert "torch" not in " ".join(f.message for f in report.findings)
    report, _ = verify([str(folder)])
    assert any(f.code == "CKD401" and "keras.src.backend.Variable" in f.message for f in report.findings)  # what unpickling would run


def test_a_crc_mismatch_in_a_keras_archive_says_what_keras_says(models: Path) -> None:
    newest = sorted(models.glob("ep03-*.keras"))[0]
    with zipfile.ZipFile(newest) as archive:
        member = archive.getinfo("model.weights.h5")
    data = bytearray(newest.read_bytes())
    name_length, extra_length = struct.unpack_from("<HH", data, member.header_offset + 26)  # the member's local header
    data[member.header_offset + 30 + name_length + extra_length + member.file_size // 2] ^= 0x01  # a flipped bit in the weights
    newest.write_bytes(bytes(data))
    report, found = verify([str(models)], VerifyOptions(deep=True))
    (mismatch,) = [f for f in report.findings if f.code == "CKD206"]
    assert "torch" not in mismatch.message and "Bad CRC-32 for file" in mismatch.message
    assert "Bad CRC-32 for file 'model.weights.h5'" in str(loaded(newest)["error"])  # Keras refuses it, as the finding says
    assert found.runs[0].resume.index == 2


def test_a_cut_save_of_a_run_with_nothing_to_resume_is_moved_aside_as_printed(models: Path, cli) -> None:
    """``repair`` refuses a run without a resume point (CKD110), so the cut file's fix moves it by
    hand, and the command it prints does just that."""
    for path in models.glob("*.keras"):
        if not path.name.startswith("ep01-"):
            path.unlink()
    (only,) = models.glob("ep01-*.keras")
    os.truncate(only, only.stat().st_size // 2)
    report, _ = inspect([str(models)])
    assert {f.code for f in report.findings} >= {"CKD110", "CKD203"}
    every = [text for finding in report.findings for text in finding.fixes]  # CKD110's own too
    assert not [span for text in every for span in _code_spans(text) if span.startswith("ckptdoctor repair")], every
    assert cli("repair", "--yes", "--min-age", "0", models).exit_code != 0  # what no fix promises any more
    fixes = [text for finding in report.findings if finding.code == "CKD203" for text in finding.fixes]
    (move,) = [span for text in fixes for span in _code_spans(text) if span.startswith("mkdir")]
    subprocess.run(["sh", "-c", move], check=True)
    assert not only.exists() and only.name not in {f.path.rsplit("/", 1)[-1] for f in inspect([str(models)])[0].findings}


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
