"""Record what Ultralytics itself does with the committed runs (``make_run.py``), whole and broken
the ways of ``tests/matrix.py``, into ``oracle.json``, for the tests that cannot run Ultralytics.

Run from the repository root in the test venv (it breaks the run with ``matrix.py``'s own
functions and this module's ``test_matrix_ultralytics.ULTRALYTICS``), giving it the Python of the
venv ``make_run.py`` names, which it asks for every answer of Ultralytics' (``make_run.py``'s
requests, each in a process of its own)::

    PYTHONPATH=. python tests/data/ultralytics/record_oracle.py /tmp/yolo-venv/bin/python

It records, by each file's sha256 (``restores``): what ``YOLO(path).train(resume=True)`` restores
(the epoch it goes on at and a digest of the model, EMA, optimizer, scaler and fitness it
restored) or the error it stops with, for every ``.pt`` file of the run after each breakage, of
each killed save and of the extra files ``test_ultralytics.py`` asks about (``EXTRA``); what it
restores from the healthy run's files with ``ULTRALYTICS_SAFE_LOAD=1`` (``safe_load``: its own
``weights_only=True`` loader, by file name); which
file ``get_latest_run`` (``yolo train resume`` with no model) picks after each breakage
(``latest``), checked against the test module's mirror of it; and, for each kill point, the files
the replayed resumed save leaves (``frameworks.yolo_resumed_save`` under ``killer``) beside those
Ultralytics' own resume leaves when ``killer`` kills it there: the same names and sizes, and the
same answers from Ultralytics (``kills``), or the recording fails.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parents[1]
sys.path.insert(0, str(TESTS))

import matrix  # noqa: E402
import pytest  # noqa: E402
import test_matrix_ultralytics as module  # noqa: E402
from frameworks import yolo_edited, yolo_run  # noqa: E402
from sample_set import _add_setitem  # noqa: E402

SAFE_LOAD = {"ULTRALYTICS_SAFE_LOAD": "1"}
"""``torch_safe_load``'s opt-in: ``weights_only=True`` with Ultralytics' own allowlist (``_SafeLoad``)."""
PATHS = 1024
"""How much two saves of one epoch may differ in size for the paths their ``train_args`` hold."""
EXTRA: dict[str, Callable[[Path], bytes]] = {
    # epoch2.pt saved with no optimizer state (what test_ultralytics.py makes by editing its pickle)
    "epoch2.pt with optimizer None": lambda weights: yolo_edited(weights / "epoch2.pt", lambda p: _add_setitem(p, "optimizer", b"N")),
}


class Recorder:
    def __init__(self, python: str, scratch: Path) -> None:
        self.python = python
        self.scratch = scratch
        os.environ["YOLO_CONFIG_DIR"] = str(scratch / "config")
        self.data = Path(self.ask("dataset", scratch / "data"))
        self.restores: dict[str, dict[str, Any]] = {}

    def ask(self, *request: object, env: dict[str, str] | None = None) -> Any:
        done = subprocess.run(
            [self.python, str(HERE / "make_run.py"), *map(str, request)],
            capture_output=True,
            text=True,
            cwd=self.scratch,
            env={**os.environ, **(env or {})},
        )
        if done.returncode != 0:
            raise RuntimeError(f"make_run.py {request} failed:\n{done.stderr[-4000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def restored(self, path: Path, seen: str = "") -> dict[str, Any]:
        key = hashlib.sha256(path.read_bytes()).hexdigest()
        if key not in self.restores:
            self.restores[key] = {"seen": seen or path.name, **self.ask("restore", path, self.data)}
            print(f"{self.restores[key]['seen']}: {self.restores[key].get('error') or self.restores[key]['resumes_at']}", flush=True)
        return self.restores[key]

    def restore(self, run: Path, path: Path) -> str:
        found = self.restored(path)
        if "error" in found:
            raise matrix.Unrestorable(found["error"])
        return str(found["digest"])

    def every_file(self, run: Path, case: str) -> dict[str, dict[str, Any]]:
        """Each ``.pt`` file of a run (its weights folder), by name: its size and content's sha256,
        under which ``restores`` holds Ultralytics' answer."""
        found = {}
        for path in sorted(run.glob("*.pt")):
            self.restored(path, f"{case}: {path.name}")
            found[path.name] = {"size": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
        return found

    def answer(self, file: dict[str, Any]) -> dict[str, Any]:
        """Ultralytics' answer for a file of ``every_file``: the epoch it resumes at and what it restores, or its error."""
        restored = self.restores[file["sha256"]]
        return {"error": True} if "error" in restored else {key: restored[key] for key in ("resumes_at", "digest")}


def main(python: str) -> None:
    with tempfile.TemporaryDirectory(prefix="ckptdoctor-yolo-oracle-") as scratch:
        work = Path(scratch)
        recorder = Recorder(python, work)
        fresh = dataclasses.replace(
            module.ULTRALYTICS, restore=recorder.restore, copies=lambda run: module.last_copy(run, recorder.restored)
        )
        healthy = yolo_run(work / "source")
        latest: dict[str, str | None] = {}
        safe_load: dict[str, Any] = {}
        for breakage in matrix.BREAKAGES:
            if breakage == "killed-mid-save":
                continue
            run = yolo_run(work / "broken" / breakage)
            try:
                matrix.BREAK[breakage](fresh, run)
            except pytest.skip.Exception:
                continue
            files = recorder.every_file(run, breakage)
            if breakage == "healthy":  # Ultralytics' own restricted loader (weights_only=True and its allowlist)
                safe_load = {name: recorder.ask("restore", run / name, recorder.data, env=SAFE_LOAD) for name in files}
            picked = recorder.ask("latest", run.parent)
            latest[breakage] = str(Path(picked).relative_to(run.parent)) if picked else None
            mirrored = _mirror(run)
            assert mirrored == latest[breakage], f"{breakage}: get_latest_run picks {picked}, the test's mirror {mirrored}"
        for name, make in EXTRA.items():
            extra = work / "extra" / name.split()[0]
            extra.parent.mkdir(parents=True, exist_ok=True)
            extra.write_bytes(make(healthy))
            recorder.restored(extra, name)
        for family in ("yolo11", "yolov8"):
            recorder.restored(yolo_run(work / family, family) / "last.pt", f"{family}: last.pt (finished, stripped)")
        kills: dict[str, Any] = {}
        real = dataclasses.replace(fresh, save_more=_real_resume(python, recorder.data))
        for point in module.ULTRALYTICS.kill_points:
            replayed, killed = yolo_run(work / "replayed" / point.id), yolo_run(work / "killed" / point.id)
            matrix.killed_mid_save(module.ULTRALYTICS, replayed, point)
            matrix.killed_mid_save(real, killed, point)
            kills[point.id] = {
                "replayed": recorder.every_file(replayed, f"{point.id} (replayed)"),
                "ultralytics": recorder.every_file(killed, f"{point.id} (Ultralytics killed)"),
            }
            _same_outcome(point.id, recorder, kills[point.id]["replayed"], kills[point.id]["ultralytics"])
    oracle = {
        "made_with": versions(python),
        "latest": latest,
        "safe_load": safe_load,
        "kills": kills,
        "restores": dict(sorted(recorder.restores.items())),
    }
    (HERE / "oracle.json").write_text(json.dumps(oracle, indent=1, ensure_ascii=False) + "\n")


def _mirror(run: Path) -> str | None:
    try:
        picked = module.auto_resume(run)
    except matrix.Unrestorable:
        return None
    return None if picked is None else str(picked.relative_to(run.parent))


def _real_resume(python: str, data: Path) -> str:
    """``Fresh.save_more`` that becomes Ultralytics' own resume, killed where ``killer`` was armed:
    the process turns into the Ultralytics venv's Python (same process, so the SIGKILL is its own)."""
    return "\n".join(
        (
            "import os",
            f"os.execv({python!r}, [{python!r}, {str(HERE / 'make_run.py')!r}, 'killed', str(run), {str(data)!r}, "
            "str(killer._TARGET), str(killer._FRACTION)])",
        )
    )


def _same_outcome(point: str, recorder: Recorder, replayed: dict[str, Any], killed: dict[str, Any]) -> None:
    """The replayed save and Ultralytics' own, killed at one point, leave the same files, of the
    same sizes but for the paths they record, from which Ultralytics restores the same state, or
    which it refuses alike (their bytes differ in the ``date`` each save records)."""
    for name in sorted(replayed.keys() | killed.keys()):
        mine, theirs = replayed.get(name), killed.get(name)
        assert mine is not None and theirs is not None, f"{point}: {name} only in one of them"
        # train_args records the save's paths (save_dir, data, resume), which differ in length
        assert abs(mine["size"] - theirs["size"]) <= PATHS, f"{point}: {name} is {mine['size']} bytes replayed, {theirs['size']} killed"
        assert recorder.answer(mine) == recorder.answer(theirs), (
            f"{point}: {name}: {recorder.answer(mine)} replayed, {recorder.answer(theirs)} killed"
        )


def versions(python: str) -> dict[str, str]:
    code = "import sys, torch, torchvision, ultralytics, numpy; print(sys.version.split()[0], torch.__version__, torchvision.__version__, ultralytics.__version__, numpy.__version__)"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()[-1].split()
    return dict(zip(("python", "torch", "torchvision", "ultralytics", "numpy"), out, strict=True))


if __name__ == "__main__":
    main(sys.argv[1])
