"""The fresh-run matrix (``matrix.py``) for torch.distributed.checkpoint: a training loop
(``frameworks.dcp_loop``) saving steps 2, 4 and 6 with ``dcp.save({"app": <Stateful>, "step": n},
checkpoint_id=f"step-{n}")``, its state wrapped as DCP's own recipe does (``get_state_dict`` and
``set_state_dict``); the oracle is ``dcp.load`` of a step folder into a fresh model and optimizer.

DCP keeps no pointer and picks nothing itself: the automatic pick is torchtitan's, the trainer
that names its folders ``step-<n>`` (``CheckpointManager._find_load_step`` in
``torchtitan/components/checkpoint.py``): the highest ``step-<n>`` folder that holds a
``.metadata``, which DCP's coordinator writes last.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from frameworks import dcp_load_app, dcp_newest
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")


def build(folder: Path) -> Path:
    from frameworks import dcp_loop

    dcp_loop(folder / "run", 6)
    return folder / "run"


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(m[1]): path for path in run.iterdir() if path.is_dir() and (m := re.fullmatch(r"step-([0-9]+)", path.name))}


def restore(run: Path, path: Path) -> str:
    """What ``dcp.load`` restores from ``path``: the model, the optimizer and the step."""
    try:
        app, step = dcp_load_app(path)
    except BaseException as error:  # DCP's CheckpointException is a BaseException
        if isinstance(error, KeyboardInterrupt | SystemExit):
            raise
        raise Unrestorable(f"{type(error).__name__}: {error}") from error
    return tensors_digest(app.model.state_dict(), app.optimizer.state_dict(), step)


DCP = Fresh(
    name="dcp",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=dcp_newest,
    save_more="from frameworks import dcp_loop\ndcp_loop(run, 8)",
    # step-8/__0_0.distcp (the small items, then the weights from 37% to 53%, then the optimizer
    # state), then .metadata.tmp, renamed to .metadata: killed inside the weights, inside the
    # optimizer state, and inside the commit, the data whole
    kill_points=(KillPoint(1, 0.45), KillPoint(1, 0.8), KillPoint(2, 0.5)),
)


test_breakage, test_killed_mid_save = matrix_tests(
    torch.__version__,
    DCP,
    expected_failures={
        "dcp-torn-copy": (
            "verify --deep calls a torn __0_0.distcp whole: each item is a whole torch.save stream, those before the tear "
            "step 6's, those after (the last bias, the optimizer state) byte for byte step 4's; dcp.load restores that mix"
        ),
    },
)
