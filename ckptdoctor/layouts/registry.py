"""Recognise which framework wrote a folder, and turn its files into a run.

Each layout module knows one framework's names; when two claim the same names (burn's and
a hand-made loop's ``model-3.bin``), the content of the files decides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.accelerate import AccelerateLayout
from ckptdoctor.layouts.base import FolderLayout, Layout, claim_all, led_outside
from ckptdoctor.layouts.burn import BurnLayout
from ckptdoctor.layouts.composer import ComposerLayout, ShardedComposer
from ckptdoctor.layouts.content import probe_batch
from ckptdoctor.layouts.dcp import DcpLayout
from ckptdoctor.layouts.deepspeed import DeepSpeedLayout
from ckptdoctor.layouts.detectron2 import Detectron2Layout
from ckptdoctor.layouts.fairseq import FairseqLayout
from ckptdoctor.layouts.grouping import group
from ckptdoctor.layouts.hf_trainer import HfTrainerLayout
from ckptdoctor.layouts.keras import KerasLayout
from ckptdoctor.layouts.lightning import LightningLayout
from ckptdoctor.layouts.litgpt import LitGptLayout
from ckptdoctor.layouts.megatron import MegatronLayout
from ckptdoctor.layouts.mmengine import MmengineLayout
from ckptdoctor.layouts.naming import Claim, file_names, temp_base
from ckptdoctor.layouts.nanogpt import NanoGptLayout
from ckptdoctor.layouts.nemo import NemoLayout
from ckptdoctor.layouts.orbax import OrbaxLayout
from ckptdoctor.layouts.tensorflow import TensorFlowLayout
from ckptdoctor.layouts.timm import TimmLayout
from ckptdoctor.layouts.torch import TorchLayout
from ckptdoctor.layouts.torchtune import TorchtuneLayout
from ckptdoctor.layouts.ultralytics import UltralyticsLayout
from ckptdoctor.model import Entry, FileReport, Role, Run
from ckptdoctor.places import home_of, run_root
from ckptdoctor.readers.files import Harmless, expected_formats
from ckptdoctor.readers.named import Named, NamedFiles
from ckptdoctor.readers.sniff import Format

__all__ = ["FIX_WORDINGS", "HARMLESS", "LAYOUTS", "NAMED_FILES", "PACKAGES", "Layout", "advised", "find_run", "layout_named"]

_BURN, _TORCH, _KERAS = BurnLayout(), TorchLayout(), KerasLayout()
LAYOUTS: tuple[Layout, ...] = (
    HfTrainerLayout(),
    AccelerateLayout(),
    DeepSpeedLayout(),
    MegatronLayout(),
    ComposerLayout(),  # before its sharded saves' builder: `layout_named` gives the one that answers for both
    ShardedComposer(),  # before dcp: Composer's `ep{E}-ba{B}/` DCP folders beside its latest pointer
    DcpLayout(),
    OrbaxLayout(),
    TensorFlowLayout(),
    TorchtuneLayout(),
    LightningLayout(),
    TimmLayout(),
    MmengineLayout(),
    Detectron2Layout(),
    UltralyticsLayout(),
    FairseqLayout(),
    NanoGptLayout(),
    LitGptLayout(),
    NemoLayout(),
    _KERAS,
    _BURN,
    _TORCH,
)
"""In order of preference when content cannot decide."""


def _named_files(layouts: tuple[Layout, ...]) -> NamedFiles:
    """Every layout's ``named_files`` in one table; two frameworks may share a name only if they
    read it alike (HF Trainer under DeepSpeed keeps DeepSpeed's ``latest``)."""
    table: dict[str, Named] = {}
    for layout in layouts:
        for name, named in layout.named_files.items():
            if table.setdefault(name, named) != named:
                raise ValueError(f"{layout.name} reads {name!r} otherwise than another layout does")
    return MappingProxyType(table)


NAMED_FILES = _named_files(LAYOUTS)
"""File name -> how it is read, for every file a framework names: what the pipelines pass to
``readers.probe`` and ``readers.verify``."""
HARMLESS = Harmless(
    frozenset(name for layout in LAYOUTS for name in layout.harmless),
    frozenset(name for layout in LAYOUTS for name in layout.construct_only),
)
"""Every layout's ``harmless`` and ``construct_only`` classes in one table: what the pipelines
hand the readers to judge pickles with, beside ``NAMED_FILES``."""
PACKAGES = frozenset(package for layout in LAYOUTS for package in layout.packages)
"""Every framework's Python packages: a class of theirs a user declares trusted is trusted only
where a pickle rebuilds it (``Trusted.libraries``)."""
FIX_WORDINGS: Mapping[str, Mapping[str, str]] = MappingProxyType(
    dict(sorted({layout.name: layout.fix_wordings for layout in reversed(LAYOUTS) if layout.fix_wordings}.items()))
)
"""Each framework's own words for the rules' fixes (``Layout.fix_wordings``), by layout name, in
the order of the names: what a run's ``fix_keys`` pick from, and what a rule's page lists. Of the
layouts that share a name (Composer's files and its sharded folders), the first that words any
fix answers for all of them."""
_CONTENT_WRITERS = (_BURN, _TORCH, _KERAS)
"""Layouts a file named on its own is given by its content alone: the others are known by names."""


def layout_named(name: str) -> Layout:
    for layout in LAYOUTS:
        if name == layout.name or name in layout.aliases:
            return layout
    return _BY_CONTENT_ONLY


def home(run: Run) -> str:
    """Where ckptdoctor keeps ``run``'s lock, journals and quarantines: beside the run for a
    framework that reads every name in its folder (``places.home_of``)."""
    return home_of(run_root(run), layout_named(run.layout).reads_every_name)


def find_run(
    listing: Listing,
    probe: Callable[[Entry], FileReport],
    subfolder: Callable[[Entry], Listing | None] = lambda entry: None,
) -> Run | None:
    """The run in ``listing``, if any layout recognises its files (or its checkpoint folders),
    with how its framework resumes from its resume point."""
    run = _recognised(listing, probe, subfolder)
    return None if run is None else advised(run)


def advised(run: Run) -> Run:
    """``run`` with the checkpoints its framework can resume from, how it resumes from its
    resume point, and the path to pass."""
    if run.single_file:
        return run
    layout = layout_named(run.layout)
    if (resumable := layout.resumable(run)) is not None:
        # narrowed, never widened: ``verify --resume`` leaves only the index it verified
        run = dataclasses.replace(run, resumable=resumable if run.resumable is None else resumable & run.resumable)
    if (checkpoint := run.resume) is None:
        return run
    how = layout.resume_hint(run, checkpoint)
    if led := led_outside(layout, run):  # the framework's own resume would not load the resume point: said with it
        how = f"{how}; but {led}" if how else led
    return dataclasses.replace(run, resume_how=how, resume_path=layout.resume_path(run, checkpoint))


def _recognised(listing: Listing, probe: Callable[[Entry], FileReport], subfolder: Callable[[Entry], Listing | None]) -> Run | None:
    candidates = [
        (layout, claims) for layout in LAYOUTS if (claims := claim_all(layout, listing, subfolder)) and layout.recognises(listing.entries)
    ]
    folder_layouts = [candidate for candidate in candidates if candidate[0].folders]
    if folder_layouts:
        # checkpoint folders are the strongest signature a folder can have; where two frameworks
        # claim the same names (diffusers' accelerate saves in `checkpoint-N`, HF Trainer's name),
        # the files inside decide
        layout, claims = max(folder_layouts, key=lambda candidate: (_signed(candidate, listing, subfolder), len(candidate[1])))
        # the same folders under a layout's own names, which another's engine filled (mmengine's
        # `epoch_3.pth/` of DeepSpeed's files): the run is that layout's
        owner = next(((lay, own) for lay, own in candidates if lay.folder_saves and claims.keys() <= own.keys()), None)
        layout, claims = owner or (layout, claims)
        return layout.build(listing, probe, claims, subfolder)
    own = file_names(listing)
    alone = next((lay for lay in LAYOUTS if isinstance(lay, FolderLayout) and lay.signature(own)), None)
    if alone is not None and not listing.single_file:
        return alone.build_alone(listing, probe, subfolder)
    if not candidates:
        return _lone_file(listing, probe) if listing.single_file else None
    probe = _probed_together(listing, probe, candidates)
    if len(candidates) > 1:
        candidates.sort(key=lambda candidate: -_content_score(candidate, listing, probe))
    layout, claims = candidates[0]
    return layout.build(listing, probe, claims, subfolder)


class _AnyFile(Layout):
    """A file the user named directly whose name follows no convention: judged by content.

    It is reported under the layout whose framework writes that content, if any.
    """

    def __init__(self, writer: Layout | None = None) -> None:
        self.writer = writer
        self.name = writer.name if writer else "unknown"
        self.content = writer.content if writer else frozenset()

    def claim(self, name: str) -> Claim | None:
        return Claim((Role.MODEL,), 0, "")

    def accepts(self, content: Format) -> bool:
        return self.writer is not None and self.writer.accepts(content)


_BY_CONTENT_ONLY = _AnyFile()


def _lone_file(listing: Listing, probe: Callable[[Entry], FileReport]) -> Run | None:
    """A file named on its own whose name follows no layout: the framework that writes its content."""
    (entry,) = listing.entries
    readable = not entry.is_dir and not entry.dangling
    probe = probe_batch([entry] if readable else [], probe)  # read once: here and in grouping
    content = _format(probe(entry)) if readable else None
    writer = next((lay for lay in _CONTENT_WRITERS if content and lay.accepts(content)), None)
    layout = _AnyFile(writer)
    return group(listing, layout, probe, claim_all(layout, listing))


def _signed(candidate: tuple[Layout, dict[str, Claim]], listing: Listing, subfolder: Callable[[Entry], Listing | None]) -> int:
    """How many of the folders a folder layout claims carry its framework's signature inside."""
    layout, claims = candidate
    if not isinstance(layout, FolderLayout):
        return 0
    return sum(1 for e in listing.entries if e.name in claims and layout.signature(file_names(subfolder(e))))


def _content_score(candidate: tuple[Layout, dict[str, Claim]], listing: Listing, probe: Callable[[Entry], FileReport]) -> int:
    """How many of the files a layout claims, or knows as its framework's pointers and copies
    (mmengine's ``best_*.pth`` beside ``epoch_3.pth``), hold content its framework writes."""
    layout, claims = candidate
    entries = [e for e in listing.entries if (e.name in claims or layout.pointer(e.name) is not None) and not e.is_dir and not e.dangling]
    return sum(1 for e in entries if _format(probe(e)) in layout.content)


def _format(report: FileReport) -> Format | None:
    try:
        return Format(report.format)
    except ValueError:
        return None


def _probed_together(
    listing: Listing,
    probe: Callable[[Entry], FileReport],
    candidates: list[tuple[Layout, dict[str, Claim]]],
) -> Callable[[Entry], FileReport]:
    """Probe every file a layout may look at in one batch (in parallel for big runs)."""
    claimed = {name for _, claims in candidates for name in claims}
    batch = [
        entry
        for entry in listing.entries
        if not entry.is_dir
        and not entry.dangling
        and (entry.name in claimed or expected_formats(entry.name) is not None or temp_base(entry.name))
    ]
    return probe_batch(batch, probe)
