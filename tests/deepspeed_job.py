"""A tiny DeepSpeed job the real-run tests launch with DeepSpeed's own launcher on the CPU
(``DS_ACCELERATOR=cpu deepspeed --num_gpus 2 --no_local_rank deepspeed_job.py ...``, two gloo
processes): not a test module, and never imported by one.

    deepspeed_job.py train STAGE SAVE_DIR [STEPS]  STEPS steps (4), ``engine.save_checkpoint(SAVE_DIR)``
                                                 after every second one
    deepspeed_job.py lightning STAGE SAVE_DIR    the same, saved as Lightning's ``DeepSpeedStrategy``
                                                 has the engine save (``save_checkpoint(filepath,
                                                 client_state=..., tag="checkpoint")`` into
                                                 ``epoch=E-step=S.ckpt/``)
    deepspeed_job.py load STAGE SAVE_DIR TAG...  ``engine.load_checkpoint(SAVE_DIR, tag=TAG)`` for each TAG
                                                 (``-``: no tag, DeepSpeed follows ``latest``), then prints
                                                 ``LOADED`` and, per TAG, the path it loaded (null where it
                                                 loaded nothing) and the step it restored, as JSON
    deepspeed_job.py restore STAGE TAG_DIR...    ``engine.load_checkpoint(parent, tag=name)`` of each tag
                                                 folder in turn, each rank printing ``RESTORED`` and what it
                                                 restored (the path loaded, a digest of module, optimizer
                                                 partition, scheduler and counters) as JSON, or ``FAILED``
                                                 and the error, with which the job ends
    deepspeed_job.py resume STAGE SAVE_DIR WRITE FRACTION
                                                 ``engine.load_checkpoint(SAVE_DIR)`` (it follows ``latest``),
                                                 two more steps and one more save, in which rank 0 is
                                                 SIGKILLed by ``killer.arm(WRITE, FRACTION)``
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

import deepspeed
import torch
from frameworks import gloo_all_reduce, leave_done

gloo_all_reduce()

RANK = int(os.environ.get("RANK", "0"))


def engine(stage: int) -> deepspeed.DeepSpeedEngine:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    config = {
        "train_batch_size": 2 * int(os.environ.get("WORLD_SIZE", "1")),
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
        "zero_optimization": {"stage": stage},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 2}},
    }
    built, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    return built


def train(ds: deepspeed.DeepSpeedEngine, steps: int, save: Callable[[int], None]) -> None:
    """``steps`` steps, ``save(step)`` after every second one (``step`` counted from 1 in this call)."""
    for step in range(1, steps + 1):
        loss = ds(torch.randn(2, 4)).pow(2).mean()
        ds.backward(loss)
        ds.step()
        if step % 2 == 0:
            save(step)


def restore(ds: deepspeed.DeepSpeedEngine, tag_dirs: list[str]) -> None:
    from matrix import tensors_digest  # beside this script: sys.path[0]

    for number, tag_dir in enumerate(tag_dirs):
        try:
            loaded, _ = ds.load_checkpoint(os.path.dirname(tag_dir), tag=os.path.basename(tag_dir))
        except BaseException as error:
            _tell("FAILED", {"item": number, "error": f"{type(error).__name__}: {str(error)[:500]}"})
            raise
        restored = (ds.module.state_dict(), ds.optimizer.state_dict(), ds.lr_scheduler.state_dict())
        digest = tensors_digest(*restored, ds.global_steps, ds.global_samples, ds.skipped_steps)
        _tell("RESTORED", {"item": number, "path": loaded, "digest": digest})


def _tell(kind: str, record: dict[str, object]) -> None:
    """One line in one write, short enough that the other rank's lines on the same pipe do not break it."""
    sys.stdout.write(f"{kind} {json.dumps({'rank': RANK, **record})}\n")
    sys.stdout.flush()


def main(mode: str, stage: int, args: list[str]) -> None:
    ds = engine(stage)
    if mode == "restore":
        restore(ds, args)
        return
    save_dir, tags = args[0], args[1:]
    if mode == "load":
        loaded = []
        for tag in tags:
            path, _ = ds.load_checkpoint(save_dir, tag=None if tag == "-" else tag)
            loaded.append({"tag": tag, "path": path, "step": ds.global_steps})
        if RANK == 0:
            print("LOADED " + json.dumps(loaded), flush=True)
        return
    if mode == "resume":
        import killer  # beside this script: sys.path[0]

        ds.load_checkpoint(save_dir)

        def killed(_: int) -> None:
            if RANK == 0:
                killer.arm(int(tags[0]), float(tags[1]))
            ds.save_checkpoint(save_dir)
            if RANK == 0:
                killer.missed()

        train(ds, 2, killed)
        return
    if mode == "lightning":

        def save(step: int) -> None:
            state = {"epoch": step // 2 - 1, "global_step": step, "pytorch-lightning_version": "2.6.0"}
            ds.save_checkpoint(os.path.join(save_dir, f"epoch={step // 2 - 1}-step={step}.ckpt"), client_state=state, tag="checkpoint")

        train(ds, 4, save)
        return
    train(ds, int(tags[0]) if tags else 4, lambda _: ds.save_checkpoint(save_dir))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
    leave_done()
