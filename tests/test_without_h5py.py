"""Keras' files where h5py is not installed, as with the `test` extra alone: `verify` checks what
it reads itself (a ``.keras`` archive's ``config.json``, the HDF5 superblock) and says what it
left unread (CKD213), and a bare HDF5 file, whose attributes may hold a legacy model's Lambda,
cannot be proven free of code (CKD404).

The files are Keras' own, committed (``tests/data/keras``, written by ``make.py`` there with Keras
3.15 on tensorflow-cpu 2.21), so that these tests run wherever the suite does. Where Keras is
installed, ``keras.models.load_model`` is asked: it loads the healthy archive and refuses the
Lambda in the others, as the verdicts say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _frameworks_subprocess import run_python
from reports import codes

from ckptdoctor.pipelines.verify import verify
from ckptdoctor.readers import hdf5

KERAS_FILES = Path(__file__).resolve().parent / "data" / "keras"

_REFUSALS = r"""
import sys, json, keras
refusals = {}
for path in sys.argv[1:]:
    try:
        keras.models.load_model(path)
        refusals[path] = None
    except Exception as caught:
        refusals[path] = str(caught)
print(json.dumps(refusals))
"""


@pytest.fixture
def without_h5py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hdf5, "_h5py", lambda: None)  # as where it is not installed, whether or not it is here


def test_an_archive_is_partly_checked_and_stays_the_resume_point(without_h5py: None) -> None:
    report, found = verify([str(KERAS_FILES / "best")])
    (finding,) = report.findings
    assert (finding.code, finding.severity.value) == ("CKD213", "info")
    assert finding.path is not None and finding.path.endswith("best.keras") and "pip install h5py" in finding.message
    (run,) = found.runs
    assert run.resume is not None and run.resume.files[0].name == "best.keras"  # nothing wrong was found


def test_a_lambda_in_an_archive_is_code_and_a_bare_hdf5_file_cannot_be_proven_free_of_it(without_h5py: None) -> None:
    report, found = verify([str(KERAS_FILES / "lambda")])
    flagged = {Path(f.path or "").name: f for f in report.findings if f.code == "CKD404"}
    assert sorted(flagged) == ["ep01.keras", "legacy-01.h5"]
    assert all(f.severity.value == "error" for f in flagged.values())
    assert "config.json holds Python bytecode" in flagged["ep01.keras"].message  # read without h5py
    assert "cannot check: h5py is not installed" in flagged["legacy-01.h5"].message
    assert "CKD213" in codes(report)  # the archive's weights member: its superblock alone
    assert found.runs[0].resume is None


def test_with_h5py_the_same_files_are_read_whole() -> None:
    """The control: where h5py is installed, the archive is clean and the legacy model's Lambda is
    read from its attributes."""
    pytest.importorskip("h5py")
    report, _ = verify([str(KERAS_FILES / "best")])
    assert codes(report) == []
    report, _ = verify([str(KERAS_FILES / "lambda")])
    messages = {Path(f.path or "").name: f.message for f in report.findings if f.code == "CKD404"}
    assert "model_config holds Python bytecode" in messages["legacy-01.h5"]
    assert "CKD213" not in codes(report)


def test_keras_loads_the_healthy_archive_and_refuses_the_lambdas() -> None:
    pytest.importorskip("tensorflow", reason="needs tensorflow-cpu with Keras 3 (pip install -e '.[tensorflow]')")
    names = ("best/best.keras", "lambda/ep01.keras", "lambda/legacy-01.h5")
    refusals = json.loads(run_python(_REFUSALS, *(str(KERAS_FILES / name) for name in names)).splitlines()[-1])
    refused = {name: refusals[str(KERAS_FILES / name)] for name in names}
    assert refused["best/best.keras"] is None
    assert "Lambda" in refused["lambda/ep01.keras"] and "Lambda" in refused["lambda/legacy-01.h5"]
