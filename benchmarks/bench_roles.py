"""What confirming bundled roles costs `inspect` (issue 14, item 3), as ratios in the same run.

`inspect` skims the top-level keys of each bundled torch archive's `data.pkl` (never loading it).
Three measures on Lightning-style `.ckpt` bundles of a model with P parameters and its AdamW state:
- the skim of one `data.pkl` against the full static walk `verify` does of the same bytes;
- `inspect --format json` of a run of N such bundles, with the skim and with it turned off
  (`SKIM_LIMIT = 0`, i.e. header reads only, as before), in this process after a warm-up;
- the same against `find -printf` over the run, the floor the speed issue measures against.

    python benchmarks/bench_roles.py [--params 1000] [--checkpoints 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch
from typer.testing import CliRunner

from ckptdoctor.cli import app
from ckptdoctor.readers import _skim, torchzip
from ckptdoctor.readers.unpickler import TORCH_OPCODES, Budget, one_budget, walk


def bundle(parameters: int) -> dict[str, object]:
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(parameters // 2)])
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    return {
        "epoch": 1,
        "global_step": 10,
        "state_dict": model.state_dict(),
        "optimizer_states": [optimizer.state_dict()],
        "lr_schedulers": [],
    }


def best(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", type=int, default=1000)
    parser.add_argument("--checkpoints", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()

    saved = bundle(options.params)
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    with zipfile.ZipFile(buffer) as archive:
        data = archive.read(archive.namelist()[0])

    def full_walk() -> None:
        with one_budget(Budget()):
            walk(data, opcodes=TORCH_OPCODES)

    skim = best(lambda: _skim.top_level(data), options.repeat)
    full = best(full_walk, options.repeat)
    print(f"data.pkl of {options.params} parameters + AdamW state: {len(data):,} bytes")
    print(f"  skim {skim * 1000:.1f} ms, full walk {full * 1000:.1f} ms: the skim takes {skim / full:.2f}x the walk")

    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder) / "checkpoints"
        run.mkdir()
        for step in range(1, options.checkpoints + 1):
            (run / f"epoch=0-step={step}.ckpt").write_bytes(buffer.getvalue())
        runner = CliRunner()

        def inspect() -> None:
            result = runner.invoke(app, ["inspect", "--format", "json", str(run)])
            assert result.exit_code == 0, result.output

        inspect()  # warm-up: imports, page cache
        with_skim = best(inspect, options.repeat)
        limit = torchzip.SKIM_LIMIT
        torchzip.SKIM_LIMIT = 0
        try:
            without = best(inspect, options.repeat)
        finally:
            torchzip.SKIM_LIMIT = limit
        find = best(lambda: subprocess.run(["find", str(run), "-printf", "%p %s %T@\n"], capture_output=True, check=True), options.repeat)
        print(f"inspect of {options.checkpoints} bundles: {with_skim:.3f} s with the skim, {without:.3f} s header reads only")
        print(f"  skim / header only: {with_skim / without:.2f}x; inspect / find: {with_skim / find:.1f}x")


if __name__ == "__main__":
    main()
