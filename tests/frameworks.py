"""Framework runs for the tests: each written by the framework's own saving code (a tiny model on
the CPU), or, for DeepSpeed and Megatron (too heavy to install here), built by hand under their
exact names with real ``torch.save`` files.

The runs several suites share are session fixtures in ``conftest.py``, built once per test run and
never changed: a test that breaks one works on its own copy (:func:`copy_run`). The builders stay
callable for what a test must do itself with the framework (resume, train on, load).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


# --- DeepSpeed and Megatron, by hand --------------------------------------------------------------


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


def megatron_run(folder: Path, iterations: tuple[int, ...] = (100, 200), ranks: int = 2, tracker: int | str | None = None) -> Path:
    """Megatron-LM's legacy torch format: ``iter_<7 digits>/mp_rank_XX/model_optim_rng.pt``, then
    the tracker naming the newest iteration (or ``tracker``)."""
    torch = pytest.importorskip("torch")
    for iteration in iterations:
        for rank in range(ranks):
            rank_folder = folder / f"iter_{iteration:07d}" / f"mp_rank_{rank:02d}"
            rank_folder.mkdir(parents=True)
            torch.save({"model": {"w": torch.zeros(2)}, "optimizer": {}, "iteration": iteration}, rank_folder / "model_optim_rng.pt")
    (folder / "latest_checkpointed_iteration.txt").write_text(str(iterations[-1] if tracker is None else tracker))
    return folder


# --- OpenMMLab mmengine ---------------------------------------------------------------------------


def mmengine_run(work_dir: Path, by: str = "epoch", length: int = 4, *, resume: bool | str = False, **hook: Any) -> Any:
    """A real ``Runner.train()`` of a linear model on the CPU (16 samples in batches of 4: 4
    iterations an epoch), evaluated by an MSE metric after every epoch (``by="epoch"``) or every 4
    iterations (``by="iter"``), for ``length`` epochs or iterations, with SGD and a MultiStepLR;
    ``CheckpointHook(interval=1 or 4, max_keep_ckpts=2, save_best="mse", rule="less", **hook)``.
    ``resume``: ``Runner(resume=True)``, or ``resume=True, load_from=resume`` for a path. Returns
    the runner."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("mmengine")
    from mmengine.evaluator import BaseMetric
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

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
    runner = Runner(
        model=Net(),
        work_dir=str(work_dir),
        experiment_name=f"{work_dir}-{length}-{resume}",  # Runners in one process share instances by this name
        train_dataloader=loader,
        val_dataloader=loader,
        val_evaluator={"type": Mse},
        optim_wrapper={"optimizer": {"type": "SGD", "lr": 0.01, "momentum": 0.9}},
        param_scheduler={"type": "MultiStepLR", "milestones": [2], "by_epoch": epochs},
        train_cfg=train_cfg,
        val_cfg={},
        default_hooks={"checkpoint": checkpoint, "logger": {"type": "LoggerHook", "interval": 1}},
        resume=bool(resume),
        load_from=resume if isinstance(resume, str) else None,
        default_scope=None,
        randomness={"seed": 0},
        log_level="ERROR",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner.train()
    return runner


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
    def resumed(cls, output: Path, **settings: Any) -> Detectron2Trainer:
        """A new trainer on ``output`` after ``resume_or_load(resume=True)``: what ``last_checkpoint``
        names loaded (model, then the trainer's state), ``start_iter`` the iteration after it."""
        trainer = cls(output, **settings)
        tag = output / "last_checkpoint"
        if tag.exists():
            checkpoint = trainer.torch.load(os.path.join(output, tag.read_text().strip()), map_location="cpu")
            trainer.model.load_state_dict(checkpoint.pop("model"))
            if "trainer" in checkpoint:
                trainer.load_state_dict(checkpoint.pop("trainer"))
            trainer.start_iter = trainer.iter + 1
        return trainer
