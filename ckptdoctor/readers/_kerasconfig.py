"""Python code inside a Keras model's configuration (``config.json``, an ``.h5`` model's
``model_config`` and ``training_config``).

A ``Lambda`` layer saves its function as marshalled bytecode: Keras 3 as
``{"class_name": "__lambda__", "config": {"code": ...}}`` (``keras/src/saving/serialization_lib.py``,
``serialize_keras_object``), Keras 2 and tf.keras as ``"function_type": "lambda"`` beside a
base64 ``function``. ``keras.models.load_model`` refuses both in its default safe mode and runs
them with ``safe_mode=False`` (``Lambda.from_config``, ``python_utils.func_load``).

A ``TorchModuleWrapper`` layer (and any subclass, whatever it is registered as) saves its torch
module as ``"module": base64(torch.save(module))`` in its config (``keras/src/utils/torch_utils.py``,
``get_config``); ``from_config`` refuses it in safe mode and with ``safe_mode=False`` hands the
decoded bytes to ``torch.load(weights_only=False)``. That field is decoded as ``from_config``
decodes it and judged as ``torch.load`` reads it, by the readers of torch's own files
(``readers.torchzip``, ``readers.pickle``); so is any other string of the configuration that
decodes to a pickle or a torch zip, which a custom layer's ``from_config`` may hand to a loader.
These are the only places Keras 3.15 unpickles or runs anything from a configuration. The JSON
is parsed, never evaluated, and nothing decoded is ever unpickled.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import json

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers import pickle, torchzip
from ckptdoctor.readers.sample import BytesSample
from ckptdoctor.readers.sniff import ZIP_LOCAL, Format, sniff_payload

MAX_CONFIG = 64 * 1024 * 1024
"""A longer configuration is not parsed, and cannot be proven free of code."""
_MAX_NODES = 2_000_000
TORCH_MODULE = "TorchModuleWrapper"
_SHORTEST_BLOB = 16
"""Other strings shorter than this are not decoded: no pickle that calls anything is this short."""
_TORCH_LOAD = "keras.models.load_model refuses it in safe mode, and with safe_mode=False hands it to torch.load(weights_only=False)"
_ANY_LOADER = "a layer's from_config that hands it to torch.load or pickle.loads would run it"
_NOT_OF_THE_LOAD = frozenset({Problem.LEGACY, Problem.NON_WEIGHTS})
"""What the readers of a torch file say that does not apply to a blob unpickled with
``weights_only=False``: its format's age, and globals only ``weights_only=True`` refuses."""


def code_in(data: bytes, where: str, size: int | None = None) -> list[FileIssue]:
    """What in the configuration ``data`` (JSON) ``load_model`` would run, or why that cannot be told;
    ``size``: the configuration's whole size, where ``data`` is no more than its first bytes."""
    size = len(data) if size is None else size
    if size > MAX_CONFIG:
        return [
            FileIssue(Problem.CODE_IN_CONFIG, f"{where} is {size} bytes, more than ckptdoctor parses: it cannot be proven free of code")
        ]
    try:
        config = json.loads(data)
    except (ValueError, RecursionError):
        return [FileIssue(Problem.MALFORMED, f"{where} is not valid JSON: keras.models.load_model cannot read it")]
    found: list[str] = []
    unpickled: list[FileIssue] = []
    module_fields: dict[str, bool] = {}
    """Each layer config's ``module`` field, and whether its layer is a ``TorchModuleWrapper``."""
    pending: list[tuple[object, str]] = [(config, "")]
    seen = 0
    while pending:
        node, path = pending.pop()
        seen += 1
        if seen > _MAX_NODES:
            return [FileIssue(Problem.CODE_IN_CONFIG, f"{where} is too large to walk: it cannot be proven free of code")]
        if isinstance(node, dict):
            if node.get("class_name") == "__lambda__" or node.get("function_type") == "lambda":
                found.append(path or "/")
            if isinstance(node.get("config"), dict) and "module" in node["config"]:
                module_fields[f"{path}/config/module"] = node.get("class_name") == TORCH_MODULE
            pending.extend((value, f"{path}/{key}") for key, value in node.items())
        elif isinstance(node, list):
            pending.extend((value, f"{path}/{index}") for index, value in enumerate(node))
        elif isinstance(node, str) and (len(node) >= _SHORTEST_BLOB or path in module_fields):
            unpickled += _blob_issues(node, f"{where} {path}", module_fields.get(path))
    if not found:
        return unpickled
    places = ", ".join(sorted(found)[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    return [
        FileIssue(
            Problem.CODE_IN_CONFIG,
            f"{where} holds Python bytecode ({len(found)} lambda{'s' if len(found) > 1 else ''} at {places}): "
            "keras.models.load_model refuses it in safe mode, and with safe_mode=False it runs that code",
        ),
        *unpickled,
    ]


def _blob_issues(text: str, field: str, module_field: bool | None) -> list[FileIssue]:
    """What a loader would run of the string ``text`` at ``field``, decoded as it decodes it.

    ``module_field`` (not None): a layer config's ``module`` field, which
    ``TorchModuleWrapper.from_config`` (a subclass's too) decodes with ``base64.b64decode``
    (characters outside the alphabet skipped) and loads with ``torch.load(weights_only=False)``;
    True where the layer is a ``TorchModuleWrapper``, whose field is judged whatever its bytes
    are. Every other string is judged where it decodes to a pickle or a torch zip."""
    torch_module = bool(module_field)
    for decoded in _decodings(text, lenient=module_field is not None):
        if not torch_module and not (decoded.startswith(ZIP_LOCAL) or sniff_payload(decoded[:64]) is Format.PICKLE):
            continue
        report = _as_torch_load(decoded)
        kept = [i for i in report.issues if i.problem not in _NOT_OF_THE_LOAD and (torch_module or i.problem is Problem.UNSAFE_PICKLE)]
        loader = _TORCH_LOAD if torch_module else _ANY_LOADER
        what = f"{TORCH_MODULE}'s module, base64 of a torch.save file" if torch_module else "base64 or hex of a pickle or a torch file"
        return [dataclasses.replace(i, detail=f"{field} ({what}): {loader}: {i.detail}") for i in kept]
    return []


def _decodings(text: str, lenient: bool) -> list[bytes]:
    """``text`` as base64 (as ``base64.b64decode`` reads it where ``lenient``, else strictly), and
    as hex; nothing where it is neither."""
    decoded: list[bytes] = []
    with contextlib.suppress(UnicodeEncodeError, binascii.Error):  # from_config fails on it: nothing loads
        decoded.append(base64.b64decode(text.encode("ascii"), validate=not lenient))
    if not lenient:
        with contextlib.suppress(ValueError):
            decoded.append(bytes.fromhex(text))
    return decoded


def _as_torch_load(blob: bytes) -> FileReport:
    """``blob`` read as ``torch.load`` reads bytes: a zip archive where it starts as one
    (``torch.serialization._is_zipfile``), else its first pickle, and torch's legacy format after it
    where that pickle is torch's magic number."""
    sample = BytesSample(blob)
    return torchzip.read_whole(sample) if blob.startswith(ZIP_LOCAL) else pickle.read_whole_pickle(sample)
