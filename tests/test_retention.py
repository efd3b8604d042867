"""Retention semantics (``prune``'s plan): each keep rule, their union, and what is kept whatever
the policy says, on runs found by the real scanner over real files."""

from __future__ import annotations

import json
import os
import pickle
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from ckptdoctor.layouts.registry import layout_named
from ckptdoctor.model import Action, Plan, Run
from ckptdoctor.pipelines.scan import scan
from ckptdoctor.planners.retention import Circumstances, Policy, PolicyError, parse_duration, plan
from ckptdoctor.testing import write_burn_run, write_hf_checkpoints

HOUR = 3600.0
NOW = 2_000_000_000.0


def age(folder: Path, hours_ago: dict[int, float] | None = None, default: float = 48) -> None:
    """Give every file an mtime ``hours_ago[index]`` (or ``default``) hours before NOW."""
    for path in folder.rglob("*"):
        digits = "".join(ch if ch.isdigit() else " " for ch in path.name).split()
        index = int(digits[-1]) if digits else -1
        when = NOW - HOUR * (hours_ago or {}).get(index, default)
        os.utime(path, (when, when), follow_symlinks=False)


def the_run(path: Path) -> Run:
    (run,) = scan([str(path)]).runs
    return run


def decide(path: Path, policy: Policy, **circumstances: object) -> Plan:
    run = the_run(path)
    return plan(run, layout_named(run.layout), policy, Circumstances(now=NOW, **circumstances))  # type: ignore[arg-type]


def kept(result: Plan) -> list[int]:
    return [item.number for item in result.items if item.action is Action.KEEP]


def reasons(result: Plan, index: int) -> tuple[str, ...]:
    return next(item.reasons for item in result.items if item.number == index)


@pytest.fixture
def burn(tmp_path: Path) -> Path:
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, range(1, 11))
    age(folder)
    return folder


def test_keep_last_keeps_the_newest_complete_checkpoints(burn):
    result = decide(burn, Policy(keep_last=3))
    assert kept(result) == [8, 9, 10]
    assert reasons(result, 10) == ("resume point (newest complete)", "keep-last #1")
    assert reasons(result, 8) == ("keep-last #3",)
    assert reasons(result, 1) == ("matches no keep rule",)
    assert result.freed_bytes == sum(item.bytes for item in result.items if item.action is Action.DELETE)


def test_an_incomplete_newest_checkpoint_does_not_count_and_is_left_alone(tmp_path):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, range(1, 6))
    (folder / "optim-5.bpk").unlink()
    age(folder)
    result = decide(folder, Policy(keep_last=2))
    assert kept(result) == [3, 4, 5]
    assert "newer than the resume point" in reasons(result, 5)[0]


def test_incomplete_checkpoints_older_than_the_resume_point_are_deleted_and_say_why(tmp_path):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, range(1, 6))
    (folder / "optim-2.bpk").unlink()
    age(folder)
    result = decide(folder, Policy(keep_last=1))
    assert "can never be resumed" in reasons(result, 2)[0]
    assert kept(result) == [5]


def test_keep_every_and_pins_and_union(burn):
    result = decide(burn, Policy(keep_last=1, keep_every=4, keep=frozenset({1})))
    assert kept(result) == [1, 4, 8, 10]
    assert reasons(result, 4) == ("keep-every 4",)
    assert reasons(result, 1) == ("pinned (--keep)",)


def test_keep_within_is_measured_back_from_now_not_from_the_newest_checkpoint(burn):
    age(burn, {i: 10.5 - i for i in range(1, 11)})  # epoch 10 saved half an hour ago, one hour apart
    result = decide(burn, Policy(keep_within=parse_duration("3h")))
    assert kept(result) == [8, 9, 10]
    assert "keep-within 3h" in reasons(result, 8)
    age(burn, {i: 100 - i for i in range(1, 11)})  # a run left 90 h ago: nothing was saved in the last 3 h
    assert kept(decide(burn, Policy(keep_within=parse_duration("3h")))) == [10]


def test_keep_best_by_metric_min_and_max(burn):
    loss = {i: abs(i - 4) + 0.5 for i in range(1, 11)}
    low = decide(burn, Policy(keep_best=2, metric="loss"), metrics=loss)
    assert kept(low) == [3, 4, 10]  # 3 and 5 tie: the older wins
    assert reasons(low, 4) == ("keep-best #1 (loss 0.5)",)
    high = decide(burn, Policy(keep_best=1, metric="accuracy", mode="max"), metrics={i: i / 10 for i in range(1, 11)})
    assert kept(high) == [10]


def test_files_still_being_written_and_files_held_open_are_kept(burn):
    age(burn, {3: 0.01})
    busy = {str(burn / "model-5.bpk"): 4242}
    result = decide(burn, Policy(keep_last=1), open_by=busy)
    assert kept(result) == [3, 5, 10]
    assert reasons(result, 3)[0].startswith("modified 36s ago")
    assert reasons(result, 5) == ("open in process 4242",)


def test_the_frameworks_best_checkpoint_is_kept(tmp_path):
    for step in (100, 200, 300, 400):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        state = {"global_step": step, "best_model_checkpoint": str(tmp_path / "checkpoint-200"), "log_history": []}
        (folder / "trainer_state.json").write_text(json.dumps(state))
        save_file({"w": np.zeros(2, np.float32)}, str(folder / "model.safetensors"))
        for name in ("optimizer.pt", "scheduler.pt"):
            (folder / name).write_bytes(pickle.dumps({"state": {}}, protocol=2))
    age(tmp_path)
    run = the_run(tmp_path)
    result = plan(run, layout_named(run.layout), Policy(keep_last=1), Circumstances(now=NOW))
    assert 200 in kept(result)
    assert any("best_model_checkpoint" in r for r in reasons(result, 200))
    deleted = [item for item in result.items if item.action is Action.DELETE]
    assert [item.paths for item in deleted] == [(str(tmp_path / "checkpoint-100"),), (str(tmp_path / "checkpoint-300"),)]


def test_natural_order_never_string_order(tmp_path):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, [9, 10, 9000, 10000])
    age(folder)
    assert kept(decide(folder, Policy(keep_last=2))) == [9000, 10000]


def test_hard_links_to_kept_files_free_nothing(tmp_path):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, [1, 2])
    for role in ("model", "optim", "scheduler"):
        (folder / f"{role}-2.bpk").unlink()
        os.link(folder / f"{role}-1.bpk", folder / f"{role}-2.bpk")
    write_burn_run(folder, [3])
    age(folder)
    result = decide(folder, Policy(keep_last=1, keep=frozenset({2})))
    assert kept(result) == [2, 3]
    assert result.freed_bytes == 0, "epoch 1's files are epoch 2's too"


def test_a_symlink_in_a_kept_checkpoint_keeps_its_target(tmp_path):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, range(1, 8))
    (folder / "optim-7.bpk").unlink()
    (folder / "optim-7.bpk").symlink_to("optim-3.bpk")
    age(folder)
    result = decide(folder, Policy(keep_last=1))
    assert kept(result) == [3, 7]
    assert reasons(result, 3) == ("holds the target of optim-7.bpk, a symlink in kept epoch 7",)


def test_files_inside_a_checkpoint_folder_count_for_min_age_and_open_files(tmp_path):
    write_hf_checkpoints(tmp_path, (10, 20, 30))
    age(tmp_path)
    run = the_run(tmp_path)
    weights = str(tmp_path / "checkpoint-10" / "global_step10" / "model_states.pt")
    inside = {
        str(tmp_path / "checkpoint-10"): ((weights, NOW - 5, 1000),),
        str(tmp_path / "checkpoint-20"): ((str(tmp_path / "checkpoint-20" / "extra.bin"), NOW - 10 * HOUR, 500),),
    }
    busy = {str(tmp_path / "checkpoint-20" / "extra.bin"): 77}
    result = plan(run, layout_named(run.layout), Policy(keep_last=1), Circumstances(now=NOW, inside=inside, open_by=busy))
    assert kept(result) == [10, 20, 30]
    assert reasons(result, 10)[0].startswith("modified 5s ago")
    assert reasons(result, 20) == ("open in process 77",)


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (Policy(), "empty policy"),
        (Policy(keep_best=2), "--metric"),
        (Policy(keep_last=-1), "negative"),
        (Policy(keep_last=1, mode="median"), "--mode"),
    ],
)
def test_policies_that_cannot_be_applied_are_refused(burn, policy, message):
    with pytest.raises(PolicyError, match=message):
        decide(burn, policy)


def test_keep_best_without_any_metric_value_is_refused(burn):
    with pytest.raises(PolicyError, match="no values of loss"):
        decide(burn, Policy(keep_best=1, metric="loss"))


@pytest.mark.parametrize(("text", "seconds"), [("7d", 604800), ("36h", 129600), ("90min", 5400), ("45s", 45), ("120", 120), ("1.5h", 5400)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-3h", "3x"])
def test_bad_durations(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_planning_is_pure(burn):
    before = {p: p.stat().st_mtime for p in burn.iterdir()}
    decide(burn, Policy(keep_last=1))
    assert {p: p.stat().st_mtime for p in burn.iterdir()} == before
    assert time.time() < NOW
