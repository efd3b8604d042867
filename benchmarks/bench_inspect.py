"""Time `ckptdoctor inspect`, `prune --dry-run` and `repair --dry-run` on big runs against `find` and
a minimal-Python reference, all measured in the same run (issue 17).

    python benchmarks/bench_inspect.py [--epochs 50000] [--hf-checkpoints 2000] [--repeat 5] [--phases]

Builds, in a temporary folder, a burn run of EPOCHS epochs x 3 small valid burnpack files and an
HF Trainer run of HF_CHECKPOINTS `checkpoint-N` folders x 8 files. On each, every command runs once
untimed (the page cache is then warm for all, and a command that fails stops the benchmark), then
--repeat rounds interleaved (find, reference, inspect, prune, repair, find, ...), so that a noisy
neighbour slows all of them alike; it prints each one's median (and range) and the ratios:
  - `find DIR -type f -printf '%s %p\\n'`: listing and stat in C, the floor;
  - `benchmarks/minimal_inspect.py DIR` (burn run only): the floor a Python inspect reaches doing the
    same reads; its document is compared with ckptdoctor's (same checkpoints and files?);
  - `ckptdoctor inspect --format json DIR`: target <= 3x find, and a peak RSS <= 0.6 KiB a file;
  - `ckptdoctor prune --dry-run --keep-last 3 --min-age 0 --format json DIR` and
    `ckptdoctor repair --dry-run --min-age 0 --format json DIR`: target <= 4x find (--min-age 0:
    files just written would otherwise be too young to plan anything for).
Each command's peak RSS is also given per file of the run (KiB a file).
ckptdoctor is a wheel of this tree installed in a temporary venv (`_installed.py`; it says so, or
why it fell back on the tree). Every command runs from the temporary folder, where no
configuration file is found. `--phases` then breaks one in-process inspect of the burn run down by
phase (`_phases.py`, with the same install). Start-up alone: `bench_startup.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _installed import Ckptdoctor, first_run, installed, measure

HERE = Path(__file__).resolve().parent
_BUILD = "import sys; from ckptdoctor.testing import write_burn_run; write_burn_run(sys.argv[1], range(int(sys.argv[2]), int(sys.argv[3])))"
TARGETS = {"inspect": 3.0, "prune": 4.0, "repair": 4.0}
"""Issue 37's targets: each command's time over find's on the same run, on two idle cores."""
MEMORY_TARGET_KIB = 0.6
"""Issue 37's target: inspect's peak RSS over the files of the run, in KiB a file."""


def build_burn(ckptdoctor: Ckptdoctor, folder: Path, first: int, last: int) -> None:
    """Epochs ``first`` to ``last`` (included) of a burn ``checkpoint/`` folder, 3 files each, as the
    measured ckptdoctor's own test helper writes them."""
    subprocess.run([ckptdoctor.python, "-c", _BUILD, str(folder), str(first), str(last + 1)], env=ckptdoctor.env, check=True)


def build_hf_run(folder: Path, checkpoints: int) -> None:
    """HF Trainer ``checkpoint-N`` folders with the files a Trainer writes (tiny, valid)."""
    import io
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
        "generation_config.json": b'{"bos_token_id": 50256, "eos_token_id": 50256}',
    }
    for step in range(1, checkpoints + 1):
        checkpoint = folder / f"checkpoint-{step * 10}"
        checkpoint.mkdir(parents=True)
        for name, data in files.items():
            (checkpoint / name).write_bytes(data)
        (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step * 10, "log_history": []}))


def count_files(folder: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(folder))


def commands(ckptdoctor: Ckptdoctor, folder: Path, reference: bool) -> dict[str, list[str]]:
    """The measured commands by name, find first: the baseline of every ratio."""
    run = str(folder)
    found = {"find": ["find", run, "-type", "f", "-printf", "%s %p\\n"]}
    if reference:
        found["reference"] = [ckptdoctor.python, str(HERE / "minimal_inspect.py"), run]
    return found | {
        "inspect": ckptdoctor.argv("inspect", "--format", "json", run),
        "prune": ckptdoctor.argv("prune", "--dry-run", "--keep-last", "3", "--min-age", "0", "--format", "json", run),
        "repair": ckptdoctor.argv("repair", "--dry-run", "--min-age", "0", "--format", "json", run),
    }


def same_work(reference: bytes, ours: bytes) -> str:
    """Whether the reference's document says what ckptdoctor's does of each checkpoint, in words."""
    theirs, mine = json.loads(reference), json.loads(ours)
    if len(theirs["runs"]) != len(mine["runs"]):
        return f"NOT the same work: {len(theirs['runs'])} runs against ckptdoctor's {len(mine['runs'])}"
    for a, b in zip(theirs["runs"], mine["runs"], strict=True):
        for key in ("checkpoints", "resume"):
            if a[key] != b[key]:
                return f"NOT the same work: the run's {key} differ in {a['path']}"
    return f"the same checkpoints, files and resume point; {len(reference):,} bytes of JSON against ckptdoctor's {len(ours):,}"


def compare(label: str, ckptdoctor: Ckptdoctor, folder: Path, files: int, cwd: Path, repeat: int, reference: bool) -> None:
    measured = commands(ckptdoctor, folder, reference)
    outputs = {name: first_run(argv, ckptdoctor.env, cwd) for name, argv in measured.items()}
    times: dict[str, list[float]] = {name: [] for name in measured}
    peaks: dict[str, float] = dict.fromkeys(measured, 0.0)
    for _ in range(repeat):
        for name, argv in measured.items():
            result = measure(argv, ckptdoctor.env, cwd)
            times[name].append(result.seconds)
            peaks[name] = max(peaks[name], result.rss_mib)
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"{label}: median of {repeat}, interleaved (range; peak RSS)")
    for name, argv in measured.items():
        shown = " ".join(Path(part).name if part.startswith("/") else part for part in argv)
        spread = f"{min(times[name]):.3f}–{max(times[name]):.3f}"
        per_file = peaks[name] * 1024 / files
        print(f"  {name:<10} {median[name]:7.3f} s  ({spread}; {peaks[name]:6.1f} MiB, {per_file:5.2f} KiB a file)  {shown}")
    if reference:
        print(f"  reference: {same_work(outputs['reference'], outputs['inspect'])}")
    print("  ratios:")
    for name in ("reference", *TARGETS):
        if name in median:
            ratio = median[name] / median["find"]
            target = TARGETS.get(name)
            verdict = f"  (target <= {target:g}x: {'met' if ratio <= target else 'NOT met'})" if target else ""
            print(f"    {name + ' / find':<21} {ratio:6.2f}x{verdict}")
    memory = peaks["inspect"] * 1024 / files
    verdict = "met" if memory <= MEMORY_TARGET_KIB else "NOT met"
    print(f"    {'inspect peak RSS':<21} {memory:6.2f} KiB a file  (target <= {MEMORY_TARGET_KIB:g}: {verdict})")
    if reference:
        print(
            f"    {'inspect / reference':<21} {median['inspect'] / median['reference']:6.2f}x  (what ckptdoctor adds to the Python floor)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=50_000)
    parser.add_argument("--hf-checkpoints", type=int, default=2_000, help="0: no HF run")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--phases", action="store_true", help="and where an in-process inspect of the burn run spends its time")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="ckptdoctor-bench-"))
    try:
        with installed() as ckptdoctor:
            print(f"ckptdoctor: {ckptdoctor.origin}")
            print(f"cpus: {os.cpu_count()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            orjson = subprocess.run([ckptdoctor.python, "-c", "import orjson"], env=ckptdoctor.env, capture_output=True, check=False)
            print(f"the reference encodes with {'orjson' if orjson.returncode == 0 else 'json (no orjson here)'}")
            burn = scratch / "burn" / "checkpoint"
            started = time.perf_counter()
            build_burn(ckptdoctor, burn, 1, args.epochs)
            print(f"built {args.epochs:,} epochs x 3 files in {time.perf_counter() - started:.1f} s")
            compare(f"burn, {args.epochs:,} epochs x 3 files", ckptdoctor, burn, count_files(burn), scratch, args.repeat, reference=True)
            if args.hf_checkpoints:
                hf = scratch / "hf"
                build_hf_run(hf, args.hf_checkpoints)
                label = f"HF Trainer, {args.hf_checkpoints:,} checkpoint-N folders x {count_files(hf) // args.hf_checkpoints} files"
                compare(label, ckptdoctor, hf, count_files(hf), scratch, args.repeat, reference=False)
            if args.phases:
                print(f"phases of one inspect --format json of the burn run, in process ({HERE / '_phases.py'}):")
                table = subprocess.run(
                    [ckptdoctor.python, str(HERE / "_phases.py"), str(burn)],
                    env=ckptdoctor.env,
                    cwd=scratch,
                    check=False,
                    capture_output=True,
                    text=True,
                )
                print(table.stdout.rstrip() or f"  _phases.py failed ({table.returncode}): {table.stderr.strip()[-1500:]}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
