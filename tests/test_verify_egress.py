"""What ``verify`` of a run in a bucket says it will download, against what it receives (issue 34).

``verify`` asks before it reads objects whole (egress is billed; ``--max-download`` guards it), so
the number it gives must bound what the command receives: it asks after the header reads that
find the runs, with the bytes those took plus every object whole, once, and what the readers read
beside them (a DCP ``.metadata``'s objects and, with ``--deep``, its items, as the header read of
``.metadata`` counted them). Each run here is written by its framework's own saving code, put in
a real S3 server (moto, tests/stores.py) and verified by the command line; the bytes and requests
are the bucket's own count (``session.traffic``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import frameworks
import pytest
import stores
from test_dcp import dcp_run

from ckptdoctor.readers.sample import HEAD, TAIL
from ckptdoctor.stores import session
from ckptdoctor.testing import write_burn_run

pytestmark = pytest.mark.slow  # a real S3 server on 127.0.0.1

pytest.importorskip("obstore")

MODES = ((), ("--deep",), ("--resume",), ("--resume", "--deep"))


def _hf_run(folder: Path) -> None:
    frameworks.hf_trainer(folder, 4).train()  # model.safetensors, optimizer.pt, rng_state.pth, JSON


RUNS: dict[str, Callable[[Path], object]] = {
    "dcp": dcp_run,  # dcp.save: __0_0.distcp and .metadata per step
    "hf-trainer": _hf_run,
    "torch-zip": lambda folder: frameworks.torch_loop(folder, 3, "bundled"),  # torch.save of a dict per epoch
    "burn": lambda folder: write_burn_run(folder, [1, 2, 3]),
}


def _verified(cli: Any, *args: str) -> tuple[Any, int, int, int | None]:
    """The command's result, the requests it made and the bytes it received (the bucket's count),
    and the most it said it would receive in all (its last ask; None where it asked nothing)."""
    requests, received = session.traffic()
    result = cli("verify", *args)
    after = session.traffic()
    said = re.findall(r"\(([0-9,]+) bytes\) in all", result.stderr)
    return result, after[0] - requests, after[1] - received, int(said[-1].replace(",", "")) if said else None


@pytest.mark.parametrize("kind", RUNS)
def test_verify_receives_no_more_than_it_announced(kind: str, moto_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    RUNS[kind](tmp_path / "run")
    url = moto_bucket.upload(tmp_path / "run", "run")
    for mode in MODES:
        result, _, received, announced = _verified(cli, *mode, url)
        assert result.exit_code == 0, (mode, result.stderr)
        assert announced is not None, (mode, result.stderr)
        # a bound, and a close one: what will be read is known once the headers are read
        assert received <= announced <= received * 1.05, (mode, received, announced)


def test_small_objects_the_header_reads_held_are_not_downloaded_again(moto_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    write_burn_run(tmp_path / "run", range(1, 101))  # 300 objects of a few KiB: each read whole by its header read
    objects = len(list((tmp_path / "run").iterdir()))
    assert all(path.stat().st_size <= HEAD + TAIL for path in (tmp_path / "run").iterdir())
    url = moto_bucket.upload(tmp_path / "run", "run")
    result, requests, received, _ = _verified(cli, "--json", url)
    assert result.exit_code == 0, result.stderr
    assert result.json["store"]["requests"] == requests
    assert requests <= objects + 10  # one read per object, and a few listings: not two reads per object
    assert received == sum(path.stat().st_size for path in (tmp_path / "run").iterdir())


def test_max_download_refuses_a_dcp_run_whose_reads_go_past_it(moto_bucket: stores.Bucket, tmp_path: Path, cli: Any) -> None:
    dcp_run(tmp_path / "run")
    url = moto_bucket.upload(tmp_path / "run", "run")
    sizes = [path.stat().st_size for path in (tmp_path / "run").rglob("*") if path.is_file()]
    # each object whole after its header and tail: what verify once said it read at most, and
    # let through, while the readers read the data files again range by range, several times over
    header_and_whole = sum(size + min(size, HEAD + TAIL) for size in sizes)
    refused, _, received, announced = _verified(cli, "--max-download", str(header_and_whole), url)
    assert refused.exit_code == 2, (refused.stderr, received)
    assert "over --max-download" in refused.stderr
    assert announced is not None and announced > header_and_whole
    assert received < sum(sizes)  # only the headers were read
    allowed, _, received, _ = _verified(cli, "--max-download", str(announced), url)
    assert allowed.exit_code == 0, allowed.stderr
    assert received <= announced
