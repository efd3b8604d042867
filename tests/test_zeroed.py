"""CKD212: zeros where the previous checkpoint held data, in runs of real safetensors files.

A save whose end never reached the disk can keep its length and read back as zeros. safetensors
has no checksum, so the library itself hands the zeros back as weights: these tests ask it which
tensors a damaged file gives as zeros, and check that ckptdoctor names those and resumes from a
file the library gives whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


def saved_run(folder: Path, epochs: tuple[int, ...] = (1, 2, 3), zero_buffer: bool = False) -> Path:
    """A plain training loop's `model-N.safetensors`, one per epoch, each a little further trained.
    ``zero_buffer``: the model also keeps a buffer that is zero in every epoch, stored last."""
    folder.mkdir()
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 32))
    if zero_buffer:
        model.register_buffer("zz_mask", torch.zeros(2048))  # 8 KiB of zeros at the file's end, by design
    for epoch in epochs:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.01)
        safetensors_torch.save_file(model.state_dict(), str(folder / f"model-{epoch}.safetensors"))
    return folder


def zero_tail(path: Path, count: int) -> None:
    """What a full disk or a crash leaves: the file keeps its length, its last bytes are zeros."""
    size = path.stat().st_size
    with path.open("r+b") as data:
        data.seek(size - count)
        data.write(bytes(count))


def zeroed_by_library(path: Path) -> list[str]:
    """The tensors that safetensors itself loads as all zero."""
    return sorted(name for name, tensor in safetensors_torch.load_file(str(path)).items() if not tensor.any())


def findings(report: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["code"] == code]


def test_inspect_warns_of_a_zero_tail_where_the_previous_epoch_ends_in_data(tmp_path, inspect_json):
    folder = saved_run(tmp_path / "run")
    zero_tail(folder / "model-3.safetensors", 8192)
    assert zeroed_by_library(folder / "model-3.safetensors")  # it loads, zeros and all
    result = inspect_json(folder)
    (tail,) = findings(result.json, "CKD212")
    assert (tail["severity"], tail["index"]) == ("warning", 3) and tail["path"].endswith("model-3.safetensors")
    assert "last 4 KiB" in tail["message"] and "epoch 2" in tail["message"]
    assert any("verify --deep" in fix for fix in tail["fixes"])
    # a guess from 4 KiB warns but moves nothing: the resume point stays until the bytes are read
    assert result.json["runs"][0]["resume"]["index"] == 3 and result.exit_code == 0


def test_verify_deep_names_the_zeroed_tensors_and_resumes_from_whole_weights(tmp_path, cli):
    folder = saved_run(tmp_path / "run")
    zero_tail(folder / "model-3.safetensors", 8192 + 128)
    lost = zeroed_by_library(folder / "model-3.safetensors")
    result = cli("verify", "--deep", "--json", folder)
    (zeroed,) = findings(result.json, "CKD212")
    assert (zeroed["severity"], zeroed["index"]) == ("error", 3)
    named = sorted(zeroed["message"].split(": ", 1)[1].split(" are all zero")[0].replace("`", "").replace(" and", ",").split(", "))
    assert named == lost
    assert result.exit_code == 1
    (run,) = result.json["runs"]
    assert run["checkpoints"][-1]["status"] == "corrupt" and run["resume"]["index"] == 2
    (resume_path,) = run["resume"]["paths"]
    assert zeroed_by_library(Path(resume_path)) == []


def test_tensors_zero_in_every_checkpoint_are_quiet(tmp_path, inspect_json, cli):
    folder = saved_run(tmp_path / "run", zero_buffer=True)
    assert zeroed_by_library(folder / "model-3.safetensors") == ["zz_mask"]
    assert inspect_json(folder).json["findings"] == []
    deep = cli("verify", "--deep", "--json", folder)
    assert deep.json["findings"] == [] and deep.json["runs"][0]["resume"]["index"] == 3


def test_zeros_already_zero_in_the_previous_checkpoint_are_taken_as_meant(tmp_path, cli):
    # the rule compares with the previous checkpoint only: a tensor reset to zero fires once, on the
    # first checkpoint that holds the zeros, and the ones after it are quiet
    folder = saved_run(tmp_path / "run", epochs=(1, 2, 3, 4))
    for epoch in (3, 4):
        zero_tail(folder / f"model-{epoch}.safetensors", 8192)
    result = cli("verify", "--deep", "--json", folder)
    assert [f["index"] for f in findings(result.json, "CKD212")] == [3]
    assert result.json["runs"][0]["resume"]["index"] == 4


@pytest.mark.slow
def test_zeros_in_a_checkpoint_older_than_the_resume_point_are_dead_weight(tmp_path, cli):
    folder = saved_run(tmp_path / "run", epochs=(1, 2, 3, 4))
    zero_tail(folder / "model-2.safetensors", 8192)
    result = cli("verify", "--deep", "--json", folder)
    (zeroed,) = findings(result.json, "CKD212")
    assert (zeroed["severity"], zeroed["index"]) == ("warning", 2)
    assert any("prune" in fix for fix in zeroed["fixes"])
    assert result.json["runs"][0]["resume"]["index"] == 4 and result.exit_code == 0
