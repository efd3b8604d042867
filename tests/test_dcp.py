"""torch.distributed.checkpoint runs written by real `dcp.save` in one process."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest


def dcp_run(folder: Path, steps: tuple[int, ...] = (10, 20), many_files: bool = False) -> Path:
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    for step in steps:
        target = folder / f"step-{step}"
        writer = dcp.FileSystemWriter(str(target), single_file_per_rank=not many_files)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "torch.distributed is disabled": one process is the point
            dcp.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, storage_writer=writer)
    return folder


def codes(report: dict) -> list[str]:
    return [f["code"] for f in report["findings"]]


def test_a_healthy_dcp_run_is_quiet(tmp_path, inspect_json, cli):
    folder = dcp_run(tmp_path / "run")
    report = inspect_json(folder).json
    assert report["findings"] == []
    (run,) = report["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("dcp", "step", 20)
    assert "METADATA" in cli("inspect", folder).stdout


def test_a_folder_without_metadata_was_never_committed(tmp_path, inspect_json):
    folder = dcp_run(tmp_path / "run")
    (folder / "step-20" / ".metadata").unlink()
    report = inspect_json(folder).json
    (marker,) = [f for f in report["findings"] if f["code"] == "CKD106"]
    assert marker["index"] == 20 and ".metadata" in marker["message"]
    assert report["runs"][0]["resume"]["index"] == 10


def test_a_leftover_metadata_tmp_is_a_partial_commit(tmp_path, inspect_json):
    folder = dcp_run(tmp_path / "run")
    (folder / "step-20" / ".metadata").rename(folder / "step-20" / ".metadata.tmp")
    report = inspect_json(folder).json
    assert {"CKD202", "CKD106"} <= set(codes(report))
    assert report["runs"][0]["checkpoints"][-1]["status"] == "partial"
    assert report["runs"][0]["resume"]["index"] == 10


def test_a_data_file_the_metadata_names_is_missing(tmp_path, inspect_json):
    folder = dcp_run(tmp_path / "run", steps=(10,), many_files=True)
    data = sorted((folder / "step-10").glob("*.distcp"))
    assert len(data) > 1
    data[-1].unlink()
    report = inspect_json(folder).json
    (shard,) = [f for f in report["findings"] if f["code"] == "CKD105"]
    assert data[-1].name in shard["message"] and ".metadata" in shard["message"]
    assert report["runs"][0]["resume"] is None


def test_all_zero_tensor_data_is_not_called_a_broken_file(tmp_path, inspect_json):
    folder = dcp_run(tmp_path / "run", steps=(10,))
    (data,) = (folder / "step-10").glob("*.distcp")
    data.write_bytes(bytes(data.stat().st_size))
    assert inspect_json(folder).json["findings"] == []
