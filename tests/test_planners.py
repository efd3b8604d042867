"""The planners as pure functions: ``retention.plan`` (prune) and ``repair.plan`` / ``repair.undo_plan``
take a run (found by ``scan`` over real files), its findings and the ``Circumstances`` (the time,
open files), and decide every action with its reasons, without touching anything.

``test_retention.py`` covers each keep rule; here: what retention keeps beyond them, and the repair
plans the CLI tests reach only through ``repair --json``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from frameworks import deepspeed_run

from ckptdoctor.actions._quarantine import Stored
from ckptdoctor.layouts.registry import layout_named
from ckptdoctor.model import Action, Plan, PointerKind, PointerWrite, Run
from ckptdoctor.pipelines.scan import inspect
from ckptdoctor.planners import repair, retention
from ckptdoctor.planners.retention import MIN_AGE, Circumstances, Policy
from ckptdoctor.records import Quarantine, StoredState
from ckptdoctor.testing import write_burn_run

NOW = 2_000_000_000.0
DAY = 86400.0


def aged(folder: Path, ago: float = DAY, newer: dict[str, float] | None = None) -> Path:
    """Every entry of ``folder`` written ``ago`` seconds before NOW (those in ``newer``: that many)."""
    for path in [folder, *folder.rglob("*")]:
        when = NOW - (newer or {}).get(path.name, ago)
        os.utime(path, (when, when), follow_symlinks=False)
    return folder


def found(folder: Path) -> tuple[Run, list]:
    report, result = inspect([str(folder)])
    (run,) = result.runs
    return run, list(report.findings)


def repair_plan(folder: Path, **circumstances: object) -> Plan:
    run, findings = found(folder)
    world = Circumstances(now=NOW, **circumstances)  # type: ignore[arg-type]
    return repair.plan(run, layout_named(run.layout), findings, world, MIN_AGE)


def prune_plan(folder: Path, policy: Policy, **circumstances: object) -> Plan:
    run, _ = found(folder)
    return retention.plan(run, layout_named(run.layout), policy, Circumstances(now=NOW, **circumstances))  # type: ignore[arg-type]


def actions(plan: Plan) -> list[tuple[int | None, str, list[str]]]:
    """Each item: its index, its action, and the names it acts on."""
    return [(item.number, item.action.value, [entry.name for entry in item.entries]) for item in plan.items]


def item(plan: Plan, name: str):
    return next(i for i in plan.items if any(entry.name == name for entry in i.entries))


def burn_run(tmp_path: Path, epochs: range = range(1, 6)) -> Path:
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, epochs)
    return folder


# --- retention: what is kept beyond the keep rules ------------------------------------------------


def test_a_checkpoint_a_framework_pointer_names_is_kept_whatever_the_policy(tmp_path):
    folder = aged(deepspeed_run(tmp_path / "ds", steps=(100, 200, 300), latest="global_step100"))
    plan = prune_plan(folder, Policy(keep_last=1))
    assert [(i.number, i.action) for i in plan.items] == [(100, Action.KEEP), (200, Action.DELETE), (300, Action.KEEP)]
    assert item(plan, "global_step100").reasons == ("named by latest",)


def test_without_a_complete_checkpoint_nothing_is_deleted(tmp_path):
    folder = burn_run(tmp_path, range(1, 4))
    for epoch in (1, 2, 3):
        (folder / f"optim-{epoch}.bpk").unlink()
    plan = prune_plan(aged(folder), Policy(keep_last=1))
    assert [i.action for i in plan.items] == [Action.KEEP] * 3
    assert all(i.reasons == ("incomplete, and no complete epoch exists: left to repair",) for i in plan.items)
    assert plan.freed_bytes == 0


def test_keep_best_ranks_complete_checkpoints_with_a_value_and_skips_nan(tmp_path):
    folder = aged(burn_run(tmp_path))
    (folder / "optim-2.bpk").unlink()  # the best value, but no place to resume from
    metrics = {1: 0.5, 2: 0.1, 3: math.nan, 4: 0.3}
    plan = prune_plan(folder, Policy(keep_best=2, metric="loss"), metrics=metrics)
    best = {i.number: i.reasons for i in plan.items if any(r.startswith("keep-best") for r in i.reasons)}
    assert best == {4: ("keep-best #1 (loss 0.3)",), 1: ("keep-best #2 (loss 0.5)",)}
    assert item(plan, "model-3.bpk").action is Action.DELETE


@pytest.mark.parametrize(("ago", "held"), [(MIN_AGE - 1, True), (MIN_AGE, False)])
def test_min_age_holds_back_what_was_written_less_than_min_age_ago(tmp_path, ago, held):
    folder = aged(burn_run(tmp_path), newer={"optim-2.bpk": ago})
    plan = prune_plan(folder, Policy(keep_last=1))
    assert (item(plan, "model-2.bpk").action is Action.KEEP) == held


# --- repair: quarantine, re-point, leave alone ---------------------------------------------------


def test_repair_refuses_a_run_with_no_complete_checkpoint(tmp_path):
    folder = burn_run(tmp_path, range(1, 3))
    for epoch in (1, 2):
        (folder / f"model-{epoch}.bpk").unlink()
    with pytest.raises(repair.NotResumable, match="CKD110"):
        repair_plan(aged(folder))


def test_repair_quarantines_what_is_newer_than_the_resume_point_naming_the_rules_it_fixes(tmp_path):
    folder = burn_run(tmp_path)
    (folder / "optim-5.bpk").unlink()
    (folder / "model-6.bpk.tmp").write_bytes(b"\0" * 64)  # a save killed while writing
    plan = repair_plan(aged(folder))
    assert actions(plan) == [
        (4, "keep", ["model-4.bpk", "optim-4.bpk", "scheduler-4.bpk"]),
        (5, "quarantine", ["model-5.bpk", "scheduler-5.bpk"]),
        (6, "quarantine", ["model-6.bpk.tmp"]),
    ]
    assert plan.policy == "resume from epoch 4"
    assert item(plan, "model-4.bpk").reasons == ("resume point (newest complete)",)
    newer = item(plan, "model-5.bpk").reasons
    assert newer[0] == "incomplete and newer than the resume point (epoch 4)"
    assert "CKD101 missing-optimizer" in newer[1] and newer[1].startswith("fixes ")
    assert "CKD202 temp-file" in item(plan, "model-6.bpk.tmp").reasons[1]


def test_repair_leaves_a_checkpoint_that_may_still_be_being_saved(tmp_path):
    folder = burn_run(tmp_path)
    (folder / "optim-5.bpk").unlink()
    plan = repair_plan(aged(folder, newer={"model-5.bpk": 30}))  # written 30 s ago: the save goes on
    newest = item(plan, "model-5.bpk")
    assert newest.action is Action.KEEP
    assert newest.reasons[-1] == "may still be being saved: left as it is"
    assert newest.reasons[1].startswith("modified 30s ago")


def test_repair_keeps_older_broken_checkpoints_for_prune_and_moves_only_their_leftovers(tmp_path):
    folder = burn_run(tmp_path)
    (folder / "optim-2.bpk").unlink()  # incomplete, older than the resume point
    (folder / "scheduler-3.bpk").write_bytes(b"")  # an empty file in an older checkpoint
    plan = repair_plan(aged(folder))
    assert item(plan, "model-2.bpk").action is Action.KEEP
    assert item(plan, "model-2.bpk").reasons == ("incomplete, older than the resume point: left as it is (prune deletes it)",)
    empty = item(plan, "scheduler-3.bpk")
    assert (empty.action, [e.name for e in empty.entries]) == (Action.QUARANTINE, ["scheduler-3.bpk"])
    assert empty.reasons[0] == "empty file"
    assert [i.action for i in plan.items if i.number == 5] == [Action.KEEP]  # the resume point, whole


def test_repair_repoints_a_stale_latest_at_the_resume_point(tmp_path):
    folder = deepspeed_run(tmp_path / "ds", steps=(100, 200, 300))
    (folder / "global_step300" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    plan = repair_plan(aged(folder))
    repoint = next(i for i in plan.items if i.action is Action.REPOINT)
    assert repoint.write == PointerWrite("latest", "global_step200", PointerKind.TEXT)
    assert (repoint.number, [e.name for e in repoint.entries]) == (200, ["latest"])
    assert repoint.reasons == (
        "latest names 'global_step300', which is incomplete: fixes CKD113 stale-pointer",
        "will name 'global_step200', the resume point",
    )
    assert item(plan, "global_step300").action is Action.QUARANTINE


def test_repair_creates_a_missing_latest_and_leaves_pointers_while_a_save_goes_on(tmp_path):
    folder = deepspeed_run(tmp_path / "ds", latest=False)
    created = next(i for i in repair_plan(aged(folder)).items if i.action is Action.REPOINT)
    assert created.write == PointerWrite("latest", "global_step200", PointerKind.TEXT)
    assert created.entries[0].os_path == str(folder / "latest") and created.bytes == 0

    (folder / "global_step200" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    plan = repair_plan(aged(folder, newer={"mp_rank_00_model_states.pt": 5}))  # another rank still writes
    assert not [i for i in plan.items if i.action in (Action.REPOINT, Action.QUARANTINE)]
    assert plan.items[-1].reasons[-1] == "step 200 may still be being saved: left as it is"


def test_repair_leaves_a_leftover_a_live_process_holds_open(tmp_path):
    folder = burn_run(tmp_path)
    (folder / "model-6.bpk.tmp").write_bytes(b"\0" * 64)
    open_by = {str(folder / "model-6.bpk.tmp"): 4242}
    held = item(repair_plan(aged(folder), open_by=open_by), "model-6.bpk.tmp")
    assert held.action is Action.KEEP and "open in process 4242" in held.reasons


def test_planning_a_repair_changes_nothing_and_decides_the_same_twice(tmp_path):
    folder = burn_run(tmp_path)
    (folder / "optim-5.bpk").unlink()
    aged(folder)
    before = {p.name: (p.stat().st_mtime, p.read_bytes()) for p in folder.iterdir()}
    assert repair_plan(folder) == repair_plan(folder)
    assert {p.name: (p.stat().st_mtime, p.read_bytes()) for p in folder.iterdir()} == before
    assert not (folder / ".ckptdoctor").exists()


# --- undo: what a quarantine's manifest says, against the run as it is now -------------------------


def stored(path: str, state: StoredState, write: PointerWrite | None = None, existed: bool = True) -> Stored:
    return Stored(path, 5, ("incomplete and newer than the resume point (epoch 4)",), write, existed, state, 100)


def test_undo_puts_back_what_is_in_the_quarantine_and_nothing_that_is_in_the_way():
    quarantine = Quarantine(
        "20260101-000000",
        "/runs/a/checkpoint/.ckptdoctor/quarantine/20260101-000000",
        "/runs/a/checkpoint",
        NOW,
        "done",
        (
            stored("model-5.bpk", StoredState.QUARANTINED),
            stored("scheduler-5.bpk", StoredState.CONFLICT),  # a file of that name is back in the run
            stored("optim-6.bpk", StoredState.LOST),  # someone emptied the quarantine
            stored("model-6.bpk", StoredState.BACK),  # restored already
            stored("latest", StoredState.QUARANTINED, PointerWrite("latest", "global_step200"), existed=False),
            stored("latest_universal", StoredState.CONFLICT, PointerWrite("latest_universal", "global_step200")),
        ),
        "/runs/a/checkpoint/.ckptdoctor",
    )
    plan = repair.undo_plan(quarantine, "runs/a/checkpoint", "/runs/a/checkpoint", "/runs/a/checkpoint/.ckptdoctor")
    assert [(i.action, i.entries[0].name, i.reasons[-1]) for i in plan.items] == [
        (Action.RESTORE, "model-5.bpk", "put back"),
        (Action.KEEP, "scheduler-5.bpk", "exists again in the run: not overwritten"),
        (Action.KEEP, "optim-6.bpk", "no longer in the quarantine: cannot be put back"),
        (Action.RESTORE, "latest", "remove the pointer the repair created"),
        (Action.KEEP, "latest_universal", "changed since the repair: not overwritten"),
    ]
    restored = plan.items[0]
    assert restored.entries[0].path == os.path.join("runs/a/checkpoint", "model-5.bpk")
    assert restored.entries[0].os_path == "/runs/a/checkpoint/model-5.bpk"
    assert restored.reasons[0] == "quarantined: incomplete and newer than the resume point (epoch 4)"
    assert plan.items[3].reasons[0].startswith("re-pointed: ")
    assert plan.items[2].bytes == 0 and restored.bytes == 100
    assert plan.policy == "undo repair 20260101-000000"
