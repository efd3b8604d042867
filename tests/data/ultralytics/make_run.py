"""Make the real Ultralytics runs under ``tests/data/ultralytics/`` with Ultralytics' own trainer,
and do what ``record_oracle.py`` asks of Ultralytics.

Ultralytics cannot run in the test venv (its torchvision there is a CUDA build that does not
import), so its runs are committed, made by this script in a venv of exactly::

    Python 3.11.7 (x86_64), torch==2.14.1, torchvision==0.29.1, ultralytics==8.4.190
    (numpy 2.4.6, opencv-python 5.1.0.95, polars 2.1.0; CPU only)

    python3.11 -m venv /tmp/yolo-venv
    /tmp/yolo-venv/bin/pip install torch==2.14.1 torchvision==0.29.1 ultralytics==8.4.190
    /tmp/yolo-venv/bin/python tests/data/ultralytics/make_run.py

Nothing is downloaded: the dataset is drawn here (``dataset``), the models are built from the
YAML files beside this script (scaled-down YOLO26, YOLO11 and YOLOv8 detection models), with no
pretrained weights, ``amp=False`` (``check_amp`` would fetch ``yolo26n.pt``), ``plots=False`` (the
plots fetch a font), ``YOLO_OFFLINE=1``, and every socket connection raises (``offline``).

With no arguments it writes, each with ``YOLO(yaml).train`` in a process of its own:

- ``run/train/``: the fresh-run matrix's run (``tests/test_matrix_ultralytics.py``):
  ``yolo26t.yaml``, ``epochs=10, save_period=1``, stopped right after its third save (the
  ``on_model_save`` callback of epoch 2 ends the process, as a preempted job ends):
  ``weights/last.pt``, ``best.pt``, ``epoch0.pt`` .. ``epoch2.pt``, ``args.yaml``, ``results.csv``;
- ``resumed/``: that run resumed (``YOLO("last.pt").train(resume=True)``) and stopped after its next
  save: the files the resumed process wrote (``train/``), and the order and modes it opened them
  in (``writes.json``), which the matrix replays under ``killer`` for its killed-mid-save cases;
- ``yolo11/train/weights/last.pt`` and ``yolov8/train/weights/last.pt``: ``yolo11t.yaml`` and
  ``yolov8t.yaml`` trained to the end (``epochs=2``), so that ``final_eval`` left ``last.pt``
  stripped (``strip_optimizer``): the classes those model families pickle, in a finished run.

``make_run.py tasks`` writes only ``segment/``, ``classify/``, ``pose/`` and ``obb/`` (``TASKS``: the
``yolo11t-*.yaml`` models, each on a dataset of its task, stopped after its first save: a resumable
``weights/last.pt``) and ``tasks.json``, what Ultralytics' own resume restores from each.
``make_run.py classes`` writes ``classes.json``: the classes the layout vouches for (``classes``).

Each save records its date, so the files differ from one making to the next: run
``record_oracle.py`` after this script. It (run from the test venv) calls the other commands: ``dataset DIR``,
``restore PATH DATA``, ``killed RUN DATA WRITE FRACTION`` and ``latest DIR``.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parents[1]
RUNS = {
    # name: (model YAML, epochs, save_period, stop after this many saves (0: train to the end), kept)
    "run": ("yolo26t.yaml", 10, 1, 3, ("weights", "args.yaml", "results.csv")),
    "yolo11": ("yolo11t.yaml", 2, -1, 0, ("weights/last.pt",)),
    "yolov8": ("yolov8t.yaml", 2, -1, 0, ("weights/last.pt",)),
}
TASKS = {
    # task run: (model YAML, its dataset's task); each trained as "run" is and stopped after its first
    # save (epochs=2, save_period=1): weights/last.pt, a whole resumable save of epoch 0
    "segment": ("yolo11t-seg.yaml", "segment"),
    "classify": ("yolo11t-cls.yaml", "classify"),
    "pose": ("yolo11t-pose.yaml", "pose"),
    "obb": ("yolo11t-obb.yaml", "obb"),
}
TASKS_ORACLE = HERE / "tasks.json"
"""What ``YOLO(path).train(resume=True)`` restores from each task run's ``last.pt`` (``restore``), by
its content's sha256, recorded by ``make_run.py tasks`` as it makes them."""
RESUMED_SAVES = RUNS["run"][3] + 1
"""The run resumed saves once more, then ends as it ended the first time."""
IMAGE = 64
TRAIN_ARGS = {
    "imgsz": IMAGE,
    "batch": 4,
    "workers": 0,
    "device": "cpu",
    "optimizer": "SGD",  # its momentum is saved in fp16 (convert_optimizer_state_dict_to_fp16): small files
    "lr0": 0.01,
    "amp": False,
    "plots": False,
    "pretrained": False,
    "seed": 0,
    "deterministic": True,
    "verbose": False,
    "exist_ok": True,
    "mosaic": 0.0,
}


def offline() -> None:
    """Every socket connection of this process raises: nothing is fetched unnoticed."""
    os.environ["YOLO_OFFLINE"] = "1"

    def refuse(self: socket.socket, *args: object) -> None:
        raise OSError(f"make_run.py is offline: a connection to {args} was refused")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign,assignment]


def dataset(root: Path, task: str = "detect") -> Path:
    """A tiny two-class dataset of ``task`` drawn with a fixed seed (12 training and 4 validation
    images, 64 px, one to three filled rectangles each, labelled as that task labels them: boxes,
    their corners as polygons (``segment``) or rotated boxes (``obb``), boxes with their two corners
    as keypoints (``pose``); for ``classify``, one class folder per colour); returns its data YAML
    (the dataset's folder for ``classify``)."""
    import cv2
    import numpy as np

    rng = np.random.default_rng(0)
    colours = ((40, 40, 220), (220, 120, 30))  # class 0 red, class 1 blue (BGR)
    names = ("red", "blue")
    for split, count in (("train", 12), ("val", 4)):
        for folder in () if task == "classify" else ("images", "labels"):
            (root / folder / split).mkdir(parents=True, exist_ok=True)
        for number in range(count):
            image = rng.integers(90, 160, (IMAGE, IMAGE, 3), dtype=np.uint8)
            rows = []
            for _ in range(int(rng.integers(1, 4))):
                cls = int(rng.integers(0, 2))
                w, h = (int(v) for v in rng.integers(12, 32, 2))
                x, y = int(rng.integers(0, IMAGE - w)), int(rng.integers(0, IMAGE - h))
                image[y : y + h, x : x + w] = colours[cls]
                x0, y0, x1, y1 = x / IMAGE, y / IMAGE, (x + w) / IMAGE, (y + h) / IMAGE
                box = f"{(x + w / 2) / IMAGE:.6f} {(y + h / 2) / IMAGE:.6f} {w / IMAGE:.6f} {h / IMAGE:.6f}"
                corners = f"{x0:.6f} {y0:.6f} {x1:.6f} {y0:.6f} {x1:.6f} {y1:.6f} {x0:.6f} {y1:.6f}"
                keypoints = f"{x0:.6f} {y0:.6f} 2 {x1:.6f} {y1:.6f} 2"
                rows.append(f"{cls} " + {"segment": corners, "obb": corners, "pose": f"{box} {keypoints}"}.get(task, box))
            if task == "classify":  # the image's class: its first rectangle's colour
                (root / split / names[int(rows[0][0])]).mkdir(parents=True, exist_ok=True)
                cv2.imwrite(str(root / split / names[int(rows[0][0])] / f"{number}.png"), image)
                continue
            cv2.imwrite(str(root / "images" / split / f"{number}.png"), image)
            (root / "labels" / split / f"{number}.txt").write_text("\n".join(rows) + "\n")
    if task == "classify":
        return root
    data = root / "data.yaml"
    keypoints = "kpt_shape: [2, 3]\nflip_idx: [1, 0]\n" if task == "pose" else ""
    data.write_text(f"path: {root}\ntrain: images/train\nval: images/val\n{keypoints}names:\n  0: red\n  1: blue\n")
    return data


def _stop_after(model: Any, saves: int) -> None:
    """End the process (``os._exit``) once the trainer has saved epoch ``saves - 1``: a preempted job."""

    def preempted(trainer: Any) -> None:
        if trainer.epoch + 1 == saves:
            os._exit(0)

    model.add_callback("on_model_save", preempted)


def train(model_yaml: str, data: Path, project: Path, epochs: int, save_period: int, stop_after: int) -> None:
    """``YOLO(model_yaml).train(...)`` into ``project/train``."""
    offline()
    from ultralytics import YOLO

    model = YOLO(str(HERE / model_yaml))
    if stop_after:
        _stop_after(model, stop_after)
    model.train(data=str(data), epochs=epochs, save_period=save_period, project=str(project), name="train", **TRAIN_ARGS)


def resume(run: Path, data: Path, stop_after: int | None = None) -> None:
    """``YOLO(run / "last.pt").train(resume=True)``, as ``yolo train resume model=.../last.pt`` does,
    saving into the run's own folder (``save_dir`` is one of the arguments a resume may change)."""
    offline()
    from ultralytics import YOLO

    model = YOLO(str(run / "last.pt"))
    if stop_after is not None:
        _stop_after(model, stop_after)
    model.train(resume=True, data=str(data), save_dir=str(run.parent))


def resumed_writes(run: Path, data: Path, out: Path) -> None:
    """Resume ``run`` for one more save, noting every file it opens for writing (path, mode), in
    order, into ``out`` (JSON): the order ``killer`` counts them in."""
    opened: list[tuple[str, str]] = []
    real_open = builtins.open

    def noting(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(flag in mode for flag in "wax") and not isinstance(file, int):
            opened.append((os.path.realpath(file), mode))
            with real_open(out, "w") as noted:  # as it goes: the process ends with os._exit
                noted.write(json.dumps(opened))
        return real_open(file, mode, *args, **kwargs)

    builtins.open = noting  # type: ignore[assignment]
    io.open = noting  # type: ignore[assignment]
    resume(run, data, stop_after=RESUMED_SAVES)


def killed(run: Path, data: Path, write: int, fraction: float) -> None:
    """``resume`` with ``killer`` armed: SIGKILLed inside the ``write``-th file it writes."""
    sys.path.insert(0, str(TESTS))
    import killer

    killer.arm(write, fraction)
    resume(run, data, stop_after=RESUMED_SAVES)
    killer.missed()


def restore(path: Path, data: Path) -> dict[str, Any]:
    """What ``YOLO(path).train(resume=True)`` restores before its first step (its
    ``on_pretrain_routine_end``): the epoch it goes on at and a digest of the model, the EMA and
    its updates, the optimizer, the scaler, ``best_fitness`` and the early stopper; or the error
    it stops with."""
    offline()
    from ultralytics import YOLO

    class Restored(Exception):
        pass

    found: dict[str, Any] = {}

    def captured(trainer: Any) -> None:
        found["resumes_at"] = int(trainer.start_epoch)
        found["epochs"] = int(trainer.epochs)
        found["digest"] = _digest(
            trainer.model.state_dict(),
            trainer.ema.ema.state_dict(),
            trainer.ema.updates,
            trainer.optimizer.state_dict(),
            trainer.scaler.state_dict(),
            trainer.best_fitness,
            vars(trainer.stopper),
            trainer.start_epoch,
        )
        raise Restored

    with tempfile.TemporaryDirectory() as save_dir:
        try:
            model = YOLO(str(path))
            if not (model.ckpt and model.ckpt.get("epoch", -1) >= 0 and model.ckpt.get("optimizer") is not None):
                # Model.train: "not a resumable training checkpoint ... Starting new training instead"
                return {
                    "error": f"not a resumable training checkpoint: train(resume=True) starts a new training (epoch {model.ckpt.get('epoch')})"
                }
            model.add_callback("on_pretrain_routine_end", captured)
            model.train(resume=True, data=str(data), save_dir=save_dir)
        except Restored:
            return found
        except Exception as error:
            said = str(error).replace(str(path), path.name).strip()  # the scratch folder's name is no part of it
            return {"error": f"{type(error).__name__}: {said.splitlines()[0] if said else ''}"}
    return {"error": "train(resume=True) trained without restoring (no on_pretrain_routine_end)"}


def _digest(*states: Any) -> str:
    """A digest of nested state (dicts, lists, tensors, numbers, strings), in key order."""
    import torch

    digest = hashlib.sha256()
    stack: list[Any] = list(reversed(states))
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key in sorted(value, key=str, reverse=True):
                stack += [value[key], str(key)]
        elif isinstance(value, list | tuple):
            stack += list(reversed(value))
        elif isinstance(value, torch.Tensor):
            digest.update(str((value.dtype, tuple(value.shape))).encode())
            digest.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()


def latest(folder: Path) -> str:
    """``get_latest_run``: what ``yolo train resume`` with no model resumes below ``folder``."""
    from ultralytics.utils.files import get_latest_run

    return get_latest_run(str(folder))


def tasks() -> None:
    """``make_run.py tasks``: only the task runs (``TASKS``), each under ``<task>/train/weights/last.pt``,
    and what Ultralytics restores from each (``TASKS_ORACLE``); the other runs are left as they are."""
    offline()
    answers = {}
    with tempfile.TemporaryDirectory(prefix="ckptdoctor-yolo-") as scratch:
        work = Path(scratch)
        for name, (model_yaml, task) in TASKS.items():
            data = dataset(work / f"data-{task}", task)
            _child(work, "train", model_yaml, data, work / name, 2, 1, 1)
            target = HERE / name / "train" / "weights"
            shutil.rmtree(target.parents[1], ignore_errors=True)
            target.mkdir(parents=True)
            shutil.copy2(work / name / "train" / "weights" / "last.pt", target / "last.pt")
            restored = _asked(work, "restore", target / "last.pt", data)
            answers[hashlib.sha256((target / "last.pt").read_bytes()).hexdigest()] = {"seen": f"{name}/last.pt", **restored}
    TASKS_ORACLE.write_text(json.dumps(answers, indent=1) + "\n")


CLASSES = HERE / "classes.json"
"""The classes ``classes`` finds: those the layout vouches for, and those it leaves out and why."""
REBUILDS_MORE = ("__new__", "__setstate__", "__setattr__", "__reduce__", "__reduce_ex__")
"""What a class may define for unpickling to run more than ``cls.__new__(cls)`` and ``__dict__.update``."""
REVIEWED = {
    # torch's own __setstate__ that only set a missing attribute's default, then nn.Module's
    "torch.nn.modules.conv._ConvNd": "padding_mode",
    "torch.nn.modules.activation.Softmax": "dim",
    "torch.nn.modules.activation.Softmin": "dim",
    "torch.nn.modules.activation.LogSoftmax": "dim",
    "torch.nn.modules.activation.MultiheadAttention": "_qkv_same_embed_dim",
    "torch.nn.modules.pooling.AvgPool3d": "padding, ceil_mode, count_include_pad",
    "torch.nn.modules.upsampling.Upsample": "recompute_scale_factor",
}
"""Classes whose ``__setstate__`` was read (torch 2.14): each sets the default of the attribute named, if
missing, and calls ``nn.Module.__setstate__`` (``__dict__.update`` and the hook tables an old save lacks)."""


def classes() -> None:
    """``make_run.py classes``: every class Ultralytics' own restricted loader (``_SafeLoad.loading``,
    ``nn/tasks.py``) admits by rule, ``nn.Module`` subclasses defined in ``torch.nn.modules.*``,
    ``ultralytics.nn.modules.*`` and ``ultralytics.nn.tasks``, split into those whose unpickling runs
    nothing but ``cls.__new__(cls)`` and ``nn.Module.__setstate__`` (no ``REBUILDS_MORE`` of their own,
    or only one ``REVIEWED``), which the layout vouches for, and the others, with what they define;
    plus the torchvision transforms and enum it admits by name, written into ``CLASSES``."""
    import importlib
    import pkgutil

    import torch.nn.modules
    import torchvision.transforms.transforms as transforms
    import ultralytics.nn.modules
    import ultralytics.nn.tasks
    from torch import nn

    modules = [
        importlib.import_module(f"{package.__name__}.{found.name}")
        for package in (torch.nn.modules, ultralytics.nn.modules)
        for found in pkgutil.iter_modules(package.__path__)
    ]
    vouched, excluded = [], {}
    for module in (*modules, ultralytics.nn.tasks):
        for value in vars(module).values():
            if not (isinstance(value, type) and value.__module__ == module.__name__ and issubclass(value, nn.Module)):
                continue
            name = f"{module.__name__}.{value.__qualname__}"
            defines = [
                f"{f'{k.__module__}.{k.__qualname__}'}.{method}"
                for k in value.__mro__
                if k not in (nn.Module, object)
                for method in REBUILDS_MORE
                if method in vars(k)
            ]
            unreviewed = [d for d in defines if not (d.endswith(".__setstate__") and d.rpartition(".")[0] in REVIEWED)]
            if unreviewed:
                excluded[name] = unreviewed
            else:
                vouched.append(name)
    plain = [transforms.Compose, transforms.Normalize, transforms.Resize, transforms.CenterCrop, transforms.ToTensor]
    for value in plain:
        assert not [m for k in value.__mro__ if k not in (nn.Module, object) for m in REBUILDS_MORE if m in vars(k)], value
    data = {
        "vouched": sorted(vouched + [f"{v.__module__}.{v.__qualname__}" for v in plain]),
        "excluded": dict(sorted(excluded.items())),
    }
    CLASSES.write_text(json.dumps(data, indent=1) + "\n")


def _asked(work: Path, *request: object) -> Any:
    """``command(request)`` in a process of its own: its answer."""
    done = subprocess.run(
        [sys.executable, __file__, *map(str, request)], check=True, cwd=work, capture_output=True, text=True,
        env={**os.environ, "YOLO_CONFIG_DIR": str(work / "config")},
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    offline()
    with tempfile.TemporaryDirectory(prefix="ckptdoctor-yolo-") as scratch:
        work = Path(scratch)
        data = dataset(work / "data")
        for name, (model_yaml, epochs, save_period, stop_after, kept) in RUNS.items():
            project = work / name
            _child(work, "train", model_yaml, data, project, epochs, save_period, stop_after)
            target = HERE / name / "train"
            shutil.rmtree(target.parent, ignore_errors=True)
            for path in kept:
                (target / path).parent.mkdir(parents=True, exist_ok=True)
                source = project / "train" / path
                (shutil.copytree if source.is_dir() else shutil.copy2)(source, target / path)
        # the run resumed for one more save, in a copy: what it wrote, and in which order
        again = work / "resumed" / "train"
        shutil.copytree(HERE / "run" / "train", again)
        before = {p: p.read_bytes() for p in again.rglob("*") if p.is_file()}
        writes = work / "writes.json"
        _child(work, "resumed_writes", again / "weights", data, writes)
        shutil.rmtree(HERE / "resumed", ignore_errors=True)
        order = []
        for path, mode in json.loads(writes.read_text()):
            relative = Path(path).relative_to(again)  # a file written outside the run is a surprise: it fails here
            order.append((str(relative), mode))
            if before.get(again / relative) != (again / relative).read_bytes():
                (HERE / "resumed" / "train" / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(again / relative, HERE / "resumed" / "train" / relative)
        (HERE / "resumed" / "writes.json").write_text("[\n" + ",\n".join(json.dumps(pair) for pair in order) + "\n]\n")


def _child(work: Path, function: str, *args: Any) -> None:
    """``function(*args)`` of this module in a process of its own (each training ends its process)."""
    given = ", ".join(f"Path({str(a)!r})" if isinstance(a, Path) else repr(a) for a in args)
    call = f"import sys; sys.path.insert(0, {str(HERE)!r}); import make_run; from pathlib import Path; make_run.{function}({given})"
    subprocess.run([sys.executable, "-c", call], check=True, cwd=work, env={**os.environ, "YOLO_CONFIG_DIR": str(work / "config")})


def command(argv: list[str]) -> None:
    """``record_oracle.py``'s requests: ``dataset DIR``, ``restore PATH DATA``, ``killed RUN DATA WRITE
    FRACTION``, ``latest DIR``; answers (JSON) on stdout's last line."""
    what, *args = argv
    if what == "dataset":
        print(json.dumps(str(dataset(Path(args[0])))))
    elif what == "restore":
        print(json.dumps(restore(Path(args[0]), Path(args[1]))))
    elif what == "killed":
        killed(Path(args[0]), Path(args[1]), int(args[2]), float(args[3]))
    elif what == "latest":
        print(json.dumps(latest(Path(args[0]))))
    else:
        raise SystemExit(f"unknown request {what!r}")


if __name__ == "__main__":
    if sys.argv[1:] == ["tasks"]:
        tasks()
    elif sys.argv[1:] == ["classes"]:
        classes()
    elif len(sys.argv) > 1:
        command(sys.argv[1:])
    else:
        main()
