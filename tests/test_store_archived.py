"""Checkpoints whose objects a lifecycle rule moved to an archive tier (issue 34, item 2), against
moto's S3 (SeaweedFS has no storage classes).

moto answers a read of a GLACIER or DEEP_ARCHIVE object that is not restored as S3 does (403
``InvalidObjectState``, its class in the body), and ``restore_object`` makes it readable (moto
restores at once). The framework decides what is resumable: a real HF Trainer run is uploaded,
and what a trainer on another machine can resume from is what it can download (S3 refuses the
archived objects) and ``get_last_checkpoint`` then picks, and after the restore the Trainer's own
``resume_from_checkpoint`` goes on from it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import stores
from frameworks import hf_trainer

pytestmark = pytest.mark.slow  # a real S3 server on 127.0.0.1

pytest.importorskip("obstore")
pytest.importorskip("boto3")

NOW = ("--min-age", "0")


def _archive(bucket: stores.Bucket, folder: str, storage_class: str) -> list[str]:
    """Every object of ``run/<folder>/`` rewritten in ``storage_class``, as a lifecycle
    transition leaves it (the same bytes, the same ETag); their keys, relative to the test's prefix."""
    keys = [key for key in bucket.stored() if key.startswith(f"run/{folder}/")]
    for key in keys:
        bucket.s3.put_object(Bucket=bucket.name, Key=bucket.key(key), Body=bucket.get(key), StorageClass=storage_class)
    return keys


def _etags(bucket: stores.Bucket) -> dict[str, str]:
    return {key: bucket.s3.head_object(Bucket=bucket.name, Key=bucket.key(key))["ETag"] for key in bucket.stored()}


def _restore(bucket: stores.Bucket, keys: list[str]) -> None:
    for key in keys:
        bucket.s3.restore_object(Bucket=bucket.name, Key=bucket.key(key), RestoreRequest={"Days": 1})


def _downloaded(bucket: stores.Bucket, into: Path) -> Path:
    """The run as a trainer on another machine gets it (``aws s3 sync``): every object it may
    read; S3 refuses each archived one (``InvalidObjectState``), which is then not there."""
    from botocore.exceptions import ClientError

    for key in bucket.stored():
        try:
            body = bucket.get(key)
        except ClientError as error:
            assert error.response["Error"]["Code"] == "InvalidObjectState"
            continue
        target = into / key.removeprefix("run/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
    return into


def _newest_resumable(bucket: stores.Bucket, into: Path) -> str | None:
    """What HF's own resume from the latest checkpoint picks in what can be downloaded."""
    from transformers.trainer_utils import get_last_checkpoint

    found = get_last_checkpoint(str(_downloaded(bucket, into)))
    return Path(found).name if found else None


def _restore_loop(fix: str, bucket: stores.Bucket, request: str) -> list[str]:
    """The keys the fix's restore loop restores, each with ``request``, in ``bucket``."""
    match = re.search(
        rf"`for key in (.+?); do aws s3api restore-object --bucket {bucket.name} --key \"\$key\" --restore-request {re.escape(request)}; done`",
        fix,
    )
    assert match is not None, fix
    return sorted(match.group(1).split())


def _statuses(report: dict[str, Any]) -> dict[int, str]:
    return {c["index"]: c["status"] for c in report["runs"][0]["checkpoints"]}


def _archived_finding(report: dict[str, Any], index: int) -> dict[str, Any]:
    found = [f for f in report["findings"] if f["code"] == "CKD217" and f["index"] == index]
    assert len(found) == 1, report["findings"]
    return found[0]


@pytest.mark.parametrize("command", ["inspect", "verify"])
@pytest.mark.parametrize(("storage_class", "request_", "tiers"), [
    ("GLACIER", '\'{"Days":7,"GlacierJobParameters":{"Tier":"Standard"}}\'', "Expedited (1-5 minutes), Standard (3-5 hours) or Bulk"),
    ("DEEP_ARCHIVE", '\'{"Days":7,"GlacierJobParameters":{"Tier":"Standard"}}\'', "Deep Archive has no Expedited"),
])  # fmt: skip
def test_an_archived_checkpoint_is_archived_not_corrupt_and_the_resume_point_names_it(
    moto_bucket: stores.Bucket, hf_trained: Path, tmp_path: Path, cli: Any, command: str, storage_class: str, request_: str, tiers: str
) -> None:
    url = moto_bucket.upload(hf_trained, "run")
    keys = _archive(moto_bucket, "checkpoint-6", storage_class)
    assert _newest_resumable(moto_bucket, tmp_path / "down") == "checkpoint-4"  # HF cannot resume from the archived one
    result = cli(command, "--json", url)
    assert result.exit_code == 1, result.stderr
    report = result.json
    assert _statuses(report) == {2: "complete", 4: "complete", 6: "archived"}
    assert report["runs"][0]["resume"]["index"] == 4
    assert not {"CKD211", "CKD215", "CKD113", "CKD114"} & {f["code"] for f in report["findings"]}
    finding = _archived_finding(report, 6)
    assert finding["severity"] == "error"
    assert "checkpoint-6 is archived" in finding["message"] and "restore it to resume from it" in finding["message"]
    assert f"in {storage_class}, not restored" in finding["message"]
    command_line = finding["fixes"][0]
    assert _restore_loop(command_line, moto_bucket, request_) == sorted(moto_bucket.key(key) for key in keys)
    assert tiers in command_line


def test_repair_moves_nothing_of_an_archived_checkpoint_and_a_restore_makes_it_the_resume_point(
    moto_bucket: stores.Bucket, hf_trained: Path, tmp_path: Path, cli: Any, inspect_json: Any
) -> None:
    url = moto_bucket.upload(hf_trained, "run")
    keys = _archive(moto_bucket, "checkpoint-6", "GLACIER")
    before = _etags(moto_bucket)
    done = cli("repair", *NOW, "--yes", url)
    assert done.exit_code == 0, done.stderr
    assert "restore it to resume from it (CKD217); never deleted or moved" in done.stdout
    assert _etags(moto_bucket) == before  # every object in place, as it was: nothing moved, nothing quarantined
    _restore(moto_bucket, keys)
    after = inspect_json(url)
    assert after.exit_code == 0, after.stdout
    assert _statuses(after.json) == {2: "complete", 4: "complete", 6: "complete"}
    assert after.json["runs"][0]["resume"]["index"] == 6 and after.json["findings"] == []
    # the framework agrees: restored, it is the newest checkpoint, and the Trainer resumes from it
    assert _newest_resumable(moto_bucket, tmp_path / "down") == "checkpoint-6"
    trainer = hf_trainer(tmp_path / "down", 8)
    trainer.train(resume_from_checkpoint=str(tmp_path / "down" / "checkpoint-6"))
    assert trainer.state.global_step == 8


def test_a_restore_under_way_says_so(moto_bucket: stores.Bucket, hf_trained: Path, inspect_json: Any) -> None:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.moto_api import state_manager
    from moto.s3.models import s3_backends

    url = moto_bucket.upload(hf_trained, "run")
    keys = _archive(moto_bucket, "checkpoint-6", "GLACIER")
    _restore(moto_bucket, keys)
    # moto's own model of a restore not finished (its state IN_PROGRESS, held there by a manual
    # progression): HEAD says ongoing-request="true" and a read is refused
    state_manager.set_transition(model_name="s3::keyrestore", transition={"progression": "manual", "times": 1_000_000})
    try:
        stored = s3_backends[DEFAULT_ACCOUNT_ID]["global"].buckets[moto_bucket.name].keys
        for key in keys:
            stored[moto_bucket.key(key)].status = "IN_PROGRESS"
        said = moto_bucket.s3.head_object(Bucket=moto_bucket.name, Key=moto_bucket.key(keys[0]))["Restore"]
        assert said == 'ongoing-request="true"'
        report = inspect_json(url).json
    finally:
        state_manager.set_transition(model_name="s3::keyrestore", transition={"progression": "immediate"})  # moto's default
    assert _statuses(report)[6] == "archived"
    assert "in GLACIER, restore requested, not finished: restore it to resume from it" in _archived_finding(report, 6)["message"]


def test_intelligent_tiering_deep_archive_access_is_restored_without_days(
    moto_bucket: stores.Bucket, hf_trained: Path, inspect_json: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto keeps no Intelligent-Tiering archive tiers: it is made to refuse the read as S3 does
    for one (403 ``InvalidObjectState``) and to send the HEAD's ``x-amz-archive-status``."""
    import moto.s3.responses
    from moto.s3.models import FakeKey

    monkeypatch.setattr(moto.s3.responses, "ARCHIVE_STORAGE_CLASSES", ["GLACIER", "DEEP_ARCHIVE", "INTELLIGENT_TIERING"])
    plain = FakeKey.response_dict.fget  # type: ignore[attr-defined]

    def with_tier(key: FakeKey) -> dict[str, Any]:
        said: dict[str, Any] = plain(key)
        if key.storage_class == "INTELLIGENT_TIERING":
            said["x-amz-archive-status"] = "DEEP_ARCHIVE_ACCESS"
        return said

    monkeypatch.setattr(FakeKey, "response_dict", property(with_tier))
    url = moto_bucket.upload(hf_trained, "run")
    keys = _archive(moto_bucket, "checkpoint-6", "INTELLIGENT_TIERING")
    report = inspect_json(url).json
    assert _statuses(report)[6] == "archived"
    finding = _archived_finding(report, 6)
    assert "in INTELLIGENT_TIERING (DEEP_ARCHIVE_ACCESS), not restored" in finding["message"]
    request = '\'{"GlacierJobParameters":{"Tier":"Standard"}}\''
    assert _restore_loop(finding["fixes"][0], moto_bucket, request) == sorted(moto_bucket.key(key) for key in keys)
    assert "no Expedited; no Days" in finding["fixes"][0]


def test_prune_deletes_an_old_archived_checkpoint_by_its_policy_and_says_it_is_archived(
    moto_bucket: stores.Bucket, hf_trained: Path, cli: Any
) -> None:
    url = moto_bucket.upload(hf_trained, "run")
    _archive(moto_bucket, "checkpoint-2", "DEEP_ARCHIVE")
    _archive(moto_bucket, "checkpoint-6", "GLACIER")
    planned = cli("prune", *NOW, "--keep-last", "1", "--dry-run", url)
    assert planned.exit_code == 0, planned.stderr
    lines = {line.split()[0]: line for line in planned.stdout.splitlines() if line.strip()[:1].isdigit()}
    assert "delete" in lines["2"] and "archived (CKD217), older than the resume point: matches no keep rule" in lines["2"]
    assert "keep" in lines["6"] and "restore it to resume from it (CKD217); never deleted or moved" in lines["6"]
    report = cli("inspect", "--json", url).json
    assert _archived_finding(report, 2)["severity"] == "info"  # older than the resume point: archived as planned


def test_a_healthy_bucket_run_and_glacier_instant_retrieval_are_not_archived(
    moto_bucket: stores.Bucket, hf_trained: Path, inspect_json: Any
) -> None:
    url = moto_bucket.upload(hf_trained, "run")
    _archive(moto_bucket, "checkpoint-4", "GLACIER_IR")  # read at once: no restore, not archived
    result = inspect_json(url)
    assert result.exit_code == 0, result.stdout
    assert _statuses(result.json) == {2: "complete", 4: "complete", 6: "complete"}
    assert result.json["findings"] == []
