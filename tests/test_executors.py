"""One suite, two executors: what an acting pass relies on holds on a local disk and in a bucket
(a real SeaweedFS) alike, checked by the same tests through ``actions.executor.Executor``: the
lock is released on every exit path, a change since the scan is seen, a delete does what its plan
says, a quarantine goes back whole, and a repair killed part-way is closed by the next pass."""

from __future__ import annotations

import contextlib
import fcntl
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import stores

from ckptdoctor.acting.protocol import scan_runs
from ckptdoctor.actions import _quarantine
from ckptdoctor.actions.disk import DiskExecutor
from ckptdoctor.actions.executor import Executor, relied_on
from ckptdoctor.layouts.registry import home, layout_named
from ckptdoctor.model import Report, Run
from ckptdoctor.places import run_root
from ckptdoctor.planners import repair, retention
from ckptdoctor.planners.retention import Circumstances, Policy
from ckptdoctor.testing import write_burn_run

EPOCHS = range(1, 5)


@dataclass
class Place:
    """A burn run (epochs 1 to 4) where one executor acts, and the test's own ways to look at it."""

    executor: Executor
    url: str
    files: Callable[[], dict[str, bytes]]
    """Every file of the run by its name in it, ckptdoctor's own left out."""
    write: Callable[[str, bytes], None]
    lock_free: Callable[[], bool]
    """Whether another ckptdoctor could take the run's lock now."""
    kill_on_second_move: Callable[[pytest.MonkeyPatch], None]
    """From now on, the second move of a repair dies as a kill would leave it."""


class Killed(BaseException):
    """A kill, as far as the executor can tell: nothing after it runs."""


def _second_call_killed(real: Callable[..., Any]) -> Callable[..., Any]:
    calls = []

    def call(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) == 2:
            raise Killed
        return real(*args, **kwargs)

    return call


def _disk(tmp_path: Path) -> Place:
    folder = tmp_path / "run"
    write_burn_run(folder, EPOCHS)

    def files() -> dict[str, bytes]:
        return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}

    def lock_free() -> bool:
        lock = folder / ".ckptdoctor" / "lock"
        if not lock.exists():
            return True
        with open(lock, "rb") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(handle, fcntl.LOCK_UN)
        return True

    def kill(monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(_quarantine, "take", _second_call_killed(_quarantine.take))

    return Place(DiskExecutor(), str(folder), files, lambda name, data: (folder / name).write_bytes(data), lock_free, kill)


def _bucket(bucket: stores.Bucket, tmp_path: Path) -> Place:
    from ckptdoctor.actions.bucket import BucketExecutor
    from ckptdoctor.stores.control_plane import Control

    write_burn_run(tmp_path / "run", EPOCHS)
    url = bucket.upload(tmp_path / "run", "run")

    def files() -> dict[str, bytes]:
        return {key.removeprefix("run/"): bucket.get(key) for key in bucket.stored() if key.count("/") == 1}

    def kill(monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(Control, "copy_if_match", _second_call_killed(Control.copy_if_match))

    return Place(
        BucketExecutor(home),
        url,
        files,
        lambda name, data: bucket.put(f"run/{name}", data) and None,
        lambda: "run/.ckptdoctor/lock" not in bucket.stored(),
        kill,
    )


@pytest.fixture(params=["disk", "seaweedfs"])
def place(request: pytest.FixtureRequest, tmp_path: Path, fake_machine: Any) -> Iterator[Place]:
    if request.param == "disk":
        yield _disk(tmp_path)
    else:
        pytest.importorskip("boto3")
        yield _bucket(request.getfixturevalue("weed_bucket"), tmp_path)


def _scanned(place: Place) -> tuple[Report, Run]:
    report, runs = scan_runs([place.url], "repair", lambda said: None)
    assert len(runs) == 1
    return report, runs[0]


@contextlib.contextmanager
def _acting(place: Place) -> Iterator[tuple[Report, Run]]:
    """The run scanned and locked, as ``carry_out`` holds it while a pass plans and acts."""
    with contextlib.ExitStack() as held:
        place.executor.opened(held, [place.url], False)
        report, run = _scanned(place)
        place.executor.ready([run], False)
        held.enter_context(place.executor.locked(home(run), run.path, print))
        yield report, run


def _world(place: Place, run: Run) -> Circumstances:
    world = place.executor.world(run)
    return Circumstances(world.now, open_by=world.open_by, inside=world.inside, too_deep=world.too_deep)


@pytest.mark.parametrize("failure", [RuntimeError, KeyboardInterrupt])
def test_the_lock_is_released_on_every_exit_path(place: Place, failure: type[BaseException]) -> None:
    _, run = _scanned(place)
    with pytest.raises(failure), contextlib.ExitStack() as held:
        held.enter_context(place.executor.locked(home(run), run.path, print))
        assert not place.lock_free(), "held while the work goes on"
        raise failure("a step failed")
    assert place.lock_free()
    with place.executor.locked(home(run), run.path, print):  # and taken again at once
        pass
    assert place.lock_free()


def test_a_change_since_the_scan_is_named(place: Place) -> None:
    _, run = _scanned(place)
    relied = relied_on(run)
    assert place.executor.changed_since_scan(run_root(run), relied) is None
    place.write("model-4.bpk", b"saved again by the trainer")
    changed = place.executor.changed_since_scan(run_root(run), relied)
    assert changed is not None and "model-4.bpk" in changed


def test_a_delete_does_what_its_plan_says_and_leaves_no_journal(place: Place) -> None:
    before = place.files()
    with _acting(place) as (_, run):
        world = _world(place, run)
        plan = retention.plan(run, layout_named(run.layout), Policy(keep_last=2, min_age=0.0), world)
        acted = place.executor.delete(run, plan, world.now)
    assert acted.problems == []
    assert any(said.done and "deleted 2 checkpoints" in said.text for said in acted.said)
    assert place.files() == {name: data for name, data in before.items() if name.split("-")[1].split(".")[0] in {"3", "4"}}
    assert place.executor.journals(run_root(run), home(run)) == []


def test_a_quarantine_goes_back_whole(place: Place) -> None:
    place.write("model-4.bpk", place.files()["model-4.bpk"][:100])  # the save of epoch 4 was cut short
    before = place.files()
    with _acting(place) as (report, run):
        world = _world(place, run)
        plan = repair.plan(run, layout_named(run.layout), list(report.findings), world, 0.0)
        moved = place.executor.quarantine(run, plan, world.now)
    assert (moved.entries, moved.problems) == (3, ())
    assert sorted(place.files()) == sorted(name for name in before if "-4." not in name)
    with _acting(place) as (_, run):
        [found] = place.executor.quarantines(run_root(run), home(run))
        assert found.state == "done"
        assert place.executor.restore(found, run_root(run)) == (3, [])
    assert place.files() == before


def _repair_killed_part_way(place: Place, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """The run's newest checkpoint cut short, then a repair of it killed on its second move; the
    run's files before the repair."""
    place.write("model-4.bpk", place.files()["model-4.bpk"][:100])
    before = place.files()
    with monkeypatch.context() as patched, pytest.raises(Killed), _acting(place) as (report, run):
        world = _world(place, run)
        plan = repair.plan(run, layout_named(run.layout), list(report.findings), world, 0.0)
        place.kill_on_second_move(patched)
        place.executor.quarantine(run, plan, world.now)
    return before


def test_a_repair_killed_part_way_is_closed_and_what_it_moved_goes_back(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _repair_killed_part_way(place, monkeypatch)
    assert len(before) - len(place.files()) == 1, "one file was moved before the kill"
    with _acting(place) as (_, run):
        [killed] = place.executor.quarantines(run_root(run), home(run))
        assert killed.state == "repairing"
        closed, problems = place.executor.close_repairs(run_root(run), home(run))
        assert (closed, problems) == ([killed.ident], [])
        [found] = place.executor.quarantines(run_root(run), home(run))
        assert found.state == "done", "closed: a record of what was moved"
        assert place.executor.close_repairs(run_root(run), home(run)) == ([], [])
        assert place.executor.restore(found, run_root(run)) == (1, [])
    assert place.files() == before


def test_undo_after_a_killed_repair_and_a_second_one_names_the_first_and_following_it_puts_the_run_back(
    place: Place, monkeypatch: pytest.MonkeyPatch, cli: Any
) -> None:
    before = _repair_killed_part_way(place, monkeypatch)
    again = cli("repair", "--min-age", "0", "--yes", place.url)  # closes the killed one, moves the rest
    assert again.exit_code == 0, again.stderr
    assert "closed an interrupted repair" in again.stdout + again.stderr
    undone = cli("repair", "--undo", "--yes", place.url)
    assert undone.exit_code == 0, undone.stderr
    [note] = [line for line in (undone.stdout + undone.stderr).splitlines() if "still holds" in line]
    assert "1 entry" in note
    told = re.search(r"`ckptdoctor (repair --undo [^`]+)`", note)
    assert told is not None, note
    followed = cli(*shlex.split(told.group(1)), "--yes")
    assert followed.exit_code == 0, followed.stderr
    assert place.files() == before
    assert "still holds" not in followed.stdout + followed.stderr
