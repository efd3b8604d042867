"""Every rule `inspect` implements fires on a real run built to trigger it, and stays quiet on a
healthy run of the same layout.

Runs are made of real files: burnpack from the spec-following writer in ``ckptdoctor.testing``,
real ``torch.save`` / ``safetensors`` output, named-MessagePack records packed with ``msgpack``,
and burn's own ``mnist-model.bpk`` (``shared_corpus.mnist_model``).
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from reports import codes
from shared_corpus import mnist_model

from ckptdoctor import discover
from ckptdoctor.model import Problem
from ckptdoctor.readers import files
from ckptdoctor.readers.files import BytesSample, read_header
from ckptdoctor.testing import SMALL_MODEL, BurnModel, Tensor, burnpack, write_burn_run

# --- helpers ------------------------------------------------------------------------------------


def findings(report: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["code"] == code]


def one(report: dict[str, Any], code: str) -> dict[str, Any]:
    """The single finding with ``code``; fails with the whole finding list otherwise."""
    found = findings(report, code)
    assert len(found) == 1, f"expected one {code}, got: {report['findings']}"
    return found[0]


def the_run(report: dict[str, Any]) -> dict[str, Any]:
    assert len(report["runs"]) == 1, [r["path"] for r in report["runs"]]
    return report["runs"][0]


def checkpoint(report: dict[str, Any], index: int) -> dict[str, Any]:
    for item in the_run(report)["checkpoints"]:
        if item["index"] == index:
            return item
    raise AssertionError(f"no checkpoint {index} in {the_run(report)['checkpoints']}")


def statuses(report: dict[str, Any]) -> dict[int, str]:
    return {c["index"]: c["status"] for c in the_run(report)["checkpoints"]}


def assert_fires(
    report: dict[str, Any],
    code: str,
    severity: str,
    folder: Path,
    name: str | None,
    index: int | None,
) -> dict[str, Any]:
    """One ``code`` finding at ``index`` about ``folder/name``, whose message names the file."""
    finding = one(report, code)
    assert finding["severity"] == severity
    assert finding["index"] == index
    assert finding["run"] == str(folder)
    if name is not None:
        assert finding["path"] == str(folder / name)
        assert name in finding["message"]
    assert finding["fixes"], "every finding carries fixes"
    return finding


def burn(tmp_path: Path, epochs: range = range(3, 6), **kwargs: Any) -> Path:
    """A burn artifact dir's ``checkpoint/`` folder with every role saved for ``epochs``."""
    folder = tmp_path / "run" / "checkpoint"
    write_burn_run(folder, epochs, **kwargs)
    return folder


MPK_METADATA = {
    "float": "f32",
    "int": "i32",
    "format": "burn_core::record::file::NamedMpkFileRecorder<burn_core::record::settings::FullPrecisionSettings>",
    "version": "0.21.0",
    "settings": "FullPrecisionSettings",
}
PARAM_ID = "72d17eukbtkma"


def _tensor_data(shape: tuple[int, ...]) -> dict[str, Any]:
    count = 1
    for dim in shape:
        count *= dim
    return {"bytes": bytes(4 * count), "shape": list(shape), "dtype": "F32"}


def mpk_record(item: object) -> bytes:
    """burn's recorder-era named MessagePack record (burn-format reference §10)."""
    return msgpack.packb({"metadata": MPK_METADATA, "item": item, "_b": []})


MPK_RECORDS = {
    "model": mpk_record({"fc": {"weight": {"id": PARAM_ID, "param": _tensor_data((4, 4))}, "bias": None}}),
    "optim": mpk_record(
        {
            PARAM_ID: {
                "V1": {
                    "Rank2": {
                        "momentum": {
                            "time": 1,
                            "moment_1": _tensor_data((4, 4)),
                            "moment_2": _tensor_data((4, 4)),
                            "max_moment_2": None,
                        }
                    }
                }
            }
        }
    ),
    "scheduler": mpk_record(97),
}


def write_mpk_run(folder: Path, epochs: range) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for epoch in epochs:
        for role, data in MPK_RECORDS.items():
            (folder / f"{role}-{epoch}.mpk").write_bytes(data)


def cut(path: Path, n: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - n])


# --- real PyTorch objects -----------------------------------------------------------------------


class TorchState:
    """A small model trained one AdamW step, with its optimizer and scheduler."""

    def __init__(self) -> None:
        torch = pytest.importorskip("torch")
        from torch import nn

        torch.manual_seed(0)
        self.torch = torch
        self.model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1)
        self.model(torch.randn(2, 8)).sum().backward()
        self.optimizer.step()
        self.scheduler.step()

    def save(self, obj: object, path: Path, legacy: bool = False) -> None:
        if legacy:
            self.torch.save(obj, path, _use_new_zipfile_serialization=False)
        else:
            self.torch.save(obj, path)

    def save_safetensors(self, path: Path) -> None:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in self.model.state_dict().items()}, str(path))

    def split_run(self, folder: Path, epochs: range = range(1, 4), scheduler: bool = True) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        for epoch in epochs:
            self.save(self.model.state_dict(), folder / f"model_{epoch}.pt")
            self.save(self.optimizer.state_dict(), folder / f"optimizer_{epoch}.pt")
            if scheduler:
                self.save(self.scheduler.state_dict(), folder / f"scheduler_{epoch}.pt")
        return folder

    def bundled_run(self, folder: Path, epochs: range = range(1, 4)) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        for epoch in epochs:
            bundle = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "epoch": epoch}
            self.save(bundle, folder / f"epoch_{epoch}.pt")
        return folder

    def safetensors_run(self, folder: Path, epochs: range = range(1, 4)) -> Path:
        """Weights through ``safetensors.torch.save_file``, optimizer and scheduler through torch."""
        folder.mkdir(parents=True, exist_ok=True)
        for epoch in epochs:
            self.save_safetensors(folder / f"model_{epoch}.safetensors")
            self.save(self.optimizer.state_dict(), folder / f"optimizer_{epoch}.pt")
            self.save(self.scheduler.state_dict(), folder / f"scheduler_{epoch}.pt")
        return folder

    def weights_only_run(self, folder: Path, epochs: range = range(1, 4)) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        for epoch in epochs:
            self.save_safetensors(folder / f"model_{epoch}.safetensors")
        return folder


@pytest.fixture(scope="module")
def torch_state() -> TorchState:
    return TorchState()


# --- healthy runs: no finding at all --------------------------------------------------------------


def _healthy_burn(tmp_path: Path, state: Callable[[], TorchState]) -> tuple[Path, str, int]:
    write_burn_run(tmp_path / "run" / "checkpoint", range(1, 6))
    (tmp_path / "run" / "experiment.log").write_text("epoch 5 done\n")
    return tmp_path / "run", "burn", 5


def _healthy_torch_split(tmp_path: Path, state: Callable[[], TorchState]) -> tuple[Path, str, int]:
    return state().split_run(tmp_path / "run"), "torch", 3


def _healthy_torch_bundled(tmp_path: Path, state: Callable[[], TorchState]) -> tuple[Path, str, int]:
    return state().bundled_run(tmp_path / "run", range(1, 5)), "torch", 4


def _healthy_safetensors_split(tmp_path: Path, state: Callable[[], TorchState]) -> tuple[Path, str, int]:
    return state().safetensors_run(tmp_path / "run"), "torch", 3


def _healthy_safetensors_only(tmp_path: Path, state: Callable[[], TorchState]) -> tuple[Path, str, int]:
    return state().weights_only_run(tmp_path / "run"), "safetensors", 3


HEALTHY = {
    "burn": _healthy_burn,
    "torch-split": _healthy_torch_split,
    "torch-bundled": _healthy_torch_bundled,
    "safetensors-split": _healthy_safetensors_split,
    "safetensors-only": _healthy_safetensors_only,
}


@pytest.mark.parametrize("kind", sorted(HEALTHY))
def test_healthy_run_has_no_findings(kind, tmp_path, request, inspect_json, cli):
    def state() -> TorchState:
        return request.getfixturevalue("torch_state")

    path, layout, newest = HEALTHY[kind](tmp_path, state)
    result = inspect_json(path)
    report = result.json
    assert result.exit_code == 0
    assert report["findings"] == []
    assert report["summary"] == {"error": 0, "warning": 0, "info": 0}
    run = the_run(report)
    assert run["layout"] == layout
    assert run["checkpoints"], "the run's checkpoints were found"
    assert all(c["status"] == "complete" for c in run["checkpoints"]), run["checkpoints"]
    assert max(c["index"] for c in run["checkpoints"]) == newest
    assert run["resume"]["index"] == newest
    assert all(f"_{newest}." in p or f"-{newest}." in p for p in run["resume"]["paths"])
    for item in run["checkpoints"]:
        for file in item["files"]:
            assert file["format"] in ("burnpack", "torch-zip", "safetensors")
    # the strictest threshold agrees: not even an info finding
    assert cli("inspect", "--fail-on", "info", path).exit_code == 0
    # and reading every byte of every file finds nothing either
    verified = cli("verify", "--deep", "--json", "--fail-on", "info", path)
    assert verified.json["findings"] == [], verified.json["findings"]
    assert verified.exit_code == 0


# --- CKD101-CKD103: missing roles --------------------------------------------------------------------


def test_ckd101_fires_when_the_newest_epoch_lacks_its_optimizer(tmp_path, inspect_json):
    folder = burn(tmp_path)
    (folder / "optim-5.bpk").unlink()
    result = inspect_json(tmp_path / "run")
    report = result.json
    assert result.exit_code == 1
    finding = assert_fires(report, "CKD101", "error", folder, "model-5.bpk", 5)
    assert "optim-5.bpk" in finding["message"]
    assert checkpoint(report, 5)["status"] == "incomplete"
    assert checkpoint(report, 5)["missing"] == ["optimizer"]
    assert the_run(report)["resume"]["index"] == 4
    # the resume point is the run's, said once (runs[].resume), not a fix of each finding
    assert not any("Resume from" in fix for fix in finding["fixes"])
    assert finding["fixes"][0].startswith("Build all three checkpointers on the same artifact folder with `with_default_checkpointers()`")
    assert any("optim-5.bpk" in fix for fix in finding["fixes"])
    assert any(str(folder) in fix for fix in finding["fixes"])


def test_ckd101_quiet_when_a_torch_run_never_saved_an_optimizer(tmp_path, torch_state, inspect_json):
    folder = torch_state.weights_only_run(tmp_path / "run")
    report = inspect_json(folder).json
    assert "CKD101" not in codes(report)
    assert set(statuses(report).values()) == {"complete"}


def test_ckd101_fires_in_a_torch_split_run(tmp_path, torch_state, inspect_json):
    folder = torch_state.split_run(tmp_path / "run")
    (folder / "optimizer_3.pt").unlink()
    report = inspect_json(folder).json
    finding = assert_fires(report, "CKD101", "error", folder, "model_3.pt", 3)
    assert "optimizer_3.pt" in finding["message"]
    assert the_run(report)["resume"]["index"] == 2


def test_ckd102_fires_when_the_model_file_is_gone(tmp_path, inspect_json):
    folder = burn(tmp_path)
    (folder / "model-5.bpk").unlink()
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 1
    finding = assert_fires(report, "CKD102", "error", folder, "optim-5.bpk", 5)
    assert "model-5.bpk" in finding["message"]
    assert checkpoint(report, 5)["status"] == "incomplete"
    assert the_run(report)["resume"]["index"] == 4
    assert "CKD101" not in codes(report)


def test_ckd102_and_ckd103_quiet_on_a_complete_burn_rl_run(tmp_path, inspect_json):
    folder = tmp_path / "rl" / "checkpoint"
    write_burn_run(folder, range(1, 4))
    for epoch in range(1, 4):
        (folder / f"model-{epoch}.bpk").rename(folder / f"policy-{epoch}.bpk")
        (folder / f"optim-{epoch}.bpk").rename(folder / f"learning-agent-{epoch}.bpk")
        (folder / f"scheduler-{epoch}.bpk").unlink()
    report = inspect_json(folder).json
    assert set(codes(report)) & {"CKD101", "CKD102", "CKD103", "CKD110"} == set()
    assert the_run(report)["resume"]["index"] == 3


def test_ckd103_is_an_error_in_burn(tmp_path, inspect_json):
    folder = burn(tmp_path)
    (folder / "scheduler-5.bpk").unlink()
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 1
    finding = assert_fires(report, "CKD103", "error", folder, "model-5.bpk", 5)
    assert "scheduler-5.bpk" in finding["message"]
    assert checkpoint(report, 5)["status"] == "incomplete"
    assert the_run(report)["resume"]["index"] == 4


def test_ckd103_is_an_error_in_a_torch_run_whose_other_saves_have_a_scheduler(tmp_path, torch_state, inspect_json):
    """A hand-made loop that saves a scheduler loads it on resume: the newest epoch without one
    fails that resume (``FileNotFoundError``, tests/test_matrix_torch.py), so it is an error."""
    folder = torch_state.split_run(tmp_path / "run")
    (folder / "scheduler_3.pt").unlink()
    result = inspect_json(folder)
    report = result.json
    finding = assert_fires(report, "CKD103", "error", folder, "model_3.pt", 3)
    assert "scheduler_3.pt" in finding["message"]
    assert checkpoint(report, 3)["status"] == "incomplete"
    assert the_run(report)["resume"]["index"] == 2
    assert result.exit_code == 1


def test_ckd103_quiet_when_a_torch_run_never_saved_a_scheduler(tmp_path, torch_state, inspect_json):
    folder = torch_state.split_run(tmp_path / "run", scheduler=False)
    report = inspect_json(folder).json
    assert report["findings"] == []
    assert the_run(report)["resume"]["index"] == 3


# --- CKD110: nothing to resume from -----------------------------------------------------------------


def test_ckd110_fires_when_no_checkpoint_is_complete(tmp_path, inspect_json):
    folder = burn(tmp_path, roles=("model", "optim"))
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 1
    finding = assert_fires(report, "CKD110", "error", folder, None, None)
    assert str(folder) in finding["message"]
    assert the_run(report)["resume"] is None
    assert set(statuses(report).values()) == {"incomplete"}
    assert len(findings(report, "CKD103")) == 3


def test_ckd110_quiet_when_only_the_oldest_checkpoint_is_complete(tmp_path, inspect_json):
    folder = burn(tmp_path)
    (folder / "optim-4.bpk").unlink()
    cut(folder / "model-5.bpk", 10)
    report = inspect_json(folder).json
    assert "CKD110" not in codes(report)
    assert the_run(report)["resume"]["index"] == 3


# --- CKD111: stray prefix -------------------------------------------------------------------------


def test_ckd111_fires_for_a_file_under_another_prefix(tmp_path, inspect_json):
    folder = burn(tmp_path)
    (folder / "optim-5.bpk").rename(folder / "optimizer-5.bpk")
    result = inspect_json(folder)
    report = result.json
    finding = assert_fires(report, "CKD111", "warning", folder, "optimizer-5.bpk", 5)
    assert "'optim'" in finding["message"]
    assert any("optim" in fix and str(folder) in fix for fix in finding["fixes"])
    # the missing optimizer is reported too, and points at the stray file
    missing = one(report, "CKD101")
    assert "optimizer-5.bpk" in missing["message"]
    assert [f["path"] for f in the_run(report)["loose_files"]] == [str(folder / "optimizer-5.bpk")]


def test_ckd111_quiet_beside_burn_logs_and_metric_folders(tmp_path, inspect_json):
    write_burn_run(tmp_path / "run" / "checkpoint", range(1, 4))
    (tmp_path / "run" / "experiment.log").write_text("")
    for split in ("train", "valid"):
        logs = tmp_path / "run" / split / "epoch-1"
        logs.mkdir(parents=True)
        (logs / "Loss.log").write_text("0.5\n")
    report = inspect_json(tmp_path / "run").json
    assert report["findings"] == []
    assert the_run(report)["resume"]["index"] == 3


# --- CKD112: mixed formats ---------------------------------------------------------------------------


def test_ckd112_fires_for_mixed_precision(tmp_path, inspect_json):
    folder = burn(tmp_path, epochs=range(1, 10))
    half = BurnModel(SMALL_MODEL.params, dtype="F16")
    (folder / "model-5.bpk").write_bytes(half.model_record())
    result = inspect_json(folder)
    report = result.json
    finding = assert_fires(report, "CKD112", "warning", folder, None, None)
    assert "F16" in finding["message"] and "F32" in finding["message"]
    assert "model" in finding["message"]
    # the F32 range leaves epoch 5 out: no range covers a checkpoint saved the other way
    assert "(F32) in epochs 1–4 and 6–9" in finding["message"] and "(F16) in epoch 5" in finding["message"], finding["message"]
    assert result.exit_code == 0


def test_ckd112_fires_for_mpk_beside_bpk(tmp_path, inspect_json):
    folder = burn(tmp_path, epochs=range(1, 4))
    write_mpk_run(folder, range(4, 6))
    report = inspect_json(folder).json
    mixed = findings(report, "CKD112")
    assert {f["severity"] for f in mixed} == {"warning"}
    assert len(mixed) == 3  # one per role: model, optimizer, scheduler
    assert all("burnpack" in f["message"] and "msgpack" in f["message"] for f in mixed)
    assert all(f["run"] == str(folder) for f in mixed)


def test_ckd112_quiet_when_every_record_has_the_same_format(tmp_path, inspect_json):
    folder = tmp_path / "run" / "checkpoint"
    write_mpk_run(folder, range(1, 4))
    report = inspect_json(folder).json
    assert "CKD112" not in codes(report)


# --- CKD113: dangling symlink --------------------------------------------------------------------------


def test_ckd113_fires_for_a_dangling_symlink_named_like_a_checkpoint(tmp_path, inspect_json):
    folder = burn(tmp_path)
    (folder / "model-5.bpk").unlink()
    (folder / "model-5.bpk").symlink_to(tmp_path / "gone" / "model-5.bpk")
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 1
    assert_fires(report, "CKD113", "error", folder, "model-5.bpk", 5)
    assert checkpoint(report, 5)["status"] != "complete"
    assert the_run(report)["resume"]["index"] == 4


def test_ckd113_quiet_for_a_symlink_to_a_real_file(tmp_path, inspect_json):
    folder = burn(tmp_path)
    store = tmp_path / "store"
    store.mkdir()
    shutil.move(folder / "model-5.bpk", store / "model-5.bpk")
    (folder / "model-5.bpk").symlink_to(store / "model-5.bpk")
    report = inspect_json(folder).json
    assert report["findings"] == []
    assert checkpoint(report, 5)["status"] == "complete"


# --- CKD201: empty file ---------------------------------------------------------------------------


def test_ckd201_fires_for_a_zero_byte_checkpoint_file(tmp_path, inspect_json):
    folder = burn(tmp_path)
    (folder / "optim-5.bpk").write_bytes(b"")
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 1
    assert_fires(report, "CKD201", "error", folder, "optim-5.bpk", 5)
    assert checkpoint(report, 5)["status"] == "partial"
    assert the_run(report)["resume"]["index"] == 4


def test_ckd201_fires_for_an_empty_torch_file(tmp_path, torch_state, inspect_json):
    folder = torch_state.split_run(tmp_path / "run")
    (folder / "model_3.pt").write_bytes(b"")
    report = inspect_json(folder).json
    assert_fires(report, "CKD201", "error", folder, "model_3.pt", 3)
    assert the_run(report)["resume"]["index"] == 2


def test_ckd201_quiet_for_an_empty_log_beside_the_run(tmp_path, inspect_json):
    write_burn_run(tmp_path / "run" / "checkpoint", range(1, 4))
    (tmp_path / "run" / "experiment.log").write_bytes(b"")
    (tmp_path / "run" / "checkpoint" / ".lock").write_bytes(b"")
    report = inspect_json(tmp_path / "run").json
    assert report["findings"] == []


# --- CKD202: temp file ---------------------------------------------------------------------------------


@pytest.mark.parametrize("leftover", ["optim-5.bpk.tmp", "optim-5.bpk.partial"])
def test_ckd202_fires_for_a_staging_leftover(tmp_path, inspect_json, leftover):
    folder = burn(tmp_path)
    (folder / "optim-5.bpk").rename(folder / leftover)
    result = inspect_json(folder)
    report = result.json
    assert_fires(report, "CKD202", "warning", folder, leftover, 5)
    assert checkpoint(report, 5)["status"] == "partial"
    assert the_run(report)["resume"]["index"] == 4


def test_ckd202_fires_for_torch_atomic_writer_scratch(tmp_path, torch_state, inspect_json):
    folder = torch_state.split_run(tmp_path / "run")
    torch_state.save(torch_state.optimizer.state_dict(), folder / "optimizer_4.pt.tmp")
    report = inspect_json(folder).json
    assert_fires(report, "CKD202", "warning", folder, "optimizer_4.pt.tmp", 4)
    assert the_run(report)["resume"]["index"] == 3


def test_ckd202_quiet_for_an_unrelated_tmp_file(tmp_path, inspect_json):
    folder = burn(tmp_path)
    (folder / "notes.tmp").write_text("scratch\n")
    report = inspect_json(folder).json
    assert "CKD202" not in codes(report)
    assert set(statuses(report).values()) == {"complete"}


# --- CKD203 / CKD204: length against the format's own record ------------------------------------------


def _burn_file(tmp_path: Path, torch_state: Any) -> tuple[Path, str]:
    return burn(tmp_path), "optim-5.bpk"


def _torch_file(tmp_path: Path, torch_state: Any) -> tuple[Path, str]:
    return torch_state().split_run(tmp_path / "run"), "optimizer_3.pt"


def _safetensors_file(tmp_path: Path, torch_state: Any) -> tuple[Path, str]:
    return torch_state().weights_only_run(tmp_path / "run"), "model_3.safetensors"


def _mpk_file(tmp_path: Path, torch_state: Any) -> tuple[Path, str]:
    folder = tmp_path / "run" / "checkpoint"
    write_mpk_run(folder, range(1, 4))
    return folder, "optim-3.mpk"


LENGTH_FORMATS = {
    "burnpack": _burn_file,
    "torch-zip": _torch_file,
    "safetensors": _safetensors_file,
    "msgpack": _mpk_file,
}


@pytest.mark.parametrize("fmt", sorted(LENGTH_FORMATS))
@pytest.mark.parametrize("n", [1, 100])
def test_ckd203_fires_for_a_file_cut_short(fmt, n, tmp_path, request, inspect_json):
    folder, name = LENGTH_FORMATS[fmt](tmp_path, lambda: request.getfixturevalue("torch_state"))
    newest = max(checkpoint_indexes(inspect_json(folder).json))
    cut(folder / name, n)
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 1
    assert_fires(report, "CKD203", "error", folder, name, newest)
    assert checkpoint(report, newest)["status"] == "partial"
    assert the_run(report)["resume"]["index"] == newest - 1


def checkpoint_indexes(report: dict[str, Any]) -> list[int]:
    return [c["index"] for c in the_run(report)["checkpoints"]]


@pytest.mark.parametrize("fmt", ["burnpack", "torch-zip", "safetensors"])
def test_ckd204_fires_for_bytes_past_the_end(fmt, tmp_path, request, inspect_json):
    folder, name = LENGTH_FORMATS[fmt](tmp_path, lambda: request.getfixturevalue("torch_state"))
    newest = max(checkpoint_indexes(inspect_json(folder).json))
    with open(folder / name, "ab") as handle:
        handle.write(b"\x01" * 100)
    result = inspect_json(folder)
    report = result.json
    finding = assert_fires(report, "CKD204", "warning", folder, name, newest)
    assert "100" in finding["message"]
    assert "CKD203" not in codes(report)
    assert result.exit_code == 0


@pytest.mark.parametrize("fmt", sorted(LENGTH_FORMATS))
def test_ckd203_and_ckd204_quiet_on_whole_files(fmt, tmp_path, request, inspect_json):
    folder, _ = LENGTH_FORMATS[fmt](tmp_path, lambda: request.getfixturevalue("torch_state"))
    report = inspect_json(folder).json
    assert set(codes(report)) & {"CKD203", "CKD204"} == set()
    assert set(statuses(report).values()) == {"complete"}


# --- CKD205: not a checkpoint -------------------------------------------------------------------------

LFS_POINTER = (
    b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 1552\n"
)
HTML_PAGE = b"<!DOCTYPE html>\n<html><head><title>403 Forbidden</title></head><body>Access denied</body></html>\n"


@pytest.mark.parametrize(
    ("content", "word"),
    [(LFS_POINTER, "LFS"), (HTML_PAGE, "HTML"), (bytes(1552), "zero")],
    ids=["git-lfs-pointer", "html", "all-zero"],
)
def test_ckd205_fires_for_content_that_is_not_a_checkpoint(tmp_path, inspect_json, content, word):
    folder = burn(tmp_path)
    (folder / "model-5.bpk").write_bytes(content)
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 1
    finding = assert_fires(report, "CKD205", "error", folder, "model-5.bpk", 5)
    assert word.lower() in finding["message"].lower()
    assert checkpoint(report, 5)["status"] != "complete"
    assert the_run(report)["resume"]["index"] == 4


def test_ckd205_fires_for_zip_content_in_a_safetensors_file(tmp_path, torch_state, inspect_json):
    folder = torch_state.weights_only_run(tmp_path / "run")
    torch_state.save(torch_state.model.state_dict(), folder / "model_3.safetensors")
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 1
    finding = assert_fires(report, "CKD205", "error", folder, "model_3.safetensors", 3)
    assert "safetensors" in finding["message"] and "torch" in finding["message"]
    assert the_run(report)["resume"]["index"] == 2


def test_one_bad_file_does_not_change_the_run_layout(tmp_path, torch_state, inspect_json):
    """Layout comes from the run's names and healthy files; one damaged file must not flip it."""
    folder = torch_state.weights_only_run(tmp_path / "run", range(1, 6))
    assert the_run(inspect_json(folder).json)["layout"] == "safetensors"
    torch_state.save(torch_state.model.state_dict(), folder / "model_5.safetensors")
    assert the_run(inspect_json(folder).json)["layout"] == "safetensors"


def test_ckd205_quiet_for_real_files_whose_tensors_are_all_zero(tmp_path, torch_state, inspect_json):
    # the writer stores zero tensor data; only the headers are non-zero
    folder = burn(tmp_path)
    from safetensors.torch import save_file

    torch = torch_state.torch
    weights = tmp_path / "weights"
    weights.mkdir()
    for epoch in range(1, 4):
        save_file({"w": torch.zeros(64, 64)}, str(weights / f"model_{epoch}.safetensors"))
    report = inspect_json(folder, weights).json
    assert "CKD205" not in codes(report)
    assert report["findings"] == []


# --- CKD207: malformed header ------------------------------------------------------------------------


def test_ckd207_fires_for_burnpack_with_garbage_cbor(tmp_path, inspect_json):
    folder = burn(tmp_path)
    garbage = b"\xff\xfe\xfd\xfc" * 8
    header = struct.pack("<4sHI", b"NRUB", 1, len(garbage)) + garbage
    (folder / "model-5.bpk").write_bytes(header + bytes(512 - len(header)))
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 1
    finding = assert_fires(report, "CKD207", "error", folder, "model-5.bpk", 5)
    assert "CBOR" in finding["message"]
    assert checkpoint(report, 5)["status"] == "corrupt"
    assert the_run(report)["resume"]["index"] == 4


def test_ckd207_fires_for_safetensors_with_invalid_json(tmp_path, torch_state, inspect_json):
    folder = torch_state.weights_only_run(tmp_path / "run")
    header = b'{"weight": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]'  # never closed
    (folder / "model_3.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 1
    finding = assert_fires(report, "CKD207", "error", folder, "model_3.safetensors", 3)
    assert "JSON" in finding["message"]
    assert checkpoint(report, 3)["status"] == "corrupt"
    assert the_run(report)["resume"]["index"] == 2


def test_ckd207_quiet_for_burnpack_with_valid_cbor_and_extra_keys(tmp_path, inspect_json):
    folder = burn(tmp_path)
    record = burnpack(
        {"w": Tensor("F32", (4, 4))},
        metadata={"note": "unknown keys are allowed"},
    )
    (folder / "model-5.bpk").write_bytes(record)
    report = inspect_json(folder).json
    assert set(codes(report)) & {"CKD203", "CKD204", "CKD205", "CKD207"} == set()
    assert checkpoint(report, 5)["status"] == "complete"


# --- CKD208 / CKD209: sizes --------------------------------------------------------------------------


def test_ckd208_fires_for_a_file_far_below_its_roles_median(tmp_path, inspect_json):
    folder = burn(tmp_path)
    tiny = BurnModel({"w": (2,)}).model_record()
    assert len(tiny) < 0.5 * len(SMALL_MODEL.model_record())
    (folder / "model-4.bpk").write_bytes(tiny)
    result = inspect_json(folder)
    report = result.json
    finding = assert_fires(report, "CKD208", "warning", folder, "model-4.bpk", 4)
    assert "median" in finding["message"]
    assert result.exit_code == 0
    assert set(statuses(report).values()) == {"complete"}  # it parses; it is only suspicious


def test_ckd208_quiet_for_a_moderately_smaller_file(tmp_path, inspect_json):
    folder = burn(tmp_path)
    smaller = BurnModel({"fc1.weight": (16, 8), "fc1.bias": (16,), "fc2.weight": (4, 16)}).model_record()
    assert 0.75 < len(smaller) / len(SMALL_MODEL.model_record()) < 1
    (folder / "model-4.bpk").write_bytes(smaller)
    report = inspect_json(folder).json
    assert "CKD208" not in codes(report)


def test_ckd209_fires_for_a_file_far_above_its_roles_median(tmp_path, inspect_json):
    folder = burn(tmp_path, epochs=range(1, 6))
    big = BurnModel({"w": (64, 64)}).model_record()
    assert len(big) > 4 * len(SMALL_MODEL.model_record())
    (folder / "model-4.bpk").write_bytes(big)
    result = inspect_json(folder)
    report = result.json
    finding = assert_fires(report, "CKD209", "warning", folder, "model-4.bpk", 4)
    assert "median" in finding["message"]
    assert result.exit_code == 0


def test_ckd209_fires_for_optimizer_state_far_beyond_adams_ratio(tmp_path, inspect_json):
    folder = burn(tmp_path, epochs=range(1, 3))
    bloated = BurnModel({"w": (256, 128)}).optimizer_record("adam")
    for epoch in (1, 2):
        (folder / f"optim-{epoch}.bpk").write_bytes(bloated)
    result = inspect_json(folder)
    report = result.json
    over = findings(report, "CKD209")
    assert [(f["index"], f["path"]) for f in over] == [
        (1, str(folder / "optim-1.bpk")),
        (2, str(folder / "optim-2.bpk")),
    ]
    for finding, name in zip(over, ("optim-1.bpk", "optim-2.bpk"), strict=True):
        assert finding["severity"] == "warning"
        assert name in finding["message"]
        assert "adam" in finding["message"] and "2×" in finding["message"]
    assert result.exit_code == 0


def test_ckd209_quiet_for_a_moderately_larger_file_and_usual_ratios(tmp_path, inspect_json):
    folder = burn(tmp_path, epochs=range(1, 6))
    larger = BurnModel({"w": (24, 24)}).model_record()
    assert 1.3 < len(larger) / len(SMALL_MODEL.model_record()) < 1.9
    (folder / "model-4.bpk").write_bytes(larger)
    sgd = tmp_path / "sgd" / "checkpoint"
    write_burn_run(sgd, range(1, 4), optimizer="sgd-momentum")
    report = inspect_json(folder, sgd).json
    assert "CKD209" not in codes(report)
    assert "CKD208" not in codes(report)


# --- CKD210: legacy formats ---------------------------------------------------------------------------


def test_ckd210_fires_for_torch_legacy_format(tmp_path, torch_state, inspect_json):
    folder = torch_state.split_run(tmp_path / "run")
    torch_state.save(torch_state.scheduler.state_dict(), folder / "scheduler_3.pt", legacy=True)
    result = inspect_json(folder)
    report = result.json
    finding = assert_fires(report, "CKD210", "info", folder, "scheduler_3.pt", None)
    assert "legacy" in finding["message"]
    assert checkpoint(report, 3)["status"] == "complete"  # still loadable: only worth knowing
    scheduler = [f for f in checkpoint(report, 3)["files"] if f["role"] == "scheduler"]
    assert scheduler[0]["format"] == "torch-legacy"
    assert result.exit_code == 0


def test_ckd210_reported_once_for_a_whole_legacy_torch_run(tmp_path, torch_state, inspect_json):
    folder = tmp_path / "run"
    folder.mkdir()
    for epoch in (1, 2):
        torch_state.save(torch_state.model.state_dict(), folder / f"model_{epoch}.pt", legacy=True)
        torch_state.save(torch_state.optimizer.state_dict(), folder / f"optimizer_{epoch}.pt", legacy=True)
    report = inspect_json(folder).json
    finding = one(report, "CKD210")
    assert finding["severity"] == "info"
    assert finding["index"] is None
    assert finding["path"] in {str(folder / n) for n in ("model_1.pt", "model_2.pt", "optimizer_1.pt", "optimizer_2.pt")}
    assert "4 files" in finding["message"]
    assert the_run(report)["resume"]["index"] == 2


def test_ckd210_fires_for_burn_mpk_records(tmp_path, inspect_json):
    folder = tmp_path / "run" / "checkpoint"
    write_mpk_run(folder, range(1, 3))
    result = inspect_json(folder)
    report = result.json
    finding = one(report, "CKD210")
    assert finding["severity"] == "info"
    assert finding["index"] is None
    assert finding["path"] == str(folder / "model-1.mpk")
    assert ".mpk" in finding["message"] and "6 files" in finding["message"]
    run = the_run(report)
    assert run["layout"] == "burn"
    assert run["resume"]["index"] == 2
    assert {f["format"] for c in run["checkpoints"] for f in c["files"]} == {"msgpack"}
    assert result.exit_code == 0


def test_ckd210_quiet_for_zip_torch_and_burnpack(tmp_path, torch_state, inspect_json):
    torch_run = torch_state.split_run(tmp_path / "torch")
    burn_run = burn(tmp_path)
    report = inspect_json(torch_run, burn_run).json
    assert "CKD210" not in codes(report)


# --- CKD211: unreadable ---------------------------------------------------------------------------


def _deny(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Opening ``name`` fails as it does on a failing disk or a stale NFS handle (EIO); a file
    this user may not read is CKD215 (issue 32), tested as a real other user in test_other_user."""
    real_open = os.open

    def guarded(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.path.basename(os.fsdecode(path)) == name:
            raise OSError(errno.EIO, "Input/output error", os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)
    real_edges = files.read_edges

    def bulk(paths: Any, sizes: Any, head: int, tail: int, threads: int = 1) -> Any:
        # the compiled reader opens in C, past the hook above: it gives None for a file it cannot open
        found = real_edges(paths, sizes, head, tail, threads)
        return [None if os.path.basename(os.fsdecode(path)) == name else got for path, got in zip(paths, found, strict=True)]

    monkeypatch.setattr(files, "read_edges", bulk)


def test_ckd211_fires_for_a_file_that_cannot_be_opened(tmp_path, inspect_json, monkeypatch):
    folder = burn(tmp_path)
    _deny(monkeypatch, "optim-5.bpk")
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 1
    finding = assert_fires(report, "CKD211", "error", folder, "optim-5.bpk", 5)
    assert "Input/output error" in finding["message"]
    assert checkpoint(report, 5)["status"] != "complete"  # never call an unread file clean
    assert the_run(report)["resume"]["index"] == 4


def test_ckd211_fires_for_a_folder_that_cannot_be_listed(tmp_path, inspect_json, monkeypatch):
    write_burn_run(tmp_path / "runs" / "a" / "checkpoint", range(1, 3))
    locked = tmp_path / "runs" / "b"
    locked.mkdir()
    real_list = discover._list  # the compiled lister or os.scandir: either is denied here

    def guarded(os_dir: str, shown_dir: str) -> Any:
        if os_dir == str(locked):
            raise OSError(errno.EIO, "Input/output error", os_dir)
        return real_list(os_dir, shown_dir)

    monkeypatch.setattr(discover, "_list", guarded)
    result = inspect_json(tmp_path / "runs")
    report = result.json
    finding = one(report, "CKD211")
    assert finding["severity"] == "error"
    assert finding["path"] == str(locked)
    assert "Input/output error" in finding["message"]
    assert the_run(report)["resume"]["index"] == 2
    assert result.exit_code == 1


def test_ckd211_quiet_when_every_file_opens(tmp_path, inspect_json, monkeypatch):
    folder = burn(tmp_path)
    _deny(monkeypatch, "not-in-this-run.bpk")
    report = inspect_json(folder).json
    assert report["findings"] == []


# --- the real burn-written file -------------------------------------------------------------------


def _data_start(data: bytes) -> int:
    """Where a burnpack's tensor data starts: the header region is everything before it."""
    (metadata_size,) = struct.unpack_from("<I", data, 6)
    return -(-(10 + metadata_size) // 256) * 256


def _cuts(data: bytes) -> list[int]:
    """Byte counts to cut off the end: 1..300, the last 300 bytes of the header region, and
    50 spread over the whole length (seeded)."""
    start = _data_start(data)
    chosen = set(range(1, 301))
    chosen |= {len(data) - length for length in range(start - 300, start)}
    rng = random.Random(0)
    chosen |= {rng.randrange(1, len(data)) for _ in range(50)}
    return sorted(chosen)


def _real_burn_run(tmp_path: Path) -> Path:
    folder = tmp_path / "run" / "checkpoint"
    write_burn_run(folder, [1], roles=("optim", "scheduler"))
    (folder / "model-1.bpk").write_bytes(mnist_model())
    return folder


def test_real_burn_file_is_valid_burnpack(tmp_path, inspect_json):
    data = mnist_model()
    direct = read_header(BytesSample(data), "model-1.bpk")
    assert direct.format == "burnpack"
    assert direct.issues == ()
    assert direct.fact("record") == "model"

    folder = _real_burn_run(tmp_path)
    result = inspect_json(tmp_path / "run")
    report = result.json
    assert result.exit_code == 0
    assert report["findings"] == []
    model = checkpoint(report, 1)["files"][0]
    assert model["role"] == "model"
    assert model["path"] == str(folder / "model-1.bpk")
    assert model["format"] == "burnpack"
    assert model["problems"] == []
    assert model["bytes"] == len(data)
    assert checkpoint(report, 1)["status"] == "complete"
    assert the_run(report)["resume"]["index"] == 1


def test_cutting_the_real_burn_file_gives_truncated_for_every_cut():
    data = mnist_model()
    cuts = _cuts(data)
    assert len(cuts) > 500
    wrong = []
    for n in cuts:
        report = read_header(BytesSample(data[: len(data) - n]), "model-1.bpk")
        if [issue.problem.value for issue in report.issues] != ["truncated"] or report.format != "burnpack":
            wrong.append((n, len(data) - n, report.format, [i.detail for i in report.issues]))
    assert wrong == [], f"{len(wrong)} cuts not reported as truncated, e.g. {wrong[:5]}"


def test_cutting_the_padding_off_the_real_burn_file_is_truncated():
    """A cut of exactly D - (10 + M) bytes makes the aligned file as long as an unpadded
    pre-0.20 one; its offsets are 256-aligned, so it is a cut file, not an old one."""
    data = mnist_model()
    (metadata_size,) = struct.unpack_from("<I", data, 6)
    n = _data_start(data) - (10 + metadata_size)
    assert 0 < n < 256
    report = read_header(BytesSample(data[: len(data) - n]), "model-1.bpk")
    assert report.problems == {Problem.TRUNCATED}, report


@pytest.mark.parametrize("remaining", range(1, 10))
def test_cutting_the_real_burn_file_to_a_few_bytes_is_truncated(remaining):
    data = mnist_model()
    report = read_header(BytesSample(data[:remaining]), "model-1.bpk")
    assert report.problems == {Problem.TRUNCATED}, report


@pytest.mark.parametrize("where", ["last-byte", "in-data", "in-padding", "in-metadata"])
def test_cutting_the_real_burn_file_is_reported_by_the_cli(tmp_path, inspect_json, where):
    data = mnist_model()
    start = _data_start(data)
    n = {
        "last-byte": 1,
        "in-data": len(data) // 2,
        "in-padding": len(data) - (start - 7),
        "in-metadata": len(data) - 700,
    }[where]
    folder = _real_burn_run(tmp_path)
    (folder / "model-1.bpk").write_bytes(data[: len(data) - n])
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 1
    assert_fires(report, "CKD203", "error", folder, "model-1.bpk", 1)
    assert checkpoint(report, 1)["status"] == "partial"
    assert the_run(report)["resume"] is None
    assert "CKD110" in codes(report)


def test_burn_bincode_records_are_recognised_and_garbage_bin_is_not(tmp_path, inspect_json):
    """burn's BinFileRecorder starts with its recorder metadata; anything else in a .bin is not bincode."""

    def bincode(*strings: bytes) -> bytes:
        return b"".join(bytes([len(s)]) + s for s in strings) + bytes(64)

    record = bincode(b"f32", b"i32", b"burn_core::record::file::BinFileRecorder<FullPrecisionSettings>", b"0.21.0")
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    for epoch in (1, 2):
        for role in ("model", "optim", "scheduler"):
            (folder / f"{role}-{epoch}.bin").write_bytes(record)
    report = inspect_json(tmp_path).json
    files = [f for c in report["runs"][0]["checkpoints"] for f in c["files"]]
    assert {f["format"] for f in files} == {"bincode"}
    assert report["runs"][0]["resume"]["index"] == 2
    (folder / "optim-2.bin").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    report = inspect_json(tmp_path).json
    flagged = [f for f in report["findings"] if f["code"] == "CKD205"]
    assert [Path(f["path"]).name for f in flagged] == ["optim-2.bin"]
    assert report["runs"][0]["resume"]["index"] == 1
