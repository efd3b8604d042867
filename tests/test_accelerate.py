"""accelerate runs written by a real `Accelerator.save_state`: with automatic checkpoint naming,
and into folders the script names."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from frameworks import accelerate_fsdp_load, accelerate_fsdp_run, accelerate_model, accelerator_for, copy_run, step_and_save

pytestmark = pytest.mark.slow  # real framework runs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run(accelerate_saved: Path, tmp_path: Path) -> Path:
    """A copy of the shared project's ``checkpoints/`` (checkpoint_1..3), for the test to break."""
    return copy_run(accelerate_saved / "checkpoints", tmp_path / "checkpoints")


def only(report: dict, code: str) -> dict:
    (finding,) = [f for f in report["findings"] if f["code"] == code]
    return finding


def test_a_healthy_project_is_quiet(run, inspect_json):
    report = inspect_json(run.parent).json
    assert report["findings"] == []
    (found,) = report["runs"]
    assert (found["layout"], found["unit"]) == ("accelerate", "save")
    assert [c["index"] for c in found["checkpoints"]] == [1, 2, 3]
    assert found["resume"]["index"] == 3


def test_a_missing_newest_optimizer_and_the_automatic_resume(run, inspect_json):
    (run / "checkpoint_3" / "optimizer.bin").unlink()
    report = inspect_json(run).json
    assert only(report, "CKD101")["index"] == 3
    auto = only(report, "CKD114")
    assert f'accelerator.load_state("{run}/checkpoint_2")' in report["runs"][0]["resume"]["how"]
    assert not any('load_state("' in fix for fix in auto["fixes"])  # said once, by the run
    assert report["runs"][0]["resume"]["index"] == 2


def _unlink(path: Path) -> None:
    path.unlink()


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("breakage", [_unlink, _empty, _cut], ids=["missing", "empty", "truncated"])
def test_random_states_are_advisory_as_load_state_resumes_without_them(run, inspect_json, breakage):
    """issue 30, item 2: `load_accelerator_state` loads `random_states_<rank>.pkl` inside a try that
    only logs "Could not load random states": accelerate's own `load_state` restores checkpoint_3
    whole without it, so checkpoint_3 stays the resume point, with a warning, and nothing to move."""
    states = run / "checkpoint_3" / "random_states_0.pkl"
    breakage(states)
    accelerator, model, _, scheduler = accelerator_for(run.parent)
    accelerator.load_state(str(run / "checkpoint_3"))
    assert same_weights(accelerator, model, run / "checkpoint_3") and scheduler.scheduler.last_epoch == 4
    bare, bare_model, *_ = accelerator_for(run.parent)
    bare.load_state()  # the automatic resume loads it too
    assert same_weights(bare, bare_model, run / "checkpoint_3")

    report = inspect_json(run).json
    (found,) = report["runs"]
    assert found["resume"]["index"] == 3 and found["checkpoints"][-1]["status"] == "complete"
    assert [f["severity"] for f in report["findings"]] == ["warning"]
    (warned,) = report["findings"]
    assert warned["index"] == 3 and "random_states_0.pkl" in warned["message"]
    assert "are not restored" in warned["message"] and "CKD114" not in {f["code"] for f in report["findings"]}
    assert not any("ckptdoctor repair" in fix and "Quarantine the incomplete" in fix for fix in warned["fixes"])


def test_a_missing_custom_checkpoint_is_not_advisory(saves, inspect_json):
    """Unlike the RNG states, `load_state` refuses a folder whose count of `custom_checkpoint_<i>.pkl`
    differs from the objects registered: step_6 without it is no resume point."""
    run = saves / "out"
    (run / "step_6" / "custom_checkpoint_0.pkl").unlink()
    accelerator, *_ = named_accelerator()
    with pytest.raises(RuntimeError, match="Number of custom checkpoints"):
        accelerator.load_state(str(run / "step_6"))
    report = inspect_json(run).json
    assert report["runs"][0]["resume"]["index"] == 4
    assert only(report, "CKD105")["severity"] == "error"


def test_an_empty_scheduler_is_ckd201(run, inspect_json):
    (run / "checkpoint_3" / "scheduler.bin").write_bytes(b"")
    report = inspect_json(run).json
    assert only(report, "CKD201")["index"] == 3
    assert report["runs"][0]["checkpoints"][-1]["status"] == "partial"


def test_prune_keeps_its_own_folder_out_of_checkpoints_and_accelerate_saves_on(run, cli):
    """accelerate's save_state(total_limit=...) and load_state() parse a number out of every name
    in checkpoints/: ckptdoctor's lock and trash must live beside it."""
    import time

    import accelerate
    import torch
    from accelerate.utils import ProjectConfiguration

    when = time.time() - 86400
    for path in [run, *run.rglob("*")]:
        os.utime(path, (when, when))
    assert cli("prune", "--dry-run", "--keep-last", "1", run).exit_code == 0
    assert sorted(os.listdir(run)) == ["checkpoint_1", "checkpoint_2", "checkpoint_3"]
    result = cli("prune", "--yes", "--keep-last", "1", run)
    assert result.exit_code == 0, result.stderr
    assert sorted(os.listdir(run)) == ["checkpoint_3"]
    assert (run.parent / ".ckptdoctor" / "checkpoints" / "lock").is_file()
    config = ProjectConfiguration(project_dir=str(run.parent), automatic_checkpoint_naming=True, total_limit=2, iteration=4)
    accelerator = accelerate.Accelerator(project_config=config, cpu=True)
    accelerator.prepare(torch.nn.Linear(4, 2))
    accelerator.load_state()  # the newest save, found by parsing every name in checkpoints/
    accelerator.save_state()
    assert sorted(os.listdir(run)) == ["checkpoint_3", "checkpoint_4"]


# --- issue 14, item 11: resuming after a save killed under automatic naming and total_limit --------


def same_weights(accelerator, model, folder: Path) -> bool:
    from safetensors.torch import load_file

    saved = load_file(str(folder / "model.safetensors"))
    return all((tensor == saved[name]).all() for name, tensor in accelerator.unwrap_model(model).state_dict().items())


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    """Five real saves with total_limit=3 (checkpoint_2..4 left), the last one killed mid-write:
    its optimizer cut in half, its scheduler and RNG states never written."""
    project = tmp_path_factory.mktemp("killed") / "project"
    accelerator, *prepared = accelerator_for(project, total_limit=3)
    for _ in range(5):
        step_and_save(accelerator, *prepared)
    cut = project / "checkpoints" / "checkpoint_4"
    optimizer = cut / "optimizer.bin"
    optimizer.write_bytes(optimizer.read_bytes()[: optimizer.stat().st_size // 2])
    (cut / "scheduler.bin").unlink()
    (cut / "random_states_0.pkl").unlink()
    return project


@pytest.fixture
def project(killed: Path, tmp_path: Path) -> Path:
    return copy_run(killed, tmp_path / "project")


def test_load_state_by_path_alone_lets_total_limit_delete_the_new_saves(project):
    """What the fix is for, as accelerate does it: a new Accelerator counts saves from 0 again,
    the rotation deletes the lowest numbers (the new saves), and a bare `load_state()` takes the
    broken checkpoint_4."""
    run = project / "checkpoints"
    accelerator, *prepared = accelerator_for(project, total_limit=3)
    accelerator.load_state(str(run / "checkpoint_3"))
    step_and_save(accelerator, *prepared)
    step_and_save(accelerator, *prepared)
    assert sorted(os.listdir(run)) == ["checkpoint_1", "checkpoint_3", "checkpoint_4"]  # checkpoint_0 rotated away
    again, *_ = accelerator_for(project, total_limit=3)
    with pytest.raises(RuntimeError, match="failed finding central directory"):
        again.load_state()


def test_the_fix_quarantines_the_cut_save_and_numbers_the_next_saves_on(project, inspect_json):
    """The whole fix ckptdoctor gives, done as it says with real accelerate: `ckptdoctor repair`,
    `load_state(<the folder named>)`, `iteration = <the number named>`, two saves; then a bare
    `load_state()` loads the newest whole save, and the rotation deleted none of the good ones."""
    import subprocess
    import sys

    from test_repair_frameworks import age

    run = project / "checkpoints"
    report = inspect_json(run).json
    assert report["runs"][0]["resume"]["index"] == 3
    assert {"CKD103", "CKD105", "CKD114", "CKD203"} <= {f["code"] for f in report["findings"]}
    fix = report["runs"][0]["resume"]["how"]  # the run's one resume advice, under its findings
    assert f"quarantine checkpoint_4 with `ckptdoctor repair --no-recurse {run}`" in fix
    folder = re.search(r'accelerator\.load_state\("([^"]+)"\)', fix)[1]  # type: ignore[index]
    iteration = int(re.search(r"accelerator\.project_configuration\.iteration = (\d+)", fix)[1])  # type: ignore[index]
    assert (folder, iteration) == (str(run / "checkpoint_3"), 4)

    age(project)  # the job died a while ago
    repaired = subprocess.run(
        [sys.executable, "-m", "ckptdoctor", "repair", "--yes", str(run)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "400"},  # the temporary folder's path on one line, however long
        check=False,
    )
    assert repaired.returncode == 0, repaired.stderr
    assert sorted(os.listdir(run)) == ["checkpoint_2", "checkpoint_3"]
    # its closing advice is for the run as it left it: nothing left to quarantine
    assert f'load_state("{folder}")' in repaired.stdout and "quarantine checkpoint_4" not in repaired.stdout

    accelerator, model, optimizer, scheduler = accelerator_for(project, total_limit=3)
    accelerator.load_state(folder)
    assert same_weights(accelerator, model, run / "checkpoint_3")
    accelerator.project_configuration.iteration = iteration
    step_and_save(accelerator, model, optimizer, scheduler)
    step_and_save(accelerator, model, optimizer, scheduler)
    assert sorted(os.listdir(run)) == ["checkpoint_3", "checkpoint_4", "checkpoint_5"], "total_limit=3 kept the newest saves"

    again, model_again, *_ = accelerator_for(project, total_limit=3)
    again.load_state()  # the highest number: the newest whole save
    assert same_weights(again, model_again, run / "checkpoint_5")
    after = inspect_json(run).json
    assert after["findings"] == [] and after["runs"][0]["resume"]["index"] == 5


# --- issue 14, item 7: save_state into folders the script names ------------------------------------


class Counter:
    """An object registered for checkpointing: accelerate saves it as custom_checkpoint_0.pkl."""

    def __init__(self) -> None:
        self.count = 0

    def state_dict(self) -> dict[str, int]:
        return {"count": self.count}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.count = state["count"]


def named_accelerator() -> tuple[Any, ...]:
    accelerate, model, optimizer, scheduler = accelerate_model()
    accelerator = accelerate.Accelerator(cpu=True)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    return (accelerator, counter, *accelerator.prepare(model, optimizer, scheduler))


@pytest.fixture(scope="module")
def named(tmp_path_factory) -> Path:
    """The `*_no_trainer` examples' folders (`out/step_N`, `epoch/epoch_N`), diffusers'
    (`diffusers/checkpoint-N`) and a folder without a number (`save_state("my_checkpoint")`),
    each from a real `save_state(path)`."""
    import torch

    root = tmp_path_factory.mktemp("named")
    accelerator, counter, model, optimizer, scheduler = named_accelerator()
    for step in (2, 4, 6):
        accelerator.backward(model(torch.randn(2, 4)).sum())
        optimizer.step()
        scheduler.step()
        counter.count = step
        accelerator.save_state(str(root / "out" / f"step_{step}"))
        accelerator.save_state(str(root / "diffusers" / f"checkpoint-{step}"))
        accelerator.save_state(str(root / "epochs" / f"epoch_{step // 2 - 1}"))
    accelerator.save_state(str(root / "my_checkpoint"))
    return root


@pytest.fixture
def saves(named: Path, tmp_path: Path) -> Path:
    return copy_run(named, tmp_path / "named")


def test_folders_the_script_names_are_recognised_by_what_they_hold(saves, inspect_json):
    result = inspect_json(saves)
    assert result.exit_code == 0 and result.json["findings"] == []
    runs = {Path(run["path"]).name: run for run in result.json["runs"]}
    summary = {name: (run["layout"], run["unit"], [c["index"] for c in run["checkpoints"]]) for name, run in runs.items()}
    assert summary == {
        "out": ("accelerate", "step", [2, 4, 6]),
        "epochs": ("accelerate", "epoch", [0, 1, 2]),
        # diffusers names its folders like HF Trainer; the files inside are accelerate's
        "diffusers": ("accelerate", "save", [2, 4, 6]),
        # no number in the name: one save of its own
        "my_checkpoint": ("accelerate", "save", [0]),
    }
    roles = {f["path"].rsplit("/", 1)[-1]: f["role"] for f in runs["out"]["checkpoints"][-1]["files"]}
    assert roles["custom_checkpoint_0.pkl"] == "trainer-state"
    assert inspect_json(saves / "my_checkpoint").json["runs"] == [runs["my_checkpoint"]]
    (one,) = inspect_json(saves / "out" / "step_4").json["runs"]
    assert (one["layout"], one["unit"], one["resume"]["index"]) == ("accelerate", "step", 4)


def test_a_save_killed_in_a_named_folder_and_the_resume_named(saves, inspect_json):
    """step_6 cut mid-write, step_8 created and nothing written yet: both join the run by their
    names, and `load_state` of the folder the fix names restores step 4, custom object included."""
    run = saves / "out"
    cut = run / "step_6"
    (cut / "optimizer.bin").write_bytes((cut / "optimizer.bin").read_bytes()[:100])
    for name in ("scheduler.bin", "random_states_0.pkl", "custom_checkpoint_0.pkl"):
        (cut / name).unlink()
    (run / "step_8").mkdir()
    report = inspect_json(run).json
    (found,) = report["runs"]
    assert [(c["index"], c["status"]) for c in found["checkpoints"]] == [
        (2, "complete"), (4, "complete"), (6, "partial"), (8, "incomplete"),
    ]  # fmt: skip
    (auto,) = [f for f in report["findings"] if f["code"] == "CKD114"]
    assert auto["index"] == 8
    fix = report["runs"][0]["resume"]["how"]
    assert f"quarantine step_6, step_8 with `ckptdoctor repair --no-recurse {run}`" in fix
    assert "iteration" not in fix, "no automatic naming: no save count to set"
    folder = re.search(r'accelerator\.load_state\("([^"]+)"\)', fix)[1]  # type: ignore[index]
    accelerator, counter, model, *_ = named_accelerator()
    accelerator.load_state(folder)
    assert counter.count == 4 and same_weights(accelerator, model, run / "step_4")


def test_weights_saved_beside_named_saves_are_not_a_checkpoint(saves, inspect_json):
    """`save_pretrained(out)` and a `final/` export beside the saves: weights without accelerate's
    files are neither a save of the run nor a run of their own."""
    run = saves / "out"
    for folder in (run, run / "final"):
        folder.mkdir(exist_ok=True)
        shutil.copy(run / "step_2" / "model.safetensors", folder / "model.safetensors")
        (folder / "config.json").write_text("{}")
    result = inspect_json(run)
    assert result.exit_code == 0 and result.json["findings"] == []
    (found,) = result.json["runs"]
    assert [c["index"] for c in found["checkpoints"]] == [2, 4, 6]


def test_folders_named_as_experiments_are_runs_of_their_own(saves, inspect_json):
    """`save_state("experiments/exp1")`, `…/exp2`: a number beside a word that counts no saves
    tells experiments apart; `prune --keep-last 1 experiments` must not see a series in them."""
    experiments = saves / "experiments"
    for name in ("exp1", "exp2"):
        shutil.copytree(saves / "out" / "step_2", experiments / name)
    report = inspect_json(experiments).json
    assert report["findings"] == []
    assert sorted((Path(run["path"]).name, len(run["checkpoints"])) for run in report["runs"]) == [("exp1", 1), ("exp2", 1)]


# --- under FSDP: `save_state()` of an Accelerator with FSDP2 and SHARDED_STATE_DICT, two processes on gloo


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``project/checkpoints/checkpoint_0`` and ``checkpoint_1``, each with the DCP folders
    ``pytorch_model_fsdp_0/`` and ``optimizer_0/`` (``.metadata``, ``__0_0.distcp``, ``__1_0.distcp``)."""
    return accelerate_fsdp_run(tmp_path_factory.mktemp("acc-fsdp") / "project").parent


def test_a_sharded_fsdp_save_holds_its_model_and_optimizer(fsdp, inspect_json):
    newest = fsdp / "checkpoints" / "checkpoint_1"
    assert sorted(p.name for p in (newest / "pytorch_model_fsdp_0").iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    result = inspect_json(fsdp / "checkpoints")
    assert result.exit_code == 0 and result.json["findings"] == []
    (run,) = result.json["runs"]
    assert (run["layout"], run["resume"]["index"]) == ("accelerate", 1)
    assert [c["status"] for c in run["checkpoints"]] == ["complete", "complete"]
    roles = {role for f in run["checkpoints"][1]["files"] for role in f["roles"]}
    assert {"model", "optimizer", "scheduler", "rng-state", "metadata"} <= roles


def test_a_cut_optimizer_shard_and_the_bare_load_state(fsdp, tmp_path, cli, inspect_json):
    project = copy_run(fsdp, tmp_path / "project")
    shard = project / "checkpoints" / "checkpoint_1" / "optimizer_0" / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-100])  # the last item of rank 0's optimizer state cut short
    report = inspect_json(project / "checkpoints").json
    (run,) = report["runs"]
    assert [c["status"] for c in run["checkpoints"]] == ["complete", "partial"]
    assert "optimizer_0/__0_0.distcp" in only(report, "CKD203")["path"]
    assert only(report, "CKD114")["index"] == 1
    assert run["resume"]["index"] == 0
    # a bare load_state() takes checkpoint_1 and dcp.load fails on it; the folder ckptdoctor names loads
    named = cli("inspect", "--resume-path", project / "checkpoints").stdout.strip()
    assert named == str(project / "checkpoints" / "checkpoint_0")
    loaded = accelerate_fsdp_load(project, None, named)
    assert len(loaded.failed) == 1 and loaded.failed[0].startswith("CheckpointException"), loaded.output[-3000:]
    assert loaded.count == 0


# --- issue 30, item 1: an entry in checkpoints/ that is no checkpoint_N ------------------------------


def _note(entry: Path) -> None:
    entry.mkdir()


def _text(entry: Path) -> None:
    entry.write_text("notes")


def _backup(entry: Path) -> None:
    shutil.copytree(entry.parent / "checkpoint_1", entry)


STRAYS = {
    # listed by os.listdir like any other entry, hidden or not; no number: the sort raises
    ".ipynb_checkpoints": (_note, "fails: "),
    "notes": (_text, "fails: "),
    # a number above checkpoint_3's: load_state loads it (a file: NotADirectoryError)
    "notes99.txt": (_text, "loads notes99.txt, not checkpoint_3"),
    # a whole copy of checkpoint_1 under a higher number: loaded without a word, two steps back
    "backup_7": (_backup, "loads backup_7, not checkpoint_3"),
    # the same number as the newest: the filesystem's listing order decides
    "notes_3": (_note, "may load notes_3, not checkpoint_3"),
}


@pytest.mark.parametrize("name", STRAYS)
def test_an_entry_beside_the_checkpoints_that_a_bare_load_state_takes(run, inspect_json, cli, name):
    """A bare `load_state()` takes a number from every entry of `checkpoints/` (files too, with
    `re.findall(...)[0]`) and loads the highest: CKD114 names the entry and what accelerate does;
    the fix it gives (move the entry out; `repair` leaves it) makes the bare `load_state()` load
    checkpoint_3."""
    from matrix import Unrestorable
    from test_matrix_accelerate import auto_resume

    make, outcome = STRAYS[name]
    entry = run / name
    make(entry)
    try:
        picked: Path | Unrestorable | None = auto_resume(run)
    except Unrestorable as failed:
        picked = failed
    if outcome.startswith("fails"):
        assert isinstance(picked, Unrestorable) and "IndexError" in str(picked)
    elif outcome.startswith("loads"):
        assert picked == entry
    else:  # a tie: either, as os.listdir lists them
        assert picked in (entry, run / "checkpoint_3")
    if name == "backup_7":  # what the copy holds is what is restored: checkpoint_1, silently
        accelerator, model, *_ = accelerator_for(run.parent)
        accelerator.load_state()
        assert same_weights(accelerator, model, run / "checkpoint_1") and not same_weights(accelerator, model, run / "checkpoint_3")

    report = inspect_json(run).json
    auto = only(report, "CKD114")
    assert auto["severity"] == "error" and auto["path"] == str(entry)
    assert auto["message"].startswith(f"accelerate's resume from the latest checkpoint {outcome}") and name in auto["message"]
    assert report["runs"][0]["resume"]["index"] == 3
    assert not any("repair" in fix and "quarantines it" in fix for fix in auto["fixes"])
    planned = cli("repair", "--dry-run", "--min-age", "0s", "--no-recurse", run)
    assert planned.exit_code == 0 and name not in planned.stdout, "repair leaves it where it is"

    moved = re.search(r"`(mkdir -p \S+ && mv -n -- \S+ \S+)`", auto["fixes"][0])[1]  # type: ignore[index]
    import subprocess

    subprocess.run(moved, shell=True, check=True)
    assert not entry.exists()
    assert auto_resume(run) == run / "checkpoint_3"
    assert inspect_json(run).json["findings"] == []
