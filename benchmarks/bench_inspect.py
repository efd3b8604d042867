"""Time `ckptdoctor inspect` on a big burn run against `find` on the same run.

    python benchmarks/bench_inspect.py [--epochs 50000] [--repeat 5]

Builds a burn run of EPOCHS epochs x 3 small valid burnpack files, and an HF Trainer run of
HF_CHECKPOINTS `checkpoint-N` folders, in a temporary folder; for each, takes the median wall
time of `find DIR -type f -printf '%s %p\\n'` and of `ckptdoctor inspect --format json DIR`,
measured in the same run (warm cache for both), and prints their ratio. Target: at most 4x find. Also prints the wall time of `ckptdoctor --help`
and of `inspect` on a bundled example (target: under 0.3 s each).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ckptdoctor.testing import SMALL_MODEL

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "ckptdoctor"]


def build_run(folder: Path, epochs: int) -> None:
    records = {
        "model": SMALL_MODEL.model_record(),
        "optim": SMALL_MODEL.optimizer_record(),
        "scheduler": SMALL_MODEL.scheduler_record(),
    }
    folder.mkdir(parents=True)
    for epoch in range(1, epochs + 1):
        for role, data in records.items():
            with open(folder / f"{role}-{epoch}.bpk", "wb") as handle:
                handle.write(data)


def build_hf_run(folder: Path, checkpoints: int) -> None:
    """HF Trainer ``checkpoint-N`` folders with the files a Trainer writes (tiny, valid)."""
    import io
    import json
    import zipfile

    import numpy as np
    from safetensors.numpy import save

    def torch_like_archive() -> bytes:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
            archive.writestr("archive/version", b"3\n")
        return buffer.getvalue()

    files = {
        "model.safetensors": save({"w": np.zeros((16, 16), dtype=np.float32)}),
        "optimizer.pt": torch_like_archive(),
        "scheduler.pt": torch_like_archive(),
        "rng_state.pth": torch_like_archive(),
        "training_args.bin": torch_like_archive(),
        "config.json": b'{"model_type": "gpt2"}',
    }
    for step in range(1, checkpoints + 1):
        checkpoint = folder / f"checkpoint-{step * 10}"
        checkpoint.mkdir(parents=True)
        for name, data in files.items():
            (checkpoint / name).write_bytes(data)
        (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step * 10, "log_history": []}))


def compare(label: str, folder: Path, repeat: int) -> None:
    find = ["find", str(folder), "-type", "f", "-printf", "%s %p\\n"]
    inspect = [*CLI, "inspect", "--format", "json", str(folder)]
    # one untimed pass each so that both start from the same warm page cache
    wall(find, 1)
    wall(inspect, 1)
    find_s = wall(find, repeat)
    inspect_s = wall(inspect, repeat)
    ratio = inspect_s / find_s
    print(f"{label}:")
    print(f"  find:                            {find_s:7.3f} s (median of {repeat})")
    print(f"  ckptdoctor inspect --format json: {inspect_s:7.3f} s (median of {repeat})")
    print(f"  ratio inspect / find:            {ratio:7.2f}x  (target <= 4x: {'met' if ratio <= 4 else 'NOT met'})")


def wall(command: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=50_000)
    parser.add_argument("--hf-checkpoints", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="ckptdoctor-bench-"))
    try:
        run = scratch / "burn" / "checkpoint"
        started = time.perf_counter()
        build_run(run, args.epochs)
        print(f"built {args.epochs:,} epochs x 3 files in {time.perf_counter() - started:.1f} s")
        compare(f"burn, {args.epochs:,} epochs x 3 files", run, args.repeat)
        hf = scratch / "hf"
        build_hf_run(hf, args.hf_checkpoints)
        compare(f"HF Trainer, {args.hf_checkpoints:,} checkpoint-N folders x 8 files", hf, args.repeat)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    example = ROOT / "examples" / "runs" / "burn-missing-optimizer"
    help_s = wall([*CLI, "--help"], args.repeat)
    example_s = wall([*CLI, "inspect", str(example)], args.repeat)
    print(f"ckptdoctor --help:             {help_s:7.3f} s  (target < 0.3 s: {'met' if help_s < 0.3 else 'NOT met'})")
    print(f"ckptdoctor inspect (example):  {example_s:7.3f} s  (target < 0.3 s: {'met' if example_s < 0.3 else 'NOT met'})")
    print(f"cpus: {os.cpu_count()}")


if __name__ == "__main__":
    main()
