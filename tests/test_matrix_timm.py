"""The fresh-run matrix (``matrix.py``) for timm 1.0.31: timm's own ``CheckpointSaver``
(``timm/utils/checkpoint_saver.py``) saving three epochs of train.py's loop
(``frameworks.timm_train``): each ``save_checkpoint`` writes ``tmp.pth.tar``, moves it onto
``last.pth.tar`` and hard-links it as ``checkpoint-<epoch>.pth.tar`` (and ``model_best.pth.tar`` on a
new best). The oracle is ``--resume <file>``: timm's own ``resume_checkpoint``
(``timm/models/_helpers.py``) into train.py's model and optimizer, and the epoch it returns, which
train.py goes on at (its scheduler is stepped to that epoch, nothing of it is saved).

timm is loaded from its files (``frameworks.timm_own``): ``import timm`` needs torchvision, which
``pip install timm --no-deps`` leaves out; this module skips without timm.

train.py resumes only the file its user names (``--resume``; there is no automatic pick). It keeps no
pointer and bundles the optimizer: ``deleted-state``, ``stale-pointer`` and ``deleted-pointer`` do not
apply. ``last.pth.tar`` (a hard link of the newest save, so broken with it) is a copy it resumes from.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from frameworks import timm_model, timm_own, timm_train
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

try:
    TIMM = version("timm")
except PackageNotFoundError:
    pytest.skip("timm is not installed (pip install timm --no-deps)", allow_module_level=True)

_EPOCH = re.compile(r"^checkpoint-([0-9]+)\.pth\.tar\Z")
LAST = "last.pth.tar"


def build(folder: Path) -> Path:
    timm_train(folder / "output" / "train" / "exp", range(3))
    return folder / "output" / "train" / "exp"


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(match[1]): path for path in run.iterdir() if (match := _EPOCH.match(path.name))}


def restore(run: Path, path: Path) -> str:
    """``--resume path``: ``resume_checkpoint(model, path, optimizer)``, and the epoch train.py goes on at."""
    _, helpers = timm_own()
    model, optimizer = timm_model()
    try:
        epoch = helpers.resume_checkpoint(model, str(path), optimizer, log_info=False)
    except Exception as error:
        raise Unrestorable(f"{type(error).__name__}: {error}") from error
    return tensors_digest(model.state_dict(), optimizer.state_dict(), epoch)


def last_copy(run: Path) -> dict[int, Path]:
    """``last.pth.tar``, by the epoch it saved (``resume_checkpoint`` goes on at the next)."""
    _, helpers = timm_own()
    model, optimizer = timm_model()
    try:
        return {helpers.resume_checkpoint(model, str(run / LAST), optimizer, log_info=False) - 1: run / LAST}
    except Exception:
        return {}


TIMM_RUN = Fresh(
    name="timm",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=None,
    save_more="from frameworks import timm_train\ntimm_train(run, range(3, 4), resume=run / 'last.pth.tar')",
    # args.yaml, then one torch.save into tmp.pth.tar (the optimizer's momentum first, then the
    # weights), then a move onto last.pth.tar and links: cut in the optimizer, cut in the weights,
    # whole but not moved
    kill_points=(KillPoint(2, 0.3), KillPoint(2, 0.8), KillPoint(2, 1.0)),
    copies=last_copy,
)

test_breakage, test_killed_mid_save = matrix_tests(
    TIMM,
    TIMM_RUN,
)
