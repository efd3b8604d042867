"""Trust declared, not guessed (issue 31, item 8).

What training code really saves beside its weights (a ``BertConfig``, a user's ``Enum`` or
dataclass, a whole ``nn.Module``, a pandas frame) is no attack, but ``torch.load(weights_only=True)``
refuses it: CKD401 says it "rebuilds objects of these classes: safe only if you trust whoever wrote
it", apart from a pickle that "calls functions that run commands or touch files". A user declares
their own classes in ``trusted-globals`` (as torch's ``add_safe_globals``): those files are then
CKD402, "declared trusted in" the configuration file, and torch itself loads them with exactly
those classes allowed. Names that can act (``os.system``, ``builtins.*``, ``torch.*``) are refused.
Each file is written by the real library and each verdict confirmed by torch's own loader."""

from __future__ import annotations

import dataclasses
import enum
import io
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from sample_set import GADGETS, _add_setitem, _call, _g, _list, _u

from ckptdoctor import api
from ckptdoctor.readers.pickle_safety import judge
from ckptdoctor.readers.trust import Trusted, trust_refusal
from ckptdoctor.readers.unpickler import walk

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pandas = pytest.importorskip("pandas")

BERT = "transformers.models.bert.configuration_bert.BertConfig"
REBUILDS = "rebuilds objects of these classes"
TRUST_WRITER = "safe only if you trust whoever wrote it"
ACTS = "calls functions that run commands or touch files"

CANARY = object()
"""Where a test's pickle passes the canary's path among a call's arguments."""


class Colour(enum.Enum):
    RED = 1


@dataclasses.dataclass
class Config:
    lr: float = 0.1
    name: str = "run"


def bert_config() -> object:
    return transformers.BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)


SAVED = {
    # what a training script saves beside its weights, and the classes torch needs allowed for it
    "bert-config": (lambda: {"model": {"w": torch.zeros(2)}, "config": bert_config()}, [BERT]),
    "user-enum": (lambda: {"model": {"w": torch.zeros(2)}, "mode": Colour.RED}, [f"{__name__}.Colour"]),
    "user-dataclass": (lambda: {"model": {"w": torch.zeros(2)}, "config": Config()}, [f"{__name__}.Config"]),
    "whole-module": (lambda: {"model": torch.nn.Linear(2, 2)}, ["torch.nn.modules.linear.Linear"]),
}


def _write(folder: Path, case: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case}.pt"
    torch.save(SAVED[case][0](), path)
    return path


def _classes(case: str) -> list[type]:
    import importlib

    return [getattr(importlib.import_module(name.rpartition(".")[0]), name.rpartition(".")[2]) for name in SAVED[case][1]]


def _refused_by_weights_only(path: Path) -> bool:
    try:
        torch.load(path, weights_only=True)
    except pickle.UnpicklingError:
        return True
    return False


def _loads_with_safe_globals(path: Path, case: str) -> bool:
    with torch.serialization.safe_globals(_classes(case)):
        model = torch.load(path, weights_only=True)["model"]
    weights = model.state_dict()["weight"] if case == "whole-module" else model["w"]
    return weights.shape in ((2, 2), (2,))


def _unsafe(result) -> list[dict]:
    return [f for f in result.json["findings"] if f["code"] == "CKD401"]


@pytest.mark.parametrize("case", sorted(SAVED))
def test_what_training_code_saves_is_told_apart_from_code_that_acts(case, tmp_path, cli):
    path = _write(tmp_path / "run", case)
    assert _refused_by_weights_only(path)  # torch's default loader refuses it: unsafe from a stranger
    result = cli("verify", "--json", path)
    assert result.exit_code == 1
    (finding,) = _unsafe(result)
    assert finding["severity"] == "error"
    assert REBUILDS in finding["message"] and TRUST_WRITER in finding["message"]
    assert all(name in finding["message"] for name in SAVED[case][1])
    assert ACTS not in finding["message"]


def test_a_pandas_frame_beside_a_model_is_told_apart_from_code_that_acts(tmp_path, cli):
    path = tmp_path / "stats.pkl"
    pandas.DataFrame({"loss": [0.5, 0.25]}).to_pickle(path)
    assert pandas.read_pickle(path)["loss"].tolist() == [0.5, 0.25]  # pandas' own loader reads it back
    result = cli("verify", "--json", path)
    assert result.exit_code == 1
    (finding,) = _unsafe(result)
    # pandas rebuilds a frame by calling its own functions with what the file holds: not a class rebuild
    assert "calls functions (pandas._libs.internals._unpickle_block, pandas.core.indexes.base._new_Index" in finding["message"]
    assert REBUILDS not in finding["message"] and TRUST_WRITER not in finding["message"] and ACTS not in finding["message"]


def _with_payload(path: Path) -> Path:
    """``path`` with one more top-level item: a call of ``os.system`` (never loaded here)."""
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    (pickled,) = [name for name in members if name.endswith("/data.pkl")]
    members[pickled] = _add_setitem(members[pickled], "extra", GADGETS["os.system"]("/nonexistent/ckptdoctor-canary"))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    path.write_bytes(buffer.getvalue())
    return path


def test_a_pickle_that_calls_os_system_says_it_runs_commands(tmp_path, cli):
    path = _with_payload(_write(tmp_path / "run", "user-dataclass"))
    result = cli("verify", "--json", path)
    assert result.exit_code == 1
    (finding,) = _unsafe(result)
    assert ACTS in finding["message"] and "os.system" in finding["message"] and TRUST_WRITER not in finding["message"]


def _loaded_by_pickle(path: Path) -> None:
    """``pickle.load`` of ``path`` in a child process: what a victim of the file does."""
    subprocess.run([sys.executable, "-c", f"import pickle; pickle.load(open({str(path)!r}, 'rb'))"], check=False, timeout=60)


@pytest.mark.parametrize("gadget", ["pydoc.pipepager", "numpy.savetxt"])
def test_a_function_of_a_module_no_list_names_is_called_not_rebuilt(gadget, tmp_path, cli):
    """CKD401 says "rebuilds objects" only where each import is a class rebuilt; a function called
    with what the file holds, from a module outside every list, is "calls functions", live."""
    canary = tmp_path / "canary"
    path = tmp_path / "payload.pkl"
    path.write_bytes(b"\x80\x02" + GADGETS[gadget](str(canary)) + b".")
    result = cli("verify", "--json", path)
    assert result.exit_code == 1
    (finding,) = _unsafe(result)
    assert finding["severity"] == "error" and f"calls functions ({gadget}) when loaded" in finding["message"]
    assert REBUILDS not in finding["message"] and TRUST_WRITER not in finding["message"]
    _loaded_by_pickle(path)
    assert canary.exists()  # it ran


def test_a_class_called_with_arguments_beside_a_function_is_called():
    """One function among rebuilt classes makes the whole pickle "calls functions"."""
    pickled = b"\x80\x02" + _call(_g("mypkg.config", "Config"), _u("x"), _u("y")) + b"0" + _call(_g("mypkg.util", "make"), _u("x")) + b"."
    (issue,) = judge(walk(pickled), "the pickle")
    assert "calls functions (mypkg.util.make) when loaded, and imports mypkg.config.Config" in issue.detail
    plain = b"\x80\x02" + _call(_g("mypkg.config", "Config"), _u("x"), _u("y")) + b"."
    (issue,) = judge(walk(plain), "the pickle")
    assert REBUILDS in issue.detail and "calling mypkg.config.Config with what the file holds" in issue.detail


def _project(root: Path, entries: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    listed = ", ".join(f'"{entry}"' for entry in entries)
    (root / "pyproject.toml").write_text(f"[tool.ckptdoctor]\ntrusted-globals = [{listed}]\n")
    return root


@pytest.mark.parametrize("case", sorted(SAVED))
def test_classes_the_user_declares_trusted_are_ckd402_and_torch_loads_them_so(case, tmp_path, cli):
    project = _project(tmp_path / "project", SAVED[case][1])
    path = _write(project / "run", case)
    assert _loads_with_safe_globals(path, case)  # torch's own loader, told exactly these classes
    result = cli("verify", "--json", "--config", project / "pyproject.toml", path)
    assert result.exit_code == 0, result.stdout
    assert _unsafe(result) == []
    (finding,) = [f for f in result.json["findings"] if f["code"] == "CKD402"]
    assert f"declared trusted in {project / 'pyproject.toml'}" in finding["message"]
    assert "safe_globals([" in finding["message"] and all(name in finding["message"] for name in SAVED[case][1])
    assert result.json["runs"][0]["checkpoints"][-1]["status"] == "complete"
    # verify --resume-path honours the declaration as the findings do
    run = project / "epochs"
    run.mkdir()
    (run / "model_3.pt").write_bytes(path.read_bytes())
    inspected = cli("inspect", "--resume-path", "--config", project / "pyproject.toml", run)
    resumed = cli("verify", "--resume-path", "--config", project / "pyproject.toml", run)
    assert inspected.exit_code == 0 and resumed.exit_code == 0 and resumed.stdout == inspected.stdout != ""


def test_the_environment_and_the_api_declare_alike(tmp_path, cli):
    path = _write(tmp_path / "run", "user-dataclass")
    by_env = cli("verify", "--json", path, env={"CKPTDOCTOR_TRUSTED_GLOBALS": f"{__name__}.Config"})
    assert by_env.exit_code == 0 and "declared trusted in CKPTDOCTOR_TRUSTED_GLOBALS" in by_env.stdout
    project = _project(tmp_path / "project", [f"{__name__}.Config"])
    report = api.verify(str(path), config=str(project / "pyproject.toml"))
    assert {f.code for f in report.findings} == {"CKD402"}


def test_a_declared_class_does_not_cover_a_payload_beside_it(tmp_path, cli):
    project = _project(tmp_path / "project", [f"{__name__}.Config"])
    path = _with_payload(_write(project / "run", "user-dataclass"))
    result = cli("verify", "--json", "--config", project / "pyproject.toml", path)
    assert result.exit_code == 1
    (finding,) = _unsafe(result)
    assert finding["severity"] == "error" and ACTS in finding["message"]


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("os.system", "os.system can run commands"),
        ("posix.system", "posix.system can run commands"),
        ("builtins.eval", "builtins.eval can run commands"),
        ("subprocess.Popen", "subprocess.Popen can run commands"),
        ("torch.load", "torch.load can run commands"),
        ("torch.jit.load", "torch.jit.load can run commands"),
        ("os.*", "wildcard"),
        ("builtins.*", "wildcard"),
        ("importlib.*", "wildcard"),
        ("torch.*", "wildcard"),
        ("pathlib.*", "wildcard"),
        ("*", "wildcard"),
        ("Config", "must be an exact module.Name"),
        ("mypkg.Config; import os", "must be an exact module.Name"),
        # an independent attack's entries (issue 31): modules and classes outside the acting lists that write files or run code
        ("posixpath.*", "wildcard"),
        ("logging.*", "wildcard"),
        ("logging.FileHandler", "standard library"),
        ("zipfile.ZipFile", "standard library"),
        ("cProfile.run", "standard library"),
        ("mypkg.os.system", "reaches os"),
        ("torch.fx.*", "wildcard"),
        ("numpy.testing.*", "wildcard"),
        ("torch.storage._load_from_bytes", "not a class"),
        ("mypkg.make_model", "not a class"),
        ("mypkg.*", "wildcard"),  # the docs' own example once: the second attack (issue 31)
    ],
)
def test_names_that_can_act_cannot_be_declared_trusted(entry, why, tmp_path, cli):
    project = _project(tmp_path / "project", [entry])
    path = _write(project / "run", "user-dataclass")
    result = cli("verify", "--config", project / "pyproject.toml", path)
    assert result.exit_code == 2
    assert "trusted-globals" in result.stderr + result.stdout and why in result.stderr + result.stdout


@pytest.mark.parametrize("entry", ["os.system", "logging.FileHandler", "mypkg.os.system", "posixpath.*", "torch.fx.*", "mypkg.make"])
def test_what_an_attack_declared_is_refused_before_any_file_is_read(entry):
    assert trust_refusal(entry) is not None


def test_a_declared_class_covers_itself_alone(tmp_path, cli):
    """The second attack (issue 31): `mypkg.*` vouched for `mypkg.Popen`, which is subprocess.Popen
    where the package does `from subprocess import Popen`; a declaration names each class, and a
    call of anything else the package holds stays CKD401, proven live here with the package."""
    package = tmp_path / "src" / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from subprocess import Popen\n\nclass Config:\n    pass\n")
    canary = tmp_path / "canary"
    pickled = b"\x80\x02" + _call(_g("mypkg", "Popen"), _list(_u("touch"), _u(str(canary)))) + b"."
    path = tmp_path / "project" / "run" / "model_3.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(pickled)
    loader = "import pickle, sys; pickle.loads(sys.stdin.buffer.read()).wait()"
    subprocess.run([sys.executable, "-c", loader], input=pickled, env={**os.environ, "PYTHONPATH": str(package.parent)}, check=False)
    assert canary.exists()
    project = _project(tmp_path / "project", ["mypkg.Config"])
    result = cli("verify", "--json", "--config", project / "pyproject.toml", path)
    assert result.exit_code == 1
    (finding,) = _unsafe(result)
    assert finding["severity"] == "error" and "mypkg.Popen" in finding["message"]
    trusted = Trusted.declared(["mypkg.Config"], "pyproject.toml")
    assert trusted.covers("mypkg.Config")
    assert not any(trusted.covers(name) for name in ("mypkg.Popen", "mypkg.models.Config", "mypkg.os.system"))


@pytest.mark.parametrize(
    ("module", "name", "args"),
    [("logging", "FileHandler", ("w",)), ("zipfile", "ZipFile", ("w",)), ("sqlite3", "Connection", ())],
)
def test_a_standard_library_class_that_creates_the_path_it_is_given_calls_functions(module, name, args, tmp_path):
    """An independent attack's live gadgets (issue 31): classes of the standard library that
    create or truncate a path when built are worded as calls, never "rebuilds objects"."""
    canary = tmp_path / "canary"
    pickled = b"\x80\x02" + _call(_g(module, name), _u(str(canary)), *(_u(a) for a in args)) + b"."
    subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"], input=pickled, check=False)
    assert canary.exists()  # it ran
    (issue,) = judge(walk(pickled), "the pickle")
    assert f"calls functions ({module}.{name}) when loaded" in issue.detail and REBUILDS not in issue.detail


@pytest.mark.parametrize(
    ("declared", "module", "name", "args"),
    [
        ("h5py.File", "h5py", "File", (CANARY, "w")),
        ("h5py._hl.files.File", "h5py._hl.files", "File", (CANARY, "w")),
        # a framework's class, as a library's (the layouts' packages): MMLogger(name, logger_name, log_file)
        ("mmengine.logging.logger.MMLogger", "mmengine.logging.logger", "MMLogger", ("ckd", "ckd", CANARY)),
    ],
)
def test_a_declared_library_class_called_with_arguments_stays_unsafe(declared, module, name, args, tmp_path, cli):
    """The second attack (issue 31): `trusted-globals = ["h5py.File"]` made `h5py.File(path, "w")`,
    which creates or truncates any path, CKD402. A library's or a framework's class is trusted
    where a pickle rebuilds it, never where it calls it with arguments."""
    pytest.importorskip(module.partition(".")[0])
    canary = tmp_path / "canary"
    called = (str(canary) if arg is CANARY else arg for arg in args)
    pickled = b"\x80\x02" + _call(_g(module, name), *(_u(a) for a in called)) + b"."
    subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"], input=pickled, check=False)
    assert canary.exists()
    project = _project(tmp_path / "project", [declared])
    path = project / "run" / "model_3.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(pickled)
    result = cli("verify", "--json", "--config", project / "pyproject.toml", path)
    assert result.exit_code == 1
    (finding,) = _unsafe(result)
    assert finding["severity"] == "error" and "declared trusted" not in finding["message"]


@pytest.mark.slow
def test_a_chain_through_a_special_attribute_is_worded_as_running_commands(tmp_path, cli):
    """The second attack (issue 31): `torch._utils` + `_rebuild_tensor_v2.__builtins__.get` reaches
    `eval`; CKD401 said only "calls functions when loaded", not what they can do."""
    canary = tmp_path / "canary"

    def short(text: str) -> bytes:
        return b"\x8c" + bytes([len(text)]) + text.encode()

    code = f"open({str(canary)!r}, 'a').close()"
    getter = short("torch._utils") + short("_rebuild_tensor_v2.__builtins__.get") + b"\x93"
    pickled = b"\x80\x04" + _call(_call(getter, _u("eval")), _u(code)) + b"."
    loader = "import pickle, sys, torch; pickle.loads(sys.stdin.buffer.read())"
    subprocess.run([sys.executable, "-c", loader], input=pickled, check=False)
    assert canary.exists()
    path = tmp_path / "run" / "model_3.pt"
    path.parent.mkdir()
    path.write_bytes(pickled)
    result = cli("verify", "--json", path)
    (finding,) = _unsafe(result)
    assert result.exit_code == 1 and ACTS in finding["message"], finding
