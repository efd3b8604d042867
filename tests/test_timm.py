"""timm train.py trees, written the way timm's own code writes them, and resumed the way it resumes.

timm cannot be imported here: ``import timm`` (and ``timm.utils``) imports torchvision
(``timm/layers/create_norm.py``, ``timm/utils/model.py``), whose PyPI wheels do not match this
torch. So ``Saver`` does what ``CheckpointSaver`` in ``timm/utils/checkpoint_saver.py`` does, and
``timm_resume`` what ``resume_checkpoint`` and ``_torch_load`` in ``timm/models/_helpers.py`` do,
at timm 1.0.31 as released (huggingface/pytorch-image-models aa4b5850 plus its milestones and
bookkeeping): the same dict, names, renames and hard links, and the same ``torch.load`` with only
``argparse.Namespace`` allowed. Where timm is installed (``pip install timm --no-deps``: those two
files import nothing of timm, or only ``unwrap_model`` and ``get_state_dict``), the last test holds
``Saver`` and ``timm_resume`` to timm's own ``CheckpointSaver`` and ``resume_checkpoint``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest
from frameworks import timm_own

from ckptdoctor.pipelines.scan import scan

torch = pytest.importorskip("torch")


class Saver:
    """``CheckpointSaver(model, optimizer, args=args, checkpoint_dir=recovery_dir=folder,
    max_history=max_history)`` as train.py makes it (``--checkpoint-hist``, higher metric better)."""

    def __init__(self, folder: Path, extra: dict[str, Any] | None = None, max_history: int = 10) -> None:
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
        self.max_history = max_history
        self.kept: list[tuple[Path, float]] = []  # checkpoint_files: (path, metric), best first
        self.best: float | None = None
        self.best_epoch: int | None = None

    def train(self) -> None:
        self.model(torch.randn(2, 8)).sum().backward()
        self.optimizer.step()

    def _save(self, path: Path, epoch: int, metric: float | None = None) -> None:
        state = {"epoch": epoch, "arch": self.args.model, "optimizer": self.optimizer.state_dict(), "version": 2}
        state["args"] = self.args
        state["state_dict"] = self.model.state_dict()
        if metric is not None:
            state["metric"] = metric
        state["saver"] = {  # CheckpointSaver.state_dict(epoch, metric): what a resume restores of its history
            "checkpoint_files": [(path.name, kept) for path, kept in self.kept],
            "best_epoch": self.best_epoch,
            "best_metric": self.best,
            "pending": (epoch, metric),
        }
        torch.save({**state, **self.extra}, path)

    def save_checkpoint(self, epoch: int, metric: float) -> None:
        """``last.pth.tar`` always; ``checkpoint-<epoch>`` (a hard link to it) only while the metric
        is among the best ``max_history``, the worst kept one deleted to make room; ``model_best``
        on a new best."""
        self._save(self.folder / "tmp.pth.tar", epoch, metric)
        os.replace(self.folder / "tmp.pth.tar", self.folder / "last.pth.tar")
        if len(self.kept) >= self.max_history and metric <= self.kept[-1][1]:
            return
        if len(self.kept) >= self.max_history:  # _cleanup_checkpoints(1)
            for path, _ in self.kept[self.max_history - 1 :]:
                os.remove(path)
            self.kept = self.kept[: self.max_history - 1]
        path = self.folder / f"checkpoint-{epoch}.pth.tar"
        path.unlink(missing_ok=True)
        os.link(self.folder / "last.pth.tar", path)
        self.kept = sorted([*self.kept, (path, metric)], key=lambda kept: kept[1], reverse=True)
        if self.best is None or metric > self.best:
            self.best, self.best_epoch = metric, epoch
            (self.folder / "model_best.pth.tar").unlink(missing_ok=True)
            os.link(self.folder / "last.pth.tar", self.folder / "model_best.pth.tar")

    def save_milestone(self, completed_epochs: int) -> None:
        """1.0.31's ``save_milestone``: ``last.pth.tar`` linked as ``milestone-<completed epochs>``, never evicted."""
        os.link(self.folder / "last.pth.tar", self.folder / f"milestone-{completed_epochs}.pth.tar")

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
        saver.save_checkpoint(epoch, metric=epoch - 1.5 if epoch == epochs[-1] else epoch)
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
        saver.save_checkpoint(epoch, metric=epoch)
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
        saver.save_checkpoint(epoch, metric=epoch)
    (run,) = inspect_json(saver.folder).json["runs"]
    assert [c["index"] for c in run["checkpoints"]] == [0, 1]
    assert _resume_file(run).endswith("checkpoint-1.pth.tar")
    assert sorted(Path(f["path"]).name for f in run["loose_files"]) == [
        "last.pth.tar", "model_best.pth.tar", "recovery-0-1.pth.tar", "recovery-1-1.pth.tar",
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
        saver.save_checkpoint(epoch, metric=epoch)
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


def test_an_epoch_left_out_of_the_kept_best_resumes_from_last_pth_tar(tmp_path, inspect_json):
    saver = Saver(tmp_path / "exp", max_history=2)
    for epoch, metric in enumerate([0.9, 0.8, 0.7, 0.6]):  # each epoch worse: only the first two are numbered
        saver.train()
        saver.save_checkpoint(epoch, metric)
    assert sorted(p.name for p in saver.folder.glob("checkpoint-*")) == ["checkpoint-0.pth.tar", "checkpoint-1.pth.tar"]
    report = inspect_json(saver.folder).json
    (run,) = report["runs"]
    assert report["findings"] == [] and [c["index"] for c in run["checkpoints"]] == [0, 1, 3]
    assert run["resume"]["index"] == 3 and _resume_file(run).endswith("last.pth.tar")
    (scanned,) = scan([str(saver.folder)]).runs
    assert "goes on at epoch 4" in scanned.resume_how
    epoch, model = timm_resume(_resume_file(run))
    assert epoch == 4 and torch.equal(model.weight, saver.model.weight)
    assert timm_resume(saver.folder / "checkpoint-1.pth.tar")[0] == 2  # the newest numbered file: two epochs back


def test_the_end_of_an_epoch_in_last_pth_tar_supersedes_its_recovery_saves(tmp_path, inspect_json):
    saver = Saver(tmp_path / "exp", max_history=1)
    saver.train()
    saver.save_checkpoint(0, 0.9)
    for update in (1, 3):
        saver.train()
        saver.save_recovery(1, update)
    saver.train()
    saver.save_checkpoint(1, 0.5)  # epoch 1 ends below the one kept: no checkpoint-1
    (run,) = inspect_json(saver.folder).json["runs"]
    assert [c["index"] for c in run["checkpoints"]] == [0, 1] and _resume_file(run).endswith("last.pth.tar")
    assert {"recovery-1-1.pth.tar", "recovery-1-3.pth.tar"} <= {Path(f["path"]).name for f in run["loose_files"]}
    epoch, model = timm_resume(_resume_file(run))
    assert epoch == 2 and torch.equal(model.weight, saver.model.weight)
    epoch, model = timm_resume(saver.folder / "recovery-1-3.pth.tar")  # goes on at epoch 2 too, from older weights
    assert epoch == 2 and not torch.equal(model.weight, saver.model.weight)


def test_milestones_stand_for_the_epoch_they_hold(tmp_path, inspect_json):
    saver = Saver(tmp_path / "exp", max_history=1)
    for epoch, metric in enumerate([0.9, 0.8, 0.7, 0.6]):
        saver.train()
        saver.save_checkpoint(epoch, metric)
        if (epoch + 1) % 2 == 0:
            saver.save_milestone(epoch + 1)  # named by the epochs completed: milestone-2 holds epoch 1
    report = inspect_json(saver.folder).json
    (run,) = report["runs"]
    assert report["findings"] == []
    held = [(c["index"], Path(c["files"][0]["path"]).name) for c in run["checkpoints"]]
    assert held == [(0, "checkpoint-0.pth.tar"), (1, "milestone-2.pth.tar"), (3, "milestone-4.pth.tar")]
    assert run["resume"]["index"] == 3 and "last.pth.tar" in {Path(f["path"]).name for f in run["loose_files"]}
    assert timm_resume(saver.folder / "milestone-2.pth.tar")[0] == 2
    epoch, model = timm_resume(_resume_file(run))
    assert epoch == 4 and torch.equal(model.weight, saver.model.weight)


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


def test_saver_and_timm_resume_do_what_timm_does(tmp_path):
    timm_saver, helpers = timm_own()
    ours = Saver(tmp_path / "ours", max_history=2)
    (tmp_path / "timm").mkdir()
    theirs = timm_saver.CheckpointSaver(
        ours.model,
        ours.optimizer,
        args=ours.args,
        checkpoint_dir=str(tmp_path / "timm"),
        recovery_dir=str(tmp_path / "timm"),
        max_history=2,
    )
    for epoch, metric in enumerate([0.5, 0.9, 0.7, 0.6, 0.8]):
        for update in range(4):
            ours.train()
            if (update + 1) % 2 == 0:
                ours.save_recovery(epoch, update)
                theirs.save_recovery(epoch, batch_idx=update)
        ours.save_checkpoint(epoch, metric)
        theirs.save_checkpoint(epoch, metric=metric)
        if (epoch + 1) % 2 == 0:
            ours.save_milestone(epoch + 1)
            theirs.save_milestone(epoch + 1)

    def linked(folder: Path) -> set[frozenset[str]]:
        inodes: dict[int, set[str]] = {}
        for path in folder.glob("*.pth.tar"):
            inodes.setdefault(path.stat().st_ino, set()).add(path.name)
        return {frozenset(names) for names in inodes.values()}

    assert linked(tmp_path / "ours") == linked(tmp_path / "timm")  # the same names, hard-linked alike
    for path in (tmp_path / "timm").glob("*.pth.tar"):
        with torch.serialization.safe_globals([argparse.Namespace]):
            mine, timms = (torch.load(folder / path.name, weights_only=True) for folder in (tmp_path / "ours", path.parent))
        assert list(mine) == list(timms) and all(mine[key] == timms[key] for key in ("epoch", "metric", "saver", "args") if key in timms)
        assert all(torch.equal(mine["state_dict"][name], tensor) for name, tensor in timms["state_dict"].items())
        resumed = torch.nn.Linear(8, 4)
        optimizer = torch.optim.SGD(resumed.parameters(), lr=0.1, momentum=0.9)
        assert helpers.resume_checkpoint(resumed, str(path), optimizer, log_info=False) == timm_resume(path)[0]
