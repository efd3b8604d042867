"""The fresh-run matrix (``matrix.py``) for accelerate: a real ``Accelerator`` with automatic
checkpoint naming (``total_limit=3``) saving ``checkpoint_0..2`` with ``save_state()``; the
oracle is ``accelerator.load_state(path)``, and the automatic pick is the folder a bare
``load_state()`` chooses (``Accelerator.load_state`` in ``accelerate/accelerator.py``: the
highest number in any name under ``checkpoints/``), asked of accelerate itself through a
``register_load_state_pre_hook`` hook that stops it before it loads.

``load_state`` restores the models, optimizers and schedulers and, from
``random_states_<rank>.pkl``, the RNGs and ``accelerator.step``; where that file cannot be read it
only logs "Could not load random states" and goes on from the save. So the digest is of what it
resumes a save by (model, optimizer, scheduler), as ckptdoctor's verdict is: a save whose RNG file
is lost is still its resume point, with a warning that the RNGs and the step are not restored
(``tests/test_accelerate.py`` holds that warning to what ``load_state`` leaves).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from frameworks import accelerator_for, step_and_save
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

accelerate = pytest.importorskip("accelerate")


def build(folder: Path) -> Path:
    accelerator, *prepared = accelerator_for(folder / "project")
    for _ in range(3):
        step_and_save(accelerator, *prepared)
    return folder / "project" / "checkpoints"


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(p.name.split("_")[1]): p for p in run.glob("checkpoint_*") if p.is_dir() and p.name.split("_")[1].isdigit()}


_restores = itertools.count()


def restore(run: Path, path: Path) -> str:
    """What ``accelerator.load_state(path)`` restores of the save: the model, optimizer and scheduler."""
    accelerator, model, optimizer, scheduler = accelerator_for(run.parent.parent / f"restored-{next(_restores)}")
    try:
        accelerator.load_state(str(path))
    except Exception as error:
        raise Unrestorable(f"{type(error).__name__}: {error}") from error
    return tensors_digest(model.state_dict(), optimizer.state_dict(), scheduler.state_dict())


class _Picked(Exception):
    """Raised from the load-state pre-hook with the folder ``load_state()`` chose."""


def _stop(models: object, input_dir: str) -> None:
    raise _Picked(input_dir)


def auto_resume(run: Path) -> Path | None:
    """The folder a bare ``accelerator.load_state()`` picks (raising where it cannot pick one)."""
    accelerator, *_ = accelerator_for(run.parent)
    accelerator.register_load_state_pre_hook(_stop)
    try:
        accelerator.load_state()
    except _Picked as picked:
        return Path(str(picked))
    except Exception as error:
        raise Unrestorable(f"{type(error).__name__}: {error}") from error
    raise AssertionError("load_state() loaded without calling its pre-hook")


# A bare `load_state()`, then the save count set past the newest folder, as ckptdoctor's own hint
# says (accelerate does not restore it: the next `save_state()` would write `checkpoint_0`), and
# the next save; `total_limit=3` deletes `checkpoint_0` first
SAVE_MORE = """
from frameworks import accelerator_for, step_and_save
accelerator, *prepared = accelerator_for(run.parent)
accelerator.load_state()
accelerator.project_configuration.iteration = 3
step_and_save(accelerator, *prepared)
"""

ACCELERATE = Fresh(
    name="accelerate",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=auto_resume,
    save_more=SAVE_MORE,
    # model.safetensors, optimizer.bin, then scheduler.bin and random_states_0.pkl
    kill_points=(KillPoint(1, 0.5), KillPoint(2, 0.5), KillPoint(2, 1.0)),
    state=lambda checkpoint: checkpoint / "optimizer.bin",
)

test_breakage, test_killed_mid_save = matrix_tests(
    accelerate.__version__,
    ACCELERATE,
)
