"""Disk rules (CKD5xx): will the next save fit, and can it be written safely?

These checks look at the volume under a run: free space and inodes against the size of the next
save and the run's retention, writability, and the kind of filesystem. A run in a bucket has no
volume: what its probes found (``stores.probe``) stands in for it, with its own rules (CKD509-511)
and its own case of CKD503's fixes (``BUCKET``); CKD501 and CKD502 are never fired there. And, for
a run in a bucket, what the store keeps under it that no listing shows (incomplete uploads, older
versions: CKD506, CKD507).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ckptdoctor.model import Access, BucketCheck, DiskCheck, Finding, Freeing, Run, Severity
from ckptdoctor.places import OWN_FOLDER, nearest_existing
from ckptdoctor.quoting import shell_word
from ckptdoctor.rules.context import RUNWAY, RunContext, make_finding, run_context
from ckptdoctor.rules.rule import BUCKET, OTHERWISE, Fix, Rule, fires, fix
from ckptdoctor.stores.urls import parse
from ckptdoctor.units import duration, size

if TYPE_CHECKING:
    from ckptdoctor.layouts.registry import Layout

_RETENTION = fix(
    "Keep fewer checkpoints: set a retention limit in the training code, and save optimizer state only with the checkpoints you may resume from.",
    slot="CKD501/keep-fewer",
)
"""How a framework keeps fewer checkpoints: the fix of both CKD501 and CKD502."""

NO_RUN = "no-run"
"""The case of a finding on a folder that holds no run to prune or repair: one that does not
exist yet (``diskcheck`` before the first save), or a trainer's staging folder. Its fixes name
no ``prune`` or ``repair`` of it, nor a ``diskcheck`` with no size to estimate."""

INSUFFICIENT_SPACE = Rule(
    code="CKD501",
    name="insufficient-space",
    severity=Severity.ERROR,
    summary="Free space is below the estimated size of the next save plus headroom.",
    meaning=(
        "The next save will not fit. Optimizer state for Adam/AdamW is about twice the model, so one checkpoint (model plus "
        "optimizer) needs about three times the model's size, and the old checkpoint stays on disk until the new one is "
        "written. burn, `torch.save` and most frameworks write straight to the final file name, so a save that runs out of "
        "space leaves a truncated checkpoint beside the good ones and stops the run: burn with `Can save optimizer "
        "checkpoint.` or `Training interrupted: … No space left on device`, torch with `PytorchStreamWriter failed writing "
        "file`. With burn's default retention, the delete of an older epoch queued after the failed save still goes "
        "through, so a full disk can also cost one of the checkpoints you meant to keep."
    ),
    causes=(
        "The model grew, or optimizer state joined the saves. Retention keeps more checkpoints than the disk holds (burn keeps "
        "the last two epochs plus the best; HF without `save_total_limit`, DeepSpeed and DCP keep everything). Other jobs "
        "share the volume. Leftovers of earlier failed saves take space. Checkpoints go to a small root or home partition "
        "instead of a scratch volume."
    ),
    fixes=(
        fix(
            "Free disk space on the volume that holds {run}: optimizer state is about twice the model for Adam/AdamW, so one save needs about three times the model's size; `ckptdoctor diskcheck {run}` shows the estimate against the free space.",
            case=OTHERWISE,
        ),
        fix(
            "Free disk space on the volume that will hold {run}: optimizer state is about twice the model for Adam/AdamW, so one save needs about three times the model's size; then run this diskcheck again, with the same size options.",
            case=NO_RUN,
        ),
        fix("Free space for the next save: {prune_to_fit}.", case=OTHERWISE),
        fix(
            "Prune the other runs on that volume, each in its own folder (ckptdoctor's prune always keeps their resume points), or delete what is no longer needed there.",
            case=NO_RUN,
        ),
        _RETENTION,
        "Save to a bigger disk: point the checkpoint directory at a scratch or data volume with room for several saves.",
        fix(
            "Check that the checkpoint folder exists and is writable before a long run: `ckptdoctor diskcheck {run}` tests it with a probe file.",
            slot="CKD501/check-folder",
            case=OTHERWISE,
        ),
        fix(
            "Create the checkpoint folder before the run starts (`mkdir -p {run}`), so that a wrong path fails at once rather than at the first save.",
            slot="CKD501/create-folder",
            case=NO_RUN,
        ),
        fix(
            "Remove the leftovers of a failed save, which still take space and confuse resumes: `{repair} {this_run}`.",
            case=OTHERWISE,
        ),
    ),
    messages=(
        "Can save optimizer checkpoint.",
        "Can save model checkpoint.",
        "Can save learning rate scheduler checkpoint.",
        "Can save the state.",
        "Error when saving the state",
        "Can send message to checkpointer thread.",
        "No space left on device",
        "[Errno 28] No space left on device",
        "No space left on device (os error 28)",
        'Os { code: 28, kind: StorageFull, message: "No space left on device" }',
        "write(): fd … failed with No space left on device",
        "Disk quota exceeded",
        "PytorchStreamWriter failed writing file",
        "unexpected pos",
        "basic_ios::clear: iostream error",
    ),
    related=("CKD502", "CKD503", "CKD505", "CKD203", "CKD101"),
)


def _on_disk(*texts: str) -> tuple[Fix, ...]:
    """Fixes for a folder on disk (a run's, or one not made yet), never for a bucket."""
    return tuple(fix(text, case=case) for text in texts for case in (OTHERWISE, NO_RUN))


SPACE_RUNWAY = Rule(
    code="CKD502",
    name="space-runway",
    severity=Severity.WARNING,
    summary="Under the run's retention, the disk fills up within a few saves.",
    meaning=(
        "The next save fits, but the ones after it will not: from the size of one checkpoint and how many the run's retention "
        "keeps, ckptdoctor projects that the volume runs out within a few saves. When it does, a save fails part-way and "
        "leaves a truncated checkpoint behind (CKD501, CKD203)."
    ),
    causes=(
        "Retention that keeps everything: HF without `save_total_limit`, DeepSpeed and DCP (they never prune), Megatron-LM "
        "without `--save-retain-interval`. A burn run resumed several times: the checkpointing strategy starts fresh on each "
        "resume and never deletes the epochs from before it. Other jobs filling the same volume. Temporary and partial "
        "files left by failed saves."
    ),
    fixes=(
        _RETENTION,
        fix(
            "Or prune from cron with a safe policy that always keeps the resume point: `ckptdoctor prune {this_run} --keep-last 2 --yes -q`.",
            case=OTHERWISE,
        ),
        fix(
            "Or, once the run has saved, prune it from cron with a safe policy that always keeps the resume point (`--keep-last 2 --yes -q`).",
            case=NO_RUN,
        ),
        "Move the run to a bigger volume, or save less often.",
        fix("Re-check after changing settings: `ckptdoctor diskcheck {run}` prints how many saves still fit.", case=OTHERWISE),
        fix(
            "Re-check after changing settings: this diskcheck again, with the same size options, prints how many saves still fit.",
            case=NO_RUN,
        ),
    ),
    messages=(),
    related=("CKD501", "CKD505", "CKD202"),
)

NOT_WRITABLE = Rule(
    code="CKD503",
    name="not-writable",
    severity=Severity.ERROR,
    summary="The checkpoint directory is missing, not writable, or on a disk too full to take a file.",
    meaning=(
        "The next save will fail. burn creates the checkpoint folder but ignores errors doing so, then fails at the first save "
        "with `Can save … checkpoint.` and a `Permission denied` or `No such file or directory` inside; torch and "
        "safetensors fail with `[Errno 13] Permission denied`, `Read-only file system` or `No space left on device`. A whole "
        "epoch of training can run before that first save fails. The message says which: a disk that is full, or a folder "
        "this user may not write. In a bucket, the write probe (an object created, then deleted, under the run's "
        "`.ckptdoctor/` prefix) was refused, and the message names the permission the identity lacks (`s3:PutObject`)."
    ),
    causes=(
        "Full: other jobs, or checkpoints no retention deletes, took the last bytes or inodes (or the user's quota). "
        "Not writable: the folder belongs to another user (a container that ran as root, a shared project folder); the "
        "volume is mounted read-only (a dataset mount, a snapshot, or a filesystem the kernel remounted read-only after "
        "errors); a typo in the path, or a network volume that is not mounted; a parent folder without write or search permission. "
        "In a bucket: a read-only role, a policy whose prefix leaves the run's keys out, a bucket policy that denies writes."
    ),
    fixes=(
        fix(
            "When the message says the disk is full, free space for the next save: {prune_to_fit} (a prune works on a full disk: it deletes without a journal when none fits); and check quotas with `quota -s` or `lfs quota`.",
            case=OTHERWISE,
        ),
        fix(
            "When the message says the disk is full: free space on the volume (ckptdoctor's prune of the other runs there works on a full disk), and check quotas with `quota -s` or `lfs quota`.",
            case=NO_RUN,
        ),
        fix(
            "When it says permission denied: check who may write there with `ls -ld {run}` and `namei -l {run}`, and fix it with `chown -R $USER {run}` or `chmod u+w {run}`.",
            case=OTHERWISE,
        ),
        fix(
            "When it says permission denied: `ls -ld {existing}` and `namei -l {existing}` show which folder refuses you; make that one folder writable for you (`chmod u+w`, or ask its owner), never a shared parent recursively.",
            case=NO_RUN,
        ),
        *_on_disk(
            "When it says read-only file system: `findmnt -T {existing}` shows `ro` among its options: remount it read-write or save elsewhere.",
            "When it says a part of the path is not a folder: a file stands where a folder should be; save elsewhere, or move that file away.",
            "Create the folder before training (`mkdir -p {run}`) so that a wrong path fails at once rather than at the first save.",
        ),
        fix("Run `ckptdoctor diskcheck {run}` before long jobs: it writes and deletes a probe file.", case=OTHERWISE),
        fix("Run this diskcheck again before the job starts (it writes and deletes a probe file).", case=NO_RUN),
        fix(
            'In a bucket: grant the permission the message names on the run\'s keys to the identity that saves there and runs ckptdoctor (`aws sts get-caller-identity` shows which it is), e.g. the policy statement `{{"Effect": "Allow", "Action": ["s3:PutObject", "s3:DeleteObject"], "Resource": "arn:aws:s3:::{bucket}/{keys}*"}}`; on gs:// `roles/storage.objectUser`, on az:// the Storage Blob Data Contributor role.',
            case=BUCKET,
        ),
        fix(
            "Try the write by hand: `aws s3api put-object --bucket {bucket} --key {probe_key} --body /dev/null`, then `aws s3api delete-object --bucket {bucket} --key {probe_key}`.",
            case=BUCKET,
        ),
        fix(
            "Run `ckptdoctor diskcheck {run}` again after the change: it creates and deletes a probe object under the run's `.ckptdoctor/` prefix.",
            case=BUCKET,
        ),
    ),
    messages=(
        "Permission denied",
        "Read-only file system",
        "No space left on device",
    ),
    related=("CKD501", "CKD211", "CKD504"),
)

NETWORK_FILESYSTEM = Rule(
    code="CKD504",
    name="network-filesystem",
    severity=Severity.INFO,
    summary="The run is on NFS, CIFS, FUSE or Lustre: non-atomic writes leave partial files on failure.",
    meaning=(
        "Network and FUSE filesystems fail in ways local disks rarely do: a dropped connection, a server-side quota or a "
        "client cache that flushes late can cut a save part-way. Frameworks that write straight to the final name (burn, "
        "plain `torch.save`, Lightning before 2.4) then leave a truncated checkpoint under its real name, and bucket mounts "
        "(s3fs, gcsfuse) may upload only when the file is closed. Nothing is wrong yet; partial checkpoints are simply more "
        "likely here."
    ),
    causes=(
        "Checkpoints saved to a shared home or project directory, a cluster's parallel filesystem, or an object-store bucket "
        "mounted through FUSE."
    ),
    fixes=(
        "Save to a local disk (node-local SSD, `/tmp`) and copy finished checkpoints to the shared volume afterwards (`rsync`, or the framework's asynchronous upload).",
        "In your own saving code, write atomically: save to `name.tmp` in the same folder, `fsync`, then `os.replace` it to the final name.",
        fix(
            "Verify checkpoints after they land on the shared volume with `ckptdoctor verify {run}`, and keep more than one complete checkpoint.",
            case=OTHERWISE,
        ),
        fix(
            "Verify checkpoints after they land on the shared volume (ckptdoctor's verify of the run folder), and keep more than one complete checkpoint.",
            case=NO_RUN,
        ),
    ),
    messages=(),
    related=("CKD203", "CKD202", "CKD211", "CKD501"),
)

LOW_INODES = Rule(
    code="CKD505",
    name="low-inodes",
    severity=Severity.WARNING,
    summary="Too few free inodes are left for the next save.",
    meaning=(
        "Every file and folder takes an inode, and a filesystem can run out of inodes before it runs out of bytes. Sharded "
        "checkpoints use many per save (DCP writes a file per rank or per tensor, DeepSpeed one per rank, Orbax many small "
        "files per step). When none are left, creating a file fails with `No space left on device` although `df -h` still "
        "shows free space."
    ),
    causes=(
        "Many small files on the same volume (datasets of small images, logs, caches, `__pycache__`). Many kept checkpoints of "
        "a sharded layout. A filesystem created with few inodes."
    ),
    fixes=(
        "Check with `df -i {existing}`, and find where the inodes go with `du --inodes -s * | sort -n` on the volume.",
        fix("Prune old checkpoints, always keeping the resume point: `ckptdoctor prune {this_run} --keep-last 2`.", case=OTHERWISE),
        fix("Prune old checkpoints of the other runs on the volume (ckptdoctor's prune keeps their resume points).", case=NO_RUN),
        "Pack small files (datasets, logs) into archives or move them to another volume.",
        fix("Write fewer files per checkpoint, or move checkpoints to a filesystem with more inodes.", slot="CKD505/fewer-files"),
    ),
    messages=("No space left on device",),
    related=("CKD501", "CKD502"),
)


_LIFECYCLE = "aws s3api put-bucket-lifecycle-configuration --bucket {bucket} --lifecycle-configuration"
_REPLACES = (
    "The call replaces the bucket's whole lifecycle configuration: first list the rules it has "
    "(`aws s3api get-bucket-lifecycle-configuration --bucket {bucket}`) and put them in the same `Rules` list."
)

NO_UPLOAD_CLEANUP = Rule(
    code="CKD509",
    name="no-upload-cleanup",
    severity=Severity.WARNING,
    summary="No lifecycle rule of the bucket aborts incomplete multipart uploads under the run.",
    meaning=(
        "Big checkpoints are uploaded in parts. A save killed mid-upload (a preempted job, an out-of-memory kill, an "
        "exception inside the writer) leaves its parts stored, and billed, with no object to show them: only "
        "`ListMultipartUploads` lists them, and nothing removes them unless a lifecycle rule with "
        "`AbortIncompleteMultipartUpload` does. A run killed often leaves gigabytes behind that no listing of the run shows."
    ),
    causes=(
        "Buckets are made without lifecycle rules. A rule exists but for another prefix, or is disabled. A rule filtered by "
        "tags never applies to uploads in progress."
    ),
    fixes=(
        fix(
            "Abort uploads a week old: `"
            + _LIFECYCLE
            + ' \'{{"Rules": [{{"ID": "abort-incomplete-uploads", "Status": "Enabled", "Filter": {{"Prefix": ""}}, "AbortIncompleteMultipartUpload": {{"DaysAfterInitiation": 7}}}}]}}\'`. '
            + _REPLACES
        ),
        "See what is left now: `aws s3api list-multipart-uploads --bucket {bucket} --prefix {keys_arg}`.",
        "Run `ckptdoctor diskcheck {run}` again: the finding goes once an enabled rule covers the run's keys.",
    ),
    messages=(),
    related=("CKD510", "CKD511"),
)

NO_VERSION_EXPIRY = Rule(
    code="CKD510",
    name="no-version-expiry",
    severity=Severity.WARNING,
    summary="The bucket is versioned and no lifecycle rule expires noncurrent versions under the run: deletes free nothing.",
    meaning=(
        "On a versioned bucket a delete only adds a delete marker: the checkpoint's bytes stay stored, and billed, as a "
        "noncurrent version. Pruning the run, or a framework's own retention, then frees nothing, and the bucket grows as if "
        "nothing were ever deleted, until a lifecycle rule with `NoncurrentVersionExpiration` removes the older versions."
    ),
    causes=(
        "Versioning turned on for the whole bucket (for protection, or because replication needs it) with no rule for "
        "older versions; a rule for another prefix; a rule that is disabled."
    ),
    fixes=(
        fix(
            "Remove older versions a week after they are replaced or deleted: `"
            + _LIFECYCLE
            + ' \'{{"Rules": [{{"ID": "expire-old-checkpoint-versions", "Status": "Enabled", "Filter": {{"Prefix": "{keys}"}}, "NoncurrentVersionExpiration": {{"NoncurrentDays": 7}}, "Expiration": {{"ExpiredObjectDeleteMarker": true}}}}]}}\'`. '
            + _REPLACES
        ),
        "See what older versions hold now: `aws s3api list-object-versions --bucket {bucket} --prefix {keys_arg}`.",
        "Or save checkpoints to a bucket without versioning: they are rewritten and deleted all the time, and a complete "
        "checkpoint kept by the run's retention is the protection that matters.",
    ),
    messages=(),
    related=("CKD509", "CKD502"),
)

MISSING_PERMISSION = Rule(
    code="CKD511",
    name="missing-permission",
    severity=Severity.WARNING,
    summary="The identity lacks a permission on the bucket that a ckptdoctor command needs.",
    meaning=(
        "`diskcheck` of a run in a bucket tries what the other commands do: list the run's prefix (`s3:ListBucket`: every "
        "command), read one byte of an object (`s3:GetObject`: inspect, verify, prune, repair), delete its probe object "
        "(`s3:DeleteObject`: prune, repair), and list and abort multipart uploads (`s3:ListBucketMultipartUploads`, "
        "`s3:AbortMultipartUpload`: the incomplete-upload findings and `prune --abort-uploads`). A permission the store "
        "refused makes those commands fail when they reach it, possibly part-way. The trainer's own saves need only the "
        "write, so this is a warning; a refused write is CKD503."
    ),
    causes=(
        "A read-only role (an evaluation job's) used for maintenance. A policy granting object actions on "
        "`arn:aws:s3:::BUCKET/*` but not `s3:ListBucket` on the bucket itself, or the reverse. A prefix condition that "
        "leaves the run's prefix out. A bucket policy, object lock or organisation policy that denies deletes."
    ),
    fixes=(
        "Grant the permission the message names to the identity that runs the command (`aws sts get-caller-identity` shows "
        "it): object actions on `arn:aws:s3:::{bucket}/{keys}*`, and `s3:ListBucket` and `s3:ListBucketMultipartUploads` "
        "on `arn:aws:s3:::{bucket}` itself.",
        'The statements that let ckptdoctor tend the run: `{{"Effect": "Allow", "Action": ["s3:GetObject", '
        '"s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"], "Resource": "arn:aws:s3:::{bucket}/{keys}*"}}` '
        'and `{{"Effect": "Allow", "Action": ["s3:ListBucket", "s3:ListBucketMultipartUploads"], '
        '"Resource": "arn:aws:s3:::{bucket}"}}`.',
        "On gs:// grant `roles/storage.objectUser` on the bucket; on az:// the Storage Blob Data Contributor role (the Reader "
        "role lists and reads only).",
        "Run `ckptdoctor diskcheck {run}` again: it tries each permission again.",
    ),
    messages=("AccessDenied",),
    related=("CKD503",),
)

UNCHECKED = "unchecked"
"""The case of a CKD506 finding that says a store's uploads and versions were not asked about."""

_LIFECYCLE_RULE = (
    "`"
    + _LIFECYCLE
    + """ '{{"Rules": [{{"ID": "%s", "Status": "Enabled", "Filter": {{"Prefix": "{key_prefix}"}}, %s}}]}}'`. """
    + _REPLACES
)
"""A lifecycle rule for the run's prefix, as the AWS CLI puts it (its ID and action filled in)."""

INCOMPLETE_UPLOAD = Rule(
    code="CKD506",
    name="incomplete-upload",
    severity=Severity.WARNING,
    summary="Incomplete multipart uploads under the run's prefix hold stored, billed parts that no object shows.",
    meaning=(
        "A multipart upload was begun under the run's prefix and neither completed nor aborted. No listing of the bucket "
        "shows it: the object it would have made does not exist, so nothing resumes from it, yet the parts already "
        "uploaded stay stored, and billed, until the upload is aborted. A save killed while it wrote to a bucket (DCP's "
        "`FsspecWriter`, Lightning and HF through fsspec, Composer's and NeMo's uploaders) leaves one for each large file "
        "it was writing. An upload begun less than a day ago (by the store's clock) may be a save still running: it is "
        "reported as info, and its checkpoint is not finished. Where the uploads could not be listed (boto3 is not "
        "installed, `gs://` and `az://`, a permission refused), an info finding of this rule says so once per path: "
        "ckptdoctor never calls such a run free of them."
    ),
    causes=(
        "A job killed, pre-empted or out of memory while it uploaded a checkpoint; a network failure the client gave up "
        "on; a client that abandons the upload when its process dies (fsspec and obstore writers do); a bucket with no "
        "lifecycle rule that aborts incomplete uploads."
    ),
    fixes=(
        fix(
            "Abort the uploads begun more than a day ago (no save runs that long): `ckptdoctor prune --abort-uploads 1d {this_run}` (add `--dry-run` to list them first).",
            case=OTHERWISE,
        ),
        fix(
            "Let the bucket abort them by itself with an `AbortIncompleteMultipartUpload` lifecycle rule: "
            + _LIFECYCLE_RULE % ("abort-incomplete-uploads", '"AbortIncompleteMultipartUpload": {{"DaysAfterInitiation": 1}}'),
            case=OTHERWISE,
        ),
        fix(
            "To list incomplete uploads and older versions of runs in S3 buckets, install boto3 with the `s3` extra: `pip install 'ckptdoctor[s3]'`.",
            case=UNCHECKED,
        ),
        fix(
            "Where the store refused, grant `s3:ListBucketMultipartUploads`, `s3:GetBucketVersioning` and `s3:ListBucketVersions` on the bucket; on `gs://` and `az://`, the store's own console lists them.",
            case=UNCHECKED,
        ),
    ),
    messages=(),
    related=("CKD507", "CKD106", "CKD203"),
)

NONCURRENT_VERSIONS = Rule(
    code="CKD507",
    name="noncurrent-versions",
    severity=Severity.INFO,
    summary="On a versioned bucket, older versions and delete markers under the run's prefix keep bytes that deletes did not free.",
    meaning=(
        "The bucket keeps every version of every object. Deleting a checkpoint there (a prune, a framework's retention, "
        "`aws s3 rm`) only puts a delete marker in front of it: its bytes stay stored and billed as a noncurrent "
        "version until a lifecycle rule expires them, and rewriting an object keeps its old bytes the same way. Nothing is "
        "wrong with the run or its resume point, and versioning is usually on by design (it undoes deletes), so this is "
        "information about the bill, not a warning."
    ),
    causes=(
        "Versioning turned on for the bucket (or once turned on and then suspended) with no `NoncurrentVersionExpiration` "
        "lifecycle rule; checkpoints deleted or overwritten under the run's prefix."
    ),
    fixes=(
        "Expire older versions and the delete markers left alone after them with a `NoncurrentVersionExpiration` lifecycle rule: "
        + _LIFECYCLE_RULE
        % (
            "expire-noncurrent-checkpoints",
            '"NoncurrentVersionExpiration": {{"NoncurrentDays": 7}}, "Expiration": {{"ExpiredObjectDeleteMarker": true}}',
        ),
        "See what is kept with `aws s3api list-object-versions --bucket {bucket} --prefix {key_prefix}`; if the versions are kept on purpose, this is their cost.",
    ),
    messages=(),
    related=("CKD506", "CKD502"),
)

RULES: tuple[Rule, ...] = (
    INSUFFICIENT_SPACE,
    SPACE_RUNWAY,
    NOT_WRITABLE,
    NETWORK_FILESYSTEM,
    LOW_INODES,
    INCOMPLETE_UPLOAD,
    NONCURRENT_VERSIONS,
    NO_UPLOAD_CLEANUP,
    NO_VERSION_EXPIRY,
    MISSING_PERMISSION,
)

STALE_UPLOAD = 86400.0
"""An incomplete upload older than this (seconds, by the store's clock) is no save in progress."""


@fires(INCOMPLETE_UPLOAD, NONCURRENT_VERSIONS)
def store_leftovers(ctx: RunContext) -> Iterator[Finding]:
    """CKD506, CKD507: what the store keeps under a run in a bucket that no listing shows."""
    kept = ctx.run.store
    if kept is None:
        return
    if kept.unchecked is not None:
        if not kept.told:
            yield ctx.finding(
                INCOMPLETE_UPLOAD,
                f"incomplete multipart uploads and older versions under {ctx.run.path} were not checked: {kept.unchecked}",
                severity=Severity.INFO,
                case=UNCHECKED,
            )
        return
    place = _place(ctx.run.path)
    if kept.uploads:
        stale = [upload for upload in kept.uploads if upload.age is None or upload.age >= STALE_UPLOAD]
        count = len(kept.uploads)
        ages = [upload.age for upload in kept.uploads if upload.age is not None]
        named = ", ".join(upload.url.rsplit("/", 2)[-2] + "/" + upload.url.rsplit("/", 1)[-1] for upload in kept.uploads[:3])
        message = (
            f"{count} incomplete multipart upload{'s' if count != 1 else ''} under {ctx.run.path} hold{'s' if count == 1 else ''} "
            f"{size(sum(upload.parts_bytes for upload in kept.uploads))} of parts that no object shows ({named}{', …' if count > 3 else ''})"
        )
        if ages:
            message += f"; the oldest began {duration(max(ages))} ago by the store's clock"
        if not stale:
            message += ": a save may still be writing them"
        yield ctx.finding(INCOMPLETE_UPLOAD, message, severity=None if stale else Severity.INFO, context=place, case=OTHERWISE)
    if kept.noncurrent or kept.delete_markers:
        yield ctx.finding(
            NONCURRENT_VERSIONS,
            f"the bucket's versioning is {kept.versioning or 'off now'}: {kept.noncurrent} older version{'s' if kept.noncurrent != 1 else ''} "
            f"({size(kept.noncurrent_bytes)}) and {kept.delete_markers} delete marker{'s' if kept.delete_markers != 1 else ''} under "
            f"{ctx.run.path} keep bytes that deletes did not free",
            context=place,
        )


def _place(url: str) -> dict[str, str]:
    """The bucket and key prefix of a run in a store, for the fixes' AWS CLI commands."""
    location = parse(url, listed=True)
    prefix = json.dumps(location.prefix + "/" if location.prefix else "")[1:-1].replace("'", "'\\''")
    return {"bucket": shell_word(location.bucket), "key_prefix": prefix}


CHECKS = (store_leftovers,)
"""What the store keeps under a run in a bucket. The other rules need the volume, not only the
run: ``diskcheck`` (and ``ckptdoctor.preflight``) fire them through ``findings``."""


def _existing(path: str) -> str:
    """The nearest folder at or above ``path`` that exists: what a check of permissions or of the
    mount can look at before the run's folder is made."""
    met = nearest_existing(path)
    return met if os.path.isdir(met) else os.path.dirname(met) or "."


@fires(
    NOT_WRITABLE, INSUFFICIENT_SPACE, SPACE_RUNWAY, LOW_INODES, NETWORK_FILESYSTEM, NO_UPLOAD_CLEANUP, NO_VERSION_EXPIRY, MISSING_PERMISSION
)
def findings(disk: DiskCheck, run: Run | None, layout: Layout | None, runway: int = RUNWAY, below: bool = False) -> tuple[Finding, ...]:
    """CKD501–505 for ``disk``: the next save against the free space and inodes, the runway
    under retention, writability and the kind of filesystem. ``below``: other runs lie in
    folders below ``run``'s (its fixes then prune and repair it with ``--no-recurse``). A run in
    a bucket has no volume: CKD503, 509–511 from what its probes found, never CKD501/502."""
    if disk.bucket is not None:
        return _in_bucket(disk, disk.bucket, run, layout, below)
    where = run.path if run is not None else disk.path
    context = run_context(run, below) if run is not None else {"run": shell_word(where), "unit": "checkpoint"}
    context["existing"] = shell_word(_existing(where))
    if run is not None:
        context["prune_to_fit"] = prune_to_fit(disk.freeing, volume_of(disk), context["this_run"], run.unit.value)
    frameworks = layout.fix_keys if layout is not None else ()
    case = OTHERWISE if run is not None else NO_RUN
    found = []

    def add(rule: Rule, message: str) -> None:
        found.append(make_finding(rule, message, where, None, disk.path, None, context, frameworks, case))

    if not disk.writable:
        add(NOT_WRITABLE, f"the next save cannot be written: {disk.why_not_writable}")
    volume, guess = disk.volume, disk.estimate
    if volume is None:
        return tuple(found)
    if guess is not None and volume.free_bytes < disk.needed_bytes:
        add(
            INSUFFICIENT_SPACE,
            f"the next save needs about {size(disk.needed_bytes)} ({guess.basis}, with headroom) but only "
            f"{size(volume.free_bytes)} is free on {volume.mountpoint}",
        )
    elif guess is not None and disk.saves_until_full is not None and disk.saves_until_full < runway:
        retention = f"at keep-last {disk.keep_last}" if disk.keep_last else "with nothing deleted between saves"
        add(
            SPACE_RUNWAY,
            f"room for only {disk.saves_until_full} more save{'s' if disk.saves_until_full != 1 else ''} {retention} ({size(volume.free_bytes)} free, {size(guess.bytes)} each)",
        )
    if guess is not None and volume.free_inodes is not None and volume.free_inodes < guess.files * runway:
        add(
            LOW_INODES,
            f"only {volume.free_inodes} free inodes on {volume.mountpoint}, and one save creates {guess.files} files: fewer than {runway} saves' worth",
        )
    if volume.network:
        add(
            NETWORK_FILESYSTEM,
            f"{where} is on {volume.fstype} ({volume.mountpoint}): a save cut short there leaves a partial file under its real name",
        )
    return tuple(found)


def volume_of(disk: DiskCheck) -> str:
    return disk.volume.mountpoint if disk.volume is not None else "the volume"


def prune_to_fit(fit: Freeing | None, volume: str, this_run: str, unit: str) -> str:
    """The prune that frees what the next save lacks (``fit``, from ``planners.space.freeing``),
    or, where no prune of the run can, what to do instead (free space on ``volume``)."""
    if fit is None:  # nothing short in bytes (a quota, or inodes): no count of them to compute
        return f"prune old {unit}s, always keeping the resume point: `ckptdoctor prune {this_run} --keep-last 2 --yes`"
    if fit.keep_last is None:
        return (
            f"no prune of this run frees enough (even one that keeps only the newest complete {unit}, at --min-age 0, frees {size(fit.freed_bytes)} of the {size(fit.shortfall_bytes)} the next save lacks): "
            f"delete other files on {shell_word(volume)} (other runs, datasets, caches), or save to a bigger volume"
        )
    young = " --min-age 0" if fit.young else ""
    said = f"prune old {unit}s, always keeping the resume point: `ckptdoctor prune {this_run} --keep-last {fit.keep_last}{young} --yes` frees {size(fit.freed_bytes)}, where the next save lacks {size(fit.shortfall_bytes)}"
    if fit.young:
        said += f"; --min-age 0 because the {unit}s it deletes were written within the last {duration(fit.young)}: run it only if no job is saving there"
    return said


@fires(INSUFFICIENT_SPACE)
def staging_space(disk: DiskCheck, folder: str, free_bytes: int, why: str) -> Finding:
    """CKD501 for a save first written whole to ``folder``, on another volume than the run's,
    where only ``free_bytes`` are free (the trainer callbacks' staging folder)."""
    message = f"the next save needs about {size(disk.needed_bytes)} in {folder} ({why}), but only {size(free_bytes)} is free there"
    context = {"run": shell_word(folder), "unit": "checkpoint"}
    return make_finding(INSUFFICIENT_SPACE, message, disk.path, None, folder, None, context, case=NO_RUN)


def _in_bucket(disk: DiskCheck, bucket: BucketCheck, run: Run | None, layout: Layout | None, below: bool) -> tuple[Finding, ...]:
    """CKD503 for a refused write probe, CKD511 for each other permission refused, CKD509 and
    CKD510 for the lifecycle rules a bucket lacks. No free space is known: nothing of 501/502."""
    location = parse(disk.path)
    context = run_context(run, below) if run is not None else {"run": shell_word(disk.path), "unit": "checkpoint"}
    context.update(
        bucket=shell_word(location.bucket),
        keys=bucket.keys,
        keys_arg=shell_word(bucket.keys),
        probe_key=shell_word(f"{bucket.keys}{OWN_FOLDER}/write-test"),
    )
    frameworks = layout.fix_keys if layout is not None else ()
    where = run.path if run is not None else disk.path
    found: list[Finding] = []

    def add(rule: Rule, message: str) -> None:
        found.append(make_finding(rule, message, where, None, disk.path, None, context, frameworks, BUCKET))

    if not disk.writable:
        add(NOT_WRITABLE, f"the next save cannot be written to {disk.path}/: {disk.why_not_writable}")
    for permission in bucket.permissions:
        if permission.access is not Access.DENIED or permission.action == "write":
            continue
        users = ", ".join(permission.needed_by)
        left = (
            f"; the probe object {bucket.probe} is left: delete it with an identity that may"
            if permission.action == "delete" and bucket.probe_left
            else ""
        )
        add(
            MISSING_PERMISSION,
            f"{permission.name} ({permission.action}) is refused on {disk.path}/, and {users} need{'s' if len(permission.needed_by) == 1 else ''} it: {permission.detail}{left}",
        )
    if bucket.aborts_uploads is False:
        add(
            NO_UPLOAD_CLEANUP,
            f"no enabled lifecycle rule of {location.root} aborts incomplete multipart uploads under {disk.path}/: a killed save's parts stay stored and billed",
        )
    if bucket.versioned and bucket.expires_noncurrent is False:
        add(
            NO_VERSION_EXPIRY,
            f"{location.root} is versioned ({bucket.versioning}) and no enabled lifecycle rule expires noncurrent versions under {disk.path}/: deleting checkpoints frees nothing",
        )
    return tuple(found)
