"""Ways around `verify` found by review, each closed: hidden archives, look-alike names, polyglots,
gadgets that call set-up code, inputs that cost exponential time or unbounded memory, and healthy
runs that a naive comparison would call inconsistent.

Every hostile input is built here from bytes (never loaded); torch is only used to write the
benign files they are derived from.
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
import struct
import tarfile
import time
import warnings
import zipfile

import pytest

from ckptdoctor.model import Problem
from ckptdoctor.readers.files import BytesSample, verify_sample

torch = pytest.importorskip("torch")

SYSTEM = b"\x80\x02cposix\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03."
"""A protocol-2 pickle that would run ``posix.system("true")``; only ever parsed here."""


def problems(data: bytes, name: str = "x.pt", deep: int = 0) -> set[Problem]:
    return {issue.problem for issue in verify_sample(BytesSample(data), name, deep).issues}


def saved(value: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def rezip(data: bytes, rename: dict[str, str] | None = None, extra: dict[str, bytes] | None = None) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = [(info.filename, archive.read(info)) for info in archive.infolist()]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for name, content in members:
            archive.writestr((rename or {}).get(name, name), content)
        for name, content in (extra or {}).items():
            archive.writestr(name, content)
    return out.getvalue()


def test_a_second_end_record_behind_the_first_is_a_zip_anomaly():
    benign = saved({"w": torch.ones(2)})
    end = benign.rindex(b"PK\x05\x06")
    # the real end record gets a comment holding another end record, whose own comment claims a
    # byte the file does not have: zipfile keeps the first, torch's reader takes the last
    second = b"PK\x05\x06" + bytes(16) + struct.pack("<H", 1)
    forged = benign[: end + 20] + struct.pack("<H", len(second)) + second
    assert Problem.ZIP_ANOMALY in problems(forged)
    assert problems(benign) == set()


def test_member_names_that_differ_only_in_case_are_duplicates():
    data = rezip(saved({"w": torch.ones(2)}), extra={"archive/DATA.PKL": SYSTEM})
    found = problems(data)
    assert {Problem.ZIP_ANOMALY, Problem.UNSAFE_PICKLE} <= found


def test_a_pickle_that_passes_for_burn_bincode_is_still_walked():
    pre = b"cos\nsystem\n(S'"
    polyglot = pre + b"x" * (100 - len(pre)) + b"\x01y\x04burn" + b"'\ntR."
    assert Problem.UNSAFE_PICKLE in problems(polyglot, "pytorch_model.bin")


def test_dcp_metadata_is_judged_like_any_pickle(tmp_path, cli):
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ...: a single process"
        dcp.save({"w": torch.ones(3)}, checkpoint_id=str(tmp_path / "step_1"))
    healthy = cli("verify", "--json", tmp_path)
    assert "CKD401" not in healthy.codes() and healthy.exit_code == 0
    assert all(f["severity"] == "info" for f in healthy.json["findings"] if f["code"] == "CKD402")
    (tmp_path / "step_1" / ".metadata").write_bytes(SYSTEM)
    assert "CKD401" in cli("verify", "--json", tmp_path).codes()


def test_a_v7_tar_without_magic_is_read_like_torch_reads_it():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        info = tarfile.TarInfo("pickle")
        info.size = len(SYSTEM)
        archive.addfile(info, io.BytesIO(SYSTEM))
    data = bytearray(buffer.getvalue())
    data[257:265] = bytes(8)  # no "ustar" magic: a V7 header, which tarfile (and torch) still reads
    checksum = sum(data[:148]) + 8 * 32 + sum(data[156:512])
    data[148:156] = b"%06o\0 " % checksum
    assert Problem.UNSAFE_PICKLE in problems(bytes(data), "model.pt")


def test_tar_members_with_more_records_than_are_checked_are_unproven(monkeypatch):
    import ckptdoctor.readers.torchtar as torchtar

    monkeypatch.setattr(torchtar, "MAX_RECORDS", 2)
    count = pickle.dumps(3, protocol=2)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in (("tensors", count), ("pickle", pickle.dumps({}, protocol=2))):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    assert Problem.UNSAFE_PICKLE in problems(buffer.getvalue(), "model.tar")


def test_legacy_storage_counts_are_checked_against_the_pickle(tmp_path):
    path = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(6)}, path, _use_new_zipfile_serialization=False)
    data = bytearray(path.read_bytes())
    at = len(data) - 6 * 4 - 8
    assert struct.unpack_from("<Q", data, at)[0] == 6
    struct.pack_into("<Q", data, at, 5)
    assert Problem.MALFORMED in problems(bytes(data))


def test_a_storage_no_tensor_uses_is_still_checked():
    data = saved({"s": torch.ones(4).untyped_storage()})
    assert problems(data) == set()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        kept = {i.filename: archive.read(i) for i in archive.infolist() if not i.filename.endswith("/data/0")}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, content in kept.items():
            archive.writestr(name, content)
    assert Problem.MALFORMED in problems(out.getvalue())


def test_python2_names_torch_writes_are_mapped_like_pickle_maps_them():
    data = saved({"names": {"a"}, "frozen": frozenset({1})})
    found = verify_sample(BytesSample(data), "x.pt").issues
    assert Problem.UNSAFE_PICKLE not in {i.problem for i in found}
    assert any("builtins.frozenset" in i.detail for i in found if i.problem is Problem.NON_WEIGHTS)


def test_the_torch_allowlist_is_torchs_own():
    from torch._weights_only_unpickler import _get_allowed_globals

    from ckptdoctor.readers.pickle_safety import TORCH_WEIGHTS_ONLY

    assert set(_get_allowed_globals()) == TORCH_WEIGHTS_ONLY


def _pickle_calling_through(gadget: bytes) -> bytes:
    """``gadget(arg, TrainingArguments)``: a benign-looking function handed a set-up class."""
    return b"\x80\x02c" + gadget + b"\nX\x07\x00\x00\x00MT19937ctransformers.training_args\nTrainingArguments\n\x86R."


def test_a_set_up_class_handed_to_a_benign_function_is_unsafe():
    data = _pickle_calling_through(b"numpy.random._pickle\n__generator_ctor")
    assert Problem.UNSAFE_PICKLE in problems(data, "args.pkl")


def test_rebuilding_training_arguments_field_by_field_is_only_non_weights():
    blob = b"\x80\x02ctransformers.training_args\nTrainingArguments\n)\x81}X\x04\x00\x00\x00seedK\x01sb."
    assert problems(blob, "training_args.bin") == {Problem.NON_WEIGHTS}


def test_build_on_an_imported_class_is_unsafe():
    blob = b"\x80\x02cargparse\nNamespace\nN}X\x08\x00\x00\x00__repr__K\x01s\x86b."
    assert Problem.UNSAFE_PICKLE in problems(blob, "x.pkl")


def test_a_dict_key_built_from_shared_tuples_costs_linear_time():
    # t = (t, t) twenty-four times over through the memo: 2**24 leaves if followed naively
    body = b"\x80\x02}K\x00q\x00" + b"h\x00h\x00\x86q\x00" * 24 + b"K\x01s."
    started = time.monotonic()
    verify_sample(BytesSample(body), "x.pkl")
    assert time.monotonic() - started < 2


def test_a_gzip_record_that_inflates_past_the_limit_is_not_called_clean(monkeypatch):
    import msgpack

    import ckptdoctor.readers.burnrecord as burnrecord

    monkeypatch.setattr(burnrecord, "MAX_RECORD", 1024 * 1024)
    record = {
        "metadata": {"float": "f32", "int": "i32", "format": "x", "version": "0.21.0", "settings": "S"},
        "item": {"w": {"bytes": bytes(4 * 1024 * 1024), "shape": [1024 * 1024], "dtype": "F32"}},
        "_b": [],
    }
    data = gzip.compress(msgpack.packb(record, use_bin_type=True))
    assert len(data) < 64 * 1024
    assert problems(data, "model-1.mpk.gz") == {Problem.UNREADABLE}


# --- healthy runs a naive comparison would call inconsistent -------------------------------------------


def test_adafactor_state_is_not_an_optimizer_model_mismatch(tmp_path, cli):
    run = tmp_path / "run"
    run.mkdir()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    optimizer = torch.optim.Adafactor(model.parameters())
    for epoch in (1, 2):
        model(torch.randn(2, 8)).sum().backward()
        optimizer.step()
        torch.save(model.state_dict(), run / f"model_{epoch}.pt")
        torch.save(optimizer.state_dict(), run / f"optimizer_{epoch}.pt")
    assert cli("verify", "--json", run).json["findings"] == []


def test_a_damaged_shard_does_not_also_look_like_a_model_change(tmp_path, cli):
    from safetensors.torch import save_file

    for step in (10, 20):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
        save_file({"a": torch.ones(4)}, folder / "model-00001-of-00002.safetensors")
        save_file({"b": torch.ones(4)}, folder / "model-00002-of-00002.safetensors")
        weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 32}, "weight_map": weight_map}))
        torch.save({}, folder / "optimizer.pt")
        torch.save({}, folder / "scheduler.pt")
    shard = tmp_path / "checkpoint-20" / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes() + bytes(8))
    codes = cli("verify", "--json", tmp_path).codes()
    assert "CKD204" in codes
    assert not {"CKD301", "CKD307", "CKD308"} & set(codes)


def test_a_model_saved_under_a_module_key_has_no_wrapper_prefix(tmp_path, cli):
    run = tmp_path / "run"
    run.mkdir()
    model = torch.nn.Linear(3, 2)
    for epoch in (1, 2):
        torch.save({"module": model.state_dict(), "epoch": epoch}, run / f"model_{epoch}.pt")
    assert "CKD306" not in cli("verify", "--json", run).codes()


def test_deepspeed_zero_partitions_are_not_compared_parameter_by_parameter(tmp_path, cli):
    for step in (10, 20):
        tag = tmp_path / f"global_step{step}"
        tag.mkdir()
        model = torch.nn.Linear(4, 3)
        torch.save({"module": model.state_dict()}, tag / "mp_rank_00_model_states.pt")
        flat = torch.zeros(sum(p.numel() for p in model.parameters()))
        state = {"optimizer_state_dict": {"state": {0: {"exp_avg": flat, "exp_avg_sq": flat.clone()}}, "param_groups": []}}
        torch.save(state, tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (tmp_path / "latest").write_text("global_step20")
    assert "CKD301" not in cli("verify", "--json", tmp_path).codes()


def test_a_tar_link_through_a_linked_folder_is_malformed_not_an_internal_error():
    """tarfile does not follow a folder symlink inside a link's target (torch.load fails on it too)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in (
            ("storages", pickle.dumps(0, protocol=2) + pickle.dumps([], protocol=2)),
            ("tensors", pickle.dumps(0, protocol=2)),
            ("d/data.bin", SYSTEM),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
        for name, target in (("e", "d"), ("pickle", "e/data.bin")):
            link = tarfile.TarInfo(name)
            link.type, link.linkname = tarfile.SYMTYPE, target
            archive.addfile(link)
    found = problems(buffer.getvalue(), "model.pt")
    assert Problem.MALFORMED in found


def _npy(descr: str, shape: str, body: bytes) -> bytes:
    header = f"{{'descr': {descr}, 'fortran_order': False, 'shape': {shape}, }}"
    header += " " * (64 - 10 - len(header) - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + body


@pytest.mark.parametrize("shape, loads", [("(3L,)", True), ("(-1,)", False)])
def test_npy_shapes_are_judged_as_numpy_load_judges_them(tmp_path, shape, loads):
    """Python 2 `3L` shapes load (numpy filters the header); negative shapes parse but fail to load."""
    import numpy

    path = tmp_path / "a.npy"
    path.write_bytes(_npy("'<f8'", shape, numpy.arange(3.0).tobytes()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            numpy.load(path)
            loaded = True
        except ValueError:
            loaded = False
    assert loaded is loads
    assert (problems(path.read_bytes(), "a.npy") == set()) is loads


def test_an_object_array_with_a_negative_shape_is_still_walked():
    """numpy.load unpickles an object array whatever its shape: the header parser accepts -1."""
    found = problems(_npy("'|O'", "(-1,)", SYSTEM), "a.npy")
    assert Problem.UNSAFE_PICKLE in found
