"""The fresh-run matrix (``matrix.py``) for nanoGPT: ``train.py``'s loop and save
(``frameworks.nanogpt_train``, from karpathy/nanoGPT ``train.py``; nanoGPT is a script, not a
package), whose oracle is its ``--init_from=resume`` (``frameworks.nanogpt_load``).

nanoGPT keeps one ``ckpt.pt`` per ``out_dir``, overwritten in place at every eval: its run is
that one checkpoint, not three. The run here saved iterations 2 and 4, was backed up (a copy of
``ckpt.pt`` aside, as a periodic ``rsync`` would leave it), then resumed (saving iteration 4 again
at once, as ``train.py`` does on an eval iteration) and saved 6 over it. The breakages:

- ``truncated-newest``, ``zero-tail``: applied to ``ckpt.pt``;
- ``torn-copy``: the newest ``ckpt.pt``'s head over the backup's, whose tail stays (an ``rsync
  --inplace`` cut off while refreshing the backup), put in its place;
- ``killed-mid-save``: resumed and killed inside its first save, the re-save of the iteration it
  resumed at: ``torch.save`` writes straight over ``ckpt.pt``, so nothing is left to resume from;
- ``deleted-state`` does not apply (the optimizer state is in ``ckpt.pt``), nor do
  ``stale-pointer`` and ``deleted-pointer`` (nanoGPT keeps no pointer).

Its automatic pick is the one file ``--init_from=resume`` loads: ``<out_dir>/ckpt.pt``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from frameworks import nanogpt_load, nanogpt_train
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

torch = pytest.importorskip("torch")

CKPT = "ckpt.pt"


def build(folder: Path) -> Path:
    out = folder / "out"
    nanogpt_train(out, 4)
    (folder / "backup").mkdir()
    shutil.copyfile(out / CKPT, folder / "backup" / CKPT)
    nanogpt_train(out, 6, resume=True)
    return out


def checkpoints(run: Path) -> dict[int, Path]:
    """``ckpt.pt`` by its ``iter_num``; 0 where that cannot be read (its name holds none)."""
    path = run / CKPT
    if not path.exists():
        return {}
    try:
        return {int(torch.load(path, weights_only=True)["iter_num"]): path}
    except Exception:
        return {0: path}


def restore(run: Path, path: Path) -> str:
    """What ``--init_from=resume --out_dir=<the folder>`` restores: model, optimizer,
    ``iter_num`` and ``best_val_loss``; it reads ``ckpt.pt`` and no other name."""
    if path.is_file() and path.name != CKPT:
        raise Unrestorable(f"train.py resumes from <out_dir>/{CKPT}, not {path.name}")
    try:
        model, optimizer, checkpoint = nanogpt_load(path if path.is_dir() else path.parent)
    except Exception as error:
        raise Unrestorable(f"{type(error).__name__}: {error}") from error
    return tensors_digest(model.state_dict(), optimizer.state_dict(), checkpoint["iter_num"], checkpoint["best_val_loss"])


NANOGPT = Fresh(
    name="nanogpt",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=lambda run: run / CKPT,
    save_more="from frameworks import nanogpt_train\nnanogpt_train(run, 8, resume=True)",
    # one torch.save straight over ckpt.pt: the model's tensors, then the optimizer's
    kill_points=(KillPoint(1, 0.3), KillPoint(1, 0.8)),
    overwritten=lambda run: run.parent / "backup" / CKPT,
)

test_breakage, test_killed_mid_save = matrix_tests(torch.__version__, NANOGPT)
