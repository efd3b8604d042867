"""``repair`` and ``repair --undo`` of runs in buckets, against a real SeaweedFS (moto ignores the
conditions of CopyObject, so it cannot hold the safety semantics to their word).

A move in a bucket is a server-side copy made only while the source is the object planned, then a
delete made only while it still is; a pointer is copied aside, then rewritten only while it is the
one the plan saw. The pointer is then read the way the framework reads it (DeepSpeed's ``latest``
is a tag name it opens; Composer's ``.symlink`` object holds the remote name it downloads).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import stores
from frameworks import composer_run, deepspeed_run

from ckptdoctor import acting
from ckptdoctor.testing import write_burn_run

pytestmark = pytest.mark.slow  # real S3 servers on 127.0.0.1

pytest.importorskip("obstore")
pytest.importorskip("boto3")

NOW = ("--min-age", "0")


def _cut_newest(bucket: stores.Bucket, tmp_path: Path) -> tuple[str, dict[str, bytes]]:
    write_burn_run(tmp_path / "run", range(1, 5))
    model = tmp_path / "run" / "model-4.bpk"
    model.write_bytes(model.read_bytes()[:100])  # the save of epoch 4 was cut short
    url = bucket.upload(tmp_path / "run", "run")
    return url, {key: bucket.get(key) for key in bucket.stored()}


def _run_keys(bucket: stores.Bucket) -> list[str]:
    return [key for key in bucket.stored() if "/.ckptdoctor/" not in key]


def test_repair_moves_the_broken_newest_checkpoint_aside_and_undo_puts_it_back_byte_for_byte(
    weed_bucket: stores.Bucket, tmp_path: Path, cli: Any, inspect_json: Any
) -> None:
    url, before = _cut_newest(weed_bucket, tmp_path)
    assert inspect_json(url).json["runs"][0]["resume"]["index"] == 3
    done = cli("repair", *NOW, "--yes", url)
    assert done.exit_code == 0, done.stderr
    assert "quarantined 3 objects" in done.stdout + done.stderr
    assert not any(key.endswith("-4.bpk") for key in _run_keys(weed_bucket))
    quarantined = [key for key in weed_bucket.stored() if "/.ckptdoctor/quarantine/" in key]
    assert sorted(key.rsplit("/", 1)[1] for key in quarantined) == ["manifest.json", "model-4.bpk", "optim-4.bpk", "scheduler-4.bpk"]
    after = inspect_json(url).json
    assert after["findings"] == [] and after["runs"][0]["resume"]["index"] == 3
    undone = cli("repair", "--undo", "--yes", url)
    assert undone.exit_code == 0, undone.stderr
    assert {key: weed_bucket.get(key) for key in weed_bucket.stored()} == before  # nothing else left behind


def test_an_object_rewritten_after_the_plan_is_not_moved(weed_bucket: stores.Bucket, tmp_path: Path) -> None:
    url, _ = _cut_newest(weed_bucket, tmp_path)

    def confirm(question: acting.Question) -> bool:
        weed_bucket.put("run/optim-4.bpk", b"the trainer saved again")
        return True

    outcome = acting.carry_out(acting.Repair(0.0), [url], dry_run=False, confirm=confirm, listener=lambda event: None)
    assert outcome.acted
    assert weed_bucket.get("run/optim-4.bpk") == b"the trainer saved again"
    assert "run/model-4.bpk" not in weed_bucket.stored()  # what was as planned moved
    assert any("left 1 object written" in message for message in outcome.messages)


def test_undo_never_puts_back_over_an_object_that_exists_again(weed_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url, _ = _cut_newest(weed_bucket, tmp_path)
    assert cli("repair", *NOW, "--yes", url).exit_code == 0
    weed_bucket.put("run/model-4.bpk", b"a new save of epoch 4")
    result = cli("repair", "--undo", "--yes", url)
    assert result.exit_code != 0 or "Nothing was restored" in result.stdout + result.stderr
    assert weed_bucket.get("run/model-4.bpk") == b"a new save of epoch 4"
    assert "run/optim-4.bpk" not in weed_bucket.stored()  # nothing at all was put back


def test_undo_never_puts_back_what_the_repair_did_not_put_in_the_quarantine(weed_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url, _ = _cut_newest(weed_bucket, tmp_path)
    assert cli("repair", *NOW, "--yes", url).exit_code == 0
    [planted] = [key for key in weed_bucket.stored() if "/.ckptdoctor/quarantine/" in key and key.endswith("/optim-4.bpk")]
    weed_bucket.put(planted, b"planted by someone with write access")
    result = cli("repair", "--undo", "--yes", url)
    assert "not what the repair moved there" in result.stdout + result.stderr
    assert "run/optim-4.bpk" not in weed_bucket.stored()


def test_a_manifest_ckptdoctor_did_not_write_is_never_undone(weed_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url, _ = _cut_newest(weed_bucket, tmp_path)
    planted = {
        "kind": "ckptdoctor.bucket-quarantine.v1", "run": url, "created": 0, "state": "done", "pointers": [],
        "objects": [{"key": "../other/model.bpk", "etag": '"x"', "copied": None, "number": None, "reasons": [], "bytes": 1}],
    }  # fmt: skip
    weed_bucket.put("run/.ckptdoctor/quarantine/20990101T000000Z-000000/manifest.json", json.dumps(planted).encode())
    result = cli("repair", "--undo", "--yes", url)
    assert result.exit_code == 0
    assert "no quarantine: nothing to undo" in result.stdout + result.stderr


def test_repair_rewrites_deepspeeds_latest_with_if_match_and_deepspeed_then_loads_the_good_tag(
    weed_bucket: stores.Bucket, tmp_path: Path, cli: Any
) -> None:
    folder = deepspeed_run(tmp_path / "ds")
    (folder / "global_step200" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").write_bytes(b"")  # rank 1's save cut short
    url = weed_bucket.upload(folder, "run")
    done = cli("repair", *NOW, "--yes", url)
    assert done.exit_code == 0, done.stderr
    # DeepSpeed's load_checkpoint(load_dir) reads the tag from `latest` (open().read().strip())
    tag = weed_bucket.get("run/latest").decode().strip()
    assert tag == "global_step100"
    assert any(key.startswith(f"run/{tag}/") for key in weed_bucket.stored())
    undone = cli("repair", "--undo", "--yes", url)
    assert undone.exit_code == 0, undone.stderr
    assert weed_bucket.get("run/latest").decode().strip() == "global_step200"


def test_a_pointer_rewritten_after_the_plan_is_left_as_it_is(weed_bucket: stores.Bucket, tmp_path: Path) -> None:
    folder = deepspeed_run(tmp_path / "ds")
    (folder / "global_step200" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").write_bytes(b"")
    url = weed_bucket.upload(folder, "run")

    def confirm(question: acting.Question) -> bool:
        weed_bucket.put("run/latest", b"global_step300")  # the trainer moved on meanwhile
        return True

    outcome = acting.carry_out(acting.Repair(0.0), [url], dry_run=False, confirm=confirm, listener=lambda event: None)
    assert weed_bucket.get("run/latest") == b"global_step300"
    assert any("nothing was moved" in problem and "latest" in problem for problem in outcome.problems)


def test_repair_rewrites_composers_remote_symlink_object(weed_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    folder = composer_run(tmp_path / "bucket" / "tiny-run" / "checkpoints", latest=False)
    (folder / "latest-rank0.pt.symlink").write_text("tiny-run/checkpoints/ep2-ba8-rank0.pt")
    (folder / "ep2-ba8-rank0.pt").write_bytes(b"")  # an upload cut short
    url = weed_bucket.upload(folder, "run")
    done = cli("repair", *NOW, "--yes", url)
    assert done.exit_code == 0, done.stderr
    # Composer's autoresume downloads the object this names
    assert weed_bucket.get("run/latest-rank0.pt.symlink").decode() == "tiny-run/checkpoints/ep1-ba4-rank0.pt"


def test_a_dry_run_repair_writes_nothing(weed_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url, before = _cut_newest(weed_bucket, tmp_path)
    result = cli("repair", *NOW, "--dry-run", url)
    assert result.exit_code == 0
    assert "About to quarantine 3 entries" in result.stdout
    assert {key: weed_bucket.get(key) for key in weed_bucket.stored()} == before


def test_a_repair_killed_at_random_moments_loses_nothing_and_undo_puts_everything_back(weed_bucket: stores.Bucket, tmp_path: Path) -> None:
    write_burn_run(tmp_path / "run", range(1, 41))
    for epoch in range(21, 41):
        (tmp_path / "run" / f"optim-{epoch}.bpk").unlink()  # epochs 21-40 lost their optimizer state
    env = {**os.environ, **weed_bucket.env}
    rng = random.Random(20)
    midway = 0
    for _ in range(4):
        for key in weed_bucket.stored():
            weed_bucket.s3.delete_object(Bucket=weed_bucket.name, Key=weed_bucket.key(key))
        url = weed_bucket.upload(tmp_path / "run", "run")
        before = {key: weed_bucket.get(key) for key in weed_bucket.stored()}
        process = subprocess.Popen(
            [sys.executable, "-c", stores.SLOWED, "repair", *NOW, "--yes", url],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while (
            not any(key.endswith("/manifest.json") for key in weed_bucket.stored())
            and process.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.6))
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        now = {key: weed_bucket.get(key) for key in weed_bucket.stored()}
        moved = [key for key in now if key.startswith("run/.ckptdoctor/quarantine/") and key.endswith(".bpk")]
        midway += 0 < len(moved) < 40
        for key, data in before.items():  # every object is in the run or, whole, in the quarantine
            copies = [now[k] for k in now if k == key or (k.startswith("run/.ckptdoctor/quarantine/") and k.endswith("/" + key[4:]))]
            assert data in copies, key
        weed_bucket.s3.delete_object(Bucket=weed_bucket.name, Key=weed_bucket.key("run/.ckptdoctor/lock"))  # its lease would run out
        undone = subprocess.run(
            [sys.executable, "-m", "ckptdoctor", "repair", "--undo", "--yes", url], env=env, capture_output=True, text=True, check=False
        )
        assert undone.returncode == 0, undone.stdout + undone.stderr
        assert {key: weed_bucket.get(key) for key in _run_keys(weed_bucket)} == before
    assert midway, "no kill landed while the repair was moving objects: the test proved little"


def test_an_object_over_the_single_copy_limit_is_moved_in_parts_and_put_back(
    weed_bucket: stores.Bucket, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckptdoctor.stores import control_plane

    monkeypatch.setattr(control_plane, "MAX_COPY", 1024)  # every object here is "over 5 GiB"
    monkeypatch.setattr(control_plane, "PART_COPY", 5 * 1024 * 1024)
    url, before = _cut_newest(weed_bucket, tmp_path)
    assert cli("repair", *NOW, "--yes", url).exit_code == 0
    assert not any(key.endswith("-4.bpk") for key in _run_keys(weed_bucket))
    assert cli("repair", "--undo", "--yes", url).exit_code == 0
    assert {key: weed_bucket.get(key) for key in weed_bucket.stored()} == before


def test_lightnings_last_ckpt_copy_is_rewritten_as_a_copy_of_the_resume_checkpoint(
    weed_bucket: stores.Bucket, lightning_saved: dict[str, Path], tmp_path: Path, cli: Any
) -> None:
    """Lightning's `save_last=True` writes `last.ckpt` as a copy: a cut one is made a copy of the
    resume checkpoint again, by a server-side copy over it with If-Match."""
    torch = pytest.importorskip("torch")
    folder = tmp_path / "checkpoints"
    shutil.copytree(lightning_saved["copy"], folder)
    last = folder / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])  # its upload cut short
    url = weed_bucket.upload(folder, "run")
    done = cli("repair", *NOW, "--yes", url)
    assert done.exit_code == 0, done.stderr
    assert weed_bucket.get("run/last.ckpt") == (folder / "epoch=2-step=12.ckpt").read_bytes()
    (tmp_path / "down").mkdir()
    (tmp_path / "down" / "last.ckpt").write_bytes(weed_bucket.get("run/last.ckpt"))
    restored = torch.load(tmp_path / "down" / "last.ckpt", map_location="cpu", weights_only=False)  # a file this test wrote
    assert restored["global_step"] == 12  # what Lightning's fit(ckpt_path=...) restores from it
    assert cli("repair", "--undo", "--yes", url).exit_code == 0
    assert weed_bucket.get("run/last.ckpt") == last.read_bytes()


def test_repair_keeps_the_checkpoints_after_the_resume_point_while_a_save_is_still_uploading(
    weed_bucket: stores.Bucket, tmp_path: Path, cli: Any
) -> None:
    write_burn_run(tmp_path / "run", range(1, 6))
    (tmp_path / "run" / "optim-5.bpk").unlink()  # still on its way: a multipart upload of it is going on
    url = weed_bucket.upload(tmp_path / "run", "run")
    upload = weed_bucket.s3.create_multipart_upload(Bucket=weed_bucket.name, Key=weed_bucket.key("run/optim-5.bpk"))
    weed_bucket.s3.upload_part(
        Bucket=weed_bucket.name, Key=weed_bucket.key("run/optim-5.bpk"), UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * (5 << 20)
    )
    result = cli("repair", *NOW, "--yes", url)
    assert result.exit_code == 0, result.stderr
    assert {"run/model-5.bpk", "run/scheduler-5.bpk"} <= set(weed_bucket.stored())
    assert "a save may still be arriving" in result.stdout


class _Killed(BaseException):
    """A kill, as far as the repair can tell: nothing after it runs."""


def test_a_repair_killed_before_it_moved_anything_leaves_no_quarantine_to_undo(
    weed_bucket: stores.Bucket, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckptdoctor.stores.control_plane import Control

    url, before = _cut_newest(weed_bucket, tmp_path)

    def killed(*args: Any, **kwargs: Any) -> None:
        raise _Killed

    with monkeypatch.context() as patched, pytest.raises(_Killed):
        patched.setattr(Control, "copy_if_match", killed)
        cli("repair", *NOW, "--yes", url)
    assert any(key.endswith("/manifest.json") for key in weed_bucket.stored())  # the killed repair's record of its plan
    weed_bucket.s3.delete_object(Bucket=weed_bucket.name, Key=weed_bucket.key("run/.ckptdoctor/lock"))  # its lease would run out
    again = cli("repair", *NOW, "--yes", url)
    assert again.exit_code == 0, again.stderr
    assert "closed an interrupted repair" not in again.stdout + again.stderr  # it had moved nothing: nothing to name
    undone = cli("repair", "--undo", "--yes", url)
    assert undone.exit_code == 0 and "still holds" not in undone.stdout + undone.stderr
    assert {key: weed_bucket.get(key) for key in _run_keys(weed_bucket)} == before
