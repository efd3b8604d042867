"""Shared fixtures: framework runs built once per test run, the CLI runner, and the shared corpus."""

from __future__ import annotations

import compileall
import fcntl
import functools
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import stores
from frameworks import accelerator_for, deepspeed_loads, deepspeed_trained, hf_trainer, lightning_fit, step_and_save
from reports import codes
from shared_corpus import CORPUS
from typer.testing import CliRunner

import ckptdoctor
from ckptdoctor.actions import executor
from ckptdoctor.cli import app

pytest_plugins = ["_fired_rules"]  # every finding from a check that declares its rule; every rule fired

SLOW_FIXTURES = frozenset(
    {
        "hf_trained",
        "accelerate_saved",
        "lightning_saved",
        "lightning_every_2_steps",
        "deepspeed_zero1",
        "deepspeed_zero2",
        "deepspeed_zero3",
    }
    | {"moto_endpoint", "seaweed_endpoint"}
)
"""The session fixtures that train with a real framework or start a server, seconds each: a test
that asks for one is ``slow``, so that the fast tier (``-m "not slow"``) never builds one."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _layouts_harmless_classes() -> Iterator[None]:
    """A reader a test calls directly (``verify_sample``, ``judge``) judges pickles with the
    layouts' harmless classes, as the pipelines hand them (``layouts.HARMLESS``): a reader
    handed no table knows only the formats' own (``tests/test_pickle_tables.py``)."""
    from ckptdoctor.layouts.registry import HARMLESS
    from ckptdoctor.readers.files import harmless_known

    with harmless_known(HARMLESS):
        yield


@pytest.fixture
def corpus() -> Path:
    return CORPUS.resolve()


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)

    def codes(self) -> list[str]:
        return codes(self.json)


@pytest.fixture
def cli() -> Callable[..., Result]:
    runner = CliRunner()

    def invoke(*args: str | os.PathLike[str], env: dict[str, str] | None = None) -> Result:
        result = runner.invoke(app, [str(a) for a in args], env={"NO_COLOR": "1", "COLUMNS": "200", **(env or {})})
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return Result(result.exit_code, result.stdout, result.stderr)

    return invoke


@pytest.fixture
def inspect_json(cli: Callable[..., Result]) -> Callable[..., Result]:
    def run(*paths: str | os.PathLike[str], args: Sequence[str] = ()) -> Result:
        return cli("inspect", "--json", *args, *paths)

    return run


# --- acting: a fake process table and clock, so that no prune or repair test depends on the machine --


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "real_processes: a test about real processes holding files keeps the real process table")
    if not os.environ.get("PYTEST_XDIST_WORKER") and "TORCH_EXTENSIONS_DIR" not in os.environ:
        # where torch JIT-compiles DeepSpeed's CPU op, for this run and its xdist workers (which
        # inherit it): a build killed in the shared ~/.cache left torch's lock file there, and every
        # DeepSpeed launch after it waited on that file until its 600 s timeout (frameworks.deepspeed_op)
        made = tempfile.mkdtemp(prefix="ckptdoctor-torch-extensions-")
        os.environ["TORCH_EXTENSIONS_DIR"] = made
        config.add_cleanup(lambda: shutil.rmtree(made, ignore_errors=True))
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        # the processes the tests start (thousands of `python -m ckptdoctor`, Ray's workers) read the
        # package's bytecode where it is written; under PYTHONDONTWRITEBYTECODE (set on CI's machines)
        # none ever was, and each compiled the package again: 0.4 s of CPU a process
        compileall.compile_dir(Path(ckptdoctor.__file__).parent, quiet=1)


@dataclass
class FakeMachine:
    """The process table and clock a local acting pass asks, faked. ``held``: path -> the pid said
    to hold it (no other process holds anything); ``now``: the time, or None for the real clock
    (files the test writes are dated by it)."""

    held: dict[str, int] = field(default_factory=dict)
    now: float | None = None

    def processes(self, paths: Iterable[str], identities: Any = None, said: Any = None) -> tuple[dict[str, int | str], str | None]:
        held = {os.path.realpath(path): pid for path, pid in self.held.items()}
        return {path: held[real] for path in paths if held and (real := os.path.realpath(path)) in held}, None

    def clock(self) -> float:
        return time.time() if self.now is None else self.now


@pytest.fixture
def fake_machine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> FakeMachine:
    """Acting in this test asks a fake process table and clock (``executor.MACHINE``), unless the
    test is marked ``real_processes``."""
    fake = FakeMachine()
    if request.node.get_closest_marker("real_processes") is None:
        monkeypatch.setattr(executor, "MACHINE", executor.Machine(fake.processes, fake.clock))
    return fake


# --- object stores: real S3 servers on 127.0.0.1 (tests/stores.py) ------------------------------


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    with stores.moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def seaweed_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with stores.seaweed_server(tmp_path_factory.mktemp("weed")) as endpoint:
        yield endpoint


@pytest.fixture
def no_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """obstore's clients built without retries: a closed port then answers at once, where ten
    backoffs on each request made one command wait up to half a minute (the error is the same)."""
    try:
        import obstore.store
    except ImportError:  # without obstore the command says so before any request
        return
    for name in ("S3Store", "GCSStore", "AzureStore"):
        monkeypatch.setattr(obstore.store, name, functools.partial(getattr(obstore.store, name), retry_config={"max_retries": 0}))


def _bucket_fixture(endpoint: str, name: str, monkeypatch: pytest.MonkeyPatch, versioned: bool = False) -> Iterator[stores.Bucket]:
    from ckptdoctor.stores import session

    bucket = stores.bucket_in(endpoint, name)
    if versioned:
        bucket.s3.put_bucket_versioning(Bucket=bucket.name, VersioningConfiguration={"Status": "Enabled"})
    for variable, value in bucket.env.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    session.forget()  # no client of another server's bucket carried over
    yield bucket
    session.forget()


@pytest.fixture
def moto_bucket(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[stores.Bucket]:
    """A prefix of its own in a bucket of the moto server, with the environment set to reach it."""
    yield from _bucket_fixture(moto_endpoint, "ckpt-moto", monkeypatch)


@pytest.fixture
def versioned_bucket(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[stores.Bucket]:
    """A prefix in a versioned bucket of the moto server (a bucket of its own: versioning is the
    whole bucket's, and the other tests' bucket stays unversioned)."""
    yield from _bucket_fixture(moto_endpoint, "ckpt-moto-versioned", monkeypatch, versioned=True)


@pytest.fixture
def weed_bucket(seaweed_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[stores.Bucket]:
    """A prefix of its own in a bucket of the SeaweedFS server, with the environment set to reach it."""
    yield from _bucket_fixture(seaweed_endpoint, "ckpt-weed", monkeypatch)


# --- framework runs, built once per test run (tests copy them with frameworks.copy_run) ----------


Built = TypeVar("Built", Path, list[Path], dict[str, Path])


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Built]) -> Built:
    """``build(folder)`` once per test session: under pytest-xdist the first worker to ask builds
    in the folder every worker shares (the parent of each one's base temporary folder), the others
    wait for it and take what it returned (a path, or a list or dict of paths). Tests copy what is
    built before they change it (``frameworks.copy_run``)."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    done = root / f"{name}.built.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, by a worker that dies too
        if not done.exists():
            value = build(Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root)))
            done.write_text(json.dumps(value, default=str))
        said = json.loads(done.read_text())
    if isinstance(said, str):
        return Path(said)  # type: ignore[return-value]
    if isinstance(said, list):
        return [Path(path) for path in said]  # type: ignore[return-value]
    return {key: Path(path) for key, path in said.items()}  # type: ignore[return-value]


@pytest.fixture(scope="session")
def hf_trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``output_dir`` of a real HF Trainer (a tiny GPT-2): steps 2, 4 and 6 saved, save_total_limit=3."""

    def build(folder: Path) -> Path:
        hf_trainer(folder / "out", 6, save_total_limit=3).train()
        return folder / "out"

    return built_once(tmp_path_factory, "hf", build)


@pytest.fixture(scope="session")
def accelerate_saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose ``checkpoints/`` holds checkpoint_1..3 from four real ``save_state()``
    calls with automatic naming and total_limit=3."""

    def build(folder: Path) -> Path:
        accelerator, *prepared = accelerator_for(folder / "project", total_limit=3)
        for _ in range(4):
            step_and_save(accelerator, *prepared)
        return folder / "project"

    return built_once(tmp_path_factory, "acc", build)


@pytest.fixture(scope="session")
def lightning_saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two real fits of 3 epochs with ``ModelCheckpoint(save_top_k=-1)``: one
    ``epoch=E-step=S.ckpt`` per epoch and ``last.ckpt``, a symlink (``link``) or a copy (``copy``);
    each the ``checkpoints`` folder."""

    def build(base: Path) -> dict[str, Path]:
        found = {}
        for kind, save_last in (("link", "link"), ("copy", True)):
            lightning_fit(base / kind, 3, save_top_k=-1, save_last=save_last)
            found[kind] = base / kind / "checkpoints"
        return found

    return built_once(tmp_path_factory, "pl", build)


@pytest.fixture(scope="session")
def lightning_every_2_steps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real fit of 2 epochs of 4 steps, ``ModelCheckpoint(every_n_train_steps=2, save_top_k=-1)``:
    the ``checkpoints`` folder, ``epoch=0-step=2.ckpt`` to ``epoch=1-step=8.ckpt``."""

    def build(root: Path) -> Path:
        lightning_fit(root, 2, every_n_train_steps=2, save_top_k=-1)
        return root / "checkpoints"

    return built_once(tmp_path_factory, "pl_steps", build)


@dataclass(frozen=True)
class DeepSpeedRun:
    """A real ZeRO run (``frameworks.deepspeed_trained``) and what DeepSpeed's own
    ``engine.load_checkpoint`` loads from it, by tag (None: no tag, it follows ``latest``)."""

    path: Path
    stage: int
    loads: dict[str | None, dict[str, Any]]


def _deepspeed_run(factory: pytest.TempPathFactory, stage: int) -> DeepSpeedRun:
    path = deepspeed_trained(factory.mktemp("ds") / f"zero{stage}", stage)
    loaded = deepspeed_loads(path, stage, None, "global_step2", "global_step4")
    return DeepSpeedRun(path, stage, {None if found["tag"] == "-" else found["tag"]: found for found in loaded})


@pytest.fixture(scope="session")
def deepspeed_zero1(tmp_path_factory: pytest.TempPathFactory) -> DeepSpeedRun:
    return _deepspeed_run(tmp_path_factory, 1)


@pytest.fixture(scope="session")
def deepspeed_zero2(tmp_path_factory: pytest.TempPathFactory) -> DeepSpeedRun:
    return _deepspeed_run(tmp_path_factory, 2)


@pytest.fixture(scope="session")
def deepspeed_zero3(tmp_path_factory: pytest.TempPathFactory) -> DeepSpeedRun:
    return _deepspeed_run(tmp_path_factory, 3)
