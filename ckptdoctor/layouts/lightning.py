"""PyTorch Lightning ``ModelCheckpoint``: ``…/version_N/checkpoints/epoch=E-step=S.ckpt``.

Each ``.ckpt`` is one bundled file (weights, optimizer and scheduler states, loops). Names come
from a template, by default ``{epoch}-{step}`` with the metric names inserted
(``epoch=3-step=1200.ckpt``, ``epoch=2-val_loss=0.12.ckpt``), ``-vN`` when a name repeats;
``last.ckpt`` (or ``last-vN.ckpt``) is a copy or a symlink of the newest save and is what
``ckpt_path="last"`` resumes from.

Under ``DeepSpeedStrategy`` and ``FSDPStrategy(state_dict_type="sharded")`` each ``.ckpt`` is a
folder of the same name (``strategies/deepspeed.py``, ``save_checkpoint``: the engine's
``save_checkpoint(filepath, tag="checkpoint")`` writes ``latest`` (the text ``checkpoint``),
``zero_to_fp32.py``, ``checkpoint/mp_rank_00_model_states.pt`` and one
``checkpoint/{bf16_}zero_pp_rank_<r>_mp_rank_00_optim_states.pt`` per rank, and
``load_checkpoint`` fails without ``latest``; ``strategies/fsdp.py``, ``save_checkpoint``: DCP
files (``.metadata``, ``__<r>_0.distcp``) holding ``{"model", "optimizer_0", …}`` and ``meta.pt``,
the rest of the checkpoint, written last by ``_atomic_save``; ``_is_sharded_checkpoint`` is a
folder with ``meta.pt``: without it ``fit(ckpt_path=)`` takes the folder for a file). Those
folders are the run's checkpoints, indexed like the files; ``last.ckpt`` is then a folder
(a copy) or a symlink to one.

NeMo's ``exp_manager`` saves through a ``ModelCheckpoint`` of its own
(``nemo/utils/callbacks/nemo_model_checkpoint.py``, ``NeMoModelCheckpoint``) named
``<name>--val_loss=0.1234-epoch=3.ckpt``, its copy of the newest one ``…-epoch=3-last.ckpt``
(``CHECKPOINT_NAME_LAST = filename + "-last"``), and marks a save in progress with
``<checkpoint without .ckpt>-unfinished`` (``format_checkpoint_unfinished_marker_path``), removed
once the save finished: a checkpoint beside its marker is unfinished, and NeMo's resume skips and
deletes it (``_filter_out_unfinished_checkpoints``, ``_remove_unfinished_checkpoints``). NeMo
before 1.0 also saved ``<name>--end.ckpt`` at the end of training. ``exp_manager``'s
``resume_if_exists`` (``check_resume``) looks for finished ``*end.ckpt`` first: where there is
one it raises ("training has already completed"), or with ``resume_past_end`` loads nothing and
trains from the start; else it takes the one finished ``*last.ckpt`` (several: it raises), over
any ``resume_from_checkpoint``, which it follows only with ``resume_if_exists=False``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from ckptdoctor.discover import Listing
from ckptdoctor.layouts.base import FolderLayout, Layout, claim_all
from ckptdoctor.layouts.content import OwnObjects
from ckptdoctor.layouts.copies import Copy, loaded_copy
from ckptdoctor.layouts.dcp import DcpLayout
from ckptdoctor.layouts.deepspeed import DeepSpeedLayout
from ckptdoctor.layouts.grouping import group
from ckptdoctor.layouts.naming import Claim
from ckptdoctor.layouts.pointers import Pointer, copy_pointer, followed, pointer_files, symlink_pointers
from ckptdoctor.layouts.torch import TorchLayout
from ckptdoctor.model import (
    RECORDED_PATH,
    TOP_LEVEL_NUMBER,
    Checkpoint,
    CheckpointFile,
    Entry,
    FileReport,
    PointerKind,
    PointerWrite,
    Role,
    Run,
    Unit,
)
from ckptdoctor.readers.files import with_keys
from ckptdoctor.readers.sniff import Format
from ckptdoctor.stores.urls import scheme

_TOKEN = re.compile(r"(?<![A-Za-z0-9])(epoch|step)=([0-9]+)(?![0-9])")
"""``{epoch}`` and ``{step}`` as ``ModelCheckpoint._format_checkpoint_name`` writes them
(``auto_insert_metric_name``: ``epoch=3``), anywhere in the template: text may stand before and
between them (``model-{epoch:02d}-{val_loss:.2f}`` -> ``model-epoch=03-val_loss=0.12.ckpt``,
NeMo's ``megatron_gpt--val_loss=0.1234-epoch=3.ckpt``)."""
_KEYED = re.compile(r"^[\w.]+=")
"""A name that begins with a ``{metric}`` of the template (``epoch=3-step=1200.ckpt``): Lightning's
own spelling, by its name alone; one with text before its first (``checkpoint-epoch=4.ckpt``) a
hand-made loop may write as well, and the content tells (``_VERSION_KEY``)."""
_VERSION_KEY = "pytorch-lightning_version"
"""What ``Trainer.save_checkpoint`` (``_CheckpointConnector.dump_checkpoint``) writes into every
checkpoint, and its ``fit(ckpt_path=...)`` needs."""
_LAST = re.compile(r"^last(?:-v?[0-9]+)?\.ckpt\Z")
LAST_NAME = "last.ckpt"
"""``ModelCheckpoint.CHECKPOINT_NAME_LAST`` with its default ``last``."""
_VERSIONED = re.compile(r"^(.+)-v([0-9]+)(\.ckpt)\Z")
"""``ModelCheckpoint`` saves under ``<name>-v<N>.ckpt`` (N from ``STARTING_VERSION``, 1, up) where
``<name>.ckpt`` is there already (``_get_metric_interpolated_filepath_name``, ``_save_last_checkpoint``:
``enable_version_counter``): a fit started again from scratch into the same folder, or two
callbacks with one ``filename`` there."""
_BARE = re.compile(r"^([0-9]+)(?:-([0-9]+))?(?:-v[0-9]+)?\.ckpt\Z")
"""The default template without metric names (``auto_insert_metric_name=False``): ``{epoch}-{step}``
gives ``3-1200.ckpt``, ``{epoch}`` gives ``3.ckpt``."""
_HPC = re.compile(r"^hpc_ckpt_([0-9]+)\.ckpt\Z")
"""SLURM auto-requeue saves in ``default_root_dir``; ``ckpt_path="hpc"`` (and a requeued job on
SLURM by itself) resumes from the highest number (``checkpoint_connector.py``, ``_hpc_resume_path``)."""
_HPC_PREFIX = "hpc_ckpt"
_NEMO_LAST = re.compile(r"-last(?:-v[0-9]+)?\.ckpt\Z")
_UNFINISHED = "-unfinished"
_NEMO_END = re.compile(r"--end\.ckpt\Z")
"""NeMo before 1.0: ``NeMoModelCheckpoint.on_train_end`` saved ``prefix + "end.ckpt"`` (the prefix ``<name>--``)."""
_ENGINE = "checkpoint"
"""The tag DeepSpeedStrategy saves under inside each ``.ckpt`` folder (``latest`` names it)."""
_META = "meta.pt"
"""FSDPStrategy's ``meta.pt``: everything of the checkpoint but the sharded model and optimizer."""
_DEEPSPEED, _DCP, _TORCH = DeepSpeedLayout(), DcpLayout(), TorchLayout()

BUNDLED = (Role.MODEL, Role.OPTIMIZER, Role.SCHEDULER)
"""What ``Trainer.save_checkpoint`` writes unless ``save_weights_only``; ``verify`` confirms it."""


_OMEGACONF = OwnObjects(
    loader=(
        "Lightning's resume (`trainer.fit(ckpt_path=...)`: `pl_load`, `torch.load` with torch's default `weights_only=True`) "
        "refuses the OmegaConf hyper-parameters `save_hyperparameters()` pickled: pass `weights_only=False` to `trainer.fit` "
        "for a file your own training wrote"
    ),
    as_written=False,
    # `save_hyperparameters()` of a DictConfig (every Hydra-configured run, NeMo's): each container
    # and node rebuilt plain; BaseContainer.__setstate__ and Node.__setstate__ (omegaconf 2.3/2.4)
    # only fill in missing metadata types and update __dict__, the metadata are dataclasses
    classes=frozenset({
        "omegaconf.dictconfig.DictConfig", "omegaconf.listconfig.ListConfig", "omegaconf.base.ContainerMetadata",
        "omegaconf.base.Metadata", "omegaconf.nodes.AnyNode",
    }),
    kept=frozenset({"typing.Any"}),
)  # fmt: skip
"""What Lightning's own save adds to a checkpoint beyond torch's set when the hyper-parameters are
an OmegaConf config, and how its resume loads it (found by a real fit and resume)."""


_FIX_WORDINGS: Mapping[str, str] = MappingProxyType(
    {
        "CKD107/resume-optimizer": "To resume with the optimizer's state next time, pass `save_weights_only=False` to `ModelCheckpoint`.",
        "CKD110/check-folder": "Check that {run} is the `ModelCheckpoint` folder (`lightning_logs/version_N/checkpoints` unless `dirpath=` says otherwise); `ckptdoctor inspect` on a parent folder finds every run below it.",
        "CKD113/point-newest": "Replace a dangling `last.ckpt` symlink with a copy of the newest complete checkpoint, or pass that file as `ckpt_path`; on shared storage prefer a copied `last.ckpt` (`save_last=True`) over a symlink.",
        "CKD114/name-last": 'Pass `trainer.fit(ckpt_path=...)` the file the last line names, not `"last"` or `"hpc"`: `"last"` loads the newest `last*.ckpt` and `"hpc"` the highest `hpc_ckpt_N.ckpt`, which is not whole.',
        "CKD114/move-incomplete": 'Or run `{repair} {this_run}`: it moves an incomplete newest checkpoint aside and writes a broken `last.ckpt` again, as a copy of (or a link to) the complete one, so that `ckpt_path="last"` finds it (`ckptdoctor repair --undo {this_run}` puts both back).',
        "CKD115/decide-which": 'Decide which training to go on with and pass its file as `trainer.fit(ckpt_path=...)`: `ckpt_path="last"` '
        "loads the newest `last*.ckpt` by time (after a restart `last-v1.ckpt`, the later training's), while the highest "
        "{unit} may be the earlier training's. Move the other training's files out of {run}; give each fit its own "
        '`dirpath`, or start a job again with `ckpt_path="last"` so that it goes on instead of starting over.',
        "CKD115/two-checkpointers": "Two `ModelCheckpoint` callbacks with one `filename` and `dirpath` save every checkpoint twice (`-v1`): "
        "give each its own `filename`.",
        "CKD116/name-newest": 'Or pass the file the last line names as `trainer.fit(ckpt_path=...)`, not `"last"`: `"last"` loads the older copy.',
        "CKD501/keep-fewer": "Keep fewer checkpoints: `ModelCheckpoint(save_top_k=n)`.",
    }
)
"""Lightning's own words for the rules' fixes, by slot (``Layout.fix_wordings``); ``""`` where a fix does not apply to its runs."""


class LightningLayout(Layout):
    name = "lightning"
    packages = ("lightning", "pytorch_lightning", "lightning_fabric")
    harmless = frozenset({
        "lightning.fabric.utilities.data.AttributeDict", "lightning_fabric.utilities.data.AttributeDict",
        "pytorch_lightning.utilities.parsing.AttributeDict", "lightning.pytorch.utilities.parsing.AttributeDict",
    })  # fmt: skip
    """The hyper-parameter dicts (``save_hyperparameters``) its checkpoints and Fabric's saves pickle."""
    fix_wordings = _FIX_WORDINGS
    vocabulary = (
        "Lightning",
        "ModelCheckpoint",
        "save_weights_only",
        "save_top_k",
        "ckpt_path",
        "last.ckpt",
        "save_last",
        "lightning_logs",
    )
    builds_on = ("torch",)
    default_unit = Unit.EPOCH
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE})
    whole_saves = True
    own_objects = _OMEGACONF
    index_keys = MappingProxyType({Unit.EPOCH: "epoch", Unit.STEP: "global_step"})
    """What ``_CheckpointConnector.dump_checkpoint`` records of the save in every ``.ckpt``."""
    by_step = False
    """Index by ``step=`` before ``epoch=``: a folder whose every name carries a step (saves
    every N steps: ``epoch=0-step=3.ckpt``, ``epoch=0-step=6.ckpt``) holds one checkpoint per
    step, not one per epoch."""

    claimable = re.compile(r"\.ckpt\Z")

    def claim(self, name: str) -> Claim | None:
        if not name.endswith(".ckpt") or _NEMO_LAST.search(name):
            return None  # not a checkpoint file, or NeMo's copy of the newest save: a pointer
        if (hpc := _HPC.match(name)) is not None:
            return Claim(BUNDLED, int(hpc[1]), _HPC_PREFIX, Unit.SAVE)
        if (bare := _BARE.match(name)) is not None:
            if bare[2] is not None:
                return Claim(BUNDLED, int(bare[2]), "step", Unit.STEP)
            return Claim(BUNDLED, int(bare[1]), "epoch", Unit.EPOCH)
        tokens = dict(_TOKEN.findall(name[: -len(".ckpt")]))
        if "step" in tokens and (self.by_step or "epoch" not in tokens):
            return Claim(BUNDLED, int(tokens["step"]), "step", Unit.STEP)
        if "epoch" in tokens:
            return Claim(BUNDLED, int(tokens["epoch"]), "epoch", Unit.EPOCH)
        return None

    def build(
        self,
        listing: Listing,
        probe: Callable[[Entry], FileReport],
        claims: dict[str, Claim],
        subfolder: Callable[[Entry], Listing | None],
    ) -> Run | None:
        folders = {entry.name for entry in listing.folders if entry.name in claims}
        if folders:
            # DeepSpeedStrategy's or FSDPStrategy's `.ckpt` folders: the run is theirs
            by_step = self.by_step or all((c := _STEPPED.claim(name)) is not None and c.unit is Unit.STEP for name in folders)
            sharded = _SHARDED_BY_STEP if by_step else _SHARDED
            return sharded.build(listing, probe, {name: c for name in folders if (c := sharded.claim(name)) is not None}, subfolder)
        if not _saved_by_lightning(listing, probe, claims):
            # `checkpoint-epoch=4.ckpt` of a hand-made loop: Lightning's resume would not load it
            return _TORCH.build(listing, probe, claim_all(_TORCH, listing), subfolder)
        stepped = {name: claim for name in claims if (claim := _STEPPED.claim(name)) is not None and claim.unit is Unit.STEP}
        if not self.by_step and claims and len(stepped) == len(claims):
            return group(listing, _STEPPED, probe, stepped)
        if not self.by_step and stepped and (recorded := _recorded_steps(listing, probe, claims, stepped)):
            return group(listing, _STEPPED, probe, recorded)
        return group(listing, self, probe, claims)

    def pointer(self, name: str) -> Claim | None:
        if _LAST.match(name) or (_NEMO_LAST.search(name) and self.claim(_NEMO_LAST.sub(".ckpt", name)) is not None):
            return Claim((Role.POINTER,), 0, "last")
        if _NEMO_END.search(name):
            return Claim((Role.POINTER,), 0, "end")  # what stops NeMo's resume, not a save to resume from
        return None

    def whole_copy(self, entry: Entry) -> Copy | None:
        # `save_last=True`: `last.ckpt` saved whole after each save (a symlink with "link");
        # NeMo's `<name>--…-last.ckpt`, copied after each save, what `resume_if_exists` loads
        last = _LAST.match(entry.name) or _NEMO_LAST.search(entry.name)
        return Copy.RESUMED if last and not entry.is_symlink and not entry.is_dir else None

    def unfinished(self, name: str) -> str | None:
        # NeMo's marker of a save in progress: `<checkpoint without .ckpt>-unfinished`
        return name[: -len(_UNFINISHED)] + ".ckpt" if name.endswith(_UNFINISHED) and len(name) > len(_UNFINISHED) else None

    def resaved(self, name: str) -> tuple[str, int] | None:
        versioned = _VERSIONED.match(name)
        return (versioned[1] + versioned[3], int(versioned[2])) if versioned else None

    def pointers(self, run: Run) -> tuple[Pointer, ...]:
        """``last.ckpt`` as a symlink names the checkpoint that ``ckpt_path="last"`` loads, and
        as a whole copy the save it holds; where there is none though the checkpoints record
        one (``ModelCheckpoint``'s ``last_model_path``, which ``verify`` reads), the one that
        is missing: ``ckpt_path="last"`` then trains from the start, with only a warning."""
        named = _STEPPED if run.unit is Unit.STEP else self
        found = list(symlink_pointers(run, named.claim, "symlink target"))
        lasts = [f for f in pointer_files(run) if _LAST.match(f.entry.name)]
        found += [p for f in lasts if self.whole_copy(f.entry) and (p := copy_pointer(run, f, "copy (save_last)"))]
        recorded = _recorded_last(run)
        if not lasts and recorded is not None:
            found.append(Pointer(None, "", None, recorded))
        return tuple(found)

    def repoint(self, source: CheckpointFile | None, checkpoint: Checkpoint) -> PointerWrite | None:
        """What the run used: a relative symlink (``save_last="link"``), or a copy; a copy where
        the run's ``last.ckpt`` is gone (its mode unknown). Never a symlink in place of a copy: in copy mode Lightning's next save of ``last.ckpt`` may copy
        its bytes onto the path (a move across filesystems), through the link, over the
        checkpoint it names."""
        if not checkpoint.files or (source is not None and _NEMO_END.search(source.entry.name)):
            return None
        if source is None:  # gone, though the checkpoints record it: written again as a copy, safe in either mode
            return (
                PointerWrite(LAST_NAME, os.path.basename(checkpoint.files[0].entry.os_path), PointerKind.COPY)
                if checkpoint.folder is None
                else None
            )
        if checkpoint.folder is not None:
            # a `.ckpt` folder: re-pointed only where `last.ckpt` is a symlink (a folder is no file to copy)
            return PointerWrite(source.entry.name, checkpoint.folder.name, PointerKind.SYMLINK) if source.entry.is_symlink else None
        kind = PointerKind.SYMLINK if source.entry.is_symlink else PointerKind.COPY
        return PointerWrite(source.entry.name, os.path.basename(checkpoint.files[0].entry.os_path), kind)

    def auto_resume_pick(self, run: Run) -> Checkpoint | None:
        """What Lightning's own resume loads (``_CheckpointConnector._parse_ckpt_path``): with
        ``ckpt_path="hpc"`` (a requeued SLURM job by itself) the highest ``hpc_ckpt_N.ckpt``,
        whatever is in it; with ``ckpt_path="last"`` the newest by modification time of the
        ``last*.ckpt`` there (``ModelCheckpoint._find_last_checkpoints``; a dangling link is not
        there, and where none is, Lightning warns and trains from the start): the checkpoint a
        link names, or a copied file as it is (a checkpoint of its own, outside the run's). NeMo's
        ``exp_manager`` (``resume_if_exists``) takes the one finished ``*last.ckpt``, and nothing
        where a finished ``*end.ckpt`` is there or several ``*last.ckpt`` are."""
        hpc = all(f.prefix == _HPC_PREFIX for c in run.checkpoints for f in c.files)
        if run.checkpoints and hpc:
            return run.checkpoints[-1]
        nemo = _nemo_resume(run)
        if nemo is not None:
            ends, lasts = nemo
            return self._loaded(run, lasts[0]) if not ends and len(lasts) == 1 else None
        lasts = [f for f in pointer_files(run) if _LAST.match(f.entry.name) and not f.entry.dangling]
        last = max(lasts, key=lambda f: f.entry.mtime, default=None)
        if last is None or (last.entry.is_dir and len(lasts) > 1):
            return None  # a folder's time is not listed: which Lightning takes is not known
        return self._loaded(run, last)

    def _loaded(self, run: Run, last: CheckpointFile) -> Checkpoint | None:
        """What a resume that loads the pointer file ``last`` loads: the checkpoint a link names,
        a copy as it is (``loaded_copy``)."""
        if last.entry.dangling:
            return None  # nothing to load: CKD113 says so
        if last.entry.is_symlink:
            return followed(run, [p for p in self.pointers(run) if p.source is last])
        return loaded_copy(run, last)

    def flat_optimizer(self, checkpoint: Checkpoint) -> bool:
        """A strategy's checkpoint folder holds the engine's files: DeepSpeed's ZeRO partitions
        or FSDP's shards, never one state tensor per parameter."""
        return checkpoint.folder is not None

    def resume_hint(self, run: Run, checkpoint: Checkpoint) -> str:
        path = self.resume_path(run, checkpoint)
        if run.weights_only:
            # fit(ckpt_path=...) restores the optimizer and raises KeyError on a weights-only checkpoint
            return (
                f'load the weights with `YourModel.load_from_checkpoint("{path}")` and start a new `trainer.fit(model)`; '
                "`ckpt_path=` fails on a checkpoint without optimizer state"
            )
        if scheme(path) is not None:
            # _find_last_checkpoints lists the bucket, drops the scheme and looks on the local disk
            return (
                f'pass `ckpt_path="{path}"` to `trainer.fit()`, not `ckpt_path="last"`: in a bucket Lightning lists '
                "`last.ckpt` without its scheme, finds nothing and trains from the start (Lightning#18261)"
            )
        nemo = _nemo_resume(run)
        if nemo is not None:
            return f'set `exp_manager.resume_from_checkpoint="{path}"` with `resume_if_exists=False` ({_nemo_instead(*nemo)}), or pass `ckpt_path="{path}"` to `trainer.fit()`'
        return f'pass `ckpt_path="{path}"` to `trainer.fit()`'


def _recorded_last(run: Run) -> str | None:
    """The ``last*.ckpt`` the newest checkpoint records as ``ModelCheckpoint``'s
    ``last_model_path`` (where ``save_last`` keeps one; '' without), once ``verify`` read it."""
    for checkpoint in reversed(run.checkpoints):
        for file in checkpoint.files:
            recorded = file.report.fact(f"{RECORDED_PATH}last_model_path")
            if recorded is not None:
                name = recorded.replace("\\", "/").rsplit("/", 1)[-1]
                return name if _LAST.match(name) else None
    return None


def _nemo_resume(run: Run) -> tuple[list[CheckpointFile], list[CheckpointFile]] | None:
    """What NeMo's ``exp_manager`` (``check_resume``, ``resume_if_exists``) looks for in a run it
    saved (one with NeMo's ``-last`` copy or ``--end`` save): the finished ``*end.ckpt`` and
    ``*last.ckpt`` (``_filter_out_unfinished_checkpoints``: none beside its ``-unfinished``
    marker, which lies among the run's other files). None for any other run."""
    if not any(_NEMO_LAST.search(f.entry.name) or _NEMO_END.search(f.entry.name) for f in run.loose_files):
        return None
    markers = {entry.name for entry in run.other_files if entry.name.endswith(_UNFINISHED)}
    finished = [f for f in run.loose_files if f.entry.name.removesuffix(".ckpt") + _UNFINISHED not in markers]
    return [f for f in finished if f.entry.name.endswith("end.ckpt")], [f for f in finished if f.entry.name.endswith("last.ckpt")]


def _nemo_instead(ends: list[CheckpointFile], lasts: list[CheckpointFile]) -> str:
    """What ``resume_if_exists=True`` does instead of loading the checkpoint named."""
    if ends:
        return f"with it, {ends[0].name} stops the resume: exp_manager raises that training finished, or with `resume_past_end` starts from scratch"
    if len(lasts) == 1:
        return f"with it, exp_manager loads {lasts[0].name} instead"
    if lasts:
        return f"with it, exp_manager finds {len(lasts)} `*last.ckpt` and raises"
    return "with it, exp_manager finds no `*last.ckpt` and raises"


def _saved_by_lightning(listing: Listing, probe: Callable[[Entry], FileReport], claims: dict[str, Claim]) -> bool:
    """Whether Lightning saved the claimed files: where every name has text before its first
    ``key=`` (``model-epoch=03-val_loss=0.12.ckpt``), the first file whose top-level keys can be
    read says, by ``_VERSION_KEY``; where none can, or a name spells Lightning's own template, the
    names decide."""
    if any(_KEYED.match(name) or _BARE.match(name) or _HPC.match(name) for name in claims):
        return True
    entries = {entry.name: entry for entry in listing.entries}
    for name in sorted(claims):
        entry = entries[name]
        report = None if entry.is_dir or entry.dangling else with_keys(entry, probe(entry))
        if report is not None and report.keys_read and report.keys:
            return _VERSION_KEY in report.keys
    return True


def _recorded_steps(
    listing: Listing, probe: Callable[[Entry], FileReport], claims: dict[str, Claim], stepped: dict[str, Claim]
) -> dict[str, Claim] | None:
    """Every claim indexed by step where names mix templates (a second ModelCheckpoint's
    ``epoch=0.ckpt`` beside ``epoch=0-step=4.ckpt``): a name without a step takes the
    ``global_step`` its file records. Each file is a whole checkpoint, so two saves of one epoch
    must not merge into one. A file whose step cannot be read (cut, or too big to skim) stands
    beside the run; None where that is most of them: then the run goes by epoch."""
    entries = {entry.name: entry for entry in listing.entries}
    recorded = dict(stepped)
    unread = 0
    for name, claim in claims.items():
        if name in recorded:
            continue
        step = with_keys(entries[name], probe(entries[name])).fact(f"{TOP_LEVEL_NUMBER}global_step")
        if step is None or not step.isdigit():
            unread += 1  # cut, or too big to skim: it stands beside the run (CKD111), read on its own
            continue
        recorded[name] = Claim(claim.roles, int(step), "step", Unit.STEP)
    # most names say no step and their files do not either: the run goes by epoch after all
    return recorded if unread * 2 <= len(claims) else None


class _SteppedLightning(LightningLayout):
    by_step = True

    def stray(self, name: str) -> Claim | None:
        """A name of another template whose step could not be read, beside a run indexed by step."""
        claim = LIGHTNING.claim(name)
        return claim._replace(prefix="epoch=") if claim is not None and claim.unit is Unit.EPOCH else None


LIGHTNING = LightningLayout()
_STEPPED = _SteppedLightning()


class _ShardedLightning(FolderLayout):
    """DeepSpeedStrategy's and FSDPStrategy's ``.ckpt`` folders, built into the lightning run
    (``LightningLayout.build`` hands them here; never listed on its own): the engine's files
    are judged as DeepSpeed's, the DCP files as DCP's."""

    name = LightningLayout.name
    builds_on = LightningLayout.builds_on
    default_unit = Unit.EPOCH
    content = frozenset({Format.TORCH_ZIP, Format.TORCH_LEGACY, Format.PICKLE, Format.TEXT, Format.DISTCP})
    # the engine's own objects, as DeepSpeed's runs have them: `load_checkpoint` of the strategy
    # hands the folder to the engine's; not its loader's other globals, which an FSDP folder's
    # DCP files do not go through
    own_objects = dataclasses.replace(_DEEPSPEED.own_objects, unrestricted=False)

    def __init__(self, by_step: bool) -> None:
        self.naming = _STEPPED if by_step else LIGHTNING

    def claim(self, name: str) -> Claim | None:
        return self.naming.claim(name)

    def pointer(self, name: str) -> Claim | None:
        return self.naming.pointer(name)

    def unfinished(self, name: str) -> str | None:
        return self.naming.unfinished(name)

    def resaved(self, name: str) -> tuple[str, int] | None:
        return self.naming.resaved(name)

    def nested(self, name: str) -> bool:
        return name == _ENGINE

    def role_in(self, relative: str) -> tuple[Role, ...] | None:
        folder, _, name = relative.rpartition("/")
        if folder:
            return _DEEPSPEED.role_of(name) if folder == _ENGINE else None
        if name == "latest":
            return (Role.METADATA,)  # the engine's tag: DeepSpeed loads nothing without it
        if name == _META:
            return (Role.TRAINER_STATE,)
        return _DCP.role_of(name)

    def role_of(self, name: str) -> tuple[Role, ...] | None:
        return self.role_in(name)

    def required_of(self, saved: Sequence[Sequence[CheckpointFile]]) -> tuple[Role, ...]:
        """The model and what says where it is (``latest``, ``.metadata``); the engine's optimizer
        partitions where the run wrote any (without ZeRO the model states hold it); FSDP's
        ``meta.pt`` where the run is FSDP's (the DCP files)."""
        seen = {role for files in saved for file in files for role in file.roles}
        sharded = any(file.entry.name.endswith(".distcp") for files in saved for file in files)
        wanted = {Role.MODEL, Role.METADATA, *(seen & {Role.OPTIMIZER}), *((Role.TRAINER_STATE,) if sharded else ())}
        return tuple(role for role in Role if role in wanted)

    def absent(self, files: Sequence[CheckpointFile], siblings: Sequence[Sequence[CheckpointFile]]) -> tuple[str, ...]:
        # an engine rank's partition the other saves have; a data file `.metadata` names
        return tuple(sorted({*_DEEPSPEED.absent(files, siblings), *_DCP.absent(files, siblings)}))

    def measured(self, files: list[CheckpointFile]) -> list[CheckpointFile]:
        return _DCP.measured(files)


_SHARDED = _ShardedLightning(by_step=False)
_SHARDED_BY_STEP = _ShardedLightning(by_step=True)
