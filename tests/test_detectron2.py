"""Detectron2 ``OUTPUT_DIR``s, written and resumed the way its own code does.

Detectron2 is not on PyPI (it installs from git or source only), so ``frameworks.Detectron2Trainer``
does what facebookresearch/detectron2@02b5c4e and facebookresearch/fvcore@3378afe do:
``fvcore/common/checkpoint.py`` (``Checkpointer.save``, ``tag_last_checkpoint``,
``get_checkpoint_file``, ``resume_or_load``, ``PeriodicCheckpointer.step``),
``detectron2/engine/train_loop.py`` (``TrainerBase``/``SimpleTrainer.state_dict``),
``detectron2/engine/defaults.py`` (``DefaultTrainer.state_dict``, ``resume_or_load``) and
``detectron2/engine/hooks.py`` (``BestCheckpointer``, ``LRScheduler.state_dict``).
"""

from __future__ import annotations

import os
import time
import zipfile
from pathlib import Path

import pytest
from frameworks import Detectron2Trainer
from reports import codes

from ckptdoctor.layouts.pointers import unfollowable
from ckptdoctor.layouts.registry import layout_named
from ckptdoctor.pipelines.scan import inspect, scan
from ckptdoctor.readers import _skim
from ckptdoctor.readers.unpickler import top_keys, walk

torch = pytest.importorskip("torch")


def trained(output: Path, **settings: object) -> Path:
    """12 iterations saved every 4: model_0000003, _0000007, _0000011 and model_final (iteration 11)."""
    Detectron2Trainer(output, **settings).train()  # type: ignore[arg-type]
    return output


def aged(folder: Path) -> Path:
    old = time.time() - 86400
    for path in folder.iterdir():
        os.utime(path, (old, old))
    return folder


def test_a_healthy_output_dir_is_detectron2s_indexed_by_0_based_iteration(tmp_path, inspect_json, cli):
    output = trained(tmp_path / "output")
    assert (output / "last_checkpoint").read_text() == "model_final.pth"  # the name alone
    result = inspect_json(output)
    assert result.exit_code == 0 and result.json["findings"] == []
    (run,) = result.json["runs"]
    assert (run["layout"], run["unit"], run["resume"]["index"]) == ("detectron2", "iteration", 11)
    assert [c["index"] for c in run["checkpoints"]] == [3, 7, 11]
    # model_final.pth holds iteration 11 too: a whole save of the same checkpoint
    assert sorted(Path(f["path"]).name for f in run["checkpoints"][-1]["files"]) == ["model_0000011.pth", "model_final.pth"]
    deep = cli("verify", "--deep", "--json", output)
    assert deep.exit_code == 0 and deep.json["findings"] == []


def test_the_optimizer_two_levels_down_is_seen_by_inspect_and_verify(tmp_path, cli):
    output = trained(tmp_path / "output")
    for command in ("inspect", "verify"):
        (run,) = cli(command, "--json", output).json["runs"]
        roles = {role for c in run["checkpoints"] for f in c["files"] for role in f["roles"]}
        assert roles == {"model", "optimizer", "scheduler"}, command
    data = torch.load(output / "model_0000007.pth")  # fvcore's load: torch's default, weights_only
    assert set(data) == {"model", "trainer", "iteration"} and "optimizer" in data["trainer"]["_trainer"]


def test_the_skim_places_nested_role_keys_or_gives_up(tmp_path):
    """inspect's skim reads ``trainer._trainer.optimizer`` where verify's walk does, and where the
    stack could place a dict two ways (a one-item dict, or an empty one before it) it says nothing."""
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    cases = [
        (
            {"model": model.state_dict(), "trainer": {"iteration": 3, "_trainer": {"iteration": 3, "optimizer": optimizer.state_dict()}}},
            True,
        ),
        (
            {
                "model": model.state_dict(),
                "trainer": {"iteration": 3, "hooks": {"LRScheduler": {"last_epoch": 3}}, "_trainer": {"a": 1, "optimizer": {"x": 1}}},
            },
            True,
        ),
        ({"model": model.state_dict(), "trainer": {"_trainer": {"optimizer": optimizer.state_dict()}}}, False),  # one item each
        ({"trainer": {}, "_trainer": {"optimizer": {"a": 1, "b": 2}}, "x": 1}, False),
        ({"model": {}, "trainer": {"iteration": 3, "_trainer": {"a": 1, "optimizer": {"x": 1}}}}, False),  # {} before it
    ]
    for case, read in cases:
        path = tmp_path / "case.pth"
        torch.save(case, path)
        with zipfile.ZipFile(path) as archive:
            data = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
        skimmed = _skim.top_level(data)
        walked = top_keys(walk(data).root)
        if read:
            assert skimmed is not None and sorted(skimmed.keys) == sorted(walked), case
        else:
            assert skimmed is None, case


def test_detectron2_resumes_from_the_resume_point(tmp_path):
    output = trained(tmp_path / "output", max_iter=16)
    (run,) = scan([str(output)]).runs
    assert run.resume is not None and run.resume.index == 15
    assert "train_net.py --resume" in run.resume_how and "iteration 16" in run.resume_how
    resumed = Detectron2Trainer.resumed(output, max_iter=16)
    assert resumed.start_iter == run.resume.index + 1


def test_a_kill_mid_save_falls_back_to_what_last_checkpoint_names(tmp_path, inspect_json):
    """Killed while writing model_0000011.pth: tag_last_checkpoint runs after the save."""
    output = trained(tmp_path / "output", max_iter=12)
    (output / "model_final.pth").unlink()
    cut = output / "model_0000011.pth"
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    (output / "last_checkpoint").write_text("model_0000007.pth")
    report = inspect_json(output).json
    (run,) = report["runs"]
    assert [c["status"] for c in run["checkpoints"]] == ["complete", "complete", "partial"]
    assert run["resume"]["index"] == 7 and not {"CKD113", "CKD114"} & set(codes(report))
    assert Detectron2Trainer.resumed(output).start_iter == 8


def test_a_cut_model_final_stands_beside_the_run(tmp_path, inspect_json):
    output = trained(tmp_path / "output", max_iter=14)  # model_final at iteration 13, after model_0000011
    final = output / "model_final.pth"
    final.write_bytes(final.read_bytes()[:500])
    (output / "last_checkpoint").write_text("model_0000011.pth")
    report = inspect_json(output).json
    (run,) = report["runs"]
    assert [c["index"] for c in run["checkpoints"]] == [3, 7, 11] and run["resume"]["index"] == 11
    assert "model_final.pth" in {Path(f["path"]).name for f in run["loose_files"]}
    assert any(f["code"] == "CKD203" and f["path"].endswith("model_final.pth") for f in report["findings"])


def test_last_checkpoint_naming_a_cut_file_is_repointed_by_name(tmp_path, cli, inspect_json):
    output = trained(tmp_path / "output", max_iter=12)
    (output / "model_final.pth").unlink()
    cut = output / "model_0000011.pth"
    cut.write_bytes(cut.read_bytes()[:-200])
    (output / "last_checkpoint").write_text("model_0000011.pth")
    report = inspect_json(output).json
    assert {("CKD113", 11), ("CKD114", 11)} <= set(codes(report, index=True))
    with pytest.raises(RuntimeError):
        Detectron2Trainer.resumed(output)
    aged(output)
    assert cli("repair", "--yes", output).exit_code == 0
    assert (output / "last_checkpoint").read_text() == "model_0000007.pth"  # fvcore's format: the name
    assert Detectron2Trainer.resumed(output).start_iter == 8


def test_a_checkpoint_without_the_trainers_optimizer_is_incomplete(tmp_path, inspect_json):
    output = trained(tmp_path / "output", max_iter=12)
    for name in ("model_0000011.pth", "model_final.pth"):
        state = torch.load(output / name)
        del state["trainer"]["_trainer"]["optimizer"]
        torch.save(state, output / name)
    report = inspect_json(output).json
    assert ("CKD101", 11) in codes(report, index=True) and report["runs"][0]["resume"]["index"] == 7
    with pytest.raises(KeyError, match="optimizer"):  # SimpleTrainer.load_state_dict
        Detectron2Trainer.resumed(output)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, (None, "missing")),  # --resume loads MODEL.WEIGHTS alone and starts at iteration 0
        ("model_0000003.pth", (3, None)),
        ("model_0000099.pth", (None, "not there")),
        ("../other/model_0000011.pth", (None, "not there")),
        ("model_final.pth", (11, None)),
    ],
)
def test_last_checkpoint_names_a_file_of_the_run(tmp_path, text, expected):
    output = trained(tmp_path / "output", max_iter=12)
    if text is None:
        (output / "last_checkpoint").unlink()
    else:
        (output / "last_checkpoint").write_text(text)
    report, found = inspect([str(output)])
    (run,) = found.runs
    (pointer,) = layout_named(run.layout).pointers(run)
    assert (pointer.number, unfollowable(run, pointer)) == expected
    assert ("CKD113" in {f.code for f in report.findings}) == (expected[1] is not None)


def test_repair_writes_a_missing_last_checkpoint_and_detectron2_resumes(tmp_path, cli):
    output = trained(tmp_path / "output", max_iter=12)
    (output / "last_checkpoint").unlink()
    assert Detectron2Trainer.resumed(output).start_iter == 0  # starts over
    aged(output)
    assert cli("repair", "--yes", output).exit_code == 0
    assert (output / "last_checkpoint").read_text() in {"model_0000011.pth", "model_final.pth"}
    assert Detectron2Trainer.resumed(output).start_iter == 12


def test_model_best_is_indexed_by_its_iteration_and_may_be_the_pointer(tmp_path, inspect_json):
    output = trained(tmp_path / "output", max_iter=10, period=4, best_every=5)  # best saved at iteration 4 (AP 14)
    report = inspect_json(output).json
    (run,) = report["runs"]
    assert [c["index"] for c in run["checkpoints"]] == [3, 4, 7, 9]
    assert report["findings"] == []


def test_prune_and_keep_best_by_metrics_json(tmp_path, cli):
    output = trained(tmp_path / "output", max_iter=16, period=2, best_every=4)
    (run,) = scan([str(output)]).runs
    values = layout_named("detectron2").metric_values(run, str(output), "bbox/AP", lambda p: Path(p).read_bytes())
    assert values == {3: 13.0, 7: 10.0, 11: 14.0, 15: 11.0}
    aged(output)
    plan = cli("prune", "--keep-last", "1", "--keep-best", "1", "--metric", "bbox/AP", "--mode", "max", "--yes", "--json", output)
    assert plan.exit_code == 0
    assert sorted(p.name for p in output.glob("model_0*.pth")) == ["model_0000011.pth", "model_0000015.pth"]
    assert Detectron2Trainer.resumed(output, max_iter=16).start_iter == 16


def test_a_hand_made_loop_with_detectron2_names_is_not_detectron2(tmp_path, inspect_json):
    folder = tmp_path / "loop"
    folder.mkdir()
    for iteration in (99, 199):
        torch.save({"w": torch.zeros(2)}, folder / f"model_{iteration:07d}.pth")
    assert inspect_json(folder).json["runs"][0]["layout"] == "torch"


def test_an_mmengine_pointer_beside_detectron2_names_is_not_mmengine(tmp_path, inspect_json):
    output = trained(tmp_path / "output")
    (output / "config.yaml").unlink()
    (output / "metrics.json").unlink()
    assert inspect_json(output).json["runs"][0]["layout"] == "detectron2"  # last_checkpoint and model_final


def test_a_save_killed_before_last_checkpoint_moved_is_the_resume_point_and_resume_going_back_is_ckd116(tmp_path, cli, inspect_json):
    """``Checkpointer.save`` writes the file, then ``tag_last_checkpoint``: killed between the two,
    ``--resume`` loads the save before and trains its iterations again (CKD116, a warning: nothing
    fails); ``repair`` writes the newer name into ``last_checkpoint``."""
    output = Detectron2Trainer(tmp_path / "output", max_iter=100).train(until=16).output
    (output / "last_checkpoint").write_text("model_0000011.pth")  # what the tag said before model_0000015 was saved
    report = inspect_json(output).json
    assert report["runs"][0]["resume"]["index"] == 15
    (behind,) = [f for f in report["findings"] if f["code"] == "CKD116"]
    assert behind["severity"] == "warning" and behind["path"].endswith("last_checkpoint") and "model_0000011.pth" in behind["message"]
    assert not [f for f in report["findings"] if f["code"] in ("CKD113", "CKD114")]
    assert Detectron2Trainer.resumed(output, max_iter=100).start_iter == 12  # --resume goes back to iteration 11
    aged(output)
    assert cli("repair", "--yes", output).exit_code == 0
    assert (output / "last_checkpoint").read_text() == "model_0000015.pth"
    assert Detectron2Trainer.resumed(output, max_iter=100).start_iter == 16
    assert inspect_json(output).json["findings"] == []


def test_an_empty_last_checkpoint_is_ckd113_where_resume_loads_the_folder_and_repair_writes_it(tmp_path, cli, inspect_json):
    """Killed as ``tag_last_checkpoint`` rewrote it: ``get_checkpoint_file`` joins '' with
    ``OUTPUT_DIR`` and ``--resume`` fails loading the folder itself."""
    output = trained(tmp_path / "output")
    (output / "last_checkpoint").write_text("")
    with pytest.raises(IsADirectoryError):
        Detectron2Trainer.resumed(output)
    stale = [f for f in inspect_json(output).json["findings"] if f["code"] == "CKD113"]
    assert len(stale) == 1 and stale[0]["severity"] == "error" and "is empty" in stale[0]["message"]
    aged(output)
    assert cli("repair", "--yes", output).exit_code == 0
    assert Detectron2Trainer.resumed(output).start_iter == 12
    assert "CKD113" not in {f["code"] for f in inspect_json(output).json["findings"]}
