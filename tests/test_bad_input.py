"""Bad input through the CLI: paths and folders a real user points ckptdoctor at by mistake.

Every case goes through ``ckptdoctor inspect`` (human and ``--json``) and must finish with a
report or one clear line, never a traceback, a hang or a crash.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy
import pytest
from safetensors import numpy as safetensors_numpy

import ckptdoctor.discover
from ckptdoctor.readers import files
from ckptdoctor.readers.sample import FileSample
from ckptdoctor.testing import SMALL_MODEL, write_burn_run


def _run(result, path: str) -> dict:
    """The one run of a JSON report whose path is ``path``."""
    runs = [r for r in result.json["runs"] if r["path"] == path]
    assert len(runs) == 1, [r["path"] for r in result.json["runs"]]
    return runs[0]


def _checkpoint(run: dict, index: int) -> dict:
    found = [c for c in run["checkpoints"] if c["index"] == index]
    assert len(found) == 1, [c["index"] for c in run["checkpoints"]]
    return found[0]


def _findings(result, code: str) -> list[dict]:
    return [f for f in result.json["findings"] if f["code"] == code]


def _no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text
        assert "internal error" not in text


# --- a path that does not exist -------------------------------------------------------------


def test_missing_path_exits_2_with_one_line(cli, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-run"
    result = cli("inspect", missing)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert str(missing) in lines[0]
    assert "no such file" in lines[0].lower()
    assert result.stdout.strip() == ""
    _no_traceback(result.stdout, result.stderr)


def test_missing_path_json_exits_2_with_one_line(cli, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-run"
    result = cli("inspect", "--json", missing)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert str(missing) in lines[0]
    # the JSON report is still a valid document and names the path it could not scan
    document = result.json
    assert document["runs"] == []
    assert [e["path"] for e in document.get("errors", [])] == [str(missing)]
    _no_traceback(result.stdout, result.stderr)


def test_missing_path_beside_a_good_run_still_exits_2(cli, tmp_path: Path) -> None:
    good = tmp_path / "good"
    write_burn_run(good, [1, 2])
    result = cli("inspect", "--json", good, tmp_path / "gone")
    assert result.exit_code == 2
    assert [r["path"] for r in result.json["runs"]] == [str(good)]
    assert str(tmp_path / "gone") in result.stderr


# --- an empty folder ------------------------------------------------------------------------


def test_empty_folder_human(cli, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("inspect", empty)
    assert result.exit_code == 0
    assert "no checkpoints found" in result.stderr.lower()
    assert str(empty) in result.stderr
    _no_traceback(result.stdout, result.stderr)


def test_empty_folder_json(cli, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("inspect", "--json", empty)
    assert result.exit_code == 0
    assert result.json["runs"] == []
    assert result.json["findings"] == []
    _no_traceback(result.stdout, result.stderr)


def test_empty_folder_json_still_says_so_on_stderr(cli, tmp_path: Path) -> None:
    """stdout carries the report; the hint that nothing was found belongs on stderr in every format."""
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("inspect", "--json", empty)
    assert result.exit_code == 0
    assert "no checkpoints found" in result.stderr.lower()


# --- a folder that cannot be listed ---------------------------------------------------------


@pytest.fixture
def denied_subfolder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A parent holding a healthy burn run and a folder that raises EACCES when listed.

    Tests run as root, which chmod cannot stop, so the listing itself is made to fail.
    """
    parent = tmp_path / "runs"
    good = parent / "exp1" / "checkpoint"
    write_burn_run(good, [1, 2, 3])
    denied = parent / "exp2" / "checkpoint"
    write_burn_run(denied, [1])
    inside = good / "archive"  # a folder inside the readable run itself
    write_burn_run(inside, [1])
    real_list = ckptdoctor.discover._list  # the compiled lister or os.scandir: either is denied here

    def listing(os_dir: str, shown_dir: str) -> object:
        if os_dir in (os.fspath(denied), os.fspath(inside)):
            raise PermissionError(13, "Permission denied", os_dir)
        return real_list(os_dir, shown_dir)

    monkeypatch.setattr(ckptdoctor.discover, "_list", listing)
    return parent, denied


def test_permission_denied_subfolder_json(inspect_json, denied_subfolder) -> None:
    parent, denied = denied_subfolder
    result = inspect_json(parent)
    # the readable run is still reported in full
    run = _run(result, str(parent / "exp1" / "checkpoint"))
    assert [c["index"] for c in run["checkpoints"]] == [1, 2, 3]
    assert run["resume"]["index"] == 3
    # nothing from the unreadable folder is reported as a run
    assert all(not r["path"].startswith(str(denied)) for r in result.json["runs"])
    unreadable = _findings(result, "CKD215")  # issue 32: permission denied is access-denied, not damage
    assert unreadable, result.json["findings"]
    assert any(f["path"] == str(denied) and str(denied) in f["message"] for f in unreadable)
    inside = parent / "exp1" / "checkpoint" / "archive"
    assert any(f["path"] == str(inside) and str(inside) in f["message"] for f in unreadable)
    assert all(f["severity"] == "error" for f in unreadable)
    assert result.exit_code == 1
    _no_traceback(result.stdout, result.stderr)


def test_permission_denied_subfolder_human(cli, denied_subfolder) -> None:
    parent, denied = denied_subfolder
    result = cli("inspect", parent)
    assert result.exit_code == 1
    assert "CKD215" in result.stdout and "CKD211" not in result.stdout
    assert str(denied) in result.stdout
    assert "Resume from epoch 3" in result.stdout
    _no_traceback(result.stdout, result.stderr)


# --- symlink loops --------------------------------------------------------------------------


def _inspect_subprocess(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """Run the real console entry point with a timeout, so that a loop fails rather than hangs."""
    return subprocess.run(
        [sys.executable, "-m", "ckptdoctor", "inspect", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
        check=False,
    )


@pytest.fixture
def looped_run(tmp_path: Path) -> Path:
    run = tmp_path / "artifacts"
    checkpoint = run / "checkpoint"
    write_burn_run(checkpoint, [1, 2])
    # a folder symlink back to its parent: walking into it would never end
    (checkpoint / "again").symlink_to("..", target_is_directory=True)
    (run / "self").symlink_to(".", target_is_directory=True)
    # a file symlink loop named like a checkpoint
    (checkpoint / "model-3.bpk").symlink_to("optim-3.bpk")
    (checkpoint / "optim-3.bpk").symlink_to("model-3.bpk")
    return run


@pytest.mark.slow
def test_symlink_loop_json_finishes(looped_run: Path) -> None:
    import json

    done = _inspect_subprocess("--json", looped_run)
    _no_traceback(done.stdout, done.stderr)
    assert done.returncode in (0, 1), done.stderr
    document = json.loads(done.stdout)
    paths = [r["path"] for r in document["runs"]]
    # the run is reported once, not once per way of reaching it through the loop
    assert paths == [str(looped_run / "checkpoint")]
    run = document["runs"][0]
    assert run["resume"]["index"] == 2
    epoch3 = _checkpoint(run, 3)
    assert epoch3["status"] != "complete"
    flagged = {f["path"] for f in document["findings"] if f["severity"] == "error"}
    assert str(looped_run / "checkpoint" / "model-3.bpk") in flagged
    assert str(looped_run / "checkpoint" / "optim-3.bpk") in flagged


@pytest.mark.slow
def test_symlink_loop_human_finishes(looped_run: Path) -> None:
    done = _inspect_subprocess(looped_run)
    _no_traceback(done.stdout, done.stderr)
    assert done.returncode in (0, 1), done.stderr
    assert "Resume from epoch 2" in done.stdout


# --- non-UTF-8 file names -------------------------------------------------------------------


@pytest.fixture
def undecodable(tmp_path: Path) -> tuple[str, str]:
    """A burn run in an undecodable folder (with an undecodable stray file), and a safetensors run
    whose newest checkpoint's name is not UTF-8."""
    root = os.fsencode(tmp_path)
    burn = os.path.join(root, b"run\xfe", b"checkpoint")
    os.makedirs(burn)
    write_burn_run(os.fsdecode(burn), [1, 2])
    with open(os.path.join(burn, b"model-3\xff.bpk"), "wb") as handle:
        handle.write(SMALL_MODEL.model_record())
    weights = os.path.join(root, b"weights")
    os.makedirs(weights)
    for name in (b"model_1.safetensors", b"model_2.safetensors", b"model_\xff_3.safetensors"):
        with open(os.path.join(weights, name), "wb") as handle:
            handle.write(safetensors_numpy.save({"w": numpy.zeros(4, dtype=numpy.float32)}))
    return os.fsdecode(tmp_path), os.fsdecode(burn)


def test_non_utf8_names_json(inspect_json, undecodable) -> None:
    root, burn = undecodable
    shown = burn.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    result = inspect_json(root)
    assert result.exit_code in (0, 1)
    _no_traceback(result.stdout, result.stderr)
    text = result.stdout
    text.encode("utf-8")  # the report is valid UTF-8 (json.loads already parsed it)
    runs = result.json["runs"]
    assert len(runs) == 2
    run, weights = runs
    assert run["layout"] == "burn"
    assert run["path"] == shown
    assert run["path"].endswith("run\\xfe/checkpoint")
    assert [c["index"] for c in run["checkpoints"]] == [1, 2]
    assert run["resume"]["index"] == 2
    # the undecodable file is listed (never dropped) with its byte escaped
    listed = [f["path"] for f in run["other_files"] + run["loose_files"]]
    assert any(p.endswith("model-3\\xff.bpk") for p in listed), listed
    all_paths = [f["path"] for c in run["checkpoints"] for f in c["files"]] + listed
    assert all("\udcff" not in p and "\udcfe" not in p for p in all_paths)
    # a checkpoint whose name is not UTF-8 is opened by its real bytes and judged by content
    assert weights["layout"] == "safetensors"
    newest = _checkpoint(weights, 3)
    (file,) = newest["files"]
    assert file["path"].endswith("weights/model_\\xff_3.safetensors")
    assert file["format"] == "safetensors" and file["problems"] == []
    assert weights["resume"]["index"] == 3


def test_non_utf8_names_human(cli, undecodable) -> None:
    root, _burn = undecodable
    result = cli("inspect", root)
    assert result.exit_code in (0, 1)
    _no_traceback(result.stdout, result.stderr)
    assert "run\\xfe" in result.stdout
    assert "Resume from epoch 2" in result.stdout
    assert "Resume from epoch 3: model_\\xff_3.safetensors" in result.stdout
    assert "\ufffd" not in result.stdout


def test_non_utf8_checkpoint_name_is_read(inspect_json, tmp_path: Path) -> None:
    """A checkpoint file whose name is not UTF-8 is opened by its real bytes, and judged by content."""
    root = os.fsencode(tmp_path)
    folder = os.path.join(root, b"ckpt\xff")
    os.makedirs(folder)
    for epoch in (1, 2):
        for role, record in (
            ("model", SMALL_MODEL.model_record()),
            ("optim", SMALL_MODEL.optimizer_record()),
            ("scheduler", SMALL_MODEL.scheduler_record()),
        ):
            with open(os.path.join(folder, f"{role}-{epoch}.bpk".encode()), "wb") as handle:
                handle.write(record if epoch == 1 or role != "optim" else record[:100])
    result = inspect_json(os.fsdecode(folder))
    _no_traceback(result.stdout, result.stderr)
    run = result.json["runs"][0]
    assert run["path"].endswith("ckpt\\xff")
    assert _checkpoint(run, 1)["status"] == "complete"
    assert _checkpoint(run, 2)["status"] == "partial"
    truncated = _findings(result, "CKD203")
    assert [f["path"] for f in truncated] == [run["path"] + "/optim-2.bpk"]


def test_non_utf8_name_in_findings(inspect_json, cli, tmp_path: Path) -> None:
    """A finding about a file whose name is not UTF-8 names it the same way the paths do."""
    folder = os.path.join(os.fsencode(tmp_path), b"weights")
    os.makedirs(folder)
    good = safetensors_numpy.save({"w": numpy.zeros(16, dtype=numpy.float32)})
    with open(os.path.join(folder, b"model_1.safetensors"), "wb") as handle:
        handle.write(good)
    with open(os.path.join(folder, b"model_\xff_2.safetensors"), "wb") as handle:
        handle.write(good[:-10])
    result = inspect_json(os.fsdecode(folder))
    _no_traceback(result.stdout, result.stderr)
    (finding,) = [f for f in result.json["findings"] if f["code"] == "CKD203"]
    assert finding["path"].endswith("model_\\xff_2.safetensors")
    for text in (finding["message"], *finding["fixes"]):
        assert "\udcff" not in text, text
    assert "model_\\xff_2.safetensors" in finding["message"]

    human = cli("inspect", os.fsdecode(folder))
    assert human.exit_code == 1
    _no_traceback(human.stdout, human.stderr)
    assert "model_\\xff_2.safetensors" in human.stdout


# --- a folder named like a checkpoint --------------------------------------------------------


def test_folder_named_like_a_checkpoint(inspect_json, cli, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    write_burn_run(checkpoint, [1, 2, 3, 4])
    write_burn_run(checkpoint, [5], roles=("model", "scheduler"))
    (checkpoint / "optim-5.bpk").mkdir()
    result = inspect_json(checkpoint)
    _no_traceback(result.stdout, result.stderr)
    run = _run(result, str(checkpoint))
    epoch5 = _checkpoint(run, 5)
    assert epoch5["status"] != "complete"
    assert run["resume"]["index"] == 4
    folder = str(checkpoint / "optim-5.bpk")
    assert any(f["path"] == folder for f in _findings(result, "CKD205")), result.json["findings"]
    assert result.exit_code == 1

    human = cli("inspect", checkpoint)
    _no_traceback(human.stdout, human.stderr)
    assert "Resume from epoch 4" in human.stdout
    assert "CKD205" in human.stdout


# --- 0-byte files ---------------------------------------------------------------------------


@pytest.mark.parametrize("empty_role", ["model", "optim", "scheduler"])
def test_zero_byte_file(inspect_json, tmp_path: Path, empty_role: str) -> None:
    checkpoint = tmp_path / "checkpoint"
    write_burn_run(checkpoint, [1, 2, 3])
    (checkpoint / f"{empty_role}-3.bpk").write_bytes(b"")
    result = inspect_json(checkpoint)
    run = _run(result, str(checkpoint))
    assert _checkpoint(run, 3)["status"] == "partial"
    assert _checkpoint(run, 2)["status"] == "complete"
    assert run["resume"]["index"] == 2
    empty = _findings(result, "CKD201")
    assert [f["path"] for f in empty] == [str(checkpoint / f"{empty_role}-3.bpk")]
    assert empty[0]["index"] == 3
    assert empty[0]["severity"] == "error"
    assert result.exit_code == 1


def test_zero_byte_torch_file(inspect_json, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for epoch in (1, 2):
        torch.save({"w": torch.zeros(3)}, run_dir / f"model_{epoch}.pt")
        torch.save({"state": {}}, run_dir / f"optimizer_{epoch}.pt")
    (run_dir / "optimizer_2.pt").write_bytes(b"")
    result = inspect_json(run_dir)
    run = _run(result, str(run_dir))
    assert _checkpoint(run, 2)["status"] == "partial"
    assert run["resume"]["index"] == 1
    assert [f["path"] for f in _findings(result, "CKD201")] == [str(run_dir / "optimizer_2.pt")]


# --- a file that vanishes during the scan -----------------------------------------------------


def test_file_vanishes_during_scan(inspect_json, cli, tmp_path: Path, monkeypatch) -> None:
    checkpoint = tmp_path / "checkpoint"
    write_burn_run(checkpoint, [1, 2, 3])
    victim = checkpoint / "optim-3.bpk"
    real_open = FileSample.open

    def open_after_delete(os_path, *args, **kwargs):
        if os.fspath(os_path) == os.fspath(victim) and victim.exists():
            victim.unlink()
        return real_open(os_path, *args, **kwargs)

    monkeypatch.setattr(FileSample, "open", open_after_delete)
    real_edges = files.read_edges

    def bulk_after_delete(paths, *args, **kwargs):  # the bulk reader opens in C, past the hook above
        if os.fsencode(victim) in paths and victim.exists():
            victim.unlink()
        return real_edges(paths, *args, **kwargs)

    monkeypatch.setattr(files, "read_edges", bulk_after_delete)
    result = inspect_json(checkpoint)
    _no_traceback(result.stdout, result.stderr)
    assert not victim.exists(), "the test's hook never ran: the scan did not open the file"
    run = _run(result, str(checkpoint))
    assert _checkpoint(run, 3)["status"] != "complete"
    assert run["resume"]["index"] == 2
    vanished = [f for f in _findings(result, "CKD211") if f["path"] == str(victim)]
    assert vanished, result.json["findings"]
    assert "vanish" in vanished[0]["message"]
    assert result.exit_code == 1


# --- huge declared headers ------------------------------------------------------------------


def _peak_bytes_of(call) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_huge_burnpack_metadata_size(inspect_json, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    write_burn_run(checkpoint, [1, 2])
    huge = checkpoint / "model-2.bpk"
    huge.write_bytes(struct.pack("<4sHI", b"NRUB", 1, 2**32 - 1) + b"\xa1" + bytes(300))
    results = []
    peak = _peak_bytes_of(lambda: results.append(inspect_json(checkpoint)))
    assert peak < 64 * 1024 * 1024, f"peak {peak} bytes for a 311-byte file"
    result = results[0]
    flagged = [f for f in result.json["findings"] if f["path"] == str(huge)]
    assert flagged and all(f["severity"] == "error" for f in flagged)
    assert _checkpoint(_run(result, str(checkpoint)), 2)["status"] != "complete"
    assert result.json["runs"][0]["resume"]["index"] == 1


def test_huge_safetensors_header_length(inspect_json, tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    from safetensors.numpy import save_file

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for step in (100, 200):
        save_file({"w": np.zeros(8, dtype=np.float32)}, str(run_dir / f"model_{step}.safetensors"))
    huge = run_dir / "model_200.safetensors"
    huge.write_bytes(struct.pack("<Q", 2**63) + b'{"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}}')
    big_but_small = run_dir / "model_300.safetensors"
    big_but_small.write_bytes(struct.pack("<Q", 99_000_000) + b'{"w":' + bytes(100))
    results = []
    peak = _peak_bytes_of(lambda: results.append(inspect_json(run_dir)))
    assert peak < 64 * 1024 * 1024, f"peak {peak} bytes for files of a few hundred bytes"
    result = results[0]
    run = _run(result, str(run_dir))
    for path in (huge, big_but_small):
        flagged = [f for f in result.json["findings"] if f["path"] == str(path)]
        assert flagged and any(f["severity"] == "error" for f in flagged), (path, result.json["findings"])
    assert run["resume"]["index"] == 100


# --- one file given as the path -------------------------------------------------------------


def test_single_file_is_judged_alone(inspect_json, cli, tmp_path: Path) -> None:
    checkpoint = tmp_path / "run" / "checkpoint"
    write_burn_run(checkpoint, [1, 2, 3])
    write_burn_run(checkpoint, [4], roles=("model",))  # epoch 4 has no optimizer nor scheduler
    target = checkpoint / "model-4.bpk"

    # as part of the run, epoch 4 is incomplete ...
    whole = inspect_json(checkpoint)
    assert _checkpoint(_run(whole, str(checkpoint)), 4)["status"] == "incomplete"
    assert _findings(whole, "CKD101")

    # ... but named alone, only its content is judged
    result = inspect_json(target)
    assert result.exit_code == 0, result.json["findings"]
    assert result.json["findings"] == []
    runs = result.json["runs"]
    assert len(runs) == 1
    files = [f for c in runs[0]["checkpoints"] for f in c["files"]]
    assert [f["path"] for f in files] == [str(target)]
    assert files[0]["format"] == "burnpack"
    assert runs[0]["checkpoints"][0]["status"] == "complete"
    assert runs[0]["checkpoints"][0]["missing"] == []

    human = cli("inspect", target)
    assert human.exit_code == 0
    assert "CKD101" not in human.stdout and "CKD103" not in human.stdout
    _no_traceback(human.stdout, human.stderr)


def test_single_truncated_file_is_flagged(inspect_json, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    write_burn_run(checkpoint, [1])
    target = checkpoint / "optim-1.bpk"
    target.write_bytes(target.read_bytes()[:-200])
    result = inspect_json(target)
    assert result.exit_code == 1
    assert [(f["code"], f["path"]) for f in result.json["findings"]] == [("CKD203", str(target))]


def test_single_file_that_is_not_a_checkpoint_is_not_called_clean(inspect_json, tmp_path: Path) -> None:
    """Named alone, a text file is judged by its content: never a clean, resumable checkpoint."""
    notes = tmp_path / "notes.txt"
    notes.write_text("Permission is hereby granted, free of charge, to any person ...\n" * 10)
    result = inspect_json(notes)
    assert result.exit_code in (0, 1)
    complete = [c for r in result.json["runs"] for c in r["checkpoints"] if c["status"] == "complete"]
    flagged = [f for f in result.json["findings"] if f["path"] == str(notes)]
    assert not complete or flagged, result.json


# --- a parent of several runs ---------------------------------------------------------------


def test_parent_of_several_runs_in_natural_order(inspect_json, cli, tmp_path: Path) -> None:
    parent = tmp_path / "artifacts"
    for name, epochs in (("run-10", [1, 2]), ("run-2", [1, 2, 3]), ("run-9", [7])):
        write_burn_run(parent / name / "checkpoint", epochs)
    result = inspect_json(parent)
    assert result.exit_code == 0
    paths = [r["path"] for r in result.json["runs"]]
    assert paths == [
        str(parent / "run-2" / "checkpoint"),
        str(parent / "run-9" / "checkpoint"),
        str(parent / "run-10" / "checkpoint"),
    ]
    assert [r["resume"]["index"] for r in result.json["runs"]] == [3, 7, 2]
    assert all(r["layout"] == "burn" for r in result.json["runs"])

    human = cli("inspect", parent)
    assert human.exit_code == 0
    out = human.stdout
    assert out.index(f"{parent}/run-2/checkpoint") < out.index(f"{parent}/run-9/checkpoint")
    assert out.index(f"{parent}/run-9/checkpoint") < out.index(f"{parent}/run-10/checkpoint")


@pytest.mark.slow
@pytest.mark.usefixtures("no_retries")
@pytest.mark.parametrize("url", ["s3://bucket/run", "gs://bucket/runs/exp1", "az://container/run"])
@pytest.mark.parametrize(
    "command", [["inspect"], ["verify"], ["diskcheck"], ["prune", "--keep-last", "1", "--dry-run"], ["repair", "--dry-run"]]
)
def test_an_object_store_url_is_never_measured_or_acted_on_as_the_local_disk(cli, url: str, command: list[str]) -> None:
    """Issue 14, item 14: `diskcheck s3://…` used to answer with the free space of `/`. A store
    that cannot be reached is one line and exit 2 in every command, never the local disk."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    env = {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AZURE_STORAGE_ACCOUNT_NAME": "acct",
        "AZURE_STORAGE_ACCOUNT_KEY": "a2V5",
    }
    result = cli(*command, url, "--endpoint-url", f"http://127.0.0.1:{port}", env=env)
    assert result.exit_code == 2, result.stdout
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "free" not in result.stdout


def test_a_local_folder_named_like_a_url_is_still_read(tmp_path, cli, monkeypatch) -> None:
    from ckptdoctor.testing import write_burn_run

    write_burn_run(tmp_path / "s3:" / "bucket" / "run", range(1, 3))
    monkeypatch.chdir(tmp_path)
    result = cli("inspect", "--json", "s3://bucket/run")
    assert result.exit_code == 0, result.stderr
    assert [run["resume"]["index"] for run in result.json["runs"]] == [2]


@pytest.mark.parametrize(
    "command",
    [["inspect"], ["verify"], ["verify", "--deep"], ["prune", "--dry-run", "--keep-last", "1"], ["repair", "--dry-run"], ["diskcheck"]],
)
def test_a_newline_in_a_files_name_is_a_name_like_any_other(cli, tmp_path: Path, command: list[str]) -> None:
    """An attack on issue 36: a checkpoint named ``mo\\ndel_3.safetensors`` ended every command
    with an internal error (the name's leading words were matched line by line)."""
    weights = {"w": numpy.ones(4, numpy.float32)}
    for name in ("model_1.safetensors", "mo\ndel_3.safetensors", "model_\n4.safetensors", "\n5.safetensors"):
        safetensors_numpy.save_file(weights, str(tmp_path / name))
    result = cli(*command, "--json", tmp_path)
    assert result.exit_code in (0, 1) and "internal error" not in result.stdout + result.stderr, result.stderr
    if command[0] in ("inspect", "verify"):
        assert _checkpoint(_run(result, str(tmp_path)), 1)["status"] == "complete"
