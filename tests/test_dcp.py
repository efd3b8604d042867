"""torch.distributed.checkpoint runs written by real `dcp.save` in one process."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest
from reports import codes


def dcp_run(folder: Path, steps: tuple[int, ...] = (10, 20), many_files: bool = False) -> Path:
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    state = _state()
    for step in steps:
        target = folder / f"step-{step}"
        writer = dcp.FileSystemWriter(str(target), single_file_per_rank=not many_files)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "torch.distributed is disabled": one process is the point
            dcp.save(state, storage_writer=writer)
    return folder


def _state() -> dict[str, Any]:
    """A model and an optimizer that has stepped once: what each test run saves, and loads back into."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optim": optimizer.state_dict()}


def dcp_load(checkpoint: Path) -> BaseException | None:
    """What `dcp.load` says about a checkpoint folder: None when it loads."""
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            dcp.load(_state(), checkpoint_id=str(checkpoint))
        except (Exception, dcp.api.CheckpointException) as error:  # its exception is a BaseException
            return error
    return None


def items(checkpoint: Path) -> dict[str, tuple[str, int, int]]:
    """Where the framework's own reading of `.metadata` places each item: fqn -> (file, offset, length)."""
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    metadata = dcp.FileSystemReader(str(checkpoint)).read_metadata()
    return {index.fqn: (info.relative_path, info.offset, info.length) for index, info in metadata.storage_data.items()}


def resume_folder(folder: Path, report: dict[str, Any]) -> Path:
    return folder / f"step-{report['runs'][0]['resume']['index']}"


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


@pytest.mark.parametrize("many_files", [False, True], ids=["file-per-rank", "file-per-item"])
def test_a_shard_shorter_than_its_metadata_says_is_cut_short(tmp_path, inspect_json, many_files):
    folder = dcp_run(tmp_path / "run", many_files=many_files)
    shard, offset, length = max(items(folder / "step-20").values(), key=lambda place: place[1] + place[2])
    os.truncate(folder / "step-20" / shard, offset + length - 100)
    report = inspect_json(folder).json
    (cut,) = [f for f in report["findings"] if f["code"] == "CKD203"]
    assert cut["severity"] == "error" and cut["path"].endswith(shard)
    assert shard in cut["message"] and "last 100 bytes are missing" in cut["message"]
    assert report["runs"][0]["checkpoints"][-1]["status"] == "partial"
    assert dcp_load(folder / "step-20") is not None
    assert resume_folder(folder, report) == folder / "step-10" and dcp_load(folder / "step-10") is None


def test_a_shard_whose_tail_is_zeros_is_cut_short(tmp_path, inspect_json):
    folder = dcp_run(tmp_path / "run")
    (shard,) = (folder / "step-20").glob("*.distcp")
    size = shard.stat().st_size
    with shard.open("r+b") as data:  # the file keeps its length; its end never reached the disk
        data.seek(size - 200)
        data.write(bytes(200))
    report = inspect_json(folder).json
    (cut,) = [f for f in report["findings"] if f["code"] == "CKD203"]
    assert shard.name in cut["message"] and "zeros" in cut["message"]
    assert dcp_load(folder / "step-20") is not None
    assert resume_folder(folder, report) == folder / "step-10" and dcp_load(folder / "step-10") is None


def test_verify_deep_finds_an_item_zeroed_inside_a_shard(tmp_path, inspect_json, cli):
    folder = dcp_run(tmp_path / "run")
    shard, offset, length = items(folder / "step-20")["model.0.weight"]
    with (folder / "step-20" / shard).open("r+b") as data:  # a hole: the file's ends are intact
        data.seek(offset)
        data.write(bytes(length))
    assert inspect_json(folder).json["findings"] == []  # only reading every byte shows it
    deep = cli("verify", "--deep", "--json", folder)
    (zeroed,) = [f for f in deep.json["findings"] if f["code"] == "CKD212"]
    assert zeroed["severity"] == "error" and zeroed["index"] == 20 and zeroed["path"].endswith(shard)
    assert "`model.0.weight`" in zeroed["message"] and "step 10" in zeroed["message"]
    assert deep.exit_code == 1
    assert dcp_load(folder / "step-20") is not None
    assert resume_folder(folder, deep.json) == folder / "step-10" and dcp_load(folder / "step-10") is None


def test_a_healthy_dcp_run_is_quiet_read_whole(tmp_path, cli):
    folder = dcp_run(tmp_path / "run", steps=(10, 20, 30))
    deep = cli("verify", "--deep", "--json", folder)
    assert deep.json["findings"] == [] and deep.exit_code == 0
    assert deep.json["runs"][0]["resume"]["index"] == 30
