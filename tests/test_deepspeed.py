"""DeepSpeed save_dir trees: built by hand with DeepSpeed's exact names for the layout's shapes,
and real ZeRO-1/2/3 runs made by DeepSpeed's own launcher on the CPU (``tests/deepspeed_job.py``,
skipped where deepspeed is not installed) for what its saves pickle, judged by what its own
``engine.load_checkpoint`` loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from frameworks import copy_run, deepspeed_run, deepspeed_trained, deepspeed_universal
from sample_set import GADGETS, _add_setitem, _call, _call0, _g, _list, _replace_member, _u
from test_repair_frameworks import age


def findings(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


def test_a_healthy_save_dir_is_quiet(tmp_path, inspect_json):
    folder = deepspeed_run(tmp_path / "ds")
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 0 and report["findings"] == []
    (run,) = report["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("deepspeed", "step", 200)
    assert [Path(f["path"]).name for f in run["loose_files"]] == ["latest"]


def test_a_missing_rank_file_is_ckd105_and_latest_now_points_at_an_incomplete_tag(tmp_path, inspect_json):
    folder = deepspeed_run(tmp_path / "ds")
    (folder / "global_step200" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    report = inspect_json(folder).json
    (shard,) = findings(report, "CKD105")
    assert shard["index"] == 200 and "zero_pp_rank_1_mp_rank_00_optim_states.pt" in shard["message"]
    (auto,) = findings(report, "CKD114")
    assert auto["index"] == 200
    assert 'tag="global_step100"' in report["runs"][0]["resume"]["how"]
    assert report["runs"][0]["resume"]["index"] == 100


def test_latest_naming_a_missing_tag_is_ckd113(tmp_path, inspect_json):
    folder = deepspeed_run(tmp_path / "ds")
    (folder / "latest").write_text("global_step300")
    (stale,) = findings(inspect_json(folder).json, "CKD113")
    assert "global_step300" in stale["message"] and "not there" in stale["message"]


def test_no_latest_file_is_ckd113(tmp_path, inspect_json):
    folder = deepspeed_run(tmp_path / "ds")
    (folder / "latest").unlink()
    (stale,) = findings(inspect_json(folder).json, "CKD113")
    assert "latest" in stale["message"]


def test_without_zero_the_optimizer_lives_in_the_model_states(tmp_path, inspect_json):
    folder = deepspeed_run(tmp_path / "ds", ranks=0)
    report = inspect_json(folder).json
    assert report["findings"] == []
    assert report["runs"][0]["required"] == ["model"]


def test_an_empty_partition_makes_the_tag_partial(tmp_path, inspect_json):
    folder = deepspeed_run(tmp_path / "ds")
    (folder / "global_step200" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"")
    report = inspect_json(folder).json
    assert findings(report, "CKD201")[0]["index"] == 200
    assert report["runs"][0]["checkpoints"][-1]["status"] == "partial"
    assert findings(report, "CKD114")


def test_tag_folders_are_not_runs_of_their_own(tmp_path, inspect_json):
    folder = deepspeed_run(tmp_path / "ds")
    shutil.copytree(folder, tmp_path / "ds2")
    assert [Path(r["path"]).name for r in inspect_json(tmp_path).json["runs"]] == ["ds", "ds2"]


# --- universal checkpoints (deepspeed/checkpoint/ds_to_universal.py; engine.py load_checkpoint) ----


def universal_only(tmp_path: Path) -> Path:
    folder = deepspeed_universal(tmp_path / "ds")
    for step in (100, 200):
        shutil.rmtree(folder / f"global_step{step}")
    (folder / "latest").unlink()
    return folder


def test_universal_tags_alone_are_healthy_and_resumed_with_load_universal(tmp_path, inspect_json, cli):
    folder = universal_only(tmp_path)
    result = inspect_json(folder)
    assert result.exit_code == 0 and result.json["findings"] == []
    (run,) = result.json["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("deepspeed", "step", 200)
    assert '"load_universal": true' in run["resume"]["how"] and 'tag="global_step200_universal"' in run["resume"]["how"]
    assert run["resume"]["path"] == str(folder / "global_step200_universal")
    assert len(run["checkpoints"][-1]["files"]) == 10  # 2 params x 4 states, the common state, the model states
    deep = cli("verify", "--deep", "--json", folder)
    assert deep.exit_code == 0 and json.loads(deep.stdout)["findings"] == []


def test_universal_tags_beside_the_tags_they_came_from_are_runs_of_their_own(tmp_path, inspect_json):
    # one checkpoint a step: the tags are the run's, each converted one is looked at on its own
    folder = deepspeed_universal(tmp_path / "ds")
    report = inspect_json(folder).json
    assert report["findings"] == []
    runs = {Path(r["path"]).name: r for r in report["runs"]}
    assert {name: r["layout"] for name, r in runs.items()} == dict.fromkeys(
        ("ds", "global_step100_universal", "global_step200_universal"), "deepspeed"
    )
    assert runs["ds"]["resume"]["index"] == 200
    assert f'tag="global_step200_universal"` to `engine.load_checkpoint("{folder}"' in runs["global_step200_universal"]["resume"]["how"]


def test_a_conversion_cut_short_leaves_tmp_and_no_model_states(tmp_path, inspect_json):
    folder = universal_only(tmp_path)
    tag = folder / "global_step200_universal"
    (tag / "mp_rank_00_model_states.pt").unlink()
    shutil.rmtree(tag / "zero" / "linear.bias")
    (tag / "zero" / "optimizer_state.pt").unlink()
    (tag / "tmp" / "linear.bias" / "0").mkdir(parents=True)
    (tag / "tmp" / "linear.bias" / "0" / "exp_avg.00").write_bytes(b"PK\x03\x04")
    report = inspect_json(folder).json
    (run,) = report["runs"]
    assert run["checkpoints"][-1]["status"] == "partial"
    assert run["resume"]["index"] == 100
    assert findings(report, "CKD113")[0]["index"] == 200  # latest_universal names the cut tag


def test_a_kept_tmp_folder_beside_the_model_states_is_no_damage(tmp_path, inspect_json):
    folder = universal_only(tmp_path)
    kept = folder / "global_step200_universal" / "tmp" / "linear.bias" / "0"
    kept.mkdir(parents=True)
    (kept / "fp32.00").write_bytes(b"")
    assert inspect_json(folder).json["findings"] == []  # --keep_temp_folder


def test_a_parameter_missing_a_state_file_is_ckd105(tmp_path, inspect_json):
    folder = universal_only(tmp_path)
    (folder / "global_step200_universal" / "zero" / "linear.bias" / "exp_avg_sq.pt").unlink()
    report = inspect_json(folder).json
    (missing,) = findings(report, "CKD105")
    assert missing["index"] == 200 and "zero/linear.bias/exp_avg_sq.pt" in missing["message"]
    assert report["runs"][0]["resume"]["index"] == 100


def test_a_truncated_state_file_makes_the_universal_tag_partial(tmp_path, inspect_json):
    folder = universal_only(tmp_path)
    state = folder / "global_step200_universal" / "zero" / "linear.weight" / "fp32.pt"
    state.write_bytes(state.read_bytes()[:-50])
    report = inspect_json(folder).json
    assert report["runs"][0]["checkpoints"][-1]["status"] == "partial"
    assert report["runs"][0]["resume"]["index"] == 100


@pytest.mark.parametrize(
    ("text", "problem"), [(None, "missing"), ("global_step300_universal", "not there"), ("global_step200", "not there")]
)
def test_latest_universal_missing_or_naming_no_universal_tag_is_ckd113(tmp_path, inspect_json, text, problem):
    folder = universal_only(tmp_path)
    if text is None:
        (folder / "latest_universal").unlink()
    else:
        (folder / "latest_universal").write_text(text)
    (stale,) = findings(inspect_json(folder).json, "CKD113")
    assert "latest_universal" in stale["message"]


def test_repair_writes_latest_universal_and_leaves_latest_alone(tmp_path, cli):
    folder = universal_only(tmp_path)
    (folder / "latest_universal").write_text("global_step300_universal")
    assert cli("repair", "--yes", "--min-age", "0", folder).exit_code == 0
    assert (folder / "latest_universal").read_text() == "global_step200_universal"
    assert not (folder / "latest").exists()
    assert cli("inspect", "--json", folder).exit_code == 0


def test_prune_removes_whole_universal_tags(tmp_path, cli):
    folder = universal_only(tmp_path)
    assert cli("prune", "--keep-last", "1", "--min-age", "0", "--yes", folder).exit_code == 0
    assert not (folder / "global_step100_universal").exists()
    assert (folder / "global_step200_universal" / "zero" / "linear.bias" / "fp32.pt").is_file()


def test_a_universal_name_on_a_torch_file_is_not_deepspeed(tmp_path, inspect_json):
    folder = tmp_path / "run"
    folder.mkdir()
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(2)}, folder / "global_step100_universal.pt")
    assert all(run["layout"] != "deepspeed" for run in inspect_json(folder).json["runs"])


# --- real ZeRO runs: the objects every ZeRO save pickles (deepspeed 0.19.8, launched on the CPU) ----

STAGES = ["deepspeed_zero1", "deepspeed_zero2", "deepspeed_zero3"]
PARTITION = "zero_pp_rank_0_mp_rank_00_optim_states.pt"
LOSS_SCALER = ("deepspeed.runtime.fp16.loss_scaler", "LossScaler")
ZERO_STAGE = ("deepspeed.runtime.zero.config", "ZeroStageEnum")


@pytest.mark.parametrize("stage", STAGES)
def test_a_real_zero_run_verifies_clean_and_resumes_where_deepspeed_loads(stage, request, cli):
    ds = request.getfixturevalue(stage)
    result = cli("verify", "--deep", "--json", "--fail-on", "warning", ds.path)
    assert result.exit_code == 0, result.stdout
    (run,) = result.json["runs"]
    assert [(c["index"], c["status"]) for c in run["checkpoints"]] == [(2, "complete"), (4, "complete")]
    # what DeepSpeed's own load_checkpoint loads without a tag (it follows `latest`), and with the tag named
    assert Path(ds.loads[None]["path"]).parent == ds.path / "global_step4" and ds.loads[None]["step"] == 4
    assert run["resume"]["index"] == 4 and 'tag="global_step4"' in run["resume"]["how"]
    assert ds.loads["global_step4"]["step"] == 4 and ds.loads["global_step2"]["step"] == 2
    # every partition pickles DeepSpeed's own objects: said, as info, with the loader that restores them
    findings = result.json["findings"]
    assert findings and {(f["code"], f["severity"]) for f in findings} == {("CKD402", "info")}
    assert {Path(f["path"]).name for f in findings} == {f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt" for rank in (0, 1)}
    assert all("LossScaler" in f["message"] and "ZeroStageEnum" in f["message"] for f in findings)
    assert all("engine.load_checkpoint" in f["message"] for f in findings)


def test_deepspeeds_objects_load_with_weights_only_when_allowed_by_name(deepspeed_zero2):
    """The CKD402 fix for reading a partition outside DeepSpeed: exactly the classes named."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    path = deepspeed_zero2.path / "global_step4" / PARTITION
    with pytest.raises(Exception, match="LossScaler"):
        torch.load(path, weights_only=True)
    with torch.serialization.safe_globals([LossScaler, ZeroStageEnum, fragment_address]):
        state = torch.load(path, weights_only=True)["optimizer_state_dict"]
    assert state["zero_stage"] is ZeroStageEnum.gradients and isinstance(state["loss_scaler"], LossScaler)


def test_verify_load_of_a_real_zero_run_loads_nothing_it_would_refuse(deepspeed_zero2, cli):
    result = cli("verify", "--load", "--json", deepspeed_zero2.path)
    assert result.exit_code == 0
    assert {f["code"] for f in result.json["findings"]} == {"CKD402"}


def test_prune_verify_of_a_real_zero_run_keeps_the_newest_and_deletes_the_older(deepspeed_zero2, tmp_path, cli):
    folder = copy_run(deepspeed_zero2.path, tmp_path / "ds")
    age(folder)
    result = cli("prune", "--yes", "--verify", "--json", "--keep-last", "1", folder)
    assert result.exit_code == 0, result.stderr
    assert "does not pass verify" not in result.stderr
    assert sorted(p.name for p in folder.glob("global_step*")) == ["global_step4"]
    assert (folder / "latest").read_text() == "global_step4"  # what load_checkpoint follows: it loaded global_step4


def _edited(ds: Path, into: Path, value: bytes, key: str = "extra") -> Path:
    """A copy of the run whose newest rank-0 partition's ``data.pkl`` gets one more top-level item."""
    folder = copy_run(ds, into)
    partition = folder / "global_step4" / PARTITION
    partition.write_bytes(_replace_member(partition.read_bytes(), "data.pkl", lambda pickled: _add_setitem(pickled, key, value)))
    return folder


def _int(value: int) -> bytes:
    """BININT1, as torch's protocol 2 writes a small int."""
    return b"K" + bytes([value])


_SCALER, _STAGE = _g(*LOSS_SCALER), _g(*ZERO_STAGE)
BEYOND = {
    # the trusted classes used as no ZeRO save uses them
    "scaler-called-with-an-argument": _call(_SCALER, _u("payload")),
    "scaler-called-with-a-list": _call(_SCALER, _list(_int(1))),
    "scaler-class-given-fields": _SCALER + b"}(" + _u("scale_loss") + _int(0) + b"ub",
    "scaler-instance-called": _call(_SCALER + b")\x81", _u("payload")),
    "stage-called-with-a-list": _call(_STAGE, _list(_int(2))),
    "stage-member-given-fields": _call(_STAGE, _int(2)) + b"}(" + _u("_value_") + _int(3) + b"ub",
    "stage-as-a-value": _STAGE,
    # anything else beside them
    "os.system": GADGETS["os.system"]("/nonexistent/ckptdoctor-canary"),
    "getattr-lookup": _call0(_call(_g("builtins", "getattr"), _SCALER, _u("scale_loss"))),
}


@pytest.mark.parametrize("payload", sorted(BEYOND))
def test_deepspeeds_classes_used_any_other_way_are_unsafe_in_its_own_run(payload, deepspeed_zero2, tmp_path, cli):
    folder = _edited(deepspeed_zero2.path, tmp_path / "ds", BEYOND[payload])
    result = cli("verify", "--json", folder)
    assert result.exit_code == 1
    unsafe = [f for f in result.json["findings"] if f["code"] == "CKD401"]
    assert [(Path(f["path"]).parent.name, Path(f["path"]).name) for f in unsafe] == [("global_step4", PARTITION)]
    assert "engine.load_checkpoint" in unsafe[0]["message"]  # DeepSpeed's loader would run it: weights_only=False
    (run,) = result.json["runs"]
    assert run["checkpoints"][-1]["status"] == "corrupt" and run["resume"]["index"] == 2
    assert deepspeed_zero2.loads["global_step2"]["step"] == 2  # where DeepSpeed's own load goes back to, by tag


def test_the_same_edit_with_nothing_unsafe_stays_vouched_for(deepspeed_zero2, tmp_path, cli):
    """The control of the payloads above: the rewritten zip and one more plain item are no finding."""
    folder = _edited(deepspeed_zero2.path, tmp_path / "ds", _int(7))
    result = cli("verify", "--json", "--fail-on", "warning", folder)
    assert result.exit_code == 0 and {f["code"] for f in result.json["findings"]} == {"CKD402"}


def test_deepspeeds_objects_outside_a_deepspeed_run_are_unsafe(deepspeed_zero2, tmp_path, cli):
    loop = tmp_path / "loop"
    loop.mkdir()
    for step in (2, 4):  # a hand-made loop's files, one of them a copy of a real ZeRO partition
        shutil.copy(deepspeed_zero2.path / f"global_step{step}" / "mp_rank_00_model_states.pt", loop / f"model_{step}.pt")
        shutil.copy(deepspeed_zero2.path / f"global_step{step}" / PARTITION, loop / f"optimizer_{step}.pt")
    result = cli("verify", "--json", loop)
    assert result.json["runs"][0]["layout"] != "deepspeed"
    assert result.exit_code == 1
    assert {Path(f["path"]).name for f in result.json["findings"] if f["code"] == "CKD401"} == {"optimizer_2.pt", "optimizer_4.pt"}


@pytest.fixture(scope="module")
def lightning_engine(tmp_path_factory):
    """Real ZeRO-2 saves as Lightning's ``DeepSpeedStrategy.save_checkpoint`` has the engine write
    them (``strategies/deepspeed.py``: ``engine.save_checkpoint(filepath, client_state=...,
    tag="checkpoint")`` into the ``.ckpt`` folder)."""
    return deepspeed_trained(tmp_path_factory.mktemp("pl_ds") / "checkpoints", 2, lightning=True)


def test_lightnings_deepspeed_folders_vouch_for_the_engines_objects(lightning_engine, tmp_path, cli):
    # every rule: the ZeRO partitions' flat state is no CKD301 in Lightning's engine folders either
    result = cli("verify", "--json", "--fail-on", "warning", lightning_engine)
    assert result.exit_code == 0, result.stdout
    (run,) = result.json["runs"]
    assert run["layout"] == "lightning" and [c["status"] for c in run["checkpoints"]] == ["complete", "complete"]
    assert {(f["code"], f["severity"]) for f in result.json["findings"]} == {("CKD402", "info")}
    # a Lightning run of plain .ckpt files vouches for none of them
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(lightning_engine / "epoch=1-step=4.ckpt" / "checkpoint" / PARTITION, plain / "epoch=1-step=4.ckpt")
    shutil.copy(lightning_engine / "epoch=0-step=2.ckpt" / "checkpoint" / PARTITION, plain / "epoch=0-step=2.ckpt")
    report = cli("verify", "--json", plain).json
    assert report["runs"][0]["layout"] == "lightning"
    assert {f["code"] for f in report["findings"]} >= {"CKD401"}
