"""The fresh-run matrix (``matrix.py``) for Megatron-LM's legacy ``torch`` checkpoint format.

Megatron-LM cannot be installed here (docs/framework-sources.md): the run is written by
``frameworks.MegatronTraining``, which saves as ``save_checkpoint`` does
(NVIDIA/Megatron-LM d98e8a64, ``megatron/training/checkpointing.py``: ``generate_state_dict``,
one ``torch.save`` per tensor-parallel rank to ``iter_{:07d}/mp_rank_{tp:02d}/model_optim_rng.pt``,
then the tracker), two ranks saving at iterations 2, 4 and 6. The oracle is the same file's
``load_checkpoint`` as ``frameworks.megatron_load`` reproduces it: ``--load <run> --ckpt-step N``
for one checkpoint (``_load_base_checkpoint``: ``ckpt_step`` overrides the tracker), and
``--load <run>`` alone for the automatic resume (the tracker, ``read_metadata``; none: training
starts from random).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from frameworks import MEGATRON_TRACKER, MegatronTraining, megatron_load
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

torch = pytest.importorskip("torch")

SOURCE = "d98e8a64dd"
"""The Megatron-LM commit the builder and the oracle follow (it keys the cached run)."""
_ITERATION = re.compile(r"^iter_([0-9]{7})\Z")


def build(folder: Path) -> Path:
    training = MegatronTraining(folder / "save")
    for _ in range(3):
        training.train(2).save_checkpoint()
    return training.save


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(match[1]): path for path in run.iterdir() if (match := _ITERATION.match(path.name))}


def digest(training: MegatronTraining) -> str:
    shards = [shard.state_dict() for shard in training.shards]
    optimizers = [optimizer.state_dict() for optimizer in training.optimizers]
    return tensors_digest(shards, optimizers, training.scheduler, training.iteration, torch.get_rng_state())


def restore(run: Path, path: Path) -> str:
    """``--load <its folder> --ckpt-step <N>``: what ``load_checkpoint`` restores of ``iter_<N>``."""
    match = _ITERATION.match(path.name)
    if match is None:
        raise Unrestorable(f"{path} is no iteration folder: --ckpt-step cannot name it")
    try:
        training = megatron_load(path.parent, ckpt_step=int(match[1]))
    except (Exception, SystemExit) as error:
        raise Unrestorable(f"{type(error).__name__}: {error}") from error
    assert training is not None  # a step was given
    return digest(training)


def auto_resume(run: Path) -> Path | None:
    """``--load <run>``: the iteration ``read_metadata`` reads in the tracker; None without one."""
    tracker = run / MEGATRON_TRACKER
    if not tracker.is_file():
        return None
    text = tracker.read_text().strip()
    if not text.isdigit():  # read_metadata: `sys.exit()` after "ERROR: Invalid metadata file"
        raise Unrestorable(f"ERROR: Invalid metadata file {tracker}")
    return run / f"iter_{int(text):07d}"


MEGATRON = Fresh(
    name="megatron",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=auto_resume,
    save_more="from frameworks import megatron_load\nmegatron_load(run).train(2).save_checkpoint()",
    # rank 0's file cut, rank 1's file cut, both whole before the tracker, the tracker opened
    # for writing (truncated) and nothing written
    kill_points=(KillPoint(1, 0.5), KillPoint(2, 0.5), KillPoint(2, 1.0), KillPoint(3, 0.0)),
    pointer=lambda run: run / MEGATRON_TRACKER,
    stale=lambda run: (run / MEGATRON_TRACKER).write_text("8"),
)

_EMPTY_TRACKER = (
    "killed as iter_finalize_fn rewrote it: an empty tracker is CKD201, not CKD113/CKD114, though --load then stops "
    "(read_metadata: 'Invalid metadata file', sys.exit() with status 0)"
)

test_breakage, test_killed_mid_save = matrix_tests(
    SOURCE,
    MEGATRON,
    expected_failures={
        "megatron-healthy": "CKD402 warns on every model_optim_rng.pt for argparse.Namespace (args) and numpy (rng_state), "
        "which Megatron's own torch.load accepts: megatron.core registers them (megatron/core/safe_globals.py SAFE_GLOBALS)",
        "megatron-file2-100pct": "killed before the tracker: both ranks' files of iteration 8 are whole and --ckpt-step 8 "
        "restores them, but ckptdoctor calls 8 incomplete (CKD106: no commit marker) and resumes from 6",
        "megatron-file3-0pct": _EMPTY_TRACKER,
    },
)
