"""timm train.py trees, written the way timm's own code writes them, and resumed the way it resumes.

timm cannot be installed here: ``import timm`` imports torchvision (``timm/layers/create_norm.py``),
whose PyPI wheels do not match this torch. So ``Saver`` does what ``CheckpointSaver`` in
``timm/utils/checkpoint_saver.py`` does, and ``timm_resume`` what ``resume_checkpoint`` and
``_torch_load`` in ``timm/models/_helpers.py`` do, both at huggingface/pytorch-image-models
aa4b5850c1543fa488abf260f18390eda46cf85d: the same dict, names, renames and hard links, and the
same ``torch.load`` with only ``argparse.Namespace`` allowed.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest

from ckptdoctor.pipelines.scan import scan

torch = pytest.importorskip("torch")


class Saver:
    """``CheckpointSaver(model, optimizer, args=args, checkpoint_dir=recovery_dir=folder)`` as train.py makes it."""

    def __init__(self, folder: Path, extra: dict[str, Any] | None = None) -> None:
        folder.mkdir(parents=True)
        (folder / "args.yaml").write_text("model: linear\n")  # train.py writes it before training
        (folder / "summary.csv").write_text("epoch,train_loss\n")
        self.folder = folder
        self.extra = extra or {}
        self.args = argparse.Namespace(model="linear", lr=0.1, epochs=10, recovery_interval=2)
        torch.manual_seed(0)
        self.model = torch.nn.Linear(8, 4)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.recovery = ("", "")  # prev_recovery_file, curr_recovery_file

    def train(self) -> None:
        self.model(torch.randn(2, 8)).sum().backward()
        self.optimizer.step()

    def _save(self, path: Path, epoch: int) -> None:
        state = {"epoch": epoch, "arch": self.args.model, "optimizer": self.optimizer.state_dict(), "version": 2}
        state["args"] = self.args
        state["state_dict"] = self.model.state_dict()
        torch.save({**state, **self.extra}, path)

    def save_checkpoint(self, epoch: int, best: bool = False) -> None:
        self._save(self.folder / "tmp.pth.tar", epoch)
        os.replace(self.folder / "tmp.pth.tar", self.folder / "last.pth.tar")
        os.link(self.folder / "last.pth.tar", self.folder / f"checkpoint-{epoch}.pth.tar")
        if best:
            (self.folder / "model_best.pth.tar").unlink(missing_ok=True)
            os.link(self.folder / "last.pth.tar", self.folder / "model_best.pth.tar")

    def save_recovery(self, epoch: int, update: int) -> None:
        self._save(self.folder / "recovery_tmp.pth.tar", epoch)
        path = str(self.folder / f"recovery-{epoch}-{update}.pth.tar")
        os.replace(self.folder / "recovery_tmp.pth.tar", path)
        previous, current = self.recovery
        if os.path.exists(previous):
            os.remove(previous)
        self.recovery = (current, path)


def timm_run(folder: Path, epochs: range, extra: dict[str, Any] | None = None) -> Path:
    """Whole epochs, the one before the last the best so far."""
    saver = Saver(folder, extra)
    for epoch in epochs:
        saver.train()
        saver.save_checkpoint(epoch, best=epoch == epochs[-2])
    return folder


def timm_resume(path: str | Path) -> tuple[int, torch.nn.Linear]:
    """``resume_checkpoint(model, path, optimizer)``: the epoch train.py goes on at, and the model."""
    with torch.serialization.safe_globals([argparse.Namespace]):
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model = torch.nn.Linear(8, 4)
    model.load_state_dict(checkpoint["state_dict"])
    torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9).load_state_dict(checkpoint["optimizer"])
    return checkpoint["epoch"] + 1 if checkpoint["version"] > 1 else checkpoint["epoch"], model


def _resume_file(run: dict[str, Any]) -> str:
    (picked,) = [c for c in run["checkpoints"] if c["index"] == run["resume"]["index"]]
    (file,) = picked["files"]
    return str(file["path"])


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


def test_the_saved_args_namespace_is_ckd402_info_because_timm_loads_it(tmp_path, cli):
    folder = timm_run(tmp_path / "exp", range(1, 4))
    result = cli("verify", "--json", "--fail-on", "warning", folder)
    findings = result.json["findings"]
    assert result.exit_code == 0, findings
    assert {(f["code"], f["severity"]) for f in findings} == {("CKD402", "info")}
    assert len(findings) == 5  # three numbered files, last.pth.tar and model_best.pth.tar (links, read once each)
    assert all("argparse.Namespace" in f["message"] for f in findings)
    # what the finding says: torch's default refuses the file, timm's own resume loads it
    with pytest.raises(Exception, match=r"argparse\.Namespace"):
        torch.load(folder / "checkpoint-3.pth.tar", weights_only=True)
    assert timm_resume(folder / "checkpoint-3.pth.tar")[0] == 4
    # and the table marks no file as damaged: a ✗ beside "✓ complete" would contradict it
    table = cli("verify", folder).stdout
    assert "✗" not in table and table.count("✓ complete") == 3


def test_any_other_global_beside_the_namespace_keeps_the_warning(tmp_path, cli):
    np = pytest.importorskip("numpy")
    folder = timm_run(tmp_path / "exp", range(1, 3), extra={"metric": np.float64(71.5)})
    findings = cli("verify", "--json", folder).json["findings"]
    assert findings and all((f["code"], f["severity"]) == ("CKD402", "warning") for f in findings)
    assert all("numpy" in f["message"] for f in findings)
    # timm's loader allows the Namespace only, so its own resume fails on these files
    with pytest.raises(Exception, match="numpy"):
        timm_resume(folder / "checkpoint-2.pth.tar")


def test_a_namespace_outside_a_timm_run_stays_a_warning(tmp_path, cli):
    folder = tmp_path / "loop"
    folder.mkdir()
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in (1, 2):
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "args": argparse.Namespace(lr=0.1)}
        torch.save(state, folder / f"epoch_{epoch}.pt")
    report = cli("verify", "--json", folder).json
    assert report["runs"][0]["layout"] == "torch"
    assert [(f["code"], f["severity"]) for f in report["findings"]] == [("CKD402", "warning")] * 2


def test_a_run_killed_mid_epoch_resumes_from_its_newest_recovery_save(tmp_path, inspect_json):
    saver = Saver(tmp_path / "exp")
    for epoch in range(3):
        for update in range(4):
            saver.train()
            if (update + 1) % saver.args.recovery_interval == 0:
                saver.save_recovery(epoch, update)
        saver.save_checkpoint(epoch)
    for update in range(4):  # epoch 3 is killed after its second recovery save
        saver.train()
        if (update + 1) % saver.args.recovery_interval == 0:
            saver.save_recovery(3, update)
    names = sorted(p.name for p in saver.folder.glob("recovery-*"))
    assert names == ["recovery-3-1.pth.tar", "recovery-3-3.pth.tar"]  # the saver keeps its newest two
    (run,) = inspect_json(saver.folder).json["runs"]
    assert [c["index"] for c in run["checkpoints"]] == [0, 1, 2, 3]
    assert run["resume"]["index"] == 3 and _resume_file(run).endswith("recovery-3-3.pth.tar")
    (scanned,) = scan([str(saver.folder)]).runs
    advice = scanned.resume_how
    assert "`--resume " in advice and "goes on at epoch 4, skipping the rest of epoch 3" in advice
    assert "recovery-3-1.pth.tar" in {Path(f["path"]).name for f in run["loose_files"]}
    # timm resumes from it with the newest weights there are, and goes on at epoch 4
    epoch, model = timm_resume(_resume_file(run))
    assert epoch == 4 and torch.equal(model.weight, saver.model.weight)


def test_a_finished_epoch_supersedes_its_recovery_saves(tmp_path, inspect_json):
    saver = Saver(tmp_path / "exp")
    for epoch in range(2):
        saver.train()
        saver.save_recovery(epoch, 1)
        saver.train()
        saver.save_checkpoint(epoch)
    (run,) = inspect_json(saver.folder).json["runs"]
    assert [c["index"] for c in run["checkpoints"]] == [0, 1]
    assert _resume_file(run).endswith("checkpoint-1.pth.tar")
    assert sorted(Path(f["path"]).name for f in run["loose_files"]) == [
        "last.pth.tar", "recovery-0-1.pth.tar", "recovery-1-1.pth.tar",
    ]  # fmt: skip
    epoch, model = timm_resume(_resume_file(run))
    assert epoch == 2 and torch.equal(model.weight, saver.model.weight)


def test_a_first_epoch_killed_after_a_recovery_save_resumes_from_it(tmp_path, inspect_json):
    saver = Saver(tmp_path / "exp")
    saver.train()
    saver.save_recovery(0, 1)
    (run,) = inspect_json(saver.folder).json["runs"]
    assert (run["layout"], run["resume"]["index"]) == ("timm", 0)
    assert timm_resume(_resume_file(run))[0] == 1


def test_a_cut_newest_recovery_save_falls_back_to_the_last_whole_epoch(tmp_path, inspect_json):
    saver = Saver(tmp_path / "exp")
    for epoch in range(2):
        saver.train()
        saver.save_checkpoint(epoch)
    saver.train()
    saver.save_recovery(2, 5)
    path = saver.folder / "recovery-2-5.pth.tar"
    path.write_bytes(path.read_bytes()[:700])
    report = inspect_json(saver.folder).json
    (run,) = report["runs"]
    assert [c["status"] for c in run["checkpoints"]][-1] != "complete"
    assert run["resume"]["index"] == 1 and _resume_file(run).endswith("checkpoint-1.pth.tar")
    assert any(f["code"] == "CKD203" and f["path"].endswith("recovery-2-5.pth.tar") for f in report["findings"])
    assert timm_resume(_resume_file(run))[0] == 2


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
    folder = tmp_path / "loop"
    folder.mkdir()
    for epoch in (1, 2):
        torch.save({"model": {}, "optimizer": {}}, folder / f"checkpoint-{epoch}.pth.tar")
    assert inspect_json(folder).json["runs"][0]["layout"] == "torch"
