"""The fresh-run matrix (``matrix.py``) for DeepSpeed: a real ZeRO-2 run of two gloo processes on
the CPU, launched by DeepSpeed's own launcher (``tests/deepspeed_job.py``), saving with
``engine.save_checkpoint(save_dir)`` after steps 2, 4 and 6. The oracle is
``engine.load_checkpoint(save_dir, tag=...)`` in a launched job of the same shape; the automatic
resume is ``load_checkpoint(save_dir)`` with no tag, which reads the tag from ``latest``
(``DeepSpeedEngine.load_checkpoint``, ``deepspeed/runtime/engine.py``). The killed save is rank 0's,
in a job that resumed from ``latest`` and trained two steps more; the launcher then ends rank 1.

Every launch costs tens of seconds, so one job restores every checkpoint of a run not restored yet
(one engine, loading each tag in turn); a tag that fails ends the job, and the rest go to the next."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from frameworks import deepspeed_process, deepspeed_trained
from matrix import Fresh, KillPoint, Unrestorable, content_key, matrix_tests

pytestmark = pytest.mark.slow  # the fresh-run matrix: a run broken every way, each verdict asked of the framework

deepspeed = pytest.importorskip("deepspeed")

STAGE = 2
RANKS = 2


def build(folder: Path) -> Path:
    return deepspeed_trained(folder / "ds", STAGE, steps=6)


def checkpoints(run: Path) -> dict[int, Path]:
    found = {}
    for path in run.glob("global_step*"):
        step = path.name.removeprefix("global_step")
        if path.is_dir() and step.isdigit():
            found[int(step)] = path
    return found


_restored: dict[str, str | Unrestorable] = {}
"""What the engine restored from each tag folder, by the folder's content."""


def restore(run: Path, path: Path) -> str:
    """What ``engine.load_checkpoint(path.parent, tag=path.name)`` restores: every rank's module,
    optimizer partition, scheduler and step counters, as one digest. The run's other checkpoints
    not restored yet are restored in the same job."""
    key = content_key(ZERO2, path)
    if key not in _restored:
        pending = {key: path}
        for tag in checkpoints(run).values():
            pending.setdefault(content_key(ZERO2, tag), tag)
        results = _restore_in_jobs([tag for tag_key, tag in pending.items() if tag_key not in _restored])
        _restored.update((tag_key, results[tag]) for tag_key, tag in pending.items() if tag in results)
    got = _restored[key]
    if isinstance(got, Unrestorable):
        raise got
    return got


def _restore_in_jobs(tags: list[Path]) -> dict[Path, str | Unrestorable]:
    """Each tag restored in launched jobs: the first that fails ends its job, the rest go on in the next."""
    results: dict[Path, str | Unrestorable] = {}
    while tags:
        done = deepspeed_process("restore", STAGE, *map(str, tags))
        restored: dict[int, dict[int, dict[str, str | None]]] = {}
        failed: dict[int, str] = {}
        for line in done.stdout.splitlines():
            kind, _, record = line.partition(" ")
            if kind in ("RESTORED", "FAILED"):
                fields = json.loads(record)
                if kind == "RESTORED":
                    restored.setdefault(fields["item"], {})[fields["rank"]] = fields
                else:
                    failed.setdefault(fields["item"], f"rank {fields['rank']}: {fields['error']}")
        for number, tag in enumerate(tags):
            ranks = restored.get(number, {})
            if len(ranks) < RANKS:
                why = failed.get(number, f"the job ended (exit {done.returncode}): {done.stderr[-1500:]}")
                results[tag] = Unrestorable(why)
                tags = tags[number + 1 :]
                break
            if any(rank["path"] is None for rank in ranks.values()):
                results[tag] = Unrestorable("load_checkpoint loaded nothing")
            else:
                results[tag] = hashlib.sha256("".join(str(ranks[rank]["digest"]) for rank in sorted(ranks)).encode()).hexdigest()
        else:
            tags = []
    return results


def auto_resume(run: Path) -> Path | None:
    """``load_checkpoint(save_dir)`` with no tag: the tag ``latest`` names, read and stripped; with
    no ``latest`` it warns and loads nothing, and the job trains from scratch."""
    latest = run / "latest"
    return run / latest.read_text().strip() if latest.is_file() else None


def stale(run: Path) -> None:
    (run / "latest").write_text("global_step8")  # a tag never saved, as save_checkpoint writes it


ZERO2 = Fresh(
    name="zero2",
    build=build,
    checkpoints=checkpoints,
    restore=restore,
    auto_resume=auto_resume,
    save_more=f"from frameworks import deepspeed_killed\ndeepspeed_killed(run, {STAGE}, write, fraction)",
    # rank 0 writes the model states, its optimizer partition, zero_to_fp32.py, zero_to_torch.py
    # and `latest`, in that order; rank 1 its partition alone, beside rank 0's first file (the
    # launcher ends it on its next poll, up to a second after rank 0 dies). Killed inside the
    # weights, inside rank 0's optimizer partition, and with all but `latest` written
    kill_points=(KillPoint(1, 0.5), KillPoint(2, 0.5), KillPoint(4, 1.0)),
    state=lambda checkpoint: checkpoint / "zero_pp_rank_0_mp_rank_00_optim_states.pt",
    pointer=lambda run: run / "latest",
    stale=stale,
)

test_breakage, test_killed_mid_save = matrix_tests(
    deepspeed.__version__,
    ZERO2,
    expected_failures={
        "zero2-torn-copy": (
            "the torn rank-1 partition is byte for byte global_step4's (the two saves' first halves are equal) and"
            " ckptdoctor calls global_step6 whole; load_checkpoint restores rank 1's step-4 Adam state (its `step` 4)"
            " under the tag's global_steps 6"
        ),
    },
)
