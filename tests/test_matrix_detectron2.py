"""The fresh-run matrix (``matrix.py``) for Detectron2's ``DefaultTrainer``.

Detectron2 is not on PyPI and cannot be installed here (docs/framework-sources.md): the run is
written by ``frameworks.Detectron2Trainer``, which saves as facebookresearch/detectron2 02b5c4e2
and fvcore 3378afe do (``PeriodicCheckpointer.step``, ``Checkpointer.save`` and
``tag_last_checkpoint`` in ``fvcore/common/checkpoint.py``), every 4 iterations. The oracle is
``Detectron2Trainer.resumed``, ``DefaultTrainer.resume_or_load(resume=True)`` from the same
sources: fvcore's ``Checkpointer.load`` (``torch.load`` with torch's defaults, the weights with
``strict=False``, then each checkpointable whose key is there) of what ``last_checkpoint`` names
(``get_checkpoint_file``); the automatic resume is ``train_net.py --resume``, which starts from
``MODEL.WEIGHTS`` at iteration 0 when ``last_checkpoint`` is missing (``has_checkpoint``).
Restoring one chosen file is writing its name into ``last_checkpoint`` first, as ckptdoctor's
resume hint says (``--resume`` loads nothing else).

Two runs: one stopped after iteration 11 of 100 (a job preempted mid-training), and one that
finished at ``max_iter`` 12, whose ``model_final.pth`` is a second whole save of iteration 11.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from frameworks import Detectron2Trainer
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

torch = pytest.importorskip("torch")

SOURCE = "detectron2-02b5c4e2-fvcore-3378afe"
"""The commits the builder and the oracle follow (they key the cached run)."""
MAX_ITER = 100
_PERIODIC = re.compile(r"^model_([0-9]{7})\.pth\Z")
LAST = "last_checkpoint"


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(match[1]): path for path in run.iterdir() if (match := _PERIODIC.match(path.name))}


def restorer(max_iter: int):  # type: ignore[no-untyped-def]
    def restore(run: Path, path: Path) -> str:
        """``--resume`` once ``last_checkpoint`` names ``path``: the weights, the optimizer, the
        LRScheduler hook's state and the iteration it goes on after."""
        with tempfile.TemporaryDirectory() as output:
            try:
                trainer = Detectron2Trainer.resumed(Path(output), checkpoint=path, max_iter=max_iter)
            except Exception as error:
                raise Unrestorable(f"{type(error).__name__}: {error}") from error
        state = (trainer.model.state_dict(), trainer.optimizer.state_dict(), trainer.scheduler.state_dict())
        return tensors_digest(*state, trainer.start_iter)

    return restore


def auto_resume(run: Path) -> Path | None:
    """``resume_or_load(resume=True)``: ``OUTPUT_DIR`` joined with what ``last_checkpoint`` says."""
    tag = run / LAST
    return run / tag.read_text().strip() if tag.exists() else None


def build_stopped(folder: Path) -> Path:
    return Detectron2Trainer(folder / "output", max_iter=MAX_ITER).train(until=12).output


def build_finished(folder: Path) -> Path:
    return Detectron2Trainer(folder / "output", max_iter=12).train().output


STOPPED = Fresh(
    name="stopped",
    build=build_stopped,
    checkpoints=checkpoints,
    restore=restorer(MAX_ITER),
    auto_resume=auto_resume,
    save_more=f"from frameworks import Detectron2Trainer\nDetectron2Trainer.resumed(run, max_iter={MAX_ITER}).train(until=16)",
    # default_setup's config.yaml, iterations 12-14 appending to metrics.json (files 1-4), then
    # model_0000015.pth cut, whole, and last_checkpoint opened (truncated) with nothing written
    kill_points=(KillPoint(5, 0.5), KillPoint(5, 1.0), KillPoint(6, 0.0)),
    pointer=lambda run: run / LAST,
    stale=lambda run: (run / LAST).write_text("model_0000015.pth"),
)
FINISHED = Fresh(
    name="finished",
    build=build_finished,
    checkpoints=checkpoints,
    restore=restorer(12),
    auto_resume=auto_resume,
    save_more="",  # a finished run saves nothing more: start_iter is max_iter
    pointer=lambda run: run / LAST,
    stale=lambda run: (run / LAST).write_text("model_0000015.pth"),
    copies=lambda run: {11: run / "model_final.pth"},
)


test_breakage, test_killed_mid_save = matrix_tests(
    SOURCE,
    STOPPED,
    FINISHED,
)
