"""What a user may declare trusted in a pickle (``trusted-globals``, as torch's
``add_safe_globals``) and what no one may: the modules and functions that act. Kept apart from
the safety judge (``pickle_safety``), whose unpickler a command's settings need not load.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass

ACTING_MODULES: frozenset[str] = frozenset({
    "builtins", "__builtin__", "os", "posix", "nt", "subprocess", "sys", "importlib", "runpy", "shutil",
    "socket", "pickle", "_pickle", "marshal", "types", "functools", "operator", "_operator", "codecs",
    "_codecs", "io", "_io", "pathlib", "ctypes", "_ctypes", "code", "codeop", "pty", "pdb", "timeit",
    "multiprocessing", "asyncio", "signal", "tempfile", "webbrowser", "dill", "cloudpickle", "joblib",
})  # fmt: skip
"""Modules whose functions can run commands, touch files, load code or call what they are given
(``operator.methodcaller``, ``functools.partial``): a pickle importing from them beyond the
allowlists calls functions that act, and no user may declare them trusted (``trust_refusal``)."""
ACTING_NAMES: tuple[str, ...] = (
    "torch.load", "torch.jit", "torch.hub", "torch.package", "torch.serialization", "torch._C", "torch.ops",
    "torch.classes", "torch.compile", "torch._dynamo", "torch._inductor", "torch.utils.cpp_extension",
    "torch.distributed.rpc", "numpy.load", "numpy.lib.npyio", "numpy.lib.format", "pandas.read_pickle",
    "pandas.eval", "yaml.load", "yaml.unsafe_load",
)  # fmt: skip
"""Functions (and modules of them) of libraries otherwise harmless that load or run code."""

NEVER_ALLOWED = frozenset({"os", "posix", "nt", "sys"})
"""Modules torch refuses even when a user allowlists them: named first in a finding."""


def acts(dotted: str) -> bool:
    """Whether ``module.name`` is, or lies in, a module whose functions can act (``ACTING_MODULES``,
    ``ACTING_NAMES``), or reaches through a special attribute past its module (``Config.__init__.
    __builtins__.get`` is ``builtins`` and its ``eval``)."""
    module, _, attributes = dotted.partition(".")
    return (
        module in ACTING_MODULES
        or any(len(part) > 4 and part[:2] == part[-2:] == "__" for part in attributes.split("."))
        or any(dotted == name or dotted.startswith(f"{name}.") for name in ACTING_NAMES)
    )


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+\Z")


_LIBRARIES = frozenset({
    "torch", "torchvision", "torchaudio", "numpy", "pandas", "scipy", "sklearn", "keras", "tensorflow", "jax",
    "jaxlib", "flax", "optax", "orbax", "tensorstore", "yaml", "omegaconf", "hydra", "h5py", "mmcv", "mmdet",
    "safetensors", "datasets", "tokenizers", "huggingface_hub", "peft", "zstandard", "lz4", "msgpack", "cbor2",
    "setuptools", "pkg_resources", "pip", "pytest", "_pytest", "IPython", "jupyter_client", "boto3", "botocore",
    "s3fs", "gcsfs", "fsspec", "obstore", "requests", "urllib3", "httpx", "aiohttp", "psutil", "PIL", "cv2",
    "matplotlib", "onnx", "onnxruntime", "tensorboard", "tensorboardX", "wandb", "mlflow", "ray", "typer",
    "click", "rich",
})  # fmt: skip
"""Libraries ckptdoctor knows, the frameworks' aside (their layouts' ``packages``, handed in as
``Trusted.libraries``). A declared class of theirs is trusted only where a pickle rebuilds
it field by field (``cls.__new__``, or ``cls()``): called with arguments, ``h5py.File``,
``pandas.HDFStore`` and ``mmengine.logging.MMLogger`` create the path they are given. A class of
the user's own package is trusted however a pickle uses it, as torch's ``add_safe_globals``."""


def trust_refusal(entry: str) -> str | None:
    """Why a user may not declare ``entry`` trusted (``trusted-globals``), or None: only an exact
    ``module.Class`` of the user's own package; never a wildcard (``mypkg.*`` covers ``mypkg.Popen``
    where the package imports ``subprocess.Popen``), a name that can act, a function, anything of
    Python's standard library (what of it is harmless needs no declaring), nor a path through a
    module that can act (``mypkg.os.system``)."""
    if "*" in entry:
        return (
            f"{entry} is a wildcard, which also covers what the package imports (from subprocess import Popen "
            "makes mypkg.Popen subprocess.Popen): name each of your classes"
        )
    if not _DOTTED.match(entry):
        return "must be an exact module.Name, a class of your own package"
    if acts(entry):
        return f"{entry} can run commands, touch files or load code"
    parts = entry.split(".")
    if parts[0] in sys.stdlib_module_names:
        return f"{entry} is Python's standard library ({parts[0]}), whose modules can act: declare only your own classes"
    if through := next((part for part in parts[1:] if part in ACTING_MODULES), None):
        return f"{entry} reaches {through}, which can run commands, touch files or load code"
    if not parts[-1][:1].isupper():
        return f"{entry} is not a class: a function can run code"
    return None


@dataclass(frozen=True)
class Trusted:
    """Classes a user declared trusted (``trusted-globals``, as torch's ``add_safe_globals``), each
    checked by ``trust_refusal``, and the file that declared them."""

    names: frozenset[str] = frozenset()
    source: str = ""
    libraries: frozenset[str] = frozenset()
    """The frameworks' packages (their layouts'), known as ``_LIBRARIES`` are."""

    @classmethod
    def declared(cls, entries: Iterable[str], source: str) -> Trusted:
        return cls(frozenset(entries), source)

    def covers(self, dotted: str, called: bool = False) -> bool:
        """Whether ``dotted`` is declared, reached through no module that can act, whatever a
        pickle's dotted name (``mypkg`` + ``os.system``) says; where the pickle ``called`` it with
        arguments, only a class of the user's own package (``_LIBRARIES``, ``libraries``)."""
        parts = dotted.split(".")
        if called and (parts[0] in _LIBRARIES or parts[0] in self.libraries):
            return False
        return dotted in self.names and not any(part in ACTING_MODULES for part in parts)
