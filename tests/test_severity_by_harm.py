"""Severity follows harm (issue 14, item 13): a broken checkpoint older than the resume point is
dead weight — a warning whose fix is the prune that deletes it — while what a resume would hit
stays an error."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ckptdoctor.rules.registry import RULES, find_rule
from ckptdoctor.testing import write_hf_checkpoints

torch = pytest.importorskip("torch")


def torch_run(folder: Path, epochs: range) -> Path:
    """Plain torch epochs: ``model_N.pt`` and ``optimizer_N.pt`` from a real model and optimizer."""
    folder.mkdir(parents=True, exist_ok=True)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    for epoch in epochs:
        torch.save(model.state_dict(), folder / f"model_{epoch}.pt")
        torch.save(optimizer.state_dict(), folder / f"optimizer_{epoch}.pt")
    return folder


def cut(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def by_index(report: dict) -> dict[int | None, set[str]]:
    severities: dict[int | None, set[str]] = {}
    for finding in report["findings"]:
        severities.setdefault(finding["index"], set()).add(finding["severity"])
    return severities


def test_broken_epochs_behind_the_resume_point_are_warnings_and_the_named_prune_removes_them(tmp_path, cli):
    run = torch_run(tmp_path / "run", range(1, 13))
    for epoch in range(1, 6):
        cut(run / f"model_{epoch}.pt")
    (run / "optimizer_7.pt").unlink()  # between two complete epochs: still behind epoch 12

    result = cli("inspect", "--json", run)
    assert result.exit_code == 0, result.stdout  # nothing a resume would hit
    report = result.json
    assert report["runs"][0]["resume"]["index"] == 12
    assert set(by_index(report)) == {1, 2, 3, 4, 5, 7}
    assert all(f["severity"] == "warning" for f in report["findings"])
    (fix,) = {f["fixes"][0] for f in report["findings"]}
    assert "restore" not in fix.lower() and "epoch 12" in fix

    # do what the fix says, as a user would: its command, with --yes for the dry run
    command = shlex.split(fix[fix.index("`") + 1 : fix.index("`", fix.index("`") + 1)])
    assert command[:2] == ["ckptdoctor", "prune"] and "--dry-run" in command
    command = ["--yes" if arg == "--dry-run" else arg for arg in command[1:]]
    done = subprocess.run([sys.executable, "-m", "ckptdoctor", *command, "--min-age", "0"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    left = sorted(p.name for p in run.iterdir() if p.suffix == ".pt")
    kept = [6, 8, 9, 10, 11, 12]
    assert left == sorted(f"{role}_{e}.pt" for e in kept for role in ("model", "optimizer"))
    after = cli("inspect", "--json", run).json
    assert after["findings"] == [] and after["runs"][0]["resume"]["index"] == 12
    # and the framework agrees the resume point loads
    model = torch.nn.Linear(4, 2)
    model.load_state_dict(torch.load(run / "model_12.pt", weights_only=True))
    optimizer = torch.optim.AdamW(model.parameters())
    optimizer.load_state_dict(torch.load(run / "optimizer_12.pt", weights_only=True))


def test_what_the_resume_would_hit_stays_an_error(tmp_path, inspect_json):
    run = torch_run(tmp_path / "run", range(1, 6))
    cut(run / "model_1.pt")
    cut(run / "model_5.pt")  # newer than the resume point: a resume from the latest loads it
    result = inspect_json(run)
    assert result.exit_code == 1
    assert by_index(result.json) == {1: {"warning"}, 5: {"error"}}
    assert result.json["runs"][0]["resume"]["index"] == 4


def test_with_no_resume_point_every_broken_checkpoint_is_an_error(tmp_path, inspect_json):
    run = torch_run(tmp_path / "run", range(1, 4))
    for epoch in range(1, 4):
        cut(run / f"optimizer_{epoch}.pt")
    result = inspect_json(run)
    assert result.exit_code == 1
    severities = by_index(result.json)
    assert all(severities[e] == {"error"} for e in (1, 2, 3))
    assert "CKD110" in result.codes()


def test_what_a_pointer_loads_from_a_checkpoint_stays_an_error(tmp_path, inspect_json):
    """load_best_model_at_end follows best_model_checkpoint and loads the weights from it: broken
    weights there are an error (and CKD113), a broken optimizer file is dead weight like any other."""
    run = tmp_path / "out"
    write_hf_checkpoints(run, (2, 4, 6))
    state = run / "checkpoint-6" / "trainer_state.json"
    state.write_text(json.dumps({"global_step": 6, "log_history": [], "best_model_checkpoint": str(run / "checkpoint-2")}))
    (run / "checkpoint-4" / "optimizer.pt").write_bytes(b"")
    (run / "checkpoint-2" / "optimizer.pt").write_bytes(b"")
    report = inspect_json(run).json
    assert report["runs"][0]["resume"]["index"] == 6
    assert by_index(report) == {2: {"warning"}, 4: {"warning"}}
    assert "CKD113" not in [f["code"] for f in report["findings"]]

    (run / "checkpoint-2" / "model.safetensors").write_bytes(b"")
    report = inspect_json(run).json
    severities = by_index(report)
    assert severities[2] == {"error"} and severities[4] == {"warning"}
    assert ("CKD113", "error") in {(f["code"], f["severity"]) for f in report["findings"]}


def test_an_unsafe_file_behind_the_resume_point_is_still_an_error(tmp_path, cli):
    run = torch_run(tmp_path / "run", range(1, 4))
    payload = b"\x80\x02cposix\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03."
    (run / "model_1.pt").write_bytes(payload)  # a legacy-looking pickle that runs a command
    report = cli("verify", "--json", run).json
    assert report["runs"][0]["resume"]["index"] == 3
    unsafe = [f for f in report["findings"] if f["code"] == "CKD401"]
    assert unsafe and {f["severity"] for f in unsafe} == {"error"}
    assert {f["severity"] for f in report["findings"] if f["code"] != "CKD401"} <= {"warning", "info"}


def test_the_rule_table_says_which_rules_are_lowered():
    lowered = {rule.code for rule in RULES if rule.lowered_behind_resume}
    assert {"CKD101", "CKD203", "CKD206", "CKD304"} <= lowered
    assert not any(code.startswith(("CKD4", "CKD5")) for code in lowered)
    assert find_rule("CKD401").behind_resume is None


def test_rule_pages_and_json_say_it(cli):
    page = cli("rules", "CKD203").stdout
    assert "warning on a broken checkpoint older than the resume point" in page.replace("\n", " ")
    (entry,) = cli("rules", "CKD203", "--json").json["rules"]
    assert (entry["severity"], entry["severity_behind_resume"]) == ("error", "warning")
    (unsafe,) = cli("rules", "CKD401", "--json").json["rules"]
    assert unsafe["severity_behind_resume"] == "error"


def test_damage_only_verify_sees_gets_a_prune_that_verifies(tmp_path, cli):
    """A flipped byte in an older epoch's tensor looks whole to prune's header read: the fix's
    prune must read what it keeps, or it keeps the corrupt epoch and deletes a good one."""
    import struct
    import zipfile

    run = torch_run(tmp_path / "run", range(1, 7))
    path = run / "model_2.pt"
    with zipfile.ZipFile(path) as archive:
        member = next(i for i in archive.infolist() if "/data/" in i.filename)
    data = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack_from("<HH", data, member.header_offset + 26)  # the local header's
    data[member.header_offset + 30 + name_length + extra_length] ^= 0xFF
    path.write_bytes(bytes(data))
    old = 1_000_000_000
    for file in run.iterdir():
        os.utime(file, (old, old))

    report = cli("verify", "--deep", "--json", run).json
    (finding,) = [f for f in report["findings"] if f["index"] == 2]
    assert (finding["code"], finding["severity"]) == ("CKD206", "warning")
    fix = finding["fixes"][0]
    command = shlex.split(fix[fix.index("`") + 1 : fix.index("`", fix.index("`") + 1)])
    assert "--verify" in command
    command = ["--yes" if arg == "--dry-run" else arg for arg in command[1:]]
    done = subprocess.run([sys.executable, "-m", "ckptdoctor", *command], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sorted(int(p.stem.split("_")[1]) for p in run.glob("model_*.pt")) == [1, 3, 4, 5, 6]


def test_an_attention_masks_inf_is_design_and_its_nan_is_damage(tmp_path, cli):
    """`register_buffer("causal_mask", full(-inf).triu(1))` is in every checkpoint of a healthy run:
    verify --deep must not call them all corrupt (and leave no resume point). NaN stays damage, in a
    mask as anywhere, and Inf stays damage in weights."""
    from safetensors.torch import save_file

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)
            self.register_buffer("causal_mask", torch.full((4, 4), float("-inf")).triu(1))

        def forward(self, x):
            scores = self.proj(x) @ x.transpose(-1, -2) + self.causal_mask
            return scores.softmax(-1)

    model = Attention()
    assert torch.isfinite(model(torch.ones(4, 4))).all()  # the mask works as designed
    healthy = tmp_path / "healthy"
    healthy.mkdir()
    for epoch in (1, 2):
        torch.save(
            {"model": model.state_dict(), "optimizer": torch.optim.SGD(model.parameters(), lr=0.1).state_dict()},
            healthy / f"checkpoint_{epoch}.pt",
        )
        save_file(model.state_dict(), healthy / f"model_{epoch}.safetensors")
    for path in (healthy,):
        report = cli("verify", "--deep", "--json", path).json
        assert "CKD304" not in {f["code"] for f in report["findings"]}
        assert all(run["resume"]["index"] == 2 for run in report["runs"])

    for broken, tensor, value in (("nan-mask", "causal_mask", float("nan")), ("inf-weight", "proj.weight", float("inf"))):
        run = tmp_path / broken
        run.mkdir()
        state = {k: v.clone() for k, v in model.state_dict().items()}
        state[tensor][0, 0] = value
        save_file(model.state_dict(), run / "model_1.safetensors")
        save_file(state, run / "model_2.safetensors")
        torch.save({"model": model.state_dict()}, run / "checkpoint_1.pt")
        torch.save({"model": state}, run / "checkpoint_2.pt")
        report = cli("verify", "--deep", "--json", run).json
        flagged = {Path(f["path"]).name for f in report["findings"] if f["code"] == "CKD304"}
        assert flagged == {"model_2.safetensors", "checkpoint_2.pt"}, (broken, flagged)
