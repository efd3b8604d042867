"""Completeness rules (CKD1xx): is every file a checkpoint needs there, and is there one to resume from?

These checks look at names and presence only: required roles per checkpoint, shards and commit
markers, stray prefixes, mixed formats and `latest`-style pointers.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from operator import attrgetter

from ckptdoctor.layouts.base import behind_pointer
from ckptdoctor.layouts.pointers import OUTSIDE, unfollowable
from ckptdoctor.model import (
    CUT_SHORT,
    MIN_AGE,
    Cause,
    Checkpoint,
    CheckpointFile,
    Entry,
    FileReport,
    Finding,
    Interruption,
    Problem,
    Role,
    Severity,
    Status,
)
from ckptdoctor.optimizers import FRESH_START_COST
from ckptdoctor.quoting import shell_word
from ckptdoctor.rules.context import RunContext
from ckptdoctor.rules.rule import OTHERWISE, Rule, fires, fix
from ckptdoctor.units import duration, size

MISSING_OPTIMIZER = Rule(
    code="CKD101",
    name="missing-optimizer",
    severity=Severity.ERROR,
    summary="A checkpoint has model weights but no optimizer state, so it cannot be resumed as saved.",
    meaning=(
        "Resuming a run needs the optimizer's state (for Adam/AdamW, two moment estimates per parameter and a step count) "
        "as well as the weights. burn refuses outright: resuming from epoch N restores the model, optimizer and scheduler "
        "files of that epoch and panics with `Can load optimizer checkpoint.` when the optimizer file is missing. "
        "HF Trainer is quieter and worse: it loads `optimizer.pt` and `scheduler.pt` only when both exist, and otherwise "
        "carries on with a fresh optimizer, so the run continues with a loss spike nobody explains. ckptdoctor marks the "
        "checkpoint incomplete, never picks it as the resume point, and names the newest complete checkpoint instead."
    ),
    causes=(
        "The save was interrupted between the model file and the optimizer file: burn hands model, optimizer and scheduler "
        "to three background writers, so a killed process (OOM, pre-empted node, job time limit) or a full disk can leave "
        "the newest epoch's model without its optimizer. A cleanup script or a hand-made retention rule deleted optimizer "
        "files to save space (they are the largest files, about twice the model for Adam). The optimizer checkpointer was "
        "pointed at another folder or file prefix than the model checkpointer, or renamed between runs, so its files are "
        "somewhere else (see CKD111). HF Trainer ran with `save_only_model=True`, which never writes `optimizer.pt`. The "
        "checkpoint was copied from another machine or bucket without its optimizer state."
    ),
    fixes=(
        fix(
            "Point the optimizer's saving code at {run}, with the name and index the model file uses, so that the resume finds {expected} there.",
            slot="CKD101/save-optimizer-beside",
        ),
        "Restore {expected} from a backup or object-store copy (`aws s3 cp`, `gsutil cp`, `rsync`) into {folder}, then run `ckptdoctor verify {run}` to confirm the checkpoint is complete again.",
        fix(
            "If no copy exists, start a new run from the weights alone with a fresh optimizer. " + FRESH_START_COST,
            slot="CKD101/weights-alone",
        ),
        fix(
            "Remove the leftovers of the failed save so that nothing resumes from the half-saved {unit}: `{repair} {this_run}` moves them into a quarantine folder (`ckptdoctor repair --undo {this_run}` puts them back).",
            slot="CKD101/quarantine-leftovers",
        ),
        fix(
            "Stop deleting optimizer files by hand or by size; let retention remove whole checkpoints instead, e.g. `ckptdoctor prune {this_run} --keep-last 2`.",
            slot="CKD101/stop-deleting",
        ),
    ),
    messages=(
        "Can load optimizer checkpoint.",
        "No such file or directory: '…optimizer.bin'",
        "No such file or directory: '…optimizer.pt'",
    ),
    related=("CKD102", "CKD103", "CKD110", "CKD111", "CKD203", "CKD501"),
)

MISSING_MODEL = Rule(
    code="CKD102",
    name="missing-model",
    severity=Severity.ERROR,
    summary="A checkpoint has optimizer or scheduler state but no model weights.",
    meaning=(
        "Without the weights there is nothing to resume: optimizer moments and a scheduler position are useless on their "
        "own. burn panics with `Can load model checkpoint.` when asked to resume from this epoch, and HF Trainer refuses a "
        "`checkpoint-N` folder that has no `model.safetensors`, `pytorch_model.bin`, shard index or adapter weights with "
        "`Can't find a valid checkpoint at …`. The checkpoint is incomplete and is never chosen as the resume point."
    ),
    causes=(
        "The model file was deleted or moved afterwards: a cleanup script, a sync or upload that skipped large files, a "
        "manual `rm` of the wrong pattern. The model checkpointer writes to another folder or prefix than the optimizer "
        "checkpointer (see CKD111). The save was killed or the disk filled before the model file was created. DeepSpeed "
        "ZeRO-3 without `stage3_gather_16bit_weights_on_model_save` leaves HF no weights file, only the sharded "
        "`global_stepN/` folder. A PEFT run saved adapter weights where full weights were expected."
    ),
    fixes=(
        "Restore {expected} from a backup or object-store copy into {folder}, then run `ckptdoctor verify {run}`.",
        fix(
            "If the model's saving code writes elsewhere, point it at {run} with the name the run used when it saved.",
            slot="CKD102/point-model-saver",
        ),
        fix(slot="CKD102/zero3-weights"),
        fix(
            "Quarantine the orphaned optimizer and scheduler files so that no tool tries to resume from them: `{repair} {this_run}`.",
            slot="CKD102/quarantine-orphans",
        ),
    ),
    messages=(
        "Can load model checkpoint.",
        "No such file or directory: '…pytorch_model.bin'",
        "Can't find a valid checkpoint at",
        "Saving the full checkpoint instead, use zero_to_fp32.py to recover weights",
    ),
    related=("CKD101", "CKD103", "CKD105", "CKD110", "CKD111"),
)

MISSING_SCHEDULER = Rule(
    code="CKD103",
    name="missing-scheduler",
    severity=Severity.ERROR,
    summary="A checkpoint has no learning-rate scheduler state.",
    meaning=(
        "The scheduler's state records how far the run is into its warm-up and decay. burn requires it: resuming an epoch "
        "loads model, optimizer and scheduler, and panics with `Can load learning rate scheduler checkpoint.` when the "
        "scheduler file is missing, even for a constant learning rate. That is why the default severity is error, and so is "
        "a hand-made loop's whose other saves have a scheduler (its resume loads the file, and fails without it); for "
        "other frameworks the check lowers it to a warning, because they can resume without it, but the schedule then "
        "starts over (a second warm-up, or the wrong learning rate for the rest of the run). HF Trainer loads `optimizer.pt` "
        "and `scheduler.pt` only as a pair, so a missing `scheduler.pt` silently restarts the optimizer as well."
    ),
    causes=(
        "The save was interrupted before the scheduler file was written (burn hands it to its writer last; a killed process "
        "or a full disk can leave it out). A cleanup script removed the small scheduler files as junk (a burn scheduler with "
        "a constant learning rate is only 256 bytes). The scheduler checkpointer writes to another folder or prefix. The "
        "training script never saved the scheduler (a plain `torch.save` of model and optimizer only). DeepSpeed manages the "
        "scheduler, so HF writes no `scheduler.pt` and the state lives in the DeepSpeed files instead."
    ),
    fixes=(
        "Restore {expected} from a backup or object-store copy into {folder}, then run `ckptdoctor verify {run}`.",
        fix("Point the scheduler's saving code at {run} with the same name as before.", slot="CKD103/point-scheduler-saver"),
        fix(
            "If no copy exists and the schedule is easy to recompute, resume from weights and optimizer and set the scheduler to the right position yourself.",
            slot="CKD103/schedule-without-copy",
        ),
        fix(
            "Save the scheduler with every checkpoint from now on, in the same save as the model and optimizer.",
            slot="CKD103/save-scheduler",
        ),
        "Quarantine the incomplete {unit} with `{repair} {this_run}` so nothing resumes from it.",
    ),
    messages=(
        "Can load learning rate scheduler checkpoint.",
        "No such file or directory: '…scheduler.bin'",
        "No such file or directory: '…scheduler.pt'",
    ),
    related=("CKD101", "CKD102", "CKD110"),
)

MISSING_TRAINER_STATE = Rule(
    code="CKD104",
    name="missing-trainer-state",
    severity=Severity.ERROR,
    summary="An HF Trainer `checkpoint-N` folder has no `trainer_state.json`: its save did not finish.",
    meaning=(
        "HF Trainer writes `trainer_state.json` last, after the weights, optimizer, scheduler and RNG state, so a folder "
        "without it is a save that never completed, and the files it does hold may be cut short. Trainer does not check: "
        "`get_last_checkpoint` picks the highest `checkpoint-N` by name, so `resume_from_checkpoint=True` walks straight "
        "into the unfinished folder and fails with `No such file or directory: …/trainer_state.json`. The file also holds "
        "`global_step`, the epoch and the log history; without it Trainer cannot tell where to continue."
    ),
    causes=(
        "The job was killed, pre-empted, hit its time limit or ran out of disk while saving the checkpoint. The folder was "
        "copied or synced while the save was still running. The file was deleted by hand or by a script that only kept "
        "weights."
    ),
    fixes=(
        fix(
            "Move the unfinished folder out of the way so that an automatic resume picks the previous one: `{repair} {this_run}` quarantines it.",
            slot="CKD104/move-unfinished",
        ),
        fix("Resume from an explicit checkpoint, the one the last line names, instead of the newest.", slot="CKD104/resume-explicit"),
        "If the other files of the folder verify (`ckptdoctor verify {run}`), its weights are still usable for evaluation or export; do not resume from it, since the step count and log history are gone.",
        "Make sure the next saves can finish: `ckptdoctor diskcheck {run}` compares the size of a save with the free space.",
    ),
    messages=("No such file or directory: '…trainer_state.json'",),
    related=("CKD110", "CKD113", "CKD202", "CKD501"),
)

ADVISORY = "advisory"
"""The case of a finding about a file the run's framework resumes without (``Layout.advisory``)."""

MISSING_SHARD = Rule(
    code="CKD105",
    name="missing-shard",
    severity=Severity.ERROR,
    summary="An index or metadata file names shards that are not there, or fewer rank files were saved than expected.",
    meaning=(
        "Large and distributed checkpoints are split into several files, and every one is needed: safetensors shards "
        "listed in `model.safetensors.index.json`, DeepSpeed ZeRO optimizer partitions (one "
        "`zero_pp_rank_<r>_mp_rank_00_optim_states.pt` per data-parallel rank), DCP `__<i>_<j>.distcp` files named by "
        "`.metadata`, Orbax item folders named by `_CHECKPOINT_METADATA` and the OCDBT data files (`d/…`) that an "
        "item's `manifest.ocdbt` names. A missing shard means missing tensors: DeepSpeed refuses to load or consolidate the checkpoint "
        "(`Expected N of '*_optim_states.pt' … but found M files`), and HF cannot load the weights."
    ),
    causes=(
        "One rank failed or was killed while the others finished their part of the save. Ranks wrote to node-local disks "
        "instead of a shared filesystem, so each node holds only its own files. A copy, upload or download stopped part-way "
        "or skipped a file. A tag folder was overwritten by a run with a different number of GPUs, mixing two saves. A "
        "cleanup script deleted files by pattern."
    ),
    fixes=(
        "Copy {expected} from the node or bucket that holds it into {folder}; with node-local storage, gather every node's files into one folder, then run `ckptdoctor verify {run}`.",
        "Save to a filesystem that every rank can see, so that all partitions of a checkpoint land in the same folder.",
        fix(slot="CKD105/new-tag"),
        fix("Quarantine the incomplete checkpoint so nothing resumes from it: `{repair} {this_run}`.", case=OTHERWISE),
        fix(
            "Nothing needs moving aside: the framework resumes from the checkpoint without this file, as the message says, and `ckptdoctor repair` keeps it.",
            case=ADVISORY,
        ),
    ),
    messages=(
        "Possibly due to an overwrite of an old checkpoint, or a checkpoint didn't get saved by one or more processes.",
        "Expected … of '*_optim_states.pt' under '…' but found … files.",
        "No such file or directory: '….distcp'",
    ),
    related=("CKD106", "CKD110", "CKD101", "CKD102"),
)

MISSING_COMMIT_MARKER = Rule(
    code="CKD106",
    name="missing-commit-marker",
    severity=Severity.ERROR,
    summary="A checkpoint lacks the marker its framework writes last to say the save finished.",
    meaning=(
        "Some frameworks commit a checkpoint by writing one small file at the very end: DCP's `.metadata` (the coordinator "
        "writes it after every rank's data), Orbax's `commit_success.txt` (with the folder renamed from "
        "`*.orbax-checkpoint-tmp`), Megatron-LM's `latest_checkpointed_iteration.txt`, advanced only once an `iter_*` "
        "folder is fully written. Without the marker the data files may be incomplete, and loaders treat the checkpoint as "
        "absent: Orbax on GCS skips it, and DCP cannot even tell which tensors the folder holds. On a local disk Orbax "
        "commits by renaming the folder and restores a step without `commit_success.txt` or `_CHECKPOINT_METADATA` "
        "(given each item's args): there it is a warning, and the step stays the resume point."
    ),
    causes=(
        "The job was killed or pre-empted after the data files and before the marker. An asynchronous save is still running "
        "or was interrupted (Megatron creates the `iter_*` folder before the data is durable). Only the coordinator's node "
        "has `.metadata` because each node saved to its own local disk. A copy skipped dotfiles (`cp dir/* dest` does not "
        "copy `.metadata`)."
    ),
    fixes=(
        fix(
            "If an asynchronous save may still be running, wait for it to finish and rerun `ckptdoctor inspect {run}`.",
            slot="CKD106/async-save",
        ),
        fix(
            "Copy the marker from the coordinator's node (rank 0) or the original location; shell globs skip dotfiles, so copy folders with `cp -a src/. dest` or `rsync -a`.",
            slot="CKD106/copy-marker",
        ),
        fix(slot="CKD106/leave-pointer"),
        fix(
            "Quarantine the uncommitted folder with `{repair} {this_run}` so no tool resumes from it.", slot="CKD106/quarantine-uncommitted"
        ),
    ),
    messages=("metadata is None; global metadata read failed",),
    related=("CKD202", "CKD113", "CKD105", "CKD110"),
)

WEIGHTS_ONLY = Rule(
    code="CKD107",
    name="weights-only",
    severity=Severity.INFO,
    summary="The run saves weights alone by design: a resume restores the weights and starts a fresh optimizer.",
    meaning=(
        "Its framework was told to leave optimizer and scheduler state out of every checkpoint (HF Trainer's "
        "`save_only_model=True`, recorded in `training_args.bin`; Lightning's `ModelCheckpoint(save_weights_only=True)`, "
        "whose checkpoints have no `optimizer_states` key), or no checkpoint of the run holds any. That is not damage: "
        "ckptdoctor needs no optimizer file for such a checkpoint to be complete, and names the newest whole weights as "
        "the resume point, flagged weights only. Resuming from it costs what a fresh optimizer costs: Adam/AdamW moments "
        "restart from zero (a loss spike, some warm-up lost) and the learning-rate schedule restarts unless restored. "
        "HF Trainer resumes from such a folder as usual. Lightning refuses `fit(ckpt_path=...)` on it with `KeyError: "
        "Trying to restore optimizer state but checkpoint contains only the model`: load the weights instead."
    ),
    causes=(
        "`save_only_model=True` in HF `TrainingArguments` (to save disk space or upload time). "
        "`ModelCheckpoint(save_weights_only=True)` or `trainer.save_checkpoint(path, weights_only=True)` in Lightning. "
        "A training loop that `torch.save`s only the model's state dict inside its checkpoint dict."
    ),
    fixes=(
        fix("To resume with the optimizer's state next time, save it with the weights from now on.", slot="CKD107/resume-optimizer"),
        "If the run did save optimizer state and something removed it from every checkpoint (a cleanup script, a copy of the weights alone), this is damage, not design: restore the checkpoints from a backup, then run `ckptdoctor verify {run}`.",
    ),
    messages=(
        "Trying to restore optimizer state but checkpoint contains only the model",
        "Trying to restore learning rate scheduler state but checkpoint contains only the model",
        "KeyError: 'optimizer_states'",
    ),
    related=("CKD101", "CKD103", "CKD110"),
)

NO_RESUMABLE_CHECKPOINT = Rule(
    code="CKD110",
    name="no-resumable-checkpoint",
    severity=Severity.ERROR,
    summary="The run has no complete checkpoint at all: there is nothing to resume from.",
    meaning=(
        "Every checkpoint in this run is missing a file, cut short or damaged, or there are none, so a resume will fail or, "
        "worse, quietly start from scratch: HF Trainer raises `No valid checkpoint found in output directory`, DeepSpeed "
        "only warns and returns `(None, None)`, burn with `.checkpoint(N)` but no checkpointer starts at epoch N+1 with "
        "fresh weights. The run's other findings say what is wrong with each checkpoint."
    ),
    causes=(
        "The run crashed before its first save finished. The disk filled up, so every recent save was cut short while "
        "retention deleted the older complete ones. The path points at the wrong folder: another run, the parent of burn's "
        "`checkpoint/`, a folder holding only `tmp-checkpoint-*` staging leftovers. Checkpoints were renamed so that the "
        "framework's pattern (HF `checkpoint-N`) no longer matches. Files were copied without the optimizer or scheduler."
    ),
    fixes=(
        fix(
            "Check that {run} is the folder the job saved into; `ckptdoctor inspect` on a parent folder finds every run below it.",
            slot="CKD110/check-folder",
        ),
        "Repair the newest checkpoint using the other findings: restore its missing or damaged files from a backup or object-store copy, then run `ckptdoctor verify {run}`.",
        fix(slot="CKD110/renamed-folders"),
        fix(
            "If only the weights survive, start a new run initialised from them with a fresh optimizer; Adam moments restart from zero (expect a loss spike) and the learning-rate schedule must be restored separately.",
            slot="CKD110/weights-survive",
        ),
        "Otherwise start again in a new, empty folder, and move this one out of the way first so that no tool resumes from what is in it (repair refuses a run with nothing to resume from: it moves nothing).",
        "Before the next run, make sure the disk holds several saves: `ckptdoctor diskcheck {run}`.",
    ),
    messages=("No valid checkpoint found in output directory", "No steps found in"),
    related=("CKD101", "CKD102", "CKD103", "CKD113", "CKD203", "CKD501"),
)

STRAY_PREFIX = Rule(
    code="CKD111",
    name="stray-prefix",
    severity=Severity.WARNING,
    summary="Checkpoint-like files use a name prefix the run does not otherwise use (`optimizer-3.bpk` beside `optim-*.bpk`).",
    meaning=(
        "Checkpointers find their files by name: burn's `FileCheckpointer` reads exactly `<dir>/<name>-<epoch>.bpk`. Files "
        "under another prefix were written by a checkpointer that was named or configured differently, often the same run "
        "before a rename, or a second run sharing the folder. The resume does not see them (burn panics with `Can load "
        "optimizer checkpoint.` although an optimizer file for that epoch is right there under the other prefix), they do "
        "not count towards the run's checkpoints, and retention never deletes them, so they pile up."
    ),
    causes=(
        "A custom checkpointer was given a different name (`optimizer` instead of burn's `optim`), or the name changed "
        "between versions of the training script. The resume script points the optimizer checkpointer at another prefix "
        "than the one that saved. Two runs or two learners write into one checkpoint folder. Files were renamed by hand."
    ),
    fixes=(
        fix(
            "If the files under {prefix} are this run's own state saved under an old name, rename each so it starts with {known} instead, keeping its index, then run `ckptdoctor verify {run}`.",
            slot="CKD111/files-under",
        ),
        fix("Use the same file names when saving and resuming.", slot="CKD111/same-folder"),
        "If the files belong to another run, move them into that run's own folder; give every run its own checkpoint directory.",
        "If nobody needs them, move them aside: {quarantine}; retention never deletes files under a prefix the run does not use.",
    ),
    messages=("Can load optimizer checkpoint.",),
    related=("CKD101", "CKD102", "CKD103", "CKD112"),
)

MIXED_FORMATS = Rule(
    code="CKD112",
    name="mixed-formats",
    severity=Severity.WARNING,
    summary="One run holds checkpoints in several file formats or recorder settings (`.mpk` and `.bpk`, full and half precision).",
    meaning=(
        "A resume reads one format with one set of settings. burn 0.22 and later read only burnpack (`.bpk`): recorder-era "
        "files (`.mpk`, `.mpk.gz`, `.bin`, `.json`) are invisible to its checkpointer, and reading one as burnpack fails with "
        "`Invalid magic number`. Recorder-era burn, when a record does not load, names the settings that differ "
        "(`Metadata has a different float type …`, `… format …`, `… Burn version …`). So the newest checkpoint in one format "
        "may not be resumable by the code that wrote the other, and which checkpoint is the real resume point depends on "
        "the version you run."
    ),
    causes=(
        "The training code was upgraded (burn 0.21 to 0.22 replaced recorders with burnpack; the recorder changed from "
        "`CompactRecorder` to `DefaultRecorder`) and kept saving into the old folder. Two scripts with different settings "
        "share one folder. Half-precision and full-precision checkpoints were copied together."
    ),
    fixes=(
        fix(
            "Resume with the code version and save settings that wrote the checkpoint you resume from; `ckptdoctor verify {run}` lists each file's format.",
            slot="CKD112/resume-version",
        ),
        "Keep one format per folder: move the files that are not {format} into a folder of their own (e.g. `{run}-legacy`).",
        fix(slot="CKD112/carry-recorder"),
        fix("Keep one save format and one precision per run.", slot="CKD112/keep-format"),
    ),
    messages=(
        "Invalid magic number",
        "Metadata has a different float type",
        "Metadata has a different int type",
        "Metadata has a different format",
    ),
    related=("CKD210", "CKD303", "CKD205", "CKD111"),
)

STALE_POINTER = Rule(
    code="CKD113",
    name="stale-pointer",
    severity=Severity.ERROR,
    summary="A `latest`-style pointer names a checkpoint that is missing or incomplete, or a symlink dangles.",
    meaning=(
        "Resume code that asks for the latest checkpoint trusts the pointer: DeepSpeed's `latest` file, Megatron-LM's "
        "`latest_checkpointed_iteration.txt`, Lightning's `last.ckpt` (a copy or a symlink), HF's `best_model_checkpoint` "
        "in `trainer_state.json`. When it names something that is gone or half-written, the resume fails, or quietly "
        "starts from scratch: DeepSpeed only warns `Unable to find latest file at …` and returns `(None, None)`, and "
        "Lightning warns that there is no last checkpoint and loads nothing."
    ),
    causes=(
        "Retention or a cleanup script deleted the checkpoint the pointer names (a `last.ckpt` symlink left dangling after "
        "pruning). The run folder was moved, so absolute paths and symlinks point at the old place. The save that should have "
        "updated the pointer was interrupted, or rank 0 wrote it on a node-local disk. The pointer was edited by hand. A "
        "Megatron tracker points at a layout that is not there (DeepSpeed `global_step*` folders, or other tensor/pipeline "
        "parallel naming)."
    ),
    fixes=(
        "Re-point it at the newest complete checkpoint: `{repair} {this_run}` rewrites the pointer (`ckptdoctor repair --undo {this_run}` restores it).",
        fix(
            "By hand: point it at the newest complete checkpoint, or name that checkpoint explicitly when you resume.",
            slot="CKD113/point-newest",
        ),
    ),
    messages=(
        "Unable to find latest file at",
        "Unable to find 'latest' file at",
        "ERROR: Invalid metadata file",
        "there is no last checkpoint available",
    ),
    related=("CKD110", "CKD106", "CKD104", "CKD211"),
)

STRAY = "stray"
"""The case of a CKD114 whose pick is an entry beside the checkpoints that the framework takes for one
(``Layout.auto_resume_outcome``)."""

UNSAFE_AUTO_RESUME = Rule(
    code="CKD114",
    name="unsafe-auto-resume",
    severity=Severity.ERROR,
    summary="The framework's own resume-from-latest would pick a checkpoint that is not complete.",
    meaning=(
        "Several frameworks resume from the highest-numbered checkpoint without looking inside it: HF Trainer's "
        "`get_last_checkpoint` (behind `resume_from_checkpoint=True`), DeepSpeed's `latest` tag, Megatron-LM's tracker, "
        "accelerate's newest `checkpoint_N`. When that newest checkpoint was cut short, the resume crashes on a missing "
        "file (`trainer_state.json`), or, worse, silently continues without optimizer and scheduler state: HF loads them "
        "only as a pair. accelerate's bare `load_state()` takes a number from every entry of `checkpoints/`, files too: "
        "an entry without one makes it fail, and one numbered higher than the newest `checkpoint_N` is what it loads. "
        "ckptdoctor names the newest complete checkpoint and the exact argument that resumes from it."
    ),
    causes=(
        "The job died while saving its newest checkpoint (disk full, pre-emption, time limit, OOM), so the highest-numbered "
        "folder holds only part of its files. A cleanup or sync removed files from the newest folder. The run was started "
        "with `save_only_model=True`, so no folder carries optimizer state. Notes, a notebook's `.ipynb_checkpoints/` or "
        "a backup copy were put into accelerate's `checkpoints/`."
    ),
    fixes=(
        fix(
            "Name the checkpoint the last line gives when you resume: an automatic resume takes the newest, which is incomplete.",
            slot="CKD114/name-last",
            case=OTHERWISE,
        ),
        fix(
            "Or move the incomplete newest checkpoint out of the run folder (`{repair} {this_run}` quarantines it), so that the automatic resume finds the complete one.",
            slot="CKD114/move-incomplete",
            case=OTHERWISE,
        ),
        fix(
            "Move {name} out of {run}, where the automatic resume takes every entry for a checkpoint (`ckptdoctor repair` leaves it there: it is no checkpoint): {quarantine}.",
            slot="CKD114/move-out",
            case=STRAY,
        ),
        fix("Or name the checkpoint the last line gives when you resume.", slot="CKD114/name-last-folder", case=STRAY),
        fix(
            "Keep resuming with an explicit checkpoint in job scripts: `ckptdoctor inspect --resume-path {run}` prints the path to pass.",
            slot="CKD114/keep-resuming",
        ),
    ),
    messages=(
        "No valid checkpoint found in output directory",
        "Can't find a valid checkpoint at",
        "invalid literal for int() with base 10",
    ),
    related=("CKD101", "CKD104", "CKD110", "CKD113"),
)

SAVED_TWICE = Rule(
    code="CKD115",
    name="saved-twice",
    severity=Severity.WARNING,
    summary="A checkpoint was saved again under its name with a version added (`epoch=0-step=4-v1.ckpt`): a training started again into the same folder.",
    meaning=(
        "Some frameworks never overwrite a checkpoint: where the name a save should get is taken, they add a version to it. "
        "Lightning's `ModelCheckpoint` saves `epoch=0-step=4-v1.ckpt` beside `epoch=0-step=4.ckpt`, and `last-v1.ckpt` beside "
        "`last.ckpt`. Two saves of one index are two trainings in one folder (a job started again from scratch instead of "
        "resuming), or two checkpointers writing the same names. ckptdoctor takes the newest whole save of an index as its "
        "checkpoint; but the highest index may be the earlier training's, while the framework's own resume from the latest "
        "goes by time and loads the later training's."
    ),
    causes=(
        "A job was started again without resuming (a requeue or a rerun whose script does not pass the checkpoint), so a "
        "second training saved the same names into the folder of the first. Two checkpoint callbacks share one folder and "
        "one name template, so every save is written twice."
    ),
    fixes=(
        fix(
            "Decide which training to go on with and pass its file when you resume (`ckptdoctor inspect --resume-path {run}` "
            "names the newest by index, which may be the earlier training's); move the other training's files out of {run}, "
            "and give each training a folder of its own.",
            slot="CKD115/decide-which",
        ),
        fix(
            "If two checkpointers write into one folder under one name template, each checkpoint is saved twice: give each its "
            "own name template or folder.",
            slot="CKD115/two-checkpointers",
        ),
    ),
    messages=("exists and is not empty",),
    related=("CKD114", "CKD113"),
)

AUTO_RESUME_BEHIND = Rule(
    code="CKD116",
    name="auto-resume-behind",
    severity=Severity.WARNING,
    summary="The framework's own resume-from-latest would load a whole checkpoint older than the newest complete one: training goes back and repeats the steps in between.",
    meaning=(
        "Frameworks that resume by themselves follow a pointer they rewrite after every save: Detectron2's "
        "`last_checkpoint`, Composer's `latest-rank0.pt` link, DeepSpeed's `latest`, Megatron-LM's tracker, or load a copy "
        "they write after the save (Lightning's `last.ckpt` with `save_last=True`, fairseq's `checkpoint_last.pt`). When "
        "the pointer or copy still stands for an older save while a newer one is whole, the resume works, from the older "
        "save: nothing fails, and the steps since are trained again (or lost, where the newer save is then overwritten). "
        "Unlike CKD114, the checkpoint it picks is complete; unlike CKD113, the pointer names a checkpoint that is there."
    ),
    causes=(
        "The job was killed after a save's files were whole but before the framework moved its pointer (Detectron2's "
        "`tag_last_checkpoint`, Composer's symlink, Lightning's and fairseq's copy come last). An older copy or pointer "
        "was restored from a backup or a sync over a newer run. The pointer was edited by hand."
    ),
    fixes=(
        "Point it at the newest complete checkpoint: `{repair} {this_run}` rewrites the pointer or the copy "
        "(`ckptdoctor repair --undo {this_run}` puts it back).",
        fix(
            "Or name the newest complete checkpoint when you resume: `ckptdoctor inspect --resume-path {run}` prints it.",
            slot="CKD116/name-newest",
        ),
    ),
    related=("CKD113", "CKD114"),
)

BEING_WRITTEN, DISK_FULL = "being-written", "disk-full"
"""The cases of CKD117 with fixes of their own (``model.Cause``); a kill, or a cut whose cause is unknown, is ``OTHERWISE``."""

INTERRUPTED_SAVE = Rule(
    code="CKD117",
    name="interrupted-save",
    severity=Severity.ERROR,
    summary="A save stopped part-way: one finding for the checkpoint, with what cut it short (a full disk, a kill) or that it is still being written.",
    meaning=(
        "A checkpoint whose files stop short or were never written is what one failed save leaves, and each of its "
        "missing or cut files is a finding of its own rule (CKD101-106, CKD201-203, CKD114 where the framework's own "
        "resume would pick it). They have one cause, and one fix: this finding stands for them, names its files, and says "
        "what the world shows of the cause when the run was listed. A live process of this machine holding its files means "
        "the save is going on now: nothing is wrong yet. A volume with no room left for the rest of the save means the disk "
        "filled. Neither means the writer died (killed, out of memory, pre-empted, a crash). The parts stay in `--json`, "
        "each with `part_of` naming this finding, and are counted with it."
    ),
    causes=(
        "A job killed during a save: a time limit, the out-of-memory killer, a pre-empted or failed node, Ctrl-C. A disk "
        "or quota that filled during the save (torch says `PytorchStreamWriter failed writing file`, `basic_ios::clear: "
        "iostream error` or `unexpected pos`). ckptdoctor run while the training job saves."
    ),
    fixes=(
        fix(
            "Let the save finish (pid {holders} holds its files), then run `ckptdoctor inspect {run}` again: `prune` and `repair` leave files a live process holds alone.",
            case=BEING_WRITTEN,
        ),
        fix(
            "Free space on {volume} before the run saves again: `ckptdoctor diskcheck {run}` says what the next save needs and what deleting older checkpoints frees.",
            case=DISK_FULL,
        ),
        fix(
            "Move {unit} {index} aside so that no resume picks it over {unit} {resume}: `{repair} {this_run}` quarantines it, and `ckptdoctor repair --undo {this_run}` puts it back.",
            case=(DISK_FULL, OTHERWISE),
        ),
        fix(
            "Or delete what the save left, which frees its bytes at once (on a full disk `repair` needs room to record a move): `{remove}`; {unit} {resume} stays the resume point.",
            case=DISK_FULL,
        ),
        fix(
            "Nothing earlier is whole to resume from: remove what the save left (`{start_over}`) and start training again.",
            case=(DISK_FULL, OTHERWISE),
        ),
    ),
    related=("CKD101", "CKD103", "CKD104", "CKD105", "CKD106", "CKD110", "CKD114", "CKD201", "CKD203", "CKD501"),
)

RULES: tuple[Rule, ...] = (
    MISSING_OPTIMIZER,
    MISSING_MODEL,
    MISSING_SCHEDULER,
    MISSING_TRAINER_STATE,
    MISSING_SHARD,
    MISSING_COMMIT_MARKER,
    WEIGHTS_ONLY,
    NO_RESUMABLE_CHECKPOINT,
    STRAY_PREFIX,
    MIXED_FORMATS,
    STALE_POINTER,
    UNSAFE_AUTO_RESUME,
    SAVED_TWICE,
    AUTO_RESUME_BEHIND,
    INTERRUPTED_SAVE,
)


# --- checks ---------------------------------------------------------------------------------

_MISSING_RULE = {
    Role.MODEL: MISSING_MODEL,
    Role.OPTIMIZER: MISSING_OPTIMIZER,
    Role.SCHEDULER: MISSING_SCHEDULER,
    Role.TRAINER_STATE: MISSING_TRAINER_STATE,
    Role.METADATA: MISSING_COMMIT_MARKER,
    Role.POINTER: MISSING_COMMIT_MARKER,
}
_STATE = {
    Role.MODEL: "model state",
    Role.OPTIMIZER: "optimizer state",
    Role.SCHEDULER: "scheduler state",
    Role.TRAINER_STATE: "trainer state",
    Role.METADATA: "commit marker",
    Role.POINTER: "commit marker",
}


@fires(*_MISSING_RULE.values(), MISSING_SHARD)
def missing_roles(ctx: RunContext) -> Iterator[Finding]:
    """CKD101-103: a checkpoint lacks a role the layout (or the rest of the run) needs."""
    run = ctx.run
    for checkpoint in run.checkpoints:
        if not checkpoint.missing:
            continue
        present = ", ".join(f.name for f in checkpoint.files) or "nothing"
        linked = checkpoint.folder.link if checkpoint.folder is not None and not checkpoint.files else None
        for role in checkpoint.missing:
            rule = _MISSING_RULE.get(role)
            if rule is None:
                if checkpoint.absent:
                    continue  # the files it lacks are named by CKD105 already
                rule = MISSING_SHARD  # a per-rank or auxiliary file the run's layout needs
            expected = _expected(ctx, checkpoint, role)
            state = _STATE.get(role, role.value)
            if linked is not None:  # not followed out of the run, yet the framework's own resume loads it
                message = (
                    f"{run.unit.value} {checkpoint.index} is a link to {linked}, which ckptdoctor does not follow: no {state} "
                    f"({expected}) was read there, though {ctx.layout.name}'s resume loads what it holds"
                )
            else:
                message = f"{run.unit.value} {checkpoint.index} has {present} but no {state} ({expected})"
            keyed = next((f for f in checkpoint.files if f.report.keys and f.report.tensors is not None), None)
            if keyed is not None:
                message += f"; the top-level keys of {keyed.name} are {', '.join(keyed.report.keys[:8])}"
            strays = [f.name for f in run.loose_files if f.roles == (role,) and _index_of(ctx, f) == checkpoint.index]
            if strays:
                message += f"; {', '.join(strays)} is there under another prefix (CKD111)"
            severity, case = None, OTHERWISE
            if rule is MISSING_SCHEDULER and Role.SCHEDULER not in ctx.layout.needed_to_resume(run):
                severity = Severity.WARNING
            elif role in ctx.advisory:
                severity, case = Severity.WARNING, ADVISORY
                message += f"; {ctx.advisory[role]}"
            note = ctx.layout.missing_note(run, checkpoint, role)
            if note is not None:
                message += f"; {note[0]}"
            yield ctx.finding(
                rule,
                message,
                index=checkpoint.index,
                path=checkpoint.files[0].path if checkpoint.files else None,
                severity=severity,
                context={"expected": expected, "folder": shell_word(checkpoint.path or run.path)},
                extra_fixes=(note[1],) if note is not None else (),
                case=case,
            )


@fires(WEIGHTS_ONLY)
def weights_only(ctx: RunContext) -> Iterator[Finding]:
    """CKD107: the run saves weights alone by design."""
    run = ctx.run
    if run.weights_only is None or run.single_file:
        return
    yield ctx.finding(
        WEIGHTS_ONLY,
        f"{run.path} saves weights only by design ({run.weights_only}): its checkpoints need no optimizer or "
        "scheduler state, and a resume starts a fresh optimizer",
    )


@fires(NO_RESUMABLE_CHECKPOINT)
def no_resumable_checkpoint(ctx: RunContext) -> Iterator[Finding]:
    """CKD110: not one checkpoint of the run is complete."""
    run = ctx.run
    if run.single_file or not run.checkpoints or run.resume is not None:
        return
    statuses = Counter(c.status.value for c in run.checkpoints)
    summary = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
    whole = [c for c in run.checkpoints if c.status is Status.COMPLETE]
    # "none of the 1 checkpoints" reads wrong: one is "the only checkpoint"
    none = (
        f"none of the {len(run.checkpoints)} checkpoints in {run.path} is"
        if len(run.checkpoints) > 1
        else f"the only checkpoint in {run.path} is not"
    )
    if not whole:
        yield ctx.finding(NO_RESUMABLE_CHECKPOINT, f"{none} complete ({summary})")
        return
    # whole, but not one the framework resumes from (``Layout.resumable``)
    newest = whole[-1]
    yield ctx.finding(
        NO_RESUMABLE_CHECKPOINT,
        f"{none} one {ctx.layout.name} can resume from ({summary}); {run.unit.value} {newest.index}: {ctx.layout.resume_hint(run, newest)}",
        index=newest.index,
    )


@fires(STRAY_PREFIX)
def stray_prefixes(ctx: RunContext) -> Iterator[Finding]:
    """CKD111: checkpoint-like files under a prefix the run does not otherwise use."""
    run = ctx.run
    by_prefix: dict[str, list[CheckpointFile]] = defaultdict(list)
    for file in run.loose_files:
        if Role.TEMP not in file.roles and Role.POINTER not in file.roles:
            by_prefix[file.prefix].append(file)
    for prefix, files in sorted(by_prefix.items()):
        role = files[0].roles[0]
        known = sorted({f.prefix for c in run.checkpoints for f in c.files_for(role) if not f.bundled})
        names = ", ".join(f.name for f in files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        known_text = f"its {role.value} files use {', '.join(repr(k) for k in known)}" if known else f"it has no other {role.value} files"
        yield ctx.finding(
            STRAY_PREFIX,
            f"{names} use{'s' if len(files) == 1 else ''} the prefix {prefix!r}, which this run does not otherwise use; {known_text}",
            index=_index_of(ctx, files[0]) if len(files) == 1 else None,
            path=files[0].path,
            context={"prefix": prefix, "known": known[0] if known else role.value},
            moves=tuple(f.path for f in files),
        )


@fires(MIXED_FORMATS)
def mixed_formats(ctx: RunContext) -> Iterator[Finding]:
    """CKD112: one run holds a role in several formats or recorder settings."""
    run = ctx.run
    # reports of clean files are shared objects: label each distinct one once
    by_report: dict[tuple[Role, int], list[int]] = defaultdict(list)
    reports: dict[int, FileReport] = {}
    unread: dict[str, bool] = {}
    for report, kinds in ctx.by_report:
        if report.issues and report.problems - {Problem.LEGACY}:
            continue
        for kind in kinds:
            if len(kind.roles) != 1:
                continue
            skipped = unread.get(kind.prefix)
            if skipped is None:
                skipped = unread[kind.prefix] = ctx.layout.unread(kind.prefix) is not None
            if skipped:
                continue  # not read, so not a way of saving (an OCDBT store's data files)
            by_report[kind.roles[0], id(report)].extend(index for index, _ in kind.files)
            reports[id(report)] = report
    variants: dict[Role, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for (role, report_id), indexes in by_report.items():
        report = reports[report_id]
        settings = report.fact("settings") or report.fact("precision")
        variants[role][f"{report.format} ({settings})" if settings else report.format].extend(indexes)
    for role, labels in variants.items():
        if len(labels) < 2 or role is Role.TEMP or len({frozenset(indexes) for indexes in labels.values()}) == 1:
            # one way, or each save holds the role in every one of these ways: written together by
            # design (HF Trainer under FSDP exports model.safetensors beside pytorch_model_fsdp.bin)
            continue
        ordered = sorted(((label, sorted(indexes)) for label, indexes in labels.items()), key=lambda item: item[1][0])
        place = {checkpoint.index: position for position, checkpoint in enumerate(run.checkpoints)}
        parts = "; ".join(f"{label} in {_span(run.unit.value, indexes, place)}" for label, indexes in ordered)
        yield ctx.finding(MIXED_FORMATS, f"{role.value} files are saved in {len(labels)} ways: {parts}")


def _index_of(ctx: RunContext, file: CheckpointFile) -> int | None:
    claim = ctx.layout.stray(file.name) or ctx.layout.claim(file.name)
    return claim.number if claim else None


def _span(unit: str, indexes: list[int], place: dict[int, int]) -> str:
    """``epoch 5``, ``epochs 3 and 4``, ``epochs 1–9``, ``epochs 1–4 and 6–9``: ``indexes`` (in
    order) as stretches of the run's consecutive checkpoints (``place``: each index's position in
    the run), so that a range never covers a checkpoint saved the other way."""
    stretches: list[list[int]] = []
    for index in indexes:
        if stretches and place[index] == place[stretches[-1][-1]] + 1:
            stretches[-1].append(index)
        else:
            stretches.append([index])
    items: list[str] = []
    for stretch in stretches:
        items += [str(i) for i in stretch] if len(stretch) < 3 else [f"{stretch[0]}–{stretch[-1]}"]
    joined = items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
    return f"{unit}{'s' if len(indexes) > 1 else ''} {joined}"


_NAMING_ROLES = frozenset({Role.SHARD_INDEX, Role.METADATA})
"""Files that list a checkpoint's other files: a shard index, DCP's ``.metadata``."""


@fires(MISSING_SHARD)
def missing_shards(ctx: RunContext) -> Iterator[Finding]:
    """CKD105: an index names shards that are not there."""
    for checkpoint in ctx.run.checkpoints:
        if not checkpoint.absent or checkpoint.status is Status.UNREADABLE:
            continue  # a folder this user may not list may hold them all: CKD215 says so
        # the file that lists what is missing, or else the one that names the checkpoint's files
        index_file = next((f for f in checkpoint.files if f.report.fact("missing")), None) or next(
            (f for f in checkpoint.files if _NAMING_ROLES.intersection(f.roles)), None
        )
        where = checkpoint.path or ctx.run.path
        count = len(checkpoint.absent)
        names = ", ".join(checkpoint.absent[:3]) + (f" and {count - 3} more" if count > 3 else "")
        named_by = index_file.name if index_file else "the run's other checkpoints"
        yield ctx.finding(
            MISSING_SHARD,
            f"{where} lacks {count} file{'s' if count != 1 else ''} that {named_by} name{'s' if index_file else ''}: {names}",
            index=checkpoint.index,
            path=index_file.path if index_file else where,
            context={"expected": checkpoint.absent[0], "folder": shell_word(where)},
            case=OTHERWISE,
        )


@fires(UNSAFE_AUTO_RESUME)
def unsafe_auto_resume(ctx: RunContext) -> Iterator[Finding]:
    """CKD114: the framework's resume-from-latest would load an incomplete checkpoint."""
    pick = ctx.layout.auto_resume_pick(ctx.run)
    if pick is None or pick.status in (Status.COMPLETE, Status.UNREADABLE, Status.ARCHIVED):  # CKD215, CKD217 say what of it
        return
    outcome = ctx.layout.auto_resume_outcome(ctx.run, pick)
    if pick in ctx.run.checkpoints:
        index, path = pick.index, pick.path
        where = path or f"{ctx.run.unit.value} {index}"
    else:  # none of the run's checkpoints: a file the framework loads (Lightning's copied `last.ckpt`), or an entry beside them
        index, path = None, pick.path or pick.files[0].path
        where = path
    said = outcome or f"would pick {where}, which is {pick.status.value}"
    yield ctx.finding(
        UNSAFE_AUTO_RESUME,
        f"{ctx.layout.name}'s resume from the latest checkpoint {said}",
        index=index,
        path=path,
        case=STRAY if outcome else OTHERWISE,
    )


@fires(AUTO_RESUME_BEHIND)
def auto_resume_behind(ctx: RunContext) -> Iterator[Finding]:
    """CKD116: the framework's resume-from-latest would load a complete checkpoint older than
    the resume point: the pointer (or copy) it follows was left behind."""
    run = ctx.run
    behind = behind_pointer(ctx.layout, run)
    if behind is None or run.resume is None:
        return
    pick, pointer = behind
    unit, resume = run.unit.value, run.resume
    path: str | None = pick.path
    said = f"{ctx.layout.name}'s resume from the latest checkpoint picks {unit} {pick.index}"
    if pointer is not None and pointer.source is not None:
        how = "is a copy of" if pointer.copy else "names"
        said, path = f"{pointer.source.path} {how} {pointer.target} ({unit} {pick.index})", pointer.source.path
    yield ctx.finding(
        AUTO_RESUME_BEHIND,
        f"{said}: {ctx.layout.name}'s own resume would load it, not {unit} {resume.index}, the newest complete checkpoint, "
        f"and train the {unit}s in between again",
        index=pick.index,
        path=path,
    )


@fires(SAVED_TWICE)
def saved_twice(ctx: RunContext) -> Iterator[Finding]:
    """CKD115: saves of one index under one name, the later ones with the version the framework
    adds where the name is taken (``Layout.resaved``): two trainings in one folder."""
    if not ctx.layout.versions_taken:
        return  # its framework never versions a name that is taken: nothing to look for
    run = ctx.run
    twice = [
        saves for index, same in itertools.groupby(run.checkpoints, key=attrgetter("index")) for saves in _versions(ctx, index, list(same))
    ]
    if not twice:
        return
    unit = run.unit.value
    listed = "; ".join(f"{' and '.join(entry.name for _, entry, _ in saves)} ({unit} {index})" for index, saves in twice[:3])
    if len(twice) > 3:
        listed += f" and {len(twice) - 3} more {unit}s"
    taken = [max(saves, key=lambda save: (save[2], save[0]))[1] for _, saves in twice]
    message = (
        f"{listed}: saved again under one name, the later save with a version {ctx.layout.name} adds where the name is taken "
        "(a training started again into this folder, or two checkpointers with one name template); ckptdoctor takes the "
        f"newest whole save of each as its checkpoint ({', '.join(entry.name for entry in taken[:3])}{', …' if len(taken) > 3 else ''})"
    )
    resume = run.resume
    later = max((entry for _, saves in twice for version, entry, _ in saves if version), key=lambda entry: entry.mtime)
    saved_at = _saved_at(resume) if resume is not None else 0.0
    if resume is not None and 0 < saved_at < later.mtime and resume.index > max(index for index, _ in twice):
        newest = max(run.checkpoints, key=_saved_at)
        message += (
            f"; the resume point, {unit} {resume.index}, was saved before {later.name}: it is the earlier training's, "
            f"and the newest save is {unit} {newest.index} ({_save_entry(newest).name})"
        )
    yield ctx.finding(SAVED_TWICE, message, index=twice[0][0] if len(twice) == 1 else None, path=later.path)


def _versions(ctx: RunContext, index: int, checkpoints: Sequence[Checkpoint]) -> list[tuple[int, list[tuple[int, Entry, bool]]]]:
    """The saves of ``index`` (its checkpoint's whole-save files, or its checkpoints' folders) by the
    name each was meant to have, where several share one: (version, entry, whole) each, oldest first."""
    if len(checkpoints) > 1:
        saves = [(c.folder, c.status is Status.COMPLETE) for c in checkpoints if c.folder is not None]
    elif len(checkpoints[0].files) < 2:
        return []  # the common case: one file, one save
    else:
        saves = [(f.entry, not _unusable(f)) for f in checkpoints[0].files if Role.MODEL in f.roles and Role.TEMP not in f.roles]
    if len(saves) < 2:
        return []
    named: dict[str, list[tuple[int, Entry, bool]]] = defaultdict(list)
    for entry, whole in saves:
        base, version = ctx.layout.resaved(entry.name) or (entry.name, 0)
        named[base].append((version, entry, whole))
    return [(index, sorted(same, key=lambda save: save[0])) for same in named.values() if len(same) > 1 and any(v for v, _, _ in same)]


def _unusable(file: CheckpointFile) -> bool:
    """A file no resume can use: a problem of it gives its checkpoint a status."""
    return any(problem.status is not None for problem in file.report.problems)


def _save_entry(checkpoint: Checkpoint) -> Entry:
    """What a checkpoint was saved as: its folder, else the file its resume names."""
    return checkpoint.folder or checkpoint.files[0].entry


def _saved_at(checkpoint: Checkpoint) -> float:
    """When ``checkpoint`` was saved (0: not known, as for a folder)."""
    return _save_entry(checkpoint).mtime if checkpoint.files or checkpoint.folder else 0.0


@fires(STALE_POINTER)
def stale_pointers(ctx: RunContext) -> Iterator[Finding]:
    """CKD113: a pointer the framework follows names a checkpoint that is gone or not complete."""
    for pointer in ctx.layout.pointers(ctx.run):
        if pointer.source is None:
            yield ctx.finding(
                STALE_POINTER,
                f"{ctx.run.path} has no `{pointer.meaning}` file: {ctx.layout.name} will not know which checkpoint to load",
                path=ctx.run.path,
                context={"expected": pointer.meaning},
            )
            continue
        state = unfollowable(ctx.run, pointer)
        if state is None:
            continue
        if state == OUTSIDE:  # there, and what the framework loads; only not judged here: a warning
            message = (
                f"{pointer.source.path} names {pointer.target!r} as its {pointer.meaning}, which points {state} at {pointer.outside}: "
                f"{ctx.layout.name}'s resume through it loads that, which ckptdoctor did not check as one of them"
            )
            yield ctx.finding(STALE_POINTER, message, path=pointer.source.path, severity=Severity.WARNING)
            continue
        if pointer.target:
            message = f"{pointer.source.path} names {pointer.target!r} as its {pointer.meaning}, which is {state}"
        else:  # killed while the framework rewrote it in place
            message = (
                f"{pointer.source.path} is {state}: it names no checkpoint as its {pointer.meaning}, "
                f"and {ctx.layout.name}'s resume through it fails"
            )
        yield ctx.finding(
            STALE_POINTER,
            message,
            index=pointer.number,
            path=pointer.source.path,
        )


def _expected(ctx: RunContext, checkpoint: Checkpoint, role: Role) -> str:
    """The name of the file of ``role`` that ``checkpoint`` lacks, as its framework or its neighbours name it."""
    return ctx.layout.missing_name(checkpoint, role) or ctx.sibling_name(role, checkpoint.index) or f"a file with its {role.value} state"


_PARTS = frozenset({"CKD101", "CKD102", "CKD103", "CKD104", "CKD105", "CKD106", "CKD114", "CKD201", "CKD202", "CKD203", "CKD208"})
"""What one save cut short leaves: files missing, cut or left staged, and the framework's own
resume picking the checkpoint. CKD117 stands for them (CKD110 too, where nothing else was saved)."""
_BETWEEN_FILES = 60.0
"""Seconds within which a save that no process holds may be between two of its files, not killed."""
_CAUSES = {
    Cause.BEING_WRITTEN: BEING_WRITTEN,
    Cause.DISK_FULL: DISK_FULL,
}


@fires(INTERRUPTED_SAVE)
def interrupted_saves(ctx: RunContext, findings: Sequence[Finding]) -> list[Finding]:
    """CKD117: one finding per save that stopped part-way, the findings of its files made its
    parts (``Finding.part_of``); a save still being written is a warning, and so are its parts.
    A save that left one finding keeps it alone, unless the world says more of it (a process
    writing it, a full disk)."""
    found = list(findings)
    run = ctx.run
    if not run.interrupted:
        return found
    by_index: dict[int | None, list[int]] = defaultdict(list)
    for i, finding in enumerate(found):
        if finding.code in _PARTS:
            by_index[finding.index].append(i)
    # the run's only save, cut short: it is why the run has nothing to resume from
    alone = run.resume is None and len(run.checkpoints) == 1 and len(run.unfinished) == 1
    ended = [i for i, f in enumerate(found) if alone and f.code == NO_RESUMABLE_CHECKPOINT.code]
    parents: list[tuple[int, Finding]] = []
    for checkpoint, interruption in zip(run.unfinished, run.interrupted, strict=True):  # made in this order (pipelines/interrupted.py)
        parts = [i for i in by_index.pop(checkpoint.index, []) + ended if found[i].part_of is None]
        ended = []
        if len(parts) < 2 and interruption.cause not in _CAUSES:
            continue  # one finding is one per cause already, with its own rule's fixes; a live save or a full disk is said still
        severity = (
            Severity.WARNING if interruption.cause is Cause.BEING_WRITTEN else max((found[i].severity for i in parts), key=lambda s: s.rank)
        )
        for i in parts:
            lowered = min(found[i].severity, severity, key=lambda s: s.rank)
            found[i] = dataclasses.replace(found[i], part_of=(INTERRUPTED_SAVE.code, checkpoint.index), severity=lowered)
        parent = _interrupted(ctx, checkpoint, interruption, severity)
        parents.append((min(parts), dataclasses.replace(parent, stands_for=tuple(dict.fromkeys(found[i].code for i in parts)))))
    for at, parent in sorted(parents, key=lambda placed: placed[0], reverse=True):  # each before its first part
        found.insert(at, parent)
    return found


def _interrupted(ctx: RunContext, checkpoint: Checkpoint, interruption: Interruption, severity: Severity) -> Finding:
    run, unit = ctx.run, ctx.run.unit.value
    cut = [f.name for f in checkpoint.files if f.report.problems & CUT_SHORT]
    staged = [f.name for f in checkpoint.files if Role.TEMP in f.roles]
    never = [_expected(ctx, checkpoint, role) for role in checkpoint.missing]
    live = interruption.cause is Cause.BEING_WRITTEN
    # a file cut short or left staged is a save's doing; a file missing alone may be a cleanup's
    stopped = bool(cut or staged)
    said = [f"{'partly written' if live else 'cut short'} {', '.join(cut)}"] if cut else []
    said += [f"{'not yet written' if live else 'never written' if stopped else 'missing'} {', '.join(never)}"] if never else []
    said += [f"{'staged' if live else 'left staged'} {', '.join(staged)}"] if staged else []
    what = f"{unit} {checkpoint.index}'s save stopped part-way" if stopped else f"{unit} {checkpoint.index} lacks files its save writes"
    files_said = "; ".join(said) or "files missing"
    # how long ago matters in the first minutes after a crash (a save may go on; --min-age spares it)
    recent = interruption.age is not None and interruption.age < MIN_AGE
    age = f", {_written(interruption.age)}" if recent and interruption.age is not None else ""
    volume = interruption.volume
    room = f"{size(volume.free_bytes)} free on {volume.fstype} {volume.mountpoint}" if volume is not None else ""
    cause = interruption.cause
    if cause is Cause.BEING_WRITTEN:
        message = f"{unit} {checkpoint.index} is being written now, by pid {', '.join(interruption.holders)}{age}: {files_said}"
    elif cause is Cause.DISK_FULL:
        wanted = interruption.wanted_bytes
        short = f", less than the {size(wanted)} the rest of the save needed" if wanted else ""
        full = f"the disk is full, {room} ({size(volume.total_bytes)} in all){short}" if volume else "the disk is full"
        message = f"{what}, as {full}: {files_said}"
    elif cause is Cause.KILLED:
        seen = " this user can see" if interruption.unseen else ""
        read = f"; {', '.join(interruption.readers)} reads them" if interruption.readers else ""
        # the volume has room: what it has is said where it is full (a report says the same twice over)
        evidence = f"no process{seen} {'writes' if read else 'holds'} its files{read}{age}; the disk has room"
        # moments after a file is closed, a live save may be opening its next one
        killed = (
            "likely killed" if interruption.age is None or interruption.age >= _BETWEEN_FILES else "killed, or between two files of a save"
        )
        message = (
            f"{what}, {killed} ({evidence}): {files_said}"
            if stopped
            else f"{what} ({evidence}): {files_said}; a save killed part-way, or files deleted since"
        )
    else:
        message = f"{what}{age}: {files_said}"
    context = {
        "holders": ", ".join(interruption.holders),
        "folder": shell_word(checkpoint.path or run.path),
    }
    if volume is not None:
        context["volume"] = f"{volume.fstype} {volume.mountpoint}"
    context["remove"] = (
        f"rm -r -- {shell_word(checkpoint.path)}" if checkpoint.path else f"rm -- {' '.join(shell_word(f.path) for f in checkpoint.files)}"
    )
    if run.resume is None:  # the fix that starts over, for a run with nothing earlier to resume from
        context["start_over"] = context["remove"]
    finding = ctx.finding(
        INTERRUPTED_SAVE,
        message,
        index=checkpoint.index,
        path=checkpoint.path or (checkpoint.files[0].path if checkpoint.files else None),
        severity=severity,
        context=context,
        case=_CAUSES.get(cause, OTHERWISE),
    )
    if cause is Cause.BEING_WRITTEN:
        return finding
    return dataclasses.replace(finding, fixes=tuple(_acting_now(ctx, f, interruption, context["remove"]) for f in finding.fixes))


def _written(age: float) -> str:
    """When a save's newest file was written, in words that stay the same over a minute (two
    reports of one run a moment apart say the same)."""
    return "written just now" if age < _BETWEEN_FILES else f"written {int(age // 60)} min ago"


def _acting_now(ctx: RunContext, fix: str, interruption: Interruption, remove: str) -> str:
    """``fix`` as it works when followed now: a repair within ``--min-age`` of the save says when it
    acts, and what acts at once if no job saves here (a trainer between two files holds none
    open, so no process table can tell); a repair of files a reader holds says it waits for it;
    a delete of files written moments ago says the same condition."""
    repair = f"`{ctx.fix_context['repair']} {ctx.fix_context['this_run']}`"
    age = interruption.age
    young = age is not None and age < MIN_AGE
    hidden = " (some processes are hidden from this user)" if interruption.unseen else ""
    condition = f"if no job is saving here{hidden}"
    said: list[str] = []
    if repair in fix and young and age is not None:
        when = time.strftime("%H:%M UTC", time.gmtime(ctx.now + MIN_AGE - age)) if ctx.now is not None else f"in {duration(MIN_AGE - age)}"
        said.append(f"it acts from {when}, when its files are {duration(MIN_AGE)} old; `{repair[1:-1]} --min-age 0` acts now, {condition}")
    if repair in fix and interruption.readers:
        said.append(f"it leaves the files while {', '.join(interruption.readers)} holds them open to read")
    if f"`{remove}`" in fix and young and age is not None:
        said.append(f"its files are {duration(age)} old: {condition}")  # a trainer between two files holds none open
    return fix if not said else f"{fix.removesuffix('.')}; {'; '.join(said)}."


CHECKS = (
    missing_roles,
    missing_shards,
    weights_only,
    no_resumable_checkpoint,
    unsafe_auto_resume,
    auto_resume_behind,
    saved_twice,
    stale_pointers,
    stray_prefixes,
    mixed_formats,
)
