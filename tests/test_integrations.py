"""The training callbacks (``ckptdoctor.integrations``) on a real small disk (a tmpfs, as root):
real Lightning and HF Trainer runs stop cleanly before the save that would not fit, with
CKD501's message, every checkpoint already saved stays whole, and ``fit()`` / ``train()`` then
raise ``DiskCheckFailed`` (a pipeline sees the failure); with room, training and saving are
untouched."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from frameworks import hf_trainer, lightning_fit, tiny_module

pytestmark = pytest.mark.slow  # real framework runs

MiB = 2**20


@pytest.fixture
def disk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A tmpfs of ``request.param`` MiB."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={request.param}m", "tmpfs", str(where)], capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


class Logged(logging.Handler):
    """What the ``ckptdoctor`` logger said (pytest's caplog may be switched off)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def logged() -> Iterator[Logged]:
    handler = Logged()
    logger = logging.getLogger("ckptdoctor")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def this_checkout() -> dict[str, str]:
    """The environment for a script that imports this checkout's ckptdoctor (and the tests'
    helpers), whichever one the environment has installed."""
    here = Path(__file__).resolve().parent
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parent), str(here)])}


def errors_in(folder: Path) -> list[str]:
    from ckptdoctor.pipelines.scan import inspect

    report, _ = inspect([str(folder)])
    return [f.code for f in report.findings if f.severity.value == "error"]


# --- Lightning ----------------------------------------------------------------------------------------


def wide_fit(root: Path, epochs: int, callbacks: list[Any], optimizer: str = "AdamW", **checkpointing: Any) -> Any:
    """A real ``fit`` of a model with 0.5 MiB of parameters (a save with AdamW is ~1.5 MiB), 2
    steps an epoch, ``ModelCheckpoint`` keeping every epoch in ``root/checkpoints`` (unless
    ``checkpointing`` says otherwise)."""
    module = tiny_module(256, 512, optimizer, scheduler=False)
    return lightning_fit(root, epochs, module=module, callbacks=callbacks, samples=8, **{"save_top_k": -1, **checkpointing})


@pytest.mark.parametrize("disk", [4], indirect=True)
def test_lightning_stops_before_the_save_that_would_not_fit(disk, logged):
    from ckptdoctor.integrations.lightning import DiskCheck

    check = DiskCheck(raise_on_stop=False)  # fit() returns: its trainer is looked at
    trainer = wide_fit(disk, 6, [check])
    saved = sorted(p.name for p in (disk / "checkpoints").iterdir())
    assert saved == ["epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt"], "two 1.5 MiB saves fit in 4 MiB, the third does not"
    assert check.stopped is not None and check.stopped.code == "CKD501"
    assert trainer.current_epoch < 6 and trainer.should_stop
    assert "CKD501 insufficient-space" in logged.text and "fix:" in logged.text
    assert errors_in(disk / "checkpoints") == [], "every checkpoint saved is whole"
    with pytest.raises((RuntimeError, OSError)):  # the prediction was right: that save does not fit
        trainer.save_checkpoint(disk / "checkpoints" / "epoch=2-step=6.ckpt")


@pytest.mark.parametrize("disk", [1], indirect=True)
def test_lightning_first_save_is_judged_from_the_model_and_its_optimizer(disk):
    from ckptdoctor.integrations.lightning import DiskCheck, DiskCheckFailed

    check = DiskCheck()
    with pytest.raises(DiskCheckFailed) as failed:
        wide_fit(disk, 3, [check])
    assert failed.value.finding is check.stopped and check.stopped is not None and check.stopped.code == "CKD501"
    assert "adamw state" in check.stopped.message
    assert not (disk / "checkpoints").exists() or not any((disk / "checkpoints").iterdir())


@pytest.mark.parametrize("disk", [64], indirect=True)
def test_lightning_with_room_trains_and_saves_untouched(disk):
    from ckptdoctor.integrations.lightning import DiskCheck

    check = DiskCheck()
    trainer = wide_fit(disk, 4, [check])
    assert check.stopped is None and check.report is not None and check.report.ok
    assert trainer.current_epoch == 4
    assert len(list((disk / "checkpoints").glob("epoch=*.ckpt"))) == 4


# --- HF Trainer ---------------------------------------------------------------------------------------


def hf_train(output: Path, steps: int, callbacks: list[Any], evaluate: bool = False, **arguments: Any) -> Any:
    """A real ``Trainer.train`` of a small GPT-2 (a ``checkpoint-N`` is ~1.6 MiB), saving every step."""
    trainer = hf_trainer(output, steps, callbacks, width=64, vocab=512, samples=64, save_steps=1, evaluate=evaluate, **arguments)
    trainer.train()
    return trainer


@pytest.mark.parametrize("disk", [6], indirect=True)
def test_hf_trainer_stops_before_the_save_that_would_not_fit(disk, logged):
    from ckptdoctor.integrations.transformers import DiskCheckCallback

    check = DiskCheckCallback(raise_on_stop=False)  # train() returns: its trainer is looked at
    trainer = hf_train(disk / "out", 8, [check])
    saved = sorted((disk / "out").glob("checkpoint-*"))
    assert 1 <= len(saved) < 8
    assert check.stopped is not None and check.stopped.code == "CKD501"
    assert trainer.state.global_step < 8
    assert "CKD501 insufficient-space" in logged.text
    assert errors_in(disk / "out") == [], "every checkpoint-N saved is whole"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    one = sum(f.stat().st_size for f in saved[-1].iterdir())
    assert free < one * 1.1, "the save it stopped before would not have fitted"


@pytest.mark.parametrize("disk", [64], indirect=True)
def test_hf_trainer_with_room_trains_and_saves_untouched(disk):
    from ckptdoctor.integrations.transformers import DiskCheckCallback

    check = DiskCheckCallback()
    trainer = hf_train(disk / "out", 3, [check])
    assert check.stopped is None and check.report is not None and check.report.ok
    assert trainer.state.global_step == 3
    assert sorted(p.name for p in (disk / "out").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]


_FAILING_TRAIN = """
import sys
from pathlib import Path
from frameworks import hf_trainer
from ckptdoctor.integrations.transformers import DiskCheckCallback

hf_trainer(Path(sys.argv[1]), 4, [DiskCheckCallback()], width=64, vocab=512, samples=64, save_steps=1).train()
"""


@pytest.mark.parametrize("disk", [1], indirect=True)
def test_hf_trainer_a_script_stopped_for_the_disk_exits_non_zero(disk, tmp_path):
    """Issue 35, item 7: training stopped before a save that would not fit ended with exit 0, so a
    pipeline carried on as if it had succeeded."""
    script = tmp_path / "train.py"
    script.write_text(_FAILING_TRAIN)
    result = subprocess.run(
        [sys.executable, str(script), str(disk / "out")], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=this_checkout()
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "DiskCheckFailed: ckptdoctor stopped training before a save: CKD501 insufficient-space" in result.stderr
    assert not list((disk / "out").glob("checkpoint-*")), "the first save did not fit: none was begun"


@pytest.mark.parametrize("disk", [1], indirect=True)
def test_lightning_fit_stopped_for_the_disk_raises_after_its_teardown(disk):
    from ckptdoctor.integrations.lightning import DiskCheck, DiskCheckFailed

    with pytest.raises(DiskCheckFailed, match="CKD501 insufficient-space") as failed:
        wide_fit(disk, 3, [DiskCheck()])
    assert failed.value.finding.code == "CKD501" and failed.value.exit_code == 1


def test_the_integrations_package_and_the_core_import_no_framework():
    code = (
        "import sys, ckptdoctor, ckptdoctor.integrations, ckptdoctor.api, ckptdoctor.cli;"
        "bad = [m for m in ('torch', 'lightning', 'transformers') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("disk", [64], indirect=True)
def test_lightning_an_optimizer_ckptdoctor_does_not_know_is_sized_and_training_goes_on(disk):
    from ckptdoctor.integrations.lightning import DiskCheck

    check = DiskCheck()
    trainer = wide_fit(disk, 2, [check], optimizer="NAdam")
    assert check.stopped is None and trainer.current_epoch == 2
    assert len(list((disk / "checkpoints").glob("epoch=*.ckpt"))) == 2


@pytest.mark.parametrize("disk", [1], indirect=True)
def test_lightning_weights_only_saves_are_sized_without_optimizer_state(disk):
    from ckptdoctor.integrations.lightning import DiskCheck

    check = DiskCheck()
    wide_fit(disk, 1, [check], save_weights_only=True)  # 0.5 MiB of weights in 1 MiB: fits
    assert check.stopped is None
    assert [p.name for p in (disk / "checkpoints").iterdir()] == ["epoch=0-step=2.ckpt"]


@pytest.mark.parametrize("disk", [1], indirect=True)
def test_lightning_no_save_due_means_no_stop(disk):
    from ckptdoctor.integrations.lightning import DiskCheck

    check = DiskCheck()
    trainer = wide_fit(disk, 3, [check], every_n_train_steps=100)  # 2 steps an epoch: never saves
    assert check.stopped is None and check.report is None
    assert trainer.current_epoch == 3


@pytest.mark.parametrize("disk", [1], indirect=True)
def test_lightning_a_blocked_first_save_writes_no_last_ckpt_either(disk):
    from ckptdoctor.integrations.lightning import DiskCheck, DiskCheckFailed

    check = DiskCheck()
    with pytest.raises(DiskCheckFailed):
        wide_fit(disk, 3, [check], save_last=True)
    assert check.stopped is not None and check.stopped.code == "CKD501"
    assert not (disk / "checkpoints").exists() or not any((disk / "checkpoints").iterdir())


@pytest.mark.parametrize("disk", [1], indirect=True)
def test_lightning_a_full_tmpdir_where_it_stages_saves_stops_training(disk, tmp_path, monkeypatch):
    import tempfile

    from ckptdoctor.integrations.lightning import DiskCheck, DiskCheckFailed

    monkeypatch.setattr(tempfile, "tempdir", str(disk))  # Lightning writes each checkpoint there first
    check = DiskCheck()
    with pytest.raises(DiskCheckFailed):
        wide_fit(tmp_path / "roomy", 2, [check])
    assert check.stopped is not None and check.stopped.code == "CKD501"
    assert str(disk) in check.stopped.message and "moves it" in check.stopped.message
    assert not (tmp_path / "roomy" / "checkpoints").exists() or not any((tmp_path / "roomy" / "checkpoints").iterdir())


@pytest.mark.parametrize("disk", [2], indirect=True)
def test_hf_trainer_save_strategy_best_is_judged_before_its_evaluation(disk):
    from ckptdoctor.integrations.transformers import DiskCheckCallback

    check = DiskCheckCallback(raise_on_stop=False)  # train() returns: its trainer is looked at
    best = {"eval_strategy": "steps", "eval_steps": 1, "save_strategy": "best", "metric_for_best_model": "loss"}
    trainer = hf_train(disk / "out", 8, [check], evaluate=True, **best)
    assert check.stopped is not None and check.stopped.code == "CKD501"
    assert trainer.state.global_step < 8
    assert not (disk / "out").exists() or errors_in(disk / "out") == [], "nothing half-saved"


_DDP_FIT = """
import json, sys, warnings
from pathlib import Path
import torch, lightning
from lightning.pytorch.callbacks import ModelCheckpoint
from ckptdoctor.integrations.lightning import DiskCheck, DiskCheckFailed

root = Path(sys.argv[1])

class Wide(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(256, 512)
    def training_step(self, batch, index):
        return self.layer(batch).pow(2).mean()
    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

torch.manual_seed(0)
check = DiskCheck()
trainer = lightning.Trainer(
    default_root_dir=root, max_epochs=6, accelerator="cpu", devices=2, strategy="ddp",
    callbacks=[ModelCheckpoint(dirpath=root / "checkpoints", save_top_k=-1), check],
    logger=False, enable_progress_bar=False, enable_model_summary=False,
)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        trainer.fit(Wide(), torch.utils.data.DataLoader(torch.randn(16, 256), batch_size=4))
    except DiskCheckFailed as failed:
        assert failed.finding is check.stopped
(root / f"rank{trainer.global_rank}.json").write_text(json.dumps({"stopped": check.stopped.code if check.stopped else None}))
"""


@pytest.mark.parametrize("disk", [4], indirect=True)
def test_lightning_under_ddp_every_rank_skips_the_same_save_and_stops(disk, tmp_path):
    pytest.importorskip("lightning")
    script = tmp_path / "fit.py"
    script.write_text(_DDP_FIT)
    result = subprocess.run(
        [sys.executable, str(script), str(disk)], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=this_checkout()
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert [(disk / f"rank{rank}.json").read_text() for rank in (0, 1)] == ['{"stopped": "CKD501"}'] * 2
    assert sorted(p.name for p in (disk / "checkpoints").iterdir()) == ["epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt"]
    assert errors_in(disk / "checkpoints") == []
