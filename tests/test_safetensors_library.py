"""``verify`` asks the safetensors library about every safetensors file its own parse accepts,
without numpy, torch or a mapping (``readers/safetensors._refusal``), and agrees with the
library's ``safe_open`` on each header here: what the library refuses is never called clean, and
what it accepts is not called refused.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from ckptdoctor.model import Problem
from ckptdoctor.readers.files import verify_sample
from ckptdoctor.readers.sample import FileSample

safetensors = pytest.importorskip("safetensors")


def _file(header: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + data


def _json(header: dict[str, object], data: bytes = b"") -> bytes:
    return _file(json.dumps(header).encode(), data)


F32 = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
HEADERS: dict[str, bytes] = {
    "one-tensor": _json({"a": F32}, bytes(4)),
    "no-tensors": _json({}),
    "metadata-only": _json({"__metadata__": {"format": "pt"}}),
    "empty-tensor": _json({"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}),
    "padded-with-spaces": _file(json.dumps({"a": F32}).encode() + b"       ", bytes(4)),
    "extra-field": _json({"a": {**F32, "note": 1}}, bytes(4)),
    "unicode-name": _json({"poids·é": F32}, bytes(4)),
    "escaped-name": _file(b'{"\\u0061":' + json.dumps(F32).encode() + b"}", bytes(4)),
    "lone-surrogate-name": _file(b'{"\\ud800":' + json.dumps(F32).encode() + b"}", bytes(4)),
    "boolean-shape": _json({"a": {**F32, "shape": [True]}}, bytes(4)),
    "boolean-offset": _json({"a": {**F32, "data_offsets": [False, 4]}}, bytes(4)),
    "float-shape": _file(b'{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}', bytes(4)),
    "exponent-offset": _file(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4e0]}}', bytes(4)),
    "huge-shape": _json({"a": {"dtype": "U8", "shape": [2**64], "data_offsets": [0, 0]}}),
    "nan-literal-metadata": _file(b'{"__metadata__":{"a":NaN},"a":' + json.dumps(F32).encode() + b"}", bytes(4)),
    "two-tensors-swapped": _json({"b": {**F32, "data_offsets": [4, 8]}, "a": F32}, bytes(8)),
}


def _library(path: Path) -> str | None:
    try:
        with safetensors.safe_open(str(path), framework="numpy") as opened:
            opened.keys()
    except Exception as error:  # the library's refusal, whatever its type
        return str(error)
    return None


@pytest.mark.parametrize("case", sorted(HEADERS))
def test_what_the_library_refuses_is_never_clean_and_what_it_accepts_is_not_refused(tmp_path: Path, case: str) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(HEADERS[case])
    with FileSample.open(str(path)) as sample:
        report = verify_sample(sample, path.name)
    refused = _library(path)
    if refused is not None:
        assert report.issues, f"the library refuses it ({refused}), ckptdoctor calls it clean"
    else:
        assert not any("library refuses" in issue.detail for issue in report.issues), report.issues


def test_a_header_only_the_library_refuses_is_reported_with_its_words(tmp_path: Path) -> None:
    """Python reads ``true`` as the int 1, so the static parse accepts this shape; serde does not."""
    path = tmp_path / "model.safetensors"
    path.write_bytes(HEADERS["boolean-shape"])
    with FileSample.open(str(path)) as sample:
        ((problem, detail),) = [(issue.problem, issue.detail) for issue in verify_sample(sample, path.name, deep=1).issues]
    assert problem is Problem.MALFORMED
    assert detail.startswith("the safetensors library refuses it:") and "boolean" in detail


def test_a_real_file_is_accepted_by_both(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    from safetensors.numpy import save_file

    path = tmp_path / "model.safetensors"
    save_file({"w": np.ones((3, 5), np.float32), "b": np.zeros(7, np.float16)}, str(path), metadata={"format": "np"})
    with FileSample.open(str(path)) as sample:
        assert verify_sample(sample, path.name, deep=1).issues == ()
    assert _library(path) is None
