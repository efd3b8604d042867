"""The classes a layout subclasses: ``Layout`` (a framework of flat files) and ``FolderLayout``
(a checkpoint is a folder), each with its default ``build``; and what is asked of a whole layout
(``claim_all``, ``led_outside``, ``behind_pointer``).

The hooks themselves, with their defaults, are declared in ``hooks`` (``LayoutHooks``) and
``folders`` (``FolderHooks``); how claims become a run in ``grouping`` and ``folders``, a
checkpoint's verdict in ``judging``, pointers in ``pointers``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.folders import FolderHooks, Saved, assemble
from ckptdoctor.layouts.grouping import claim_names, group
from ckptdoctor.layouts.hooks import LayoutHooks
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.layouts.pointers import Pointer
from ckptdoctor.model import Checkpoint, Entry, FileReport, Run, Status, Unit


class Layout(LayoutHooks):
    """One framework's knowledge (``LayoutHooks``: every hook, its default, and who overrides it),
    with the run built from the files it claims grouped by index (``grouping.group``)."""

    def build(
        self,
        listing: Listing,
        probe: Callable[[Entry], FileReport],
        claims: dict[str, Claim],
        subfolder: Callable[[Entry], Listing | None],
    ) -> Run | None:
        """The run this layout sees in ``listing``."""
        return group(listing, self, probe, claims)


class FolderLayout(FolderHooks, Layout):
    """A framework that saves each checkpoint as a folder of files (``FolderHooks``: the hooks it
    adds), its run assembled from the folders ``claim_folders`` finds (``folders.assemble``)."""

    def _contents(self, folder: Listing | None, subfolder: Callable[[Entry], Listing | None]) -> list[tuple[str, Entry]]:
        """A checkpoint folder's entries, with those of its nested folders (at any depth ``nested``
        allows), by relative name."""
        found: list[tuple[str, Entry]] = []
        pending = [("", folder)]
        while pending:
            prefix, listing = pending.pop(0)
            for item in listing.entries if listing else ():
                relative = prefix + item.name
                inner = subfolder(item) if item.is_dir and self.nested(relative) else None
                if inner is None:
                    found.append((relative, item))
                else:
                    pending.append((f"{relative}/", inner))
        return found

    def build(
        self,
        listing: Listing,
        probe: Callable[[Entry], FileReport],
        claims: dict[str, Claim],
        subfolder: Callable[[Entry], Listing | None],
    ) -> Run | None:
        slots: list[Saved | Entry] = []
        for entry in listing.entries:
            if entry.name in claims:
                slots.append(Saved(claims[entry.name], entry, self._contents(subfolder(entry), subfolder)))
            else:
                slots.extend(self.beside(entry, subfolder))
        return assemble(self, listing, probe, slots)

    def build_alone(
        self, listing: Listing, probe: Callable[[Entry], FileReport], subfolder: Callable[[Entry], Listing | None]
    ) -> Run | None:
        """``listing`` is itself one checkpoint folder of this framework (``ckptdoctor inspect
        out/step_500``; a ``save_state("my_checkpoint")``): a run of that one checkpoint, indexed by
        the number in the folder's name. A name without a number is one save of its own: index 0,
        counted in saves (nothing says what it would count). None where what the folder holds
        shows it is not this framework's after all (nanoGPT's ``ckpt.pt`` with another's keys)."""
        name = os.path.basename(os.path.normpath(listing.os_path))
        claim = self._numbered(name) or Claim((), 0, name, Unit.SAVE)
        return assemble(self, listing, probe, [Saved(claim, None, self._contents(listing, subfolder))])


def claim_all(
    layout: Layout,
    listing: Listing,
    subfolder: Callable[[Entry], Listing | None] = lambda entry: None,
) -> dict[str, Claim]:
    """What ``layout`` claims in ``listing``: checkpoint folders for a folder layout, else names."""
    if isinstance(layout, FolderLayout):
        return layout.claim_folders([(entry, subfolder(entry)) for entry in listing.folders])
    return claim_names(layout, listing)


def led_outside(layout: Layout, run: Run) -> str:
    """What to say where one of ``run``'s pointers leads out of it (``Pointer.outside``): the
    framework's own resume through it loads a file no scan of the run judged, whatever the
    resume point is; '' where none does."""
    for pointer in layout.pointers(run):
        if pointer.outside is not None and pointer.source is not None:
            return (
                f"{pointer.source.name} points outside this run's checkpoints, at {pointer.outside}: {layout.name}'s own resume through it "
                "loads that, which ckptdoctor did not check as one of them"
            )
    return ""


def behind_pointer(layout: Layout, run: Run) -> tuple[Checkpoint, Pointer | None] | None:
    """Where the framework's own resume (``auto_resume_pick``) would load a complete checkpoint
    older than the resume point: that checkpoint, with the pointer (or whole copy) it follows
    there, if one names it. None where the pick is the resume point, broken, or none."""
    pick, resume = layout.auto_resume_pick(run), run.resume
    if pick is None or resume is None or pick.status is not Status.COMPLETE or pick.index >= resume.index:
        return None
    return pick, next((p for p in layout.pointers(run) if p.source is not None and p.number == pick.index), None)
