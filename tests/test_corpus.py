"""Real files written by other projects (../shared/corpus): recognised, and never a traceback.

Nothing here loads a corpus file: many are malicious on purpose. ckptdoctor only reads their
headers and trailers. Pickle-safety verdicts (CKD401/402) belong to ``verify`` and are not
checked here; only recognition and robustness are.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

TORCH_ZIP = [
    "bfloat16.pt", "bool.pt", "buffers.pt", "checkpoint.pt", "complex_structure.pt", "empty.pt",
    "extreme_values.pt", "float16.pt", "float32.pt", "float64.pt", "int16.pt", "int32.pt",
    "int64.pt", "int8.pt", "large_shape.pt", "mixed_types.pt", "nested_dict.pt", "parameter.pt",
    "scalar.pt", "special_values.pt", "state_dict.pt", "tensor_2d.pt", "tensor_3d.pt",
    "tensor_4d.pt", "uint8.pt",
]  # fmt: skip
TORCH_LEGACY = [
    "legacy_shared_storage.pt", "legacy_uncloned_views.pt", "legacy_with_offsets.pt",
    "simple_legacy.pt",
]  # fmt: skip
TORCH_TAR = [
    "tar_2d_tensor.tar", "tar_float32.tar", "tar_float64.tar", "tar_int64.tar",
    "tar_multi_dtype.tar", "tar_weight_bias.tar",
]  # fmt: skip

NEVER_CLEAN = [
    "data/bad_pytorch.pt",
    "data/not_a_pickle.bin",
    "data/broken_model.pkl",
    "data/benign_password_protected.zip",
    "data/malicious1.7z",
    "data2/object_array.npy",
    "data2/object_arrays.npz",
    "data2/object_arrays_compressed.npz",
]
"""The corpus README: whatever cannot be analysed must never be called clean."""


def _files(report: dict) -> list[dict]:
    return [f for run in report["runs"] for group in (*(c["files"] for c in run["checkpoints"]), run["loose_files"]) for f in group]


def _no_traceback(result) -> None:
    for text in (result.stdout, result.stderr):
        assert "Traceback" not in text
        assert "internal error" not in text


# --- torch-samples: every file recognised ----------------------------------------------------


def test_torch_samples_lists_every_file(corpus: Path) -> None:
    """The lists below cover the whole folder, so a new sample cannot slip by untested."""
    names = {p.name for p in (corpus / "torch-samples").iterdir() if p.suffix in (".pt", ".tar")}
    assert names == {*TORCH_ZIP, *TORCH_LEGACY, *TORCH_TAR, "broken.pt"}


@pytest.mark.parametrize("name", TORCH_ZIP)
def test_torch_zip_sample(inspect_json, corpus: Path, name: str) -> None:
    path = corpus / "torch-samples" / name
    result = inspect_json(path)
    _no_traceback(result)
    files = _files(result.json)
    assert [f["path"] for f in files] == [str(path)]
    assert files[0]["format"] == "torch-zip"
    assert files[0]["problems"] == []
    assert result.json["findings"] == []
    assert result.json["runs"][0]["layout"] == "torch"
    assert result.exit_code == 0


@pytest.mark.parametrize("name", TORCH_LEGACY)
def test_torch_legacy_sample(inspect_json, corpus: Path, name: str) -> None:
    path = corpus / "torch-samples" / name
    result = inspect_json(path)
    _no_traceback(result)
    files = _files(result.json)
    assert [f["format"] for f in files] == ["torch-legacy"]
    codes = [(f["code"], f["severity"]) for f in result.json["findings"]]
    assert codes == [("CKD210", "info")]
    assert result.json["runs"][0]["layout"] == "torch"
    assert result.exit_code == 0


@pytest.mark.parametrize("name", TORCH_TAR)
def test_torch_tar_sample(inspect_json, corpus: Path, name: str) -> None:
    path = corpus / "torch-samples" / name
    result = inspect_json(path)
    _no_traceback(result)
    files = _files(result.json)
    assert [f["format"] for f in files] == ["torch-tar"]
    codes = [(f["code"], f["severity"]) for f in result.json["findings"]]
    assert codes == [("CKD210", "info")]
    assert result.json["runs"][0]["layout"] == "torch"
    assert result.exit_code == 0


def test_broken_sample_gets_an_error(inspect_json, cli, corpus: Path) -> None:
    path = corpus / "torch-samples" / "broken.pt"
    result = inspect_json(path)
    _no_traceback(result)
    errors = [f for f in result.json["findings"] if f["severity"] == "error"]
    assert errors and all(f["path"] == str(path) for f in errors)
    assert result.exit_code == 1
    assert all(c["status"] != "complete" for r in result.json["runs"] for c in r["checkpoints"])

    human = cli("inspect", path)
    _no_traceback(human)
    assert human.exit_code == 1
    assert "broken.pt" in human.stdout


def test_torch_samples_in_a_run(inspect_json, corpus: Path, tmp_path: Path) -> None:
    """The same files saved as a split run's checkpoints keep their verdicts."""
    run = tmp_path / "run"
    run.mkdir()
    samples = corpus / "torch-samples"
    chosen = {
        1: ("float32.pt", "state_dict.pt"),
        2: ("simple_legacy.pt", "legacy_with_offsets.pt"),
        3: ("tar_float32.tar", "tar_weight_bias.tar"),
        4: ("tensor_2d.pt", "broken.pt"),
    }
    for epoch, (model, optimizer) in chosen.items():
        shutil.copyfile(samples / model, run / f"model_{epoch}.pt")
        shutil.copyfile(samples / optimizer, run / f"optimizer_{epoch}.pt")
    result = inspect_json(run)
    _no_traceback(result)
    report = result.json
    assert len(report["runs"]) == 1
    formats = {Path(f["path"]).name: f["format"] for f in _files(report)}
    assert formats["model_1.pt"] == "torch-zip"
    assert formats["model_2.pt"] == "torch-legacy"
    assert formats["model_3.pt"] == "torch-tar"
    statuses = {c["index"]: c["status"] for c in report["runs"][0]["checkpoints"]}
    assert statuses[1] == statuses[2] == statuses[3] == "complete"
    assert statuses[4] != "complete"
    assert report["runs"][0]["resume"]["index"] == 3
    assert "CKD210" in {f["code"] for f in report["findings"]}
    broken = [f for f in report["findings"] if f["path"] == str(run / "optimizer_4.pt")]
    assert broken and broken[0]["severity"] == "error"


# --- whole folders never crash ---------------------------------------------------------------


@pytest.mark.parametrize("folder", ["torch-samples", "picklescan/data", "picklescan/data2", "."])
def test_whole_folder_json(inspect_json, corpus: Path, folder: str) -> None:
    result = inspect_json(corpus / folder)
    _no_traceback(result)
    assert result.exit_code in (0, 1), result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "ckptdoctor.report.v1"
    assert document["command"] == "inspect"
    assert sum(document["summary"].values()) == len(document["findings"])


@pytest.mark.parametrize("folder", ["torch-samples", "picklescan/data", "picklescan/data2"])
def test_whole_folder_human(cli, corpus: Path, folder: str) -> None:
    result = cli("inspect", corpus / folder)
    _no_traceback(result)
    assert result.exit_code in (0, 1), result.stderr


@pytest.mark.parametrize("folder", ["picklescan/data", "picklescan/data2"], ids=["data", "data2"])
def test_every_picklescan_file_alone(inspect_json, corpus: Path, folder: str) -> None:
    """Each file named on its own (single-file mode): a report, never a crash or exit 2."""
    for path in sorted((corpus / folder).iterdir()):
        result = inspect_json(path)
        _no_traceback(result)
        assert result.exit_code in (0, 1), (path, result.stderr)
        json.loads(result.stdout)


# --- what cannot be analysed is never called clean --------------------------------------------


@pytest.mark.parametrize("source", NEVER_CLEAN, ids=lambda s: s.split("/")[-1])
@pytest.mark.parametrize("as_name", ["model_1.pt", "optimizer_2.pth", "model_2.bin", "model-1.bpk"])
def test_never_called_clean_in_a_run(inspect_json, corpus: Path, tmp_path: Path, source: str, as_name: str) -> None:
    torch = pytest.importorskip("torch")
    run = tmp_path / "run"
    run.mkdir()
    if as_name.endswith(".bpk"):
        from ckptdoctor.testing import write_burn_run

        write_burn_run(run, [1, 2])
    else:
        for epoch in (1, 2):
            torch.save({"w": torch.zeros(4)}, run / f"model_{epoch}.pt")
            torch.save({"state": {}, "param_groups": []}, run / f"optimizer_{epoch}.pth")
        if as_name.endswith(".bin"):  # epoch 2's model saved under .bin instead of .pt
            (run / "model_2.pt").unlink()
    target = run / as_name
    shutil.copyfile(corpus / "picklescan" / source, target)
    target.chmod(0o644)

    result = inspect_json(run)
    _no_traceback(result)
    problems = [f for f in result.json["findings"] if f["path"] == str(target) and f["severity"] != "info"]
    assert problems, f"{source} as {as_name} was called clean: {result.json['findings']}"
    index = 1 if as_name.endswith("_1.pt") or as_name.endswith("-1.bpk") else 2
    (run_report,) = result.json["runs"]
    status = {c["index"]: c["status"] for c in run_report["checkpoints"]}
    assert status[index] != "complete"
    assert run_report["resume"] is None or run_report["resume"]["index"] != index
    # severity follows harm: behind the resume point it is dead weight, unless unsafe to load
    behind = run_report["resume"] is not None and run_report["resume"]["index"] > index
    if behind:
        assert all(f["severity"] == "warning" or f["code"].startswith("CKD4") for f in problems), problems
    else:
        assert any(f["severity"] == "error" for f in problems) and result.exit_code == 1


def test_never_called_clean_alone(inspect_json, corpus: Path) -> None:
    """Named directly under its own name (single-file mode, judged by content), none of these files
    is reported as a complete checkpoint without a finding."""
    called_clean = []
    for source in NEVER_CLEAN:
        path = corpus / "picklescan" / source
        result = inspect_json(path)
        _no_traceback(result)
        assert result.exit_code in (0, 1), (source, result.stderr)
        complete = [c for r in result.json["runs"] for c in r["checkpoints"] if c["status"] == "complete"]
        flagged = [f for f in result.json["findings"] if f["path"] == str(path) and f["severity"] != "info"]
        if complete and not flagged:
            called_clean.append(source)
    assert called_clean == [], f"reported as clean, resumable checkpoints: {called_clean}"
