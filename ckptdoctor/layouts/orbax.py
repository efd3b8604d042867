"""Orbax ``CheckpointManager`` (JAX): one folder per step (``<step>`` or ``<prefix>_<step>``).

A finalized step folder holds ``_CHECKPOINT_METADATA`` and one folder per item; since Orbax
0.12.3 (and always on GCS) also ``commit_success.txt``. On local disks a save is written under
``<name>.orbax-checkpoint-tmp[-N]`` and renamed when done, so such folders are abandoned saves.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ckptdoctor.discover import Listing
from ckptdoctor.layouts._base import Claim, FolderLayout
from ckptdoctor.model import CheckpointFile, Entry, Role, Unit
from ckptdoctor.readers.sniff import Format

_STEP = re.compile(r"^(?:(.+)_)?(\d+)$")
_TEMPORARY = re.compile(r"^.*?_*?(\d+)\.orbax-checkpoint-tmp(?:-\d+)?$")
METADATA = "_CHECKPOINT_METADATA"
COMMIT = "commit_success.txt"


class OrbaxLayout(FolderLayout):
    name = "orbax"
    default_unit = Unit.STEP
    content = frozenset({Format.JSON, Format.UNKNOWN, Format.TEXT})
    resume_needs = frozenset({Role.METADATA})

    def claim(self, name: str) -> Claim | None:
        match = _STEP.match(name)
        return Claim((), int(match[2]), match[1] or "", Unit.STEP) if match else None

    def claim_folder(self, entry: Entry, inside: Listing | None) -> Claim | None:
        """Step folders are plain numbers: only those holding Orbax's markers are Orbax's."""
        if inside is None or not any(e.name in (METADATA, COMMIT) for e in inside.entries):
            return None
        return self.claim(entry.name)

    def staging(self, name: str) -> Claim | None:
        match = _TEMPORARY.match(name)
        return Claim((Role.TEMP,), int(match[1]), "orbax-checkpoint-tmp") if match else None

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        return {METADATA: (Role.METADATA,), COMMIT: (Role.POINTER,)}.get(name)

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        # commit_success.txt exists from Orbax 0.12.3 on: required once any step of the run has it
        seen = {role for files in saved for file in files for role in file.roles}
        return (Role.METADATA, Role.POINTER) if Role.POINTER in seen else (Role.METADATA,)

    def file_name(self, role: Role, index: int) -> str | None:
        return {Role.METADATA: METADATA, Role.POINTER: COMMIT}.get(role)
