"""Python code inside a Keras model's configuration (``config.json``, an ``.h5`` model's ``model_config``).

A ``Lambda`` layer saves its function as marshalled bytecode: Keras 3 as
``{"class_name": "__lambda__", "config": {"code": ...}}`` (``keras/src/saving/serialization_lib.py``,
``serialize_keras_object``), Keras 2 and tf.keras as ``"function_type": "lambda"`` beside a
base64 ``function``. ``keras.models.load_model`` refuses both in its default safe mode and runs
them with ``safe_mode=False`` (``Lambda.from_config``, ``python_utils.func_load``). The JSON is
parsed, never evaluated.
"""

from __future__ import annotations

import json

from ckptdoctor.model import FileIssue, Problem

MAX_CONFIG = 64 * 1024 * 1024
"""A longer configuration is not parsed, and cannot be proven free of code."""
_MAX_NODES = 2_000_000


def code_in(data: bytes, where: str) -> list[FileIssue]:
    """What in the configuration ``data`` (JSON) ``load_model`` would run, or why that cannot be told."""
    if len(data) > MAX_CONFIG:
        return [
            FileIssue(
                Problem.CODE_IN_CONFIG, f"{where} is {len(data)} bytes, more than ckptdoctor parses: it cannot be proven free of code"
            )
        ]
    try:
        config = json.loads(data)
    except (ValueError, RecursionError):
        return [FileIssue(Problem.MALFORMED, f"{where} is not valid JSON: keras.models.load_model cannot read it")]
    found: list[str] = []
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
            pending.extend((value, f"{path}/{key}") for key, value in node.items())
        elif isinstance(node, list):
            pending.extend((value, f"{path}/{index}") for index, value in enumerate(node))
    if not found:
        return []
    places = ", ".join(sorted(found)[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    return [
        FileIssue(
            Problem.CODE_IN_CONFIG,
            f"{where} holds Python bytecode ({len(found)} lambda{'s' if len(found) > 1 else ''} at {places}): "
            "keras.models.load_model refuses it in safe mode, and with safe_mode=False it runs that code",
        )
    ]
