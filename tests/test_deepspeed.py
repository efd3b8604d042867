"""DeepSpeed save_dir trees, built by hand with DeepSpeed's exact names (DeepSpeed is too heavy here)."""

from __future__ import annotations

import shutil
from pathlib import Path

from frameworks import deepspeed_run


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
