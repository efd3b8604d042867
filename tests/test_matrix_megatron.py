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

The tracker is Megatron's commit: a save is done once the tracker names it, not once its files
are whole. ``save_checkpoint`` has rank 0 write it only after every rank's files are written (a
barrier, or with ``--async-save`` in ``iter_finalize_fn``, which the async queue runs once an
all-reduce says every rank's background write finished), and nothing else records how many rank
files a save has (a save with more ranks than the last one, cut after some of them, looks whole).
``--load`` never goes past it, and training on from the tracker's iteration saves over the newer
folder. So the checkpoints here are the iterations up to the one the tracker names (all of them
where no tracker, or an unreadable one, says otherwise): a folder newer than it is a save Megatron
never finished, whatever ``--ckpt-step`` makes of it.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from frameworks import MEGATRON_TRACKER, MegatronTraining, megatron_load
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

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
    """The iterations the tracker has committed (every one where it names none)."""
    tracker = run / MEGATRON_TRACKER
    text = tracker.read_text().strip() if tracker.is_file() else ""
    committed = int(text) if text.isdigit() else None
    found = {int(match[1]): path for path in run.iterdir() if (match := _ITERATION.match(path.name))}
    return {index: path for index, path in found.items() if committed is None or index <= committed}


def digest(training: MegatronTraining) -> str:
    shards = [shard.state_dict() for shard in training.shards]
    optimizers = [optimizer.state_dict() for optimizer in training.optimizers]
    return tensors_digest(shards, optimizers, training.scheduler, training.iteration, torch.get_rng_state())


def restore(run: Path, path: Path) -> str:
    """``--load <its folder> --ckpt-step <N>``: what ``load_checkpoint`` restores of ``iter_<N>``,
    with no tracker in the way (``read_metadata`` would read one first): what the folder itself
    holds, as the matrix remembers it by its content. The tracker is the automatic resume's."""
    match = _ITERATION.match(path.name)
    if match is None:
        raise Unrestorable(f"{path} is no iteration folder: --ckpt-step cannot name it")
    with tempfile.TemporaryDirectory() as load:
        (Path(load) / path.name).symlink_to(path.resolve())
        try:
            training = megatron_load(Path(load), ckpt_step=int(match[1]))
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

test_breakage, test_killed_mid_save = matrix_tests(
    SOURCE,
    MEGATRON,
)
