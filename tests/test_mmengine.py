"""OpenMMLab mmengine ``work_dir``s, written by real ``Runner.train()`` runs (mmengine 0.10.7 on the
CPU) and resumed by ``Runner(resume=True)``, the way ``tools/train.py --resume`` does.

The layout follows open-mmlab/mmengine@2543429 (``mmengine/hooks/checkpoint_hook.py``:
``CheckpointHook._save_checkpoint_with_step``, ``_save_best_checkpoint``;
``mmengine/runner/runner.py``: ``Runner.save_checkpoint``, ``load_or_resume``, ``resume``;
``mmengine/runner/checkpoint.py``: ``find_latest_checkpoint``). mmengine 0.10 loads with torch's
default ``weights_only=True``, which refuses the ``HistoryBuffer`` of its own ``message_hub`` on
torch >= 2.6: every resume here sets ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``, as the resume hint says.
"""

from __future__ import annotations

import os
import pickle
import shutil
import time
from pathlib import Path

import pytest
from frameworks import copy_run, mmengine_distributed, mmengine_run
from reports import codes

from ckptdoctor.layouts.pointers import unfollowable
from ckptdoctor.layouts.registry import layout_named
from ckptdoctor.pipelines.scan import inspect, scan

torch = pytest.importorskip("torch")
pytest.importorskip("mmengine", reason="mmengine is not installed (pip install torch==2.13.0 '.[mmengine]')")


@pytest.fixture(scope="module")
def by_epoch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 epochs, max_keep_ckpts=2: epoch_3.pth, epoch_4.pth, best_mse_epoch_4.pth, last_checkpoint."""
    work = tmp_path_factory.mktemp("mm") / "work_epoch"
    mmengine_run(work, "epoch", 4)
    return work


@pytest.fixture(scope="module")
def by_iter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 iterations saved every 4, max_keep_ckpts=2: iter_12.pth, iter_16.pth, best_mse_iter_*.pth."""
    work = tmp_path_factory.mktemp("mm") / "work_iter"
    mmengine_run(work, "iter", 16)
    return work


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A run of its own, as ``by_epoch``: a resume from a copy would delete the original's best
    checkpoint, whose full path the copy's ``message_hub`` keeps (``CheckpointHook.before_train``)."""
    folder = tmp_path / "work"
    mmengine_run(folder, "epoch", 4)
    return folder


@pytest.fixture
def no_weights_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")


def aged(folder: Path) -> Path:
    old = time.time() - 86400
    for path in folder.rglob("*"):
        os.utime(path, (old, old))
    return folder


def test_a_run_by_epoch_is_mmengines_with_its_resume_point_and_pointer(by_epoch, inspect_json):
    assert sorted(p.name for p in by_epoch.glob("*.pth")) == ["best_mse_epoch_4.pth", "epoch_3.pth", "epoch_4.pth"]
    assert (by_epoch / "last_checkpoint").read_text() == str(by_epoch / "epoch_4.pth")  # the full path, no newline
    result = inspect_json(by_epoch)
    report = result.json
    assert result.exit_code == 0 and report["findings"] == []
    (run,) = report["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("mmengine", "epoch", 4)
    assert [c["index"] for c in run["checkpoints"]] == [3, 4]
    assert {Path(f["path"]).name for f in run["loose_files"]} == {"best_mse_epoch_4.pth", "last_checkpoint"}
    (scanned,) = scan([str(by_epoch)]).runs
    assert scanned.resume_path == str(by_epoch / "epoch_4.pth")
    assert "`resume=True`" in scanned.resume_how and "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1" in scanned.resume_how


def test_a_run_by_iteration_counts_iterations(by_iter, inspect_json):
    (run,) = inspect_json(by_iter).json["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("mmengine", "iteration", 16)
    assert [c["index"] for c in run["checkpoints"]] == [12, 16]
    assert all(sorted(c["files"][0]["roles"]) == ["model", "optimizer", "scheduler"] for c in run["checkpoints"])


@pytest.mark.parametrize("fixture", ["by_epoch", "by_iter"])
def test_deep_verify_of_a_healthy_run_warns_only_that_torch_weights_only_refuses_it(fixture, request, cli):
    folder = request.getfixturevalue(fixture)
    result = cli("verify", "--deep", "--json", folder)
    assert result.exit_code == 0
    assert {f["code"] for f in result.json["findings"]} == {"CKD402"}  # HistoryBuffer: refused, not unsafe
    assert all(c["status"] == "complete" for c in result.json["runs"][0]["checkpoints"])
    # which is what mmengine's own resume hits on this torch
    with pytest.raises(pickle.UnpicklingError, match="HistoryBuffer"):
        torch.load(folder / ("epoch_4.pth" if fixture == "by_epoch" else "iter_16.pth"))


def test_the_best_checkpoint_has_no_optimizer_by_design_and_is_no_resume_point(by_epoch, cli):
    report = cli("verify", "--json", by_epoch).json
    (run,) = report["runs"]
    best = next(f for f in run["loose_files"] if Path(f["path"]).name.startswith("best_"))
    assert "optimizer" not in best["keys"] and "state_dict" in best["keys"]
    assert not {"CKD101", "CKD107"} & {f["code"] for f in report["findings"]}


def test_mmengine_resumes_from_the_resume_point(work, no_weights_only):
    (run,) = scan([str(work)]).runs
    runner = mmengine_run(work, "epoch", 5, resume=True)
    assert runner.epoch == 5 and (work / "epoch_5.pth").exists()
    assert (work / "last_checkpoint").read_text() == str(work / "epoch_5.pth")
    # and through load_from, the path inspect --resume-path prints
    assert mmengine_run(work, "epoch", 6, resume=run.resume_path).epoch == 6


def test_resume_path_is_what_load_from_takes(work, cli):
    printed = cli("inspect", "--resume-path", work).stdout.strip()
    assert printed == str(work / "epoch_4.pth")


def test_a_kill_mid_save_falls_back_to_what_last_checkpoint_still_names(work, no_weights_only, inspect_json):
    """max_keep_ckpts deleted epoch 2, then the job died writing epoch 4: CheckpointHook writes
    last_checkpoint after the save, so it still names epoch 3."""
    newest = work / "epoch_4.pth"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    (work / "last_checkpoint").write_text(str(work / "epoch_3.pth"))
    report = inspect_json(work).json
    (run,) = report["runs"]
    assert [c["status"] for c in run["checkpoints"]] == ["complete", "partial"]
    assert run["resume"]["index"] == 3
    assert not {"CKD113", "CKD114"} & set(codes(report))
    runner = mmengine_run(work, "epoch", 4, resume=True)  # epoch 4 again, over the cut file
    assert runner.epoch == 4 and torch.load(newest, weights_only=False)["meta"]["epoch"] == 4


def test_last_checkpoint_naming_a_cut_file_is_stale_and_repair_repoints_it(work, no_weights_only, cli, inspect_json):
    """A copy of the work_dir cut short (rsync of a live run): the pointer names the cut file."""
    newest = work / "epoch_4.pth"
    newest.write_bytes(newest.read_bytes()[:-300])
    report = inspect_json(work).json
    assert report["runs"][0]["resume"]["index"] == 3
    assert {("CKD113", 4), ("CKD114", 4)} <= set(codes(report, index=True))
    with pytest.raises(OSError, match="Invalid argument"):  # mmengine follows the pointer into the cut file
        mmengine_run(work, "epoch", 5, resume=True)
    aged(work)
    plan = cli("repair", "--dry-run", "--json", work).json["plan"]
    assert ("repoint", 3) in {(item["action"], item["index"]) for item in plan}
    assert cli("repair", "--yes", work).exit_code == 0
    assert (work / "last_checkpoint").read_text() == str(work / "epoch_3.pth")  # mmengine's format: the full path
    assert not {"CKD113", "CKD114"} & set(codes(inspect_json(work).json))
    runner = mmengine_run(work, "epoch", 5, resume=True)
    assert runner.epoch == 5 and (work / "epoch_5.pth").exists()


def test_a_checkpoint_without_its_optimizer_is_incomplete(work, inspect_json):
    newest = work / "epoch_4.pth"
    state = torch.load(newest, weights_only=False)  # the test's own file
    del state["optimizer"]
    torch.save(state, newest)
    report = inspect_json(work).json
    assert ("CKD101", 4) in codes(report, index=True)
    assert report["runs"][0]["resume"]["index"] == 3
    assert ("CKD114", 4) in codes(report, index=True)  # Runner(resume=True) would go on with a fresh optimizer, silently


@pytest.mark.parametrize(
    ("pointer", "state"),
    [
        (None, "missing"),  # Runner(resume=True) finds nothing and starts over
        ("{work}/epoch_2.pth", "not there"),  # rotated away by max_keep_ckpts
        ("{other}/epoch_4.pth", "not there"),  # another work_dir: a copy's pointer, or a moved run's
        ("epoch_4.pth", "not there"),  # a relative path: resolved from wherever the job runs
        # no checkpoint of the series, yet there: Runner(resume=True) loads it (the second attack on issue 31)
        ("{work}/best_mse_epoch_4.pth", "outside this run's checkpoints"),
    ],
)
def test_last_checkpoint_naming_no_checkpoint_of_the_run_is_stale(work, tmp_path, pointer, state, inspect_json):
    path = work / "last_checkpoint"
    if pointer is None:
        path.unlink()
    else:
        path.write_text(pointer.format(work=work, other=tmp_path / "elsewhere"))
    report, found = inspect([str(work)])
    (run,) = found.runs
    layout = layout_named(run.layout)
    (named,) = layout.pointers(run)
    assert (named.number, unfollowable(run, named)) == (None, state)
    assert "CKD113" in {f.code for f in report.findings}
    assert run.resume is not None and run.resume.index == 4


def test_repair_writes_a_missing_last_checkpoint_as_mmengine_does(work, cli, no_weights_only):
    (work / "last_checkpoint").unlink()
    aged(work)
    assert cli("repair", "--yes", work).exit_code == 0
    assert (work / "last_checkpoint").read_text() == str(work / "epoch_4.pth")
    assert mmengine_run(work, "epoch", 5, resume=True).epoch == 5


def test_a_plain_copy_names_the_original_and_repair_brings_it_home(by_epoch, tmp_path, cli, inspect_json):
    copied = copy_run(by_epoch, tmp_path / "copy")
    report = inspect_json(copied).json
    assert ("CKD113", None) in codes(report, index=True)  # Runner(resume=True) would load the original's file
    aged(copied)
    assert cli("repair", "--yes", copied).exit_code == 0
    assert (copied / "last_checkpoint").read_text() == str(copied / "epoch_4.pth")


def test_a_staging_leftover_beside_a_run_is_ckd202(work, inspect_json):
    (work / "epoch_5.pth.tmp").write_bytes((work / "epoch_4.pth").read_bytes()[:400])  # a copy tool's, cut
    report = inspect_json(work).json
    assert "CKD202" in {f["code"] for f in report["findings"]}
    assert report["runs"][0]["resume"]["index"] == 4


def test_prune_keeps_the_newest_and_the_pointer_still_resumes(work, cli, no_weights_only):
    aged(work)
    assert cli("prune", "--keep-last", "1", "--yes", work).exit_code == 0
    assert sorted(p.name for p in work.glob("*.pth")) == ["best_mse_epoch_4.pth", "epoch_4.pth"]
    assert mmengine_run(work, "epoch", 5, resume=True).epoch == 5


def test_keep_best_ranks_by_the_logged_evaluations(work, cli):
    values = layout_named("mmengine").metric_values(scan([str(work)]).runs[0], str(work), "mse", lambda p: Path(p).read_bytes())
    assert set(values) == {1, 2, 3, 4} and values[4] < values[1]  # evaluated after every epoch, logged by epoch
    aged(work)
    plan = cli("prune", "--keep-last", "0", "--keep-best", "1", "--metric", "mse", "--mode", "min", "--dry-run", "--json", work).json[
        "plan"
    ]
    kept = {item["index"] for item in plan if item["action"] == "keep"}
    assert 4 in kept


def test_iteration_runs_log_evaluations_under_epoch_0_so_no_value_is_guessed(by_iter):
    (run,) = scan([str(by_iter)]).runs
    assert layout_named("mmengine").metric_values(run, str(by_iter), "mse", lambda p: Path(p).read_bytes()) == {}


def test_a_hand_made_loop_with_mmengine_names_is_not_mmengine(tmp_path, inspect_json):
    folder = tmp_path / "loop"
    folder.mkdir()
    model = torch.nn.Linear(2, 2)
    for epoch in (1, 2):
        torch.save({"model": model.state_dict(), "optimizer": {}}, folder / f"epoch_{epoch}.pth")
    assert inspect_json(folder).json["runs"][0]["layout"] == "torch"


def test_a_run_that_lost_its_pointer_is_still_known_by_its_log_folders(work, inspect_json):
    (work / "last_checkpoint").unlink()
    (work / "best_mse_epoch_4.pth").unlink()
    assert inspect_json(work).json["runs"][0]["layout"] == "mmengine"


# --- the HistoryBuffer pickle: the lookups mmengine writes, and none other --------------------------


def _saved_with(tmp_path: Path, extra: object, runner: bool = True) -> Path:
    """``epoch_1.pth`` with ``extra`` as its ``message_hub``; with the ``last_checkpoint`` a
    ``Runner`` writes beside it (``runner``), or alone, as a hand-made loop would save it."""
    folder = tmp_path / "work"
    folder.mkdir(parents=True)
    torch.save(
        {
            "meta": {},
            "state_dict": {"w": torch.zeros(2)},
            "message_hub": extra,
            "optimizer": {"state": {}, "param_groups": [{"lr": 0.1, "params": [0]}]},
        },
        folder / "epoch_1.pth",
    )
    if runner:
        (folder / "last_checkpoint").write_text(str(folder / "epoch_1.pth"))
    return folder


def test_a_history_buffer_is_vouched_for_in_mmengine_runs_alone(tmp_path, cli):
    from mmengine.logging.history_buffer import HistoryBuffer

    scalars = {"scalar": HistoryBuffer([1.0, 2.0], [1, 1])}
    own = cli("verify", "--json", _saved_with(tmp_path / "a", scalars)).json
    assert own["runs"][0]["layout"] == "mmengine"
    assert [(f["code"], f["severity"]) for f in own["findings"]] == [("CKD402", "warning")]
    assert "HistoryBuffer" in own["findings"][0]["message"] and "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1" in own["findings"][0]["message"]
    # which mmengine's own resume needs on this torch: its default load refuses it, the forced one loads it
    with pytest.raises(pickle.UnpicklingError, match="HistoryBuffer"):
        torch.load(tmp_path / "a" / "work" / "epoch_1.pth")
    assert isinstance(torch.load(tmp_path / "a" / "work" / "epoch_1.pth", weights_only=False)["message_hub"]["scalar"], HistoryBuffer)
    # no mmengine run vouches for the same file: a plain torch loop's is unsafe
    loop = cli("verify", "--json", _saved_with(tmp_path / "b", scalars, runner=False)).json
    assert loop["runs"][0]["layout"] == "torch"
    assert "CKD401" in {f["code"] for f in loop["findings"]}


def test_a_history_buffer_is_known_but_another_lookup_on_it_is_unsafe(tmp_path, cli):
    from mmengine.logging.history_buffer import HistoryBuffer

    class Lookup:
        def __init__(self, name: str) -> None:
            self.name = name

        def __reduce__(self) -> tuple[object, ...]:
            return (getattr, (HistoryBuffer, self.name))

    plain = _saved_with(tmp_path / "a", {"scalar": HistoryBuffer([1.0, 2.0], [1, 1])})
    assert {f["code"] for f in cli("verify", "--json", plain).json["findings"]} == {"CKD402"}
    odd = _saved_with(tmp_path / "b", {"scalar": HistoryBuffer(), "x": Lookup("__init__")})
    assert "CKD401" in {f["code"] for f in cli("verify", "--json", odd).json["findings"]}


def test_a_looked_up_method_that_is_called_is_unsafe(tmp_path, cli):
    from mmengine.logging.history_buffer import HistoryBuffer

    class Called:
        def __reduce__(self) -> tuple[object, ...]:
            return (HistoryBuffer.min, (HistoryBuffer([1.0], [1]),))  # pickled as getattr(HistoryBuffer, "min")(...)

    folder = _saved_with(tmp_path, {"x": Called()})
    assert "CKD401" in {f["code"] for f in cli("verify", "--json", folder).json["findings"]}


# --- CheckpointHook(out_dir=...): the checkpoints in out_dir/<work_dir's name>, last_checkpoint in work_dir


def test_checkpoints_saved_to_an_out_dir_are_judged_without_the_work_dirs_pointer(tmp_path, cli, inspect_json, no_weights_only):
    work, out = tmp_path / "work", tmp_path / "ckpts"
    mmengine_run(work, "epoch", 4, out_dir=str(out))
    saved = out / "work"  # CheckpointHook.before_train: out_dir joined with the work_dir's name
    assert sorted(p.name for p in saved.iterdir()) == ["best_mse_epoch_4.pth", "epoch_3.pth", "epoch_4.pth"]
    assert (work / "last_checkpoint").read_text() == str(saved / "epoch_4.pth")
    report = inspect_json(saved).json
    assert report["findings"] == []  # no `last_checkpoint` here is no stale pointer: it is in the work_dir
    (run,) = report["runs"]
    assert (run["layout"], run["resume"]["index"]) == ("mmengine", 4)
    assert "load_from" in run["resume"]["how"] and "out_dir" in run["resume"]["how"]
    aged(saved)
    plan = cli("repair", "--dry-run", "--json", saved).json["plan"]
    assert {item["action"] for item in plan} == {"keep"}  # no last_checkpoint written where mmengine never reads it
    # the Runner resumes through the work_dir's pointer, and from the path ckptdoctor names
    assert mmengine_run(work, "epoch", 5, resume=True, out_dir=str(out)).epoch == 5
    named = cli("inspect", "--resume-path", saved).stdout.strip()
    assert named == str(saved / "epoch_5.pth")
    assert mmengine_run(work, "epoch", 6, resume=named, out_dir=str(out)).epoch == 6


# --- FlexibleRunner: DeepSpeedStrategy and FSDPStrategy save each checkpoint as a folder, in two
# processes on gloo (frameworks.mmengine_distributed)


@pytest.fixture(scope="module")
def deepspeed_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 epochs under DeepSpeedStrategy (ZeRO-2), max_keep_ckpts=2: the folders epoch_3.pth and
    epoch_4.pth, best_mse_epoch_4.pth (a file), last_checkpoint, DeepSpeed's zero_to_fp32.py."""
    work = tmp_path_factory.mktemp("mm-ds") / "work"
    assert mmengine_distributed(work, "deepspeed", 4).count == 4
    return work


@pytest.fixture(scope="module")
def fsdp_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 epochs under FSDPStrategy(state_dict_cfg="local"): epoch_1.pth/ and epoch_2.pth/, each
    with rank0.pth and rank1.pth, and best_mse_epoch_2.pth/ likewise."""
    work = tmp_path_factory.mktemp("mm-fsdp") / "work"
    assert mmengine_distributed(work, "fsdp", 2).count == 2
    return work


def test_deepspeed_strategy_folders_are_mmengines_and_last_checkpoint_names_one(deepspeed_work, cli, inspect_json):
    newest = deepspeed_work / "epoch_4.pth"
    assert newest.is_dir() and (deepspeed_work / "best_mse_epoch_4.pth").is_file()
    assert (deepspeed_work / "last_checkpoint").read_text() == str(newest)
    assert sorted(p.name for p in newest.iterdir()) == [
        "mp_rank_00_model_states.pt",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ]
    result = inspect_json(deepspeed_work)
    assert result.exit_code == 0 and result.json["findings"] == []
    (run,) = result.json["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("mmengine", "epoch", 4)
    assert [(c["index"], c["status"]) for c in run["checkpoints"]] == [(3, "complete"), (4, "complete")]
    assert run["resume"]["path"] == str(newest)
    assert "`resume=True` to `FlexibleRunner`" in run["resume"]["how"]
    verified = cli("verify", "--json", deepspeed_work)  # the engine's own pickled objects, vouched for in mmengine's run too
    assert verified.exit_code == 0, verified.stdout
    assert {f["code"] for f in verified.json["findings"]} <= {"CKD402"}
    assert {f["severity"] for f in verified.json["findings"]} <= {"info", "warning"}
    assert verified.json["runs"][0]["resume"]["index"] == 4


def test_a_cut_deepspeed_folder_last_checkpoint_names_and_repair(deepspeed_work, tmp_path, cli, inspect_json):
    """A copy cut short (the pointer names the cut folder): FlexibleRunner(resume=True) follows
    it into the engine's load and fails; repaired, it resumes from epoch 3."""
    work = tmp_path / "work"
    shutil.copytree(deepspeed_work, work)
    (work / "last_checkpoint").write_text(str(work / "epoch_4.pth"))  # the copy's own, as the Runner writes it
    partition = work / "epoch_4.pth" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    partition.write_bytes(partition.read_bytes()[:-300])
    report = inspect_json(work).json
    (run,) = report["runs"]
    assert [(c["index"], c["status"]) for c in run["checkpoints"]] == [(3, "complete"), (4, "partial")]
    assert {("CKD203", 4), ("CKD113", 4), ("CKD114", 4)} <= set(codes(report, index=True))
    assert run["resume"]["index"] == 3
    failed = mmengine_distributed(work, "deepspeed", 5, resume=True)
    assert failed.returncode != 0 and "failed finding central directory" in failed.output  # rank 1's partition
    aged(work)
    assert cli("repair", "--yes", work).exit_code == 0
    assert (work / "last_checkpoint").read_text() == str(work / "epoch_3.pth")  # the folder's full path, as mmengine writes it
    assert not {"CKD113", "CKD114"} & set(codes(inspect_json(work).json))
    assert mmengine_distributed(work, "deepspeed", 5, resume=True).count == 5


def test_a_save_killed_inside_a_deepspeed_folder_leaves_last_checkpoint_on_the_one_before(deepspeed_work, tmp_path, inspect_json):
    """CheckpointHook writes last_checkpoint after the engine's save: a kill leaves the newest
    folder without its last rank's partition and the pointer on epoch 3 (what the repaired run
    of the test above resumed from)."""
    work = tmp_path / "work"
    shutil.copytree(deepspeed_work, work)
    (work / "epoch_4.pth" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    (work / "last_checkpoint").write_text(str(work / "epoch_3.pth"))
    report = inspect_json(work).json
    assert ("CKD105", 4) in codes(report, index=True)
    assert not {"CKD113", "CKD114"} & set(codes(report))
    (run,) = report["runs"]
    assert (run["layout"], run["resume"]["index"]) == ("mmengine", 3)
    assert (
        f"`resume=True` to `FlexibleRunner` (`tools/train.py --resume`): it follows last_checkpoint to {work}/epoch_3.pth"
        in run["resume"]["how"]
    )


def test_fsdp_strategy_folders_hold_a_bundle_per_rank(fsdp_work, tmp_path, cli, inspect_json):
    """FSDPStrategy resumes nothing on torch >= 2.1 (mmengine 0.10.7 calls
    `FSDP.optim_state_dict_to_load(state_dict, model, optimizer)`, torch takes the model first:
    `unhashable type: 'dict'`); its own load of the weights (`load_from` without resume) reads
    `rank<rank>.pth` of the folder on each rank, and fails where one is missing."""
    assert sorted(p.name for p in (fsdp_work / "epoch_2.pth").iterdir()) == ["rank0.pth", "rank1.pth"]
    result = inspect_json(fsdp_work)
    assert result.exit_code == 0 and result.json["findings"] == []
    (run,) = result.json["runs"]
    assert (run["layout"], run["resume"]["index"]) == ("mmengine", 2)
    assert [c["status"] for c in run["checkpoints"]] == ["complete-roles-unread"] * 2  # a bundle per rank, as its Runner's
    work = tmp_path / "work"
    shutil.copytree(fsdp_work, work)
    (work / "last_checkpoint").write_text(str(work / "epoch_2.pth"))
    (work / "epoch_2.pth" / "rank1.pth").unlink()
    report = inspect_json(work).json
    assert {("CKD105", 2), ("CKD114", 2)} <= set(codes(report, index=True))
    assert report["runs"][0]["resume"]["index"] == 1
    failed = mmengine_distributed(work, "fsdp", 3, load_from=str(work / "epoch_2.pth"))
    assert failed.returncode != 0 and "rank1.pth" in failed.output
    named = cli("inspect", "--resume-path", work).stdout.strip()
    assert mmengine_distributed(work, "fsdp", 3, load_from=named).count == 3
