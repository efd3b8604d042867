"""Framework runs for the tests: each written by the framework's own saving code (a tiny model on
the CPU), or, for DeepSpeed and Megatron (too heavy to install here), built by hand under their
exact names with real ``torch.save`` files.

The runs several suites share are session fixtures in ``conftest.py``, built once per test run and
never changed: a test that breaks one works on its own copy (:func:`copy_run`). The builders stay
callable for what a test must do itself with the framework (resume, train on, load).
"""

from __future__ import annotations

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


def fairseq_resume(path: str | Path) -> dict[str, Any]:
    """``load_checkpoint`` + ``Trainer.load_checkpoint`` for ``--restore-file path`` on one rank:
    the weights into the model, ``last_optimizer_state`` into Adam where there is one (and then
    ``num_updates``), and the epoch the iterator goes on at. Raises as fairseq does on a file
    ``torch.load`` cannot read."""
    torch = pytest.importorskip("torch")
    with open(path, "rb") as f:
        state = torch.load(f, map_location=torch.device("cpu"), weights_only=False)
    model = torch.nn.Linear(8, 4)
    model.load_state_dict(state["model"], strict=True)
    num_updates = 0
    optimizer_state = state.get("last_optimizer_state", None)
    if optimizer_state is not None:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        optimizer.load_state_dict(optimizer_state)
        num_updates = state["optimizer_history"][-1]["num_updates"]
    iterator = state["extra_state"]["train_iterator"]
    return {"model": model, "num_updates": num_updates, "epoch": iterator["epoch"], "in_epoch": iterator["iterations_in_epoch"]}


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


def nanogpt_train(out_dir: Path, max_iters: int, eval_interval: int = 2, **config: Any) -> tuple[Any, Any, int]:
    """``train.py``'s loop: an update per iteration, and at every ``eval_interval`` (with
    ``always_save_checkpoint``) ``torch.save`` of its dict straight over ``out_dir/ckpt.pt``."""
    import torch

    torch.manual_seed(0)
    model = nanogpt_model()
    optimizer = nanogpt_optimizer(model)
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = {"out_dir": str(out_dir), "eval_interval": eval_interval, "always_save_checkpoint": True, "init_from": "scratch", **config}
    iter_num = 0
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
    """``train.py --init_from=resume --out_dir=out_dir``: ``torch.load`` of ``ckpt.pt`` (torch's
    default, ``weights_only``), the ``_orig_mod.`` prefix stripped, the weights and the optimizer
    state loaded; the model and the ``iter_num`` it goes on at."""
    import torch

    checkpoint = torch.load(Path(out_dir) / "ckpt.pt", map_location="cpu")
    model = nanogpt_model(**{k: checkpoint["model_args"][k] for k in ("n_embd", "vocab_size", "block_size")})
    state_dict = checkpoint["model"]
    for k in list(state_dict):
        if k.startswith("_orig_mod."):
            state_dict[k[len("_orig_mod.") :]] = state_dict.pop(k)
    model.load_state_dict(state_dict)
    nanogpt_optimizer(model).load_state_dict(checkpoint["optimizer"])
    return model, checkpoint["iter_num"]


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
