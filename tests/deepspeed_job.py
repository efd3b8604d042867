"""A tiny DeepSpeed job the real-run tests launch with DeepSpeed's own launcher on the CPU
(``DS_ACCELERATOR=cpu deepspeed --num_gpus 2 --no_local_rank deepspeed_job.py ...``, two gloo
processes): not a test module, and never imported by one.

    deepspeed_job.py train STAGE SAVE_DIR        4 steps, ``engine.save_checkpoint(SAVE_DIR)`` after steps 2 and 4
    deepspeed_job.py lightning STAGE SAVE_DIR    the same, saved as Lightning's ``DeepSpeedStrategy``
                                                 has the engine save (``save_checkpoint(filepath,
                                                 client_state=..., tag="checkpoint")`` into
                                                 ``epoch=E-step=S.ckpt/``)
    deepspeed_job.py load STAGE SAVE_DIR TAG...  ``engine.load_checkpoint(SAVE_DIR, tag=TAG)`` for each TAG
                                                 (``-``: no tag, DeepSpeed follows ``latest``), then prints
                                                 ``LOADED`` and, per TAG, the path it loaded (null where it
                                                 loaded nothing) and the step it restored, as JSON
"""

from __future__ import annotations

import json
import os
import sys

import deepspeed
import torch
from frameworks import gloo_all_reduce

gloo_all_reduce()


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


def main(mode: str, stage: int, save_dir: str, tags: list[str]) -> None:
    ds = engine(stage)
    if mode == "load":
        loaded = []
        for tag in tags:
            path, _ = ds.load_checkpoint(save_dir, tag=None if tag == "-" else tag)
            loaded.append({"tag": tag, "path": path, "step": ds.global_steps})
        if int(os.environ.get("RANK", "0")) == 0:
            print("LOADED " + json.dumps(loaded), flush=True)
        return
    for step in range(4):
        loss = ds(torch.randn(2, 4)).pow(2).mean()
        ds.backward(loss)
        ds.step()
        if step % 2 == 1:
            if mode == "lightning":
                state = {"epoch": step // 2, "global_step": step + 1, "pytorch-lightning_version": "2.6.0"}
                ds.save_checkpoint(os.path.join(save_dir, f"epoch={step // 2}-step={step + 1}.ckpt"), client_state=state, tag="checkpoint")
            else:
                ds.save_checkpoint(save_dir)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:])
