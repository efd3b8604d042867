"""What bundled checkpoints keep under which key: one table for every reader, layout and rule
that asks.

A bundled checkpoint (Lightning's ``.ckpt``, timm's ``checkpoint-N.pth.tar``, fairseq's
``checkpoint_last.pt``, a script's ``torch.save({"model": ..., "optimizer": ...})``) is one
pickled dict. Its keys say which roles it holds (layouts confirm a file's roles from them) and
which parts are weights at all: NaN and Inf matter in model and optimizer tensors, not in a
callback's ``kth_value = inf``.

Every key below was taken from the framework's saving code (the repository, file and function
are named beside it), not from memory. A dotted key lives further down: Composer keeps every
role inside ``state``, Detectron2 its optimizer two levels down (``trainer._trainer.optimizer``).
"""

from __future__ import annotations

from ckptdoctor.model import Role

ROLE_KEYS: tuple[tuple[Role, tuple[str, ...]], ...] = (
    (Role.MODEL, (
        "state_dict",  # Lightning checkpoint_connector.dump_checkpoint; timm CheckpointSaver._save; mmengine Runner.save_checkpoint
        "model",  # fairseq Trainer.state_dict; nanoGPT train.py; LitGPT pretrain.save_checkpoint; Detectron2 (fvcore Checkpointer.save)
        "model_state_dict", "model_state", "net", "network",  # hand-written loops (the PyTorch tutorials' names)
        "module",  # DeepSpeed engine._common_checkpoint_state
        "ema",  # Ultralytics BaseTrainer.save_model: the weights of a training save (its "model" is None)
        "state.model",  # Composer State.state_dict
        "layers", "vars",  # Keras 3 H5IOStore (saving_lib._save_state): layers/<name>/vars, the model's own vars
        "model_weights",  # Keras 2 / legacy .h5 models (legacy_h5_format.save_model_to_hdf5)
    )),
    (Role.OPTIMIZER, (
        "optimizer_states",  # Lightning dump_checkpoint
        "optimizer",  # timm, mmengine, nanoGPT, LitGPT, Ultralytics, torchtune recipe_state.pt, DeepSpeed (None under ZeRO)
        "optimizer_state_dict",  # DeepSpeed _save_zero_checkpoint; hand-written loops
        "optimizer_state", "optim", "opt",  # hand-written loops
        "last_optimizer_state",  # fairseq Trainer.state_dict
        "state.optimizers",  # Composer State.get_optim_state_dict
        "optimizer_weights",  # Keras 2 / legacy .h5 models (legacy_h5_format.save_optimizer_weights_to_hdf5_group)
        "trainer._trainer.optimizer",  # Detectron2 DefaultTrainer.state_dict: SimpleTrainer.state_dict's optimizer
    )),
    (Role.SCHEDULER, (
        "lr_schedulers",  # Lightning dump_checkpoint
        "scheduler",  # LitGPT finetune/full.py; Detectron2 plain_train_net.py
        "lr_scheduler",  # DeepSpeed _common_checkpoint_state (None without a scheduler)
        "scheduler_state_dict", "scheduler_state",  # hand-written loops
        "param_schedulers",  # mmengine Runner.save_checkpoint
        "optimizer_history",  # fairseq Trainer.state_dict: [-1].lr_scheduler_state
        "state.schedulers",  # Composer State.state_dict
        "trainer.hooks.LRScheduler",  # Detectron2 TrainerBase.state_dict: the LRScheduler hook's state
    )),
)  # fmt: skip
"""Keys under which bundled checkpoints keep each part."""

PATH_KEYS = frozenset({
    "last_model_path",  # Lightning ModelCheckpoint.state_dict, dumped under `callbacks`: the last.ckpt save_last keeps ('' without)
})  # fmt: skip
"""Keys under which a checkpoint records the path of another file of its run, a few levels down:
``verify`` reports what each holds, so that a pointer the framework keeps can be missed when gone."""

NESTED_KEYS = frozenset(key for _, keys in ROLE_KEYS for key in keys if "." in key)
"""Role keys below the top level (``state.optimizers``): readers list them with the top-level keys."""
NESTED = frozenset(key.rsplit(".", depth)[0] for key in NESTED_KEYS for depth in range(1, key.count(".") + 1))
"""The dotted paths of the dicts whose own keys may name roles (Composer's ``state``, Detectron2's
``trainer`` and ``trainer._trainer``)."""

EMPTY_IS_ABSENT = frozenset(dict(ROLE_KEYS)[Role.OPTIMIZER])
"""Keys whose empty value (``[]``, ``{}``) holds no state: an optimizer's state is never empty."""


def holds(key: str, *, none: bool, empty: bool) -> bool:
    """Whether a key's value holds its part, as the readers saw the value: None never does
    (DeepSpeed's ``optimizer=None``), and an empty optimizer state is none (Lightning resumes
    from ``optimizer_states=[]`` with a fresh optimizer, silently)."""
    return not none and not (empty and key in EMPTY_IS_ABSENT)


OPTIMIZER_STATE = ("state", "param_groups")
"""The keys of a bare ``optimizer.state_dict()``."""

NOT_WEIGHTS = frozenset({
    # Lightning dump_checkpoint: loops keep progress counters (1.x: logged metrics); the
    # hyper-parameters are configuration (float("inf") defaults are common)
    "loops", "hyper_parameters", "datamodule_hyper_parameters",
    "best_val_loss",  # nanoGPT train.py: the last evaluation's loss, a tensor (inf when diverged)
    "metric",  # timm CheckpointSaver._save
    "message_hub", "meta",  # mmengine Runner.save_checkpoint: logged scalars, best scores
    "state.train_metrics", "state.eval_metrics", "state.timestamp",  # Composer State.state_dict
})  # fmt: skip
"""Keys of state that is not weights (as dotted prefixes of a tensor's path): a non-finite
value there harms no resume."""

CALLBACK_SCORES = frozenset({"best_model_score", "kth_value", "current_score", "best_k_models", "best_score"})
"""What Lightning's own callbacks keep of the monitored metric (ModelCheckpoint: ``kth_value``
is inf when ``monitor=None``; EarlyStopping: ``best_score``). Anything else a callback keeps may
be weights (StochasticWeightAveraging's ``average_model_state``, an EMA callback's copy)."""


def weights(tensor_name: str) -> bool:
    """Whether a tensor, by its dotted path in the saved object, is weights or optimizer state
    (anything not known to be something else is)."""
    if tensor_name.startswith("callbacks."):
        return CALLBACK_SCORES.isdisjoint(tensor_name.split("."))
    return not any(tensor_name == key or tensor_name.startswith(f"{key}.") for key in NOT_WEIGHTS)


def may_be_infinite(tensor_name: str) -> bool:
    """Whether a tensor may hold Inf by design: an attention mask kept as a buffer
    (``causal_mask = full(-inf).triu(1)``, ``attn_mask``). NaN is damage there as anywhere."""
    return "mask" in tensor_name.rpartition(".")[2].lower()
