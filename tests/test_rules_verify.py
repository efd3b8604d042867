"""The rules only `verify` can fire (CKD206, CKD301-307): each fires on real files and stays quiet on healthy ones.

Runs are written with real `torch.save`, `safetensors` and the spec-following burnpack writer; the
consistency rules compare what `verify` read inside the files of one checkpoint and across a run.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest
from reports import codes

from ckptdoctor.testing import BurnModel, Tensor, burnpack, write_burn_run

torch = pytest.importorskip("torch")


def only(result, code: str) -> dict:
    (finding,) = [f for f in result.json["findings"] if f["code"] == code]
    return finding


def verify(cli, *args):
    return cli("verify", "--json", *args)


def torch_run(folder: Path, epochs=(1, 2, 3), optimizer=lambda p: torch.optim.AdamW(p), model=None) -> torch.nn.Module:
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = model or torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = optimizer(model.parameters())
    for epoch in epochs:
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
        torch.save(model.state_dict(), folder / f"model_{epoch}.pt")
        torch.save(opt.state_dict(), folder / f"optimizer_{epoch}.pt")
    return model


# --- CKD206: CRC-32 of zip members (--deep) -----------------------------------------------------------


def _flip_tensor_byte(path: Path) -> None:
    with zipfile.ZipFile(path) as archive:
        member = next(i for i in archive.infolist() if i.filename.endswith("/data/0"))
        # data starts after the local header, its name and its extra field
        with open(path, "r+b") as handle:
            handle.seek(member.header_offset + 26)
            name_length, extra_length = struct.unpack("<HH", handle.read(4))
            handle.seek(member.header_offset + 30 + name_length + extra_length)
            byte = handle.read(1)
            handle.seek(-1, 1)
            handle.write(bytes([byte[0] ^ 0xFF]))


def test_ckd206_fires_with_deep_for_a_flipped_tensor_byte(tmp_path, cli):
    torch_run(tmp_path / "run")
    _flip_tensor_byte(tmp_path / "run" / "model_3.pt")
    assert "CKD206" not in codes(verify(cli, tmp_path / "run")), "CRCs are read only with --deep"
    result = verify(cli, "--deep", tmp_path / "run")
    finding = only(result, "CKD206")
    assert finding["index"] == 3 and finding["path"].endswith("model_3.pt")
    assert result.exit_code == 1
    run = result.json["runs"][0]
    assert run["resume"]["index"] == 2, "a checkpoint with a bad CRC is no resume point"


def test_ckd206_quiet_for_archives_saved_without_crcs(tmp_path, cli):
    torch.serialization.set_crc32_options(False)
    try:
        torch_run(tmp_path / "run")
    finally:
        torch.serialization.set_crc32_options(True)
    assert verify(cli, "--deep", tmp_path / "run").json["findings"] == []


# --- CKD304: NaN / Inf (--deep), every float dtype and format -------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_ckd304_fires_for_nonfinite_torch_values(tmp_path, cli, dtype, value):
    run = tmp_path / "run"
    torch_run(run)
    weights = torch.zeros(1000, dtype=getattr(torch, dtype))
    weights[777] = value
    torch.save({"w": weights}, run / "model_3.pt")
    assert "CKD304" not in codes(verify(cli, run))
    result = verify(cli, "--deep", run)
    finding = only(result, "CKD304")
    assert finding["index"] == 3 and "1 NaN or Inf" in finding["message"]


def test_ckd304_fires_for_safetensors_and_burnpack(tmp_path, cli):
    from safetensors.torch import save_file

    run = tmp_path / "st"
    run.mkdir()
    for epoch in (1, 2):
        tensor = torch.ones(64, dtype=torch.bfloat16)
        if epoch == 2:
            tensor[5] = float("nan")
        save_file({"w": tensor}, run / f"model_{epoch}.safetensors")
    assert only(verify(cli, "--deep", run), "CKD304")["index"] == 2

    burn = tmp_path / "burn" / "checkpoint"
    write_burn_run(burn, [1, 2])
    nan = struct.pack("<f", float("nan")) * 16
    model = burnpack({"fc.weight": Tensor("F32", (16,), 1, nan)})
    (burn / "model-2.bpk").write_bytes(model)
    result = verify(cli, "--deep", burn)
    assert "CKD304" in codes(result)


def test_ckd304_quiet_for_large_finite_values(tmp_path, cli):
    run = tmp_path / "run"
    torch_run(run)
    torch.save({"w": torch.tensor([3.0e38, -3.0e38, 1e-45], dtype=torch.float32)}, run / "model_3.pt")
    torch.save({"w": torch.tensor([65504.0, -65504.0], dtype=torch.float16)}, run / "model_2.pt")
    assert "CKD304" not in codes(verify(cli, "--deep", run))


# --- CKD301: optimizer state for other parameters ------------------------------------------------------


def test_ckd301_fires_when_the_optimizer_belongs_to_another_model(tmp_path, cli):
    run = tmp_path / "run"
    torch_run(run)
    other = torch.nn.Linear(5, 7)
    opt = torch.optim.Adam(other.parameters())
    other(torch.randn(2, 5)).sum().backward()
    opt.step()
    torch.save(opt.state_dict(), run / "optimizer_3.pt")
    finding = only(verify(cli, run), "CKD301")
    assert finding["index"] == 3 and finding["severity"] == "error"
    assert "35 elements" in finding["message"]


def test_ckd301_quiet_when_some_parameters_are_frozen(tmp_path, cli):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    model[0].requires_grad_(False)
    torch_run(tmp_path / "run", model=model, optimizer=lambda p: torch.optim.AdamW([q for q in p if q.requires_grad]))
    assert verify(cli, tmp_path / "run").json["findings"] == []


def test_ckd301_fires_for_burn_state_keyed_by_unknown_param_ids(tmp_path, cli):
    folder = tmp_path / "checkpoint"
    model = BurnModel({"fc.weight": (4, 3), "fc.bias": (4,)}, seed=1)
    write_burn_run(folder, [1, 2], model=model)
    stranger = BurnModel({"fc.weight": (4, 3), "fc.bias": (4,)}, seed=2)
    (folder / "optim-2.bpk").write_bytes(stranger.optimizer_record())
    finding = only(verify(cli, folder), "CKD301")
    assert finding["index"] == 2 and finding["path"].endswith("optim-2.bpk")


def test_ckd301_quiet_for_burn_state_of_transposed_params(tmp_path, cli):
    folder = tmp_path / "checkpoint"
    model = BurnModel({"fc.weight": (4, 3), "fc.bias": (4,)})
    write_burn_run(folder, [1, 2], model=model)
    transposed = BurnModel({"fc.weight": (3, 4), "fc.bias": (4,)})  # same ids, state kept in the live shape
    (folder / "optim-2.bpk").write_bytes(transposed.optimizer_record())
    assert "CKD301" not in codes(verify(cli, folder))


# --- CKD302: the optimizer changes -------------------------------------------------------------------


def test_ckd302_fires_when_sgd_follows_adamw(tmp_path, cli):
    run = tmp_path / "run"
    model = torch_run(run, epochs=(1, 2, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    torch.save(model.state_dict(), run / "model_4.pt")
    torch.save(opt.state_dict(), run / "optimizer_4.pt")
    finding = only(verify(cli, run), "CKD302")
    assert finding["index"] == 4 and "sgd-momentum" in finding["message"] and "adam" in finding["message"]


def test_ckd302_fires_for_burn_adam_then_sgd(tmp_path, cli):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, [1, 2, 3])
    write_burn_run(folder, [4], optimizer="sgd-momentum")
    assert only(verify(cli, folder), "CKD302")["index"] == 4


def test_ckd302_quiet_when_the_optimizer_stays(tmp_path, cli):
    torch_run(tmp_path / "run", epochs=(1, 2, 3, 4))
    assert "CKD302" not in codes(verify(cli, tmp_path / "run"))


# --- CKD303: precision changes -----------------------------------------------------------------------


def test_ckd303_fires_when_the_model_turns_bfloat16(tmp_path, cli):
    run = tmp_path / "run"
    model = torch_run(run)
    torch.save({k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}, run / "model_3.pt")
    finding = only(verify(cli, run), "CKD303")
    assert finding["index"] == 3 and "bfloat16" in finding["message"]


def test_ckd303_quiet_for_a_steady_precision(tmp_path, cli):
    torch_run(tmp_path / "run")
    assert "CKD303" not in codes(verify(cli, tmp_path / "run"))


# --- CKD305: saved from a device -----------------------------------------------------------------------


def _relabel_device(path: Path, device: bytes) -> None:
    """Rewrite data.pkl's storage locations ('cpu' -> a 3-letter device), as a GPU save records them."""
    with zipfile.ZipFile(path) as archive:
        members = [(info, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for info, data in members:
            if info.filename.endswith("data.pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x03\x00\x00\x00" + device)
            archive.writestr(info.filename, data)


def test_ckd305_fires_for_tensors_saved_from_mps(tmp_path, cli):
    run = tmp_path / "run"
    torch_run(run)
    _relabel_device(run / "model_3.pt", b"mps")
    result = verify(cli, run)
    finding = only(result, "CKD305")
    assert finding["severity"] == "info" and "mps" in finding["message"]
    files = [f for c in result.json["runs"][0]["checkpoints"] for f in c["files"]]
    assert any(f["devices"] == ["mps"] for f in files)


def test_ckd305_quiet_for_cpu_saves(tmp_path, cli):
    torch_run(tmp_path / "run")
    assert "CKD305" not in codes(verify(cli, tmp_path / "run"))


# --- CKD306: wrapper prefixes --------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["module.", "_orig_mod."])
def test_ckd306_fires_for_wrapped_model_keys(tmp_path, cli, prefix):
    run = tmp_path / "run"
    model = torch_run(run)
    for epoch in (1, 2, 3):
        torch.save({prefix + k: v for k, v in model.state_dict().items()}, run / f"model_{epoch}.pt")
    finding = only(verify(cli, run), "CKD306")
    assert prefix in finding["message"] and finding["index"] == 1


def test_ckd306_quiet_when_only_some_keys_say_module(tmp_path, cli):
    run = tmp_path / "run"
    torch.save({"module.weight": torch.ones(2), "head.weight": torch.ones(2)}, (run.mkdir() or run) / "model_1.pt")
    assert "CKD306" not in codes(verify(cli, run))


# --- CKD307: model shapes change -----------------------------------------------------------------------


def test_ckd307_fires_when_a_layer_grows(tmp_path, cli):
    run = tmp_path / "run"
    torch_run(run, epochs=(1, 2))
    bigger = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    torch_run(run, epochs=(3,), model=bigger)
    finding = only(verify(cli, run), "CKD307")
    assert finding["index"] == 3 and "0.weight [8, 4] → [16, 4]" in finding["message"]


def test_ckd307_fires_for_burn_models(tmp_path, cli):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, [1, 2])
    write_burn_run(folder, [3], model=BurnModel({"fc1.weight": (32, 8), "fc1.bias": (32,), "fc2.weight": (4, 32), "fc2.bias": (4,)}))
    assert only(verify(cli, folder), "CKD307")["index"] == 3


def test_ckd307_quiet_for_the_same_model(tmp_path, cli):
    torch_run(tmp_path / "run")
    assert "CKD307" not in codes(verify(cli, tmp_path / "run"))


# --- the verify command itself ---------------------------------------------------------------------------


def test_verify_lists_tensors_per_file(tmp_path, cli):
    run = tmp_path / "run"
    torch_run(run)
    result = verify(cli, run)
    files = {Path(f["path"]).name: f for c in result.json["runs"][0]["checkpoints"] for f in c["files"]}
    model = files["model_3.pt"]
    assert model["tensors"] == 4 and model["dtypes"] == ["float32"] and model["devices"] == ["cpu"]
    assert model["tensor_bytes"] == (8 * 4 + 8 + 2 * 8 + 2) * 4
    assert files["optimizer_3.pt"]["keys"] == ["state", "param_groups"]


def test_verify_jobs_give_the_same_report(tmp_path, cli, monkeypatch):
    import ckptdoctor.pipelines.verify

    monkeypatch.setattr(ckptdoctor.pipelines.verify, "POOL_MIN_FILES", 2)  # a pool for these few small files
    torch_run(tmp_path / "run", epochs=range(1, 9))
    _flip_tensor_byte(tmp_path / "run" / "model_5.pt")
    one = verify(cli, "--jobs", "1", "--deep", tmp_path / "run").json
    many = verify(cli, "--jobs", "4", "--deep", tmp_path / "run").json
    assert one["runs"] == many["runs"] and one["findings"] == many["findings"]
    assert [f["code"] for f in many["findings"]] == ["CKD206"]


def test_verify_load_reports_what_the_library_refuses(tmp_path, cli, monkeypatch):
    run = tmp_path / "run"
    torch_run(run)
    result = verify(cli, "--load", run)
    assert result.json["findings"] == [] and result.exit_code == 0


def test_verify_never_imports_torch_without_load(tmp_path):
    import subprocess
    import sys

    torch_run(tmp_path / "run")
    code = (
        "import sys; from ckptdoctor.cli import main; sys.argv = ['ckptdoctor', 'verify', '--deep', '-q', sys.argv[1]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\nassert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], check=True)


# --- CKD308: shard index against shards ---------------------------------------------------------------


def _sharded(run: Path, weight_map: dict[str, str], total: int = 48) -> Path:
    """An HF Trainer checkpoint folder whose weights are sharded, with the given index."""
    import json

    from safetensors.torch import save_file

    folder = run / "checkpoint-10"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 10, "log_history": []}))
    save_file({"a": torch.ones(4), "b": torch.ones(4)}, folder / "model-00001-of-00002.safetensors")
    save_file({"c": torch.ones(4)}, folder / "model-00002-of-00002.safetensors")
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return run


FIRST, SECOND = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


def test_ckd308_fires_when_the_index_names_the_wrong_shard(tmp_path, cli):
    folder = _sharded(tmp_path / "m", {"a": FIRST, "b": SECOND, "c": SECOND})
    finding = only(verify(cli, folder), "CKD308")
    assert "1 tensor is not in the shard it names (b)" in finding["message"]


def test_ckd308_fires_for_unlisted_tensors_and_a_wrong_total(tmp_path, cli):
    assert "not in it (b)" in only(verify(cli, _sharded(tmp_path / "m", {"a": FIRST, "c": SECOND})), "CKD308")["message"]
    wrong_total = _sharded(tmp_path / "t", {"a": FIRST, "b": FIRST, "c": SECOND}, total=4096)
    assert "total_size is 4096" in only(verify(cli, wrong_total), "CKD308")["message"]


def test_ckd308_quiet_for_a_matching_index(tmp_path, cli):
    folder = _sharded(tmp_path / "m", {"a": FIRST, "b": FIRST, "c": SECOND})
    assert "CKD308" not in codes(verify(cli, folder))


# --- burn recorder-era records (named MessagePack, gzip, JSON) ----------------------------------------


def _record(item: object, precision: str = "f32", version: str = "0.21.0") -> dict:
    metadata = {
        "float": precision,
        "int": "i32",
        "format": "burn_core::record::file::NamedMpkFileRecorder<FullPrecisionSettings>",
        "version": version,
        "settings": "FullPrecisionSettings",
    }
    return {"metadata": metadata, "item": item, "_b": []}


def _data(values: list[float]) -> dict:
    return {"bytes": struct.pack(f"<{len(values)}f", *values), "shape": [len(values)], "dtype": "F32"}


def _write_records(
    folder: Path,
    epoch: int,
    ids: tuple[str, str],
    optimizer_ids: tuple[str, str],
    weight: list[float],
    suffix: str = ".mpk",
    version: str = "0.21.0",
) -> None:
    import gzip
    import json

    import msgpack

    model = {"fc": {"weight": {"id": ids[0], "param": _data(weight)}, "bias": {"id": ids[1], "param": _data([0.0] * 2)}}}
    state = {
        optimizer_ids[0]: {
            "V1": {
                "Rank1": {
                    "momentum": {
                        "time": 1,
                        "moment_1": _data([0.0] * len(weight)),
                        "moment_2": _data([0.0] * len(weight)),
                        "max_moment_2": None,
                    }
                }
            }
        },
        optimizer_ids[1]: {
            "V1": {"Rank1": {"momentum": {"time": 1, "moment_1": _data([0.0] * 2), "moment_2": _data([0.0] * 2), "max_moment_2": None}}}
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    for role, item in (("model", model), ("optim", state), ("scheduler", 5)):
        if suffix == ".json.gz":

            def plain(value: object) -> object:
                if isinstance(value, dict):
                    return {k: plain(v) for k, v in value.items()}
                return list(value) if isinstance(value, bytes) else value

            (folder / f"{role}-{epoch}{suffix}").write_bytes(gzip.compress(json.dumps(plain(_record(item, version=version))).encode()))
        else:
            (folder / f"{role}-{epoch}{suffix}").write_bytes(msgpack.packb(_record(item, version=version), use_bin_type=True))


@pytest.mark.parametrize("suffix", [".mpk", ".json.gz"])
def test_burn_records_list_tensors_with_param_ids(tmp_path, cli, suffix):
    folder = tmp_path / "checkpoint"
    ids = ("72d17eukbtkma", "0000000000001")
    for epoch in (1, 2):
        _write_records(folder, epoch, ids, ids, [1.0] * 6, suffix)
    result = verify(cli, folder)
    assert result.json["findings"] == [] or {f["code"] for f in result.json["findings"]} == {"CKD210"}
    files = {Path(f["path"]).name: f for c in result.json["runs"][0]["checkpoints"] for f in c["files"]}
    assert files[f"model-2{suffix}"]["tensors"] == 2 and files[f"optim-2{suffix}"]["tensors"] == 4


def test_burn_records_fire_ckd301_and_ckd304(tmp_path, cli):
    folder = tmp_path / "checkpoint"
    ids = ("72d17eukbtkma", "0000000000001")
    _write_records(folder, 1, ids, ids, [1.0] * 6)
    _write_records(folder, 2, ids, ("zzzzzzzzzzzzz", ids[1]), [1.0] * 6)
    _write_records(folder, 3, ids, ids, [float("nan")] * 6)
    result = verify(cli, "--deep", folder)
    assert only(result, "CKD301")["index"] == 2
    assert only(result, "CKD304")["index"] == 3


@pytest.mark.slow
def test_ctrl_c_stops_a_parallel_deep_verify_at_once(tmp_path):
    """SIGINT while worker processes read: exit 130 promptly, no traceback, queued work dropped."""
    import signal
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    run.mkdir()
    torch.save({"w": torch.zeros(32 * 1024 * 1024 // 4)}, run / "model_1.pt")
    for epoch in range(2, 801):  # 25 GB to read, on no extra disk: hard links of one file
        (run / f"model_{epoch}.pt").hardlink_to(run / "model_1.pt")
    process = subprocess.Popen(
        [sys.executable, "-m", "ckptdoctor", "verify", "--deep", "--jobs", "2", "--json", str(run)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    if process.poll() is not None:
        pytest.skip("verify finished before it could be interrupted on this machine")
    process.send_signal(signal.SIGINT)
    started = time.monotonic()
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "Traceback" not in stderr and "Interrupted" in stderr
    assert time.monotonic() - started < 2, "it waited for the queued files"


def test_ckd303_fires_when_burn_records_change_version(tmp_path, cli):
    folder = tmp_path / "checkpoint"
    ids = ("72d17eukbtkma", "0000000000001")
    _write_records(folder, 1, ids, ids, [1.0] * 6, version="0.20.1")
    _write_records(folder, 2, ids, ids, [1.0] * 6, version="0.21.0")
    finding = only(verify(cli, folder), "CKD303")
    assert finding["index"] == 2 and "burn 0.21.0" in finding["message"] and "burn 0.20.1" in finding["message"]
    _write_records(folder, 1, ids, ids, [1.0] * 6, version="0.21.0")
    assert "CKD303" not in codes(verify(cli, folder))


def test_verify_load_maps_library_failures_to_rules(tmp_path, cli, monkeypatch):
    import ckptdoctor.readers.library as library

    run = tmp_path / "run"
    torch_run(run)
    loaded: list[str] = []

    def refuse(path, fmt):
        loaded.append(path)
        return (
            "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory"
            if path.endswith("model_3.pt")
            else None
        )

    monkeypatch.setattr(library, "_load", refuse)
    result = verify(cli, "--load", run)
    finding = only(result, "CKD203")
    assert finding["path"].endswith("model_3.pt") and "loading it fails" in finding["message"]
    assert len(loaded) == 6, "every file that passed the static checks is loaded"
    assert result.json["runs"][0]["resume"]["index"] == 2


def test_verify_load_skips_files_the_static_pass_flagged(tmp_path, cli, monkeypatch):
    import ckptdoctor.readers.library as library

    run = tmp_path / "run"
    torch_run(run)
    _flip_tensor_byte(run / "model_3.pt")
    (run / "model_2.pt").write_bytes((run / "model_2.pt").read_bytes()[:-40])
    loaded: list[str] = []
    monkeypatch.setattr(library, "_load", lambda path, fmt: loaded.append(path))
    verify(cli, "--load", "--deep", run)
    assert not any(p.endswith(("model_2.pt", "model_3.pt")) for p in loaded)
    assert len(loaded) == 4


def test_verify_load_without_torch_is_a_usage_error(tmp_path, cli, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    result = cli("verify", "--load", tmp_path)
    assert result.exit_code == 2 and "pip install 'ckptdoctor[torch]'" in result.stderr


# --- CKD207 from the whole-file readers ------------------------------------------------------------------


def test_ckd207_fires_for_a_burnpack_tensor_whose_length_disagrees_with_its_shape(tmp_path, cli):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, [1, 2])
    short = burnpack({"fc.weight": Tensor("F32", (4, 4), 1, bytes(60))})  # 16 floats need 64 bytes
    (folder / "model-2.bpk").write_bytes(short)
    finding = only(verify(cli, folder), "CKD207")
    assert "needs 64" in finding["message"] and finding["index"] == 2


def test_ckd207_fires_for_burnpack_scalars_of_no_known_kind(tmp_path, cli):
    folder = tmp_path / "checkpoint"
    write_burn_run(folder, [1, 2])
    (folder / "scheduler-2.bpk").write_bytes(burnpack({}, {"0.remaining_iters": {"Complex": 3}}))
    assert "0.remaining_iters" in only(verify(cli, folder), "CKD207")["message"]
    (folder / "scheduler-2.bpk").write_bytes(burnpack({}, {"0.remaining_iters": {"UInt": 3}, "0.lr": {"Float": 0.5}}))
    assert "CKD207" not in codes(verify(cli, folder))


def test_ckd207_fires_for_a_byteorder_record_torch_refuses(tmp_path, cli):
    run = tmp_path / "run"
    torch_run(run)
    path = run / "model_3.pt"
    with zipfile.ZipFile(path) as archive:
        members = [(info.filename, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members:
            archive.writestr(name, b"middle" if name.endswith("/byteorder") else data)
    assert "byteorder" in only(verify(cli, run), "CKD207")["message"]


def test_ckd206_fires_for_a_compressed_member_of_another_zip():
    import io

    import numpy as np

    from ckptdoctor.model import Problem
    from ckptdoctor.readers.files import BytesSample, verify_sample

    buffer = io.BytesIO()
    np.savez_compressed(buffer, a=np.arange(1000, dtype=np.float32))
    data = bytearray(buffer.getvalue())
    assert verify_sample(BytesSample(bytes(data)), "arrays.npz", deep=1).issues == ()
    data[data.rindex(b"PK\x01\x02") + 16] ^= 0xFF  # the central directory's CRC of a.npy
    deep = {i.problem for i in verify_sample(BytesSample(bytes(data)), "arrays.npz", deep=1).issues}
    assert deep == {Problem.CRC_MISMATCH}
    assert verify_sample(BytesSample(bytes(data)), "arrays.npz", deep=0).issues == ()
