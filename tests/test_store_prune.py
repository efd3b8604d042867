"""``prune`` of runs in buckets: the invariants of a prune on disk, kept by the store's own means,
tested against a real SeaweedFS (conditional writes and deletes, real upload times) and moto.

Each invariant test of local prune has its bucket twin here: a kill at random moments loses
nothing that was to be kept and the next prune finishes the job; two prunes at once never both
act; an object rewritten between the plan and its delete is kept; what is kept is never deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import stores

from ckptdoctor import acting
from ckptdoctor.actions import _objects
from ckptdoctor.planners.retention import PruneSettings
from ckptdoctor.records import BadRecord, ObjectJournal
from ckptdoctor.stores import session
from ckptdoctor.stores.urls import parse
from ckptdoctor.testing import write_burn_run

pytestmark = pytest.mark.slow  # real S3 servers on 127.0.0.1

pytest.importorskip("obstore")
pytest.importorskip("boto3")

NOW = ("--min-age", "0")


def test_prune_of_a_bucket_deletes_what_the_plan_says_and_keeps_the_rest(weed_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 7))
    dry = cli("prune", "--keep-last", "2", *NOW, "--dry-run", url)
    assert dry.exit_code == 0, dry.stderr
    assert "About to delete 4 checkpoints" in dry.stdout
    assert stores.epochs(weed_bucket) == [1, 2, 3, 4, 5, 6]
    assert stores.own(weed_bucket) == []  # a dry run writes nothing, not even a lock
    done = cli("prune", "--keep-last", "2", *NOW, "--yes", url)
    assert done.exit_code == 0, done.stderr
    assert stores.epochs(weed_bucket) == [5, 6]
    assert stores.own(weed_bucket) == []  # the lock and the journal are gone
    assert "deleted 4 checkpoints (12 objects)" in done.stderr + done.stdout


def test_min_age_is_measured_by_the_stores_clock_not_the_local_one(
    weed_bucket: stores.Bucket, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 5))
    monkeypatch.setattr(time, "time", lambda: 4_000_000_000.0)  # a local clock decades ahead changes nothing
    result = cli("prune", "--keep-last", "1", "--min-age", "1h", "--yes", url)
    assert result.exit_code == 0, result.stderr
    assert "--min-age 1h" in result.stdout
    assert stores.epochs(weed_bucket) == [1, 2, 3, 4]


def test_keep_within_is_measured_back_from_the_stores_clock_not_the_local_one(
    weed_bucket: stores.Bucket, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The objects were stored just now by the store's clock: a window of an hour back from it
    keeps them all, however far ahead the local clock runs."""
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 5))
    monkeypatch.setattr(time, "time", lambda: 4_000_000_000.0)
    result = cli("prune", "--keep-within", "1h", *NOW, "--yes", url)
    assert result.exit_code == 0, result.stderr
    assert stores.epochs(weed_bucket) == [1, 2, 3, 4]


def test_prune_works_on_moto_too(moto_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url = stores.burn_in(moto_bucket, tmp_path / "run", range(1, 5))
    result = cli("prune", "--keep-last", "1", *NOW, "--yes", url)
    assert result.exit_code == 0, result.stderr
    assert stores.epochs(moto_bucket) == [4]


# --- the lock -------------------------------------------------------------------------------------


def test_a_lock_held_by_another_prune_stops_this_one_with_exit_3(weed_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 5))
    weed_bucket.put("run/.ckptdoctor/lock", json.dumps({"pid": 7, "host": "trainer-3", "user": "ml", "started": 0}).encode())
    result = cli("prune", "--keep-last", "1", *NOW, "--yes", url)
    assert result.exit_code == 3
    assert "pid 7 on trainer-3" in result.stderr
    assert stores.epochs(weed_bucket) == [1, 2, 3, 4]
    assert stores.own(weed_bucket) == ["run/.ckptdoctor/lock"]  # the other's lock is left as it was


def test_a_lock_older_than_its_lease_is_taken_over(weed_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 5))
    weed_bucket.put("run/.ckptdoctor/lock", b'{"pid": 7, "host": "trainer-3", "lease": 1}')
    time.sleep(2.1)  # the store's clock counts whole seconds
    result = cli("prune", "--keep-last", "1", *NOW, "--yes", url)
    assert result.exit_code == 0, result.stderr
    assert "took over the lock of pid 7 on trainer-3, whose lease ran out" in result.stdout + result.stderr
    assert stores.epochs(weed_bucket) == [4]
    assert stores.own(weed_bucket) == []


def test_two_prunes_at_once_never_both_act(weed_bucket: stores.Bucket, tmp_path: Path) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 41))
    env = {**os.environ, **weed_bucket.env}
    command = [sys.executable, "-m", "ckptdoctor", "prune", "--keep-last", "3", *NOW, "--yes", url]
    for _ in range(3):
        both = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        codes = sorted(process.wait(120) for process in both)
        assert set(codes) <= {0, 3}, [process.stderr.read() for process in both if process.stderr]  # type: ignore[union-attr]
        assert stores.epochs(weed_bucket)[-3:] == [38, 39, 40]
    assert stores.epochs(weed_bucket) == [38, 39, 40]
    assert stores.own(weed_bucket) == []


class _IgnoresConditions:
    """A store that lets every create through, as one that ignores If-None-Match would."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.location = real.location

    def create(self, key: str, data: bytes) -> str:
        import obstore

        etag: str = obstore.put(self._real._store, key, data)["e_tag"]  # written whatever is there
        return etag

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_a_store_that_ignores_conditions_is_not_pruned(
    weed_bucket: stores.Bucket, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 5))
    real = _objects.Place.bucket
    monkeypatch.setattr(_objects.Place, "bucket", property(lambda place: _IgnoresConditions(real.fget(place))))  # type: ignore[attr-defined]
    result = cli("prune", "--keep-last", "1", *NOW, "--yes", url)
    assert result.exit_code == 2
    assert "does not honour conditional writes" in result.stderr and "--no-lock" in result.stderr
    assert stores.epochs(weed_bucket) == [1, 2, 3, 4]
    assert stores.own(weed_bucket) == []  # the lock it wrote (twice) is not left to block the run
    anyway = cli("prune", "--keep-last", "1", *NOW, "--yes", "--no-lock", url)
    assert anyway.exit_code == 0, anyway.stderr
    assert "no lock is taken" in anyway.stdout + anyway.stderr
    assert stores.epochs(weed_bucket) == [4]
    assert stores.own(weed_bucket) == []


def test_no_lock_is_refused_for_a_local_run(tmp_path: Path, cli: Any) -> None:
    write_burn_run(tmp_path / "run", [1, 2])
    result = cli("prune", "--keep-last", "1", "--yes", "--no-lock", str(tmp_path / "run"))
    assert result.exit_code == 2
    assert "a local run is always locked" in result.stderr


# --- changed between the plan and the delete -----------------------------------------------------------


def _confirming(then: Any) -> Any:
    def confirm(question: acting.Question) -> bool:
        then()
        return True

    return confirm


def _prune(url: str, keep_last: int, confirm: Any) -> acting.Outcome:
    return acting.carry_out(
        acting.prune_from(PruneSettings(keep_last=keep_last, min_age="0")),
        [url],
        dry_run=False,
        confirm=confirm,
        listener=lambda event: None,
    )


def test_an_object_rewritten_after_the_plan_is_kept(weed_bucket: stores.Bucket, tmp_path: Path) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 5))
    outcome = _prune(url, 1, _confirming(lambda: weed_bucket.put("run/optim-2.bpk", b"a new save under the old name")))
    assert outcome.acted
    assert sorted(weed_bucket.stored()) == ["run/model-4.bpk", "run/optim-2.bpk", "run/optim-4.bpk", "run/scheduler-4.bpk"]
    assert weed_bucket.get("run/optim-2.bpk") == b"a new save under the old name"
    assert any("rewritten or removed since the plan" in message for message in outcome.messages)


def test_nothing_is_deleted_when_the_resume_point_changed_after_the_plan(weed_bucket: stores.Bucket, tmp_path: Path) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 5))
    outcome = _prune(url, 1, _confirming(lambda: weed_bucket.put("run/model-4.bpk", b"cut")))
    assert stores.epochs(weed_bucket) == [1, 2, 3, 4]
    assert any("nothing was deleted" in problem and "model-4.bpk" in problem for problem in outcome.problems)


# --- killed at random moments -----------------------------------------------------------------------


def test_a_prune_killed_at_random_moments_loses_nothing_to_keep_and_the_next_finishes(weed_bucket: stores.Bucket, tmp_path: Path) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 81))
    env = {**os.environ, **weed_bucket.env}
    command = [sys.executable, "-c", stores.SLOWED, "prune", "--keep-last", "5", *NOW, "--yes", url]
    rng = random.Random(19)
    cut_short = 0
    # three kills: with this seed each lands 0.1-0.2 s into the deletion, which the 20 ms per delete
    # of SLOWED stretches to 1.5 s, so each is the same kind of point (journal written, objects
    # half deleted); more of them repeated the same work
    for _ in range(3):
        weed_bucket.upload(tmp_path / "run", "run")  # every kill meets a prune with everything still to do
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        _kill_once_deleting(process, weed_bucket, rng)
        process.wait()
        left = stores.epochs(weed_bucket)
        assert left[-5:] == [76, 77, 78, 79, 80]  # what is kept is always there, whole
        for epoch in (76, 77, 78, 79, 80):
            assert {f"run/{role}-{epoch}.bpk" for role in ("model", "optim", "scheduler")} <= set(weed_bucket.stored())
        cut_short += 5 < len(left) < 80 or any("/prune-" in key for key in stores.own(weed_bucket))
        weed_bucket.s3.delete_object(Bucket=weed_bucket.name, Key=weed_bucket.key("run/.ckptdoctor/lock"))  # its lease would run out
        final = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        assert final.returncode == 0, final.stderr
        assert stores.epochs(weed_bucket) == [76, 77, 78, 79, 80]
        assert stores.own(weed_bucket) == []  # the journal of the killed prune was finished and removed
    assert cut_short >= 2, "kills did not land while the prune was deleting: the test proved little"


def _kill_once_deleting(process: subprocess.Popen[bytes], bucket: stores.Bucket, rng: random.Random) -> None:
    """SIGKILL inside the deletion: once the journal is written (just before the first delete),
    after a random few milliseconds; or at once, before anything, one time in four."""
    if rng.random() < 0.25:
        time.sleep(rng.uniform(0.0, 0.5))
    else:
        deadline = time.monotonic() + 30
        while not any("/prune-" in key for key in stores.own(bucket)) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.2))
    with contextlib.suppress(ProcessLookupError):  # it finished first (poll reaped it): a kill that landed after the end
        os.killpg(process.pid, signal.SIGKILL)


def test_a_journal_left_by_a_killed_prune_is_shown_then_finished_and_spares_what_is_kept(
    weed_bucket: stores.Bucket, tmp_path: Path, cli: Any
) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 5))
    etags = {key: weed_bucket.s3.head_object(Bucket=weed_bucket.name, Key=weed_bucket.key(key))["ETag"] for key in weed_bucket.stored()}
    named = [(name, etags[f"run/{name}"]) for name in ("model-1.bpk", "optim-1.bpk", "model-4.bpk")]
    weed_bucket.put("run/.ckptdoctor/prune-20260101T000000Z-0000.json", ObjectJournal(url, tuple(named)).encode())
    dry = cli("prune", "--keep-last", "3", *NOW, "--dry-run", url)
    assert dry.exit_code == 0, dry.stderr
    assert "prune-20260101T000000Z-0000.json" in dry.stdout + dry.stderr
    done = cli("prune", "--keep-last", "3", *NOW, "--yes", url)
    assert done.exit_code == 0, done.stderr
    keys = weed_bucket.stored()
    assert "run/model-4.bpk" in keys  # the resume point: kept though the journal names it
    assert "run/model-1.bpk" not in keys and "run/optim-1.bpk" not in keys
    assert stores.own(weed_bucket) == []


def test_a_journal_ckptdoctor_did_not_write_is_ignored_with_a_note(weed_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 4))
    planted = {"kind": "ckptdoctor.bucket-prune.v1", "run": url, "objects": [["../../other-run/model-1.bpk", '"x"']]}
    weed_bucket.put("run/.ckptdoctor/prune-planted.json", json.dumps(planted).encode())
    result = cli("prune", "--keep-last", "3", *NOW, "--yes", url)
    assert result.exit_code == 0, result.stderr
    assert "is not ckptdoctor's" in result.stderr + result.stdout
    assert stores.epochs(weed_bucket) == [1, 2, 3]
    assert "run/.ckptdoctor/prune-planted.json" in weed_bucket.stored()  # left as it was


@pytest.mark.parametrize(
    "document",
    [
        {"kind": "ckptdoctor.bucket-prune.v1", "run": "s3://b/r", "objects": [["a//b", "e"]]},
        {"kind": "ckptdoctor.bucket-prune.v1", "run": "s3://b/r", "objects": [[".ckptdoctor/lock", "e"]]},
        {"kind": "ckptdoctor.bucket-prune.v1", "run": "s3://b/r", "objects": [["a", ""]]},
        {"kind": "ckptdoctor.bucket-prune.v1", "run": "s3://b/r", "objects": [], "extra": 1},
        {"kind": "other", "run": "s3://b/r", "objects": []},
    ],
)
def test_journal_records_refuse_what_ckptdoctor_never_writes(document: dict[str, Any]) -> None:
    with pytest.raises(BadRecord):
        ObjectJournal.decode(json.dumps(document).encode())


# --- uploads and versions --------------------------------------------------------------------------------


def _start_upload(bucket: stores.Bucket, relative: str) -> str:
    upload = bucket.s3.create_multipart_upload(Bucket=bucket.name, Key=bucket.key(relative))
    bucket.s3.upload_part(Bucket=bucket.name, Key=bucket.key(relative), UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * (5 << 20))
    return str(upload["UploadId"])


def test_a_checkpoint_an_upload_is_still_writing_into_is_kept(weed_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    _hf_trainer_run(tmp_path / "out", (2, 4, 6))
    url = weed_bucket.upload(tmp_path / "out", "run")
    _start_upload(weed_bucket, "run/checkpoint-2/rng_state.pth")  # a save going on into checkpoint-2
    result = cli("prune", "--keep-last", "1", *NOW, "--dry-run", url)
    assert result.exit_code == 0, result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.strip().startswith("2 ")]
    assert "keep" in line and "an upload into it began" in line


def test_abort_uploads_aborts_only_uploads_older_than_the_age_given(weed_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 3))
    _start_upload(weed_bucket, "run/model-3.bpk")
    young = cli("prune", "--keep-last", "5", *NOW, "--abort-uploads", "1h", "--yes", url)
    assert young.exit_code == 0, young.stderr
    listed = weed_bucket.s3.list_multipart_uploads(Bucket=weed_bucket.name, Prefix=weed_bucket.key("run") + "/").get("Uploads", [])
    assert len(listed) == 1
    time.sleep(1.1)
    old = cli("prune", "--keep-last", "5", *NOW, "--abort-uploads", "1s", "--yes", url)
    assert old.exit_code == 0, old.stderr
    assert "aborted the incomplete upload" in old.stdout + old.stderr
    listed = weed_bucket.s3.list_multipart_uploads(Bucket=weed_bucket.name, Prefix=weed_bucket.key("run") + "/").get("Uploads", [])
    assert listed == []
    assert stores.epochs(weed_bucket) == [1, 2]


def test_a_versioned_bucket_is_told_that_deletes_free_nothing_now(
    moto_endpoint: str, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = stores.bucket_in(moto_endpoint, "ckpt-versioned")
    bucket.s3.put_bucket_versioning(Bucket=bucket.name, VersioningConfiguration={"Status": "Enabled"})
    for variable, value in bucket.env.items():
        monkeypatch.setenv(variable, value)
    session.forget()
    url = stores.burn_in(bucket, tmp_path / "run", range(1, 4))
    result = cli("prune", "--keep-last", "1", *NOW, "--yes", url)
    assert result.exit_code == 0, result.stderr
    said = result.stdout + result.stderr
    assert "keeps object versions" in said and "free 0 B now" in said and "no lifecycle rule" in said
    assert stores.epochs(bucket) == [3]
    session.forget()


def test_acting_on_local_folders_and_buckets_at_once_is_refused(moto_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url = stores.burn_in(moto_bucket, tmp_path / "run", range(1, 3))
    result = cli("prune", "--keep-last", "1", "--yes", url, str(tmp_path / "run"))
    assert result.exit_code == 2
    assert "not both" in result.stderr


def test_the_place_of_a_run_keeps_records_in_its_bucket() -> None:
    place = _objects.place_of("s3://bkt/runs/a", "s3://bkt/runs/a/.ckptdoctor")
    assert place.run == parse("s3://bkt/runs/a")
    assert place.home == "runs/a/.ckptdoctor"


def _hf_trainer_run(out: Path, steps: tuple[int, ...]) -> None:
    """``checkpoint-N/`` folders with HF Trainer's file names (weights, optimizer, scheduler, state)."""
    for step in steps:
        folder = out / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(_safetensors())
        (folder / "optimizer.pt").write_bytes(_torch_bytes())
        (folder / "scheduler.pt").write_bytes(_torch_bytes())
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))


def _safetensors() -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    return len(header).to_bytes(8, "little") + header + b"\0" * 8


def _torch_bytes() -> bytes:
    torch = pytest.importorskip("torch")
    import io

    buffer = io.BytesIO()
    torch.save({"state": {}}, buffer)
    return buffer.getvalue()


def test_a_planted_journal_never_deletes_what_is_no_checkpoints(weed_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 4))
    etag = weed_bucket.put("run/README.md", b"what this run is")
    notes = weed_bucket.put("run/notes.txt", b"lr 3e-4")
    planted = ObjectJournal(url, (("README.md", etag), ("notes.txt", notes)))
    weed_bucket.put("run/.ckptdoctor/prune-20261202T000000Z-deadbeef.json", planted.encode())
    result = cli("prune", "--keep-last", "3", *NOW, "--yes", url)
    assert result.exit_code == 0, result.stderr
    assert weed_bucket.get("run/README.md") == b"what this run is"
    assert weed_bucket.get("run/notes.txt") == b"lr 3e-4"


def test_a_checkpoint_folder_written_to_after_the_plan_is_left_whole(weed_bucket: stores.Bucket, tmp_path: Path) -> None:
    _hf_trainer_run(tmp_path / "out", (1, 2, 3))
    url = weed_bucket.upload(tmp_path / "out", "run")
    outcome = _prune(url, 1, _confirming(lambda: weed_bucket.put("run/checkpoint-1/rng_state.pth", b"late")))
    keys = weed_bucket.stored()
    assert "run/checkpoint-1/model.safetensors" in keys and "run/checkpoint-1/rng_state.pth" in keys  # left whole
    assert not any(key.startswith("run/checkpoint-2/") for key in keys)
    assert any("written to since the plan" in message for message in outcome.messages)


def test_a_run_whose_folder_name_holds_a_question_mark_or_hash_is_pruned_with_the_others(
    weed_bucket: stores.Bucket, tmp_path: Path, cli: Any
) -> None:
    write_burn_run(tmp_path / "run", range(1, 4))
    for name in ("good", "exp?2", "exp#3"):  # key characters a typed URL could not hold, a listing can
        weed_bucket.upload(tmp_path / "run", "runs", name)
    assert cli("inspect", weed_bucket.url("runs")).exit_code == 0
    result = cli("prune", "--keep-last", "1", *NOW, "--yes", weed_bucket.url("runs"))
    assert result.exit_code == 0, result.stderr
    models = sorted(key for key in weed_bucket.stored() if "/model-" in key)
    assert models == ["runs/exp#3/model-3.bpk", "runs/exp?2/model-3.bpk", "runs/good/model-3.bpk"]


def test_a_store_that_ignores_conditions_never_has_another_ckptdoctors_live_lock_written_over(
    weed_bucket: stores.Bucket, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = stores.burn_in(weed_bucket, tmp_path / "run", range(1, 5))
    theirs = json.dumps({"pid": 7, "host": "trainer-3", "user": "ml", "started": time.time(), "nonce": "theirs", "lease": 120}).encode()
    weed_bucket.put("run/.ckptdoctor/lock", theirs)
    real = _objects.Place.bucket
    monkeypatch.setattr(_objects.Place, "bucket", property(lambda place: _IgnoresConditions(real.fget(place))))  # type: ignore[attr-defined]
    result = cli("prune", "--keep-last", "1", *NOW, "--yes", url)
    assert result.exit_code == 3, result.stderr
    assert weed_bucket.get("run/.ckptdoctor/lock") == theirs
    assert stores.epochs(weed_bucket) == [1, 2, 3, 4]
