"""Real Orbax checkpoints (JAX on CPU), broken the ways runs break, with Orbax itself as the judge.

Each test saves with ``CheckpointManager``, damages the newest step, then asks Orbax whether it
still restores that step (and every other) and asserts that ckptdoctor agrees: a step is
complete exactly when Orbax restores it, and the resume point is the newest step Orbax restores.
Nothing here says which files a restore needs: Orbax answers, file by file.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from frameworks import copy_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reports import codes

REASON = "real Orbax checkpoints need the orbax extra: pip install -e '.[orbax]'"
ocp = pytest.importorskip("orbax.checkpoint", reason=REASON)
jnp = pytest.importorskip("jax.numpy", reason=REASON)
np = pytest.importorskip("numpy")

STEPS = (1, 2, 3)
NEWEST = STEPS[-1]


def _state(step: int) -> dict:
    """A params dict and an optax-like Adam state as plain arrays; ``w`` is big enough (16 KiB)
    that OCDBT stores it out of line in a data file rather than inside a B+tree node."""
    rng = np.random.default_rng(step)
    w = jnp.asarray(rng.standard_normal((64, 64)), dtype=jnp.float32)
    b = jnp.full((4,), float(step))
    return {
        "params": {"w": w, "b": b},
        "opt_state": {"count": jnp.asarray(step), "mu": {"w": w * 0.1, "b": b * 0.1}, "nu": {"w": w * w, "b": b * b}},
    }


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three steps, each a composite of a PyTree item ``state`` and a JSON item ``meta``."""
    folder = tmp_path_factory.mktemp("orbax") / "run"
    with ocp.CheckpointManager(folder) as manager:
        for step in STEPS:
            manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(_state(step)), meta=ocp.args.JsonSave({"step": step})))
        manager.wait_until_finished()
    return folder


@pytest.fixture
def run(saved: Path, tmp_path: Path) -> Path:
    return copy_run(saved, tmp_path / "run")


def restores(folder: Path, step: int) -> bool:
    """Whether Orbax restores ``step`` whole: every array read back with the values saved."""
    options = ocp.CheckpointManagerOptions(read_only=True)
    try:
        with warnings.catch_warnings(), ocp.CheckpointManager(folder, options=options) as manager:
            warnings.simplefilter("ignore")
            restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore()))
            arrays = [np.asarray(leaf) for leaf in _leaves(restored.state)]
    except Exception:  # Orbax and TensorStore raise many unrelated types on damaged steps
        return False
    expected = [np.asarray(leaf) for leaf in _leaves(_state(step))]
    return restored.meta == {"step": step} and all(np.array_equal(a, b) for a, b in zip(arrays, expected, strict=True))


def _leaves(tree: dict) -> list:
    return [leaf for key in sorted(tree) for leaf in (_leaves(tree[key]) if isinstance(tree[key], dict) else [tree[key]])]


def latest_step(folder: Path) -> int | None:
    """The step Orbax's own resume takes: ``CheckpointManager.latest_step()``."""
    with ocp.CheckpointManager(folder, options=ocp.CheckpointManagerOptions(read_only=True)) as manager:
        return manager.latest_step()


def agree(folder: Path, cli: Callable, *command: str) -> dict:
    """ckptdoctor's report on ``folder`` (``inspect`` unless told), asserted to agree with Orbax
    about every step, and CKD114 exactly where ``latest_step()`` is a step Orbax cannot restore."""
    report = cli(*(command or ("inspect",)), "--json", folder).json
    (found,) = report["runs"]
    restored = [step for step in STEPS if restores(folder, step)]
    statuses = {c["index"]: c["status"] for c in found["checkpoints"]}
    assert [step for step in STEPS if statuses.get(step) == "complete"] == restored, (statuses, restored, report["findings"])
    assert (found["resume"] or {}).get("index") == (restored[-1] if restored else None)
    picked = latest_step(folder)
    assert ("CKD114" in codes(report, severity="error")) == (picked is not None and picked not in restored), (picked, report["findings"])
    return report


def message(report: dict, code: str) -> str:
    (found,) = [f["message"] for f in report["findings"] if f["code"] == code]
    return found


def step_files(folder: Path) -> list[Path]:
    return sorted(path for path in (folder / str(NEWEST)).rglob("*") if path.is_file())


def test_a_healthy_real_run_is_quiet_under_inspect_and_verify(run, cli):
    for command in ("inspect", "verify"):
        report = agree(run, cli, command)
        assert report["findings"] == [], report["findings"]
        (found,) = report["runs"]
        assert (found["layout"], found["unit"], found["resume"]["index"]) == ("orbax", "step", NEWEST)
    # the data files count: a step is its arrays' bytes, not just its markers
    step = next(c for c in found["checkpoints"] if c["index"] == NEWEST)
    assert step["bytes"] == sum(path.stat().st_size for path in step_files(run))


def test_the_layout_is_what_the_module_docstrings_say(run):
    """The files this test suite damages are the ones Orbax writes: a guard against a new Orbax
    moving its data, which would leave the tests below passing vacuously."""
    item = run / str(NEWEST) / "state"
    assert {"_METADATA", "_sharding", "manifest.ocdbt"} <= {p.name for p in item.iterdir()}
    assert list((item / "d").iterdir()) and list(item.glob("ocdbt.process_*/d/*"))
    assert (run / str(NEWEST) / "meta" / "metadata").is_file()


@pytest.mark.parametrize("damage", ["delete", "empty", "truncate"])
def test_each_file_of_a_step_deleted_emptied_or_cut_ckptdoctor_agrees_with_orbax(saved, tmp_path, cli, damage):
    """Every file of the newest step, one at a time: Orbax decides whether it was needed."""
    for index, victim in enumerate(step_files(saved)):
        copy = copy_run(saved, tmp_path / f"{damage}-{index}")
        target = copy / victim.relative_to(saved)
        if damage == "delete":
            target.unlink()
        elif damage == "empty":
            target.write_bytes(b"")
        else:
            os.truncate(target, target.stat().st_size // 2)
        agree(copy, cli)


def test_a_deleted_item_folder_is_a_missing_shard(run, cli):
    shutil.rmtree(run / str(NEWEST) / "state")
    report = agree(run, cli)
    (missing,) = [f for f in report["findings"] if f["code"] == "CKD105"]
    assert missing["index"] == NEWEST and "state/" in missing["message"]


def test_a_deleted_data_file_is_a_missing_shard_named_by_the_manifest(run, cli):
    (data,) = (run / str(NEWEST) / "state" / "d").iterdir()
    data.unlink()
    report = agree(run, cli)
    (missing,) = [f for f in report["findings"] if f["code"] == "CKD105"]
    assert f"state/d/{data.name}" in missing["message"] and "manifest.ocdbt" in missing["message"]


def test_a_cut_data_file_is_truncated_and_an_emptied_manifest_is_empty(run, cli):
    item = run / str(NEWEST) / "state"
    biggest = max(item.glob("ocdbt.process_*/d/*"), key=lambda path: path.stat().st_size)
    os.truncate(biggest, biggest.stat().st_size // 2)
    report = agree(run, cli)
    # one save cut short: CKD117 stands for its files' findings
    assert codes(report, severity="error") == ["CKD117", "CKD114", "CKD203"] and biggest.name in message(report, "CKD203")
    (item / "manifest.ocdbt").write_bytes(b"")
    assert "CKD201" in codes(agree(run, cli), severity="error")


def test_the_per_process_stores_older_versions_are_not_needed(run, cli):
    """Orbax merges each process's store into the item's; the files only older versions use
    can go, as can the per-process manifests: ckptdoctor stays quiet when Orbax restores."""
    item = run / str(NEWEST) / "state"
    for process in item.glob("ocdbt.process_*"):
        (process / "manifest.ocdbt").unlink()
        for data in (process / "d").iterdir():
            copy = data.with_suffix(".bak")
            shutil.move(data, copy)
            if not restores(run, NEWEST):
                shutil.move(copy, data)  # the newest version's values live here: Orbax needs it
    assert restores(run, NEWEST)
    report = agree(run, cli)
    assert report["findings"] == [] or codes(report, severity="error") == []
    for leftover in item.glob("ocdbt.process_*/d/*.bak"):
        leftover.unlink()
    assert agree(run, cli)["findings"] == []


def test_markers_orbax_restores_without_are_warnings_and_the_step_stays_the_resume_point(run, cli):
    step = run / str(NEWEST)
    (step / "commit_success.txt").unlink()
    report = agree(run, cli)
    assert codes(report, severity="error") == [] and codes(report, severity="warning") == ["CKD106"]
    (step / "_CHECKPOINT_METADATA").write_bytes(b"")
    report = agree(run, cli)
    assert codes(report, severity="error") == [] and sorted(codes(report, severity="warning")) == ["CKD106", "CKD201"]
    # the run says how to restore it: with each item's args, which is what restores() does
    assert "args=ocp.args.Composite" in report["runs"][0]["resume"]["how"]


def _flip(path: Path, offset: int) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0xFF]))


def test_a_flipped_byte_in_the_manifest_fails_its_crc(run, cli):
    _flip(run / str(NEWEST) / "state" / "manifest.ocdbt", 40)
    assert codes(agree(run, cli), severity="error") == ["CKD114", "CKD206"]


def test_a_flipped_byte_in_a_tree_node_is_found_by_verify(run, cli):
    """Node CRCs are checked by verify (inspect reads the nodes but leaves their CRCs to it)."""
    (node,) = (run / str(NEWEST) / "state" / "d").iterdir()
    _flip(node, node.stat().st_size - 2)
    report = agree(run, cli, "verify")
    assert codes(report, severity="error") == ["CKD114", "CKD206"] and node.name in message(report, "CKD206")


def test_zeros_over_the_values_are_found_by_verify_deep(run, cli):
    """A crash that leaves the end of a data file zero-filled: values carry no checksum, but each
    is a zstd frame that no longer decodes (``verify --deep`` reads every value)."""
    values = max((run / str(NEWEST) / "state").glob("ocdbt.process_*/d/*"), key=lambda path: path.stat().st_size)
    size = values.stat().st_size
    with values.open("r+b") as file:
        file.seek(size // 2)
        file.write(bytes(size - size // 2))
    report = agree(run, cli, "verify", "--deep")
    assert codes(report, severity="error") == ["CKD114", "CKD207"] and values.name in message(report, "CKD207")


class _Memory:
    """An OCDBT store's files in memory, for the reader alone."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    def size(self, path: str) -> int | None:
        return len(self.files[path]) if path in self.files else None

    def read(self, path: str, offset: int, length: int) -> bytes:
        return self.files.get(path, b"")[offset : offset + length]


def _store(saved: Path) -> dict[str, bytes]:
    item = saved / str(NEWEST) / "state"
    return {str(path.relative_to(item)): path.read_bytes() for path in item.rglob("*") if path.is_file()}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_changed_or_cut_manifest_or_node_never_raises_and_is_never_clean(saved, data):
    """The reader on real OCDBT bytes with one byte changed or the end cut off: a finding, never
    a traceback (CRC-32C catches every one-byte change, the lengths every cut)."""
    from ckptdoctor.readers import ocdbt

    files = _store(saved)
    clean = ocdbt.walk(files["manifest.ocdbt"], _Memory(files))
    assert not clean.issues and clean.fact("missing") is None
    (node,) = (name for name in files if name.startswith("d/"))
    victim = data.draw(st.sampled_from(["manifest.ocdbt", node]))
    original = files[victim]
    if data.draw(st.booleans()):
        position = data.draw(st.integers(0, len(original) - 1))
        changed = original[:position] + bytes([original[position] ^ data.draw(st.integers(1, 255))]) + original[position + 1 :]
    else:
        changed = original[: data.draw(st.integers(0, len(original) - 1))]
    report = ocdbt.walk(changed if victim == "manifest.ocdbt" else files["manifest.ocdbt"], _Memory({**files, victim: changed}))
    assert report.issues or report.fact("missing"), (victim, report)


def test_a_deep_ocdbt_tree_is_walked_through_its_interior_nodes(tmp_path):
    """Orbax's trees are a single leaf in practice (nodes of up to 100 MB); TensorStore itself,
    with small nodes, writes interior ones: every value is reached, and a lost node file is named."""
    ts = pytest.importorskip("tensorstore", reason=REASON)
    from ckptdoctor.readers import ocdbt
    from ckptdoctor.readers.files import _Folder

    spec = {"driver": "ocdbt", "base": f"file://{tmp_path}/", "config": {"max_decoded_node_bytes": 512, "max_inline_value_bytes": 16}}
    store = ts.KvStore.open(spec).result()
    with ts.Transaction() as txn:
        for i in range(400):
            store.with_transaction(txn)[f"key{i:04d}"] = bytes([i % 256]) * 100
    manifest = (tmp_path / "manifest.ocdbt").read_bytes()
    walk = ocdbt._Walk(_Folder(str(tmp_path)), crc=True)
    version = ocdbt._manifest(manifest)
    walk.node(version.root, "", version.height)
    assert version.height > 0 and len(walk.values) == 400 and not walk.issues
    assert ocdbt.walk(manifest, _Folder(str(tmp_path)), values=True).issues == ()
    node = next(ref.path for ref in walk.values)  # a file holding values (and leaf nodes)
    (tmp_path / node).unlink()
    assert node in (ocdbt.walk(manifest, _Folder(str(tmp_path))).fact("missing") or "")
    with pytest.raises(Exception, match=r"NOT_FOUND|DATA_LOSS|OUT_OF_RANGE"):
        reopened = ts.KvStore.open(spec).result()
        for i in range(400):
            reopened.read(f"key{i:04d}").result()
