"""What a bucket keeps under a run that no listing of its objects shows, and what breaks only there.

Incomplete multipart uploads (CKD506) and, on a versioned bucket, older versions and delete markers
(CKD507) come from S3's control plane, asked once per path the user gave; a DCP step whose
``.metadata`` the copy-then-delete rename of fsspec lost; an Orbax step on ``gs://`` without its
``commit_success.txt``. Against real servers on 127.0.0.1 (tests/stores.py): moto for breadth,
SeaweedFS where moto is wrong (moto dates every upload 2010-11-10, so ages are tested on SeaweedFS).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import stores
import warm

from ckptdoctor.stores import leftovers, session
from ckptdoctor.testing import write_burn_run

pytestmark = pytest.mark.slow  # real S3 servers on 127.0.0.1

pytest.importorskip("obstore")
pytest.importorskip("boto3")

PART = 5 << 20
"""S3's smallest part (but the last)."""


def _burn_run(bucket: stores.Bucket, tmp_path: Path, *under: str) -> tuple[str, int]:
    """A healthy burn run put under ``under``: its URL and its number of objects."""
    folder = tmp_path / "/".join(under or ("run",))
    write_burn_run(folder, range(1, 4))
    return bucket.upload(folder, *(under or ("run",))), len([p for p in folder.rglob("*") if p.is_file()])


def _killed_upload(bucket: stores.Bucket, key: str) -> None:
    """A process writes ``key`` through obstore's multipart writer and is killed (SIGKILL) after its
    first part went up: the way a save dies mid-upload. Nothing shows it but ListMultipartUploads."""
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        import obstore
        from obstore.store import S3Store
        store = S3Store({bucket.name!r}, endpoint={bucket.endpoint!r}, region="us-east-1", client_options={{"allow_http": True}})
        writer = obstore.open_writer(store, {bucket.key(key)!r}, buffer_size={PART})
        writer.write(b"x" * {PART + 1024})
        writer.flush()
        import boto3
        s3 = boto3.client("s3", endpoint_url={bucket.endpoint!r})
        for _ in range(200):
            found = s3.list_multipart_uploads(Bucket={bucket.name!r}, Prefix={bucket.key(key)!r}).get("Uploads", [])
            parts = found and s3.list_parts(Bucket={bucket.name!r}, Key=found[0]["Key"], UploadId=found[0]["UploadId"]).get("Parts")
            if parts:
                break
            import time; time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    env = {**os.environ, **bucket.env, "AWS_ALLOW_HTTP": "true"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    listed = bucket.s3.list_multipart_uploads(Bucket=bucket.name, Prefix=bucket.key(key)).get("Uploads", [])
    assert len(listed) == 1, "the killed writer left no incomplete upload"
    present = bucket.stored()
    assert key not in present


def _codes(report: dict[str, Any]) -> list[str]:
    return [finding["code"] for finding in report["findings"]]


def _only(report: dict[str, Any], code: str) -> dict[str, Any]:
    (found,) = [finding for finding in report["findings"] if finding["code"] == code]
    return found


# --- CKD506: incomplete multipart uploads ------------------------------------------------------


def test_a_healthy_bucket_is_quiet_and_costs_two_control_requests(moto_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any) -> None:
    url, objects = _burn_run(moto_bucket, tmp_path)
    report = inspect_json(url).json
    assert not {"CKD506", "CKD507"} & set(_codes(report))
    store = report["store"]
    # the listing and one read per (small) object, then ListMultipartUploads and GetBucketVersioning
    assert store["requests"] == 1 + objects + 2
    (kept,) = store["leftovers"]
    assert kept == {
        "run": url,
        "checked": True,
        "why_unchecked": None,
        "incomplete_uploads": [],
        "versioning": None,
        "noncurrent_versions": 0,
        "noncurrent_bytes": 0,
        "delete_markers": 0,
    }


def test_a_killed_upload_is_an_incomplete_upload_with_its_parts_bytes(
    moto_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any, cli: Any
) -> None:
    url, objects = _burn_run(moto_bucket, tmp_path)
    _killed_upload(moto_bucket, "run/model-4.mpk")
    report = inspect_json(url).json
    found = _only(report, "CKD506")
    # moto dates every upload 2010-11-10: old by the store's clock, so no save is still writing it
    assert found["severity"] == "warning" and found["run"] == url
    assert "1 incomplete multipart upload under" in found["message"] and " holds 5.0 MiB" in found["message"]
    fixes = " ".join(found["fixes"])
    assert f"ckptdoctor prune --abort-uploads 1d {url}" in fixes
    lifecycle = fixes.split("--lifecycle-configuration '", 1)[1].split("'", 1)[0]
    rule = json.loads(lifecycle)["Rules"][0]
    assert rule["Filter"] == {"Prefix": moto_bucket.key("run") + "/"}
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert f"--bucket {moto_bucket.name}" in fixes
    (kept,) = report["store"]["leftovers"]
    (upload,) = kept["incomplete_uploads"]
    assert upload["url"] == f"{url}/model-4.mpk" and upload["parts_bytes"] == PART
    assert upload["age_seconds"] > 365 * 86400
    # one ListParts more, for the one upload found
    assert report["store"]["requests"] == 1 + objects + 3
    assert report["runs"][0]["resume"]["index"] == 3  # what was never uploaded is no checkpoint
    human = cli("inspect", url)
    assert "CKD506" in human.stdout
    # verify asks the same once more (its two scans of the objects share one survey)
    session.forget()
    verified = json.loads(cli("verify", "--json", url).stdout)
    assert _only(verified, "CKD506")["severity"] == "warning"
    assert len(verified["store"]["leftovers"][0]["incomplete_uploads"]) == 1


def test_a_young_upload_is_a_save_that_may_still_run_by_the_stores_clock(
    weed_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any
) -> None:
    url, _ = _burn_run(weed_bucket, tmp_path)
    _killed_upload(weed_bucket, "run/model-4.mpk")
    report = inspect_json(url).json
    found = _only(report, "CKD506")
    assert found["severity"] == "info" and "a save may still be writing them" in found["message"]
    (upload,) = report["store"]["leftovers"][0]["incomplete_uploads"]
    assert upload["parts_bytes"] == PART
    assert 0 <= upload["age_seconds"] < 600  # SeaweedFS dates uploads truly, and its clock is the one used


def test_uploads_go_to_the_run_whose_prefix_holds_them(moto_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any) -> None:
    first, _ = _burn_run(moto_bucket, tmp_path, "runs", "a")
    second, _ = _burn_run(moto_bucket, tmp_path, "runs", "b")
    _killed_upload(moto_bucket, "runs/b/model-4.mpk")
    report = inspect_json(moto_bucket.url("runs")).json
    found = _only(report, "CKD506")
    assert found["run"] == second
    by_run = {kept["run"]: kept for kept in report["store"]["leftovers"]}
    assert by_run[first]["incomplete_uploads"] == [] and len(by_run[second]["incomplete_uploads"]) == 1


def test_without_boto3_inspect_works_and_says_once_what_it_did_not_check(
    moto_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _burn_run(moto_bucket, tmp_path, "runs", "a")
    _burn_run(moto_bucket, tmp_path, "runs", "b")
    _killed_upload(moto_bucket, "runs/b/model-4.mpk")
    monkeypatch.setitem(sys.modules, "boto3", None)  # import boto3 fails: only obstore is installed
    result = inspect_json(moto_bucket.url("runs"))
    report = result.json
    assert [run["resume"]["index"] for run in report["runs"]] == [3, 3]
    found = _only(report, "CKD506")  # once for the path, not once per run
    assert found["severity"] == "info" and "were not checked" in found["message"] and "boto3" in found["message"]
    assert any("pip install 'ckptdoctor[s3]'" in fix for fix in found["fixes"])
    assert not any("prune --abort-uploads" in fix for fix in found["fixes"])
    assert all(kept["checked"] is False and kept["incomplete_uploads"] is None for kept in report["store"]["leftovers"])
    assert result.exit_code == 0


def test_gs_and_az_paths_say_they_are_not_checked() -> None:
    for url in ("gs://bucket/run", "az://container/run"):
        surveyed = leftovers.survey(url)
        assert surveyed is not None and surveyed.unchecked is not None and f"not yet in {url[:2]}://" in surveyed.unchecked
        assert surveyed.uploads == () and surveyed.noncurrent == ()
        (share,) = leftovers.shared_out(surveyed, [url]).values()
        assert share.unchecked == surveyed.unchecked and not share.told


def test_a_refused_listing_is_said_and_never_stands_for_none(monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptdoctor.stores import control_plane

    class Refusing:
        server_date = None

        def uploads(self, prefix: str) -> list[Any]:
            raise control_plane._StoreRefused(
                403, "AccessDenied", "s3://bkt: the store refused to list its multipart uploads (HTTP 403, AccessDenied)"
            )

    monkeypatch.setattr(session, "control", lambda location: Refusing())
    surveyed = leftovers.survey("s3://bkt/runs")
    assert surveyed is not None and surveyed.unchecked is not None and "HTTP 403" in surveyed.unchecked
    shares = leftovers.shared_out(surveyed, ["s3://bkt/runs/a", "s3://bkt/runs/b"])
    assert [(share.unchecked is not None, share.told) for share in shares.values()] == [(True, False), (True, True)]


# --- CKD507: older versions and delete markers -------------------------------------------------


def test_deletes_on_a_versioned_bucket_are_noncurrent_versions(versioned_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any) -> None:
    url, objects = _burn_run(versioned_bucket, tmp_path)
    healthy = inspect_json(url).json
    assert "CKD507" not in _codes(healthy)
    # the versioned bucket costs one request more: ListObjectVersions
    assert healthy["store"]["requests"] == 1 + objects + 3
    assert healthy["store"]["leftovers"][0]["versioning"] == "Enabled"
    session.forget()
    present = versioned_bucket.stored()
    deleted = [key for key in present if "-1." in key]
    freed = sum(len(versioned_bucket.get(key)) for key in deleted)
    for key in deleted:  # a retention deleting epoch 1
        versioned_bucket.s3.delete_object(Bucket=versioned_bucket.name, Key=versioned_bucket.key(key))
    report = inspect_json(url).json
    found = _only(report, "CKD507")
    assert found["severity"] == "info"
    assert f"{len(deleted)} older versions" in found["message"] and f"{len(deleted)} delete markers" in found["message"]
    assert any("NoncurrentVersionExpiration" in fix for fix in found["fixes"])
    (kept,) = report["store"]["leftovers"]
    assert (kept["noncurrent_versions"], kept["noncurrent_bytes"], kept["delete_markers"]) == (len(deleted), freed, len(deleted))
    lifecycle = found["fixes"][0].split("--lifecycle-configuration '", 1)[1].split("'", 1)[0]
    assert json.loads(lifecycle)["Rules"][0]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 7}


# --- DCP through fsspec: the copy-then-delete rename of .metadata.tmp ---------------------------

_DCP_SAVE = """
import os, signal, sys, warnings
import obstore.fsspec
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

endpoint, url, die = sys.argv[1], sys.argv[2], sys.argv[3] == "die"
obstore.fsspec.register("s3")  # DCP's FsspecWriter on obstore's fsspec adapter (no s3fs)
if sys.argv[4] == "copy":
    # obstore 0.12's BufferedFile.write keeps the caller's buffer, not a copy: the memory torch.save
    # hands it is reused before the upload, and the object's tensors come out as garbage
    write = obstore.fsspec.BufferedFile.write
    obstore.fsspec.BufferedFile.write = lambda self, data: write(self, bytes(data))
if die:
    store = type(__import__("fsspec").filesystem("s3", endpoint=endpoint, client_options={"allow_http": True}, region="us-east-1"))
    copy = store._cp_file

    async def killed_in_the_rename(self, path1, path2, **kwargs):
        # fsspec's rename is a copy, then a delete: the process dies as the copy begins
        if path2.endswith("/.metadata"):
            os.kill(os.getpid(), signal.SIGKILL)
        return await copy(self, path1, path2, **kwargs)

    store._cp_file = killed_in_the_rename
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
optimizer = torch.optim.AdamW(model.parameters())
model(torch.randn(2, 4)).sum().backward()
optimizer.step()
writer = FsspecWriter(url, endpoint=endpoint, client_options={"allow_http": True}, region="us-east-1", overwrite=True)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "torch.distributed is disabled": one process is the point
    dcp.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, storage_writer=writer)
"""


def _dcp_save(bucket: stores.Bucket, step: str, die: bool = False, copy: bool = True) -> None:
    """torch DCP saves a step straight into the bucket (``FsspecWriter``), in a process of its
    own; ``die``: the process is killed inside the rename of ``.metadata.tmp`` to ``.metadata``."""
    pytest.importorskip("torch.distributed.checkpoint")
    env = {**os.environ, **bucket.env, "AWS_ALLOW_HTTP": "true"}
    args = [bucket.endpoint, bucket.url("run", step), "die" if die else "live", "copy" if copy else "as-is"]
    done = warm.run(_DCP_SAVE, env, timeout=300, args=args)  # forked with torch imported
    assert done.returncode == (-signal.SIGKILL if die else 0), done.stderr[-2000:]


def _download(bucket: stores.Bucket, under: str, folder: Path) -> Path:
    listed = bucket.stored()
    for key in listed:
        if key.startswith(under + "/"):
            (folder / key).parent.mkdir(parents=True, exist_ok=True)
            (folder / key).write_bytes(bucket.get(key))
    return folder / under


def _dcp_loads(folder: Path) -> bool:
    """Whether torch DCP itself loads the step in ``folder``."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_dcp import dcp_load

    return dcp_load(folder) is None


@pytest.mark.parametrize("over_a_complete_step", [False, True])
def test_dcp_killed_in_its_fsspec_rename_leaves_a_step_without_metadata(
    moto_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any, over_a_complete_step: bool
) -> None:
    _dcp_save(moto_bucket, "step-10")
    if over_a_complete_step:
        _dcp_save(moto_bucket, "step-20")
        listed = moto_bucket.stored()
        assert "run/step-20/.metadata" in listed
    _dcp_save(moto_bucket, "step-20", die=True)  # a save over step 20 deletes its .metadata first
    keys = moto_bucket.stored()
    assert "run/step-20/.metadata.tmp" in keys and "run/step-20/.metadata" not in keys
    url = moto_bucket.url("run")
    report = inspect_json(url).json
    (run,) = report["runs"]
    assert run["layout"] == "dcp" and run["resume"]["index"] == 10
    assert [c["status"] for c in run["checkpoints"]] == ["complete", "partial"]
    marker = _only(report, "CKD106")
    assert marker["index"] == 20 and "killed inside that rename" in marker["message"]
    staged = f"{url}/step-20/.metadata.tmp"
    assert f"`aws s3 cp {staged} {url}/step-20/.metadata`" in marker["fixes"][0]
    assert _only(report, "CKD202")["path"] == staged
    assert not _dcp_loads(_download(moto_bucket, "run/step-20", tmp_path / "before"))
    # the fix, as it says: the copy commits the step, and DCP loads it
    moto_bucket.s3.copy_object(
        Bucket=moto_bucket.name, Key=moto_bucket.key("run/step-20/.metadata"),
        CopySource={"Bucket": moto_bucket.name, "Key": moto_bucket.key("run/step-20/.metadata.tmp")},
    )  # fmt: skip
    session.forget()
    fixed = inspect_json(url).json
    assert fixed["runs"][0]["resume"]["index"] == 20 and "CKD106" not in _codes(fixed)
    assert _dcp_loads(_download(moto_bucket, "run/step-20", tmp_path / "after"))


def test_a_dcp_step_in_a_bucket_is_complete_exactly_when_dcp_loads_it(
    moto_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any
) -> None:
    # obstore 0.12's fsspec writer keeps torch.save's buffers by reference (see _DCP_SAVE): whatever
    # it wrote, ckptdoctor's verdict on the step is DCP's own
    _dcp_save(moto_bucket, "step-10", copy=False)
    loads = _dcp_loads(_download(moto_bucket, "run/step-10", tmp_path))
    (checkpoint,) = inspect_json(moto_bucket.url("run")).json["runs"][0]["checkpoints"]
    assert (checkpoint["status"] == "complete") == loads


# --- Orbax on gs://: commit_success.txt is the commit ------------------------------------------


def _as_gcs(folder: Path, url: str) -> Any:
    """What a listing of ``url`` would give for the files of ``folder``: the same folders and
    entries, named by their gs:// URLs, read from the local files. gs:// has no server here (no
    GCS emulator installs from the registries), so the bucket's listing is the one step left out."""
    from ckptdoctor.discover import Discovery, Listing, discover

    def renamed(path: str) -> str:
        return url + path[len(str(folder)) :]

    found = discover(str(folder))
    listings = tuple(
        Listing(renamed(listing.path), listing.os_path, tuple(entry._replace(path=renamed(entry.path)) for entry in listing.entries))
        for listing in found.listings
    )
    return Discovery(listings, found.unlisted)


def _orbax_run(folder: Path) -> Any:
    """Two steps saved by real Orbax the way it saves to GCS (``CommitFileTemporaryPath``: the
    step folder under its final name, ``commit_success.txt`` written last); the options to reopen it."""
    ocp = pytest.importorskip("orbax.checkpoint", reason="real Orbax checkpoints need the orbax extra")
    jnp = pytest.importorskip("jax.numpy")
    from orbax.checkpoint._src.path import atomicity

    options = ocp.CheckpointManagerOptions(temporary_path_class=atomicity.CommitFileTemporaryPath)
    with ocp.CheckpointManager(folder, options=options) as manager:
        for step in (1, 2):
            manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave({"w": jnp.full((64, 64), float(step))})))
        manager.wait_until_finished()
    return ocp, options


def test_an_orbax_step_on_gcs_without_its_commit_marker_is_not_the_resume_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inspect_json: Any
) -> None:
    import dataclasses

    from ckptdoctor.pipelines import scan

    folder = tmp_path / "run"
    ocp, options = _orbax_run(folder)
    (folder / "2" / "commit_success.txt").unlink()  # killed before its last write
    shutil.copytree(folder, tmp_path / "cleaned")
    # Orbax itself, saving the GCS way: step 2 is no step, and a manager that cleans up deletes it
    with ocp.CheckpointManager(folder, options=options) as manager:
        assert list(manager.all_steps()) == [1]
    url = "gs://ckpt-bucket/runs/run"
    listed = scan.discovered
    monkeypatch.setattr(scan, "discovered", lambda path, tally=None: _as_gcs(folder, url) if path == url else listed(path, tally))
    report, _ = scan.inspect([url])
    (run,) = report.runs
    assert run.path == url and run.layout == "orbax"
    assert run.resume is not None and run.resume.index == 1
    assert [c.status.value for c in run.checkpoints] == ["complete", "incomplete"]
    (marker,) = [f for f in report.findings if f.code == "CKD106"]
    assert marker.severity.value == "error" and marker.index == 2
    assert "orbax#394" in marker.message
    assert marker.fixes[0].startswith("Orbax will delete step 2 (gs://ckpt-bucket/runs/run/2)")
    # gs:// has no uploads or versions to ask about here: said once, never "none"
    (unchecked,) = [f for f in report.findings if f.code == "CKD506"]
    assert unchecked.severity.value == "info" and "not yet in gs://" in unchecked.message
    # on a local disk the rename committed the same step: a warning, and still the resume point
    local = inspect_json(folder).json
    assert local["runs"][0]["resume"]["index"] == 2
    assert [f["severity"] for f in local["findings"] if f["code"] == "CKD106"] == ["warning"]
    # and Orbax's own clean-up, the GCS way, deletes the step ckptdoctor called incomplete (in a
    # process that opened no manager of the folder before: one opened first keeps it from doing so)
    cleaning = dataclasses.replace(options, cleanup_tmp_directories=True)
    with ocp.CheckpointManager(tmp_path / "cleaned", options=cleaning) as manager:
        assert list(manager.all_steps()) == [1]  # it waits for the clean-up
        for _ in range(100):  # the clean-up runs in the background
            if not (tmp_path / "cleaned" / "2").exists():
                break
            time.sleep(0.05)
    assert sorted(os.listdir(tmp_path / "cleaned")) == ["1"]


# --- Lightning with an s3:// default_root_dir ---------------------------------------------------

_LIGHTNING = """
import logging, sys, warnings
import obstore.fsspec
endpoint, url, then = sys.argv[1], sys.argv[2], sys.argv[3]  # then: "train", or the ckpt_path to resume from
obstore.fsspec.register("s3")  # Lightning's fsspec on obstore's adapter (no s3fs)
write = obstore.fsspec.BufferedFile.write  # obstore 0.12 keeps torch.save's buffers: copy them (see _DCP_SAVE)
obstore.fsspec.BufferedFile.write = lambda self, data: write(self, bytes(data))
import fsspec
fsspec.config.conf["s3"] = {"endpoint": endpoint, "client_options": {"allow_http": True}, "region": "us-east-1"}
import torch
import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
logging.getLogger("lightning").setLevel(logging.ERROR)
warnings.simplefilter("ignore")


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters())

    def train_dataloader(self):
        x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def trainer(epochs, saves=True):
    # a resume saves nothing (save_top_k=0), so the bucket stays as inspect saw it
    keep = ModelCheckpoint(save_last=True, save_top_k=-1) if saves else ModelCheckpoint(save_last=False, save_top_k=0)
    return L.Trainer(
        default_root_dir=url, max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
        accelerator="cpu", callbacks=[keep],
    )


if then == "train":
    trainer(2).fit(Tiny())
else:  # resume as users do, and say what "last" resolved to and what it restored
    from lightning.pytorch.trainer.connectors.checkpoint_connector import _CheckpointConnector

    start = _CheckpointConnector.resume_start

    def resume_start(self, checkpoint_path=None, **options):
        print("RESOLVED", checkpoint_path)  # what ckpt_path="last" became
        return start(self, checkpoint_path, **options)

    _CheckpointConnector.resume_start = resume_start

    class Say(L.Callback):
        def on_train_start(self, trainer, module):
            print("RESUMED", trainer.global_step)

    resumed = trainer(3, saves=False)
    resumed.callbacks.append(Say())
    resumed.fit(Tiny(), ckpt_path=then)
"""


def _lightning(bucket: stores.Bucket, then: str) -> str:
    pytest.importorskip("lightning")
    env = {**os.environ, **bucket.env, "AWS_ALLOW_HTTP": "true"}
    done = warm.run(_LIGHTNING, env, timeout=300, args=[bucket.endpoint, bucket.url("run"), then])  # forked with Lightning imported
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_lightning_saving_to_s3_resumes_where_inspect_says(moto_bucket: stores.Bucket, inspect_json: Any) -> None:
    _lightning(moto_bucket, "train")  # a tiny model, 2 epochs on the CPU, default_root_dir in the bucket
    url = moto_bucket.url("run")
    report = inspect_json(url).json
    assert not [f for f in report["findings"] if f["severity"] != "info"]
    (run,) = report["runs"]
    assert (run["path"], run["layout"]) == (f"{url}/checkpoints", "lightning")
    assert [c["status"] for c in run["checkpoints"]] == ["complete", "complete"]
    assert [f["path"] for f in run["loose_files"] if f["role"] == "pointer"] == [f"{url}/checkpoints/last.ckpt"]
    assert 'not `ckpt_path="last"`' in run["resume"]["how"] and "Lightning#18261" in run["resume"]["how"]
    # Lightning resumes from the path inspect names, at the step inspect names
    said = _lightning(moto_bucket, run["resume"]["path"])
    assert said.split("RESOLVED ", 1)[1].split()[0] == run["resume"]["path"] == f"{url}/checkpoints/epoch=1-step=4.ckpt"
    assert int(said.split("RESUMED ", 1)[1].split()[0]) == run["resume"]["index"] == 4
    # its own ckpt_path="last" lists the bucket's last.ckpt without its s3:// and looks for it on the
    # local disk (Lightning#18261, open PR #21936): it finds nothing and trains from step 0. Where
    # a Lightning fixes that, "last" must land on the same step
    said = _lightning(moto_bucket, "last")
    resolved, step = said.split("RESOLVED ", 1)[1].split()[0], int(said.split("RESUMED ", 1)[1].split()[0])
    assert (resolved, step) in (("None", 0), (f"{url}/checkpoints/last.ckpt", 4))
