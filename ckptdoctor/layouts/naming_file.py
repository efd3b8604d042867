"""A text file beside the checkpoints that names the newest one (mmengine's and Detectron2's
``last_checkpoint``), and the layout whose pointer hooks answer from it.
"""

from __future__ import annotations

import os
from types import MappingProxyType
from typing import NamedTuple

from ckptdoctor.layouts.base import Layout
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.layouts.pointers import Pointer, elsewhere, followed, unreadable_pointer
from ckptdoctor.model import Checkpoint, CheckpointFile, PointerWrite, Role, Run
from ckptdoctor.readers import pointer as pointer_file
from ckptdoctor.readers.named import Named, NamedFiles


class NamingFile(NamedTuple):
    """A text file beside the checkpoints that names the newest one's file, rewritten after
    every save and read by the framework's resume (``last_checkpoint``): mmengine writes the
    file's full path (``CheckpointHook._save_checkpoint_with_step``), Detectron2 through fvcore
    its name alone (``Checkpointer.tag_last_checkpoint``), which fvcore joins with its folder
    (``get_checkpoint_file``). The layouts that keep one answer their pointer hooks from it."""

    name: str
    full_path: bool
    """The file holds the checkpoint file's absolute path, not its name."""

    @property
    def named_files(self) -> NamedFiles:
        return MappingProxyType({self.name: Named(pointer_file.read)})

    def pointer(self, name: str) -> Claim | None:
        return Claim((Role.POINTER,), 0, self.name) if name == self.name else None

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        """What the file names: the checkpoint holding that file in the run's folder, else
        none that can exist (another folder, a name no checkpoint has, a relative path the
        framework would resolve from wherever the job runs)."""
        if not run.checkpoints:
            return ()
        source = next((f for f in run.loose_files if f.entry.name == self.name), None)
        if source is None:
            return (Pointer(None, "", None, self.name),)
        text = source.report.fact(pointer_file.POINTS_TO)
        if text is None:
            return (unreadable_pointer(source, self.name),)
        folder = os.path.dirname(source.entry.os_path)
        path = os.path.join(folder, text)
        if self.full_path and not os.path.isabs(text):
            return (Pointer(source, text, None, self.name),)
        if os.path.realpath(os.path.dirname(path)) != os.path.realpath(folder):
            return (Pointer(source, text, None, self.name, outside=elsewhere(source, text)),)
        name = os.path.basename(path)
        number = next((c.index for c in run.checkpoints if _named(c, name)), None)
        return (Pointer(source, text, number, self.name, outside=elsewhere(source, text) if number is None else None),)

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        """The file, written as the framework writes it, naming ``checkpoint``'s file (the
        best of its whole saves, named first), or its folder where it is one."""
        if source is not None and source.entry.name != self.name:
            return None
        file = checkpoint.folder or next((f.entry for f in checkpoint.files if Role.MODEL in f.roles and Role.TEMP not in f.roles), None)
        if file is None:
            return None
        return PointerWrite(self.name, os.path.abspath(file.os_path) if self.full_path else file.name)


def _named(checkpoint: Checkpoint, name: str) -> bool:
    """Whether ``name`` is the checkpoint's folder, or one of its files (not a staging one)."""
    if checkpoint.folder is not None:
        return checkpoint.folder.name == name
    return any(f.entry.name == name and Role.TEMP not in f.roles for f in checkpoint.files)


class NamedByFile(Layout):
    """A layout whose pointer hooks all answer from one ``NamingFile`` (``naming_file``):
    mmengine's and Detectron2's ``last_checkpoint``, written each in its framework's form."""

    naming_file: NamingFile

    def pointer(self, name: str) -> Claim | None:
        return self.naming_file.pointer(name)

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        return self.naming_file.pointers(run)

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        return followed(run, self.pointers(run))

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        return self.naming_file.repoint(source, checkpoint)
