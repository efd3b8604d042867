"""DeepSpeed save_dir trees, built by hand with DeepSpeed's exact names (DeepSpeed is too heavy here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from frameworks import deepspeed_run, deepspeed_universal


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
