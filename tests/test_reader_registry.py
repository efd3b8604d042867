"""The reader registry: each format is declared once, and every table is derived from the declarations.

A format declared in a test (the registry monkeypatched, nothing else touched) is sniffed, probed,
read whole by ``verify`` whatever its name, and its suffix promises it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckptdoctor.model import FileIssue, FileReport, Problem
from ckptdoctor.readers import _registry
from ckptdoctor.readers._registry import Naming, Rank, ReaderSpec, Sniff
from ckptdoctor.readers.files import (
    BytesSample,
    expected_formats,
    looks_like_checkpoint,
    read_any_name,
    read_header,
    verify_sample,
)
from ckptdoctor.readers.sample import Sample
from ckptdoctor.readers.sniff import Format, sniff, sniff_payload

ROOT = Path(__file__).resolve().parent.parent

# one real head per sniffed format: built as each library writes it (torch's, safetensors',
# burn's bytes are the ones the corpus and fuzz tests build from real saves)
_HEADS: dict[str, bytes] = {
    "burnpack": b"NRUB\x01\x00" + bytes(64),
    "torch-zip": b"PK\x03\x04" + bytes(22) + b"\x10\x00\x00\x00" + b"archive/data.pkl",
    "numpy": b"\x93NUMPY\x01\x00",
    "zip": b"PK\x03\x04" + bytes(22) + b"\x05\x00\x00\x00" + b"a.txt",
    "torch-preview": b"PYTORCH1" + bytes(8),
    "torch-legacy": bytes.fromhex("80028a0a6cfc9c46f9206aa850192e") + b".",
    "gzip": b"\x1f\x8b\x08\x00" + bytes(16),
    "git-lfs-pointer": b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 3\n",
    "html": b"<!DOCTYPE html><html></html>",
    "zeros": bytes(100),
    "torch-tar": bytes(257) + b"ustar\x0000" + bytes(300),
    "tar": b"./" + bytes(255) + b"ustar\x0000" + bytes(300),
    "safetensors": (2).to_bytes(8, "little") + b"{}",
    "7z": b"7z\xbc\xaf\x27\x1c" + bytes(10),
    "pickle": b"\x80\x04K\x01.",
    "msgpack": b"\x81\xa1a\x01",
    "json": b'{"a": 1}',
    "hdf5": b"\x89HDF\r\n\x1a\n" + bytes(8),
    "keras": b"PK\x03\x04" + bytes(22) + b"\x0d\x00\x00\x00" + b"metadata.json",
    "tf-index": bytes(40) + bytes.fromhex("57fb808b247547db"),
    "bincode": b"\x03f32\x03i64\x2cburn_core::record::file::BinFileRecorder<x>",
}


def test_every_sniffed_format_is_sniffed_from_its_own_bytes() -> None:
    declared = {spec.format for spec in _registry.current().specs if spec.sniffs}
    assert declared == set(_HEADS), "a sniffed format without a head in this test, or the reverse"
    for name, head in _HEADS.items():
        assert sniff(BytesSample(head)) is Format(name), name


def test_payload_formats_are_the_ones_ranked_as_payloads() -> None:
    payload = {kind for _, kind in _registry.current().payload_sniffs}
    assert payload == {Format.NUMPY, Format.SEVEN_ZIP, Format.PICKLE, Format.MSGPACK, Format.JSON, Format.BINCODE}
    assert sniff_payload(_HEADS["msgpack"]) is Format.MSGPACK
    assert sniff_payload(_HEADS["burnpack"]) is Format.UNKNOWN  # not a payload format


def test_each_format_is_declared_once() -> None:
    formats = [spec.format for spec in _registry.current().specs]
    assert len(formats) == len(set(formats))


def test_suffixes_map_to_exactly_the_formats_that_declare_them() -> None:
    registry = _registry.current()
    declared: dict[str, set[Format]] = {}
    for spec in registry.specs:
        for suffix, _ in spec.suffixes:
            assert suffix == suffix.lower() and suffix.startswith("."), suffix
            declared.setdefault(suffix, set()).add(spec.format)
    for suffix, formats in declared.items():
        assert expected_formats(f"file{suffix}") == formats, suffix
        assert expected_formats(f"FILE{suffix.upper()}") == formats, suffix
    # every suffix names one thing: what it says about a file does not depend on which format says it
    namings = {(suffix, naming) for spec in registry.specs for suffix, naming in spec.suffixes}
    assert len(namings) == len({suffix for suffix, _ in namings})
    assert looks_like_checkpoint("model-3.bpk") and not looks_like_checkpoint("config.json")


def test_verify_reads_by_content_what_the_declarations_say() -> None:
    assert read_any_name() == frozenset(spec.format for spec in _registry.current().specs if spec.read_any_name)
    assert Format.SAFETENSORS in read_any_name() and Format.JSON not in read_any_name()


def test_format_names_are_one_object_each() -> None:
    assert Format("torch-zip") is Format.TORCH_ZIP
    assert Format.TORCH_ZIP == "torch-zip" and Format.TORCH_ZIP.value == "torch-zip"
    assert type(Format.TORCH_ZIP.value) is str
    assert Format.named("no-such-format") is None
    with pytest.raises(ValueError):
        Format("no-such-format")


_TOY = b"TOYF"


def _probe_toy(sample: Sample) -> FileReport:
    if sample.size < 8:
        return FileReport("toy", (FileIssue(Problem.TRUNCATED, "shorter than its header"),))
    return FileReport("toy")


def _read_whole_toy(sample: Sample, deep: int) -> FileReport:
    return FileReport("toy", (FileIssue(Problem.MALFORMED, f"read whole: {sample.size} bytes"),))


def test_a_format_declared_once_is_sniffed_probed_and_verified(monkeypatch: pytest.MonkeyPatch) -> None:
    toy = Format.declare("toy")
    spec = ReaderSpec(
        toy,
        (Sniff(Rank.MAGIC, lambda head, sample: head.startswith(_TOY)),),
        ((".toy", Naming.CHECKPOINT_ONLY),),
        _probe_toy,
        _read_whole_toy,
        read_any_name=True,
    )
    before = _registry.current()
    assert sniff(BytesSample(_TOY + bytes(8))) is Format.UNKNOWN
    monkeypatch.setattr(_registry, "_current", [before.with_spec(spec)])

    data = _TOY + bytes(8)
    assert sniff(BytesSample(data)) is toy
    assert read_header(BytesSample(data), "weights.toy").format == "toy"
    assert read_header(BytesSample(data[:6]), "weights.toy").issues[0].problem is Problem.TRUNCATED
    assert verify_sample(BytesSample(data), "weights.toy").issues[0].detail == "read whole: 12 bytes"
    assert expected_formats("weights.toy") == {toy}
    assert looks_like_checkpoint("weights.toy")
    assert toy in read_any_name()
    # its suffix promises it: other content under that name is no checkpoint
    other = read_header(BytesSample(b'{"a": 1}'), "weights.toy")
    assert other.issues[0].problem is Problem.NOT_A_CHECKPOINT and "toy" in other.issues[0].detail
    # and under a name that promises another format, it is not that format
    assert read_header(BytesSample(data), "model.safetensors").issues[0].problem is Problem.NOT_A_CHECKPOINT


def test_help_does_not_import_the_readers() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ckptdoctor", "--help"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60, check=True,
    )  # fmt: skip
    assert "ckptdoctor.readers" not in result.stderr
