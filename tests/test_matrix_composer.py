"""The fresh-run matrix (``matrix.py``) for MosaicML Composer's ``CheckpointSaver``.

Composer does not install beside torch 2.13 (docs/framework-sources.md): the run is written by
``frameworks.composer_run``, which saves as mosaicml/composer 640518880 does
(``CheckpointSaver._save_checkpoint`` in ``composer/callbacks/checkpoint_saver.py``: the state
written in place to ``ep{epoch}-ba{batch}-rank0.pt`` by ``_write_checkpoint_file``, then
``latest-rank0.pt`` removed and made a relative symlink to it), at batches 4, 8 and 12. The
builder writes each save from a model trained from its seed for that many batches, not from the
previous save: the child's next save is that builder's save of batch 16. The oracle is
``frameworks.composer_load`` (``load_checkpoint``: ``_torch_load_with_validation``, then
``State.load_state_dict``'s model, optimizer and timestamp); the automatic resume is
``Trainer(autoresume=True)``'s pick, ``frameworks.composer_autoresume``
(``_get_autoresume_checkpoint``: ``latest-rank0.pt`` where ``os.path.exists`` finds it, else a
fresh start).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from frameworks import composer_autoresume, composer_load, composer_run
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

torch = pytest.importorskip("torch")

SOURCE = "640518880"
"""The Composer commit the builder and the oracle follow (it keys the cached run)."""
_SAVE = re.compile(r"^ep[0-9]+-ba([0-9]+)-rank0\.pt\Z")
LATEST = "latest-rank0.pt"


def build(folder: Path) -> Path:
    return composer_run(folder / "checkpoints", ((1, 4), (2, 8), (3, 12)))


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(match[1]): path for path in run.iterdir() if (match := _SAVE.match(path.name))}


def restore(run: Path, path: Path) -> str:
    """``Trainer(load_path=path)``: the weights, Adam and the batch the timestamp goes on at."""
    try:
        batch, model, optimizer = composer_load(path)
    except Exception as error:
        raise Unrestorable(f"{type(error).__name__}: {error}") from error
    return tensors_digest(model.state_dict(), optimizer.state_dict(), batch)


def auto_resume(run: Path) -> Path | None:
    picked = composer_autoresume(run)
    return None if picked is None else Path(picked)


def stale(run: Path) -> None:
    """``latest-rank0.pt`` linked, as the saver links it, to a save since deleted."""
    (run / LATEST).unlink()
    (run / LATEST).symlink_to("ep4-ba16-rank0.pt")


COMPOSER = Fresh(
    name="composer",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=auto_resume,
    save_more="from frameworks import composer_save\ncomposer_save(run, 4, 16)",
    # ep4-ba16-rank0.pt cut, and whole before latest-rank0.pt is moved to it
    kill_points=(KillPoint(1, 0.5), KillPoint(1, 1.0)),
    pointer=lambda run: run / LATEST,
    stale=stale,
)

test_breakage, test_killed_mid_save = matrix_tests(
    SOURCE,
    COMPOSER,
)
