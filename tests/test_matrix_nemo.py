"""The fresh-run matrix (``matrix.py``) for NeMo 3.0's ``exp_manager``: a Lightning ``Trainer`` set
up by NeMo's own ``exp_manager`` (``frameworks.nemo_exp``: ``NeMoModelCheckpoint`` with NeMo's
defaults, ``val_loss`` top 3 and a ``-last`` save, its unfinished-checkpoint markers) fitting a tiny
module into ``exp/tiny/run/checkpoints/``, its job ending after three epochs (a time limit): each
epoch's save at its validation (``tiny--val_loss=…-epoch=N.ckpt``) and its ``-last`` copy beside
it (the one before deleted).

NeMo installs only in a venv of its own (it holds lightning at 2.4), so the run, what NeMo left
where it was killed, and what NeMo did with every breakage are committed, in
``tests/data/nemo_matrix/``, made by this module itself in a NeMo venv::

    CKPTDOCTOR_NEMO_RECORD=1 PYTHONPATH=. python -m pytest tests/test_matrix_nemo.py -p no:cacheprovider

from the repository root (``exp_manager``'s ``git-info.log`` is one of the files the kill points
count), in a venv with ``torch==2.13.0 nemo_toolkit==3.0.0`` (it brings lightning 2.4), pytest and
ckptdoctor's dependencies.

Recording, the build trains the run with NeMo and keeps its ``checkpoints/``; then, for each kill
point, resumes a copy with NeMo (``resume_if_exists``) and SIGKILLs it inside its next save
(:mod:`killer`), keeping what changed (``killed/<kill point>/``); and every restore and automatic
pick the tests ask of NeMo is run for real and kept in ``oracle.json``. Elsewhere the module
replays them: the run is the committed one, a killed save writes what NeMo's did, and the oracle
answers from ``oracle.json``, by the checkpoint's bytes (a restore) or by the names in the folder
(the pick): a question it was never asked fails the test.

The oracle is NeMo's resume: ``exp_manager`` with ``resume_from_checkpoint=<path>`` and
``trainer.fit`` (Lightning 2.4's restore of the model, optimizer, scheduler and loops); the
automatic pick is ``resume_if_exists=True`` (with ``resume_ignore_no_checkpoint``): ``check_resume``
takes the one ``*last.ckpt`` in the folder that has no ``-unfinished`` marker, fails where there are
several or where every one is unfinished, and starts afresh where there is none. NeMo bundles the
optimizer and its ``-last`` save is no pointer but a whole save: ``deleted-state``,
``stale-pointer`` and ``deleted-pointer`` do not apply.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from frameworks import nemo_exp, nemo_fit
from matrix import Fresh, KillPoint, Unrestorable, killed_mid_save, matrix_tests, tensors_digest

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

pytest.importorskip("torch")
RECORD = os.environ.get("CKPTDOCTOR_NEMO_RECORD") == "1"
if RECORD:
    pytest.importorskip("nemo")
DATA = Path(__file__).resolve().parent / "data" / "nemo_matrix"
ORACLE = DATA / "oracle.json"
_EPOCH = re.compile(r"-epoch=([0-9]+)(-last)?\.ckpt\Z")


def _oracle() -> dict[str, Any]:
    if RECORD or not ORACLE.is_file():
        return {"made_with": _versions() if RECORD else {}, "restores": {}, "picks": {}}
    return dict(json.loads(ORACLE.read_text()))


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("nemo_toolkit", "lightning", "torch")}


ANSWERS = _oracle()


def _answer(kind: str, key: str, ask: Any) -> dict[str, Any]:
    """NeMo's answer to a question: asked of NeMo and kept where recording, else the kept one."""
    if RECORD:
        ANSWERS[kind][key] = ask()
        ORACLE.write_text(json.dumps(ANSWERS, indent=1, sort_keys=True) + "\n")
    elif key not in ANSWERS[kind]:
        raise AssertionError(f"NeMo was never asked this {kind[:-1]} ({key!r}): record again in a NeMo venv (see the module's docstring)")
    return dict(ANSWERS[kind][key])


def checkpoints(run: Path) -> dict[int, Path]:
    return {int(match[1]): path for path in run.iterdir() if (match := _EPOCH.search(path.name)) and not match[2]}


def last_copies(run: Path) -> dict[int, Path]:
    """The ``-last`` save written beside an epoch's save, of the same name: a whole copy of it."""
    return {int(match[1]): path for path in run.iterdir() if (match := _EPOCH.search(path.name)) and match[2]}


class _Restored(Exception):
    def __init__(self, digest: str) -> None:
        self.digest = digest


def _capture() -> Any:
    import lightning

    class Capture(lightning.Callback):  # type: ignore[misc]
        """Stops the fit once Lightning has restored the model, optimizer, scheduler and loops."""

        def on_train_start(self, trainer: Any, module: Any) -> None:
            schedulers = [config.scheduler.state_dict() for config in trainer.lr_scheduler_configs]
            optimizers = [optimizer.state_dict() for optimizer in trainer.optimizers]
            raise _Restored(tensors_digest(module.state_dict(), optimizers, schedulers, trainer.global_step, trainer.current_epoch))

    return Capture()


_restores = itertools.count()


def _nemo_restore(run: Path, path: Path) -> dict[str, Any]:
    try:
        trainer = nemo_exp(run.parents[3] / f"restored-{next(_restores)}", 10, resume_from=str(path), callbacks=[_capture()])
        nemo_fit(trainer)
    except _Restored as restored:
        return {"digest": restored.digest}
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {"error": "trained without restoring"}


def restore(run: Path, path: Path) -> str:
    """NeMo's ``resume_from_checkpoint=<path>``: what ``trainer.fit`` restores before its first step."""
    key = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else f"missing {path.name}"
    answer = _answer("restores", key, lambda: _nemo_restore(run, path))
    if "error" in answer:
        raise Unrestorable(answer["error"])
    return str(answer["digest"])


def _nemo_pick(run: Path) -> dict[str, Any]:
    try:
        picked = nemo_exp(run.parents[2], 10).ckpt_path
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {"pick": None if picked is None else Path(picked).name}


def auto_resume(run: Path) -> Path | None:
    """``resume_if_exists=True``: the checkpoint ``check_resume`` sets as ``trainer.ckpt_path``."""
    key = "\n".join(sorted(path.name for path in run.iterdir()))
    answer = _answer("picks", key, lambda: _nemo_pick(run))
    if "error" in answer:
        raise Unrestorable(answer["error"])
    return None if answer["pick"] is None else run / answer["pick"]


# exp_manager's logs (cmd-args.log, git-info.log, nemo_error_log.txt, lightning_logs.txt, then
# nemo_error_log.txt again), then Lightning's temporary files of epoch 3's save and of its -last
# copy (each under an -unfinished marker, each moved into place whole; the worst of the four epochs
# and the -last before deleted in between): epoch 3's cut, its -last's cut, its -last's whole
KILL_POINTS = (KillPoint(6, 0.5), KillPoint(7, 0.5), KillPoint(7, 1.0))
_RESUMED = "from frameworks import nemo_exp, nemo_fit\nnemo_fit(nemo_exp(run.parents[2], 5))"


class _JobEnded(Exception):
    """The job's time limit, reached once an epoch's saves are written."""


def _end_job_after(epoch: int) -> Any:
    import lightning

    class EndJob(lightning.Callback):  # type: ignore[misc]
        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            if trainer.current_epoch == epoch:  # after the epoch's saves, at its validation
                raise _JobEnded

    return EndJob()


def build(folder: Path) -> Path:
    run = folder / "exp" / "tiny" / "run" / "checkpoints"
    if not RECORD:
        shutil.copytree(DATA / "checkpoints", run)
        return run
    with contextlib.suppress(_JobEnded):
        nemo_fit(nemo_exp(folder / "exp", 5, callbacks=[_end_job_after(2)]))
    shutil.rmtree(DATA, ignore_errors=True)
    shutil.copytree(run, DATA / "checkpoints")
    resumed = dataclasses.replace(NEMO, save_more=_RESUMED)
    for point in KILL_POINTS:
        copy = folder / point.id
        shutil.copytree(folder / "exp", copy / "exp")
        killed = copy / "exp" / "tiny" / "run" / "checkpoints"
        killed_mid_save(resumed, killed, point)
        _keep_changes(run, killed, DATA / "killed" / point.id)
        shutil.rmtree(copy)
    return run


def _keep_changes(before: Path, after: Path, into: Path) -> None:
    """The files of ``after`` that ``before`` does not hold alike, and the names it lost."""
    (into / "files").mkdir(parents=True)
    for path in after.iterdir():
        if not (before / path.name).is_file() or (before / path.name).read_bytes() != path.read_bytes():
            shutil.copyfile(path, into / "files" / path.name)
    removed = sorted(path.name for path in before.iterdir() if not (after / path.name).exists())
    (into / "removed.json").write_text(json.dumps(removed) + "\n")


NEMO = Fresh(
    name="nemo",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=auto_resume,
    save_more=f"from frameworks import nemo_replay_kill\nnemo_replay_kill(run, Path({str(DATA / 'killed')!r}))",
    kill_points=KILL_POINTS,
    copies=last_copies,
)

test_breakage, test_killed_mid_save = matrix_tests(
    hashlib.sha256(ORACLE.read_bytes()).hexdigest()[:16] if ORACLE.is_file() else "unrecorded",  # a new recording, a new run
    NEMO,
)
