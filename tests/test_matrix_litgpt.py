"""The fresh-run matrix (``matrix.py``) for LitGPT 0.5.13: ``litgpt pretrain`` itself
(``frameworks.litgpt_pretrain``: ``pretrain.setup``, its Fabric, ``main``, ``fit`` and
``save_checkpoint``) of a tiny ``GPT`` on the CPU, saving every two steps into
``step-{:08d}/lit_model.pth`` (one ``fabric.save`` of the model, AdamW, the train loader's state,
``iter_num`` and ``step_count``, then ``hyperparameters.yaml`` and ``model_config.yaml``), the job
ending after its third save.

The oracle is pretraining's ``--resume <step-N/lit_model.pth>``: ``main`` builds the model,
optimizer and loaders, ``find_resume_path`` returns the path as given, ``fabric.load`` restores
into them, and the state is read as ``fit`` would start with it. The automatic pick is
``--resume auto``: ``find_resume_path("auto", out_dir)``, the ``.pth`` in the highest-numbered
``step-*`` folder, whatever it holds (None: pretraining starts afresh). LitGPT writes no pointer
and bundles the optimizer into ``lit_model.pth``: ``deleted-state``, ``stale-pointer`` and
``deleted-pointer`` do not apply.

LitGPT cannot share the test venv (it pins ``huggingface-hub<1.4``, which transformers 5 refuses):
this module skips without it and runs in a venv of its own (``pip install torch==2.13.0 -e
'.[test,litgpt]'``).
"""

from __future__ import annotations

import itertools
import re
from importlib.metadata import version
from pathlib import Path

import pytest
from frameworks import litgpt_pretrain
from matrix import Fresh, KillPoint, Unrestorable, matrix_tests, tensors_digest

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

litgpt = pytest.importorskip("litgpt", reason="litgpt is not installed (pip install torch==2.13.0 -e '.[litgpt]')")

_STEP = re.compile(r"^step-([0-9]+)\Z")


def build(folder: Path) -> Path:
    litgpt_pretrain(folder / "out", saves=3)
    return folder / "out"


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(match[1]): path / "lit_model.pth" for path in run.iterdir() if (match := _STEP.match(path.name))}


_restores = itertools.count()


def restore(run: Path, path: Path) -> str:
    """``litgpt pretrain --resume <path>``: what ``main`` holds when ``fit`` begins."""
    try:
        state = litgpt_pretrain(run.parent / f"restored-{next(_restores)}", resume=path)
    except Exception as error:
        raise Unrestorable(f"{type(error).__name__}: {error}") from error
    assert state is not None
    loader = state["train_dataloader"]._dataloader  # the loader under Fabric's wrapper, as fabric.save saves it
    return tensors_digest(
        state["model"].state_dict(), state["optimizer"].state_dict(), loader.state_dict(), state["iter_num"], state["step_count"]
    )


def auto_resume(run: Path) -> Path | None:
    """``--resume auto``: LitGPT's own ``find_resume_path``."""
    from litgpt.utils import find_resume_path

    picked = find_resume_path("auto", run)
    return None if picked is None else Path(picked)


LITGPT = Fresh(
    name="litgpt",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=auto_resume,
    save_more="from frameworks import litgpt_pretrain\nlitgpt_pretrain(run, saves=1, resume='auto')",
    # fabric.save writes lit_model.pth into a temporary file (fsspec's transaction) and moves it into
    # place; then hyperparameters.yaml and model_config.yaml
    kill_points=(KillPoint(1, 0.5), KillPoint(2, 0.5), KillPoint(3, 0.5)),
)

test_breakage, test_killed_mid_save = matrix_tests(
    version("litgpt"),
    LITGPT,
)
