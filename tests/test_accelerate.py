"""accelerate runs written by a real `Accelerator.save_state` with automatic checkpoint naming."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    torch = pytest.importorskip("torch")
    accelerate = pytest.importorskip("accelerate")
    from accelerate.utils import ProjectConfiguration

    project = tmp_path_factory.mktemp("acc")
    config = ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True, total_limit=3)
    accelerator = accelerate.Accelerator(project_config=config, cpu=True)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    for _ in range(4):
        accelerator.backward(model(torch.randn(2, 4)).sum())
        optimizer.step()
        scheduler.step()
        accelerator.save_state()
    return project / "checkpoints"


@pytest.fixture
def run(saved: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "checkpoints"
    shutil.copytree(saved, copy)
    return copy


def only(report: dict, code: str) -> dict:
    (finding,) = [f for f in report["findings"] if f["code"] == code]
    return finding


def test_a_healthy_project_is_quiet(run, inspect_json):
    report = inspect_json(run.parent).json
    assert report["findings"] == []
    (found,) = report["runs"]
    assert (found["layout"], found["unit"]) == ("accelerate", "save")
    assert [c["index"] for c in found["checkpoints"]] == [1, 2, 3]
    assert found["resume"]["index"] == 3


def test_a_missing_newest_optimizer_and_the_automatic_resume(run, inspect_json):
    (run / "checkpoint_3" / "optimizer.bin").unlink()
    report = inspect_json(run).json
    assert only(report, "CKD101")["index"] == 3
    auto = only(report, "CKD114")
    assert f'accelerator.load_state("{run}/checkpoint_2")' in auto["fixes"][0]
    assert report["runs"][0]["resume"]["index"] == 2


def test_missing_random_states_of_a_process_is_ckd105(run, inspect_json):
    (run / "checkpoint_3" / "random_states_0.pkl").unlink()
    report = inspect_json(run).json
    assert "random_states_0.pkl" in only(report, "CKD105")["message"]
    assert report["runs"][0]["resume"]["index"] == 2


def test_an_empty_scheduler_is_ckd201(run, inspect_json):
    (run / "checkpoint_3" / "scheduler.bin").write_bytes(b"")
    report = inspect_json(run).json
    assert only(report, "CKD201")["index"] == 3
    assert report["runs"][0]["checkpoints"][-1]["status"] == "partial"


def test_prune_keeps_its_own_folder_out_of_checkpoints_and_accelerate_saves_on(run, cli):
    """accelerate's save_state(total_limit=...) and load_state() parse a number out of every name
    in checkpoints/: ckptdoctor's lock and trash must live beside it."""
    import os
    import time

    import accelerate
    import torch
    from accelerate.utils import ProjectConfiguration

    when = time.time() - 86400
    for path in [run, *run.rglob("*")]:
        os.utime(path, (when, when))
    assert cli("prune", "--dry-run", "--keep-last", "1", run).exit_code == 0
    assert sorted(os.listdir(run)) == ["checkpoint_1", "checkpoint_2", "checkpoint_3"]
    result = cli("prune", "--yes", "--keep-last", "1", run)
    assert result.exit_code == 0, result.stderr
    assert sorted(os.listdir(run)) == ["checkpoint_3"]
    assert (run.parent / ".ckptdoctor" / "checkpoints" / "lock").is_file()
    config = ProjectConfiguration(project_dir=str(run.parent), automatic_checkpoint_naming=True, total_limit=2, iteration=4)
    accelerator = accelerate.Accelerator(project_config=config, cpu=True)
    accelerator.prepare(torch.nn.Linear(4, 2))
    accelerator.load_state()  # the newest save, found by parsing every name in checkpoints/
    accelerator.save_state()
    assert sorted(os.listdir(run)) == ["checkpoint_3", "checkpoint_4"]
