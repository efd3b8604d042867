"""Framework runs for the tests: each written by the framework's own saving code (a tiny model on
the CPU); for the frameworks that cannot be installed here (docs/framework-sources.md), by code
that saves as their source does, naming it; for DeepSpeed's ZeRO folders, by hand under their
exact names with real ``torch.save`` files.

The runs several suites share are session fixtures in ``conftest.py``, built once per test run and
never changed: a test that breaks one works on its own copy (:func:`copy_run`). The builders stay
callable for what a test must do itself with the framework (resume, train on, load).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest


def copy_run(source: Path, into: Path) -> Path:
    """A copy of the shared run ``source`` at ``into`` (symlinks kept as links), for a test to break."""
    shutil.copytree(source, into, symlinks=True)
    return into


# --- HF Trainer ---------------------------------------------------------------------------------


def hf_trainer(
    output: Path,
    max_steps: int,
    callbacks: Sequence[Any] = (),
    *,
    width: int = 16,
    vocab: int = 64,
    samples: int = 32,
    save_steps: int = 2,
    evaluate: bool = False,
    **arguments: Any,
) -> Any:
    """A real ``transformers.Trainer`` of a one-layer GPT-2 (``width`` wide) on random tokens,
    saving every ``save_steps`` steps into ``output``; ``arguments`` go to ``TrainingArguments``."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=width, vocab_size=vocab, n_positions=32))

    class Tokens(torch.utils.data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return samples

        def __getitem__(self, index: int) -> dict[str, object]:
            ids = torch.randint(0, vocab, (16,))
            return {"input_ids": ids, "labels": ids}

    args = transformers.TrainingArguments(
        output_dir=str(output),
        max_steps=max_steps,
        save_steps=save_steps,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        **arguments,
    )
    return transformers.Trainer(
        model=model,
        args=args,
        train_dataset=Tokens(),
        eval_dataset=Tokens() if evaluate else None,
        callbacks=list(callbacks),
    )


# --- Lightning ----------------------------------------------------------------------------------


def tiny_module(inputs: int = 4, outputs: int = 2, optimizer: str = "AdamW", scheduler: bool = True) -> Any:
    """A LightningModule of one linear layer that logs ``train_loss`` and keeps its
    hyperparameters (as most modules do: ``hyper_parameters`` in every checkpoint)."""
    torch = pytest.importorskip("torch")
    lightning = pytest.importorskip("lightning")

    class Tiny(lightning.LightningModule):  # type: ignore[misc]
        def __init__(self, inputs: int, outputs: int, lr: float = 1e-3) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(inputs, outputs)

        def training_step(self, batch: Any, index: int) -> Any:
            loss = self.layer(batch).pow(2).mean()
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            made = getattr(torch.optim, optimizer)(self.parameters(), lr=self.hparams.lr)
            if not scheduler:
                return made
            return {"optimizer": made, "lr_scheduler": torch.optim.lr_scheduler.StepLR(made, 1)}

    return Tiny(inputs, outputs)


def lightning_fit(
    root: Path,
    epochs: int,
    ckpt_path: str | None = None,
    *,
    module: Any = None,
    callbacks: Sequence[Any] = (),
    logger: Any = False,
    samples: int = 16,
    **checkpointing: Any,
) -> Any:
    """A real ``Trainer.fit`` of ``module`` (:func:`tiny_module` unless given; batches of 4, so 4
    steps an epoch with the default 16 samples), its ``ModelCheckpoint`` saving into
    ``root/checkpoints`` unless ``checkpointing`` says otherwise; returns the trainer."""
    torch = pytest.importorskip("torch")
    lightning = pytest.importorskip("lightning")
    from lightning.pytorch.callbacks import ModelCheckpoint

    torch.manual_seed(0)
    module = module if module is not None else tiny_module()
    trainer = lightning.Trainer(
        default_root_dir=root,
        max_epochs=epochs,
        callbacks=[ModelCheckpoint(**{"dirpath": root / "checkpoints", **checkpointing}), *callbacks],
        logger=logger,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    inputs = module.layer.in_features
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, torch.utils.data.DataLoader(torch.randn(samples, inputs), batch_size=4), ckpt_path=ckpt_path)
    return trainer


# --- accelerate ---------------------------------------------------------------------------------


def accelerate_model() -> tuple[Any, Any, Any, Any]:
    """accelerate, and a linear model with AdamW and a StepLR scheduler (seeded)."""
    torch = pytest.importorskip("torch")
    accelerate = pytest.importorskip("accelerate")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    return accelerate, model, optimizer, scheduler


def accelerator_for(project: Path, total_limit: int = 3) -> Any:
    """An ``Accelerator`` with automatic checkpoint naming into ``project/checkpoints``, and its
    prepared model, optimizer and scheduler."""
    from accelerate.utils import ProjectConfiguration

    accelerate, model, optimizer, scheduler = accelerate_model()
    config = ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True, total_limit=total_limit)
    accelerator = accelerate.Accelerator(project_config=config, cpu=True)
    return (accelerator, *accelerator.prepare(model, optimizer, scheduler))


def step_and_save(accelerator: Any, model: Any, optimizer: Any, scheduler: Any) -> None:
    """One training step, then ``save_state()``."""
    import torch

    accelerator.backward(model(torch.randn(2, 4)).sum())
    optimizer.step()
    scheduler.step()
    accelerator.save_state()


# --- a hand-written PyTorch loop, and one saving with torch.distributed.checkpoint ----------------

LOOP_FILES = {"split": "model_{}.safetensors", "bundled": "ckpt_{}.pt", "weights": "model_{}.safetensors"}
"""What a hand-written loop saves each epoch, by the file it resumes from: ``split`` the weights as
safetensors beside ``optimizer_{e}.pt`` and ``scheduler_{e}.pt``; ``bundled`` one ``torch.save``
of the PyTorch tutorial's dict ("Saving and loading a general checkpoint"); ``weights`` the
weights alone."""


def _loop_objects() -> tuple[Any, Any, Any]:
    """The loop's model, AdamW and StepLR (seeded)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)


_WEIGHTS = re.compile(r"model_([0-9]+)\.safetensors")


def loop_saves(folder: Path, shape: str) -> dict[int, Path]:
    """The loop's saves in ``folder`` by epoch: the files it resumes from."""
    pattern = re.compile(re.escape(LOOP_FILES[shape]).replace(r"\{\}", "([0-9]+)"))
    return {int(m[1]): path for path in folder.glob(LOOP_FILES[shape].format("*")) if (m := pattern.fullmatch(path.name))}


def loop_newest(folder: Path, shape: str) -> Path | None:
    """The loop's own resume pick: the file of the highest epoch number in ``folder`` (a glob and
    a max, as such loops are written); None on a first run."""
    saves = loop_saves(folder, shape)
    return saves[max(saves)] if saves else None


def split_files(weights: Path) -> list[Path]:
    """A split save's files from its weights file: ``model_3.safetensors``, and ``optimizer_3.pt``
    and ``scheduler_3.pt`` beside it by the epoch in its name (the file alone for another name)."""
    named = _WEIGHTS.fullmatch(weights.name)
    if named is None:
        return [weights]
    return [weights, weights.with_name(f"optimizer_{named[1]}.pt"), weights.with_name(f"scheduler_{named[1]}.pt")]


def loop_resume(path: Path, shape: str) -> tuple[Any, Any, Any, int]:
    """The loop's resume from the file it resumes from (a split save's siblings found by
    :func:`split_files`): the model, optimizer and scheduler loaded, and the epoch saved."""
    import torch
    from safetensors.torch import load_file

    model, optimizer, scheduler = _loop_objects()
    if shape == "bundled":
        state = torch.load(path, weights_only=True)
        model.load_state_dict(state["model_state_dict"])
        optimizer.load_state_dict(state["optimizer_state_dict"])
        return model, optimizer, scheduler, int(state["epoch"])
    named = _WEIGHTS.fullmatch(path.name)
    if named is None:
        raise ValueError(f"the loop resumes from its model_<epoch>.safetensors, not {path.name}")
    model.load_state_dict(load_file(path))
    if shape == "split":
        _, optimizer_file, scheduler_file = split_files(path)
        optimizer.load_state_dict(torch.load(optimizer_file, weights_only=True))
        scheduler.load_state_dict(torch.load(scheduler_file, weights_only=True))
    return model, optimizer, scheduler, int(named[1])


def torch_loop(folder: Path, epochs: int, shape: str) -> None:
    """A hand-written loop: resume from :func:`loop_newest` if there is one, then train and save
    each epoch up to ``epochs``, the way :data:`LOOP_FILES` says."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    newest = loop_newest(folder, shape)
    model, optimizer, scheduler, done = loop_resume(newest, shape) if newest is not None else (*_loop_objects(), 0)
    for epoch in range(done + 1, epochs + 1):
        loss = model(torch.randn(16, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if shape == "bundled":
            state = {"epoch": epoch, "model_state_dict": model.state_dict(), "optimizer_state_dict": optimizer.state_dict()}
            torch.save({**state, "loss": loss.item()}, folder / LOOP_FILES[shape].format(epoch))
            continue
        save_file(model.state_dict(), str(folder / LOOP_FILES[shape].format(epoch)))
        if shape == "split":
            torch.save(optimizer.state_dict(), folder / f"optimizer_{epoch}.pt")
            torch.save(scheduler.state_dict(), folder / f"scheduler_{epoch}.pt")


class DcpApp:
    """The training state as ``torch.distributed.checkpoint``'s own recipe wraps it (a
    ``Stateful`` of ``get_state_dict``/``set_state_dict``, as in the "Getting started with DCP"
    tutorial and torchtitan), for a model and AdamW."""

    def __init__(self) -> None:
        import torch

        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optimizer = get_state_dict(self.model, self.optimizer)
        return {"model": model, "optim": optimizer}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def dcp_newest(folder: Path) -> Path | None:
    """torchtitan's pick (``CheckpointManager._find_load_step``, torchtitan/components/checkpoint.py):
    the highest ``step-<n>`` folder that holds a ``.metadata``; None where there is none."""
    steps = {int(m[1]): p for p in folder.glob("*") if (m := re.search(r"step-([0-9]+)", p.name)) and (p / ".metadata").is_file()}
    return steps[max(steps)] if steps else None


def dcp_load_app(path: Path) -> tuple[DcpApp, int]:
    """``dcp.load`` of a checkpoint folder into a fresh :class:`DcpApp`, and the step it holds."""
    import torch.distributed.checkpoint as dcp

    state: dict[str, Any] = {"app": DcpApp(), "step": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled": one process is the point
        dcp.load(state, checkpoint_id=str(path))
    return state["app"], int(state["step"])


def dcp_loop(folder: Path, steps: int, every: int = 2) -> None:
    """A loop that resumes from :func:`dcp_newest`, trains to ``steps`` and saves every ``every``
    steps with ``dcp.save(state, checkpoint_id=folder / f"step-{n}")``."""
    import torch
    import torch.distributed.checkpoint as dcp

    newest = dcp_newest(folder)
    app, done = dcp_load_app(newest) if newest is not None else (DcpApp(), 0)
    for step in range(done + 1, steps + 1):
        app.optimizer.zero_grad()
        app.model(torch.randn(16, 8)).pow(2).mean().backward()
        app.optimizer.step()
        if step % every == 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dcp.save({"app": app, "step": step}, checkpoint_id=str(folder / f"step-{step}"))


# --- DeepSpeed by hand, Megatron from its source --------------------------------------------------


def deepspeed_run(folder: Path, steps: tuple[int, ...] = (100, 200), ranks: int = 2, latest: str | bool = True) -> Path:
    """A ZeRO-2 ``save_dir``: per tag, model states for mp rank 0 and one optimizer partition per
    data-parallel rank; ``latest`` names the newest tag (True), says ``latest`` (a str), or is
    not there (False); and the recovery script DeepSpeed copies beside them."""
    torch = pytest.importorskip("torch")
    folder.mkdir(parents=True)
    for step in steps:
        tag = folder / f"global_step{step}"
        tag.mkdir()
        torch.save({"module": {"w": torch.zeros(4)}, "global_steps": step, "dp_world_size": ranks}, tag / "mp_rank_00_model_states.pt")
        for rank in range(ranks):
            torch.save({"optimizer_state_dict": {"partition": rank}}, tag / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    if latest is not False:
        (folder / "latest").write_text(f"global_step{steps[-1]}" if latest is True else latest)
    (folder / "zero_to_fp32.py").write_text("# recovery script\n")
    return folder


# --- DeepSpeed, for real: its own launcher, two gloo processes on the CPU -----------------------------

DEEPSPEED_JOB = Path(__file__).with_name("deepspeed_job.py")


def deepspeed_launch(mode: str, stage: int, save_dir: Path, *tags: str) -> str:
    """``tests/deepspeed_job.py`` run by DeepSpeed's own launcher (``deepspeed --num_gpus 2
    --no_local_rank``, ``DS_ACCELERATOR=cpu``): its output; skips where deepspeed is missing."""
    done = deepspeed_process(mode, stage, str(save_dir), *tags)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def deepspeed_process(mode: str, stage: int, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``tests/deepspeed_job.py MODE STAGE ARGS...`` run by DeepSpeed's own launcher, however it
    ends (a rank that fails or dies makes the launcher end the other); the launcher and its ranks
    killed together past ``timeout``. Skips where deepspeed is missing."""
    import socket
    import sys

    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed (pip install -e '.[deepspeed]')")
    deepspeed_op()
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    command = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--no_local_rank", "--master_port", str(port)]
    launched = subprocess.Popen(
        [*command, str(DEEPSPEED_JOB), mode, str(stage), *args],
        env={**os.environ, "DS_ACCELERATOR": "cpu"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the launcher's ranks go with it past the timeout
    )
    try:
        out, err = launched.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(launched.pid, signal.SIGKILL)
        launched.communicate()
        raise
    finally:
        # the CPU accelerator's shared-memory all-reduce leaves 66 MB a rank in /dev/shm, which is
        # memory: a suite's worth filled a machine's RAM
        for buffer in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_127.0.0.1_{port}_*"):
            buffer.unlink(missing_ok=True)
    return subprocess.CompletedProcess(launched.args, launched.returncode, out, err)


def deepspeed_op() -> None:
    """DeepSpeed's shared-memory all-reduce for the CPU, which each launch JIT-compiles through
    torch on first use, compiled once for the test run (``TORCH_EXTENSIONS_DIR``, conftest.py)
    before any launch, under a lock the kernel drops with its holder: torch's own lock is a file
    that a build killed midway (a launch past its timeout, Ctrl-C) leaves behind, and every
    launch after it then waits on that file for ever."""
    folder = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or tempfile.gettempdir())
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "ckptdoctor-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "ckptdoctor-built").exists():
            return
        build = "from deepspeed.accelerator import get_accelerator; get_accelerator().create_op_builder('ShareMemCommBuilder').load()"
        builder = subprocess.Popen(
            [sys.executable, "-c", build],
            env={**os.environ, "DS_ACCELERATOR": "cpu", "TORCH_EXTENSIONS_DIR": str(folder)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # the compiler's processes go with it past the timeout
        )
        try:
            out, _ = builder.communicate(timeout=1200)
            assert builder.returncode == 0, out[-3000:]
            (folder / "ckptdoctor-built").write_text(out[-3000:])
        finally:
            if builder.poll() is None:
                os.killpg(builder.pid, signal.SIGKILL)
                builder.wait()
            for left in folder.glob("*/lock"):  # torch's lock of a build that did not finish: nobody builds now
                left.unlink(missing_ok=True)


def deepspeed_trained(save_dir: Path, stage: int, lightning: bool = False, steps: int = 4) -> Path:
    """A real ZeRO-``stage`` run: 4 steps (or ``steps``), ``engine.save_checkpoint(save_dir)``
    after every second one (``global_step2/``, ``global_step4/``, ``latest``); ``lightning``: 4
    steps saved as Lightning's ``DeepSpeedStrategy`` has the engine save,
    ``epoch=0-step=2.ckpt/checkpoint/`` and ``epoch=1-step=4.ckpt/checkpoint/``."""
    if lightning:
        deepspeed_launch("lightning", stage, save_dir)
    else:
        deepspeed_launch("train", stage, save_dir, str(steps))
    return save_dir


def deepspeed_killed(save_dir: Path, stage: int, write: int, fraction: float) -> None:
    """Resume the run in ``save_dir`` (``load_checkpoint`` follows ``latest``), train two steps and
    save once more, rank 0 SIGKILLed inside that save by ``killer.arm(write, fraction)`` and rank 1
    ended by the launcher; then this process dies of SIGKILL too, as the job did (what
    ``matrix.killed_mid_save`` waits for)."""
    done = deepspeed_process("resume", stage, str(save_dir), str(write), str(fraction))
    # rank 0 told the file it dies in (the launcher's own exit code is that of whichever dead rank
    # it polls first: rank 1 may fail at the save's last barrier before rank 0 is seen killed)
    if done.returncode != 0 and any(line.startswith(f"killer: {write} ") for line in done.stderr.splitlines()):
        os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError(f"rank 0 was not killed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def deepspeed_loads(save_dir: Path, stage: int, *tags: str | None) -> list[dict[str, Any]]:
    """What DeepSpeed's own ``engine.load_checkpoint(save_dir, tag=...)`` loads, per tag (None:
    no tag, it follows ``latest``), in a fresh engine of the same shape: each path it loaded
    (None where it loaded nothing) and the step it restored."""
    out = deepspeed_launch("load", stage, save_dir, *("-" if tag is None else tag for tag in tags))
    line = next(line for line in out.splitlines() if line.startswith("LOADED "))
    return list(json.loads(line.removeprefix("LOADED ")))


MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"


class MegatronTraining:
    """What Megatron-LM's ``save_checkpoint`` writes in its legacy ``torch`` format, from
    NVIDIA/Megatron-LM d98e8a64 (``megatron/training/checkpointing.py``), for a column-parallel
    linear layer split over ``ranks`` tensor-parallel ranks on the CPU (the input replicated and
    the loss separable by output column, so each rank's shard and Adam train as they do under TP).
    Each rank saves ``generate_state_dict``'s ``{args, checkpoint_version: 3.0, iteration, model,
    optimizer, opt_param_scheduler, rng_state}`` plus ``num_floating_point_operations_so_far``
    with one ``torch.save`` straight to ``get_checkpoint_name``'s
    ``iter_{:07d}/mp_rank_{tp:02d}/model_optim_rng.pt`` (``ensure_directory_exists`` first); after
    the barrier rank 0's ``iter_finalize_fn`` writes the tracker
    (``f.write('release' if release else str(iteration))``). ``FP32Optimizer.state_dict`` is the
    torch optimizer's; the scheduler's is ``OptimizerParamScheduler.state_dict``'s ten fields
    (``megatron/core/optimizer_param_scheduler.py``); ``get_rng_state`` leaves out
    ``cuda_rng_state`` here (no CUDA). :func:`megatron_load` reads it back."""

    GLOBAL_BATCH = 2

    def __init__(self, save: Path, ranks: int = 2) -> None:
        import argparse

        torch = pytest.importorskip("torch")
        torch.manual_seed(0)
        self.torch, self.save, self.ranks, self.iteration = torch, save, ranks, 0
        self.shards = [torch.nn.Linear(8, 2) for _ in range(ranks)]
        self.optimizers = [torch.optim.Adam(shard.parameters(), lr=1e-3) for shard in self.shards]
        self.scheduler: dict[str, Any] = {
            "max_lr": 1e-3, "lr_warmup_steps": 0, "num_steps": 0, "lr_decay_style": "cosine", "lr_decay_steps": 1000,
            "min_lr": 1e-5, "start_wd": 0.01, "end_wd": 0.01, "wd_incr_style": "constant", "wd_incr_steps": 1000,
        }  # fmt: skip
        self.args = argparse.Namespace(
            tensor_model_parallel_size=ranks, pipeline_model_parallel_size=1, global_batch_size=self.GLOBAL_BATCH,
            consumed_train_samples=0, ckpt_format="torch", use_distributed_optimizer=False,
        )  # fmt: skip

    def train(self, iterations: int) -> MegatronTraining:
        for _ in range(iterations):
            batch = self.torch.randn(self.GLOBAL_BATCH, 8)
            for shard, optimizer in zip(self.shards, self.optimizers, strict=True):
                optimizer.zero_grad()
                shard(batch).pow(2).mean().backward()
                optimizer.step()
            self.iteration += 1
            self.args.consumed_train_samples += self.GLOBAL_BATCH
            self.scheduler["num_steps"] += self.GLOBAL_BATCH  # OptimizerParamScheduler.step(increment=global batch)
        return self

    def state_dict(self, rank: int) -> dict[str, Any]:
        import random

        import numpy as np

        rng = {"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(), "torch_rng_state": self.torch.get_rng_state()}
        return {
            "args": self.args,
            "checkpoint_version": 3.0,
            "iteration": self.iteration,
            "model": self.shards[rank].state_dict(),
            "optimizer": self.optimizers[rank].state_dict(),
            "opt_param_scheduler": dict(self.scheduler),
            "rng_state": [{**rng, "rng_tracker_states": {}}],
            "num_floating_point_operations_so_far": 6.0 * 18 * self.args.consumed_train_samples,  # 6 x parameters x samples
        }

    def save_checkpoint(self) -> Path:
        folder = self.save / f"iter_{self.iteration:07d}"
        for rank in range(self.ranks):
            name = folder / f"mp_rank_{rank:02d}" / "model_optim_rng.pt"
            name.parent.mkdir(parents=True, exist_ok=True)
            self.torch.save(self.state_dict(rank), name)
        with open(self.save / MEGATRON_TRACKER, "w") as f:
            f.write(str(self.iteration))
        return folder


def megatron_run(folder: Path, iterations: tuple[int, ...] = (100, 200), ranks: int = 2, tracker: int | str | None = None) -> Path:
    """A ``--save`` folder of Megatron-LM's legacy torch format, saved by :class:`MegatronTraining`
    at each of ``iterations``; the tracker then says ``tracker`` where one is given."""
    training = MegatronTraining(folder, ranks)
    for iteration in iterations:
        training.train(iteration - training.iteration).save_checkpoint()
    if tracker is not None:
        (folder / MEGATRON_TRACKER).write_text(str(tracker))
    return folder


def megatron_load(load_dir: Path, ckpt_step: int | None = None, ranks: int = 2) -> MegatronTraining | None:
    """``load_checkpoint`` of the legacy torch format with ``--load load_dir`` (and ``--ckpt-step``),
    from ``megatron/training/checkpointing.py``: ``_load_base_checkpoint`` reads the tracker as
    ``read_metadata`` does (an iteration, or ``release``: iteration 0), ``--ckpt-step`` overriding
    it; with neither it returns None ("will not load any checkpoints and will start from random").
    ``_get_checkpoint_format`` lists the iteration's folder (``iterdir`` raises where it is
    missing, ``NotImplementedError`` where no ``mp_rank_0*`` is in it); each rank's
    ``torch.load(checkpoint_name, map_location='cpu')`` runs with torch's default
    ``weights_only`` and megatron.core's ``SAFE_GLOBALS`` (``megatron/core/safe_globals.py``), and
    a failure there is ``sys.exit()`` (raised here as ``SystemExit``). Then, as ``load_checkpoint``
    does: the weights (strict), and unless it is a release the optimizer, ``opt_param_scheduler``,
    the iteration and the RNG state."""
    import argparse
    import random
    import types
    from pathlib import PosixPath

    import numpy as np

    torch = pytest.importorskip("torch")
    tracker = load_dir / MEGATRON_TRACKER
    iteration, release = -1, False
    if tracker.is_file():
        text = tracker.read_text().strip()
        release = not text.isdigit()
        if release and text != "release":
            raise SystemExit(f"ERROR: Invalid metadata file {tracker}. Exiting")
        iteration = 0 if release else int(text)
    if ckpt_step:
        iteration = ckpt_step
    if iteration == -1:
        return None
    folder = load_dir / ("release" if release else f"iter_{iteration:07d}")
    if not any(entry.name.startswith("mp_rank_0") for entry in folder.iterdir()):
        raise NotImplementedError(f"unknown checkpoint format in {folder}")
    safe = [types.SimpleNamespace, argparse.Namespace, PosixPath, np.ndarray, np.dtype, np.dtypes.UInt32DType, torch._C.Generator]
    safe.append(np._core.multiarray._reconstruct)
    training = MegatronTraining(load_dir, ranks)
    for rank in range(ranks):
        try:
            with torch.serialization.safe_globals(safe):
                state = torch.load(folder / f"mp_rank_{rank:02d}" / "model_optim_rng.pt", map_location="cpu")
        except Exception as error:
            raise SystemExit(f"could not load the checkpoint\n{error}") from error
        training.shards[rank].load_state_dict(state["model"], strict=True)
        if not release:
            training.optimizers[rank].load_state_dict(state["optimizer"])
            training.scheduler.update(state["opt_param_scheduler"])
            training.iteration = state["iteration"]
            training.args.consumed_train_samples = state["args"].consumed_train_samples
            (rng,) = state["rng_state"]
            random.setstate(rng["random_rng_state"])
            np.random.set_state(rng["np_rng_state"])
            torch.set_rng_state(rng["torch_rng_state"])
    return training


# --- OpenMMLab mmengine ---------------------------------------------------------------------------


def mmengine_run(
    work_dir: Path,
    by: str = "epoch",
    length: int = 4,
    *,
    resume: bool | str = False,
    load_from: str | None = None,
    strategy: str | None = None,
    custom_hooks: Sequence[Any] = (),
    **hook: Any,
) -> Any:
    """A real ``Runner.train()`` of a linear model on the CPU (16 samples in batches of 4: 4
    iterations an epoch), evaluated by an MSE metric after every epoch (``by="epoch"``) or every 4
    iterations (``by="iter"``), for ``length`` epochs or iterations, with SGD and a MultiStepLR;
    ``CheckpointHook(interval=1 or 4, max_keep_ckpts=2, save_best="mse", rule="less", **hook)``.
    ``resume``: ``Runner(resume=True)``, or ``resume=True, load_from=resume`` for a path;
    ``load_from`` alone loads the weights and starts over. Returns the runner. ``strategy``
    (``"deepspeed"``, ``"fsdp"``): a ``FlexibleRunner`` with that strategy instead, and AdamW, in
    a process of a gloo group (see :func:`mmengine_distributed`). ``custom_hooks``: the Runner's own."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("mmengine")
    from mmengine.evaluator import BaseMetric
    from mmengine.model import BaseModel
    from mmengine.runner import Runner
    from mmengine.runner._flexible_runner import FlexibleRunner

    class Net(BaseModel):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)

        def forward(self, inputs: Any, labels: Any, mode: str = "tensor") -> Any:
            out = self.lin(inputs)
            if mode == "loss":
                return {"loss": ((out - labels) ** 2).mean()}
            return [((out - labels) ** 2).mean()] if mode == "predict" else out

    class Mse(BaseMetric):  # type: ignore[misc]
        def process(self, data_batch: Any, data_samples: Any) -> None:
            self.results.extend(float(x) for x in data_samples)

        def compute_metrics(self, results: list[float]) -> dict[str, float]:
            return {"mse": sum(results) / len(results)}

    class Data(torch.utils.data.Dataset):  # type: ignore[misc]
        def __init__(self) -> None:
            generator = torch.Generator().manual_seed(0)
            self.x, self.y = torch.randn(16, 4, generator=generator), torch.randn(16, 2, generator=generator)

        def __len__(self) -> int:
            return 16

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"inputs": self.x[i], "labels": self.y[i]}

    epochs = by == "epoch"
    loader = {
        "dataset": Data(),
        "sampler": {"type": "DefaultSampler", "shuffle": False},
        "batch_size": 4,
        "collate_fn": {"type": "default_collate"},
    }
    train_cfg = (
        {"by_epoch": True, "max_epochs": length, "val_interval": 1}
        if epochs
        else {"by_epoch": False, "max_iters": length, "val_interval": 4}
    )
    checkpoint = {
        "type": "CheckpointHook",
        "interval": 1 if epochs else 4,
        "by_epoch": epochs,
        "max_keep_ckpts": 2,
        "save_best": "mse",
        "rule": "less",
        **hook,
    }
    arguments: dict[str, Any] = {
        "model": Net(),
        "work_dir": str(work_dir),
        "experiment_name": f"{work_dir}-{length}-{resume}",  # Runners in one process share instances by this name
        "train_dataloader": loader,
        "val_dataloader": loader,
        "val_evaluator": {"type": Mse},
        "optim_wrapper": {"optimizer": {"type": "SGD", "lr": 0.01, "momentum": 0.9}},
        "param_scheduler": {"type": "MultiStepLR", "milestones": [2], "by_epoch": epochs},
        "train_cfg": train_cfg,
        "val_cfg": {},
        "default_hooks": {"checkpoint": checkpoint, "logger": {"type": "LoggerHook", "interval": 1}},
        "custom_hooks": list(custom_hooks),
        "resume": bool(resume),
        "load_from": resume if isinstance(resume, str) else load_from,
        "default_scope": None,
        "randomness": {"seed": 0},
        "log_level": "ERROR",
    }
    if strategy is None:
        runner = Runner(**arguments)
    else:
        optimizer = {"type": "AdamW", "lr": 0.01}  # DeepSpeed's ZeRO refuses an optimizer it has not tested (SGD)
        wrapper = {"type": "DeepSpeedOptimWrapper" if strategy == "deepspeed" else "OptimWrapper", "optimizer": optimizer}
        arguments |= {"optim_wrapper": wrapper, "strategy": MMENGINE_STRATEGIES[strategy], "launcher": "pytorch"}
        runner = FlexibleRunner(**arguments, env_cfg={"dist_cfg": {"backend": "gloo"}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner.train()
    return runner


MMENGINE_STRATEGIES: dict[str, dict[str, Any]] = {
    "deepspeed": {"type": "DeepSpeedStrategy", "zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 4},
    # state_dict_cfg="local": a folder of one file per rank; FSDP1 needs a device: the CPU, given
    # through the wrapper's own argument (FSDPStrategy passes LOCAL_RANK, a GPU's number)
    "fsdp": {
        "type": "FSDPStrategy",
        "state_dict_cfg": "local",
        "model_wrapper": {"type": "MMFullyShardedDataParallel", "device_id": "cpu"},
    },
}
"""``FlexibleRunner``'s strategies under which ``CheckpointHook`` saves each checkpoint as a folder."""


def mmengine_distributed(
    work_dir: Path, strategy: str, length: int = 4, resume: bool | str = False, load_from: str | None = None, **hook: Any
) -> Launched:
    """:func:`mmengine_run` with a ``FlexibleRunner`` of ``strategy`` in two processes on gloo
    (``launcher="pytorch"``), by epoch: ``DeepSpeedStrategy`` (ZeRO-2: the engine saves each
    ``epoch_N.pth`` as a tag folder of ``mp_rank_00_model_states.pt`` and one
    ``zero_pp_rank_<r>_mp_rank_00_optim_states.pt`` per rank, ``save_latest=False``) or
    ``FSDPStrategy`` (``state_dict_cfg="local"``: ``epoch_N.pth/rank<r>.pth``)."""
    return launched("mmengine", work_dir=str(work_dir), strategy=strategy, length=length, resume=resume, load_from=load_from, hook=hook)


def gloo_all_reduce() -> None:
    """DeepSpeed's CPU all-reduce through shared memory JIT-compiles an op (a minute on a loaded
    machine) and leaves two 66 MB buffers in /dev/shm per launch, never unlinked (``shm.cpp``):
    the tests' launches reduce through gloo instead, which changes nothing DeepSpeed saves."""
    import deepspeed.comm.torch

    deepspeed.comm.torch.build_shm_op = lambda: None


def _mmengine_worker(work_dir: str, strategy: str, length: int, resume: bool | str, load_from: str | None, hook: dict[str, Any]) -> None:
    import mmengine._strategy.deepspeed as mmengine_deepspeed
    import torch

    if strategy == "DeepSpeedStrategy":
        gloo_all_reduce()

    # mmengine 0.10.7 on a CPU: its pytorch launcher sets a CUDA device whatever the device
    # (`_init_dist_pytorch`), and DeepSpeedStrategy registers DeepSpeed's own optimizers from
    # `deepspeed.runtime.fp16.onebit`, which deepspeed 0.19 no longer has (AdamW is torch's)
    torch.cuda.set_device = lambda device: None
    mmengine_deepspeed.register_deepspeed_optimizers = list
    if resume or load_from:
        os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"  # as the resume hint says: torch >= 2.6 refuses its HistoryBuffer
    # not caught: a rank that fails alone leaves the other waiting in a collective; torchrun ends both
    runner = mmengine_run(Path(work_dir), "epoch", length, resume=resume, load_from=load_from, strategy=strategy, **hook)
    _said(f"{_DONE} {runner.epoch}")


# --- Detectron2, from its source ------------------------------------------------------------------


class Detectron2Trainer:
    """What Detectron2's ``DefaultTrainer`` saves, and how ``train_net.py --resume`` loads it, for a
    linear model on the CPU. Detectron2 is not on PyPI, so this follows its source (detectron2@02b5c4e,
    fvcore@3378afe): ``Checkpointer.save`` (``{"model", "trainer", **kwargs}``, one ``torch.save`` to
    the final name, then ``tag_last_checkpoint`` writes the file's name), ``PeriodicCheckpointer.step``
    (``model_{iteration:07d}`` when ``(iteration + 1) % period == 0``, ``model_final`` at
    ``max_iter - 1``, ``max_to_keep``), ``BestCheckpointer`` (``model_best``),
    ``TrainerBase``/``SimpleTrainer``/``DefaultTrainer.state_dict``, ``JSONWriter``'s ``metrics.json``,
    and ``resume_or_load`` (fvcore ``get_checkpoint_file`` and ``load``, torch's default ``torch.load``)."""

    def __init__(self, output: Path, max_iter: int = 12, period: int = 4, max_to_keep: int | None = None, best_every: int = 0) -> None:
        torch = pytest.importorskip("torch")
        output.mkdir(parents=True, exist_ok=True)
        self.torch, self.output = torch, output
        self.max_iter, self.period, self.max_to_keep, self.best_every = max_iter, period, max_to_keep, best_every
        torch.manual_seed(0)
        self.model = torch.nn.Linear(4, 2)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.scheduler = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, milestones=[6])
        self.iter = self.start_iter = 0
        self.recent: list[str] = []
        self.best: float | None = None
        (output / "config.yaml").write_text("SOLVER:\n  CHECKPOINT_PERIOD: 4\n")  # default_setup

    def state_dict(self) -> dict[str, Any]:
        """``DefaultTrainer.state_dict``: TrainerBase's iteration and stateful hooks (LRScheduler),
        and the inner SimpleTrainer's under ``_trainer``."""
        return {
            "iteration": self.iter,
            "hooks": {"LRScheduler": self.scheduler.state_dict()},
            "_trainer": {"iteration": self.iter, "optimizer": self.optimizer.state_dict()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iter = state["iteration"]
        for name, value in state.get("hooks", {}).items():
            if name == "LRScheduler":
                self.scheduler.load_state_dict(value)
        self.optimizer.load_state_dict(state["_trainer"]["optimizer"])  # SimpleTrainer.load_state_dict

    def save(self, name: str, **kwargs: Any) -> None:
        data = {"model": self.model.state_dict(), "trainer": self.state_dict(), **kwargs}
        with open(self.output / f"{name}.pth", "wb") as f:
            self.torch.save(data, f)
        (self.output / "last_checkpoint").write_text(f"{name}.pth")

    def periodic(self, iteration: int) -> None:
        if (iteration + 1) % self.period == 0:
            self.save(f"model_{iteration:07d}", iteration=iteration)
            if self.max_to_keep is not None:
                self.recent.append(str(self.output / (self.output / "last_checkpoint").read_text()))
                if len(self.recent) > self.max_to_keep:
                    old = self.recent.pop(0)
                    if os.path.exists(old) and not old.endswith("model_final.pth"):
                        os.remove(old)
        if iteration >= self.max_iter - 1:
            self.save("model_final", iteration=iteration)

    def train(self, until: int | None = None) -> Detectron2Trainer:
        """Iterations ``start_iter`` to ``max_iter - 1`` (or ``until - 1``: a job killed after it)."""
        for iteration in range(self.start_iter, self.max_iter if until is None else until):
            self.iter = iteration  # TrainerBase.train: `for self.iter in range(start_iter, max_iter)`
            loss = self.model(self.torch.randn(4, 4)).pow(2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.scheduler.step()  # the LRScheduler hook, before the PeriodicCheckpointer
            self.periodic(self.iter)
            row: dict[str, Any] = {"iteration": self.iter, "total_loss": loss.item(), "lr": self.scheduler.get_last_lr()[0]}
            if self.best_every and (self.iter + 1) % self.best_every == 0:
                row["bbox/AP"] = ap = 10.0 + (self.iter % 7)  # EvalHook, then BestCheckpointer
                if self.best is None or ap > self.best:
                    self.best = ap
                    self.save("model_best", iteration=self.iter)
            with open(self.output / "metrics.json", "a") as f:
                f.write(json.dumps(row) + "\n")
        return self

    @classmethod
    def resumed(cls, output: Path, checkpoint: Path | None = None, **settings: Any) -> Detectron2Trainer:
        """A new trainer on ``output`` after ``resume_or_load(resume=True)``: what ``last_checkpoint``
        names loaded (model, then the trainer's state), ``start_iter`` the iteration after it.
        ``checkpoint``: the file loaded instead, as ``--resume`` loads it once its name is in
        ``last_checkpoint``. fvcore's ``_load_model`` loads the weights with ``strict=False``
        (``fvcore/common/checkpoint.py``: ``self.model.load_state_dict(checkpoint_state_dict,
        strict=False)``), missing keys only logged."""
        trainer = cls(output, **settings)
        tag = output / "last_checkpoint"
        if checkpoint is None and tag.exists():
            checkpoint = Path(os.path.join(output, tag.read_text().strip()))
        if checkpoint is not None:
            saved = trainer.torch.load(checkpoint, map_location="cpu")
            trainer.model.load_state_dict(saved.pop("model"), strict=False)
            if "trainer" in saved:
                trainer.load_state_dict(saved.pop("trainer"))
            trainer.start_iter = trainer.iter + 1
        return trainer


# --- MosaicML Composer, from its source ------------------------------------------------------------


def composer_state(batch: int, epoch: int, weights_only: bool = False, seed: int = 0) -> dict[str, Any]:
    """What ``_save_checkpoint`` (``composer/utils/checkpoint.py``) hands ``torch.save``: ``{'state':
    State.state_dict(), 'rng': get_rng_state()}`` (``composer/core/state.py``,
    ``composer/utils/reproducibility.py``), or ``{'state': {model, integrations, metadata}}`` for a
    ``weights_only`` save; a linear model with Adam, trained ``batch`` steps."""
    import datetime
    import random

    import numpy as np

    torch = pytest.importorskip("torch")
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters())
    for _ in range(batch):
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
    metadata = {"composer_env_info": {}, "torch_version": torch.__version__, "device": "cpu", "precision": "fp32", "world_size": 1}
    if weights_only:
        return {"state": {"model": model.state_dict(), "integrations": {}, "metadata": metadata}}
    wct = datetime.timedelta(seconds=batch)
    timestamp = {
        "iteration": 0, "epoch": epoch, "batch": batch, "sample": 2 * batch, "token": 0, "epoch_in_iteration": epoch,
        "token_in_iteration": 0, "batch_in_epoch": 0, "sample_in_epoch": 0, "token_in_epoch": 0,
        "total_wct": wct, "iteration_wct": wct, "epoch_wct": datetime.timedelta(0), "batch_wct": datetime.timedelta(0),
    }  # fmt: skip
    state = {
        "model": model.state_dict(),
        "optimizers": {type(optimizer).__qualname__: optimizer.state_dict()},
        "schedulers": {},
        "algorithms": [],
        "callbacks": {},
        "scaler": {},
        "timestamp": timestamp,
        "rank_zero_seed": 42,
        "train_metrics": {},
        "eval_metrics": {},
        "run_name": "tiny-run",
        "dataset_state": {"train": None, "eval": {}},
        "integrations": {},
        "metadata": metadata,
    }
    rng = [{"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.random.get_rng_state()}]
    return {"state": state, "rng": rng}


COMPOSER_TOOLS = {"bz2": "bzip2", "gz": "gzip", "lz4": "lz4", "lzma": "lzma", "lzo": "lzop", "xz": "xz", "zst": "zstd"}
"""``KNOWN_COMPRESSORS`` (``composer/utils/compression.py``): a save's suffix and the tool it is piped through."""


def composer_save(
    folder: Path, epoch: int, batch: int, ranks: int = 1, weights_only: bool = False, latest: bool = True, compression: str = ""
) -> None:
    """One ``CheckpointSaver._save_checkpoint``: each rank's ``ep{epoch}-ba{batch}-rank{rank}.pt``
    written in place (``_write_checkpoint_file``), then ``latest-rank{rank}.pt`` removed and made a
    symlink to the save's path relative to the folder. ``compression`` (``zst``, ``gz``, ...):
    ``filename`` and ``latest_filename`` end ``.pt.<compression>``, and ``_write_checkpoint_file``
    pipes ``torch.save`` through the tool (``CliCompressor.compress``)."""
    import subprocess

    torch = pytest.importorskip("torch")
    folder.mkdir(parents=True, exist_ok=True)
    suffix = f".{compression}" if compression else ""
    for rank in range(ranks):
        name = f"ep{epoch}-ba{batch}-rank{rank}.pt{suffix}"
        with open(folder / name, "wb") as f:
            if compression:
                tool = subprocess.Popen([COMPOSER_TOOLS[compression]], stdin=subprocess.PIPE, stdout=f)
                assert tool.stdin is not None
                torch.save(composer_state(batch, epoch, weights_only, seed=rank), tool.stdin)
                tool.stdin.close()
                assert tool.wait() == 0
            else:
                torch.save(composer_state(batch, epoch, weights_only, seed=rank), f)
        if latest:
            link = folder / f"latest-rank{rank}.pt{suffix}"
            link.unlink(missing_ok=True)
            link.symlink_to(name)


def composer_sharded_save(folder: Path, epoch: int, batch: int) -> Path:
    """One ``CheckpointSaver._save_checkpoint`` under FSDP's sharded state dict, on one rank:
    ``get_save_filename`` puts it in ``fsdp_config.sharded_ckpt_prefix_dir`` (``ep{epoch}-ba{batch}``),
    ``_save_checkpoint`` writes ``{'state': ..., 'rng': ...}`` with ``dist_cp.save`` (a
    ``FileSystemWriter`` on the folder, ``DefaultSavePlanner(dedup_save_to_lowest_rank=True)``:
    ``__0_0.distcp`` and ``.metadata``), then rank 0 makes ``latest-rank0.pt`` a relative symlink to
    the folder ("sharded checkpoints use directories not files for load_paths")."""
    import os
    import warnings

    import torch.distributed.checkpoint as dist_cp

    save_dir = folder / f"ep{epoch}-ba{batch}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: no process group, so a single process saves
        dist_cp.save(
            composer_state(batch, epoch),
            storage_writer=dist_cp.FileSystemWriter(str(save_dir)),
            planner=dist_cp.DefaultSavePlanner(dedup_save_to_lowest_rank=True),
        )
    link = folder / "latest-rank0.pt"
    link.unlink(missing_ok=True)
    link.symlink_to(os.path.relpath(save_dir, folder))
    return save_dir


def composer_load_sharded(path: str | Path) -> tuple[int, Any]:
    """``load_sharded_checkpoint`` on one rank: ``dist_cp_load`` of ``{'state': State.state_dict()}``
    from a ``FileSystemReader`` on the folder, then the model; the batch the timestamp resumes at,
    and the model. Raises as ``dist_cp.load`` does on a folder it cannot read whole."""
    import warnings

    import torch.distributed.checkpoint as dist_cp

    state = composer_state(0, 0)["state"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist_cp.load({"state": state}, storage_reader=dist_cp.FileSystemReader(str(path)))
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(4, 2)
    model.load_state_dict(state["model"])
    return state["timestamp"]["batch"], model


def composer_run(folder: Path, saves: Sequence[tuple[int, int]] = ((1, 4), (2, 8)), **saving: Any) -> Path:
    """A ``save_folder`` after saves at (epoch, batch) ``saves``, as the Trainer's default
    ``CheckpointSaver`` names them."""
    for epoch, batch in saves:
        composer_save(folder, epoch, batch, **saving)
    return folder


def composer_load(path: str | Path) -> tuple[int, Any, Any]:
    """``load_checkpoint``'s local path: ``_torch_load_with_validation`` (``weights_only=True`` with
    ``_COMPOSER_CHECKPOINT_SAFE_GLOBALS``), then ``State.load_state_dict``'s model and optimizer;
    the batch the timestamp resumes at, the model and the optimizer."""
    import datetime
    import io
    import subprocess

    import numpy as np
    import numpy.dtypes

    torch = pytest.importorskip("torch")
    allowed: list[Any] = [datetime.timedelta, np.ndarray, np.dtype, torch.torch_version.TorchVersion, np._core.multiarray._reconstruct]
    allowed += [kind for kind in vars(numpy.dtypes).values() if isinstance(kind, type) and issubclass(kind, np.dtype)]
    parts = str(path).split(".")
    if len(parts) >= 2 and parts[-2] == "pt" and parts[-1] != "symlink":  # is_compressed_pt: download_checkpoint's `<tool> -dc`
        path = io.BytesIO(subprocess.run([COMPOSER_TOOLS[parts[-1]], "-dc", str(path)], stdout=subprocess.PIPE, check=True).stdout)  # type: ignore[assignment]
    with torch.serialization.safe_globals(allowed):
        saved = torch.load(path, map_location="cpu", weights_only=True)
    state = saved["state"]
    model = torch.nn.Linear(4, 2)
    model.load_state_dict(state["model"])
    (optimizer_state,) = state["optimizers"].values()
    optimizer = torch.optim.Adam(model.parameters())
    optimizer.load_state_dict(optimizer_state)
    return state["timestamp"]["batch"], model, optimizer


def composer_autoresume(save_folder: Path, latest_filename: str = "latest-rank0.pt") -> str | None:
    """``Trainer._get_autoresume_checkpoint`` on one node: ``save_folder/<save_latest_filename>``
    (rank 0's) where ``os.path.exists`` finds it (a dangling link is no checkpoint: the run starts
    over), else None."""
    import os

    latest = os.path.abspath(save_folder / latest_filename)
    return latest if os.path.exists(latest) else None


# --- torchtune ---------------------------------------------------------------------------------------


def torchtune_run(root: Path, epochs: int, total: int, hf: bool = False) -> tuple[Path, Path]:
    """``output_dir`` and ``checkpoint_dir`` of a recipe's saves made by torchtune's own
    checkpointer (``FullModelTorchTuneCheckpointer``, or ``FullModelHFCheckpointer`` with ``hf``)
    on a three-tensor Llama state dict: ``epochs`` saves of a ``total``-epoch run, each with the
    recipe state ``recipes/full_finetune_single_device.py`` hands it, intermediate but the last epoch."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchao")
    training = pytest.importorskip("torchtune.training")
    base, output = root / "base", root / "out"
    base.mkdir(parents=True)
    if hf:
        import json

        from safetensors.torch import save_file

        weights = {"model.embed_tokens.weight": torch.randn(8, 4), "model.norm.weight": torch.ones(4), "lm_head.weight": torch.randn(8, 4)}
        save_file(weights, base / "model.safetensors")
        (base / "config.json").write_text(json.dumps({"num_attention_heads": 1, "num_key_value_heads": 1, "hidden_size": 4}))
        checkpointer = training.FullModelHFCheckpointer(str(base), ["model.safetensors"], "LLAMA3", str(output))
    else:
        torch.save(
            {"tok_embeddings.weight": torch.randn(8, 4), "norm.scale": torch.ones(4), "output.weight": torch.randn(8, 4)}, base / "model.pt"
        )
        checkpointer = training.FullModelTorchTuneCheckpointer(str(base), ["model.pt"], "LLAMA3", str(output))
    model = checkpointer.load_checkpoint()["model"]
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])
    for epoch in range(epochs):
        state = {
            "model": {name: tensor + epoch + 1 for name, tensor in model.items()},  # epoch N's weights: the base's + N + 1
            "optimizer": optimizer.state_dict(),
            "seed": 0,
            "epochs_run": epoch + 1,
            "total_epochs": total,
            "max_steps_per_epoch": None,
        }
        checkpointer.save_checkpoint(state, epoch=epoch, intermediate_checkpoint=epoch + 1 < total)
    return output, base


def torchtune_resume(output: Path, base: Path, files: Sequence[str], hf: bool = False) -> dict[str, Any]:
    """What a recipe's ``resume_from_checkpoint=True`` loads: torchtune's checkpointer built as the
    recipe builds it (``checkpoint_files`` relative to ``output_dir``) and its ``load_checkpoint()``."""
    training = pytest.importorskip("torchtune.training")
    kind = training.FullModelHFCheckpointer if hf else training.FullModelTorchTuneCheckpointer
    checkpointer = kind(str(base), list(files), "LLAMA3", str(output), resume_from_checkpoint=True)
    return dict(checkpointer.load_checkpoint())


TORCHTUNE_LLAMA = {"vocab_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "embed_dim": 16, "max_seq_len": 8}
"""A tiny ``torchtune.models.llama3.llama3``: the model of :func:`torchtune_recipe`."""


class TorchtuneTokenizer:
    """The recipe's tokenizer: the dataset below is tokenized already, the collator needs ``pad_id``."""

    pad_id = 0


class TorchtuneRows:
    """The recipe's dataset (``config.instantiate(cfg.dataset, tokenizer)``): four rows of eight tokens."""

    def __init__(self, tokenizer: TorchtuneTokenizer) -> None:
        import torch

        self.rows = torch.randint(1, TORCHTUNE_LLAMA["vocab_size"], (4, 8), generator=torch.Generator().manual_seed(0)).tolist()

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return {"tokens": self.rows[index], "labels": self.rows[index]}


def torchtune_base(folder: Path, hf: bool = False) -> Path:
    """The model a fine-tune starts from (``checkpointer.checkpoint_dir``): the tiny Llama's initial
    weights as ``model.pt``, or with ``hf`` in Hugging Face's names (torchtune's own
    ``convert_weights.tune_to_hf``) as ``model.safetensors`` with the ``config.json`` that
    ``FullModelHFCheckpointer`` reads."""
    torch = pytest.importorskip("torch")
    from torchtune.models.llama3 import llama3

    folder.mkdir(parents=True)
    torch.manual_seed(0)
    weights = llama3(**TORCHTUNE_LLAMA).state_dict()
    if not hf:
        torch.save(weights, folder / "model.pt")
        return folder
    from safetensors.torch import save_file
    from torchtune.models.convert_weights import tune_to_hf

    heads, kv_heads, dim = TORCHTUNE_LLAMA["num_heads"], TORCHTUNE_LLAMA["num_kv_heads"], TORCHTUNE_LLAMA["embed_dim"]
    save_file(tune_to_hf(weights, num_heads=heads, num_kv_heads=kv_heads, dim=dim), folder / "model.safetensors")
    config = {"num_attention_heads": heads, "num_key_value_heads": kv_heads, "hidden_size": dim}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def torchtune_recipe(output: Path, base: Path, epochs: int, resume: Sequence[str] = (), log_to: Path | None = None) -> Any:
    """torchtune 0.6.1's ``FullFinetuneRecipeSingleDevice``, from ``recipes/full_finetune_single_device.py``
    (the file ``tune run full_finetune_single_device`` runs), set up (``setup(cfg)``) for a tiny Llama
    on the CPU: AdamW, a cosine schedule with warm-up, two batches an epoch, ``epochs`` epochs, the
    checkpointer of ``base`` (``FullModelHFCheckpointer`` where it holds ``config.json``) saving into
    ``output``. ``resume``: ``resume_from_checkpoint=True`` with ``checkpointer.checkpoint_files``
    these (relative to ``output``). ``log_to``: the recipe's own ``output_dir`` (its
    ``torchtune_config.yaml``), ``output`` by default."""
    import runpy

    pytest.importorskip("torchao")
    torchtune = pytest.importorskip("torchtune")
    from omegaconf import OmegaConf

    hf = (base / "config.json").is_file()
    recipes = Path(torchtune.__file__).parent.parent / "recipes"
    recipe = runpy.run_path(str(recipes / "full_finetune_single_device.py"), run_name="torchtune_recipe")
    checkpointer = "FullModelHFCheckpointer" if hf else "FullModelTorchTuneCheckpointer"
    cfg = OmegaConf.create(
        {
            "output_dir": str(log_to or output),
            "model": {"_component_": "torchtune.models.llama3.llama3", **TORCHTUNE_LLAMA},
            "tokenizer": {"_component_": "frameworks.TorchtuneTokenizer"},
            "dataset": {"_component_": "frameworks.TorchtuneRows"},
            "seed": 0,
            "shuffle": True,
            "checkpointer": {
                "_component_": f"torchtune.training.{checkpointer}",
                "checkpoint_dir": str(base),
                "checkpoint_files": list(resume) or ["model.safetensors" if hf else "model.pt"],
                "recipe_checkpoint": None,
                "output_dir": str(output),
                "model_type": "LLAMA3",
            },
            "resume_from_checkpoint": bool(resume),
            "batch_size": 2,
            "epochs": epochs,
            "optimizer": {"_component_": "torch.optim.AdamW", "lr": 1e-3},
            "lr_scheduler": {"_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup", "num_warmup_steps": 1},
            "loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"},
            "max_steps_per_epoch": None,
            "gradient_accumulation_steps": 1,
            "optimizer_in_bwd": False,
            "clip_grad_norm": None,
            "compile": False,
            "device": "cpu",
            "enable_activation_checkpointing": False,
            "enable_activation_offloading": False,
            "dtype": "fp32",
            "metric_logger": {"_component_": "torchtune.training.metric_logging.StdoutLogger"},
            "log_every_n_steps": 1,
            "log_peak_memory_stats": False,
        }
    )
    made = recipe["FullFinetuneRecipeSingleDevice"](cfg=cfg)
    made.setup(cfg=cfg)
    return made


class _EpochsDone(Exception):
    """Raised after the save of the last epoch a :func:`torchtune_train` runs."""


def torchtune_train(recipe: Any, epochs: int) -> None:
    """``recipe.train()`` until it has saved ``epochs`` more epochs: the job's time limit ends it there."""
    save = recipe.save_checkpoint
    stop_after = recipe.epochs_run + epochs

    def save_then_stop(epoch: int) -> None:
        save(epoch)
        if recipe.epochs_run == stop_after:
            raise _EpochsDone

    recipe.save_checkpoint = save_then_stop
    with contextlib.suppress(_EpochsDone):
        recipe.train()


# --- Ultralytics YOLO: real runs of its own trainer, committed ---------------------------------------

YOLO_DATA = Path(__file__).resolve().parent / "data" / "ultralytics"
"""Runs made by ultralytics 8.4.190's own trainer (``make_run.py``: Ultralytics cannot run here, its
torchvision is a CUDA build), and ``oracle.json``: what Ultralytics itself did with each of their
files, whole and broken the ways of ``matrix.py``, recorded by ``record_oracle.py``."""


def yolo_run(into: Path, name: str = "run") -> Path:
    """A copy of a committed run's ``train/`` folder (its ``save_dir``) in ``into``; its ``weights/``."""
    return Path(shutil.copytree(YOLO_DATA / name / "train", into / "train")) / "weights"


@functools.cache
def yolo_oracle() -> dict[str, Any]:
    return dict(json.loads((YOLO_DATA / "oracle.json").read_text()))


YOLO_TASKS = ("segment", "classify", "pose", "obb")
"""The committed runs of Ultralytics' other tasks (``make_run.py tasks``), each ``<task>/train/weights/last.pt``."""


@functools.cache
def _yolo_task_restores() -> dict[str, Any]:
    return dict(json.loads((YOLO_DATA / "tasks.json").read_text()))


def yolo_restored(path: Path) -> dict[str, Any]:
    """What ``YOLO(path).train(resume=True)`` restored from a file with this content, as recorded:
    ``resumes_at`` (the 0-based epoch it goes on at) and ``digest`` (the model, EMA, optimizer,
    scaler, ``best_fitness`` and early stopper it restored), or the ``error`` it stopped with. A
    content Ultralytics was never asked about fails the test: record it."""
    key = hashlib.sha256(path.read_bytes()).hexdigest()
    recorded = yolo_oracle()["restores"].get(key) or _yolo_task_restores().get(key)
    if recorded is None:
        raise AssertionError(f"Ultralytics was never asked about {path} (sha256 {key}): run tests/data/ultralytics/record_oracle.py")
    return dict(recorded)


def yolo_edited(path: Path, edit: Callable[[bytes], bytes]) -> bytes:
    """``path``'s torch zip with its ``data.pkl`` edited (``sample_set._add_setitem``), every member
    written again stored and dated 1980: the same bytes each time, so that what Ultralytics
    answered about them (``record_oracle.py``'s ``EXTRA``) is found by their content."""
    out = io.BytesIO()
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(out, "w") as edited:
        for info in source.infolist():
            content = source.read(info)
            edited.writestr(zipfile.ZipInfo(info.filename), edit(content) if info.filename.endswith("/data.pkl") else content)
    return out.getvalue()


def yolo_resumed_save(weights: Path) -> None:
    """The run of ``weights`` resumed for one more save, as Ultralytics' own resume wrote it
    (``resumed/``): each file written at once (``Path.write_bytes``, ``open(csv, "a")``), in the
    order and mode its process opened them (``writes.json``). Under ``killer``, the kill lands
    where it lands in Ultralytics' own save (``record_oracle.py`` checks both leave the same files)."""
    resumed = YOLO_DATA / "resumed"
    for relative, mode in json.loads((resumed / "writes.json").read_text()):
        content = (resumed / "train" / relative).read_bytes()
        target = weights.parent / relative
        if "a" in mode:  # results.csv: the resumed epoch's row appended
            before = target.read_bytes()
            assert content.startswith(before), f"{relative} was not appended to"
            content = content[len(before) :]
        with open(target, mode.replace("b", "") + "b") as file:
            file.write(content)


# --- fairseq (written from its source: fairseq cannot be imported on Python 3.11) ----------------


class FairseqTrainer:
    """What ``fairseq-train`` writes into ``--save-dir``, from facebookresearch/fairseq
    3d262bb25690e4eb2e7d3c1309b1e9c406ca4b99: ``Trainer.state_dict`` (fairseq/trainer.py) for the
    keys, ``checkpoint_utils.save_checkpoint`` for which names a save writes (the first with
    ``torch_persistent_save``: ``<name>.tmp``, then a rename; the others as whole copies,
    ``PathManager.copy``) and for ``--keep-*`` retention; ``fairseq_resume`` below loads as
    ``checkpoint_utils.load_checkpoint`` and ``Trainer.load_checkpoint`` do. A tiny linear model
    with Adam stands for the model; ``ranks`` > 1 saves FSDP's sharded state (``-shard{rank}``)."""

    def __init__(
        self,
        save_dir: Path,
        *,
        save_interval_updates: int = 0,
        no_epoch_checkpoints: bool = False,
        keep_best_checkpoints: int = 0,
        no_save_optimizer_state: bool = False,
        ranks: int = 1,
    ) -> None:
        torch = pytest.importorskip("torch")
        torch.manual_seed(0)
        self.save_dir = save_dir
        self.save_interval_updates = save_interval_updates
        self.no_epoch_checkpoints = no_epoch_checkpoints
        self.keep_best_checkpoints = keep_best_checkpoints
        self.no_save_optimizer_state = no_save_optimizer_state
        self.ranks = ranks
        self.model = torch.nn.Linear(8, 4)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.num_updates = 0
        self.best: float | None = None
        self.epoch = 1
        self.iterations_in_epoch = 0

    def update(self) -> None:
        import torch

        self.optimizer.zero_grad()
        self.model(torch.randn(2, 8)).pow(2).mean().backward()
        self.optimizer.step()
        self.num_updates += 1
        self.iterations_in_epoch += 1

    def state_dict(self, val_loss: float | None, end_of_epoch: bool) -> dict[str, Any]:
        """``Trainer.state_dict`` with ``extra_state`` updated as ``Trainer.save_checkpoint`` does."""
        meters = {"loss": ("fairseq.logging.meters", "AverageMeter", {"val": 2.5, "count": 4, "sum": 10.0, "round": 3})}
        state: dict[str, Any] = {
            "args": None,
            "cfg": {"checkpoint": {"save_dir": str(self.save_dir), "restore_file": "checkpoint_last.pt"}, "optimizer": {"_name": "adam"}},
            "model": self.model.state_dict(),
            "criterion": None,
            "optimizer_history": [
                {
                    "criterion_name": "CrossEntropyCriterion",
                    "optimizer_name": "FairseqAdam",
                    "lr_scheduler_state": {"best": self.best},
                    "num_updates": self.num_updates,
                }
            ],
            "task_state": {},
            "extra_state": {"metrics": {"train": meters}, "previous_training_time": 1.5},
        }
        if not self.no_save_optimizer_state:
            state["last_optimizer_state"] = self.optimizer.state_dict()
        iterator = {"version": 2, "epoch": self.epoch + 1, "iterations_in_epoch": 0, "shuffle": True} if end_of_epoch else {
            "version": 2, "epoch": self.epoch, "iterations_in_epoch": self.iterations_in_epoch, "shuffle": True,
        }  # fmt: skip
        state["extra_state"].update({"train_iterator": iterator, "val_loss": val_loss})
        if self.best is not None:
            state["extra_state"]["best"] = self.best
        return state

    def names(self, val_loss: float | None, end_of_epoch: bool, suffix: str) -> list[str]:
        """``checkpoint_conds`` of ``save_checkpoint``, in its order (``save_interval`` 1)."""
        epoch, updates = self.epoch, self.num_updates
        conds = {
            f"checkpoint{epoch}{suffix}.pt": end_of_epoch and not self.no_epoch_checkpoints,
            f"checkpoint_{epoch}_{updates}{suffix}.pt": not end_of_epoch
            and self.save_interval_updates > 0
            and updates % self.save_interval_updates == 0,
            f"checkpoint_best{suffix}.pt": val_loss is not None and (self.best is None or val_loss <= self.best),
        }
        if val_loss is not None and self.keep_best_checkpoints > 0:
            conds[f"checkpoint.best_loss_{val_loss:.3f}{epoch % self.keep_best_checkpoints}{suffix}.pt"] = True
        conds[f"checkpoint_last{suffix}.pt"] = True
        return [name for name, cond in conds.items() if cond]

    def save(self, val_loss: float | None = None, *, end_of_epoch: bool, copies: bool = True) -> list[Path]:
        """One ``save_checkpoint`` call; ``copies=False`` stops after the first file (killed)."""
        import torch

        if val_loss is not None:
            self.best = val_loss if self.best is None else min(val_loss, self.best)
        written: list[Path] = []
        for rank in range(self.ranks):
            suffix = f"-shard{rank}" if self.ranks > 1 else ""
            names = self.names(val_loss, end_of_epoch, suffix)
            first = self.save_dir / names[0]
            self.save_dir.mkdir(parents=True, exist_ok=True)
            torch.save(self.state_dict(val_loss, end_of_epoch), str(first) + ".tmp")
            (self.save_dir / (names[0] + ".tmp")).rename(first)
            written.append(first)
            for name in names[1:] if copies else ():
                shutil.copyfile(first, self.save_dir / name)
        if not end_of_epoch or not self.keep_best_checkpoints:
            return written
        kept = sorted(self.save_dir.glob("checkpoint.best_loss_*.pt"), key=lambda p: float(p.name.split("_")[-1][:-4]))
        for old in kept[self.keep_best_checkpoints :]:
            old.unlink()
        return written

    def epochs(self, count: int, updates: int = 4, losses: Sequence[float] = ()) -> FairseqTrainer:
        """``count`` whole epochs of ``updates`` each, saving at interval updates and epoch ends."""
        for _ in range(count):
            for _ in range(updates):
                self.update()
                if self.save_interval_updates and self.num_updates % self.save_interval_updates == 0 and self.iterations_in_epoch < updates:
                    self.save(end_of_epoch=False)
            loss = losses[self.epoch - 1] if len(losses) >= self.epoch else 3.0 / self.epoch
            self.save(loss, end_of_epoch=True)
            self.epoch += 1
            self.iterations_in_epoch = 0
        return self


def fairseq_resume(path: str | Path, into: FairseqTrainer | None = None) -> dict[str, Any]:
    """``load_checkpoint`` + ``Trainer.load_checkpoint`` for ``--restore-file path`` on one rank:
    the weights into the model, ``last_optimizer_state`` into Adam where there is one (and then
    the scheduler's state and ``num_updates``), and the epoch the iterator goes on at; ``into``: a
    trainer to resume (``save_checkpoint.best`` from ``extra_state["best"]`` too). Raises as
    fairseq does on a file ``torch.load`` cannot read."""
    torch = pytest.importorskip("torch")
    with open(path, "rb") as f:
        state = torch.load(f, map_location=torch.device("cpu"), weights_only=False)
    model = torch.nn.Linear(8, 4) if into is None else into.model
    model.load_state_dict(state["model"], strict=True)
    num_updates, optimizer, scheduler = 0, None, None
    optimizer_state = state.get("last_optimizer_state", None)
    if optimizer_state is not None:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3) if into is None else into.optimizer
        scheduler = state["optimizer_history"][-1]["lr_scheduler_state"]
        optimizer.load_state_dict(optimizer_state)
        num_updates = state["optimizer_history"][-1]["num_updates"]
    iterator = state["extra_state"]["train_iterator"]
    if into is not None:
        into.num_updates, into.epoch, into.iterations_in_epoch = num_updates, iterator["epoch"], iterator["iterations_in_epoch"]
        into.best = state["extra_state"].get("best", into.best)
    return {
        "model": model,
        "optimizer": optimizer,
        "lr_scheduler_state": scheduler,
        "num_updates": num_updates,
        "epoch": iterator["epoch"],
        "in_epoch": iterator["iterations_in_epoch"],
    }


def fairseq_relaunched(save_dir: Path) -> FairseqTrainer:
    """``fairseq-train`` launched again on ``save_dir``: the default ``--restore-file
    checkpoint_last.pt`` resumed (``load_checkpoint``), or a fresh start where it is missing."""
    trainer = FairseqTrainer(save_dir)
    if (save_dir / "checkpoint_last.pt").exists():
        fairseq_resume(save_dir / "checkpoint_last.pt", into=trainer)
    return trainer


# --- nanoGPT (its train.py's save and resume, around a GPT-shaped stand-in) -----------------------


def nanogpt_model(n_embd: int = 16, vocab_size: int = 32, block_size: int = 8) -> Any:
    """A module whose state dict is shaped as nanoGPT's ``GPT`` (``model.py``) with one layer:
    ``transformer.wte`` tied to ``lm_head`` (one storage saved twice), ``transformer.h.0.*``."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Block(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd, bias=False)
            self.attn = nn.ModuleDict(
                {"c_attn": nn.Linear(n_embd, 3 * n_embd, bias=False), "c_proj": nn.Linear(n_embd, n_embd, bias=False)}
            )
            self.ln_2 = nn.LayerNorm(n_embd, bias=False)
            self.mlp = nn.ModuleDict(
                {"c_fc": nn.Linear(n_embd, 4 * n_embd, bias=False), "c_proj": nn.Linear(4 * n_embd, n_embd, bias=False)}
            )

    class GPT(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.transformer = nn.ModuleDict(
                {
                    "wte": nn.Embedding(vocab_size, n_embd),
                    "wpe": nn.Embedding(block_size, n_embd),
                    "h": nn.ModuleList([Block()]),
                    "ln_f": nn.LayerNorm(n_embd, bias=False),
                }
            )
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
            self.transformer["wte"].weight = self.lm_head.weight

        def forward(self, idx: Any) -> Any:
            x = self.transformer["wte"](idx) + self.transformer["wpe"](torch.arange(idx.shape[1]))
            block = self.transformer["h"][0]
            x = x + block.attn["c_proj"](block.attn["c_attn"](block.ln_1(x))[..., :n_embd])
            x = x + block.mlp["c_proj"](block.mlp["c_fc"](block.ln_2(x)))
            return self.lm_head(self.transformer["ln_f"](x))

    return GPT()


NANOGPT_ARGS = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "bias": False, "vocab_size": 32, "dropout": 0.0}


def nanogpt_optimizer(model: Any) -> Any:
    """``GPT.configure_optimizers``: AdamW, decay for 2-D parameters, none for the rest."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95))


def nanogpt_train(out_dir: Path, max_iters: int, eval_interval: int = 2, resume: bool = False, **config: Any) -> tuple[Any, Any, int]:
    """``train.py``'s loop: an update per iteration, and at every ``eval_interval`` (with
    ``always_save_checkpoint``) ``torch.save`` of its dict straight over ``out_dir/ckpt.pt``;
    with ``resume`` (``--init_from=resume``) from :func:`nanogpt_load` of ``out_dir``, whose
    ``iter_num`` it saves again at once (an eval iteration)."""
    import torch

    torch.manual_seed(0)
    if resume:
        model, optimizer, checkpoint = nanogpt_load(out_dir)
        iter_num = int(checkpoint["iter_num"])
    else:
        model = nanogpt_model()
        optimizer = nanogpt_optimizer(model)
        iter_num = 0
    out_dir.mkdir(parents=True, exist_ok=True)
    init_from = "resume" if resume else "scratch"
    settings = {"out_dir": str(out_dir), "eval_interval": eval_interval, "always_save_checkpoint": True, "init_from": init_from, **config}
    while True:
        if iter_num % eval_interval == 0 and iter_num > 0:
            best_val_loss = torch.tensor(2.0 / iter_num)
            checkpoint = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "model_args": dict(NANOGPT_ARGS),
                "iter_num": iter_num,
                "best_val_loss": best_val_loss,
                "config": settings,
            }
            torch.save(checkpoint, out_dir / "ckpt.pt")
        if iter_num >= max_iters:
            return model, optimizer, iter_num
        idx = torch.randint(0, 32, (2, 8))
        loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        iter_num += 1


def nanogpt_resume(out_dir: str | Path) -> tuple[Any, int]:
    """``train.py --init_from=resume``: the model and the ``iter_num`` it goes on at."""
    model, _, checkpoint = nanogpt_load(out_dir)
    return model, checkpoint["iter_num"]


def nanogpt_load(out_dir: str | Path) -> tuple[Any, Any, dict[str, Any]]:
    """``train.py --init_from=resume --out_dir=out_dir``: ``torch.load`` of ``ckpt.pt`` (torch's
    default, ``weights_only``), the ``_orig_mod.`` prefix stripped, the weights and the optimizer
    state loaded; the model, the optimizer and the checkpoint (``iter_num``, ``best_val_loss``)."""
    import torch

    checkpoint = torch.load(Path(out_dir) / "ckpt.pt", map_location="cpu")
    model = nanogpt_model(**{k: checkpoint["model_args"][k] for k in ("n_embd", "vocab_size", "block_size")})
    state_dict = checkpoint["model"]
    for k in list(state_dict):
        if k.startswith("_orig_mod."):
            state_dict[k[len("_orig_mod.") :]] = state_dict.pop(k)
    model.load_state_dict(state_dict)
    optimizer = nanogpt_optimizer(model)
    optimizer.load_state_dict(checkpoint["optimizer"])
    return model, optimizer, checkpoint


# --- Orbax (JAX on the CPU): a CheckpointManager of a hand-written Adam's state ---------------------


def orbax_train(directory: Path, steps: int, step_prefix: str | None = None) -> None:
    """A linear model trained by Adam (its state shaped as optax's ``ScaleByAdamState``: ``count``,
    ``mu``, ``nu``) on fixed data, one ``CheckpointManager.save`` a step up to ``steps`` (into
    ``<step_prefix>_<step>`` where a prefix is given), resumed from
    ``manager.restore(manager.latest_step())`` where a step is saved (a fresh start where none)."""
    jax = pytest.importorskip("jax")
    ocp = pytest.importorskip("orbax.checkpoint")
    jnp = jax.numpy
    data = jax.random.normal(jax.random.PRNGKey(1), (16, 64))
    target = data @ jax.random.normal(jax.random.PRNGKey(2), (64, 64))

    def loss(params: Any) -> Any:
        return jnp.mean((data @ params["w"] + params["b"] - target) ** 2)

    def adam_step(state: dict[str, Any]) -> dict[str, Any]:
        grads, adam = jax.grad(loss)(state["params"]), state["opt_state"]
        count = adam["count"] + 1
        mu = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, adam["mu"], grads)
        nu = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, adam["nu"], grads)
        first, second = 1 - 0.9**count, 1 - 0.999**count  # bias corrections
        params = jax.tree_util.tree_map(lambda p, m, v: p - 1e-2 * (m / first) / (jnp.sqrt(v / second) + 1e-8), state["params"], mu, nu)
        return {"params": params, "opt_state": {"count": count, "mu": mu, "nu": nu}, "step": int(state["step"]) + 1}

    params = {"w": jax.random.normal(jax.random.PRNGKey(0), (64, 64)) * 0.1, "b": jnp.zeros((64,))}
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = {"params": params, "opt_state": {"count": jnp.asarray(0, jnp.int32), "mu": zeros, "nu": zeros}, "step": 0}
    with ocp.CheckpointManager(directory.resolve(), options=ocp.CheckpointManagerOptions(step_prefix=step_prefix)) as manager:
        if manager.latest_step() is not None:
            state = manager.restore(manager.latest_step(), args=ocp.args.StandardRestore(state))
        while int(state["step"]) < steps:
            state = adam_step(state)
            manager.save(state["step"], args=ocp.args.StandardSave(state))
        manager.wait_until_finished()


# --- LitGPT (its own save functions, with a real Fabric) ------------------------------------------


class LitGptTraining:
    """A tiny LitGPT ``GPT`` on a CPU ``lightning.Fabric``, saved by LitGPT's own code (litgpt
    0.5.13): ``pretrain.save_checkpoint`` (``step-{:08d}``) or, for ``finetune_full``, its
    ``fabric.save`` of ``{model, optimizer, scheduler, iter_num, step_count}`` into
    ``step-{:06d}`` with ``save_config``, ``save_hyperparameters`` and ``save_prompt_style``;
    ``lora`` saves with ``finetune.lora.save_lora_checkpoint``. ``resume()`` is what the scripts do
    with ``--resume``: ``find_resume_path``, then ``fabric.load`` into a fresh state."""

    def __init__(self, out_dir: Path, method: str = "full") -> None:
        pytest.importorskip("litgpt")
        import lightning
        import torch
        from litgpt import Config
        from litgpt.model import GPT

        torch.manual_seed(0)
        self.out_dir, self.method = out_dir, method
        tiny = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "vocab_size": 32, "padded_vocab_size": 32}
        self.config = Config(**tiny)
        if method == "lora":
            from litgpt.lora import GPT as LoraGPT
            from litgpt.lora import Config as LoraConfig
            from litgpt.lora import mark_only_lora_as_trainable

            self.config = LoraConfig(**tiny, lora_r=2, lora_query=True)
            module = LoraGPT(self.config)
            mark_only_lora_as_trainable(module)
            self.fabric = lightning.Fabric(accelerator="cpu", devices=1)
            self.state = self._state(module)
        else:
            self.fabric = lightning.Fabric(accelerator="cpu", devices=1)
            self.state = self._state(GPT(self.config))

    def _state(self, module: Any) -> dict[str, Any]:
        import torch

        model = self.fabric.setup(module)
        trained = [p for p in model.parameters() if p.requires_grad]
        optimizer = self.fabric.setup_optimizers(torch.optim.AdamW(trained, lr=1e-3))
        if self.method == "pretrain":
            return {"model": model, "optimizer": optimizer, "train_dataloader": _LoaderState(), "iter_num": 0, "step_count": 0}
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        return {"model": model, "optimizer": optimizer, "scheduler": scheduler, "iter_num": 0, "step_count": 0}

    def _argv(self) -> list[str]:
        command = {"full": "finetune_full", "lora": "finetune_lora", "pretrain": "pretrain"}[self.method]
        base = ["pythia-14m"] if self.method == "pretrain" else ["checkpoints/tiny"]
        return ["litgpt", command, *base, "--out_dir", str(self.out_dir)]

    def train(self, steps: int, save_interval: int = 2) -> LitGptTraining:
        import torch

        model, optimizer = self.state["model"], self.state["optimizer"]
        for _ in range(steps):
            tokens = torch.randint(0, 32, (2, 8))
            self.fabric.backward(model(tokens).float().pow(2).mean())
            optimizer.step()
            optimizer.zero_grad()
            if "scheduler" in self.state:
                self.state["scheduler"].step()
            self.state["iter_num"] += 1
            self.state["step_count"] += 1
            if self.state["step_count"] % save_interval == 0:
                self.save()
        return self

    def save(self, final: bool = False) -> Path:
        import sys

        argv, sys.argv = sys.argv, self._argv()  # save_hyperparameters parses the command line
        try:
            return self._save(final)
        finally:
            sys.argv = argv

    def _save(self, final: bool) -> Path:
        from litgpt import pretrain
        from litgpt.finetune import full, lora
        from litgpt.parser_config import save_hyperparameters
        from litgpt.prompts import Alpaca, save_prompt_style
        from litgpt.utils import save_config

        step = self.state["step_count"]
        if self.method == "pretrain":
            path = self.out_dir / ("final" if final else f"step-{step:08d}") / "lit_model.pth"
            pretrain.save_checkpoint(self.fabric, self.state, None, path)
            return path
        name = "lit_model.pth.lora" if self.method == "lora" else "lit_model.pth"
        path = self.out_dir / ("final" if final else f"step-{step:06d}") / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.method == "lora":
            lora.save_lora_checkpoint(self.fabric, self.state["model"], path)
        else:
            self.fabric.save(path, {"model": self.state["model"]} if final else self.state)
        save_config(self.config, path.parent)
        save_hyperparameters(lora.setup if self.method == "lora" else full.setup, path.parent)
        save_prompt_style(Alpaca(), path.parent)
        return path

    def resume(self, resume: Any = "auto") -> dict[str, Any]:
        """``--resume`` (``auto``, or a path): ``find_resume_path``, then a strict ``fabric.load``
        into a fresh model, optimizer (and scheduler); the loaded state, with ``path`` the file."""
        from litgpt.utils import find_resume_path

        path = find_resume_path(resume if resume == "auto" else Path(resume), self.out_dir)
        fresh = LitGptTraining(self.out_dir, self.method)
        if path is not None:
            fresh.fabric.load(path, fresh.state)
        return {**fresh.state, "path": path}


class _LoaderState:
    """What Fabric saves of pretraining's ``StreamingDataLoader``: its ``state_dict``."""

    def __init__(self) -> None:
        self.seen = 0

    def state_dict(self) -> dict[str, int]:
        return {"seen": self.seen}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.seen = state["seen"]


LITGPT_TINY = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "vocab_size": 32, "padded_vocab_size": 32}


def _litgpt_tokens() -> Any:
    """A LitGPT ``DataModule`` of random tokens whose train loader is stateful as pretraining's
    ``StreamingDataLoader`` is (``fabric.save`` calls its ``state_dict``): it counts the batches it gave."""
    import torch
    from litgpt.data import DataModule

    class Loader(torch.utils.data.DataLoader):  # type: ignore[type-arg]
        def __init__(self, rows: Any, batch_size: int) -> None:
            super().__init__(rows, batch_size=batch_size)
            self.given = 0

        def __iter__(self) -> Any:
            for batch in super().__iter__():
                self.given += 1
                yield batch

        def state_dict(self) -> dict[str, int]:
            return {"given": self.given}

        def load_state_dict(self, state: dict[str, int]) -> None:
            self.given = state["given"]

    class Tokens(DataModule):  # type: ignore[misc]
        def connect(self, tokenizer: Any = None, batch_size: int = 1, max_seq_length: int | None = None, **kwargs: Any) -> None:
            self.batch_size, self.length = batch_size, (max_seq_length or LITGPT_TINY["block_size"]) + 1

        def train_dataloader(self) -> Loader:
            rows = torch.randint(0, LITGPT_TINY["vocab_size"], (16, self.length), generator=torch.Generator().manual_seed(0))
            return Loader(rows, self.batch_size)

        def val_dataloader(self) -> Loader:
            return self.train_dataloader()

    return Tokens()


class _PretrainStopped(Exception):
    """Raised from inside ``litgpt.pretrain``: after a save (the job's time limit), or once it has
    restored (``state`` then holds what it restored)."""

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        self.state = state


def litgpt_pretrain(out_dir: Path, saves: int | None = None, resume: bool | str | Path = False) -> dict[str, Any] | None:
    """``litgpt pretrain`` itself (litgpt 0.5.13 ``pretrain.setup``: its Fabric, ``main``, ``fit`` and
    ``save_checkpoint``) of a tiny ``GPT`` on the CPU (``--precision 32-true``, ``torch.compile``
    off), two tokens-batches a step, saving every 2 steps into ``out_dir/step-{:08d}/``, with
    ``--resume`` as given (``"auto"``, ``True`` or a path). With ``saves``, the job ends after that
    many saves; without, it stops once ``main`` has restored and returns the state it restored
    (``find_resume_path``, then ``fabric.load`` into the model, optimizer, loader and counters)."""
    pytest.importorskip("litgpt")
    import torch
    from litgpt import Config, pretrain
    from litgpt.args import EvalArgs, LogArgs, TrainArgs

    save, fit = pretrain.save_checkpoint, pretrain.fit
    done: list[Path] = []

    def save_then_stop(fabric: Any, state: dict[str, Any], tokenizer_dir: Any, checkpoint_file: Path) -> None:
        save(fabric, state, tokenizer_dir, checkpoint_file)
        done.append(checkpoint_file)
        if len(done) == saves:
            raise _PretrainStopped

    def restored(fabric: Any, devices: int, state: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        raise _PretrainStopped(state)

    pretrain.save_checkpoint = save_then_stop
    if saves is None:
        pretrain.fit = restored
    # save_hyperparameters parses the command line into hyperparameters.yaml
    argv, sys.argv = sys.argv, ["litgpt", "pretrain", "pythia-14m", "--out_dir", str(out_dir), "--precision", "32-true"]
    train = TrainArgs(
        save_interval=2,
        log_interval=1000,
        global_batch_size=2,
        micro_batch_size=2,
        lr_warmup_steps=1,
        max_tokens=10_000,
        max_norm=1.0,
        tie_embeddings=False,
    )
    try:
        with torch._dynamo.config.patch(disable=True):
            pretrain.setup(
                "tiny",
                model_config=Config(name="tiny", **LITGPT_TINY),
                out_dir=out_dir,
                precision="32-true",
                resume=resume,
                data=_litgpt_tokens(),
                train=train,
                eval=EvalArgs(interval=1000, max_iters=1),
                log=LogArgs(),
                devices=1,
                logger_name="csv",
            )
    except _PretrainStopped as stopped:
        return stopped.state
    finally:
        pretrain.save_checkpoint, pretrain.fit, sys.argv = save, fit, argv
    raise AssertionError("pretraining ended before it was stopped")


# --- timm (its own checkpoint_saver.py and _helpers.py, without `import timm`) -------------------


@functools.cache
def timm_own() -> tuple[Any, Any]:
    """The installed timm's own ``utils/checkpoint_saver.py`` (``CheckpointSaver``) and
    ``models/_helpers.py`` (``resume_checkpoint``), loaded from their files: ``import timm`` (and
    ``timm.utils``) imports torchvision, whose wheels do not match this torch, so ``pip install timm
    --no-deps`` installs them unimportable as a package. ``checkpoint_saver.py`` imports
    ``unwrap_model`` and ``get_state_dict`` from ``utils/model.py`` (torchvision too): a package of
    two stand-ins holds them, doing what they do for a model that is not wrapped. Skips where timm is
    not installed."""
    import types

    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("timm is not installed (pip install timm --no-deps)")
    root = Path(spec.submodule_search_locations[0])
    package = types.ModuleType("_timm_utils")
    package.__path__ = []
    model = types.ModuleType("_timm_utils.model")
    model.unwrap_model = lambda module: module  # type: ignore[attr-defined]
    model.get_state_dict = lambda module, unwrap_fn: unwrap_fn(module).state_dict()  # type: ignore[attr-defined]
    sys.modules |= {"_timm_utils": package, "_timm_utils.model": model}

    def load(relative: str, name: str) -> Any:
        found = importlib.util.spec_from_file_location(name, root / relative)
        assert found is not None and found.loader is not None
        module = importlib.util.module_from_spec(found)
        sys.modules[name] = module
        found.loader.exec_module(module)
        return module

    return load("utils/checkpoint_saver.py", "_timm_utils.checkpoint_saver"), load("models/_helpers.py", "_timm_helpers")


def timm_model() -> Any:
    """The model and optimizer of :func:`timm_train`: two linear layers, SGD with momentum (train.py's ``--opt sgd``)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def timm_train(output: Path, epochs: range, resume: Path | None = None) -> None:
    """train.py's loop around timm's own ``CheckpointSaver`` (``checkpoint_dir=recovery_dir=output``,
    ``--checkpoint-hist 10``, a higher metric better): four updates an epoch, then
    ``saver.save_checkpoint(epoch, metric=...)``, each epoch better than the last. ``resume``: first
    ``resume_checkpoint(model, resume, optimizer)``, as ``--resume`` does."""
    import argparse

    import torch

    saver_module, helpers = timm_own()
    model, optimizer = timm_model()
    if resume is not None:
        helpers.resume_checkpoint(model, str(resume), optimizer, log_info=False)
    output.mkdir(parents=True, exist_ok=True)
    (output / "args.yaml").write_text("model: mlp\nopt: sgd\nmomentum: 0.9\n")  # train.py writes it before training
    args = argparse.Namespace(model="mlp", opt="sgd", lr=0.1, momentum=0.9, epochs=10, checkpoint_hist=10)
    saver = saver_module.CheckpointSaver(model, optimizer, args=args, checkpoint_dir=str(output), recovery_dir=str(output))
    generator = torch.Generator().manual_seed(epochs[0])
    for epoch in epochs:
        for _ in range(4):
            model(torch.randn(8, 32, generator=generator)).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        saver.save_checkpoint(epoch, metric=50.0 + epoch)


# --- Megatron release/, DeepSpeed universal, Lightning and HF under DeepSpeed/FSDP, NeMo -----------


def megatron_release(folder: Path, ranks: int = 2, tracker: str | None = "release", iterations: tuple[int, ...] = ()) -> Path:
    """A released Megatron model (``megatron/training/checkpointing.py``: ``get_checkpoint_name``
    with ``release=True``): ``release/mp_rank_XX/model_optim_rng.pt`` holding the model alone, as
    the converters write it; then ``iterations`` saved after it by training (with
    ``distrib_optim.pt``), and the tracker saying ``tracker`` (None: none written)."""
    torch = pytest.importorskip("torch")
    for rank in range(ranks):
        rank_folder = folder / "release" / f"mp_rank_{rank:02d}"
        rank_folder.mkdir(parents=True)
        torch.save({"model": {"w": torch.ones(2)}, "checkpoint_version": 3.0}, rank_folder / "model_optim_rng.pt")
    for iteration in iterations:
        for rank in range(ranks):
            rank_folder = folder / f"iter_{iteration:07d}" / f"mp_rank_{rank:02d}"
            rank_folder.mkdir(parents=True)
            torch.save({"model": {"w": torch.ones(2)}, "optimizer": {}, "iteration": iteration}, rank_folder / "model_optim_rng.pt")
            torch.save({"param_state": {}}, rank_folder / "distrib_optim.pt")
    if tracker is not None:
        (folder / "latest_checkpointed_iteration.txt").write_text(tracker)
    return folder


def megatron_tracker(folder: Path) -> tuple[int, bool]:
    """What Megatron-LM makes of ``folder``'s tracker: ``read_metadata`` of
    ``megatron/training/checkpointing.py`` (NVIDIA/Megatron-LM), without its maximum over the
    ranks: ``(iteration, release)``; it exits on text that is neither a number nor ``release``,
    and asserts a positive iteration or a release."""
    tracker = folder / "latest_checkpointed_iteration.txt"
    metastring = tracker.read_text().strip()
    iteration, release = 0, False
    try:
        iteration = int(metastring)
    except ValueError:
        release = metastring == "release"
        if not release:
            raise SystemExit(f"ERROR: Invalid metadata file {tracker}. Exiting") from None
    assert iteration > 0 or release, f"error parsing metadata file {tracker}"
    return iteration, release


def deepspeed_universal(
    folder: Path, steps: tuple[int, ...] = (100, 200), params: tuple[str, ...] = ("linear.weight", "linear.bias"), latest: bool = True
) -> Path:
    """``ds_to_universal.py --input_folder global_stepN --output_folder global_stepN_universal``
    beside each tag of :func:`deepspeed_run` (``deepspeed/checkpoint/ds_to_universal.py``, ``main``):
    per parameter ``zero/<name>/{fp32,exp_avg,exp_avg_sq,step}.pt`` (``_merge_zero_shards``: each
    ``{"param": tensor}``), ``zero/optimizer_state.pt`` (``_save_optimizer_state``: the optimizer's
    state dict without the sharded states, with ``param_groups``), then the copied
    ``mp_rank_00_model_states.pt`` (with ``universal_checkpoint_info``); and ``latest_universal``
    (which the user writes: the converter does not) naming the newest."""
    torch = pytest.importorskip("torch")
    if not folder.exists():
        deepspeed_run(folder, steps)
    for step in steps:
        out = folder / f"global_step{step}_universal"
        for param in params:
            (out / "zero" / param).mkdir(parents=True)
            for state in ("fp32", "exp_avg", "exp_avg_sq"):
                torch.save({"param": torch.ones(4)}, out / "zero" / param / f"{state}.pt")
            torch.save(step, out / "zero" / param / "step.pt")
        torch.save({"zero_stage": 2, "param_groups": [{"lr": 0.1, "params": [0, 1]}]}, out / "zero" / "optimizer_state.pt")
        model = {
            "module": {p: torch.ones(4) for p in params},
            "global_steps": step,
            "universal_checkpoint_info": {"universal_checkpoint_version": 0.4},
        }
        torch.save(model, out / "mp_rank_00_model_states.pt")
    if latest:
        (folder / "latest_universal").write_text(f"global_step{steps[-1]}_universal")
    return folder


def hf_fsdp_run(output: Path, steps: int = 4, sharded: bool = True) -> Path:
    """A real ``transformers.Trainer`` (:func:`hf_trainer`) under FSDP2 in two processes on gloo,
    saving every 2 of ``steps`` steps through accelerate (``accelerate/utils/fsdp_utils.py``):
    ``SHARDED_STATE_DICT`` saves ``pytorch_model_fsdp_0/`` (``save_fsdp_model``) and
    ``optimizer_0/`` (``save_fsdp_optimizer``) with ``dcp.save``, a ``.metadata`` and one
    ``__<rank>_0.distcp`` per process (and no ``training_args.bin``); ``FULL_STATE_DICT``
    ``pytorch_model_fsdp.bin`` and ``optimizer.bin`` beside ``model.safetensors``. Beside them the
    Trainer's ``scheduler.pt``, ``rng_state_<rank>.pth`` and ``trainer_state.json``."""
    done = hf_fsdp_train(output, steps, sharded=sharded)
    assert done.count == steps, done.output[-3000:]
    return output


def hf_fsdp_train(output: Path, steps: int, *resumes: str | bool, sharded: bool = True) -> Launched:
    """The Trainer of :func:`hf_fsdp_run` trained to ``steps``: ``trainer.train()``, or
    ``trainer.train(resume_from_checkpoint=...)`` with each of ``resumes`` in turn (each a new
    Trainer of a new model) until one trains."""
    return launched("hf_fsdp", output=str(output), steps=steps, resumes=resumes or [None], sharded=sharded)


def accelerate_fsdp_run(project: Path, saves: int = 2) -> Path:
    """``Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2,
    state_dict_type="SHARDED_STATE_DICT"))`` in two processes on gloo: a step and a
    ``save_state()``, ``saves`` times, with automatic checkpoint naming. Each
    ``project/checkpoints/checkpoint_<n>/`` holds ``pytorch_model_fsdp_0/`` and ``optimizer_0/``
    (DCP), ``scheduler.bin`` and ``random_states_<rank>.pkl``. Returns ``project/checkpoints``."""
    done = accelerate_fsdp_load(project, saves=saves)
    assert done.count == saves, done.output[-3000:]
    return project / "checkpoints"


def accelerate_fsdp_load(project: Path, *folders: str | None, saves: int = 0) -> Launched:
    """The accelerator of :func:`accelerate_fsdp_run`: ``load_state(folder)`` with each of
    ``folders`` in turn (None: a bare ``load_state()``) until one loads, then a step and a
    ``save_state()``, ``saves`` times."""
    return launched("accelerate_fsdp", project=str(project), folders=folders, saves=saves)


class Launched(NamedTuple):
    """What two processes launched by ``torchrun`` did, as rank 0 saw it."""

    returncode: int
    failed: tuple[str, ...]
    """Each try that raised (a resume, a load), in turn: the exception's type and first line."""
    count: int | None
    """What the try that worked got through (steps, saves, epochs); None where none did."""
    output: str
    """All they printed."""


_DONE, _FAILED = "ckptdoctor-test-done", "ckptdoctor-test-failed"


def launched(worker: str, **arguments: Any) -> Launched:
    """``worker`` of this module run by ``torchrun --standalone --nproc_per_node 2`` on the CPU:
    two processes in a gloo group, as a launcher starts them on a node of GPUs."""
    pytest.importorskip("torch.distributed.run")
    if importlib.util.find_spec("deepspeed") is not None:  # a worker may run DeepSpeed's strategy (mmengine's)
        deepspeed_op()
    script = [__file__, worker, json.dumps(arguments)]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *script]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "DS_ACCELERATOR": "cpu"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    counts = re.findall(rf"{_DONE} ([0-9]+)\n", done.stdout)
    failed = tuple(re.findall(rf"{_FAILED} (.*)\n", done.stdout))
    return Launched(done.returncode, failed, int(counts[0]) if done.returncode == 0 and counts else None, done.stdout + done.stderr)


def _said(line: str) -> None:
    """Rank 0 says it on a line of its own (the ranks' prints interleave)."""
    if os.environ.get("RANK") == "0":
        print(f"\n{line}", flush=True)


def _tried(attempt: Callable[[], int]) -> bool:
    """Whether ``attempt`` worked; rank 0 says what it got through, or what it raised."""
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

    try:
        count = attempt()
    except (Exception, CheckpointException) as error:  # every rank raises it: a DCP load gathers each rank's failure
        _said(f"{_FAILED} {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
        return False
    _said(f"{_DONE} {count}")
    return True


def _fsdp_on_cpu() -> None:
    """accelerate turns FSDP on only for accelerator devices: ``AcceleratorState.__init__`` keeps
    the plugin for ``MULTI_GPU`` and the like and drops it for ``MULTI_CPU``. torch's FSDP2
    (``fully_shard``) runs on gloo: the state is set as accelerate sets it on GPUs, and all that
    follows (the Trainer's FSDP path, ``save_fsdp_model``, DCP) is the frameworks' own code."""
    import accelerate.state
    from accelerate.utils import DistributedType

    made = accelerate.state.AcceleratorState.__init__

    def init(self: Any, *args: Any, fsdp_plugin: Any = None, **kwargs: Any) -> None:
        made(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = accelerate.state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin

    accelerate.state.AcceleratorState.__init__ = init


def _hf_fsdp_worker(output: str, steps: int, resumes: list[str | bool | None], sharded: bool) -> None:
    _fsdp_on_cpu()
    state = "SHARDED_STATE_DICT" if sharded else "FULL_STATE_DICT"
    config = {"fsdp_version": 2, "state_dict_type": state, "transformer_layer_cls_to_wrap": ["GPT2Block"]}

    def train(resume: str | bool | None) -> int:
        trainer = hf_trainer(Path(output), steps, fsdp=True, fsdp_config=config)
        trainer.train(resume_from_checkpoint=resume)
        return int(trainer.state.global_step)

    any(_tried(functools.partial(train, resume)) for resume in resumes)


def _accelerate_fsdp_worker(project: str, folders: list[str | None], saves: int) -> None:
    _fsdp_on_cpu()
    from accelerate.utils import FullyShardedDataParallelPlugin, ProjectConfiguration

    accelerate, model, optimizer, scheduler = accelerate_model()
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type="SHARDED_STATE_DICT")
    config = ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True, total_limit=3)
    accelerator = accelerate.Accelerator(cpu=True, fsdp_plugin=plugin, project_config=config)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)

    def load_and_save(folder: str | None) -> int:
        if folder != "":
            accelerator.load_state(folder)
        for _ in range(saves):
            step_and_save(accelerator, model, optimizer, scheduler)
        return saves

    any(_tried(functools.partial(load_and_save, folder)) for folder in folders or [""])


# --- Lightning under DeepSpeed/FSDP (`.ckpt` folders), NeMo exp_manager ------------------------


def lightning_deepspeed_run(
    folder: Path, saves: Sequence[tuple[int, int]] = ((0, 2), (1, 4)), ranks: int = 2, last: str | None = "link"
) -> Path:
    """``.ckpt`` folders as Lightning's ``DeepSpeedStrategy.save_checkpoint`` has the engine write
    them (``engine.save_checkpoint(filepath, client_state=..., tag="checkpoint")``, DeepSpeed's
    ``engine.py``): ``latest`` holding ``checkpoint``, ``zero_to_fp32.py``,
    ``checkpoint/mp_rank_00_model_states.pt`` (the module and the client state) and one
    ``checkpoint/bf16_zero_pp_rank_<r>_mp_rank_00_optim_states.pt`` per rank. ``last``: a
    ``last.ckpt`` symlink (``"link"``), a copy (``"copy"``) or none."""
    torch = pytest.importorskip("torch")
    for epoch, step in saves:
        engine = folder / f"epoch={epoch}-step={step}.ckpt" / "checkpoint"
        engine.mkdir(parents=True)
        state = {
            "module": {"layer.weight": torch.ones(2, 4)},
            "global_steps": step,
            "dp_world_size": ranks,
            "epoch": epoch,
            "global_step": step,
        }
        torch.save(state, engine / "mp_rank_00_model_states.pt")
        for rank in range(ranks):
            partition = {"optimizer_state_dict": {"state": {}, "param_groups": []}, "ds_config": {}, "ds_version": "0.16.0"}
            torch.save(partition, engine / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
        (engine.parent / "latest").write_text("checkpoint")
        (engine.parent / "zero_to_fp32.py").write_text("# DeepSpeed's conversion script\n")
    _lightning_last(folder, saves, last)
    return folder


def lightning_fsdp_run(folder: Path, saves: Sequence[tuple[int, int]] = ((0, 2), (1, 4)), last: str | None = "link") -> Path:
    """``.ckpt`` folders as Lightning's ``FSDPStrategy(state_dict_type="sharded").save_checkpoint``
    writes them (``strategies/fsdp.py``): ``_distributed_checkpoint_save({"model": ...,
    "optimizer_0": ...}, path)`` (DCP: ``.metadata``, ``__0_0.distcp``), then ``meta.pt`` with the
    rest of the checkpoint through ``_atomic_save``; here DCP's own ``save`` in one process."""
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    for epoch, step in saves:
        path = folder / f"epoch={epoch}-step={step}.ckpt"
        path.mkdir(parents=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "torch.distributed is disabled": one process is the point
            state = {"model": model.state_dict(), "optimizer_0": optimizer.state_dict()}
            dcp.save(state, storage_writer=dcp.FileSystemWriter(str(path)))
        meta = {
            "epoch": epoch,
            "global_step": step,
            "pytorch-lightning_version": "2.5.0",
            "loops": {},
            "callbacks": {},
            "lr_schedulers": [],
        }
        torch.save(meta, path / "meta.pt")
    _lightning_last(folder, saves, last)
    return folder


def _lightning_last(folder: Path, saves: Sequence[tuple[int, int]], last: str | None) -> None:
    """``ModelCheckpoint(save_last=...)``: ``"link"`` a relative symlink, ``"copy"`` a whole save."""
    if not saves or last is None:
        return
    epoch, step = saves[-1]
    newest = f"epoch={epoch}-step={step}.ckpt"
    if last == "link":
        (folder / "last.ckpt").symlink_to(newest)
    else:
        shutil.copytree(folder / newest, folder / "last.ckpt")


def nemo_run(folder: Path, losses: Sequence[float] = (0.5, 0.3, 0.4), name: str = "megatron_gpt") -> Path:
    """NeMo's ``exp_manager`` checkpoints (``nemo/utils/exp_manager.py``, ``configure_checkpointing``:
    ``filename=f"{name}--{{{monitor}:.4f}}-{{epoch}}"``, ``CHECKPOINT_NAME_LAST = filename + "-last"``):
    Lightning checkpoints, one an epoch, and the newest's ``-last`` copy."""
    torch = pytest.importorskip("torch")
    folder.mkdir(parents=True, exist_ok=True)
    for epoch, loss in enumerate(losses):
        bundle = {
            "state_dict": {"layer.weight": torch.ones(2, 4) * epoch},
            "optimizer_states": [{"state": {}, "param_groups": [{"lr": 0.1, "params": [0]}]}],
            "lr_schedulers": [{"last_epoch": epoch}],
            "epoch": epoch,
            "global_step": 10 * (epoch + 1),
            "pytorch-lightning_version": "2.4.0",  # Trainer.save_checkpoint writes it: NeMoModelCheckpoint saves through it
        }
        torch.save(bundle, folder / f"{name}--val_loss={loss:.4f}-epoch={epoch}.ckpt")
    newest = folder / f"{name}--val_loss={losses[-1]:.4f}-epoch={len(losses) - 1}.ckpt"
    shutil.copyfile(newest, folder / f"{name}--val_loss={losses[-1]:.4f}-epoch={len(losses) - 1}-last.ckpt")
    return folder


def nemo_exp(exp_dir: Path, epochs: int, resume_from: str | None = None, callbacks: Sequence[Any] = ()) -> Any:
    """A Lightning ``Trainer`` set up by NeMo's own ``exp_manager`` (``nemo/utils/exp_manager.py``)
    as a NeMo config sets it: ``resume_if_exists`` and ``resume_ignore_no_checkpoint`` (so
    ``check_resume`` picks the ``*last.ckpt`` to resume from, or none), or ``resume_from_checkpoint``
    where ``resume_from`` names one; ``NeMoModelCheckpoint`` with its defaults (``val_loss``, top 3,
    ``-last``) but no ``.nemo`` (the module is a plain ``LightningModule``, not a ``ModelPT``); no
    TensorBoard. The log folder is ``exp_dir/tiny/run``, its checkpoints ``exp_dir/tiny/run/checkpoints``."""
    lightning = pytest.importorskip("lightning")
    from nemo.utils.exp_manager import exp_manager

    trainer = lightning.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        callbacks=list(callbacks),
    )
    config = {
        "exp_dir": str(exp_dir),
        "name": "tiny",
        "version": "run",
        "use_datetime_version": False,
        "resume_if_exists": resume_from is None,
        "resume_ignore_no_checkpoint": True,
        "resume_from_checkpoint": resume_from,
        "create_tensorboard_logger": False,
        "create_preemption_callback": False,
        "log_tflops_per_sec_per_gpu": False,
        "seconds_to_sleep": 0,
        "checkpoint_callback_params": {"always_save_nemo": False, "save_nemo_on_train_end": False},
    }
    exp_manager(trainer, config)
    return trainer


def nemo_module() -> Any:
    """:func:`tiny_module`, logging the ``val_loss`` NeMo's checkpoints are named and ranked by."""
    base = type(tiny_module())

    class Validated(base):  # type: ignore[misc, valid-type]
        def validation_step(self, batch: Any, index: int) -> None:
            self.log("val_loss", self.layer(batch).pow(2).mean())

    return Validated(4, 2)


def nemo_fit(trainer: Any, module: Any = None) -> None:
    """``trainer.fit`` of :func:`nemo_module` on 16 samples in batches of 4, validated on 8; it
    resumes from ``trainer.ckpt_path``, where ``exp_manager`` set it."""
    import torch

    torch.manual_seed(0)
    module = module if module is not None else nemo_module()
    data = torch.randn(24, 4, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(
            module,
            torch.utils.data.DataLoader(data[:16], batch_size=4),
            torch.utils.data.DataLoader(data[16:], batch_size=4),
            ckpt_path=trainer.ckpt_path,
        )


def nemo_replay_kill(run: Path, killed: Path) -> None:
    """What NeMo left in ``run`` (a checkpoints folder) when it was killed at the point
    :mod:`killer` is armed with, as recorded in ``killed/<kill point>/`` (the files it added or
    changed, and ``removed.json``), written through file descriptors, which :mod:`killer` does not count; then the
    process dies as it did."""
    import signal

    import killer

    recorded = killed / f"file{killer._TARGET}-{round(killer._FRACTION * 100)}pct"
    for name in json.loads((recorded / "removed.json").read_text()):
        os.remove(run / name)
    for file in sorted((recorded / "files").iterdir()):
        with os.fdopen(os.open(run / file.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "wb") as out:
            out.write(file.read_bytes())
    os.kill(os.getpid(), signal.SIGKILL)


_WORKERS: dict[str, Callable[..., None]] = {
    "hf_fsdp": _hf_fsdp_worker,
    "accelerate_fsdp": _accelerate_fsdp_worker,
    "mmengine": _mmengine_worker,
}
"""What :func:`launched` runs in each process."""


def leave_done() -> None:
    """End a rank of a launched job whose work is done and said: at once, without the interpreter's
    teardown, where gloo's threads abort the process now and then under load, even after
    ``destroy_process_group`` ("terminate called without an active exception", exit -6). Every
    collective this rank took part in has completed, so no other rank waits on it."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    _WORKERS[sys.argv[1]](**json.loads(sys.argv[2]))
    leave_done()
