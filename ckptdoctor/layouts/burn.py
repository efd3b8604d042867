"""burn (tracel-ai/burn): ``checkpoint/{model,optim,scheduler}-<epoch>.<ext>``.

burn's ``FileCheckpointer`` writes one file per checkpointer name and epoch (1-based), in the
artifact directory's ``checkpoint/`` folder; the burnpack era writes ``.bpk``, the recorder era
``.mpk`` (``CompactRecorder``), ``.bin``, ``.json`` and their gzip forms. Resuming needs all
three files of an epoch; the RL learner writes ``policy-`` and ``learning-agent-`` instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from types import MappingProxyType

from ckptdoctor.layouts.base import Layout
from ckptdoctor.layouts.context import role_hints
from ckptdoctor.layouts.naming import Claim, guess_roles
from ckptdoctor.model import Checkpoint, Role, Run, Unit
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
_ROLES = {prefix: (role,) for prefix, role in PREFIXES.items()}
"""Each prefix's roles as one tuple that every claim shares (checks group files by it)."""
_FOLDER = "checkpoint"
"""The folder of the artifact directory ``FileCheckpointer`` saves into."""


class BurnLayout(Layout):
    name = "burn"
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
            return Claim(_ROLES[match[1]], int(match[2]), match[1])
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
