"""The fresh-run matrix: each framework README's table names, run for real and broken the ways
runs break, with the framework itself deciding what ckptdoctor must say.

A framework's module (``tests/test_matrix_<framework>.py``) describes its run with a
:class:`Fresh` (one per way the framework saves) — how its own training code writes a run of
three saves, where its checkpoints and pointer are, how it restores one checkpoint and which one
its automatic resume picks — and calls :func:`matrix_tests`, which gives it one test per breakage:

- ``healthy``: the run as the framework left it;
- ``killed-mid-save``: the framework resumed from its newest save and SIGKILLed inside its own
  save code while writing the next one (:mod:`killer`), at each of the module's kill points;
- ``truncated-newest``: the newest checkpoint's largest file cut in half;
- ``zero-tail``: its last 4 KiB zeroed in place, the length kept (a disk that lost its last pages);
- ``deleted-state``: the newest checkpoint's optimizer (or trainer) state deleted;
- ``stale-pointer``: the framework's ``latest``-style pointer naming a checkpoint that is not there;
- ``deleted-pointer``: the pointer deleted;
- ``torn-copy``: the newest largest file's head over the previous save's same file, that file's
  tail kept (an interrupted ``rsync --inplace`` or ``cp`` onto an older copy).

The oracle is the framework's own restore: a checkpoint is *faithful* when the framework restores
it without error and what it restored (weights, optimizer and schedule, as a digest) equals what
the healthy run's same checkpoint restores; for a save the healthy run never made (a killed
save), when it restores at all. Then, for every breakage, ckptdoctor must:

1. name as resume point the newest faithful checkpoint (``verify --deep`` always; ``inspect``
   too, except where the module shows the damage lies only in bytes ``inspect`` does not read:
   :attr:`Fresh.inspect_blind`);
2. print an ``--resume-path`` from which the framework's restore gives that checkpoint's state
   (where ``inspect`` is blind to the damage, the resume path ``verify --deep`` names);
3. report an error whenever the framework's automatic resume would restore something else (it
   picks another checkpoint, or fails): CKD113/CKD114, or an error on the very checkpoint it picks
   (a hand-written loop has no pick of its own to warn of); a warning at least when it would
   start from scratch, or restore faithfully a checkpoint older than the newest faithful one
   (progress is lost, nothing fails: CKD116 is enough); and CKD110 when nothing is faithful;
4. say nothing at or above a warning about a healthy run, and exit 0.

Runs are built once per test session, in the pytest cache when it is on (``--cache-clear``
rebuilds them), and restores are remembered by the checkpoint's bytes, so each breakage restores
only what it changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import warm
from typer.testing import CliRunner

from ckptdoctor.cli import app

BREAKAGES = (
    "healthy",
    "killed-mid-save",
    "truncated-newest",
    "zero-tail",
    "deleted-state",
    "stale-pointer",
    "deleted-pointer",
    "torn-copy",
)
HARNESS = "1"
"""Part of every cached run's key: bump it when a change here makes old cached runs wrong."""
TAIL = 4096
"""How much of a file's end ``zero-tail`` zeroes."""
AUTO_ERRORS = frozenset({"CKD113", "CKD114"})
"""The rules that warn of the framework's automatic resume (a stale pointer, an unsafe pick)."""
AUTO_WARNINGS = AUTO_ERRORS | {"CKD116"}
"""The rules that warn of it where it loses progress without failing (a pick left behind)."""


class Unrestorable(Exception):
    """The framework's restore of a checkpoint failed: what it raised, or how its process ended."""


class Restored(Exception):
    """Raised from a hook of the framework's own training loop once it has restored everything it
    resumes, before its first step: what it restored, as :func:`tensors_digest` of ``states``."""

    def __init__(self, *states: Any) -> None:
        super().__init__()
        self.digest = tensors_digest(*states)


def restored_by(resume: Callable[[], object]) -> str:
    """What the framework's own ``resume()`` restored, from the :class:`Restored` a hook of it
    raises; :class:`Unrestorable` with what the framework raised instead."""
    try:
        resume()
    except Restored as restored:
        return restored.digest
    except Exception as error:
        raise Unrestorable(f"{type(error).__name__}: {error}") from error
    raise Unrestorable("trained without restoring")


@dataclass(frozen=True)
class KillPoint:
    """Where the killed save dies: during the ``write``-th file the framework writes (counting
    from 1), once ``fraction`` of its bytes are on disk (1.0: just after it is whole)."""

    write: int
    fraction: float

    @property
    def id(self) -> str:
        return f"file{self.write}-{round(self.fraction * 100)}pct"


@dataclass(frozen=True)
class Fresh:
    """One framework's fresh run, and how the framework itself reads it back."""

    name: str
    build: Callable[[Path], Path]
    """Write a real run of three saves into an empty folder with the framework's own training
    code; return the folder a user points ckptdoctor at."""
    checkpoints: Callable[[Path], dict[int, Path]]
    """The run's checkpoints, by index: each one's folder, or its one file."""
    restore: Callable[[Path, Path], str]
    """``restore(run, path)``: the framework restores the checkpoint at ``path`` (what
    ``--resume-path`` prints, or a checkpoint of :attr:`checkpoints`) and returns a digest of what
    it restored; raises :class:`Unrestorable` when the framework fails."""
    auto_resume: Callable[[Path], Path | None] | None
    """The checkpoint the framework's automatic resume picks in ``run`` (its ``latest``, the
    highest folder, ``last.ckpt``); None when it would start from scratch. Raises
    :class:`Unrestorable` when the pick itself fails. None where the framework has no automatic
    resume (burn resumes only the epoch its user names)."""
    save_more: str
    """A Python statement run in a child process with ``run`` (a ``Path``) set: resume from the
    newest save and save the next one. :func:`killed_mid_save` kills it inside that save; ``write``
    and ``fraction`` (the kill point) are set too, for a framework whose save runs in processes of
    its own launcher, to arm :mod:`killer` there (this process must then die of SIGKILL too)."""
    kill_points: Sequence[KillPoint] = ()
    state: Callable[[Path], Path] | None = None
    """The optimizer (or trainer) state file of a checkpoint; None where a checkpoint bundles it."""
    pointer: Callable[[Path], Path] | None = None
    """The framework's pointer file in a run; None where it keeps none."""
    stale: Callable[[Path], None] | None = None
    """Make the pointer name a checkpoint that is not there, as the framework writes it."""
    copies: Callable[[Path], dict[int, Path]] | None = None
    """Whole copies the framework also resumes from (Lightning's ``last.ckpt`` saved as a copy),
    by the index of the save their content holds."""
    files: Callable[[Path], list[Path]] | None = None
    """The files a checkpoint of :attr:`checkpoints` is made of where it is neither a folder nor
    one file (a hand-written loop's ``model_3.safetensors`` with ``optimizer_3.pt`` and
    ``scheduler_3.pt`` beside it; burn's ``model-E``, ``optim-E`` and ``scheduler-E``), those
    missing too, in the same order for every checkpoint."""
    overwritten: Callable[[Path], Path] | None = None
    """Where each save overwrites the one before (nanoGPT's one ``ckpt.pt``), so that the run
    holds one checkpoint: the previous save's copy of it, which :attr:`build` keeps aside (as a
    backup holds it) for ``torn-copy`` to tear the newest over."""
    shared: Callable[[Path], list[Path]] | None = None
    """Files outside a checkpoint that its restore reads too (torchtune 0.6.1's one
    ``recipe_state/recipe_state.pt`` beside every ``epoch_N/``): a restore is remembered by their
    bytes as well as the checkpoint's."""
    inspect_blind: dict[str, str] = field(default_factory=dict)
    """Breakages whose damage lies only in bytes ``inspect`` does not read in this framework's
    files, each with why (a zeroed tail of tensor data, a torn file whose framing both halves
    share): ``verify --deep`` must still see them."""
    healthy_warnings: dict[str, str] = field(default_factory=dict)
    """Rule codes that warn of every healthy run of this framework, each with why the warning is
    true (mmengine's resume that fails without an environment variable on this torch)."""
    relocate: Callable[[Path, Path], None] | None = None
    """``relocate(old, new)``: rewrite what the framework's own files say of the run's place after
    the run is copied from ``old`` to ``new``, as the framework writes it there (mmengine's
    ``last_checkpoint`` holds the full path), so that a copy is the run as if made in place."""


@dataclass
class _Oracle:
    """Restores remembered by checkpoint content, for one framework in one test session."""

    fresh: Fresh
    healthy: Path
    digests: dict[str, str | Unrestorable] = field(default_factory=dict)

    def restored(self, run: Path, path: Path) -> str | Unrestorable:
        key = content_key(self.fresh, path)
        if key not in self.digests:
            try:
                self.digests[key] = self.fresh.restore(run, path)
            except Unrestorable as failed:
                self.digests[key] = failed
        return self.digests[key]

    def faithful(self, run: Path, index: int, path: Path) -> bool:
        """Whether the framework restores checkpoint ``index`` as the healthy run saved it."""
        got = self.restored(run, path)
        if isinstance(got, Unrestorable):
            return False
        original = self.fresh.checkpoints(self.healthy).get(index)
        return original is None or got == self.restored(self.healthy, original)


def _members(fresh: Fresh, checkpoint: Path) -> list[Path]:
    """A checkpoint's files: those below its folder, those :attr:`Fresh.files` names, or itself."""
    if checkpoint.is_dir():
        return sorted(p for p in checkpoint.rglob("*") if p.is_file())
    return fresh.files(checkpoint) if fresh.files is not None else [checkpoint]


def content_key(fresh: Fresh, path: Path) -> str:
    """A digest of a checkpoint's names and bytes (its :func:`_members`, and :attr:`Fresh.shared`)."""
    named = [(str(file.relative_to(path) if path.is_dir() else file.name), file) for file in _members(fresh, path)]
    named += [(f"\0shared {file.name}", file) for file in (fresh.shared(path) if fresh.shared is not None else [])]
    digest = hashlib.sha256()
    for name, file in named:
        digest.update(name.encode())
        digest.update(file.read_bytes() if file.exists() else b"\0missing")
    return digest.hexdigest()


# --- breaking a copy of the run -------------------------------------------------------------------


def _largest(fresh: Fresh, checkpoint: Path) -> Path:
    files = [p for p in _members(fresh, checkpoint) if p.is_file()]
    return max(files, key=lambda p: (p.stat().st_size, str(p)))


def truncate_newest(fresh: Fresh, run: Path) -> None:
    newest = _newest(fresh, run)
    largest = _largest(fresh, newest)
    with largest.open("r+b") as file:
        file.truncate(largest.stat().st_size // 2)


def zero_tail(fresh: Fresh, run: Path) -> None:
    largest = _largest(fresh, _newest(fresh, run))
    size = largest.stat().st_size
    with largest.open("r+b") as file:
        file.seek(max(0, size - TAIL))
        file.write(bytes(min(TAIL, size)))


def torn_copy(fresh: Fresh, run: Path) -> None:
    """The newest largest file's first half written over the previous checkpoint's same file,
    whose tail stays, then put in the newest's place: what ``rsync --inplace`` leaves when it is
    cut off while updating an older copy."""
    indexes = sorted(fresh.checkpoints(run))
    newest = fresh.checkpoints(run)[indexes[-1]]
    previous = fresh.overwritten(run) if fresh.overwritten is not None else fresh.checkpoints(run)[indexes[-2]]
    largest = _largest(fresh, newest)
    if newest.is_dir():
        older = previous / largest.relative_to(newest)
        if not older.exists():  # a name of the content's (OCDBT's d/<hash>): the largest file of the same folder
            older = max((p for p in older.parent.iterdir() if p.is_file()), key=lambda p: (p.stat().st_size, str(p)))
    else:  # the file of the previous save's that holds what ``largest`` holds
        older = dict(zip(_members(fresh, newest), _members(fresh, previous), strict=True))[largest]
    head = largest.read_bytes()[: largest.stat().st_size // 2]
    tail = older.read_bytes()[len(head) :]
    largest.write_bytes(head + tail)


def delete_state(fresh: Fresh, run: Path) -> None:
    if fresh.state is None:
        pytest.skip(f"{fresh.name} bundles its optimizer state into the checkpoint")
    fresh.state(_newest(fresh, run)).unlink()


def stale_pointer(fresh: Fresh, run: Path) -> None:
    if fresh.stale is None:
        pytest.skip(f"{fresh.name} keeps no pointer to a checkpoint")
    fresh.stale(run)


def delete_pointer(fresh: Fresh, run: Path) -> None:
    if fresh.pointer is None:
        pytest.skip(f"{fresh.name} keeps no pointer to a checkpoint")
    fresh.pointer(run).unlink()


def _newest(fresh: Fresh, run: Path) -> Path:
    found = fresh.checkpoints(run)
    return found[max(found)]


BREAK: dict[str, Callable[[Fresh, Path], None]] = {
    "healthy": lambda fresh, run: None,
    "truncated-newest": truncate_newest,
    "zero-tail": zero_tail,
    "deleted-state": delete_state,
    "stale-pointer": stale_pointer,
    "deleted-pointer": delete_pointer,
    "torn-copy": torn_copy,
}


def killed_mid_save(fresh: Fresh, run: Path, point: KillPoint) -> None:
    """Resume ``run`` in a child process and SIGKILL it inside its next save (:mod:`killer`, :mod:`warm`)."""
    tests = Path(__file__).resolve().parent
    script = "\n".join(
        (
            "import sys",
            f"sys.path.insert(0, {str(tests)!r})",
            "import killer",
            "from pathlib import Path",
            f"run = Path({str(run)!r})",
            f"write, fraction = {point.write}, {point.fraction}",
            "killer.arm(write, fraction)",
            fresh.save_more,
            "killer.missed()",
        )
    )
    done = warm.run(script, _child_env(), timeout=600)  # forked with torch and the frameworks imported: seconds less each
    if done.returncode != -9:
        raise AssertionError(f"the save was not killed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def _child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}


# --- what ckptdoctor says ---------------------------------------------------------------------------


def ckptdoctor(*args: str | os.PathLike[str]) -> tuple[int, dict[str, Any] | str]:
    result = CliRunner().invoke(app, [str(a) for a in args], env={"NO_COLOR": "1", "COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if "--json" in args:
        return result.exit_code, json.loads(result.stdout)
    return result.exit_code, result.stdout.strip()


def _the_run(report: dict[str, Any]) -> dict[str, Any]:
    runs = report["runs"]
    assert len(runs) == 1, [r["path"] for r in runs]
    return runs[0]


def _resume_index(report: dict[str, Any]) -> int | None:
    resume = _the_run(report)["resume"]
    return None if resume is None else resume["index"]


def _summary(report: dict[str, Any]) -> str:
    lines = [f"{c['index']}: {c['status']}" for c in _the_run(report)["checkpoints"]]
    lines += [f"{f['code']} {f['severity']} {f['message']}" for f in report["findings"]]
    return "\n".join(lines)


# --- the tests --------------------------------------------------------------------------------------


def built_run(fresh: Fresh, request: pytest.FixtureRequest, version: str) -> Path:
    """``fresh``'s run, built once per session (and kept in the pytest cache, keyed by the
    framework's ``version`` and :data:`HARNESS`, where the cache is on)."""
    key = f"matrix-{fresh.name}-{version}-{HARNESS}"
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    folder = Path(cache.mkdir(key)) if cache is not None else request.getfixturevalue("tmp_path_factory").mktemp(key)
    done = folder / "built.json"
    if done.is_file():
        return folder / json.loads(done.read_text())["run"]
    for leftover in folder.iterdir():  # a build killed half-way
        shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    run = fresh.build(folder / "work")
    saves = 1 if fresh.overwritten is not None else 3
    assert len(fresh.checkpoints(run)) == saves, "three saves (the last one, where each overwrites the one before)"
    done.write_text(json.dumps({"run": str(run.relative_to(folder))}))
    return run


def check(fresh: Fresh, oracle: _Oracle, run: Path, breakage: str) -> None:
    """Everything ckptdoctor says of ``run`` against what the framework does with it."""
    found = fresh.checkpoints(run)
    candidates = {index: [path] for index, path in found.items()}
    for index, path in (fresh.copies(run) if fresh.copies else {}).items():
        candidates.setdefault(index, []).append(path)
    faithful = {
        index: path for index in sorted(candidates) for path in reversed(candidates[index]) if oracle.faithful(run, index, path)
    }  # a copy first: the file its pick resumes from, where both are whole
    expected = max(faithful) if faithful else None
    exit_code, deep = ckptdoctor("verify", "--deep", "--json", run)
    assert isinstance(deep, dict)
    said = _summary(deep)
    assert _resume_index(deep) == expected, f"verify --deep: the framework restores {expected} faithfully\n{said}"
    _, shallow = ckptdoctor("inspect", "--json", run)
    assert isinstance(shallow, dict)
    if breakage not in fresh.inspect_blind:
        assert _resume_index(shallow) == expected, f"inspect: the framework restores {expected} faithfully\n{_summary(shallow)}"
    errors = {f["code"] for f in deep["findings"] if f["severity"] == "error"}
    if expected is None:
        assert "CKD110" in errors, said
        return
    if breakage in fresh.inspect_blind:  # what inspect --resume-path prints is inspect's verdict: verify --deep's path
        printed = _the_run(deep)["resume"]["path"]
    else:
        printed_code, printed = ckptdoctor("inspect", "--resume-path", run)
        assert printed_code == 0 and isinstance(printed, str)
    wanted = oracle.restored(run, faithful[expected])
    assert oracle.restored(run, Path(printed)) == wanted, f"--resume-path {printed} restores checkpoint {expected}"
    if fresh.auto_resume is None:  # the user names the checkpoint (as --resume-path, checked above): nothing picks for them
        picked: Path | Unrestorable | None = faithful[expected]
    else:
        try:
            picked = fresh.auto_resume(run)
        except Unrestorable as failed:
            picked = failed
    warned = {f["code"] for f in deep["findings"] if f["severity"] in ("error", "warning")}
    if picked is None:  # from scratch, silently: progress lost, the job itself fine
        assert warned & AUTO_ERRORS, f"the automatic resume starts from scratch, not from {faithful[expected]}\n{said}"
    elif not isinstance(picked, Unrestorable) and _older(oracle, run, picked, faithful, expected):
        assert warned & AUTO_WARNINGS, f"the automatic resume goes back to {picked}, not {faithful[expected]}\n{said}"
    elif isinstance(picked, Unrestorable) or oracle.restored(run, picked) != wanted:
        warned_of = errors & AUTO_ERRORS or _errors_on(deep, picked, candidates)
        assert warned_of, f"the automatic resume picks {picked}, not {faithful[expected]}\n{said}"
    if breakage == "healthy":
        assert exit_code == 0, said
        loud = [f for f in deep["findings"] if f["severity"] in ("error", "warning") and f["code"] not in fresh.healthy_warnings]
        assert not loud, said
        assert expected == max(found), "a healthy run resumes from its newest save"


def _older(oracle: _Oracle, run: Path, picked: Path, faithful: dict[int, Path], expected: int) -> bool:
    """Whether the framework restores ``picked`` as it restores a faithful checkpoint older than
    ``expected``: a resume that goes back, without failing."""
    restored = oracle.restored(run, picked)
    return any(restored == oracle.restored(run, path) for index, path in faithful.items() if index < expected)


def _errors_on(report: dict[str, Any], picked: Path | Unrestorable, candidates: dict[int, list[Path]]) -> list[str]:
    """The errors reported of the checkpoint or file an automatic pick loads: a framework with no
    pick of its own (a hand-written loop's "highest number") is warned of it by what is said of
    that checkpoint, not by CKD114."""
    if isinstance(picked, Unrestorable):
        return []
    index = next((i for i, paths in candidates.items() if any(p.resolve() == picked.resolve() for p in paths)), None)
    return [
        f["code"]
        for f in report["findings"]
        if f["severity"] == "error"
        and ((index is not None and f["index"] == index) or (f["path"] and Path(f["path"]).resolve() == picked.resolve()))
    ]


def matrix_tests(
    version: str, *variants: Fresh, expected_failures: Mapping[str, str] | None = None
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The two parametrised tests of a framework's module, over each of its ``variants`` (a
    framework's ways of saving: Lightning's ``last.ckpt`` as a link or a copy): assign them to
    module names (``test_breakage, test_killed_mid_save = matrix_tests(...)``).

    ``expected_failures`` maps a case's id (``"<variant>-<breakage>"``, ``"<variant>-<kill point>"``)
    to what ckptdoctor says wrongly there and what the framework does: each is a strict xfail, so
    that the day it is fixed the mark must go."""
    built: dict[str, tuple[Path, _Oracle]] = {}
    known = dict(expected_failures or {})

    def healthy(fresh: Fresh, request: pytest.FixtureRequest) -> tuple[Path, _Oracle]:
        if fresh.name not in built:
            run = built_run(fresh, request, version)
            built[fresh.name] = run, _Oracle(fresh, run)
        return built[fresh.name]

    def case(case_id: str, *values: object) -> Any:
        marks = [pytest.mark.xfail(strict=True, reason=known.pop(case_id))] if case_id in known else []
        return pytest.param(*values, id=case_id, marks=marks)

    breakages = [case(f"{f.name}-{b}", f, b) for f in variants for b in BREAKAGES if b != "killed-mid-save"]
    kills = [case(f"{f.name}-{p.id}", f, p) for f in variants for p in f.kill_points]
    if known:
        raise ValueError(f"expected failures of no case: {sorted(known)}")

    @pytest.mark.parametrize(("fresh", "breakage"), breakages)
    def test_breakage(fresh: Fresh, breakage: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        run, oracle = healthy(fresh, request)
        run = _copy(fresh, run, tmp_path)
        BREAK[breakage](fresh, run)
        check(fresh, oracle, run, breakage)

    @pytest.mark.parametrize(("fresh", "point"), kills)
    def test_killed_mid_save(fresh: Fresh, point: KillPoint, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        run, oracle = healthy(fresh, request)
        run = _copy(fresh, run, tmp_path)
        killed_mid_save(fresh, run, point)
        check(fresh, oracle, run, "killed-mid-save")

    return test_breakage, test_killed_mid_save


def _copy(fresh: Fresh, healthy: Path, tmp_path: Path) -> Path:
    """A copy of the built run's whole work folder (a run's folder may be below it), symlinks kept."""
    work = healthy
    while work.name != "work":
        work = work.parent
    copied = shutil.copytree(work, tmp_path / "work", symlinks=True) / healthy.relative_to(work)
    if fresh.relocate is not None:
        fresh.relocate(healthy, copied)
    return copied


def tensors_digest(*states: Any) -> str:
    """A digest of nested state (dicts, lists, tensors, numbers, strings), in key order: what a
    framework restored, to compare with what it restores from the healthy run."""
    digest = hashlib.sha256()
    for state in states:
        for item in _walk(state):
            digest.update(item)
    return digest.hexdigest()


def _walk(value: Any) -> Iterator[bytes]:
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            yield str(key).encode()
            yield from _walk(value[key])
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _walk(item)
    elif hasattr(value, "detach") and hasattr(value, "untyped_storage"):  # a tensor: its bytes, exactly
        import torch

        yield str((value.dtype, tuple(value.shape))).encode()
        yield value.detach().cpu().reshape(-1).clone().view(torch.uint8).numpy().tobytes()
    elif hasattr(value, "tobytes"):
        yield value.tobytes()
    else:
        yield repr(value).encode()
