"""``repair --undo`` on a copy of the run (issue 32, item 7): ``cp -a``, a restore from a backup
and a move to another disk give every file another inode; the manifest's content fingerprint
still tells what the repair moved, so undo puts back what matches, names what does not, and
leaves that in the quarantine (no advice ever deletes quarantined data). The runs are real
``torch.save`` (and safetensors) files, and what comes back is loaded with torch and compared
with the files the repair moved."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import frameworks
import pytest
from test_acting_faults import _tmpfs
from test_repair import deepspeed_run, tree

torch = pytest.importorskip("torch")
from safetensors.torch import load_file  # noqa: E402  (torch first: its absence skips the module)

pytestmark = pytest.mark.usefixtures("fake_machine")  # the process table and clock are the test's (conftest)

DAY = 86400


def split_run(folder: Path) -> Path:
    """The hand-written loop's split saves, epochs 1-4 (real ``torch.save`` and safetensors
    files); epoch 4's optimizer cut in half, as a kill mid-save leaves it; aged a day."""
    frameworks.torch_loop(folder, 4, "split")
    optimizer = folder / "optimizer_4.pt"
    optimizer.write_bytes(optimizer.read_bytes()[: optimizer.stat().st_size // 2])
    when = time.time() - DAY
    for path in [folder, *folder.iterdir()]:
        os.utime(path, (when, when))
    return folder


def quarantine_files(run: Path) -> Path:
    (files,) = (run / ".ckptdoctor" / "quarantine").glob("*/files")
    return files


def same_state(restored: Any, original: Any) -> bool:
    """Two loaded states equal, tensor for tensor."""
    if isinstance(original, dict):
        return (
            isinstance(restored, dict)
            and restored.keys() == original.keys()
            and all(same_state(restored[k], original[k]) for k in original)
        )
    if isinstance(original, (list, tuple)):
        return len(restored) == len(original) and all(same_state(a, b) for a, b in zip(restored, original, strict=True))
    if isinstance(original, torch.Tensor):
        return isinstance(restored, torch.Tensor) and torch.equal(restored, original)
    return bool(restored == original)


def load(path: Path) -> Any:
    """What the loop and DeepSpeed load: safetensors by ``load_file``, the rest by ``torch.load``;
    a file torch cannot read gives its error's type and text."""
    try:
        return load_file(path) if path.suffix == ".safetensors" else torch.load(path, weights_only=True)
    except Exception as error:  # the truncated optimizer: torch refuses it, as it refused the original
        return (type(error).__name__, str(error).replace(str(path), "PATH"))


def assert_torch_loads_the_originals(restored_run: Path, moved: dict[str, Path]) -> None:
    for relative, original in moved.items():
        assert same_state(load(restored_run / relative), load(original)), f"{relative} is not what the repair moved"


def moved_by_repair(run: Path) -> dict[str, Path]:
    """Each file the repair moved (relative to the run) and where it lies in the quarantine."""
    files = quarantine_files(run)
    return {str(path.relative_to(files)): path for path in files.rglob("*") if path.is_file()}


@pytest.fixture
def repaired(tmp_path: Path, cli) -> tuple[Path, Path, dict[str, str]]:
    """A split run and a DeepSpeed run (a tag folder missing one rank's optimizer, ``latest``
    naming it), each repaired in place; (split, deepspeed, the trees before the repair)."""
    split = split_run(tmp_path / "runs" / "split")
    ds = deepspeed_run(tmp_path / "runs" / "ds")
    before = {"split": tree(split), "ds": tree(ds)}
    for run in (split, ds):
        assert cli("repair", "--yes", run).exit_code == 0
    assert not (split / "optimizer_4.pt").exists() and not (ds / "global_step300").exists()
    assert (ds / "latest").read_text() == "global_step200"
    return split, ds, before


def test_undo_on_a_cp_a_copy_puts_back_what_the_repair_moved(repaired, tmp_path: Path, cli) -> None:
    split, ds, before = repaired
    copied = tmp_path / "restored-from-backup"
    copied.mkdir()
    subprocess.run(["cp", "-a", str(split), str(ds), str(copied)], check=True)
    for name, original in (("split", split), ("ds", ds)):
        copy = copied / name
        result = cli("repair", "--undo", "--yes", copy)
        assert result.exit_code == 0, result.stderr
        assert tree(copy) == before[name], "every file is back, byte for byte"
        assert_torch_loads_the_originals(copy, moved_by_repair(original))
        assert not any((copy / ".ckptdoctor" / "quarantine").iterdir()), "the copy's quarantine is emptied"
        assert moved_by_repair(original), "the original run's quarantine is untouched"
    assert (copied / "ds" / "latest").read_text() == "global_step300", "the pointer is put back too"
    assert torch.load(copied / "ds" / "global_step300" / "mp_rank_00_model_states.pt", weights_only=True)["global_steps"] == 300


def test_undo_after_a_move_to_another_filesystem(repaired, tmp_path: Path, cli) -> None:
    split, ds, before = repaired
    moved = {
        name: {relative: path.read_bytes() for relative, path in moved_by_repair(run).items()}
        for name, run in (("split", split), ("ds", ds))
    }
    with _tmpfs(tmp_path / "other-disk", "64m") as disk:
        for name, run in (("split", split), ("ds", ds)):
            subprocess.run(["mv", str(run), str(disk / name)], check=True)  # across filesystems: a copy, then a delete
            assert os.stat(disk / name).st_dev != os.stat(tmp_path).st_dev
            result = cli("repair", "--undo", "--yes", disk / name)
            assert result.exit_code == 0, result.stderr
            assert tree(disk / name) == before[name]
            for relative, data in moved[name].items():
                kept = tmp_path / "originals" / name / relative
                kept.parent.mkdir(parents=True, exist_ok=True)
                kept.write_bytes(data)
                assert same_state(load(disk / name / relative), load(kept)), f"{relative} is not what the repair moved"
            assert not any((disk / name / ".ckptdoctor" / "quarantine").iterdir())


def test_a_tampered_quarantined_file_is_named_left_in_the_quarantine_and_the_rest_put_back(repaired, tmp_path: Path, cli) -> None:
    split, _, before = repaired
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(split), str(copy)], check=True)
    tampered = quarantine_files(copy) / "scheduler_4.pt"
    data = bytearray(tampered.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte in the middle: the size stays, the write dates it
    tampered.write_bytes(bytes(data))
    result = cli("repair", "--undo", "--yes", copy)
    assert result.exit_code == 1
    said = result.stdout + result.stderr
    assert "scheduler_4.pt" in said and "is not what the repair moved there" in said and "left in the quarantine" in said
    assert "remove" not in said.lower() and "delete" not in said.lower(), "no advice deletes quarantined data"
    assert tampered.read_bytes() == bytes(data), "left in the quarantine as it is"
    assert not (copy / "scheduler_4.pt").exists()
    assert {k: v for k, v in tree(copy).items() if k != "scheduler_4.pt"} == {
        k: v for k, v in before["split"].items() if k != "scheduler_4.pt"
    }
    assert_torch_loads_the_originals(copy, {k: v for k, v in moved_by_repair(split).items() if k != "scheduler_4.pt"})
    again = cli("repair", "--undo", "--yes", copy)
    assert again.exit_code == 1 and "scheduler_4.pt" in again.stderr and tampered.exists(), "named again, never lost"


def test_an_older_manifest_on_a_copy_puts_nothing_back_it_cannot_prove_and_deletes_nothing(repaired, tmp_path: Path, cli) -> None:
    """A version 2 manifest (the release before this one) recorded no fingerprint: on a copy its
    entries cannot be told from other files, so they stay, named, with advice that keeps them."""
    split, _, _ = repaired
    (manifest,) = (split / ".ckptdoctor" / "quarantine").glob("*/manifest.json")
    document = json.loads(manifest.read_bytes())
    document["version"] = 2
    for line in document["entries"]:
        line.pop("content", None)  # absent where the manifest is version 2 already
    manifest.write_text(json.dumps(document))
    copy = tmp_path / "copy"
    shutil.copytree(split, copy, symlinks=True)  # copy2 keeps every time, as cp -a does
    result = cli("repair", "--undo", "--yes", copy)
    assert result.exit_code == 1
    assert result.stderr.count("left in the quarantine") == 3 and "remove" not in result.stderr.lower()
    assert set(moved_by_repair(copy)) == {"model_4.safetensors", "optimizer_4.pt", "scheduler_4.pt"}
    assert not (copy / "model_4.safetensors").exists()
    assert cli("repair", "--undo", "--yes", split).exit_code == 0, "in the run it was made in, its inodes still prove it"
