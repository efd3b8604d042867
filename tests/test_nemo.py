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

import shutil
import tarfile
from pathlib import Path

import pytest
from frameworks import lightning_deepspeed_run, nemo_run
from reports import codes


def statuses(report: dict) -> dict[int, str]:
    (run,) = report["runs"]
    return {c["index"]: c["status"] for c in run["checkpoints"]}


def nemo_archive(path: Path, members: tuple[str, ...] = ("model_config.yaml", "model_weights.ckpt"), mode: str = "w:") -> Path:
    """``save_to``: the config and the state dict in a folder, tarred with ``arcname="."``
    (``_make_nemo_file_from_folder``; ``mode="w:gz"`` as NeMo wrote it before 1.7, until
    c3101cc250 "Remove compression from .nemo files")."""
    torch = pytest.importorskip("torch")
    folder = path.parent / f"{path.stem}-src"
    folder.mkdir(parents=True)
    if "model_config.yaml" in members:
        (folder / "model_config.yaml").write_text("target: nemo.collections.nlp.models.GPTModel\n")
    if "model_weights.ckpt" in members:
        torch.save({"layer.weight": torch.ones(2, 4)}, folder / "model_weights.ckpt")
    with tarfile.open(path, mode) as archive:
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


# --- issue 30, item 10: gzipped `.nemo` archives, and exp_manager's `*end`/`*last` order ----------


def nemo_tar_open(path: Path) -> tarfile.TarFile:
    """How NeMo opens a ``.nemo`` (``save_restore_connector.py``, ``SaveRestoreConnector._tar_open``):
    an uncompressed tar, else (``tarfile.ReadError``) a gzipped one."""
    try:
        tarfile.open(path, "r:").close()
        header = "r:"
    except tarfile.ReadError:
        header = "r:gz"
    return tarfile.open(path, header)


def test_a_gzipped_nemo_archive_is_read_as_nemo_reads_it(tmp_path, cli, inspect_json):
    """It was CKD205 (gzip data, not the tar `.nemo` promises) and a corrupt checkpoint."""
    torch = pytest.importorskip("torch")
    nemo = nemo_archive(tmp_path / "out" / "megatron_gpt.nemo", mode="w:gz")
    with pytest.raises(tarfile.ReadError):
        tarfile.open(nemo, "r:").close()
    with nemo_tar_open(nemo) as archive:  # NeMo's own reading: its weights load
        weights = archive.extractfile("./model_weights.ckpt")
        assert weights is not None and torch.load(weights, weights_only=True)["layer.weight"].shape == (2, 4)
    result = inspect_json(nemo.parent)
    assert result.exit_code == 0 and result.json["findings"] == []
    (run,) = result.json["runs"]
    assert (run["layout"], statuses(result.json)) == ("nemo", {0: "complete"})
    assert cli("verify", "--deep", nemo.parent).exit_code == 0


def test_a_gzipped_nemo_archive_cut_damaged_or_without_its_weights_is_found(tmp_path, cli, inspect_json):
    whole = nemo_archive(tmp_path / "whole" / "megatron_gpt.nemo", mode="w:gz").read_bytes()
    cut = tmp_path / "cut" / "megatron_gpt.nemo"
    cut.parent.mkdir()
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises((tarfile.ReadError, EOFError)), nemo_tar_open(cut) as archive:  # what NeMo meets unpacking it
        archive.extractall(tmp_path / "unpacked", filter="data")
    assert "CKD203" in codes(inspect_json(cut).json)
    assert statuses(inspect_json(cut.parent).json) == {0: "partial"}

    damaged = tmp_path / "damaged" / "megatron_gpt.nemo"
    damaged.parent.mkdir()
    data = bytearray(whole)
    data[len(data) // 2 : len(data) // 2 + 40] = b"\xff" * 40
    damaged.write_bytes(bytes(data))
    result = cli("verify", damaged.parent)
    assert result.exit_code == 1 and "megatron_gpt.nemo" in result.stdout

    nemo = nemo_archive(tmp_path / "config" / "megatron_gpt.nemo", members=("model_config.yaml",), mode="w:gz")
    result = cli("verify", "--json", nemo.parent)
    assert result.exit_code == 1 and statuses(result.json) == {0: "incomplete"} and "model_weights.ckpt" in result.stdout


def resume_how(report: dict) -> str:
    (run,) = report["runs"]
    return run["resume"]["how"]


def test_the_resume_names_exp_managers_way_and_what_resume_if_exists_takes_instead(tmp_path, inspect_json):
    """``check_resume`` (``nemo/utils/exp_manager.py``) with ``resume_if_exists`` takes the one
    finished ``*last.ckpt`` and sets it over any ``resume_from_checkpoint``: a checkpoint of one's
    choice is loaded with ``resume_if_exists=False``."""
    folder = nemo_run(tmp_path / "checkpoints")
    newest = folder / "megatron_gpt--val_loss=0.4000-epoch=2.ckpt"
    how = resume_how(inspect_json(folder).json)
    assert how.startswith(f'set `exp_manager.resume_from_checkpoint="{newest}"` with `resume_if_exists=False`')
    assert "exp_manager loads megatron_gpt--val_loss=0.4000-epoch=2-last.ckpt instead" in how
    assert f'or pass `ckpt_path="{newest}"` to `trainer.fit()`' in how


def test_an_end_save_stops_exp_managers_resume_and_the_resume_point_stays_the_newest_save(tmp_path, inspect_json):
    """NeMo before 1.0 saved ``<name>--end.ckpt`` when training ended
    (``NeMoModelCheckpoint.on_train_end``: ``self._save_model(prefix + "end.ckpt")``, prefix
    ``name + "--"``). ``check_resume`` looks for finished ``*end.ckpt`` before ``*last.ckpt``:
    beside one it raises ("the last training run has already completed"), and with
    ``resume_past_end=True`` it sets no checkpoint at all (it sets one only for several
    model-parallel end files), so the ``-last`` copy is never loaded."""
    folder = nemo_run(tmp_path / "checkpoints")
    newest = folder / "megatron_gpt--val_loss=0.4000-epoch=2.ckpt"
    shutil.copyfile(newest, folder / "megatron_gpt--end.ckpt")
    report = inspect_json(folder).json
    assert report["findings"] == []
    (run,) = report["runs"]
    assert (run["resume"]["index"], run["resume"]["path"]) == (2, str(newest))
    assert "megatron_gpt--end.ckpt" in [Path(f["path"]).name for f in run["loose_files"]]
    assert "megatron_gpt--end.ckpt stops the resume" in resume_how(report)

    # an unfinished end save is skipped by exp_manager, which then raises: none finished
    (folder / "megatron_gpt--end-unfinished").write_bytes(b"")
    assert "megatron_gpt--end.ckpt" not in resume_how(inspect_json(folder).json)


def test_a_cut_last_copy_is_what_exp_manager_loads_unless_an_end_save_or_another_last_is_there(tmp_path, inspect_json):
    folder = nemo_run(tmp_path / "checkpoints")
    last = folder / "megatron_gpt--val_loss=0.4000-epoch=2-last.ckpt"
    last.write_bytes(last.read_bytes()[:2000])
    report = inspect_json(folder).json
    assert {(f["code"], f["path"]) for f in report["findings"]} == {("CKD203", str(last)), ("CKD114", str(last))}
    assert report["runs"][0]["resume"]["index"] == 2
    # with its `-unfinished` marker beside it, exp_manager skips it (and raises: no finished last)
    marker = folder / "megatron_gpt--val_loss=0.4000-epoch=2-last-unfinished"
    marker.write_bytes(b"")
    assert "CKD114" not in codes(inspect_json(folder).json)
    marker.unlink()
    # two `*last.ckpt`: exp_manager raises ("Multiple checkpoints ... that matches *last.ckpt")
    shutil.copyfile(folder / "megatron_gpt--val_loss=0.3000-epoch=1.ckpt", folder / "megatron_gpt--val_loss=0.3000-epoch=1-last.ckpt")
    report = inspect_json(folder).json
    assert "CKD114" not in codes(report) and "finds 2 `*last.ckpt` and raises" in resume_how(report)


def test_every_cut_of_a_gzipped_nemo_archive_is_flagged_by_inspect_and_verify(tmp_path):
    from ckptdoctor.readers.files import read_header, verify_sample
    from ckptdoctor.readers.sample import BytesSample

    whole = nemo_archive(tmp_path / "out" / "megatron_gpt.nemo", mode="w:gz").read_bytes()
    assert read_header(BytesSample(whole), "megatron_gpt.nemo").issues == ()
    for cut in range(1, len(whole), 7):
        for read in (read_header, verify_sample):
            report = read(BytesSample(whole[:cut]), "megatron_gpt.nemo")
            assert report.problems, (read.__name__, cut)
