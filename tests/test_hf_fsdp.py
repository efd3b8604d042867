"""HF Trainer checkpoints saved under FSDP, written by a real ``transformers.Trainer`` with FSDP2
(``fully_shard``) in two processes on gloo, through accelerate (``accelerate/utils/fsdp_utils.py``:
``save_fsdp_model``, ``save_fsdp_optimizer``): with ``SHARDED_STATE_DICT`` the DCP folders
``pytorch_model_fsdp_0/`` and ``optimizer_0/`` (a ``.metadata`` and one ``__<rank>_0.distcp`` per
process, the same names in both), with ``FULL_STATE_DICT`` ``pytorch_model_fsdp.bin`` and
``optimizer.bin``. Broken runs are resumed by the Trainer itself, ``train(resume_from_checkpoint=...)``,
in two processes again (see ``frameworks.launched``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from frameworks import copy_run, hf_fsdp_run, hf_fsdp_train
from reports import codes

pytestmark = pytest.mark.slow  # real framework runs


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """checkpoint-2 and checkpoint-4, each with ``pytorch_model_fsdp_0/`` and ``optimizer_0/``."""
    return hf_fsdp_run(tmp_path_factory.mktemp("fsdp") / "out")


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hf_fsdp_run(tmp_path_factory.mktemp("fsdp") / "full", sharded=False)


@pytest.mark.parametrize("saved", ["sharded", "full"])
def test_an_fsdp_checkpoint_has_its_model_and_optimizer(saved, request, inspect_json, cli):
    folder = request.getfixturevalue(saved)
    newest = folder / "checkpoint-4"
    if saved == "sharded":
        assert sorted(p.name for p in (newest / "optimizer_0").iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    else:
        assert {"pytorch_model_fsdp.bin", "optimizer.bin"} <= {p.name for p in newest.iterdir()}
    result = inspect_json(folder)
    assert result.exit_code == 0 and result.json["findings"] == []
    (run,) = result.json["runs"]
    assert (run["layout"], run["resume"]["index"]) == ("hf-trainer", 4)
    assert [c["status"] for c in run["checkpoints"]] == ["complete", "complete"]
    assert cli("verify", "--deep", folder).exit_code == 0


def _cut(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


@pytest.mark.parametrize(
    ("broken", "how", "code", "status"),
    [
        ("pytorch_model_fsdp_0/__1_0.distcp", _cut, "CKD203", "partial"),  # rank 1's weights cut short: a copy, a full disk
        ("optimizer_0/__0_0.distcp", Path.unlink, "CKD105", "incomplete"),  # rank 0's optimizer shard lost (a node-local disk)
    ],
)
def test_a_broken_shard_spoils_the_newest_and_the_trainers_auto_resume_fails(
    sharded, tmp_path, cli, inspect_json, broken, how, code, status
):
    folder = copy_run(sharded, tmp_path / "out")
    how(folder / "checkpoint-4" / broken)
    report = inspect_json(folder).json
    (run,) = report["runs"]
    assert [c["status"] for c in run["checkpoints"]] == ["complete", status]
    assert {(code, 4), ("CKD114", 4)} <= set(codes(report, index=True))
    assert run["resume"]["index"] == 2
    # what the Trainer does: resume_from_checkpoint=True takes checkpoint-4 and dcp.load fails on
    # it; the checkpoint ckptdoctor names resumes
    named = cli("inspect", "--resume-path", folder).stdout.strip()
    assert named == str(folder / "checkpoint-2")
    resumed = hf_fsdp_train(folder, 6, True, named)
    assert len(resumed.failed) == 1 and resumed.failed[0].startswith("CheckpointException"), resumed.output[-3000:]
    assert resumed.count == 6


def test_a_sharded_save_without_its_optimizer_folder_is_incomplete(sharded, tmp_path, inspect_json):
    folder = copy_run(sharded, tmp_path / "out")
    shutil.rmtree(folder / "checkpoint-4" / "optimizer_0")
    report = inspect_json(folder).json
    assert ("CKD101", 4) in codes(report, index=True)  # missing optimizer
    assert report["runs"][0]["resume"]["index"] == 2
