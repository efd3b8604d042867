"""NeMo: ``exp_manager``'s Lightning checkpoints and ``.nemo`` archives.

Written from source (NeMo downgrades lightning here and is not installed):
``nemo/utils/exp_manager.py`` (``configure_checkpointing``: ``<name>--val_loss=…-epoch=N.ckpt``),
``nemo/utils/callbacks/nemo_model_checkpoint.py`` (``-last`` copies,
``format_checkpoint_unfinished_marker_path``, ``_backup_existing_nemo_ckpt``) and
``nemo/core/connectors/save_restore_connector.py`` (``_make_nemo_file_from_folder``: an
uncompressed tar of ``./model_config.yaml`` and ``./model_weights.ckpt``). Builders in
``tests/frameworks.py``.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from frameworks import lightning_deepspeed_run, nemo_run


def codes(report: dict) -> set[str]:
    return {f["code"] for f in report["findings"]}


def statuses(report: dict) -> dict[int, str]:
    (run,) = report["runs"]
    return {c["index"]: c["status"] for c in run["checkpoints"]}


def nemo_archive(path: Path, members: tuple[str, ...] = ("model_config.yaml", "model_weights.ckpt")) -> Path:
    """``save_to``: the config and the state dict in a folder, tarred with ``arcname="."``."""
    torch = pytest.importorskip("torch")
    folder = path.parent / f"{path.stem}-src"
    folder.mkdir(parents=True)
    if "model_config.yaml" in members:
        (folder / "model_config.yaml").write_text("target: nemo.collections.nlp.models.GPTModel\n")
    if "model_weights.ckpt" in members:
        torch.save({"layer.weight": torch.ones(2, 4)}, folder / "model_weights.ckpt")
    with tarfile.open(path, "w:") as archive:
        archive.add(folder, arcname=".")
    return path


def test_nemo_names_are_lightning_checkpoints_by_epoch_with_the_last_copy_a_pointer(tmp_path, inspect_json, cli):
    folder = nemo_run(tmp_path / "checkpoints")
    result = inspect_json(folder)
    report = result.json
    assert result.exit_code == 0 and report["findings"] == []
    (run,) = report["runs"]
    assert (run["layout"], run["unit"]) == ("lightning", "epoch")
    assert statuses(report) == {0: "complete", 1: "complete", 2: "complete"}
    assert [Path(f["path"]).name for f in run["loose_files"]] == ["megatron_gpt--val_loss=0.4000-epoch=2-last.ckpt"]
    assert run["resume"]["path"].endswith("megatron_gpt--val_loss=0.4000-epoch=2.ckpt")
    assert cli("verify", "--deep", folder).exit_code == 0


def test_a_nemo_checkpoint_beside_its_unfinished_marker_is_partial(tmp_path, inspect_json):
    folder = nemo_run(tmp_path / "checkpoints")
    (folder / "megatron_gpt--val_loss=0.4000-epoch=2-unfinished").write_bytes(b"")
    report = inspect_json(folder).json
    assert statuses(report) == {0: "complete", 1: "complete", 2: "partial"}
    assert report["runs"][0]["resume"]["index"] == 1


def test_an_unfinished_marker_of_a_ckpt_folder_makes_it_partial(tmp_path, inspect_json):
    folder = lightning_deepspeed_run(tmp_path / "checkpoints", last=None)
    (folder / "epoch=1-step=4-unfinished").write_bytes(b"")
    report = inspect_json(folder).json
    assert statuses(report) == {2: "complete", 4: "partial"}


def test_a_marker_naming_nothing_is_left_alone(tmp_path, inspect_json):
    folder = nemo_run(tmp_path / "checkpoints")
    (folder / "megatron_gpt--val_loss=0.9000-epoch=9-unfinished").write_bytes(b"")
    assert set(statuses(inspect_json(folder).json).values()) == {"complete"}


def test_keep_best_reads_the_metric_in_nemo_names(tmp_path, cli):
    folder = nemo_run(tmp_path / "checkpoints", losses=(0.5, 0.3, 0.4, 0.6))
    assert (
        cli(
            "prune", "--keep-last", "1", "--keep-best", "1", "--metric", "val_loss", "--mode", "min", "--min-age", "0", "--yes", folder
        ).exit_code
        == 0
    )
    left = sorted(p.name for p in folder.iterdir() if p.name.endswith(".ckpt"))
    assert "megatron_gpt--val_loss=0.3000-epoch=1.ckpt" in left and "megatron_gpt--val_loss=0.5000-epoch=0.ckpt" not in left


def test_a_whole_nemo_archive_is_clean_and_restored_not_resumed(tmp_path, inspect_json, cli):
    nemo = nemo_archive(tmp_path / "out" / "megatron_gpt.nemo")
    result = inspect_json(nemo)
    assert result.exit_code == 0 and result.json["findings"] == []
    assert result.json["runs"][0]["layout"] == "nemo"
    assert cli("verify", "--deep", nemo).exit_code == 0


def test_a_cut_nemo_archive_is_truncated(tmp_path, cli, inspect_json):
    nemo = nemo_archive(tmp_path / "out" / "megatron_gpt.nemo")
    nemo.write_bytes(nemo.read_bytes()[:3000])
    assert "CKD203" in codes(inspect_json(nemo).json)
    result = cli("verify", nemo)
    assert result.exit_code == 1 and "CKD203" in result.stdout


def test_damaged_weights_inside_a_nemo_archive_are_found_by_verify(tmp_path, cli):
    nemo = nemo_archive(tmp_path / "out" / "megatron_gpt.nemo")
    data = bytearray(nemo.read_bytes())
    start = data.find(b"PK\x03\x04")
    data[start + 200 : start + 260] = b"\xff" * 60
    nemo.write_bytes(bytes(data))
    result = cli("verify", nemo)
    assert result.exit_code == 1 and "model_weights.ckpt" in result.stdout


def test_a_nemo_archive_without_its_weights_is_incomplete(tmp_path, cli):
    nemo = nemo_archive(tmp_path / "out" / "megatron_gpt.nemo", members=("model_config.yaml",))
    result = cli("verify", "--json", nemo.parent)
    assert result.exit_code == 1
    assert result.json["runs"][0]["checkpoints"][0]["status"] == "incomplete"
    assert "model_weights.ckpt" in result.stdout


def test_a_cut_nemo_beside_the_lightning_checkpoints_is_found_and_the_run_stays_lightnings(tmp_path, cli, inspect_json):
    folder = nemo_run(tmp_path / "checkpoints")
    nemo = nemo_archive(folder / "megatron_gpt.nemo")
    report = inspect_json(folder).json
    assert [run["layout"] for run in report["runs"]] == ["lightning"] and report["findings"] == []
    nemo.write_bytes(nemo.read_bytes()[:3000])
    result = cli("verify", folder)
    assert result.exit_code == 1 and "megatron_gpt.nemo" in result.stdout
    assert statuses(inspect_json(folder).json) == {0: "complete", 1: "complete", 2: "complete"}


def test_a_torch_zip_named_nemo_is_not_a_nemo_archive(tmp_path, inspect_json):
    torch = pytest.importorskip("torch")
    path = tmp_path / "out" / "model.nemo"
    path.parent.mkdir()
    torch.save({"w": torch.ones(2)}, path)
    assert "CKD205" in codes(inspect_json(path).json)
