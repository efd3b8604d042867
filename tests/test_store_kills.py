"""100 SIGKILLs of ``prune``, ``repair`` and ``repair --undo`` at random moments, on a network that
drops, resets and fails requests (``tests/faultproxy.py`` as a process of its own, in front of a
real SeaweedFS), as issue 34 asks: nothing the policy keeps is lost, every byte moved is in the
run or whole in a quarantine, the next command is never kept out by the dead one's lock (it runs on
this machine: the lock is taken over at once), and ``--undo``, followed as it says, puts the run
back exactly.

The follow-up commands run on the same faulty network: one may fail (exit 2) and is run again, as
a user or a cron job would.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import faultproxy
import pytest
import stores

from ckptdoctor.stores import session
from ckptdoctor.testing import write_burn_run

pytestmark = pytest.mark.slow  # real S3 servers on 127.0.0.1, and a hundred kills

pytest.importorskip("obstore")
pytest.importorskip("boto3")

KILLS = int(os.environ.get("CKD_KILLS", "100"))
SHARES = 4
"""The kills are made in this many tests of their own (each with its own seed and server prefix),
which pytest-xdist's workers share out."""
FAULTS = [
    {"fault": "5xx", "status": 503, "probability": 0.02},
    {"fault": "5xx", "status": 500, "probability": 0.01},
    {"fault": "reset", "probability": 0.01},
    {"fault": "reset", "stage": "after", "probability": 0.01},
    {"fault": "drop", "probability": 0.01},
]
"""About 6% of requests broken: the issue's 5% 5xx and 3% resets, with lost answers among them."""
EPOCHS = range(1, 13)
BROKEN = range(9, 13)
"""Epochs whose optimizer state is gone: what repair moves aside (and undo puts back)."""
KEEP = 3
NOW = ("--min-age", "0")
LOCKED = 3


def _fresh(bucket: stores.Bucket, folder: Path, broken: bool) -> tuple[str, dict[str, bytes]]:
    for key in bucket.stored():
        bucket.s3.delete_object(Bucket=bucket.name, Key=bucket.key(key))
    return bucket.upload(folder / ("broken" if broken else "healthy"), "run"), _run_objects(bucket)


def _run_objects(bucket: stores.Bucket) -> dict[str, bytes]:
    return {key: data for key, data in _settled(bucket).items() if "/.ckptdoctor/" not in key}


def _settled(bucket: stores.Bucket) -> dict[str, bytes]:
    """Every object under the test's prefix, once the requests a killed command had sent have
    landed (the proxy and the server finish a request whose client died): two readings alike."""
    last: dict[str, bytes] | None = None
    for _ in range(20):
        try:
            now = {key: bucket.get(key) for key in bucket.stored()}
        except bucket.s3.exceptions.NoSuchKey:
            now = None
        if now is not None and now == last:
            return now
        last = now
        time.sleep(0.1)
    raise AssertionError("the bucket did not settle after the kill")


class _Follow:
    """The commands that follow a kill, run in this process (a kill needs a process of its own;
    these do not) through the faulty network, with clients made afresh for each."""

    def __init__(self, cli: Any, endpoint: str) -> None:
        self.cli, self.endpoint = cli, endpoint

    def until_done(self, *args: str) -> Any:
        """``args`` run again while the faulty network makes it fail (exit 2), as a user would;
        never kept out by a lock."""
        for _ in range(8):
            session.forget()
            result = self.cli(*args, env={"AWS_ENDPOINT_URL": self.endpoint})
            assert result.exit_code != LOCKED, f"{args}: the dead command's lock kept this one out: {result.stderr}"
            assert "internal error" not in result.stderr, result.stderr
            if result.exit_code != 2:
                return result
        raise AssertionError(f"{args} failed 8 times in a row: {result.stderr}")

    def undo_all(self, url: str) -> None:
        """``repair --undo``, then each command its notes say puts the rest back."""
        pending = [("repair", "--undo", "--yes", url)]
        seen: set[tuple[str, ...]] = set()
        while pending:
            args = pending.pop()
            seen.add(args)
            result = self.until_done(*args)
            assert result.exit_code == 0, result.stdout + result.stderr
            for told in re.findall(r"`ckptdoctor (repair --undo [^`]+)`", result.stdout + result.stderr):
                followed = (*shlex.split(told), "--yes")
                if followed not in seen:
                    pending.append(followed)


def _killed(env: dict[str, str], rng: random.Random, *args: str) -> None:
    """``args`` started, and SIGKILLed at a random moment once it holds the lock (or when it ends first)."""
    process = subprocess.Popen(
        [sys.executable, "-c", stores.SLOWED, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    time.sleep(rng.uniform(0.4, 1.6))
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@pytest.mark.parametrize("share", range(SHARES))
def test_a_hundred_kills_on_a_faulty_network_lose_nothing_lock_no_one_out_and_undo_exactly(
    share: int, weed_bucket: stores.Bucket, tmp_path: Path, cli: Any
) -> None:
    write_burn_run(tmp_path / "healthy", EPOCHS)
    write_burn_run(tmp_path / "broken", EPOCHS)
    for epoch in BROKEN:
        (tmp_path / "broken" / f"optim-{epoch}.bpk").unlink()
    rng = random.Random(34 + share)
    kinds: dict[str, int] = {"prune": 0, "repair": 0, "undo": 0}
    with faultproxy.spawn(weed_bucket.endpoint, FAULTS, tmp_path / "faults.json", seed=34 + share) as (endpoint, _):
        env = {**os.environ, **weed_bucket.env, "AWS_ENDPOINT_URL": endpoint}
        follow = _Follow(cli, endpoint)
        for _ in range(KILLS // SHARES):
            kind = rng.choice(list(kinds))
            kinds[kind] += 1
            url, before = _fresh(weed_bucket, tmp_path, broken=kind != "prune")
            if kind == "prune":
                kept = {key: data for key, data in before.items() if int(key.split("-")[1].split(".")[0]) > EPOCHS[-1] - KEEP}
                _killed(env, rng, "prune", "--keep-last", str(KEEP), *NOW, "--yes", url)
                now = _run_objects(weed_bucket)
                assert all(now.get(key) == data for key, data in kept.items()), "an object the policy keeps was lost"
                assert all(now[key] == before[key] for key in now), "an object changed"
                follow.until_done("prune", "--keep-last", str(KEEP), *NOW, "--yes", url)
                assert _run_objects(weed_bucket) == kept
                assert stores.own(weed_bucket) == [], "a journal or the lock was left"
                continue
            if kind == "undo":
                assert follow.until_done("repair", *NOW, "--yes", url).exit_code == 0
                _killed(env, rng, "repair", "--undo", "--yes", url)
            else:
                _killed(env, rng, "repair", *NOW, "--yes", url)
                if rng.random() < 0.5:  # the user repairs again before undoing
                    follow.until_done("repair", *NOW, "--yes", url)
            stored = _settled(weed_bucket)
            for key, data in before.items():  # every object in the run, or whole in a quarantine
                name = key.removeprefix("run/")
                assert stored.get(key) == data or any(
                    k.startswith("run/.ckptdoctor/quarantine/") and k.endswith("/" + name) and stored[k] == data for k in stored
                ), key
            follow.undo_all(url)
            assert _run_objects(weed_bucket) == before, "undo did not put the run back exactly"
            assert not [key for key in stores.own(weed_bucket) if key.endswith(".bpk")], "undo left something in a quarantine"
    injected = faultproxy.recorded(tmp_path / "faults.json")
    assert sum(injected.values()) >= KILLS // SHARES, injected  # the network really was faulty
    assert min(kinds.values()) >= KILLS // SHARES // 6, kinds
