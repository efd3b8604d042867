"""burn (tracel-ai/burn): ``checkpoint/{model,optim,scheduler}-<epoch>.<ext>``.

burn's ``FileCheckpointer`` writes one file per checkpointer name and epoch (1-based), in the
artifact directory's ``checkpoint/`` folder; the burnpack era writes ``.bpk``, the recorder era
``.mpk`` (``CompactRecorder``), ``.bin``, ``.json`` and their gzip forms. Resuming needs all
three files of an epoch; the RL learner writes ``policy-`` and ``learning-agent-`` instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.layouts.base import Layout
from ckptdoctor.layouts.context import role_hints
from ckptdoctor.layouts.naming import Claim, guess_roles
from ckptdoctor.model import Checkpoint, Role, Run, Unit
from ckptdoctor.optimizers import FRESH_START_COST
from ckptdoctor.places import parent
from ckptdoctor.readers.files import checkpoint_suffixes
from ckptdoctor.readers.sniff import Format

_CONTENT = frozenset(
    {
        Format.BURNPACK,
        Format.MSGPACK,
        Format.MSGPACK_GZ,
        Format.JSON,
        Format.JSON_GZ,
        Format.BINCODE,
        Format.BINCODE_GZ,
    }
)
EXTENSIONS = "|".join(re.escape(suffix[1:]) for suffix in checkpoint_suffixes(_CONTENT))
"""The suffixes (without the dot) of the formats burn writes, as their readers declare them."""
# burn names a file `{name}-{epoch}` from a usize: ASCII digits with no leading zero, nothing after
# the suffix (`model-06.bpk` or a trailing newline is no name `.checkpoint(6)` loads)
_NAME = re.compile(rf"^(?P<prefix>[A-Za-z][\w.-]*?)-(?P<index>0|[1-9][0-9]*)\.(?P<ext>{EXTENSIONS})\Z")
_KNOWN = re.compile(rf"^(model|optim|scheduler|policy|learning-agent)-(0|[1-9][0-9]*)\.(?:{EXTENSIONS})\Z")

SUPERVISED = {"model": Role.MODEL, "optim": Role.OPTIMIZER, "scheduler": Role.SCHEDULER}
REINFORCEMENT = {"policy": Role.MODEL, "learning-agent": Role.OPTIMIZER}
PREFIXES = {**SUPERVISED, **REINFORCEMENT}
_ROLES = {prefix: ((role,), prefix) for prefix, role in PREFIXES.items()}
"""Each prefix's roles as one tuple, and the prefix as one string, that every claim shares
(checks group files by the roles; a big run's claims hold one of each, not one a file)."""
_FOLDER = "checkpoint"
"""The folder of the artifact directory ``FileCheckpointer`` saves into."""


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD101/save-optimizer-beside": "Build all three checkpointers on the same artifact folder with `with_default_checkpointers()` (or custom `FileCheckpointer`s on that folder named `model`, `optim` and `scheduler`), so that the resume finds {expected} in {run}.",
        "CKD101/weights-alone": "If no copy exists, resume from the weights alone with a fresh optimizer: load the model file with `Module::load_file` and launch without `.checkpoint(...)` into a new directory (the epoch count restarts at 1 and would overwrite old files). "
        + FRESH_START_COST,
        "CKD102/point-model-saver": "If the model checkpointer writes elsewhere, point it at {run}: burn's defaults write `model-N.bpk`, `optim-N.bpk` and `scheduler-N.bpk` side by side in `<dir>/checkpoint`.",
        "CKD103/point-scheduler-saver": "Point the scheduler checkpointer at {run} with the same name as before: `scheduler-N.bpk` beside `model-N.bpk` and `optim-N.bpk`.",
        "CKD103/schedule-without-copy": "If no copy exists and the schedule is easy to recompute, load weights and optimizer in your own code and step the scheduler forward to the right position (`.checkpoint(...)` insists on all three files).",
        "CKD110/check-folder": "Check that {run} is the `checkpoint` folder inside the learner's artifact directory; `ckptdoctor inspect` on a parent folder finds every run below it.",
        "CKD111/files-under": "If the files under {prefix} are this run's own state saved under an old name, rename each so it starts with {known} instead, keeping its index (`optimizer-3.bpk` becomes `optim-3.bpk`), then run `ckptdoctor verify {run}`.",
        "CKD111/same-folder": "Use the same checkpointer names when saving and resuming: burn's defaults are `model`, `optim` and `scheduler` (`with_default_checkpointers()`), and a custom `FileCheckpointer::new(dir, name)` needs the same `name` in both runs.",
        "CKD112/resume-version": "Resume with the burn version and recorder settings that wrote the checkpoint you resume from; `ckptdoctor verify {run}` lists each file's format.",
        "CKD112/carry-recorder": "To carry a recorder-era run into burn 0.22 or later, load the weights with the burn version that wrote them, re-save them as burnpack and start a new run from them; the optimizer state does not carry over.",
        "CKD112/keep-format": "Keep one recorder and one precision per run; when a load fails, burn's `Metadata has a different …` lines name the setting that changed.",
        "CKD303/resume-version": "Resume with the burn version that wrote the checkpoint you resume from, and pin it in `Cargo.lock`.",
        "CKD303/recorder-era": "Recorder era: a version difference alone is not an error; when a load does fail, the `Metadata has a different …` lines name what changed, and the burn version that wrote the file can still load it.",
        "CKD304/before-resuming": "Before resuming, lower the learning rate or add gradient clipping (`GradientClippingConfig`), and use bf16 instead of plain fp16.",
        "CKD501/keep-fewer": "Keep fewer checkpoints: `KeepLastNCheckpoints::new(n)` in the learner's checkpointing strategy.",
        "CKD501/check-folder": "Check that the checkpoint folder exists and is writable before a long run (`ckptdoctor diskcheck {run}` tests it with a probe file): burn's checkpointer ignores errors creating it and only fails at the first save.",
        "CKD501/create-folder": "Create the checkpoint folder before the run starts (`mkdir -p {run}`): burn's checkpointer ignores errors creating it and only fails at the first save.",
        "CKD203/own-saving-code": "",
        "CKD207/newer-library": "If a newer burn may have written it, resume with that release before concluding the file is damaged.",
        "CKD207/fresh-files": "If freshly written files show the same error, the saving code produces it: save with burn's checkpointers instead of a custom writer.",
        "CKD209/upgrade": "Upgrade to a release with PR #5177 (parameter ids persisted across resumes) so resumes stop orphaning optimizer state; the dead state already saved only goes away when you resume once with a fresh optimizer.",
        "CKD210/recorder-era": "Resume recorder-era runs with the burn version that wrote them (0.21 or earlier); to move to 0.22, re-save the weights as burnpack with that version and start a new run (the optimizer state does not carry over).",
    }
)
"""burn's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class BurnLayout(Layout):
    name = "burn"
    fix_wordings = _FIX_WORDINGS
    vocabulary = (
        "burn",
        "with_default_checkpointers",
        "FileCheckpointer",
        "Cargo.lock",
        "KeepLastNCheckpoints",
        "Module::load_file",
        "LearnerBuilder",
        "SupervisedTraining",
        ".checkpoint(",
        "GradientClippingConfig",
        "burnpack",
        "recorder",
        "PR #5177",
        ".bpk",
        "Metadata has a different",
    )
    default_unit = Unit.EPOCH
    resume_needs = frozenset({Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER})
    legacy_formats = MappingProxyType(
        {
            fmt.value: f"written by a recorder of burn 0.21 or earlier ({extension}); burn 0.22 and later read only burnpack (.bpk)"
            for fmt, extension in (
                (Format.MSGPACK, ".mpk"),
                (Format.MSGPACK_GZ, ".mpk.gz"),
                (Format.JSON, ".json"),
                (Format.JSON_GZ, ".json.gz"),
                (Format.BINCODE, ".bin"),
                (Format.BINCODE_GZ, ".bin.gz"),
            )
        }
    )
    content = _CONTENT

    claimable = re.compile(rf"\.(?:{EXTENSIONS})\Z")

    def claim(self, name: str) -> Claim | None:
        match = _KNOWN.match(name)
        if match is not None:
            roles, prefix = _ROLES[match[1]]
            return Claim(roles, int(match[2]), prefix)
        hints = role_hints()
        hinted = _NAME.match(name) if hints else None  # a project's own checkpointer
        if hinted is not None and hinted["prefix"].lower() in hints:
            return Claim((hints[hinted["prefix"].lower()],), int(hinted["index"]), hinted["prefix"])
        return None

    def stray(self, name: str) -> Claim | None:
        match = _NAME.match(name)
        if match is None or match["prefix"] in PREFIXES or match["prefix"].lower() in role_hints():
            return None
        return Claim(guess_roles(match["prefix"]), int(match["index"]), match["prefix"])

    def required(self, claims: Sequence[Claim]) -> tuple[Role, ...]:
        if any(claim.prefix in REINFORCEMENT for claim in claims):
            return (Role.MODEL, Role.OPTIMIZER)
        return (Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER)

    def file_name(self, role: Role, index: int) -> str | None:
        prefix = next((name for name, known in SUPERVISED.items() if known is role), None)
        return f"{prefix}-{index}.bpk" if prefix else None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        return f"pass `.checkpoint({checkpoint.index})` to burn's `SupervisedTraining` (or `LearnerBuilder`)"

    def resume_path(self, run: Run, checkpoint: Checkpoint) -> str:
        """burn resumes from an index (``.checkpoint(N)``) in the artifact folder its learner is
        built on, the folder above ``checkpoint/``; files moved out of a ``checkpoint/`` folder
        are no learner's: their model file, for loading the weights by hand."""
        if os.path.basename(os.path.abspath(run.path)) == _FOLDER:  # abspath: the run may be "."
            return parent(run.path)
        return super().resume_path(run, checkpoint)

    def metric_values(self, run: Run, root: str, metric: str, read: Callable[[str], bytes | None]) -> dict[int, float]:
        """burn's learner logs each validation metric beside its ``checkpoint/`` folder:
        ``<artifact>/valid/epoch-N/<Metric>.log``."""
        values: dict[int, float] = {}
        for checkpoint in run.checkpoints:
            value = _logged(read(os.path.join(os.path.dirname(root), "valid", f"epoch-{checkpoint.index}", f"{metric}.log")))
            if value is not None:
                values[checkpoint.index] = value
        return values


def _logged(data: bytes | None) -> float | None:
    """A burn metric log's value: its last line ``"<v>,final"``, else the mean of its lines
    (``"<v>,<count>"``), weighted by their counts."""
    try:
        lines = [line.strip() for line in data.decode("utf-8").splitlines() if line.strip()] if data is not None else []
    except UnicodeDecodeError:
        return None
    try:
        if lines and lines[-1].endswith(",final"):
            return float(lines[-1].split(",")[0])
        total = weight = 0.0
        for line in lines:
            value, _, count = line.partition(",")
            n = float(count) if count else 1.0
            total += float(value) * n
            weight += n
    except ValueError:
        return None
    return total / weight if weight else None
