"""timm train.py trees, built by hand with the exact names, hard links and staging of timm."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def timm_run(folder: Path, epochs: range) -> Path:
    """What timm's CheckpointSaver leaves: last.pth.tar renamed from tmp, numbered hard links."""
    torch = pytest.importorskip("torch")
    folder.mkdir(parents=True)
    (folder / "args.yaml").write_text("model: resnet18\n")
    (folder / "summary.csv").write_text("epoch,train_loss\n")
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in epochs:
        model(torch.randn(2, 8)).sum().backward()
        optimizer.step()
        state = {"epoch": epoch, "arch": "linear", "version": 2, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save(state, folder / "tmp.pth.tar")
        os.replace(folder / "tmp.pth.tar", folder / "last.pth.tar")
        os.link(folder / "last.pth.tar", folder / f"checkpoint-{epoch}.pth.tar")
    os.link(folder / f"checkpoint-{epochs[-2]}.pth.tar", folder / "model_best.pth.tar")
    return folder


def test_a_healthy_timm_run_counts_hard_links_once(tmp_path, inspect_json):
    folder = timm_run(tmp_path / "output" / "train" / "exp", range(3, 6))
    result = inspect_json(tmp_path / "output")
    report = result.json
    assert result.exit_code == 0 and report["findings"] == []
    (run,) = report["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("timm", "epoch", 5)
    assert [c["index"] for c in run["checkpoints"]] == [3, 4, 5]
    assert sorted(Path(f["path"]).name for f in run["loose_files"]) == ["last.pth.tar", "model_best.pth.tar"]
    distinct = {(p.stat().st_dev, p.stat().st_ino): p.stat().st_size for p in folder.glob("*")}
    assert run["bytes"] == sum(distinct.values())


def test_a_leftover_tmp_file_is_ckd202(tmp_path, inspect_json):
    folder = timm_run(tmp_path / "exp", range(1, 4))
    (folder / "tmp.pth.tar").write_bytes((folder / "last.pth.tar").read_bytes()[:500])
    report = inspect_json(folder).json
    (staged,) = [f for f in report["findings"] if f["code"] == "CKD202"]
    assert staged["path"].endswith("tmp.pth.tar")
    assert report["runs"][0]["resume"]["index"] == 3


def test_a_cut_last_pth_tar_is_ckd203_and_the_numbered_files_still_resume(tmp_path, inspect_json):
    folder = timm_run(tmp_path / "exp", range(1, 4))
    data = (folder / "last.pth.tar").read_bytes()
    (folder / "last.pth.tar").unlink()
    (folder / "last.pth.tar").write_bytes(data[: len(data) // 2])
    report = inspect_json(folder).json
    (cut,) = [f for f in report["findings"] if f["code"] == "CKD203"]
    assert cut["path"].endswith("last.pth.tar")
    assert report["runs"][0]["resume"]["index"] == 3


def test_a_hand_made_loop_with_timm_like_names_is_not_timm(tmp_path, inspect_json):
    torch = pytest.importorskip("torch")
    folder = tmp_path / "loop"
    folder.mkdir()
    for epoch in (1, 2):
        torch.save({"model": {}, "optimizer": {}}, folder / f"checkpoint-{epoch}.pth.tar")
    assert inspect_json(folder).json["runs"][0]["layout"] == "torch"
