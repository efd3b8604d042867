"""``ckptdoctor repair`` on runs of every framework layout, broken the way real saves break.

Runs are made by the real framework where the other suites do so (a `transformers.Trainer`, a
`lightning.Trainer` with `ModelCheckpoint`, `Accelerator.save_state`, `dcp.save`), otherwise with
real `torch.save` files under the framework's exact names (DeepSpeed, Megatron, Orbax). Each case:

1. ``repair --json --dry-run``: the plan (what is quarantined and re-pointed, what a pointer will
   say, the rules each action fixes), and not one byte, name or symlink changes, and no
   ``.ckptdoctor`` folder appears;
2. ``repair --json --yes``: what was planned is under ``.ckptdoctor/quarantine/<id>/files/``
   byte for byte, everything else is untouched, pointers say what the framework expects, the
   framework itself would resume from the resume point, and ``inspect`` has no error left
   (but about older checkpoints repair leaves alone on purpose);
3. ``repair --undo --yes``: the exact tree from before, and no quarantine left.

ckptdoctor's own folder is ``<run>/.ckptdoctor``, but for accelerate, which reads every name in
its ``checkpoints/`` folder: there it is ``<parent>/.ckptdoctor/<run name>`` (``beside``), and the
run's trees are compared whole, dot entries included.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from frameworks import accelerator_for, copy_run, deepspeed_run, lightning_fit, megatron_run

pytestmark = pytest.mark.usefixtures("fake_machine")  # the process table and clock are the test's (conftest)

DAY = 86400
OWN = ".ckptdoctor"
RESUME = "resume point (newest complete)"


# --- helpers -----------------------------------------------------------------------------------


def age(folder: Path, seconds: float = DAY) -> None:
    """Make every entry of ``folder`` (symlinks themselves, not their targets) look old."""
    when = time.time() - seconds
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (when, when), follow_symlinks=False)


def tree(root: Path, skip_own: bool = True) -> dict[str, str]:
    """Every entry under ``root`` (but ckptdoctor's own folder in it, with ``skip_own``): a
    folder, a symlink's target as written, or a file's sha256."""
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        if skip_own and Path(folder) == root:
            dirs[:] = [d for d in dirs if d != OWN]
        for name in [*dirs, *files]:
            path = os.path.join(folder, name)
            key = os.path.relpath(path, root)
            if os.path.islink(path):
                found[key] = "-> " + os.readlink(path)
            elif os.path.isdir(path):
                found[key] = "dir"
            else:
                with open(path, "rb") as handle:
                    found[key] = "sha256:" + hashlib.sha256(handle.read()).hexdigest()
    return found


def under(key: str, paths: Any) -> bool:
    return any(key == path or key.startswith(path + os.sep) for path in paths)


def rules(item: dict[str, Any]) -> set[str]:
    return set(re.findall(r"CKD\d{3}", " ".join(item["reasons"])))


def relative(item: dict[str, Any], run: Path) -> list[str]:
    return [os.path.relpath(path, run) for path in item["paths"]]


def acting(plan: list[dict[str, Any]], run: Path, action: str) -> dict[str, dict[str, Any]]:
    """The plan's items for ``action``, by path relative to the run."""
    return {path: item for item in plan if item["action"] == action for path in relative(item, run)}


def errors(report: dict[str, Any], older_than: int | None = None) -> list[dict[str, Any]]:
    """Error findings, but those about checkpoints older than ``older_than`` (left alone on purpose)."""
    return [
        f
        for f in report["findings"]
        if f["severity"] == "error" and not (older_than is not None and f.get("index") is not None and f["index"] < older_than)
    ]


def home(run: Path, beside: bool = False) -> Path:
    """ckptdoctor's own folder (lock, trash, quarantine) for ``run``: in it, or ``beside`` it for
    a layout that reads every name in the run folder (accelerate)."""
    from ckptdoctor.places import home_of

    return Path(home_of(str(run), beside))


def nowhere_else(run: Path, beside: bool) -> None:
    """ckptdoctor's own folder is not in the other place it could be."""
    assert not os.path.lexists(home(run, not beside)), f"a {OWN} folder at {home(run, not beside)}"


def quarantined_files(own: Path) -> Path:
    (ident,) = os.listdir(own / "quarantine")
    folder = own / "quarantine" / ident
    assert (folder / "manifest.json").is_file()
    return folder / "files"


def no_quarantine_left(own: Path) -> bool:
    base = own / "quarantine"
    return not base.exists() or not os.listdir(base)


def read_pointer(path: Path, kind: str) -> str:
    """What the pointer at ``path`` says: a symlink's target, a text file's content, or for a copy
    the name of the file beside it that it is byte for byte (with its modification time)."""
    if kind == "symlink":
        assert path.is_symlink(), path
        return os.readlink(path)
    assert path.is_file() and not path.is_symlink(), path
    if kind == "copy":
        (original,) = [
            p for p in path.parent.iterdir() if p != path and not p.is_symlink() and p.is_file() and p.read_bytes() == path.read_bytes()
        ]
        assert os.stat(original).st_mtime_ns == os.stat(path).st_mtime_ns, "a copy keeps its original's time"
        return original.name
    assert kind == "text", kind
    return path.read_bytes().decode()


Pointers = Mapping[str, tuple[str, str, set[str]]]
"""Pointer path (relative to the run) -> (what repair writes, its kind: "text", "symlink" or
"copy", rules its reasons name)."""


def round_trip(
    cli: Callable[..., Any],
    run: Path,
    *,
    resume: int,
    quarantine: Mapping[str, set[str]],
    repoint: Pointers | None = None,
    kept: Mapping[int, str] | None = None,
    framework_resumes: Callable[[], None] | None = None,
    beside: bool = False,
) -> dict[str, Any]:
    """Dry run, repair, undo on ``run``; ``quarantine`` maps each path the plan moves (relative to
    the run) to the rules its reasons name; ``kept`` maps older incomplete checkpoints that are
    left alone to a word of their reason; ``beside``: ckptdoctor's folder is beside the run, which
    is compared whole. Returns the report of ``repair --yes``."""
    repoint = repoint or {}
    kept = kept or {}
    own = home(run, beside)
    age(run)
    before = tree(run, skip_own=not beside)
    assert not os.path.lexists(own), "a fresh run"

    # 1. the plan, and a dry run changes nothing, and creates nothing
    dry = cli("repair", "--json", "--dry-run", run)
    assert dry.exit_code == 0, dry.stderr
    body = dry.json
    assert body["dry_run"] is True
    assert tree(run, skip_own=not beside) == before, "a dry run changed the run"
    assert not os.path.lexists(own), f"a dry run created {own}"
    nowhere_else(run, beside)
    plan = body["plan"]
    moved = acting(plan, run, "quarantine")
    assert {path: rules(item) for path, item in moved.items()} == dict(quarantine)
    pointers = acting(plan, run, "repoint")
    assert {path: (item["writes"]["text"], item["writes"]["kind"], rules(item)) for path, item in pointers.items()} == dict(repoint)
    for item in pointers.values():
        assert item["index"] == resume and any("resume point" in reason for reason in item["reasons"])
    keeps = {item["index"]: item["reasons"] for item in plan if item["action"] == "keep"}
    assert keeps.pop(resume)[0] == RESUME
    assert set(keeps) == set(kept), keeps  # complete older checkpoints are not listed at all
    for index, word in kept.items():
        assert any(word in reason for reason in keeps[index]), keeps[index]
    assert not any(item["action"] not in ("keep", "quarantine", "repoint") for item in plan)
    assert body["runs"][0]["resume"]["index"] == resume

    # 2. repair
    done = cli("repair", "--json", "--yes", run)
    assert done.exit_code == 0, done.stderr
    report = done.json
    assert report["dry_run"] is False
    assert report["plan"] == plan, "--yes did something else than the dry run showed"
    after = tree(run, skip_own=not beside)
    nowhere_else(run, beside)
    for path in quarantine:
        assert not os.path.lexists(run / path), f"{path} is still in the run"
    expected_run = {k: v for k, v in before.items() if not under(k, quarantine) and k not in repoint}
    for path, (text, kind, _) in repoint.items():
        assert read_pointer(run / path, kind) == text
        if kind == "symlink":
            expected_run[path] = "-> " + text
        elif kind == "copy":  # the resume checkpoint's file, byte for byte
            expected_run[path] = before[os.path.join(os.path.dirname(path), text)]
        else:
            expected_run[path] = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert after == expected_run, "repair touched something it did not plan to"
    stored = quarantined_files(own)
    expected_quarantine = {k: v for k, v in before.items() if under(k, quarantine) or k in repoint}
    kept_in_quarantine = {k: v for k, v in tree(stored).items() if v != "dir" or under(k, quarantine)}
    assert kept_in_quarantine == expected_quarantine, "the quarantine does not hold exactly what was moved"
    inspected = cli("inspect", "--json", run).json
    assert inspected["runs"][0]["resume"]["index"] == resume
    assert errors(inspected, older_than=resume) == []
    if framework_resumes is not None:
        framework_resumes()

    # 3. undo
    undone = cli("repair", "--undo", "--yes", run)
    assert undone.exit_code == 0, undone.stderr
    assert tree(run, skip_own=not beside) == before, "undo did not restore the run as it was"
    assert no_quarantine_left(own)
    nowhere_else(run, beside)
    return report


def healthy(cli: Callable[..., Any], run: Path, beside: bool = False) -> None:
    """On a healthy run ``repair`` finds nothing to do, and does nothing."""
    age(run)
    before = tree(run, skip_own=not beside)
    result = cli("repair", "--json", run)
    assert result.exit_code == 0, result.stderr
    assert [item["action"] for item in result.json["plan"]] == ["keep"]
    assert result.json["findings"] == []
    assert tree(run, skip_own=not beside) == before
    assert no_quarantine_left(home(run, beside))
    nowhere_else(run, beside)


# --- HF Trainer --------------------------------------------------------------------------------


@pytest.fixture
def hf_run(hf_trained: Path, tmp_path: Path) -> Path:
    return copy_run(hf_trained, tmp_path / "out")


def resumes_from_hf(run: Path, step: int) -> Callable[[], None]:
    def check() -> None:
        from transformers.trainer_utils import get_last_checkpoint

        assert get_last_checkpoint(str(run)) == str(run / f"checkpoint-{step}")
        state = json.loads((run / f"checkpoint-{step}" / "trainer_state.json").read_text())
        assert state["global_step"] == step

    return check


def test_hf_trainer_healthy_run_is_left_alone(hf_run, cli):
    healthy(cli, hf_run)


def test_hf_trainer_newest_checkpoint_without_trainer_state_and_a_staging_folder(hf_run, cli):
    from transformers.trainer_utils import get_last_checkpoint

    (hf_run / "checkpoint-6" / "trainer_state.json").unlink()
    shutil.copytree(hf_run / "checkpoint-6", hf_run / "tmp-checkpoint-8")
    assert get_last_checkpoint(str(hf_run)) == str(hf_run / "checkpoint-6")  # what the Trainer would take now
    round_trip(
        cli,
        hf_run,
        resume=4,
        quarantine={"checkpoint-6": {"CKD104", "CKD114"}, "tmp-checkpoint-8": {"CKD202"}},
        framework_resumes=resumes_from_hf(hf_run, 4),
    )


def test_hf_trainer_newest_checkpoint_without_optimizer_and_an_older_one_without_scheduler(hf_run, cli):
    (hf_run / "checkpoint-6" / "optimizer.pt").unlink()
    (hf_run / "checkpoint-2" / "scheduler.pt").unlink()  # older than the resume point: left alone
    report = round_trip(
        cli,
        hf_run,
        resume=4,
        quarantine={"checkpoint-6": {"CKD101", "CKD114"}},
        kept={2: "older than the resume point"},
        framework_resumes=resumes_from_hf(hf_run, 4),
    )
    (older,) = [f for f in report["findings"] if f["index"] == 2]
    assert (older["code"], older["severity"]) == ("CKD103", "warning")  # older than the resume point


def test_hf_trainer_human_output_ends_with_the_resume_point(hf_run, cli):
    (hf_run / "checkpoint-6" / "trainer_state.json").unlink()
    age(hf_run)
    refused = cli("repair", hf_run)  # off a terminal, without --yes
    assert refused.exit_code == 2 and (hf_run / "checkpoint-6").is_dir()
    result = cli("repair", "--yes", hf_run)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.rstrip().splitlines()[-2] == f"Resume from step 4: {hf_run}/checkpoint-4"


def test_hf_trainer_a_save_still_being_written_is_left_alone(hf_run, cli):
    (hf_run / "checkpoint-6" / "trainer_state.json").unlink()
    age(hf_run)
    os.utime(hf_run / "checkpoint-6" / "optimizer.pt")  # written just now: the save may be going on
    before = tree(hf_run)
    result = cli("repair", "--json", "--yes", hf_run)
    assert result.exit_code == 0, result.stderr
    (newest,) = [item for item in result.json["plan"] if item["index"] == 6]
    assert newest["action"] == "keep" and "may still be being saved: left as it is" in newest["reasons"]
    assert not acting(result.json["plan"], hf_run, "quarantine")
    assert tree(hf_run) == before and no_quarantine_left(home(hf_run))


# --- accelerate --------------------------------------------------------------------------------


def loads_with_accelerate(project: Path, folder: Path) -> None:
    """`load_state(folder)` restores the weights saved there."""
    from safetensors.torch import load_file

    accelerator, model, _, _ = accelerator_for(project)
    accelerator.load_state(str(folder))
    saved = load_file(str(folder / "model.safetensors"))
    for name, tensor in accelerator.unwrap_model(model).state_dict().items():
        assert (tensor == saved[name]).all()


@pytest.fixture
def acc_project(accelerate_saved: Path, tmp_path: Path) -> Path:
    return copy_run(accelerate_saved, tmp_path / "project")


def test_accelerate_healthy_run_is_left_alone(acc_project, cli):
    healthy(cli, acc_project / "checkpoints", beside=True)


def test_accelerate_newest_save_without_optimizer(acc_project, cli):
    run = acc_project / "checkpoints"
    (run / "checkpoint_3" / "optimizer.bin").unlink()
    round_trip(
        cli,
        run,
        resume=2,
        quarantine={"checkpoint_3": {"CKD101", "CKD105", "CKD114"}},
        framework_resumes=lambda: loads_with_accelerate(acc_project, run / "checkpoint_2"),
        beside=True,
    )


def test_accelerate_newest_save_with_an_empty_scheduler(acc_project, cli):
    run = acc_project / "checkpoints"
    (run / "checkpoint_3" / "scheduler.bin").write_bytes(b"")
    round_trip(cli, run, resume=2, quarantine={"checkpoint_3": {"CKD201", "CKD114"}}, beside=True)


def test_accelerate_keeps_its_own_folder_beside_the_checkpoints_folder(acc_project, cli):
    run = acc_project / "checkpoints"
    (run / "checkpoint_3" / "optimizer.bin").unlink()
    age(run)
    assert cli("repair", "--yes", run).exit_code == 0
    assert home(run, beside=True) == acc_project / OWN / "checkpoints"
    assert sorted(os.listdir(acc_project / OWN / "checkpoints")) == ["lock", "quarantine"]
    assert (quarantined_files(home(run, beside=True)) / "checkpoint_3" / "model.safetensors").is_file()


def test_accelerate_load_state_resumes_from_the_resume_point_after_repair(acc_project, cli):
    from safetensors.torch import load_file

    run = acc_project / "checkpoints"
    (run / "checkpoint_3" / "optimizer.bin").unlink()
    age(run)
    assert cli("repair", "--yes", run).exit_code == 0
    assert sorted(os.listdir(run)) == ["checkpoint_1", "checkpoint_2"]  # not a dot entry left in it
    accelerator, model, _, _ = accelerator_for(acc_project)
    accelerator.load_state()  # no input_dir: the highest checkpoint_N, as a restarted script does it
    saved = load_file(str(run / "checkpoint_2" / "model.safetensors"))
    for name, tensor in accelerator.unwrap_model(model).state_dict().items():
        assert (tensor == saved[name]).all()


@pytest.mark.parametrize(
    "next_save",
    [
        pytest.param(None, id="numbering-from-0"),  # the script leaves `iteration` as a new Accelerator has it
        pytest.param(3, id="numbering-on"),  # it sets the save after the one loaded, as accelerate's error says to
    ],
)
def test_accelerate_save_state_after_repair_keeps_the_quarantine_undoable(acc_project, cli, next_save):
    """A real `save_state()` (automatic naming, total_limit=2) after repair: the rotation reads
    every name in `checkpoints/` and deletes the oldest save; the quarantine beside the folder is
    untouched, and undo puts back what it moved, or refuses clearly where the new save took its name."""
    torch = pytest.importorskip("torch")
    run = acc_project / "checkpoints"
    (run / "checkpoint_3" / "optimizer.bin").unlink()
    age(run)
    before = tree(run, skip_own=False)
    assert cli("repair", "--yes", run).exit_code == 0
    own = home(run, beside=True)
    stored = tree(own / "quarantine")
    accelerator, model, optimizer, scheduler = accelerator_for(acc_project, total_limit=2)
    accelerator.load_state()
    if next_save is not None:
        accelerator.project_configuration.iteration = next_save
    accelerator.backward(model(torch.randn(2, 4)).sum())
    optimizer.step()
    scheduler.step()
    accelerator.save_state()
    saved = f"checkpoint_{0 if next_save is None else next_save}"
    assert sorted(os.listdir(run)) == sorted(["checkpoint_2", saved]), "the rotation kept total_limit=2 saves"
    assert (run / saved / "model.safetensors").is_file() and (run / saved / "optimizer.bin").is_file()
    assert tree(own / "quarantine") == stored, "the save touched the quarantine"
    nowhere_else(run, beside=True)
    clash = (run / "checkpoint_3").exists()  # the new save took the quarantined checkpoint's name
    assert clash == (saved == "checkpoint_3")
    undone = cli("repair", "--undo", "--yes", run)
    if clash:
        assert undone.exit_code == 1
        assert "checkpoint_3" in undone.stderr and "Nothing was restored" in undone.stderr
        assert (run / "checkpoint_3" / "optimizer.bin").is_file(), "undo overwrote the new save"
        assert tree(own / "quarantine") == stored, "a refused undo changed the quarantine"
    else:
        assert undone.exit_code == 0, undone.stderr
        assert sorted(os.listdir(run)) == ["checkpoint_0", "checkpoint_2", "checkpoint_3"]
        restored = {k: v for k, v in tree(run, skip_own=False).items() if under(k, ["checkpoint_3"])}
        assert restored == {k: v for k, v in before.items() if under(k, ["checkpoint_3"])}
        assert no_quarantine_left(own)
    nowhere_else(run, beside=True)


def test_accelerate_dry_run_leaves_the_checkpoints_folder_as_it_was(acc_project, cli):
    run = acc_project / "checkpoints"
    (run / "checkpoint_3" / "optimizer.bin").unlink()
    age(run)
    names = sorted(os.listdir(run))
    assert cli("repair", "--json", "--dry-run", run).exit_code == 0
    assert sorted(os.listdir(run)) == names
    assert sorted(os.listdir(acc_project)) == ["checkpoints"], "a dry run created something beside the run"


# --- Lightning ---------------------------------------------------------------------------------


@pytest.fixture
def linked(lightning_saved: dict[str, Path], tmp_path: Path) -> Path:
    return copy_run(lightning_saved["link"], tmp_path / "link" / "checkpoints")


@pytest.fixture
def copied(lightning_saved: dict[str, Path], tmp_path: Path) -> Path:
    return copy_run(lightning_saved["copy"], tmp_path / "copy" / "checkpoints")


def ckpt(folder: Path, epoch: int) -> Path:
    (found,) = folder.glob(f"epoch={epoch}-step=*.ckpt")
    return found


def loads(path: Path) -> dict[str, Any]:
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)  # files this test wrote itself


def resumes_from_lightning(folder: Path, epoch: int) -> Callable[[], None]:
    """`last.ckpt` holds the resume checkpoint, and `fit(ckpt_path="last")` restores it (with
    `max_epochs` reached at once and nothing saved, so the run stays as repair left it)."""

    def check() -> None:
        last, target = loads(folder / "last.ckpt"), loads(ckpt(folder, epoch))
        assert (last["epoch"], last["global_step"]) == (target["epoch"], target["global_step"]) == (epoch, 4 * (epoch + 1))
        trainer = lightning_fit(folder.parent, epoch + 1, ckpt_path="last", save_top_k=0, save_last=False)
        assert trainer.ckpt_path == str(folder / "last.ckpt")
        assert (trainer.current_epoch, trainer.global_step) == (epoch + 1, 4 * (epoch + 1))

    return check


def test_lightning_fits_are_laid_out_as_expected(lightning_saved):
    link, copy = lightning_saved["link"], lightning_saved["copy"]
    assert sorted(os.listdir(link)) == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt", "last.ckpt"]
    assert os.readlink(link / "last.ckpt") == "epoch=2-step=12.ckpt"
    assert sorted(os.listdir(copy)) == sorted(os.listdir(link))
    assert not (copy / "last.ckpt").is_symlink()


@pytest.mark.parametrize("kind", ["link", "copy"])
def test_lightning_healthy_run_is_left_alone(kind, lightning_saved, tmp_path, cli):
    folder = copy_run(lightning_saved[kind], tmp_path / "checkpoints")
    healthy(cli, folder)


def test_lightning_dangling_last_ckpt_after_its_target_was_deleted(linked, cli):
    ckpt(linked, 2).unlink()
    round_trip(
        cli,
        linked,
        resume=8,  # indexed by step: epoch=1-step=8
        quarantine={},
        repoint={"last.ckpt": ("epoch=1-step=8.ckpt", "symlink", {"CKD113"})},
        framework_resumes=resumes_from_lightning(linked, 1),
    )


def test_lightning_last_ckpt_linking_to_a_truncated_checkpoint(linked, cli):
    newest = ckpt(linked, 2)
    newest.write_bytes(newest.read_bytes()[:-100])
    round_trip(
        cli,
        linked,
        resume=8,  # indexed by step: epoch=1-step=8
        # `ckpt_path="last"` follows the link to the cut file (CKD114), until the repair re-points it
        quarantine={"epoch=2-step=12.ckpt": {"CKD203", "CKD114"}},
        repoint={"last.ckpt": ("epoch=1-step=8.ckpt", "symlink", {"CKD113"})},
        framework_resumes=resumes_from_lightning(linked, 1),
    )


def test_lightning_truncated_last_ckpt_copy(copied, cli):
    last = copied / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])
    round_trip(
        cli,
        copied,
        resume=12,  # indexed by step: epoch=2-step=12
        quarantine={},
        repoint={"last.ckpt": ("epoch=2-step=12.ckpt", "copy", {"CKD203"})},
        framework_resumes=resumes_from_lightning(copied, 2),
    )


def test_lightning_copy_mode_training_on_after_repair_keeps_the_resume_checkpoint(tmp_path, cli, monkeypatch):
    import tempfile

    elsewhere = Path("/dev/shm")
    if not elsewhere.is_dir() or not os.access(elsewhere, os.W_OK) or os.stat(elsewhere).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs a writable folder on another filesystem than the run for $TMPDIR")
    root = tmp_path / "run"
    lightning_fit(root, 3, save_top_k=-1, save_last=True)  # in place, so that the resumed callback takes its own state back
    folder = root / "checkpoints"
    last = folder / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])
    age(folder)
    assert cli("repair", "--yes", folder).exit_code == 0
    resume_point = ckpt(folder, 2).read_bytes()
    assert not last.is_symlink() and last.read_bytes() == resume_point, "a copy, as save_last=True makes"
    monkeypatch.setattr(tempfile, "tempdir", str(elsewhere))  # $TMPDIR on local disk, the run on shared storage
    trainer = lightning_fit(root, 4, ckpt_path="last", save_top_k=-1, save_last=True)  # the user resumes, as told
    assert trainer.global_step == 16
    assert loads(ckpt(folder, 3))["global_step"] == 16
    assert loads(ckpt(folder, 2))["global_step"] == 12, "epoch=2-step=12.ckpt now holds another epoch"
    assert ckpt(folder, 2).read_bytes() == resume_point


# --- DeepSpeed ---------------------------------------------------------------------------------


def test_deepspeed_healthy_run_is_left_alone(tmp_path, cli):
    healthy(cli, deepspeed_run(tmp_path / "ds"))


def test_deepspeed_newest_tag_missing_a_rank_file_named_by_latest(tmp_path, cli):
    folder = deepspeed_run(tmp_path / "ds")
    (folder / "global_step200" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    round_trip(
        cli,
        folder,
        resume=100,
        quarantine={"global_step200": {"CKD105", "CKD114"}},
        repoint={"latest": ("global_step100", "text", {"CKD113"})},
    )


def test_deepspeed_no_latest_file_at_all(tmp_path, cli):
    folder = deepspeed_run(tmp_path / "ds", latest=False)
    round_trip(cli, folder, resume=200, quarantine={}, repoint={"latest": ("global_step200", "text", {"CKD113"})})
    assert not os.path.lexists(folder / "latest"), "undo removes the pointer repair created"


def test_deepspeed_latest_naming_a_missing_tag_and_a_newer_partial_tag(tmp_path, cli):
    folder = deepspeed_run(tmp_path / "ds", steps=(100, 200, 300))
    (folder / "global_step300" / "mp_rank_00_model_states.pt").write_bytes(b"")
    (folder / "latest").write_text("global_step400")
    round_trip(
        cli,
        folder,
        resume=200,
        quarantine={"global_step300": {"CKD201"}},  # `latest` names no tag: no auto-resume to call unsafe
        repoint={"latest": ("global_step200", "text", {"CKD113"})},
    )


def test_deepspeed_a_tag_still_being_saved_keeps_latest_as_it_is(tmp_path, cli):
    folder = deepspeed_run(tmp_path / "ds")
    (folder / "global_step200" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    age(folder)
    os.utime(folder / "global_step200" / "mp_rank_00_model_states.pt")  # another rank is still writing
    before = tree(folder)
    result = cli("repair", "--json", "--yes", folder)
    assert result.exit_code == 0, result.stderr
    assert [item["action"] for item in result.json["plan"]] == ["keep", "keep", "keep"]
    pointer = result.json["plan"][-1]
    assert Path(pointer["paths"][0]).name == "latest"
    assert pointer["reasons"][-1] == "step 200 may still be being saved: left as it is"
    assert (folder / "latest").read_text() == "global_step200"
    assert tree(folder) == before and no_quarantine_left(home(folder))


def test_only_the_repoint_claims_to_fix_a_stale_pointer(tmp_path, cli):
    folder = deepspeed_run(tmp_path / "ds")
    (folder / "global_step200" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    age(folder)
    result = cli("repair", "--json", "--dry-run", folder)
    (stale,) = [f for f in result.json["findings"] if f["code"] == "CKD113"]
    assert stale["path"].endswith("latest")
    plan = result.json["plan"]
    assert "CKD113" in rules(acting(plan, folder, "repoint")["latest"])
    assert "CKD113" not in rules(acting(plan, folder, "quarantine")["global_step200"])


# --- Megatron ----------------------------------------------------------------------------------


def test_megatron_healthy_run_is_left_alone(tmp_path, cli):
    healthy(cli, megatron_run(tmp_path / "save"))


def test_megatron_tracker_naming_a_partial_iteration(tmp_path, cli):
    folder = megatron_run(tmp_path / "save")
    shutil.rmtree(folder / "iter_0000200" / "mp_rank_01")
    round_trip(
        cli,
        folder,
        resume=100,
        quarantine={"iter_0000200": {"CKD105", "CKD114"}},
        repoint={"latest_checkpointed_iteration.txt": ("100", "text", {"CKD113"})},
    )


def test_megatron_iteration_newer_than_the_tracker(tmp_path, cli):
    folder = megatron_run(tmp_path / "save", (100, 200, 300), tracker=200)
    round_trip(cli, folder, resume=200, quarantine={"iter_0000300": {"CKD106"}})
    assert (folder / "latest_checkpointed_iteration.txt").read_text() == "200"


# --- torch.distributed.checkpoint --------------------------------------------------------------


def dcp_model() -> tuple[Any, Any]:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters())
    return model, optimizer


def dcp_run(folder: Path, steps: tuple[int, ...] = (10, 20)) -> Path:
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    model, optimizer = dcp_model()
    for step in steps:
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        writer = dcp.FileSystemWriter(str(folder / f"step-{step}"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "torch.distributed is disabled": one process is the point
            dcp.save({"model": model.state_dict()}, storage_writer=writer)
    return folder


def dcp_loads(folder: Path) -> Callable[[], None]:
    """The resume point loads with `dcp.load` into a fresh model."""

    def check() -> None:
        import torch.distributed.checkpoint as dcp

        model, _ = dcp_model()
        state = {"model": model.state_dict()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.load(state, checkpoint_id=str(folder))
        model.load_state_dict(state["model"])

    return check


def test_dcp_healthy_run_is_left_alone(tmp_path, cli):
    healthy(cli, dcp_run(tmp_path / "run"))


def test_dcp_newest_folder_without_metadata(tmp_path, cli):
    folder = dcp_run(tmp_path / "run")
    (folder / "step-20" / ".metadata").unlink()
    round_trip(cli, folder, resume=10, quarantine={"step-20": {"CKD106"}}, framework_resumes=dcp_loads(folder / "step-10"))


def test_dcp_newest_folder_with_a_leftover_metadata_tmp(tmp_path, cli):
    folder = dcp_run(tmp_path / "run")
    (folder / "step-20" / ".metadata").rename(folder / "step-20" / ".metadata.tmp")
    round_trip(cli, folder, resume=10, quarantine={"step-20": {"CKD106", "CKD202"}}, framework_resumes=dcp_loads(folder / "step-10"))


def test_dcp_stale_metadata_tmp_beside_a_committed_metadata(tmp_path, cli):
    """An older commit's leftover `.metadata.tmp`: only it goes, and the folder is whole again."""
    folder = dcp_run(tmp_path / "run", steps=(10, 20, 30))
    shutil.copy(folder / "step-20" / ".metadata", folder / "step-20" / ".metadata.tmp")
    round_trip(cli, folder, resume=30, quarantine={"step-20/.metadata.tmp": {"CKD202"}}, framework_resumes=dcp_loads(folder / "step-30"))


# --- Orbax -------------------------------------------------------------------------------------


def orbax_run(folder: Path, steps: tuple[int, ...] = (100, 200)) -> Path:
    for step in steps:
        step_folder = folder / str(step)
        (step_folder / "default").mkdir(parents=True)
        (step_folder / "default" / "_METADATA").write_text("{}")
        (step_folder / "_CHECKPOINT_METADATA").write_text(
            json.dumps({"item_handlers": {"default": "PyTreeCheckpointHandler"}, "commit_timestamp_nsecs": step})
        )
        (step_folder / "commit_success.txt").write_text(f"Checkpoint commit was successful to {step_folder}")
    return folder


def test_orbax_healthy_run_is_left_alone(tmp_path, cli):
    healthy(cli, orbax_run(tmp_path / "ckpt"))


def test_orbax_abandoned_tmp_folder(tmp_path, cli):
    folder = orbax_run(tmp_path / "ckpt")
    shutil.copytree(folder / "200", folder / "300.orbax-checkpoint-tmp-0")
    (folder / "300.orbax-checkpoint-tmp-0" / "commit_success.txt").unlink()
    round_trip(cli, folder, resume=200, quarantine={"300.orbax-checkpoint-tmp-0": {"CKD202"}})


def test_orbax_newest_step_without_its_commit_marker_is_left_as_the_resume_point(tmp_path, cli):
    """Orbax restores a step without commit_success.txt on a local disk (tests/test_orbax_real.py
    asks it): repair moves nothing, and CKD106 is a warning."""
    folder = orbax_run(tmp_path / "ckpt", steps=(100, 200, 300))
    (folder / "300" / "commit_success.txt").unlink()
    age(folder)
    dry = cli("repair", "--json", "--dry-run", folder)
    assert dry.exit_code == 0, dry.stderr
    assert [item for item in dry.json["plan"] if item["action"] != "keep"] == []
    assert dry.json["runs"][0]["resume"]["index"] == 300
    assert {(f["code"], f["severity"]) for f in dry.json["findings"]} == {("CKD106", "warning")}
