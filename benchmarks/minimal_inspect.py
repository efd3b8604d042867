"""The floor a Python `inspect --format json` can reach on a burn run: a reference, not a tool.

    python benchmarks/minimal_inspect.py DIR > report.json

It does the work ckptdoctor does on `{model,optim,scheduler}-N.bpk` files and no more, each step
the cheapest Python offers: one `os.scandir` per folder and the stat from its entry; per file one
open (non-blocking, then `fstat`: only regular files are read, as ckptdoctor's `regular.py`
insists) and the bytes ckptdoctor reads (the whole file when it is at most 20 KiB, one `os.read`,
else its first 16 KiB and last 4 KiB, and a burnpack metadata block longer than that); one regex
for the names; judging memoised by content (magic, version, the sizes the CBOR metadata declares
against the file's; the key holds the tail, which ckptdoctor reads too), grouping by epoch and a JSON document of the
same shape as ckptdoctor's (`orjson` when it is installed, as ckptdoctor may use it). Other
formats and frameworks, rules beyond a missing role and the fixes' wording are left out.
Self-contained on purpose: it imports nothing of ckptdoctor.
"""

from __future__ import annotations

import json
import os
import re
import stat
import struct
import sys
from typing import Any

import cbor2

try:
    import orjson  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # the standard library's encoder, compact like ckptdoctor's
    orjson = None

HEAD, TAIL = 16 * 1024, 4 * 1024
FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0)
NAME = re.compile(r"(model|optim|scheduler)-(\d+)\.bpk")
ROLES = {"model": "model", "optim": "optimizer", "scheduler": "scheduler"}
REQUIRED = ("model", "optimizer", "scheduler")
RESUMABLE = {"trailing-bytes"}  # a finding, but burn still loads the file
HEADER = struct.Struct("<4sHI")
FILE = ("role", "roles", "path", "bytes", "format", "problems")
FINDING = ("code", "name", "severity", "run", "index", "path", "message", "fixes")
Epochs = dict[int, dict[str, dict[str, Any]]]
_judged: dict[Any, tuple[str, list[dict[str, str]]]] = {}


def read(path: str, size: int) -> tuple[bytes, bytes, bytes] | str:
    """(head, tail, metadata beyond the head) as ckptdoctor reads them, or why they could not be."""
    try:
        try:
            fd = os.open(path, FLAGS)
        except PermissionError:  # O_NOATIME is for a file's owner only
            fd = os.open(path, FLAGS & ~getattr(os, "O_NOATIME", 0))
    except OSError as error:
        return error.strerror or str(error)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not a regular file"
        if size <= HEAD + TAIL:
            whole = os.read(fd, size)
            return whole, whole[-TAIL:], b""
        head, tail = os.read(fd, HEAD), os.pread(fd, TAIL, size - TAIL)
        end = HEADER.size + HEADER.unpack_from(head)[2] if head[:4] == b"NRUB" else 0
        return head, tail, os.pread(fd, min(end, 1 << 24) - HEAD, HEAD) if end > HEAD else b""
    except OSError as error:
        return error.strerror or str(error)
    finally:
        os.close(fd)


def judge(size: int, head: bytes, extra: bytes) -> tuple[str, list[dict[str, str]]]:
    """(format, problems) of a burnpack, from its declared sizes against its size."""
    if size == 0:
        return "empty", [{"problem": "empty", "detail": "0 bytes"}]
    if head[:4] != b"NRUB" or size < HEADER.size:
        return "unknown", [{"problem": "not-a-checkpoint", "detail": "holds no burnpack data"}]
    _, version, length = HEADER.unpack_from(head)
    metadata = (head + extra)[HEADER.size : HEADER.size + length]
    if version > 1:
        return "burnpack", [{"problem": "malformed", "detail": f"burnpack version {version}"}]
    if len(metadata) < length:
        return "burnpack", [{"problem": "truncated", "detail": f"cut inside its metadata: {size} bytes"}]
    try:
        tensors = cbor2.loads(metadata)["tensors"]
        data_end = max((t["data_offsets"][1] for t in tensors.values()), default=0)
    except Exception as error:  # bad CBOR raises several unrelated types
        return "burnpack", [{"problem": "malformed", "detail": f"metadata is not valid ({error})"}]
    expected = -(-(HEADER.size + length) // 256) * 256 + data_end
    if size < expected and size != HEADER.size + length + data_end:  # burn < 0.20: unpadded
        return "burnpack", [
            {
                "problem": "truncated",
                "detail": f"{size} bytes, but its metadata needs {expected} ({expected - size} missing): the save was cut short",
            }
        ]
    if size > expected:
        return "burnpack", [
            {"problem": "trailing-bytes", "detail": f"{size - expected} bytes beyond the {expected} its metadata accounts for"}
        ]
    return "burnpack", []


def file_record(path: str, role: str, size: int) -> dict[str, Any]:
    got = read(path, size)
    if isinstance(got, str):
        return dict(zip(FILE, (role, [role], path, size, "unknown", [{"problem": "unreadable", "detail": got}]), strict=True))
    head, tail, extra = got
    # a small file's key is its whole content; a big one's, all that was read of it
    key = head if size <= HEAD + TAIL else (size, head, extra, tail)
    judged = _judged.get(key)
    if judged is None:
        judged = _judged[key] = judge(size, head, extra)
    return dict(zip(FILE, (role, [role], path, size, *judged), strict=True))


def walk(top: str) -> dict[str, tuple[Epochs, list[str]]]:
    """Per folder holding burn files: {epoch: {role: file}} and the other files' paths."""
    found: dict[str, tuple[Epochs, list[str]]] = {}
    folders = [top]
    while folders:
        folder = folders.pop()
        epochs: Epochs = {}
        others: list[str] = []
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                    continue
                match = NAME.fullmatch(entry.name)
                if match is None:
                    others.append(entry.path)
                    continue
                role = ROLES[match[1]]
                size = entry.stat().st_size
                epochs.setdefault(int(match[2]), {})[role] = file_record(entry.path, role, size)
        if epochs:
            found[folder] = epochs, others
    return found


def run_document(folder: str, epochs: Epochs, others: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    checkpoints, findings, resume = [], [], None
    for index in sorted(epochs):
        files = [epochs[index][role] for role in REQUIRED if role in epochs[index]]
        missing = [role for role in REQUIRED if role not in epochs[index]]
        broken = any(p["problem"] not in RESUMABLE for f in files for p in f["problems"])
        status = "incomplete" if missing else "partial" if broken else "complete"
        checkpoints.append({"index": index, "status": status, "bytes": sum(f["bytes"] for f in files), "missing": missing, "files": files})
        if status == "complete":
            resume = {"index": index, "paths": [f["path"] for f in files], "weights_only": False, "path": os.path.dirname(folder)}
        for role in missing:
            where = files[0]["path"] if files else folder
            found: tuple[Any, ...] = ("CKD101", f"missing-{role}", "warning", folder, index, where, f"epoch {index} has no {role} file", [])
            findings.append(dict(zip(FINDING, found, strict=True)))
        for file in files:
            for p in file["problems"]:
                message = f"{os.path.basename(file['path'])}: {p['detail']}"
                found = ("CKD203", p["problem"], "warning", folder, index, file["path"], message, [])
                findings.append(dict(zip(FINDING, found, strict=True)))
    if resume is not None:
        resume["how"] = f"pass `.checkpoint({resume['index']})` to burn's `SupervisedTraining` (or `LearnerBuilder`)"
    run = {"path": folder, "layout": "burn", "unit": "epoch", "bytes": sum(c["bytes"] for c in checkpoints), "required": list(REQUIRED)}
    rest = {"resume": resume, "weights_only": None, "loose_files": [], "other_files": others, "extra_files": []}
    return run | {"checkpoints": checkpoints} | rest, findings


def main() -> None:
    runs, findings = [], []
    for top in sys.argv[1:]:
        for folder, (epochs, others) in sorted(walk(top).items()):
            run, found = run_document(folder, epochs, others)
            runs.append(run)
            findings.extend(found)
    summary = {"error": 0, "warning": len(findings), "info": 0}
    head = {"schema": "ckptdoctor.report.v1", "version": "0.1.0", "command": "inspect", "runs": runs}
    document = head | {"findings": findings, "summary": summary, "unrecognised": []}
    if orjson is not None:
        sys.stdout.buffer.write(orjson.dumps(document) + b"\n")
    else:
        sys.stdout.write(json.dumps(document, separators=(",", ":"), ensure_ascii=False) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
