"""HF Trainer checkpoints saved under FSDP, in accelerate's names (``accelerate/utils/fsdp_utils.py``:
``save_fsdp_model``, ``save_fsdp_optimizer``): DCP folders written by ``torch.distributed.checkpoint``
in one process, or the full-state ``pytorch_model_fsdp.bin`` and ``optimizer.bin``."""

from __future__ import annotations

import pytest
from frameworks import hf_fsdp_run


def codes(report: dict) -> list[str]:
    return [f["code"] for f in report["findings"]]


@pytest.mark.parametrize("sharded", [True, False])
def test_an_fsdp_checkpoint_has_its_model_and_optimizer(tmp_path, inspect_json, cli, sharded):
    folder = hf_fsdp_run(tmp_path / "out", sharded=sharded)
    result = inspect_json(folder)
    assert result.exit_code == 0 and result.json["findings"] == []
    (run,) = result.json["runs"]
    assert (run["layout"], run["resume"]["index"]) == ("hf-trainer", 4)
    assert run["checkpoints"][-1]["status"] == "complete"
    assert cli("verify", "--deep", folder).exit_code == 0


def test_a_sharded_save_without_its_optimizer_folder_is_incomplete(tmp_path, inspect_json):
    import shutil

    folder = hf_fsdp_run(tmp_path / "out")
    shutil.rmtree(folder / "checkpoint-4" / "optimizer_0")
    report = inspect_json(folder).json
    assert "CKD101" in codes(report)  # missing optimizer
    assert report["runs"][0]["resume"]["index"] == 2
