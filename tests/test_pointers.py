"""The pointer state machine: what a framework's pointer file says (DeepSpeed's ``latest``,
Megatron's tracker, Lightning's ``last.ckpt`` symlink, HF's ``best_model_checkpoint``), which
checkpoint of the run it names, and whether the framework can follow it there.

Each case reads a real run through ``scan`` and asks the layout for its ``pointers`` and the core
for ``unfollowable``; the finding ``inspect`` reports must agree with the state.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from frameworks import FairseqTrainer, composer_run, copy_run, deepspeed_run, megatron_release, megatron_run

from ckptdoctor.layouts.pointers import unfollowable
from ckptdoctor.layouts.registry import NAMED_FILES, layout_named
from ckptdoctor.model import Problem
from ckptdoctor.pipelines.scan import inspect
from ckptdoctor.readers.files import BytesSample, read_header
from ckptdoctor.testing import write_hf_checkpoints

State = tuple[int | None, str | None]
"""A pointer's (checkpoint index it names, why the framework cannot follow it or None)."""


def states(folder: Path) -> tuple[list[State], list[tuple[str, int | None]]]:
    """The states of the one run's pointers in ``folder``, and the (code, index) of its findings."""
    report, found = inspect([str(folder)])
    (run,) = found.runs
    pointers = layout_named(run.layout).pointers(run)
    return [(p.number, unfollowable(run, p)) for p in pointers], [(f.code, f.index) for f in report.findings]


# --- reading a pointer file -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["latest", "latest_universal", "latest_checkpointed_iteration.txt", "last_checkpoint"])
@pytest.mark.parametrize(
    ("data", "named"),
    [(b"global_step200", "global_step200"), (b"  global_step200\n", "global_step200"), (b"release", "release")],
)
def test_a_pointer_file_names_what_it_holds_stripped_of_white_space(name, data, named):
    report = read_header(BytesSample(data), name, NAMED_FILES)  # the layouts' table: read as the pipelines read it
    assert report.problems == frozenset()
    assert report.fact("points_to") == named


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", Problem.EMPTY),
        (b"global_step100\nglobal_step200", Problem.MALFORMED),  # two names: which one?
        (b"\xff\xfe\x00", Problem.MALFORMED),  # not text
        (b"g" * 5000, Problem.MALFORMED),  # far beyond any tag a framework writes
    ],
)
def test_a_pointer_file_that_names_no_one_checkpoint_is_damaged_and_names_nothing(data, problem):
    report = read_header(BytesSample(data), "latest", NAMED_FILES)
    assert problem in report.problems
    assert report.fact("points_to") is None


# --- DeepSpeed: `latest` --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("latest", "expected"),
    [
        ("global_step200", (200, None)),  # the newest complete tag
        ("global_step100\n", (100, None)),  # an older complete one, as `echo` writes it
        ("global_step300", (300, "not there")),  # a tag that was never saved, or deleted
        ("../other/global_step100", (None, "not there")),  # outside the run
        ("/elsewhere/global_step100", (None, "not there")),
        ("global_step200/../global_step100", (None, "not there")),  # not a tag, whatever it resolves to
        ("latest", (None, "not there")),  # naming itself
    ],
)
def test_deepspeed_latest_names_a_tag_of_the_run_or_nothing(tmp_path, latest, expected):
    folder = deepspeed_run(tmp_path / "ds")
    (folder / "latest").write_text(latest)
    found, codes = states(folder)
    assert found == [expected]
    assert (("CKD113", expected[0]) in codes) == (expected[1] is not None), codes


@pytest.mark.parametrize(
    ("damage", "state"),
    [("zero_pp_rank_1_mp_rank_00_optim_states.pt", "incomplete"), ("mp_rank_00_model_states.pt", "partial")],
)
def test_deepspeed_latest_naming_a_damaged_tag_says_how_and_the_resume_falls_back(tmp_path, damage, state):
    folder = deepspeed_run(tmp_path / "ds")
    target = folder / "global_step200" / damage
    if state == "incomplete":
        target.unlink()  # a rank that never wrote its partition
    else:
        target.write_bytes(b"")  # a rank killed mid-write
    found, codes = states(folder)
    assert found == [(200, state)]
    assert ("CKD113", 200) in codes and ("CKD114", 200) in codes  # DeepSpeed would load it by itself
    (_, result) = inspect([str(folder)])
    assert result.runs[0].resume.index == 100


def test_deepspeed_without_latest_is_a_missing_pointer(tmp_path):
    folder = deepspeed_run(tmp_path / "ds", latest=False)
    assert states(folder) == ([(None, "missing")], [("CKD113", None)])


@pytest.mark.parametrize("text", ["", "global_step100\nglobal_step200"])
def test_deepspeed_latest_that_cannot_be_read_is_its_own_finding_not_a_pointer(tmp_path, text):
    folder = deepspeed_run(tmp_path / "ds")
    (folder / "latest").write_text(text)
    found, codes = states(folder)
    assert found == []
    assert codes == [("CKD201" if not text else "CKD207", None)]


def test_deepspeed_latest_linking_to_itself_dangles(tmp_path):
    folder = deepspeed_run(tmp_path / "ds")
    (folder / "latest").unlink()
    os.symlink("latest", folder / "latest")  # a loop: opening it fails with ELOOP
    found, codes = states(folder)
    assert found == [] and codes == [("CKD113", None)]


# --- Megatron: the tracker ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tracker", "expected", "code"),
    [
        (None, [(200, None)], None),
        (100, [(100, None)], ("CKD106", 200)),  # followable; 200, newer than it, never finished
        (400, [(400, "not there")], ("CKD113", 400)),
        ("iter_0000200", [(None, "not there")], ("CKD113", None)),  # the folder's name, not the number
    ],
)
def test_megatron_tracker_names_an_iteration_by_its_number(tmp_path, tracker, expected, code):
    found, codes = states(megatron_run(tmp_path / "save", tracker=tracker))
    assert found == expected
    assert codes == ([code] if code else [])


def test_megatron_release_tracker_names_the_release_folder_or_nothing(tmp_path):
    # `release` loads `release/` (as iteration 0); the iterations beside it never reached the tracker
    assert states(megatron_release(tmp_path / "one")) == ([(0, None)], [])
    found, codes = states(megatron_run(tmp_path / "two", tracker="release"))
    assert found == [(None, "not there")]
    assert sorted(codes, key=str) == [("CKD106", 100), ("CKD106", 200), ("CKD110", None), ("CKD113", None)]  # no resume point


# --- Lightning: `last.ckpt` as a symlink ----------------------------------------------------------


@pytest.fixture
def linked(lightning_saved: dict[str, Path], tmp_path: Path) -> Path:
    """A copy of a real fit's checkpoints: epochs 0-2 (steps 4, 8, 12), ``last.ckpt`` a symlink."""
    return copy_run(lightning_saved["link"], tmp_path / "run" / "checkpoints")


def relink(folder: Path, target: str | Path) -> None:
    (folder / "last.ckpt").unlink()
    os.symlink(target, folder / "last.ckpt")


def test_lightning_last_names_the_checkpoint_it_links_to(linked):
    assert states(linked) == ([(12, None)], [])
    relink(linked, "epoch=0-step=4.ckpt")  # an older whole checkpoint is still one to follow, but ckpt_path="last" goes back
    assert states(linked) == ([(4, None)], [("CKD116", 4)])
    relink(linked, "../checkpoints/./epoch=1-step=8.ckpt")  # out of its folder and back: still this run's
    assert states(linked) == ([(8, None)], [("CKD116", 8)])


def test_lightning_last_linking_to_a_cut_checkpoint_is_partial(linked):
    target = linked / "epoch=2-step=12.ckpt"
    target.write_bytes(target.read_bytes()[:-10])
    found, codes = states(linked)
    assert found == [(12, "partial")]
    assert ("CKD113", 12) in codes


@pytest.mark.parametrize("how", ["target deleted", "linked to itself"])
def test_lightning_last_that_dangles_names_nothing_and_is_stale(linked, how):
    if how == "target deleted":
        (linked / "epoch=2-step=12.ckpt").unlink()
    else:
        relink(linked, "last.ckpt")
    found, codes = states(linked)
    assert found == []
    assert ("CKD113", None) in codes


def test_lightning_last_linking_to_a_folder_names_nothing_there(linked):
    shutil.copytree(linked, linked.parent / "other")
    relink(linked, "../other")
    found, codes = states(linked)
    assert found == [(None, "not there")]
    assert ("CKD113", None) in codes


def test_lightning_last_linking_out_of_the_run_is_not_the_runs_checkpoint(linked):
    """`ckpt_path="last"` loads what the link names: another run's file, whatever this run holds."""
    other = copy_run(linked, linked.parent / "other")
    relink(linked, "../other/epoch=1-step=8.ckpt")
    assert os.path.samefile(linked / "last.ckpt", other / "epoch=1-step=8.ckpt")
    found, codes = states(linked)
    assert found != [(8, None)], "the run's own epoch=1-step=8.ckpt is not what Lightning loads"
    assert ("CKD113", None) in codes or ("CKD113", 8) in codes


# --- HF Trainer: `best_model_checkpoint` in the newest trainer_state.json ------------------------


def hf_run(folder: Path, best: str | None, stated_in: int = 6) -> Path:
    write_hf_checkpoints(folder, (2, 4, 6))
    state = {"global_step": stated_in, "log_history": [], "best_model_checkpoint": best}
    (folder / f"checkpoint-{stated_in}" / "trainer_state.json").write_text(json.dumps(state))
    return folder


@pytest.mark.parametrize("best", ["{run}/checkpoint-4", "out/checkpoint-4", "{run}/checkpoint-4/"])
def test_hf_best_model_checkpoint_names_a_checkpoint_by_its_folder(tmp_path, best):
    folder = hf_run(tmp_path / "out", best.format(run=tmp_path / "out"))
    assert states(folder) == ([(4, None)], [])


def test_hf_without_a_best_checkpoint_there_is_no_pointer(tmp_path):
    assert states(hf_run(tmp_path / "out", None)) == ([], [])


@pytest.mark.parametrize(
    ("damage", "state", "code"),
    [
        ("model.safetensors", "incomplete", "CKD102"),  # what load_best_model_at_end loads is gone
        ("optimizer.pt", None, "CKD101"),  # it loads the weights alone: still followable
    ],
)
def test_hf_best_checkpoint_is_judged_by_the_weights_it_loads(tmp_path, damage, state, code):
    folder = hf_run(tmp_path / "out", str(tmp_path / "out" / "checkpoint-4"))
    (folder / "checkpoint-4" / damage).unlink()
    found, codes = states(folder)
    assert found == [(4, state)]
    assert (code, 4) in codes
    assert (("CKD113", 4) in codes) == (state is not None)


def test_hf_best_checkpoint_with_empty_weights_is_partial(tmp_path):
    folder = hf_run(tmp_path / "out", str(tmp_path / "out" / "checkpoint-4"))
    (folder / "checkpoint-4" / "model.safetensors").write_bytes(b"")
    found, codes = states(folder)
    assert found == [(4, "partial")] and ("CKD113", 4) in codes


@pytest.mark.parametrize(("best", "expected"), [("{run}/checkpoint-8", (8, "not there")), ("{run}/best", (None, "not there"))])
def test_hf_best_checkpoint_that_is_not_a_checkpoint_of_the_run(tmp_path, best, expected):
    folder = hf_run(tmp_path / "out", best.format(run=tmp_path / "out"))
    found, codes = states(folder)
    assert found == [expected]
    assert ("CKD113", expected[0]) in codes


def test_hf_best_checkpoint_is_read_from_the_newest_state_that_names_one(tmp_path):
    """checkpoint-6 names none (the run went on without evaluating): checkpoint-4's still holds."""
    folder = hf_run(tmp_path / "out", str(tmp_path / "out" / "checkpoint-2"), stated_in=4)
    assert states(folder) == ([(2, None)], [])
    shutil.rmtree(folder / "checkpoint-2")
    assert states(folder)[0] == [(2, "not there")]


# --- TensorFlow: the `checkpoint` state file -------------------------------------------------------

_TF_DATA = Path(__file__).parent / "data"


def tensorflow_run(folder: Path, saves: tuple[int, ...] = (2, 3), state: str | None = "ckpt-3") -> Path:
    """Bundles as ``CheckpointManager.save`` names them, each a copy of one real TensorFlow 2.21
    bundle (an index does not name its prefix), and the state file as
    ``update_checkpoint_state_internal`` writes it."""
    folder.mkdir()
    for number in saves:
        shutil.copy(_TF_DATA / "ckpt-2.index", folder / f"ckpt-{number}.index")
        shutil.copy(_TF_DATA / "ckpt-2.data-00000-of-00001", folder / f"ckpt-{number}.data-00000-of-00001")
    if state is not None:
        kept = "".join(f'all_model_checkpoint_paths: "ckpt-{n}"\n' for n in saves)
        (folder / "checkpoint").write_text(f'model_checkpoint_path: "{state}"\n{kept}')
    return folder


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("ckpt-3", (3, None)),
        ("ckpt-2", (2, None)),  # an older whole save: followable
        ("./ckpt-3", (3, None)),  # TensorFlow joins it to the folder: the same save
        ("ckpt-9", (9, "not there")),  # deleted, or never written
        ("../other/ckpt-3", (None, "not there")),  # TensorFlow joins it to the folder: another run's
        ("ckpt-4/../ckpt-3", (None, "not there")),  # no path a save of this run has
        ("/elsewhere/ckpt-3", (None, "not there")),
        ("ckpt-3.index", (None, "not there")),  # a file, not a prefix: restore fails on it
    ],
)
def test_tensorflow_state_names_a_save_of_the_run_or_nothing(tmp_path, state, expected):
    folder = tensorflow_run(tmp_path / "tf", state=state)
    found, codes = states(folder)
    assert found == [expected]
    assert (("CKD113", expected[0]) in codes) == (expected[1] is not None), codes


def test_tensorflow_state_may_name_the_save_by_its_absolute_path(tmp_path):
    folder = tensorflow_run(tmp_path / "tf", state=str(tmp_path / "tf" / "ckpt-3"))
    assert states(folder) == ([(3, None)], [])


def test_tensorflow_saves_without_a_state_file_have_a_missing_pointer(tmp_path):
    folder = tensorflow_run(tmp_path / "tf", state=None)
    assert states(folder) == ([(None, "missing")], [("CKD113", None)])


@pytest.mark.parametrize(
    "text",
    [
        "model_checkpoint_path: ckpt-3\n",  # unquoted: not what text format writes
        'all_model_checkpoint_paths: "ckpt-3"\n',  # no model_checkpoint_path: latest_checkpoint is None
        "\xff\xfe",
    ],
)
def test_a_state_file_tensorflow_cannot_follow_is_its_own_finding(tmp_path, text):
    folder = tensorflow_run(tmp_path / "tf")
    (folder / "checkpoint").write_bytes(text.encode("latin-1"))
    found, codes = states(folder)
    assert found == []
    assert codes == [("CKD207", None)]


def test_a_state_file_path_in_octal_escapes_is_read_as_utf8(tmp_path):
    folder = tmp_path / "tf"
    tensorflow_run(folder, saves=(3,), state=None)
    for suffix in (".index", ".data-00000-of-00001"):
        (folder / f"ckpt-3{suffix}").rename(folder / f"\u00e9t\u00e9-3{suffix}")
    (folder / "checkpoint").write_text('model_checkpoint_path: "\\303\\251t\\303\\251-3"\n')
    assert states(folder) == ([(3, None)], [])


# --- mmengine and Detectron2: `last_checkpoint` (a full path, or a name) ---------------------------
# The real runs' cases are in tests/test_mmengine.py and tests/test_detectron2.py; here, the one
# helper both layouts share reads each framework's own format and no other.


@pytest.mark.parametrize(
    ("layout", "text", "number"),
    [
        ("mmengine", "{run}/epoch_2.pth", 2),
        ("mmengine", "epoch_2.pth", None),  # mmengine writes the full path: a name is resolved from the job's cwd
        ("detectron2", "model_0000002.pth", 2),
        ("detectron2", "{run}/model_0000002.pth", 2),  # fvcore joins the folder with it: an absolute path stays
        ("detectron2", "../{name}/model_0000002.pth", 2),
        ("detectron2", "../elsewhere/model_0000002.pth", None),
    ],
)
def test_last_checkpoint_is_read_in_each_frameworks_format(tmp_path, layout, text, number):
    torch = pytest.importorskip("torch")
    run = tmp_path / "run"
    run.mkdir()
    names = {"mmengine": "epoch_{}.pth", "detectron2": "model_{:07d}.pth"}[layout]
    for index in (1, 2):
        torch.save({"model": {"w": torch.zeros(1)}, "optimizer": {"state": {}, "param_groups": [{"lr": 1}]}}, run / names.format(index))
    (run / "last_checkpoint").write_text(text.format(run=run, name=run.name))
    (run / "config.yaml").write_text("")  # Detectron2's default_setup; mmengine knows its run by last_checkpoint
    _, found = inspect([str(run)])
    (scanned,) = found.runs
    assert scanned.layout == layout
    (pointer,) = layout_named(layout).pointers(scanned)
    assert pointer.number == number


# --- Composer: `latest-rank0.pt` as a symlink, or a `.symlink` object ------------------------------


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("ep2-ba8-rank0.pt", [(8, None)]),  # what CheckpointSaver makes
        ("ep1-ba4-rank0.pt", [(4, None)]),
        ("./ep1-ba4-rank0.pt", [(4, None)]),
        ("../other/ep1-ba4-rank0.pt", [(None, "outside this run's checkpoints")]),  # another run's file: loaded, not judged
        ("ep9-ba36-rank0.pt", []),  # dangling: its own finding, CKD113
    ],
)
def test_composer_latest_names_the_save_it_links_to(tmp_path, target, expected):
    composer_run(tmp_path / "other")
    folder = composer_run(tmp_path / "checkpoints")
    (folder / "latest-rank0.pt").unlink()
    os.symlink(target, folder / "latest-rank0.pt")
    found, codes = states(folder)
    assert found == expected
    assert ("CKD113" in {code for code, _ in codes}) == (expected != [(8, None)] and expected != [(4, None)]), codes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tiny-run/checkpoints/ep2-ba8-rank0.pt", [(8, None)]),
        ("ep1-ba4-rank0.pt", [(4, None)]),
        ("tiny-run/checkpoints/ep5-ba20-rank0.pt", [(20, "not there")]),
    ],
)
def test_composer_remote_symlink_object_names_a_save_by_its_file_name(tmp_path, text, expected):
    folder = composer_run(tmp_path / "checkpoints", latest=False)
    (folder / "latest-rank0.pt.symlink").write_text(text)
    assert states(folder)[0] == expected


# --- fairseq's checkpoint_last.pt -----------------------------------------------------------------


def test_fairseq_checkpoint_last_that_is_there_names_the_save_it_copies(tmp_path):
    """A copy says nothing by its name: the pickle its archive records is its save's own, which
    --restore-file's default then loads (CKD116 where that save is older than the newest whole one)."""
    trainer = FairseqTrainer(tmp_path / "checkpoints").epochs(2)
    assert states(trainer.save_dir) == ([(2, None)], [])
    shutil.copyfile(trainer.save_dir / "checkpoint1.pt", trainer.save_dir / "checkpoint_last.pt")
    assert states(trainer.save_dir) == ([(1, None)], [("CKD116", 1)])


def test_fairseq_without_checkpoint_last_is_a_missing_pointer(tmp_path):
    """fairseq's default --restore-file then finds nothing and trains from scratch."""
    trainer = FairseqTrainer(tmp_path / "checkpoints").epochs(2)
    (trainer.save_dir / "checkpoint_last.pt").unlink()
    assert states(trainer.save_dir) == ([(None, "missing")], [("CKD113", None)])


# --- a text pointer that leads out of the run to a file that is there (issue 31, item 6) -------------
# The framework loads what it leads to (asked of each framework below), so it is not "not there":
# CKD113 says where it leads, as a warning (nothing of it was judged); the resume answer says the
# framework's own resume loads that, and `verify --resume-path` vouches for no path.


def _told_outside(cli, run: Path, outside: Path) -> None:
    """What ckptdoctor says of ``run`` whose pointer leads to ``outside``."""
    report = cli("inspect", "--json", run).json
    (told,) = [f for f in report["findings"] if f["code"] == "CKD113"]
    assert (
        told["severity"] == "warning"
        and f"outside this run's checkpoints at {outside}" in told["message"]
        and "not there" not in told["message"]
    )
    assert f"outside this run's checkpoints, at {outside}" in report["runs"][0]["resume"]["how"], (
        "the resume answer says what the framework loads"
    )
    printed = cli("inspect", "--resume-path", run)
    assert printed.exit_code == 0 and f"outside this run's checkpoints, at {outside}" in printed.stderr
    refused = cli("verify", "--resume-path", run)
    assert (refused.exit_code, refused.stdout) == (1, ""), "the framework's own resume loads a file no one checked"


def test_mmengine_last_checkpoint_naming_another_runs_file_is_what_resume_loads(tmp_path, cli, monkeypatch):
    pytest.importorskip("mmengine")
    from frameworks import mmengine_run

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # mmengine 0.10's own resume under torch >= 2.6
    mmengine_run(tmp_path / "other", "epoch", 2)
    work = tmp_path / "work"
    mmengine_run(work, "epoch", 4)
    outside = tmp_path / "other" / "epoch_2.pth"
    (work / "last_checkpoint").write_text(str(outside))
    _told_outside(cli, work, outside)
    # the framework: Runner(resume=True) follows it to the other run's epoch 2 and trains epoch 3
    # (from its own epoch 4 it would have nothing left to train)
    assert mmengine_run(work, "epoch", 3, resume=True).epoch == 3
    (work / "last_checkpoint").write_text(str(tmp_path / "gone" / "epoch_2.pth"))
    assert states(work)[0] == [(None, "not there")]
    # the second attack (issue 31): a hidden file beside it is no checkpoint of the run, yet there,
    # and what Runner(resume=True) loads: it was "not there", and verify --resume-path answered
    hidden = work / ".epoch_2.pth"
    hidden.write_bytes(outside.read_bytes())
    (work / "last_checkpoint").write_text(str(hidden))
    _told_outside(cli, work, hidden)
    assert mmengine_run(work, "epoch", 3, resume=True).epoch == 3


def test_detectron2_last_checkpoint_naming_a_file_out_of_the_run_is_what_resume_loads(tmp_path, cli):
    """Detectron2 is not installed here: ``Detectron2Trainer.resumed`` follows fvcore@3378afe's
    ``get_checkpoint_file`` (``os.path.join(save_dir, last_saved)``: an absolute path stays)."""
    from frameworks import Detectron2Trainer

    Detectron2Trainer(tmp_path / "other", max_iter=4).train()
    output = tmp_path / "output"
    Detectron2Trainer(output).train()
    outside = tmp_path / "other" / "model_0000003.pth"
    for text in (str(outside), "../other/model_0000003.pth"):
        (output / "last_checkpoint").write_text(text)
        _told_outside(cli, output, Path(os.path.normpath(output / text)))
        assert Detectron2Trainer.resumed(output).start_iter == 4, "resumed after the other run's iteration 3"


def test_deepspeed_latest_naming_a_tag_out_of_the_run_is_what_load_checkpoint_loads(deepspeed_zero2, tmp_path, cli):
    from frameworks import deepspeed_loads

    run = copy_run(deepspeed_zero2.path, tmp_path / "runs" / "run")
    copy_run(deepspeed_zero2.path, tmp_path / "runs" / "outside")
    (run / "latest").write_text("../outside/global_step2")
    outside = tmp_path / "runs" / "outside" / "global_step2"
    _told_outside(cli, run, outside)
    (loaded,) = deepspeed_loads(run, 2, None)
    assert loaded["path"] is not None and os.path.realpath(loaded["path"]).startswith(str(outside)), loaded
