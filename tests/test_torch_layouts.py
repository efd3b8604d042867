"""Plain PyTorch / safetensors runs from hand-made training loops, written with real torch.save.

Split runs (one file per role and index) in every naming variant users write, bundled runs
(one file per index), natural numeric order, completeness judged against the run's own roles,
long runs in the human table, and torch archives under burn's ``.bin`` names.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from ckptdoctor.readers.sample import HEAD, TAIL

torch = pytest.importorskip("torch")


def _save(path: Path, role: str = "model", scale: int = 1) -> None:
    """A real torch.save of what a training loop saves for ``role``."""
    model = torch.nn.Linear(8 * scale, 4)
    if role == "model":
        obj = model.state_dict()
    elif role == "optimizer":
        optimizer = torch.optim.Adam(model.parameters())
        model(torch.randn(2, 8 * scale)).sum().backward()
        optimizer.step()
        obj = optimizer.state_dict()
    elif role == "scheduler":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        obj = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10).state_dict()
    else:  # a bundled checkpoint
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        obj = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj, path)


def _save_safetensors(path: Path) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(torch.nn.Linear(8, 4).state_dict(), str(path))


def _write(folder: Path, names: Iterable[str]) -> None:
    for name in names:
        lowered = name.lower()
        if lowered.endswith(".safetensors"):
            _save_safetensors(folder / name)
        elif "optim" in lowered:
            _save(folder / name, "optimizer")
        elif "sched" in lowered:
            _save(folder / name, "scheduler")
        elif "model" in lowered or "weights" in lowered or "net" in lowered:
            _save(folder / name, "model")
        else:
            _save(folder / name, "bundled")


def _only_run(result) -> dict:
    runs = result.json["runs"]
    assert len(runs) == 1, [r["path"] for r in runs]
    return runs[0]


def _by_index(run: dict) -> dict[int, dict]:
    return {c["index"]: c for c in run["checkpoints"]}


def _roles(checkpoint: dict) -> dict[str, str]:
    """File name -> role, for one checkpoint."""
    return {Path(f["path"]).name: f["role"] for f in checkpoint["files"]}


# --- split runs: naming variants ------------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        pytest.param(
            ["model_3.pt", "optimizer_3.pt", "model_4.pt", "optimizer_4.pt"],
            {3: {"model_3.pt": "model", "optimizer_3.pt": "optimizer"}, 4: {"model_4.pt": "model", "optimizer_4.pt": "optimizer"}},
            id="underscore",
        ),
        pytest.param(
            ["model-epoch-3.pth", "optimizer-epoch-3.pth", "model-epoch-4.pth", "optimizer-epoch-4.pth"],
            {
                3: {"model-epoch-3.pth": "model", "optimizer-epoch-3.pth": "optimizer"},
                4: {"model-epoch-4.pth": "model", "optimizer-epoch-4.pth": "optimizer"},
            },
            id="dash-epoch-word",
        ),
        pytest.param(
            ["model_3.pt", "optim_3.pt", "lr_scheduler_3.pt", "model_4.pt", "optim_4.pt", "lr_scheduler_4.pt"],
            {
                3: {"model_3.pt": "model", "optim_3.pt": "optimizer", "lr_scheduler_3.pt": "scheduler"},
                4: {"model_4.pt": "model", "optim_4.pt": "optimizer", "lr_scheduler_4.pt": "scheduler"},
            },
            id="lr_scheduler",
        ),
        pytest.param(
            ["net.epoch3.pt", "sched.epoch3.pt", "net.epoch4.pt", "sched.epoch4.pt"],
            {3: {"net.epoch3.pt": "model", "sched.epoch3.pt": "scheduler"}, 4: {"net.epoch4.pt": "model", "sched.epoch4.pt": "scheduler"}},
            id="dotted-net-sched",
        ),
        pytest.param(
            ["model_3.pth.tar", "optimizer_3.pth.tar", "model_4.pth.tar", "optimizer_4.pth.tar"],
            {
                3: {"model_3.pth.tar": "model", "optimizer_3.pth.tar": "optimizer"},
                4: {"model_4.pth.tar": "model", "optimizer_4.pth.tar": "optimizer"},
            },
            id="pth.tar",
        ),
    ],
)
def test_split_naming_variants(inspect_json, tmp_path: Path, names: list[str], expected: dict) -> None:
    run_dir = tmp_path / "run"
    _write(run_dir, names)
    result = inspect_json(run_dir)
    run = _only_run(result)
    assert run["layout"] == "torch"
    assert run["unit"] == "epoch"
    checkpoints = _by_index(run)
    assert sorted(checkpoints) == sorted(expected)
    for index, roles in expected.items():
        assert _roles(checkpoints[index]) == roles
        assert checkpoints[index]["status"] == "complete"
        assert all(f["format"] == "torch-zip" for f in checkpoints[index]["files"])
    assert run["resume"]["index"] == 4
    assert run["other_files"] == [] and run["loose_files"] == []
    assert result.json["findings"] == []
    assert result.exit_code == 0


def test_mixed_separators_in_one_run(inspect_json, tmp_path: Path) -> None:
    """The issue's own examples side by side: one run, grouped by index, not by spelling."""
    run_dir = tmp_path / "run"
    _write(run_dir, ["model_3.pt", "optimizer-epoch-3.pth", "lr_scheduler_3.pt"])
    _write(run_dir, ["model_4.pt", "optimizer-epoch-4.pth", "lr_scheduler_4.pt"])
    result = inspect_json(run_dir)
    run = _only_run(result)
    assert run["layout"] == "torch"
    assert set(run["required"]) == {"model", "optimizer", "scheduler"}
    checkpoints = _by_index(run)
    assert _roles(checkpoints[3]) == {
        "model_3.pt": "model",
        "optimizer-epoch-3.pth": "optimizer",
        "lr_scheduler_3.pt": "scheduler",
    }
    assert checkpoints[4]["status"] == "complete"
    assert run["resume"]["index"] == 4


def test_safetensors_weights_by_step(inspect_json, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for step in (500, 1000, 1500):
        _save_safetensors(run_dir / f"weights.step.{step}.safetensors")
        _save(run_dir / f"optimizer.step.{step}.pt", "optimizer")
    (run_dir / "optimizer.step.1500.pt").unlink()
    result = inspect_json(run_dir)
    run = _only_run(result)
    assert run["unit"] == "step"
    assert [c["index"] for c in run["checkpoints"]] == [500, 1000, 1500]
    checkpoints = _by_index(run)
    assert _roles(checkpoints[500]) == {"weights.step.500.safetensors": "model", "optimizer.step.500.pt": "optimizer"}
    formats = {Path(f["path"]).name: f["format"] for f in checkpoints[1000]["files"]}
    assert formats == {"weights.step.1000.safetensors": "safetensors", "optimizer.step.1000.pt": "torch-zip"}
    assert checkpoints[1500]["status"] == "incomplete"
    assert run["resume"]["index"] == 1000
    missing = [f for f in result.json["findings"] if f["code"] == "CKD101"]
    assert [(f["index"], Path(f["path"]).name) for f in missing] == [(1500, "weights.step.1500.safetensors")]


def test_all_safetensors_run_is_a_safetensors_layout(inspect_json, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for step in (100, 200):
        _save_safetensors(run_dir / f"weights.step.{step}.safetensors")
    run = _only_run(inspect_json(run_dir))
    assert run["layout"] == "safetensors"
    assert run["unit"] == "step"
    assert run["resume"]["index"] == 200


# --- natural numeric order ------------------------------------------------------------------


def test_zero_padded_indices_in_numeric_order(inspect_json, cli, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for epoch in range(1, 13):
        _save(run_dir / f"model_{epoch:03d}.pt")
    result = inspect_json(run_dir)
    run = _only_run(result)
    assert [c["index"] for c in run["checkpoints"]] == list(range(1, 13))
    names = [Path(c["files"][0]["path"]).name for c in run["checkpoints"]]
    assert names.index("model_010.pt") == names.index("model_009.pt") + 1
    assert run["resume"]["index"] == 12
    assert run["resume"]["paths"] == [str(run_dir / "model_012.pt")]

    human = cli("inspect", run_dir).stdout
    assert human.index("model_009.pt") < human.index("model_010.pt") < human.index("model_011.pt")
    assert "Resume from epoch 12: model_012.pt" in human


def test_unpadded_indices_in_numeric_order_not_string_order(inspect_json, cli, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for epoch in (1, 2, 9, 10, 11, 100):
        _save(run_dir / f"model_{epoch}.pt")
        _save(run_dir / f"optimizer_{epoch}.pt", "optimizer")
    run = _only_run(inspect_json(run_dir))
    assert [c["index"] for c in run["checkpoints"]] == [1, 2, 9, 10, 11, 100]
    assert run["resume"]["index"] == 100
    human = cli("inspect", run_dir).stdout
    rows = [int(m[1]) for m in re.finditer(r"^\s*(\d+)\s+model_", human, re.MULTILINE)]
    assert rows == [1, 2, 9, 10, 11, 100]


# --- bundled runs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "indices", "unit"),
    [
        ("epoch_{}.pt", (11, 12), "epoch"),
        ("checkpoint_{}.pth", (2, 3), None),
        ("ckpt-{}.pt", (500, 1000), None),
        ("step_{}.pt", (1000, 2000), "step"),
        ("checkpoint-epoch={}.ckpt", (4, 5), "epoch"),
    ],
)
def test_bundled(inspect_json, cli, tmp_path: Path, template: str, indices: tuple[int, int], unit: str | None) -> None:
    run_dir = tmp_path / "run"
    for index in indices:
        _save(run_dir / template.format(index), "bundled")
    result = inspect_json(run_dir)
    run = _only_run(result)
    assert run["layout"] == "torch"
    if unit is not None:
        assert run["unit"] == unit
    assert [c["index"] for c in run["checkpoints"]] == list(indices)
    for checkpoint in run["checkpoints"]:
        (file,) = checkpoint["files"]
        assert file["role"] == "bundled"
        assert {"model", "optimizer"} <= set(file["roles"])
        assert file["format"] == "torch-zip"
        assert checkpoint["status"] == "complete"
    assert run["resume"]["index"] == indices[-1]
    assert result.json["findings"] == []
    assert result.exit_code == 0

    human = cli("inspect", run_dir)
    newest = template.format(indices[-1])
    assert f"Resume from {run['unit']} {indices[-1]}: {newest}" in human.stdout


def test_bundled_truncated_newest(inspect_json, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for epoch in (1, 2, 3):
        _save(run_dir / f"epoch_{epoch}.pt", "bundled")
    newest = run_dir / "epoch_3.pt"
    newest.write_bytes(newest.read_bytes()[:-100])
    result = inspect_json(run_dir)
    run = _only_run(result)
    assert _by_index(run)[3]["status"] == "partial"
    assert run["resume"]["index"] == 2
    assert [f["path"] for f in result.json["findings"] if f["code"] == "CKD203"] == [str(newest)]


# --- completeness: the run's own roles ------------------------------------------------------


def test_run_without_scheduler_is_complete(inspect_json, cli, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for epoch in (1, 2, 3):
        _save(run_dir / f"model_{epoch}.pt")
        _save(run_dir / f"optimizer_{epoch}.pt", "optimizer")
    result = inspect_json(run_dir)
    run = _only_run(result)
    assert "scheduler" not in run["required"]
    assert all(c["status"] == "complete" and c["missing"] == [] for c in run["checkpoints"])
    assert run["resume"]["index"] == 3
    assert [f for f in result.json["findings"] if f["code"] == "CKD103"] == []
    assert result.exit_code == 0
    human = cli("inspect", run_dir)
    assert "missing" not in human.stdout
    assert "Resume from epoch 3: model_3.pt, optimizer_3.pt" in human.stdout


def test_scheduler_saved_once_makes_the_others_incomplete(inspect_json, tmp_path: Path) -> None:
    """Completeness follows what the run itself saves: here every epoch has a scheduler but one."""
    run_dir = tmp_path / "run"
    for epoch in (1, 2, 3):
        _save(run_dir / f"model_{epoch}.pt")
        _save(run_dir / f"optimizer_{epoch}.pt", "optimizer")
        if epoch != 3:
            _save(run_dir / f"lr_scheduler_{epoch}.pt", "scheduler")
    result = inspect_json(run_dir)
    run = _only_run(result)
    checkpoints = _by_index(run)
    assert checkpoints[3]["status"] == "incomplete"
    assert checkpoints[3]["missing"] == ["scheduler"]
    assert run["resume"]["index"] == 2
    missing = [f for f in result.json["findings"] if f["code"] == "CKD103"]
    assert [f["index"] for f in missing] == [3]
    assert missing[0]["severity"] == "error"  # the loop that saved schedulers loads one on resume


def test_split_run_missing_optimizer(inspect_json, cli, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for epoch in (1, 2, 3, 4):
        _save(run_dir / f"model_{epoch}.pt")
        if epoch != 4:
            _save(run_dir / f"optimizer_{epoch}.pt", "optimizer")
    result = inspect_json(run_dir)
    run = _only_run(result)
    checkpoints = _by_index(run)
    assert checkpoints[4]["status"] == "incomplete"
    assert checkpoints[4]["missing"] == ["optimizer"]
    assert [checkpoints[e]["status"] for e in (1, 2, 3)] == ["complete"] * 3
    assert run["resume"]["index"] == 3
    missing = [f for f in result.json["findings"] if f["code"] == "CKD101"]
    assert len(missing) == 1
    assert missing[0]["index"] == 4
    assert missing[0]["severity"] == "error"
    assert missing[0]["path"] == str(run_dir / "model_4.pt")
    assert "optimizer_4.pt" in missing[0]["message"]
    assert result.exit_code == 1

    human = cli("inspect", run_dir)
    assert human.exit_code == 1
    assert "CKD101" in human.stdout
    assert "Resume from epoch 3: model_3.pt, optimizer_3.pt" in human.stdout


def test_split_run_missing_model_in_the_middle(inspect_json, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for epoch in (1, 2, 3):
        if epoch != 2:
            _save(run_dir / f"model_{epoch}.pt")
        _save(run_dir / f"optimizer_{epoch}.pt", "optimizer")
    result = inspect_json(run_dir)
    run = _only_run(result)
    assert _by_index(run)[2]["status"] == "incomplete"
    assert run["resume"]["index"] == 3
    assert [f["index"] for f in result.json["findings"] if f["code"] == "CKD102"] == [2]


# --- long runs in the human table -----------------------------------------------------------


def test_25_checkpoints_show_newest_20(cli, inspect_json, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for epoch in range(1, 26):
        _save(run_dir / f"model_{epoch}.pt")
    human = cli("inspect", run_dir)
    assert human.exit_code == 0
    rows = [int(m[1]) for m in re.finditer(r"^\s*(\d+)\s+model_\d+\.pt\b", human.stdout, re.MULTILINE)]
    assert rows == list(range(6, 26))
    hidden = [line for line in human.stdout.splitlines() if re.search(r"\b5\b", line) and "not shown" in line]
    assert len(hidden) == 1, human.stdout
    assert "Resume from epoch 25: model_25.pt" in human.stdout

    every = cli("inspect", "--all", run_dir)
    rows = [int(m[1]) for m in re.finditer(r"^\s*(\d+)\s+model_\d+\.pt\b", every.stdout, re.MULTILINE)]
    assert rows == list(range(1, 26))
    assert "not shown" not in every.stdout

    # JSON always lists every checkpoint
    assert [c["index"] for c in _only_run(inspect_json(run_dir))["checkpoints"]] == list(range(1, 26))


def test_20_checkpoints_show_all_without_a_count(cli, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for epoch in range(1, 21):
        _save(run_dir / f"model_{epoch}.pt")
    human = cli("inspect", run_dir)
    rows = [int(m[1]) for m in re.finditer(r"^\s*(\d+)\s+model_\d+\.pt\b", human.stdout, re.MULTILINE)]
    assert rows == list(range(1, 21))
    assert "not shown" not in human.stdout


# --- torch archives under burn's names ------------------------------------------------------


def test_bin_files_written_by_torch_are_torch_not_burn(inspect_json, cli, tmp_path: Path) -> None:
    run_dir = tmp_path / "checkpoint"
    for epoch in (3, 4):
        _save(run_dir / f"model-{epoch}.bin")
        _save(run_dir / f"optim-{epoch}.bin", "optimizer")
        _save(run_dir / f"scheduler-{epoch}.bin", "scheduler")
    result = inspect_json(run_dir)
    run = _only_run(result)
    assert run["layout"] == "torch"
    files = [f for c in run["checkpoints"] for f in c["files"]]
    assert len(files) == 6
    assert {f["format"] for f in files} == {"torch-zip"}
    assert _roles(_by_index(run)[3]) == {"model-3.bin": "model", "optim-3.bin": "optimizer", "scheduler-3.bin": "scheduler"}
    assert run["resume"]["index"] == 4
    # no burn advice about recorder-era files for a torch run
    assert [f["code"] for f in result.json["findings"]] == []
    human = cli("inspect", run_dir)
    assert "torch" in human.stdout.splitlines()[0]
    assert "burn" not in human.stdout.splitlines()[0]


def test_bin_files_torch_run_with_one_burn_style_missing_optimizer(inspect_json, tmp_path: Path) -> None:
    run_dir = tmp_path / "checkpoint"
    for epoch in (1, 2):
        _save(run_dir / f"model-{epoch}.bin")
        _save(run_dir / f"optim-{epoch}.bin", "optimizer")
    _save(run_dir / "model-3.bin")
    result = inspect_json(run_dir)
    run = _only_run(result)
    assert run["layout"] == "torch"
    assert _by_index(run)[3]["status"] == "incomplete"
    assert run["resume"]["index"] == 2
    assert [f["index"] for f in result.json["findings"] if f["code"] == "CKD101"] == [3]


def test_bin_file_with_garbage_in_a_torch_run_is_not_clean(inspect_json, tmp_path: Path) -> None:
    """In a run of torch archives, a ``.bin`` that holds no recognisable data is not a checkpoint.

    (burn's bincode has no signature, so unknown bytes are only acceptable in a burn run.)
    """
    run_dir = tmp_path / "run"
    for epoch in (1, 2, 3):
        _save(run_dir / f"model_{epoch}.bin")
        _save(run_dir / f"optimizer_{epoch}.bin", "optimizer")
    garbage = run_dir / "model_3.bin"
    garbage.write_bytes(b"\x07not a torch archive, just bytes\x00" * 50)
    result = inspect_json(run_dir)
    run = _only_run(result)
    assert run["layout"] == "torch"
    flagged = [f for f in result.json["findings"] if f["path"] == str(garbage) and f["severity"] == "error"]
    assert flagged, result.json["findings"]
    assert _by_index(run)[3]["status"] != "complete"
    assert run["resume"]["index"] == 2


def test_torchscript_archives_are_torch_archives(tmp_path, inspect_json):
    """torch.jit.save may lead with `<prefix>/extra/` or `code/` members, not data.pkl."""
    torch = pytest.importorskip("torch")
    folder = tmp_path / "run"
    folder.mkdir()
    for epoch in (1, 2):
        torch.jit.save(
            torch.jit.script(torch.nn.Linear(2, 2)), str(folder / f"model_{epoch}.pt"), _extra_files={"producer_info.json": "{}"}
        )
    report = inspect_json(folder).json
    assert report["findings"] == []
    assert {f["format"] for c in report["runs"][0]["checkpoints"] for f in c["files"]} == {"torch-zip"}


def test_a_stray_staging_file_beside_whole_files_is_a_leftover_not_a_lost_epoch(inspect_json, cli, tmp_path: Path) -> None:
    """Issue 14, item 9: `model_27.pt.tmp` beside whole model/optimizer/scheduler_27.pt cost the epoch."""
    run_dir = tmp_path / "run"
    for epoch in (26, 27, 28):
        for role, name in (("model", "model"), ("optimizer", "optimizer"), ("scheduler", "scheduler")):
            _save(run_dir / f"{name}_{epoch}.pt", role)
    (run_dir / "model_27.pt.tmp").write_bytes((run_dir / "model_27.pt").read_bytes()[:300])  # a repeated save's leftover
    (run_dir / "model_28.pt").rename(run_dir / "model_28.pt.tmp")  # a save of 28 cut short: no model_28.pt
    old = time.time() - 86400
    for path in run_dir.iterdir():
        os.utime(path, (old, old))
    result = inspect_json(run_dir)
    run = _only_run(result)
    assert {c["index"]: c["status"] for c in run["checkpoints"]} == {26: "complete", 27: "complete", 28: "partial"}
    assert run["resume"]["index"] == 27
    assert any(f["code"] == "CKD202" and f["path"].endswith("model_27.pt.tmp") for f in result.json["findings"])
    plan = cli("repair", "--dry-run", "--json", run_dir).json["plan"]
    moved = sorted(Path(path).name for item in plan if item["action"] == "quarantine" for path in item["paths"])
    assert not {"model_27.pt", "optimizer_27.pt", "scheduler_27.pt"} & set(moved), "repair never takes the resume point's files"
    assert "model_27.pt.tmp" in moved, "only the leftover of the resume point goes"
    assert cli("repair", "--yes", run_dir).exit_code == 0
    after = inspect_json(run_dir)
    assert _only_run(after)["resume"]["index"] == 27 and not [f for f in after.json["findings"] if f["code"] == "CKD202"]
    assert torch.load(run_dir / "model_27.pt", weights_only=True).keys() == {"weight", "bias"}, "torch loads what is kept"


# --- issue 30, item 10: a legacy (non-zip) torch.save cut short -----------------------------------


def _legacy_run(run_dir: Path, epochs: int) -> None:
    """A hand-made training loop that saves model and optimizer every epoch in torch's legacy format
    (``_use_new_zipfile_serialization=False``): each file (57 KB) is longer than what inspect reads of
    it, and its pickles lie in the first 16 KiB."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    optimizer = torch.optim.Adam(model.parameters())
    run_dir.mkdir(parents=True)
    for epoch in range(1, epochs + 1):
        optimizer.zero_grad()
        model(torch.randn(4, 64)).pow(2).mean().backward()
        optimizer.step()
        state = {"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save(state, run_dir / f"checkpoint_epoch_{epoch}.pt", _use_new_zipfile_serialization=False)


def _loads(path: Path) -> bool:
    try:
        torch.load(path, weights_only=True)
    except Exception:
        return False
    return True


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(lambda size: 1500, id="inside the object pickle"),
        pytest.param(lambda size: 3000, id="inside the first storage"),
        pytest.param(lambda size: HEAD + TAIL + 1000, id="inside the storages, past what inspect reads"),
        pytest.param(lambda size: size - 1, id="one byte short"),
    ],
)
def test_a_legacy_save_cut_short_is_partial_and_prune_keeps_the_one_torch_loads(inspect_json, cli, tmp_path: Path, cut) -> None:
    run_dir = tmp_path / "run"
    _legacy_run(run_dir, 4)
    newest = run_dir / "checkpoint_epoch_4.pt"
    whole = newest.read_bytes()
    assert len(whole) > HEAD + TAIL and _loads(newest)
    newest.write_bytes(whole[: cut(len(whole))])
    assert not _loads(newest)  # what torch makes of it
    old = time.time() - 86400
    for path in run_dir.iterdir():
        os.utime(path, (old, old))

    result = inspect_json(run_dir)
    run = _only_run(result)
    assert (run["layout"], _by_index(run)[4]["status"], run["resume"]["index"]) == ("torch", "partial", 3)
    assert [f["path"] for f in result.json["findings"] if f["code"] == "CKD203"] == [str(newest)]
    assert cli("prune", "--yes", "--keep-last", "1", run_dir).exit_code == 0
    remaining = sorted(run_dir.glob("checkpoint_epoch_*.pt"))
    assert [path.name for path in remaining if _loads(path)] == ["checkpoint_epoch_3.pt"]  # torch resumes from it
    assert newest in remaining  # a cut save newer than the resume point is left to repair


def test_a_legacy_save_whose_pickles_run_past_what_inspect_reads_is_cut_short_to_verify(cli, tmp_path: Path) -> None:
    """Its object pickle (150 layers and their Adam state) is longer than the 16 KiB inspect reads of
    a file's start: where its storages end is only known once it is read whole."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(150)))
    optimizer = torch.optim.Adam(model.parameters())
    for epoch in (1, 2):
        model(torch.randn(2, 16)).sum().backward()
        optimizer.step()
        state = {"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save(state, run_dir / f"checkpoint_epoch_{epoch}.pt", _use_new_zipfile_serialization=False)
    newest = run_dir / "checkpoint_epoch_2.pt"
    newest.write_bytes(newest.read_bytes()[:-1000])
    assert not _loads(newest)
    report = cli("verify", "--json", run_dir).json
    assert [f["path"] for f in report["findings"] if f["code"] == "CKD203"] == [str(newest)]
    assert report["runs"][0]["resume"]["index"] == 1
