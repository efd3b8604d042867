"""Integrity rules (CKD2xx): is each file whole, readable and what its name says it is?

These checks look at single files: their length against what their own format records, their first
bytes, their headers and CRCs, leftovers of interrupted saves, sizes against the run's other files,
and zeros where the previous checkpoint's same file held data.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator

from ckptdoctor.discover import Unlisted
from ckptdoctor.model import (
    ARCHIVE_TIER,
    NOT_RESTORED,
    RESTORE,
    RESTORING,
    STORAGE_CLASS,
    Checkpoint,
    CheckpointFile,
    Entry,
    Finding,
    Problem,
    Role,
    Severity,
    Zeroed,
)
from ckptdoctor.optimizers import state_size
from ckptdoctor.quoting import shell_word
from ckptdoctor.readers.sample import TAIL
from ckptdoctor.readers.sniff import Format
from ckptdoctor.regular import owner, user_name
from ckptdoctor.rules import completeness, consistency, safety
from ckptdoctor.rules.context import Kind, RunContext, make_finding
from ckptdoctor.rules.rule import BUCKET, OTHERWISE, Rule, fires, fix
from ckptdoctor.stores.urls import parse, scheme
from ckptdoctor.units import CLOCK_DRIFT, ahead, duration, size

EMPTY_FILE = Rule(
    code="CKD201",
    name="empty-file",
    severity=Severity.ERROR,
    summary="A checkpoint file has 0 bytes.",
    meaning=(
        "The file was created but nothing was ever written into it, so every loader fails at its first read: burn with "
        "`failed to fill whole buffer`, torch with an `EOFError` (`Ran out of input`, or no message at all), safetensors "
        "with `header too small`. The checkpoint it belongs to is partial and cannot be resumed."
    ),
    causes=(
        "The process was killed right after the file was created (burn and `torch.save` create the final file first and "
        "then write into it). The disk or quota was already full, so creating the file worked and the first write failed. "
        "A copy or download stopped before its first block. A script left a placeholder (`touch`)."
    ),
    fixes=(
        "Quarantine the empty file so that no tool resumes from it: {quarantine}.",
        "Restore {name} from a backup or object-store copy if one exists, then run `ckptdoctor verify {run}`.",
        "Check the disk before the next save, since an empty file often means it was already full: `ckptdoctor diskcheck {run}`.",
        "If a copy or download produced it, copy it again and compare the size and `sha256sum` with the source.",
    ),
    messages=(
        "failed to fill whole buffer",
        "Ran out of input",
        "header too small",
        "HeaderTooSmall",
    ),
    related=("CKD203", "CKD202", "CKD501"),
)

TEMP_FILE = Rule(
    code="CKD202",
    name="temp-file",
    severity=Severity.WARNING,
    summary="A temporary or staging artefact of an interrupted save is lying in the run.",
    meaning=(
        "Frameworks that save atomically write under a temporary name and rename at the end: HF Trainer's "
        "`tmp-checkpoint-*` folders (some versions), Orbax's `*.orbax-checkpoint-tmp*` folders, DCP's `.metadata.tmp`, "
        "timm's `tmp.pth.tar`, and `*.tmp` or `*.partial` files of copy tools. One still lying there after the save ended "
        "means that save never finished. It is never a valid resume point, it takes disk space, and some frameworks trip "
        "over it on the next save (`[Errno 39] Directory not empty`, Orbax `[Errno 17] File exists`). While a save is "
        "running such a file is expected; ckptdoctor's acting commands leave files younger than `--min-age` alone."
    ),
    causes=(
        "The job was killed or pre-empted during a save, or the disk filled up before the final rename. HF Trainer 4.36–4.38 "
        "and the 4.49 development builds raced between ranks renaming the staging folder on multi-node runs. Orbax leaves its "
        "temporary folders after a pre-emption unless `cleanup_tmp_directories=True`. A copy tool (`rsync --partial`, a "
        "browser download) was interrupted."
    ),
    fixes=(
        "If no save is running, quarantine the leftover: {quarantine}.",
        "Or delete {path} by hand once you are sure no job is writing to it.",
        fix(slot="CKD202/create-manager"),
        "If leftovers keep appearing, check that saves have room to finish: `ckptdoctor diskcheck {run}`.",
    ),
    messages=(
        "[Errno 39] Directory not empty",
        "[Errno 17] File exists",
    ),
    related=("CKD106", "CKD201", "CKD203", "CKD501"),
)

TRUNCATED = Rule(
    code="CKD203",
    name="truncated",
    severity=Severity.ERROR,
    summary="A file is shorter than its own format says: the save or copy stopped part-way.",
    meaning=(
        "Checkpoint formats record their own length: a torch zip ends with a central directory that locates every member, "
        "safetensors and burnpack headers give every tensor's offsets, gzip ends with a trailer. This file stops before that "
        "point, so its tail (the last tensors, and for a torch zip the directory itself) is missing. torch fails with "
        "`failed finding central directory`, safetensors with `incomplete metadata, file not fully covered`, burn with "
        "`File truncated` (or `failed to fill whole buffer` when the cut is inside the header); a burnpack file cut by less "
        "than its 256-byte alignment padding can even pass burn's own check. The checkpoint is partial: do not resume from it."
    ),
    causes=(
        "The disk or quota filled up during the save; burn and `torch.save` write straight to the final name, so the cut "
        "file keeps its real name. The process was killed mid-write (OOM, pre-emption, job time limit). A network or FUSE "
        "filesystem failed a write. A copy, `rsync` or download was interrupted, or a sync took the file while it was still "
        "being written."
    ),
    fixes=(
        "Quarantine {name} so that no tool resumes from it: {quarantine}.",
        "If it was copied or downloaded, fetch it again and compare the size and `sha256sum` with the source.",
        fix(
            "If the disk filled up, free space before the next save; `ckptdoctor diskcheck {run}` compares the next save with the free space.",
            case=OTHERWISE,
        ),
        fix(
            "In a bucket an upload is all or nothing, so the object was short when it was uploaded (copied from a cut file, or a streaming writer closed early): compare `aws s3api head-object --bucket {bucket} --key {object_key}` with the source, and bring back an older version (`aws s3api list-object-versions --bucket {bucket} --prefix {object_key}`) or a backup.",
            case=BUCKET,
        ),
        fix(
            "In your own saving code, write to a temporary name in the same folder, flush it to disk, then rename it to the final name, so a failed save never leaves a cut file under the real name.",
            slot="CKD203/own-saving-code",
        ),
    ),
    messages=(
        "failed finding central directory",
        "failed reading zip archive: not a ZIP archive",
        "File is not a zip file",
        "MetadataIncompleteBuffer",
        "incomplete metadata, file not fully covered",
        "invalid header length",
        "File truncated",
        "unexpected EOF, expected",
        "Compressed file ended before the end-of-stream marker was reached",
    ),
    related=("CKD201", "CKD204", "CKD208", "CKD501", "CKD504"),
)

TRAILING_BYTES = Rule(
    code="CKD204",
    name="trailing-bytes",
    severity=Severity.WARNING,
    summary="A file is longer than its own format says: there are extra bytes after its end.",
    meaning=(
        "The format's own bookkeeping ends before the file does. torch and burn ignore the extra bytes, but safetensors "
        "refuses the file (`incomplete metadata, file not fully covered`), and checksums no longer match the original. "
        "Extra bytes usually mean two writes overlapped or a transfer added data, so the content deserves a `--deep` look "
        "before you trust it."
    ),
    causes=(
        "A file was overwritten in place by a shorter save without being truncated first (a writer that does not open with "
        "`O_TRUNC`, or two saves racing on one name). A download or copy appended data or retried a range twice. A storage "
        "layer or tool padded the file. Two files were concatenated by mistake."
    ),
    fixes=(
        "Check the content with `ckptdoctor verify --deep {run}`: CRCs and values tell a harmless tail from an overlapped write.",
        "Re-save or re-download {name} and compare the size and `sha256sum` with the source.",
        "If the deep check finds nothing wrong and a loader needs the exact length, cut a copy down to the length the finding gives with `truncate -s`.",
        "Make sure only one process writes each checkpoint name: one file per rank, one job per run folder.",
    ),
    messages=(
        "incomplete metadata, file not fully covered",
        "MetadataIncompleteBuffer",
    ),
    related=("CKD203", "CKD206", "CKD209"),
)

NOT_A_CHECKPOINT = Rule(
    code="CKD205",
    name="not-a-checkpoint",
    severity=Severity.ERROR,
    summary="The content is not the format the name claims: a Git-LFS pointer, an HTML page, all zeros, or another format.",
    meaning=(
        "ckptdoctor trusts content, not extensions, and this file's first bytes say it is something else: a ~130-byte Git-LFS "
        "pointer (`version https://git-lfs.github.com/spec/v1`) instead of the weights, an HTML error or login page saved by a "
        "download, a file of zeros that was allocated but never written, or a file of another format under this name. "
        "Loaders fail in confusing ways: torch with `invalid load key, 'v'.` (LFS) or `'<'` (HTML), safetensors with "
        "`HeaderTooLarge`, burn with `Invalid magic number`, and torch reads an all-zero file as an empty legacy tar archive."
    ),
    causes=(
        "The repository was cloned without Git LFS, so only pointers were checked out. A download link returned an error or "
        "login page (expired link, private bucket, rate limit). A preallocated file whose data never reached the disk. A "
        "file renamed to the wrong extension: a pickle renamed `.safetensors`, an `.mpk` renamed `.bpk`, a TorchScript "
        "archive passed where a state dict was expected."
    ),
    fixes=(
        fix(
            "Run `git lfs install` and then `git lfs pull` in the repository, and check that the file is no longer about 130 bytes.",
            case=Format.GIT_LFS_POINTER,
        ),
        fix(
            "Download it again with authentication or a direct link (`curl -fL`), then look at the first bytes with `head -c 64`.",
            case=Format.HTML,
        ),
        fix(
            "The data never reached the disk: restore {name} from a backup, after quarantining it: {quarantine}.",
            case=Format.ZEROS,
        ),
        fix(
            "If it is another format under the wrong name, give it that format's name, or convert it properly instead of renaming.",
            slot="CKD205/another-format",
            case=OTHERWISE,
        ),
        "Restore {name} from a backup or its source, then run `ckptdoctor verify {run}`.",
    ),
    messages=(
        "invalid load key, 'v'.",
        "invalid load key, '<'.",
        "Unsupported operand",
        "HeaderTooLarge",
        "header too large",
        "Invalid magic number",
        "files saved in the legacy .tar format",
        "filename 'storages' not found",
        "TorchScript archives passed to",
        "Memo value not found at index",
    ),
    related=("CKD210", "CKD112", "CKD203", "CKD207"),
)

CRC_MISMATCH = Rule(
    code="CKD206",
    name="crc-mismatch",
    severity=Severity.ERROR,
    summary="Bytes do not match the checksum their file records for them (a zip member's CRC-32, a TensorFlow tensor's CRC-32C).",
    meaning=(
        "A torch zip checkpoint records a CRC-32 for every member, but `torch.load` never checks it: a flipped bit in tensor "
        "data loads without any error and gives silently wrong weights, and a flip in `data.pkl` can drop a key or fail with "
        "an odd `Unsupported global`. Python's `zipfile` does check (`Bad CRC-32 for file …`). The file is full-length but "
        "damaged: treat its values as untrustworthy. Files saved with CRCs switched off (every CRC 0) are not reported. "
        "`inspect` checks the bytes of the first member, `data.pkl`, where they lie in the first 16 KiB it reads of a file "
        "anyway (`verify` wherever they lie), and each member's own record of its CRC-32 (its data descriptor) that lies in "
        "what it reads against the central directory's: a member recorded with two CRCs is one save's bytes under another "
        "save's directory (an in-place copy cut off, see CKD207); `verify --deep` checks every member's bytes. "
        "TensorFlow records a CRC-32C of every tensor in a bundle's `.index` and checks it on every restore (`Checksum does "
        "not match`, `The length checksum does not match`): `verify` reads every tensor of the data shards against it, so a "
        "save TensorFlow cannot restore is not named the resume point. "
        "Orbax's OCDBT store checksums its `manifest.ocdbt` and B+tree nodes with CRC-32C, and TensorStore does check it "
        "(`DATA_LOSS: Error reading … in OCDBT database`): `inspect` checks the manifest's, `verify` every node's too."
    ),
    causes=(
        "Bit rot or a failing disk; memory errors on the machine that wrote or copied the file; a faulty network filesystem "
        "or object-store transfer; a tool that edited the archive in place; two writers overlapping on one file; an in-place "
        "copy (`rsync --inplace`) cut off, which leaves one save's start before another's end."
    ),
    fixes=(
        "Restore {name} from a backup or object-store copy and compare its `sha256sum` with the original.",
        "Check the hardware that wrote it (`dmesg`, `smartctl -a` on the disk, a memory test on the host), and check the run's other checkpoints with `ckptdoctor verify --deep {run}`.",
        "Quarantine the file so that no resume picks it up: {quarantine}.",
    ),
    messages=("Bad CRC-32 for file", "Checksum does not match", "The checksum after Variant … does not match"),
    related=("CKD207", "CKD203", "CKD304", "CKD403"),
)

MALFORMED = Rule(
    code="CKD207",
    name="malformed",
    severity=Severity.ERROR,
    summary="A header or metadata block cannot be decoded (zip directory, JSON, CBOR, MessagePack).",
    meaning=(
        "The file starts like its format and has a plausible length, but the structure that tells a loader what is inside "
        "does not parse: a damaged zip central directory, a safetensors header that is not valid JSON or not the expected "
        "schema, burnpack CBOR metadata that does not decode, a garbled recorder-era MessagePack record, or tensor offsets "
        "that point outside the data. No loader can use it; the checkpoint is corrupt. A torch zip whose central directory "
        "(at its end) does not place or size the members where its start holds them is torn: its start and its end come "
        "from two saves, as an in-place copy cut off leaves them (`rsync --inplace` writes the new file over the old one from "
        "its first byte). torch reads the start through the end's directory and fails (`failed reading file … invalid "
        "header or archive is corrupted`, `Ran out of input`) or, where the sizes happen to agree, loads a mix of both saves "
        "(CKD206). `inspect` compares the members whose headers lie in what it reads of a file (its first 16 KiB and last "
        "4 KiB), `verify` every member."
    ),
    causes=(
        "Corruption on disk or in transfer. A writer bug or a crash while a header was being written. A file written by a "
        "newer library than the one reading it (old safetensors releases cannot read some newer headers; burn refuses a "
        "burnpack version above 1). A file edited by hand or rewritten by another tool. An in-place copy or sync cut off "
        "(`rsync --inplace`, a resumed download) over an older save of the same name."
    ),
    fixes=(
        "Restore {name} from a backup or download it again, then run `ckptdoctor verify {run}`.",
        fix(
            "If a newer library may have written it, upgrade the library that reads it first, before concluding the file is damaged.",
            slot="CKD207/newer-library",
        ),
        "Quarantine the file: {quarantine}.",
        fix(
            "If freshly written files show the same error, the saving code produces it: save with the format library's own API instead of a custom writer.",
            slot="CKD207/fresh-files",
        ),
    ),
    messages=(
        "InvalidHeaderDeserialization",
        "invalid JSON in header",
        "invalid UTF-8 in header",
        "invalid offset for tensor",
        "invalid shape, data type, or offset for tensor",
        "Metadata deserialization error",
        "has corrupted offset data",
        "potential DoS attack",
        "Unsupported version",
        "failed locating file",
        "does not match expected size",
        "invalid header or archive is corrupted",
    ),
    related=("CKD205", "CKD206", "CKD203", "CKD403"),
)

UNDERSIZED = Rule(
    code="CKD208",
    name="undersized",
    severity=Severity.WARNING,
    summary="A file is far smaller than the same role's median in the run.",
    meaning=(
        "Checkpoints of one run hold the same tensors, so files of one role are nearly the same size. One that is much "
        "smaller parses, but may lack data: a save cut short in a way its format cannot show, or a save of something other "
        "than usual (fewer tensors, lower precision, an adapter instead of the full model). ckptdoctor cannot prove it is "
        "broken, only that it is unlike its siblings."
    ),
    causes=(
        "A save cut short at a point the format does not catch (a legacy or text format, a burnpack cut inside its alignment "
        "padding). The script changed what it saves: weights only, an EMA copy, a LoRA adapter, fp16 instead of fp32. "
        "Optimizer state saved before the first step, with no moments yet. A smaller model resumed into the same folder."
    ),
    fixes=(
        "Compare it with its siblings: `ckptdoctor verify {run}` lists tensors, dtypes and bytes per file, and a missing tensor or changed dtype explains the size.",
        "If tensors are missing, treat {unit} {index} as broken: resume from an earlier {unit} and quarantine this one with `{repair} {this_run}`.",
        "If the change was intended (new precision, adapter-only saves), save into a new run folder so that sizes stay comparable.",
        "Look for write errors around that save in the training log, and check the disk: `ckptdoctor diskcheck {run}`.",
    ),
    messages=(),
    related=("CKD203", "CKD209", "CKD303", "CKD307"),
)

OVERSIZED = Rule(
    code="CKD209",
    name="oversized",
    severity=Severity.WARNING,
    summary="A file is far larger than the same role's median, or optimizer state is far beyond its usual ratio to the model.",
    meaning=(
        "Adam and AdamW keep two moments per parameter, so optimizer state is normally about twice the model (SGD with "
        "momentum about once, AMSGrad about three times). A file much bigger than its siblings, or optimizer state many "
        "times the model, usually carries something it should not: state for parameters that no longer exist, whole "
        "Python objects pickled instead of a `state_dict`, gradients or a second copy of the model. burn before PR #5177 "
        "(July 2026) orphaned the Adam moments on every resume, adding about twice the model per restart; an optimizer "
        "file of over 1 GiB for a model of about 70 MiB was reported. It costs disk space on every save and can fail to load on smaller "
        "machines."
    ),
    causes=(
        "Optimizer state accumulating across resumes (burn issue #5130). `torch.save(model)` or `torch.save(optimizer)` "
        "instead of their `state_dict()`. Extra objects in the saved dict: datasets, logs, per-rank copies of the model. An "
        "optimizer with more state than Adam. A larger model saved into the same folder."
    ),
    fixes=(
        "See what the file holds: `ckptdoctor verify {run}` lists tensors and bytes per file; compare the optimizer with the model against {ratio}.",
        fix("Save the state, not the objects, and keep logs, data and extra copies out of the checkpoint.", slot="CKD209/save-state"),
        fix(slot="CKD209/upgrade"),
        "If the size is expected (a bigger model, an optimizer with more state), budget disk for it: `ckptdoctor diskcheck {run}`.",
    ),
    messages=(),
    related=("CKD208", "CKD301", "CKD402", "CKD501"),
)

LEGACY_FORMAT = Rule(
    code="CKD210",
    name="legacy-format",
    severity=Severity.INFO,
    summary="A file uses a legacy format: non-zip or tar `torch.save`, or burn recorder-era `.mpk` where burnpack is expected.",
    meaning=(
        "The file is valid but old. A legacy non-zip `torch.save` file loads, but cannot be memory-mapped (`mmap can only be "
        "used with files saved with …`) and has no CRCs for `--deep` to check; the tar format of the earliest torch cannot be "
        "loaded with `weights_only=True` at all. burn 0.22 and later read only burnpack: their checkpointer looks for `.bpk` "
        "and reports a missing file for a recorder-era `.mpk`. Nothing is wrong today, but an upgrade can make the run "
        "unresumable. The opposite also happens: a file written by a newer torch than the reader fails with `Attempted to "
        "read a PyTorch file with version …`."
    ),
    causes=(
        "Files written by torch before 1.6 or with `_use_new_zipfile_serialization=False`. Checkpoints of burn 0.21 or earlier "
        "(`CompactRecorder` writes `.mpk`) kept after upgrading burn. A file written by a newer torch than the one loading it."
    ),
    fixes=(
        fix("Re-save it in the format its library writes today, with the version that wrote it.", slot="CKD210/re-save"),
        "See which files are affected: `ckptdoctor verify {run}` lists each file's format.",
        fix(slot="CKD210/recorder-era"),
        fix(slot="CKD210/read-pytorch"),
        fix(slot="CKD210/tar-format"),
    ),
    messages=(
        "Attempted to read a PyTorch file with version",
        "mmap can only be used with files saved with",
        "File is an unsupported archive format from the preview release.",
    ),
    related=("CKD112", "CKD205", "CKD303"),
)

UNREADABLE = Rule(
    code="CKD211",
    name="unreadable",
    severity=Severity.ERROR,
    summary="A checkpoint file or a folder of the run could not be read at all, so ckptdoctor cannot vouch for it.",
    meaning=(
        "ckptdoctor never calls a file it could not read clean. Reading failed here (permission denied, the file vanished "
        "during the scan, an I/O error from the disk or a network filesystem, a symlink whose target cannot be read), so "
        "nothing is known about the content, and the checkpoint it belongs to does not count as complete. The training job "
        "will most likely hit the same error when it resumes."
    ),
    causes=(
        "Files owned by another user or written by a container running as root, or created with mode 0600 (safetensors 0.8 "
        "writers create files only their owner can read). A cleanup, retention or sync job deleted or replaced files while "
        "ckptdoctor was scanning. A failing disk, or a network mount that dropped (`Input/output error`, `Stale file handle`, "
        "`Transport endpoint is not connected`). A symlink such as `last.ckpt` into a folder that is unmounted or not "
        "readable, or a symlink loop."
    ),
    fixes=(
        fix(
            "Check access: `ls -l` on the file and `namei -l` on its path show which permission blocks you; fix with `chmod a+r` or `chown`, or run ckptdoctor as the user that trains.",
            case=OTHERWISE,
        ),
        fix(
            "In a bucket: where the message says permission denied, grant the identity that runs ckptdoctor (`aws sts get-caller-identity`) the permission it names on the run's keys (s3:GetObject, and kms:Decrypt on the bucket's KMS key where it encrypts with one; on gs:// `storage.objects.get`, on az:// the Storage Blob Data Reader role).",
            case=BUCKET,
        ),
        "If files were being written or deleted, wait for that job to finish and rerun `ckptdoctor inspect {run}`.",
        fix(
            "For I/O errors, check the storage (`dmesg`, `smartctl -a`, remount the network filesystem), then rerun `ckptdoctor verify {run}`.",
            case=OTHERWISE,
        ),
        fix(
            "Ask the store what it holds: `aws s3api head-object --bucket {bucket} --key {object_key}` shows the object's size, storage class (an archived object cannot be read until restored) and encryption; then rerun `ckptdoctor verify {run}`.",
            case=BUCKET,
        ),
        fix(
            "If the object is gone or cannot be restored: bring back an older version (`aws s3api list-object-versions --bucket {bucket} --prefix {object_key}`) or a backup.",
            case=BUCKET,
        ),
        fix(
            "For a symlink, check that its target exists and is readable (`readlink -f`), or replace the link with a copy of the target.",
            case=OTHERWISE,
        ),
    ),
    messages=(
        "Input/output error",
        "Stale file handle",
        "Transport endpoint is not connected",
        "Too many levels of symbolic links",
    ),
    related=("CKD503", "CKD504", "CKD113"),
)

ZEROED_DATA = Rule(
    code="CKD212",
    name="zeroed-data",
    severity=Severity.ERROR,
    summary="Bytes that held data in the previous checkpoint are all zero in this one: tensors or DCP items (`--deep`), or a file's last 4 KiB.",
    meaning=(
        "A save whose data never reached the disk can leave a full-length file with zeros where the data should be, and "
        "nothing fails when it is read: safetensors has no checksum, so `load_file` and `safe_open` hand the zeros back as "
        "weights, while a DCP item turned to zeros fails `dcp.load` (`failed finding central directory`). Zeros alone prove "
        "nothing (a bias initialised to zero stays zero), so each tensor, DCP item and file tail is compared with the same "
        "one in the run's previous checkpoint: all zero now where there was data then is the finding. Under "
        "`verify --deep` every byte was read: the checkpoint is no longer a resume point, and the finding is an error "
        "wherever a resume would load it. Without `--deep` only a file's last 4 KiB are looked at: that is a warning, and "
        "the checkpoint stays the resume point until `verify --deep` says otherwise. Zeros that were already zeros in "
        "the previous checkpoint are taken as meant, so zeros left by two failed saves running show on the first only."
    ),
    causes=(
        "The disk or quota filled during the save on a filesystem that had already allocated the file's blocks "
        "(preallocation, some network and FUSE filesystems). The machine crashed or lost power before the written pages "
        "reached the disk: ext4 and XFS can keep a file's new size and leave its last blocks zero. A copy or "
        "`rsync --inplace` stopped after the file had been extended. A tensor reset to zero on purpose fires once, on the "
        "first checkpoint that holds the zeros."
    ),
    fixes=(
        "Move the damaged checkpoint out of the run (or restore {name} from a backup and compare its `sha256sum` with the source), so that no resume from the latest checkpoint loads zeros as weights.",
        "Before the next save, check that there is room and that the storage is healthy: `ckptdoctor diskcheck {run}`, and `dmesg` for I/O errors.",
        "If the zeros are meant (a tensor reset on purpose), nothing is lost: the next checkpoint, compared with this one, is quiet.",
    ),
    messages=("failed finding central directory",),
    related=("CKD203", "CKD206", "CKD304", "CKD501"),
)

PARTLY_CHECKED = Rule(
    code="CKD213",
    name="partly-checked",
    severity=Severity.INFO,
    summary="`verify` could check only part of a file: the optional library that reads the rest is not installed, or the rest is a bomb.",
    meaning=(
        "Some formats are read past their header by a library that ckptdoctor does not require: HDF5 (Keras' "
        "`.weights.h5`, the weights inside a `.keras` archive) by h5py. Without it `verify` still checks what it can read "
        "itself (the HDF5 superblock against the file's size, the archive's members), and says here that the rest (the "
        "object headers that place each dataset, the datasets' bytes) was not read. Nothing was found wrong: the "
        "checkpoint stays a resume point, but it is not vouched for as a whole (`verify --resume` does not answer with it). "
        "`verify --deep` also leaves unread the values of compressed HDF5 chunks that would inflate to more than 64 times "
        "the file's size (at least 128 MiB): real weights compress by less than 2, and gigabytes of compressed zeros "
        "cost minutes to inflate."
    ),
    causes=(
        "ckptdoctor was installed without the extra that brings the library (`pip install 'ckptdoctor[keras]'`), or runs in "
        "a lean environment (CI, a cron job) without the training stack. A file whose compressed chunks inflate by "
        "hundreds of times, which no framework writes for weights: crafted, or a dataset of constants."
    ),
    fixes=(
        "Install the library and verify again: `pip install h5py` (or `pip install 'ckptdoctor[keras]'`), then `ckptdoctor verify {run}`.",
        "Or run ckptdoctor in the training environment, which has the library already.",
        "For chunks not inflated: load {name} with h5py and check its values there, if its source is trusted.",
    ),
    messages=("only the HDF5 superblock and the file's size were checked", "the values of its chunked datasets were not read"),
    related=("CKD203", "CKD207"),
)

CLOCK_SKEW = Rule(
    code="CKD214",
    name="clock-skew",
    severity=Severity.WARNING,
    summary="A file is dated in the future by the clock of the machine that checks it: its time says nothing of when it was written.",
    meaning=(
        "A file's modification time is stamped by the clock of the machine that wrote it (on NFS, often the server's). One "
        f"dated more than {duration(CLOCK_DRIFT)} ahead of this machine's clock tells nothing of when it was written, and "
        "whatever orders or ages files by their times goes wrong with it: a retention window measured back from the newest "
        "file empties (one file dated years ahead made every other checkpoint look old), and a framework that resumes "
        "from the newest file by time (Lightning's `last*.ckpt`) picks it. ckptdoctor measures ages from the clock, never "
        "from the files: `prune` measures --keep-within and --min-age back from now, and never deletes a checkpoint "
        "holding such a file (its age is not known); `repair` leaves it unless given --min-age 0. In a bucket the store "
        "stamps every object by its own clock, which prune's ages are measured by: this is not checked there."
    ),
    causes=(
        "The clock of the machine that wrote the file, or of the NFS server, runs ahead: no NTP, a virtual machine resumed "
        "with a stale clock, local time kept as UTC. A backup restored, or a copy made keeping times (`rsync -t`, `cp -p`, "
        "`tar x`), from a machine whose clock was wrong. A time set by hand (`touch -d`)."
    ),
    fixes=(
        "Compare the clocks: `date -u` here and on the machine that writes the run (`timedatectl` or `chronyc tracking` shows whether NTP keeps it right); set the wrong one right before the next save.",
        "Once the clocks agree, give the file a true time: `touch {path}` dates it now (`touch -d` with a date, when it was written), then run `ckptdoctor inspect {run}`.",
    ),
    messages=("in the future", "Clock skew detected", "has modification time in the future"),
    related=("CKD116", "CKD115"),
)

ACCESS_DENIED = Rule(
    code="CKD215",
    name="access-denied",
    severity=Severity.ERROR,
    summary="A file or folder of the run that this user may not read or search: nothing is known of it, whole or broken.",
    meaning=(
        "The system refused this user (permission denied, EACCES or EPERM): the file may be whole or broken, and nothing "
        "tells which. So it is neither: its checkpoint is `unreadable`, never `complete` nor `corrupt`. Where it is newer "
        "than the newest complete checkpoint, the resume point depends on it (that checkpoint if it is whole, else the one "
        "before), and `inspect --resume`, `--resume-path` and `verify --resume` exit 1 rather than name one. `prune` never "
        "deletes it and `repair` never moves it: a prune skips it, finishes the rest of its plan and exits 1; only a user "
        "who can read it can say what it is."
    ),
    causes=(
        "Files written by another user or by a container running as root, with mode 0600 (safetensors 0.8 and `torch.save` "
        "under a umask of 077 write files only their owner can read). A folder that may be listed but not searched (mode "
        "0444), or not listed at all (0700 of another user, `chmod 000`). ckptdoctor run from a cron job or CI account "
        "other than the one that trains."
    ),
    fixes=(
        "Run ckptdoctor as the owner, who can read it: `sudo -u {owner} ckptdoctor inspect {run}`.",
        "Or let this user read it: `chmod -R a+rX {path}` (as its owner), or `setfacl -R -m u:$USER:rX {path}`.",
    ),
    messages=("shut to this user", "may not list or search it", "Operation not permitted"),
    related=("CKD211", "CKD503"),
)

WHOLE_VERSION = "whole-version"
"""The case of CKD216 where an older version reads whole (its fix restores it)."""

PREVIOUS_VERSION = Rule(
    code="CKD216",
    name="previous-version",
    severity=Severity.INFO,
    summary="A damaged file in a versioned bucket: whether an older version of it reads whole, and how to restore it.",
    meaning=(
        "A versioned bucket keeps what an object held before each overwrite, so a save or copy cut short over an existing "
        "object leaves the bytes that were there as a noncurrent version. ckptdoctor reads the damaged file's older versions, "
        "newest first, with the reader that found the damage (their header and trailer; with `verify`, all of their bytes) "
        "and names the newest that reads whole: its length is the one its own format records, and, where the store keeps a "
        "checksum of it and `verify` read it whole, that checksum was computed and matches (the finding says which was "
        "checked). Copying that version over the current one makes it current again, and every version stays kept. It holds "
        "what the file held before the overwrite: for a file the framework rewrites at every save (`last.ckpt`), an earlier "
        "save. Where no older version reads whole, or none is kept, the finding says so."
    ),
    causes=(
        "A checkpoint rewritten under the same key (a framework's `last.ckpt` or `latest`, names a retention reuses, a run "
        "uploaded again) and the write cut short, in a bucket with versioning on."
    ),
    fixes=(
        fix(
            "Restore the whole previous version by copying it over the damaged one: `aws s3api copy-object --bucket {bucket} "
            "--key {key} --copy-source {copy_source}`; then check the run again with `ckptdoctor verify {run}`.",
            case=WHOLE_VERSION,
        ),
        fix(
            "Where no older version of {name} reads whole, restore it from another copy, or resume from an earlier {unit}.", case=OTHERWISE
        ),
        "See every version of it with `aws s3api list-object-versions --bucket {bucket} --prefix {key}`.",
    ),
    related=("CKD203", "CKD201", "CKD507"),
)

ARCHIVED = Rule(
    code="CKD217",
    name="archived",
    severity=Severity.ERROR,
    summary="Objects of a checkpoint are in an archive tier of the store (S3 Glacier, Deep Archive, Intelligent-Tiering's archive tiers) and not restored.",
    meaning=(
        "S3 refuses to read an object that a lifecycle rule (or Intelligent-Tiering) moved to S3 Glacier Flexible "
        "Retrieval, S3 Glacier Deep Archive, or Intelligent-Tiering's Archive Access or Deep Archive Access tier until it is "
        "restored (`InvalidObjectState`, HTTP 403). That is no damage and no missing permission: nothing is known of the "
        "content, so the checkpoint is `archived`, never `complete` nor `corrupt`. The resume point skips it, and where it "
        "is newer than the resume point this says so (error): restore it to resume from it. Older than the resume point it "
        "is information only (archiving old checkpoints is common cost practice). `repair` never moves or quarantines it; "
        "`prune` deletes it only where its policy keeps it not, as any old checkpoint, and its plan says it is archived. "
        "A restore under way is said (`restore requested, not finished`); a restored copy reads as usual. S3 Glacier "
        "Instant Retrieval is read at once and is not archived. The class comes from the refused read, whether a restore "
        "is under way from one HEAD of each archived object (boto3)."
    ),
    causes=(
        "A lifecycle rule of the bucket transitions objects under the run's prefix to GLACIER or DEEP_ARCHIVE after some "
        "days. Intelligent-Tiering with its opt-in archive tiers moved objects not read for 90 or 180 days or more. A sync "
        "or upload made with `--storage-class GLACIER` or `DEEP_ARCHIVE`."
    ),
    fixes=(
        'Restore it first: `{restore_command}` ({restore_tiers}); once the restore has finished (`aws s3api head-object` shows `ongoing-request="false"`), run `ckptdoctor inspect {run}` again.',
        "To keep the checkpoints you may resume from readable, leave them out of the lifecycle rule's transition (a prefix or tag filter), or transition to GLACIER_IR, which is read without a restore.",
    ),
    messages=("InvalidObjectState", "The operation is not valid for the object's storage class", "ObjectNotInActiveTierError"),
    related=("CKD215", "CKD211", "CKD110"),
)

RULES: tuple[Rule, ...] = (
    EMPTY_FILE,
    TEMP_FILE,
    TRUNCATED,
    TRAILING_BYTES,
    NOT_A_CHECKPOINT,
    CRC_MISMATCH,
    MALFORMED,
    UNDERSIZED,
    OVERSIZED,
    LEGACY_FORMAT,
    UNREADABLE,
    ZEROED_DATA,
    PARTLY_CHECKED,
    CLOCK_SKEW,
    ACCESS_DENIED,
    PREVIOUS_VERSION,
    ARCHIVED,
)


# --- checks ---------------------------------------------------------------------------------

_PER_RUN = frozenset({Problem.LEGACY})
"""Problems reported once per run and format (``legacy_formats``), not file by file."""
_BY_NAME = {rule.name: rule for rule in (*RULES, *completeness.RULES, *consistency.RULES, *safety.RULES)}
_OWN_CHECK = frozenset({Problem.ACCESS_DENIED, Problem.ARCHIVED})
"""Problems reported by a check of their own (``access_denied``: what the resume point depends
on; ``archived_objects``: once per checkpoint, with the restore)."""
_BY_PROBLEM = {problem: _BY_NAME[problem.value] for problem in Problem if problem not in _PER_RUN | _OWN_CHECK}
"""Every problem a reader can find in one file, and the rule (of whichever family) that reports
it: the one a ``Problem`` names."""

_OVERHEAD = 64 * 1024
"""Headers and alignment make small files look larger than their tensors."""
_SIZED = frozenset({Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER})
"""Roles whose size says something; logs and configs (``trainer_state.json``) grow or vary freely."""
_MODEL_ONLY = (Role.MODEL,)
_OPTIMIZER_ONLY = (Role.OPTIMIZER,)


_SELF_LOADED = frozenset({Role.RNG_STATE, Role.TRAINING_ARGS, Role.SCALER, Role.CONFIG, Role.METADATA})
"""Side files that the framework which wrote them loads itself, with the globals they need allowed:
their non-weights objects are expected (CKD402 as info)."""


@fires(TEMP_FILE, *_BY_PROBLEM.values())
def file_problems(ctx: RunContext) -> Iterator[Finding]:
    """Each problem a reader found in a file (CKD2xx, and from ``verify`` CKD304 and CKD4xx), and
    CKD113's dangling symlinks and CKD202's staging leftovers, file by file."""
    outside = (*ctx.run.loose_files, *ctx.run.extra_files)
    files: list[tuple[int | None, CheckpointFile]] = [*ctx.files, *((None, f) for f in outside)]
    for index, file in files:
        if not file.report.issues and Role.TEMP not in file.roles:
            continue
        if Role.TEMP in file.roles:
            yield ctx.finding(
                TEMP_FILE,
                f"{file.name} is a staging {'folder' if file.entry.is_dir else 'file'} of a save that never finished",
                index=index,
                path=file.path,
            )
            continue
        for issue in file.report.issues:
            rule = _BY_PROBLEM.get(issue.problem)
            if rule is None:
                continue
            if issue.problem is Problem.DANGLING:
                yield ctx.finding(rule, f"{file.name} is {issue.detail}", index=index, path=file.path)
                continue
            severity = None
            message = f"{file.name}: {issue.detail}"
            if issue.severity is not None:  # the run's framework loads what the file needs, as the detail says
                severity = issue.severity
            elif issue.problem is Problem.NON_WEIGHTS and file.roles and set(file.roles) <= _SELF_LOADED:
                severity = Severity.INFO
                message += f" (the {ctx.layout.name} code that wrote it allows them when it resumes)"
            elif issue.problem is Problem.UNSAFE_PICKLE and file.roles and (own := ctx.layout.own_objects).runs_anything:
                message += f"; {own.loader}, which runs whatever the file holds"
            elif file.roles and set(file.roles) <= set(ctx.advisory):
                severity = Severity.WARNING
                message += f"; {'; '.join(ctx.advisory[role] for role in file.roles)}"
            yield ctx.finding(
                rule,
                message,
                index=index,
                path=file.path,
                severity=severity,
                context={"format": file.report.format},
                case=file.report.format,
            )


@fires(LEGACY_FORMAT)
def legacy_formats(ctx: RunContext) -> Iterator[Finding]:
    """CKD210, once per run and format: obsolete torch formats, a framework's superseded formats."""
    legacy = ctx.layout.legacy_formats
    by_format: dict[str, list[CheckpointFile]] = defaultdict(list)
    for report, kinds in ctx.by_report:
        if report.format in legacy or Problem.LEGACY in report.problems:
            by_format[report.format].extend(file for kind in kinds for _, file in kind.files)
    for fmt, files in sorted(by_format.items()):
        why = legacy.get(fmt) or next(i.detail for i in files[0].report.issues if i.problem is Problem.LEGACY)
        subject = f"{len(files)} files" if len(files) > 1 else files[0].name
        yield ctx.finding(LEGACY_FORMAT, f"{subject}: {why}", path=files[0].path, context={"format": fmt})


def _median(values: list[int]) -> float:
    # not statistics.median: importing statistics costs ~10 ms of every start-up
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@fires(UNDERSIZED, OVERSIZED)
def size_outliers(ctx: RunContext) -> Iterator[Finding]:
    """CKD208 / CKD209: files far from their role's median size in the run."""
    limits = ctx.thresholds
    # the run's kinds of cleanly read files, by roles and prefix in the order of their first files
    by_kind: dict[tuple[tuple[Role, ...], str], list[Kind]] = defaultdict(list)
    for report, kinds in ctx.by_report:
        if not report.issues:
            for kind in kinds:
                if _SIZED.issuperset(kind.roles):
                    by_kind[kind.roles, kind.prefix].append(kind)
    for (roles, _), kinds in sorted(by_kind.items(), key=lambda item: min(ctx.position(kind.files[0]) for kind in item[1])):
        sizes = [file.entry.size for kind in kinds for _, file in kind.files]
        if len(sizes) < limits.min_peers:
            continue
        middle = _median(sizes)
        low, high = middle * limits.undersized, middle * limits.oversized
        if low <= min(sizes) and max(sizes) <= high:
            continue  # the common case, settled without a second pass over the files
        label = "bundled checkpoint" if len(roles) > 1 else roles[0].value
        outside = [(index, file) for kind in kinds for index, file in kind.files if not low <= file.entry.size <= high]
        for index, file in sorted(outside, key=ctx.position) if len(kinds) > 1 else outside:
            if file.bytes < middle * limits.undersized:
                yield ctx.finding(
                    UNDERSIZED,
                    f"{file.name} is {size(file.bytes)}, {file.bytes / middle:.0%} of the run's median {label} file ({size(int(middle))})",
                    index=index,
                    path=file.path,
                )
            elif file.bytes > middle * limits.oversized:
                yield ctx.finding(
                    OVERSIZED,
                    f"{file.name} is {size(file.bytes)}, {file.bytes / middle:.1f}× the run's median {label} file ({size(int(middle))})",
                    index=index,
                    path=file.path,
                    context={"ratio": f"{file.bytes / middle:.1f}×"},
                )


@fires(OVERSIZED)
def optimizer_ratio(ctx: RunContext) -> Iterator[Finding]:
    """CKD209: optimizer state far beyond what its kind keeps per parameter."""
    limits = ctx.thresholds
    over: list[tuple[int, CheckpointFile, float, str]] = []
    allowed: dict[int, float] = {}  # per optimizer report (shared objects): its kind's usual ratio
    for checkpoint in ctx.run.checkpoints:
        model: CheckpointFile | None = None
        optimizer: CheckpointFile | None = None
        doubled = False  # two files of one role: no single ratio to judge
        for file in checkpoint.files:
            if file.report.issues:
                continue
            if file.roles == _MODEL_ONLY:
                doubled |= model is not None
                model = file
            elif file.roles == _OPTIMIZER_ONLY:
                doubled |= optimizer is not None
                optimizer = file
        if doubled or model is None or optimizer is None or not model.entry.size:
            continue
        ratio = allowed.get(id(optimizer.report))
        if ratio is None:
            kind = optimizer.report.fact("optimizer") or "unknown"
            ratio = allowed[id(optimizer.report)] = max(state_size(kind).at_most, 1.0) * limits.optimizer_margin
        if optimizer.entry.size > model.entry.size * ratio + _OVERHEAD:
            kind = optimizer.report.fact("optimizer") or "unknown"
            over.append((checkpoint.index, optimizer, optimizer.entry.size / model.entry.size, kind))
    for index, file, ratio, kind in over[:3]:
        usual = state_size(kind).typical
        yield ctx.finding(
            OVERSIZED,
            f"{file.name} is {ratio:.1f}× its model; {'Adam-like' if kind == 'unknown' else kind} optimizer state is usually about {usual:g}×",
            index=index,
            path=file.path,
            context={"ratio": f"{ratio:.1f}×"},
        )
    if len(over) > 3:
        yield ctx.finding(
            OVERSIZED,
            f"optimizer state is beyond its usual ratio to the model in {len(over) - 3} more checkpoints",
        )


@fires(ZEROED_DATA)
def zeroed_data(ctx: RunContext) -> Iterator[Finding]:
    """CKD212: zeros where the previous checkpoint held data (compared while the run was grouped)."""
    unit = ctx.run.unit.value
    for checkpoint in ctx.run.checkpoints:
        for found in checkpoint.zeroed:
            name = found.path.rpartition(os.sep)[2]
            if found.read_whole:
                few = ", ".join(f"`{region}`" for region in found.regions[:_NAMED])
                more = f" and {len(found.regions) - _NAMED} more" if len(found.regions) > _NAMED else ""
                verb = "is" if len(found.regions) == 1 else "are"
                message = f"{name}: {few}{more} {verb} all zero bytes where {unit} {found.before} held data"
                severity = None
            else:
                message = (
                    f"{name}: its last {TAIL // 1024} KiB are all zero bytes where {unit} {found.before}'s copy ends in data: "
                    "the end of the save may never have reached the disk"
                )
                severity = Severity.WARNING  # a guess from 4 KiB: verify --deep reads the tensors themselves
            yield ctx.finding(
                ZEROED_DATA, message, index=checkpoint.index, path=found.path, severity=severity, extra_fixes=_read_whole(found, ctx)
            )


_NAMED = 3
"""Tensors a CKD212 message names before it counts the rest."""


def _read_whole(found: Zeroed, ctx: RunContext) -> tuple[str, ...]:
    """The first fix for a guess from a file's tail: read the bytes themselves."""
    if found.read_whole:
        return ()
    return (
        f"Read every byte with `ckptdoctor verify --deep {ctx.fix_context['run']}`: it checks each tensor and DCP item, and "
        "takes the checkpoint out of the resume point if its data turned to zeros.",
    )


@fires(ACCESS_DENIED)
def access_denied(ctx: RunContext) -> Iterator[Finding]:
    """CKD215 for each file this user may not read and each folder it may not list or search, once
    per checkpoint (its first such file or folder names the rest), and for such files beside the
    checkpoints; where the resume point depends on it, saying so."""
    depends = {checkpoint.index for checkpoint in ctx.run.resume_depends_on}
    resume = ctx.run.resume
    denied = Problem.ACCESS_DENIED in ctx.problems
    for checkpoint in ctx.run.checkpoints:
        if not denied and not checkpoint.unlisted:
            continue
        shut = _shut(checkpoint)
        if not shut:
            continue
        message = f"{_listed(shut, ctx.run.path)} {'is' if len(shut) == 1 else 'are'} {_shut_to(shut[0])}: nothing is known of {'it' if len(shut) == 1 else 'them'}"
        if checkpoint.index in depends:
            unit = ctx.run.unit.value
            fallback = f"{unit} {resume.index}" if resume is not None else "none: no checkpoint this user can read is complete"
            message += f"; the resume point depends on it: {unit} {checkpoint.index} if it is whole, else {fallback}"
        # older than a known resume point, nothing resumes from it (and prune leaves it)
        behind = resume is not None and checkpoint.index < resume.index
        yield ctx.finding(
            ACCESS_DENIED,
            message,
            index=checkpoint.index,
            path=shut[0].path,
            severity=Severity.WARNING if behind else None,
            context=_owner_of(shut[0]),
        )
    for file in (*ctx.run.loose_files, *ctx.run.extra_files):
        if Problem.ACCESS_DENIED in file.report.problems:
            yield ctx.finding(ACCESS_DENIED, f"{file.name} is {_shut_to(file.entry)}", path=file.path, context=_owner_of(file.entry))


@fires(CLOCK_SKEW)
def clock_skew(ctx: RunContext) -> Iterator[Finding]:
    """CKD214, once per run: files dated in the future by the clock ``ctx.now`` (the machine's,
    when the files were listed), the most skewed named. Not in a store: there its own clock stamps
    every object, and this machine's may be the one that is off."""
    if ctx.now is None or scheme(ctx.run.path) not in (None, "file"):
        return
    now = ctx.now
    files = itertools.chain(ctx.files, ((None, file) for file in ctx.run.loose_files))
    skewed = [(skew, index, file.entry) for index, file in files if (skew := ahead(file.entry.mtime, now))]
    if not skewed:
        return
    skew, _, worst = max(skewed, key=lambda found: found[0])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(worst.mtime))
    indices = {index for _, index, _ in skewed}
    if len(skewed) == 1:
        said = f"{worst.name} is dated {when}, {duration(skew)} in the future of this machine's clock"
    else:
        said = f"{len(skewed)} files are dated in the future of this machine's clock, up to {duration(skew)} ahead ({worst.name}: {when})"
    yield ctx.finding(
        CLOCK_SKEW,
        f"{said}: its time says nothing of when it was written; prune keeps {'its' if len(skewed) == 1 else 'their'} "
        "checkpoint and measures --keep-within and --min-age from the clock",
        index=next(iter(indices)) if len(indices) == 1 else None,
        path=worst.path,
    )


def _shut(checkpoint: Checkpoint) -> list[Entry]:
    """What of ``checkpoint`` this user may not read: its files, or for files it may not even
    look at, the folder that may be listed but not searched, which shuts them (each once)."""
    shut: dict[str, Entry] = {}
    for file in checkpoint.files:
        if Problem.ACCESS_DENIED not in file.report.problems:
            continue
        entry = file.entry
        if entry.denied:
            above = entry.os_path.rpartition(os.sep)[0]
            entry = Entry(above.rpartition(os.sep)[2], entry.path.rpartition("/")[0], above, 0, is_dir=True, denied=True)
        shut.setdefault(entry.os_path, entry)
    for unlisted in checkpoint.unlisted:
        shut.setdefault(unlisted.os_path, unlisted)
    return list(shut.values())


def _listed(entries: list[Entry], run: str) -> str:
    """The entries by their paths in the run (``checkpoint-10/sub/``), the first few."""
    names = [entry.path.removeprefix(f"{run}/") + ("/" if entry.is_dir else "") for entry in entries]
    return ", ".join(names[:_NAMED]) + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")


def _shut_to(entry: Entry) -> str:
    """How ``entry`` is shut to this user, and who owns it."""
    owned = owner(entry.os_path)
    what = "may not list or search it" if entry.is_dir else "may not read it"
    by = "this user, whose mode on it shuts it" if owned and owned == user_name(os.geteuid()) else owned or "an unknown user"
    return f"shut to this user ({what}; owned by {by})"


def _owner_of(entry: Entry) -> dict[str, str]:
    return {"owner": shell_word(owner(entry.os_path) or "OWNER")}


@fires(UNREADABLE, ACCESS_DENIED)
def unlisted_folders(unlisted: Iterable[Unlisted]) -> Iterator[Finding]:
    """CKD211 for folders below the user's paths that could not be listed, CKD215 where this user
    may not (outside every checkpoint: those are their checkpoints' own)."""
    for folder in unlisted:
        context = {"path": shell_word(folder.path), "name": folder.path, "run": shell_word(folder.path)}
        if folder.denied:
            owned = owner(folder.os_path)
            context["owner"] = shell_word(owned or "OWNER")
            message = f"could not list {folder.path}: this user may not (owned by {owned or 'an unknown user'}); nothing is known of it"
            yield make_finding(ACCESS_DENIED, message, None, path=folder.path, context=context)
            continue
        yield make_finding(UNREADABLE, f"could not list {folder.path}: {folder.reason}", None, path=folder.path, context=context)


@fires(PREVIOUS_VERSION)
def previous_versions(ctx: RunContext) -> Iterator[Finding]:
    """CKD216: each damaged file of a run in a versioned bucket, with its newest whole older version."""
    if ctx.run.store is None or not ctx.run.store.previous:
        return
    indices = {file.path: index for index, file in ctx.files}
    for previous in ctx.run.store.previous:
        name = previous.path.rsplit("/", 1)[-1]
        place = {"bucket": shell_word(previous.bucket), "key": shell_word(previous.key)}
        if previous.version_id is None:
            message = f"{name}: no whole previous version to restore: {previous.checked}"
            case = OTHERWISE
        else:
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(previous.modified))
            message = (
                f"{name}: a whole previous version exists: {previous.version_id} ({size(previous.size)}, {when}), "
                f"checked by {previous.checked}{f'; {previous.unchecked}' if previous.unchecked else ''}"
            )
            # as written, not percent-encoded: the aws CLI and boto3 encode it themselves (twice is NoSuchVersion)
            place["copy_source"] = shell_word(f"{previous.bucket}/{previous.key}?versionId={previous.version_id}")
            case = WHOLE_VERSION
        yield ctx.finding(PREVIOUS_VERSION, message, index=indices.get(previous.path), path=previous.path, context=place, case=case)


@fires(ARCHIVED)
def archived_objects(ctx: RunContext) -> Iterator[Finding]:
    """CKD217, once per checkpoint with objects in an archive tier (its first names the rest, and
    the restore covers them all), and for such files beside the checkpoints: an error where the
    checkpoint is newer than the resume point (which skips it), information where it is older."""
    resume = ctx.run.resume
    unit = ctx.run.unit.value
    for checkpoint in ctx.run.checkpoints if Problem.ARCHIVED in ctx.problems else ():
        files = checkpoint.archived
        if not files:
            continue
        name = checkpoint.folder.name if checkpoint.folder is not None else f"{unit} {checkpoint.index}"
        message = f"{name} is archived: {_archived_in(files, ctx.run.path)}"
        severity = None
        if resume is None:
            message += f": restore it to resume from it (no {unit} is complete without it)"
        elif checkpoint.index > resume.index:
            message += f": restore it to resume from it; until then the resume point skips it for {unit} {resume.index}"
        else:
            message += f"; older than the resume point ({unit} {resume.index}), which does not need it"
            severity = Severity.INFO
        yield ctx.finding(ARCHIVED, message, index=checkpoint.index, path=files[0].path, severity=severity, context=_restore(files))
    for file in (*ctx.run.loose_files, *ctx.run.extra_files):
        if Problem.ARCHIVED in file.report.problems:
            yield ctx.finding(
                ARCHIVED, f"{file.name} is archived: {_archived_in((file,), ctx.run.path)}", path=file.path, context=_restore((file,))
            )


def _archived_in(files: tuple[CheckpointFile, ...], run: str) -> str:
    """Which objects are archived, where, and how their restore stands (as the first one's)."""
    first = files[0].report
    where = first.fact(STORAGE_CLASS) or "an archive tier"
    if first.fact(ARCHIVE_TIER):
        where += f" ({first.fact(ARCHIVE_TIER)})"
    restoring = sum(1 for f in files if f.report.fact(RESTORE) == RESTORING)
    if restoring == len(files):
        restore = RESTORING
    elif restoring:
        restore = f"{RESTORING} for {restoring} of them"
    else:
        restore = first.fact(RESTORE) or NOT_RESTORED
    names = [f.path.removeprefix(f"{run}/") for f in files]
    listed = ", ".join(names[:_NAMED]) + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")
    return f"{listed} {'is' if len(files) == 1 else 'are'} in {where}, {restore}"


_RESTORE_TIERS = {
    "GLACIER": "Tier: Expedited (1-5 minutes), Standard (3-5 hours) or Bulk (5-12 hours)",
    "DEEP_ARCHIVE": "Tier: Standard (within 12 hours) or Bulk (within 48 hours); Deep Archive has no Expedited",
    "ARCHIVE_ACCESS": "Tier: Expedited, Standard (3-5 hours) or Bulk; no Days: it moves back to the Frequent Access tier",
    "DEEP_ARCHIVE_ACCESS": "Tier: Standard (within 12 hours) or Bulk (within 48 hours), no Expedited; no Days: it moves back to the Frequent Access tier",
}
"""The retrieval tiers each archive takes (AWS's RestoreObject reference)."""
_RESTORE_DAYS = 7
"""How long a restored copy of a GLACIER or DEEP_ARCHIVE object is kept: time to resume, then it lapses."""


def _restore(files: tuple[CheckpointFile, ...]) -> dict[str, str]:
    """The real command that restores ``files``: one ``restore-object`` for one, a loop over their
    keys for several (by class and tier, each with its own request); the tiers it may take."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    bucket = ""
    for file in files:
        location = parse(file.path, listed=True)
        bucket = location.bucket
        groups[file.report.fact(STORAGE_CLASS) or "GLACIER", file.report.fact(ARCHIVE_TIER) or ""].append(location.prefix)
    commands, tiers = [], []
    for (storage_class, tier), keys in groups.items():
        job = '"GlacierJobParameters":{"Tier":"Standard"}'
        request = f"{{{job}}}" if storage_class == "INTELLIGENT_TIERING" else f'{{"Days":{_RESTORE_DAYS},{job}}}'
        call = f"aws s3api restore-object --bucket {shell_word(bucket)} --key KEY --restore-request '{request}'"
        if len(keys) == 1:
            commands.append(call.replace("KEY", shell_word(keys[0]), 1))
        else:
            loop = call.replace("KEY", '"$key"', 1)
            commands.append(f"for key in {' '.join(shell_word(key) for key in keys)}; do {loop}; done")
        tiers.append(_RESTORE_TIERS.get(tier or storage_class, "Tier: Standard or Bulk"))
    return {"restore_command": "; ".join(commands), "restore_tiers": "; ".join(dict.fromkeys(tiers))}


CHECKS = (
    file_problems,
    legacy_formats,
    size_outliers,
    optimizer_ratio,
    zeroed_data,
    clock_skew,
    access_denied,
    previous_versions,
    archived_objects,
)
