"""Whether loading a pickle would run code: an allowlist of imports, never a blocklist.

Three tiers, judged on the exact ``module.name`` a pickle imports:

- torch's own ``weights_only`` allowlist (what ``torch.load`` accepts by default): safe;
- a short list of well-known harmless classes and functions of numpy and the standard library
  (RNG states, argument namespaces), and those the caller hands ``judge`` (``Harmless``: the
  frameworks' argument and hyper-parameter containers, declared by their layouts): not dangerous,
  but ``torch.load(weights_only=True)`` refuses them (CKD402);
- everything else, and every import whose name is computed at load time: unsafe (CKD401).

A pickle unsafe only because it rebuilds plain objects of some classes (``NEWOBJ`` of no argument,
or a call of no argument, then ``BUILD``) or enum members (``cls(literal)``) says so (``Rebuilt``):
the layout of a run whose framework's own save code writes exactly those classes may vouch for
them (``layouts.content``).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ckptdoctor.model import FileIssue, Problem, Rebuilt
from ckptdoctor.readers.dtypes import TORCH_SIZES, TORCH_STORAGES
from ckptdoctor.readers.trust import NEVER_ALLOWED, acts
from ckptdoctor.readers.unpickler import Global, Walk

_TENSOR_TYPES = ("Double", "Float", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte")
_CUDA_STORAGES = (*_TENSOR_TYPES, "Bool", "ComplexDouble", "ComplexFloat")
_REBUILDERS = (
    "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
    "_rebuild_parameter_with_state", "_rebuild_qtensor", "_rebuild_sparse_tensor",
    "_rebuild_nested_tensor", "_rebuild_meta_tensor_no_storage", "_rebuild_wrapper_subclass",
    "_rebuild_device_tensor_from_cpu_tensor", "_rebuild_device_tensor_from_numpy",
)  # fmt: skip
_SUB_BYTE = tuple(f"{kind}{bits}" for kind in ("int", "uint") for bits in range(1, 8))
_QSCHEMES = (
    "per_tensor_affine", "per_tensor_symmetric", "per_channel_affine", "per_channel_symmetric",
    "per_channel_affine_float_qparams",
)  # fmt: skip

TORCH_WEIGHTS_ONLY: frozenset[str] = frozenset({
    "collections.OrderedDict", "collections.Counter", "torch.nn.parameter.Parameter",
    "torch.serialization._get_layout", "torch.Size", "torch.Tensor", "torch.device",
    "_codecs.encode", "builtins.bytearray", "builtins.set", "builtins.complex",
    "torch.storage.TypedStorage", "torch.storage.UntypedStorage", "torch._tensor._rebuild_from_type_v2",
    *(f"torch.{dtype}" for dtype in TORCH_SIZES),
    *(f"torch.{name}" for name in _SUB_BYTE),
    *(f"torch.{scheme}" for scheme in _QSCHEMES),
    *(f"torch._utils.{name}" for name in _REBUILDERS),
    *(f"torch.{name}" for name in TORCH_STORAGES),
    *(f"torch.cuda.{kind}Storage" for kind in _CUDA_STORAGES),
    *(f"torch.{kind}Tensor" for kind in (*_TENSOR_TYPES, "Bool")),
    *(f"torch.cuda.{kind}Tensor" for kind in (*_TENSOR_TYPES, "Bool")),
    *(f"torch.sparse.{kind}Tensor" for kind in _TENSOR_TYPES),
    *(f"torch.cuda.sparse.{kind}Tensor" for kind in _TENSOR_TYPES),
})  # fmt: skip
"""The globals torch 2.13's ``torch.load(weights_only=True)`` accepts without being told
(``torch._weights_only_unpickler._get_allowed_globals``); a test compares it with torch's own."""

_NUMPY_DTYPES = (
    "Float64DType", "Float32DType", "Float16DType", "Int64DType", "Int32DType", "Int16DType",
    "Int8DType", "UInt64DType", "UInt32DType", "UInt16DType", "UInt8DType", "BoolDType",
)  # fmt: skip
KNOWN_BENIGN: frozenset[str] = frozenset({
    # numpy arrays, scalars and random states (RNG files of HF Trainer, accelerate, Lightning)
    *(f"{core}.multiarray.{name}" for core in ("numpy.core", "numpy._core") for name in ("_reconstruct", "scalar")),
    "numpy.ndarray", "numpy.dtype", "joblib.numpy_pickle.NumpyArrayWrapper",
    "numpy.ma.core._mareconstruct", "numpy.ma.core.MaskedArray", "numpy.ma.MaskedArray",
    *(f"numpy.dtypes.{name}" for name in _NUMPY_DTYPES),
    *(f"{core}.numeric._frombuffer" for core in ("numpy.core", "numpy._core")),  # protocol 5 arrays
    "numpy.random._pickle.__randomstate_ctor", "numpy.random._pickle.__bit_generator_ctor",
    "numpy.random._pickle.__generator_ctor", "numpy.random._mt19937.MT19937",
    "numpy.random._pcg64.PCG64", "numpy.random._pcg64.PCG64DXSM", "numpy.random._philox.Philox",
    "numpy.random._sfc64.SFC64", "numpy.random.mtrand.RandomState", "numpy.random._generator.Generator",
    "numpy.random.bit_generator.SeedSequence", "numpy.random.bit_generator.__pyx_unpickle_SeedSequence",
    # plain values of the standard library
    "argparse.Namespace", "collections.defaultdict", "collections.deque", "builtins.slice",
    "builtins.frozenset", "builtins.tuple", "builtins.list", "builtins.dict", "builtins.int",
    "builtins.float", "builtins.str", "builtins.bytes", "builtins.bool", "builtins.range",
    "copyreg._reconstructor", "builtins.object", "datetime.datetime", "datetime.date",
    "datetime.timedelta", "datetime.timezone", "pathlib.PosixPath", "pathlib.WindowsPath",
    "pathlib.PurePosixPath", "pathlib.PureWindowsPath", "torch.torch_version.TorchVersion",
    "decimal.Decimal", "fractions.Fraction", "uuid.UUID", "uuid.SafeUUID",
    # torch.distributed.checkpoint's .metadata (read with pickle.load by DCP itself)
    *(f"torch.distributed.checkpoint.metadata.{name}" for name in (
        "Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
        "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING",
    )),
    "torch.distributed.checkpoint.filesystem._StorageInfo",
})  # fmt: skip
"""Harmless to import and call (they build plain values), but outside torch's default allowlist:
the libraries' and formats' own. A framework's argument and hyper-parameter containers are its
layout's to declare (``Layout.harmless``), and reach ``judge`` as the table it is handed
(``Harmless``). Objects a framework's own save code writes (DeepSpeed's loss scaler, mmengine's ``HistoryBuffer``)
are not here: they are harmless only as that framework rebuilds them, so each framework's layout
vouches for them in its own runs (``layouts.content.OwnObjects``), from what the reader reports of
them (``Rebuilt``)."""


@dataclass(frozen=True)
class Harmless:
    """Classes beyond ``KNOWN_BENIGN`` that a caller knows to be harmless to import (the classes
    the frameworks' own saves pickle: their argument and hyper-parameter containers), handed to
    the readers as the table of named files is: a reader names no framework."""

    classes: frozenset[str] = frozenset()
    """Harmless to import and rebuild: a pickle that needs them is CKD402, not CKD401."""
    construct_only: frozenset[str] = frozenset()
    """Those of ``classes`` benign to rebuild (``NEWOBJ`` + ``BUILD`` set fields), not to call:
    calling runs their set-up code (devices, distributed state), so a pickle that calls them is
    unsafe."""


NO_HARMLESS = Harmless()
_HARMLESS: contextvars.ContextVar[Harmless] = contextvars.ContextVar("harmless", default=NO_HARMLESS)
"""The table in force for the file being read (``harmless_known``): set where a file's read
begins (``readers.files``), with the table its caller handed it, and read by ``judge`` in the
format readers below, as the walk budget is (``_unpickler.one_budget``)."""


@contextlib.contextmanager
def harmless_known(table: Harmless | None) -> Iterator[None]:
    """Judge every pickle read inside the block with ``table`` (None: the table already in force)."""
    if table is None:
        yield
        return
    token = _HARMLESS.set(table)
    try:
        yield
    finally:
        _HARMLESS.reset(token)


_GETATTR = "builtins.getattr"
"""Unsafe whatever it looks up: a framework's layout may vouch for the lookups of its own
classes' methods its objects keep (``Rebuilt.methods``)."""


def judge(walk: Walk, where: str, resolved: Callable[[str], bool] | None = None, known: Harmless | None = None) -> list[FileIssue]:
    """The safety findings for one walked pickle; ``where`` names it (``data.pkl``, ``the pickle``).

    A pickle is proven safe only when it was followed, with the unpicklers' own reading of every
    opcode, to its STOP or to a point where every unpickler stops, importing nothing outside the
    allowlists. Anything else is CKD401. ``resolved`` names globals the loader resolves itself,
    without importing anything (TorchScript's own classes). ``known``: the harmless classes
    beyond ``KNOWN_BENIGN`` (the table in force, ``harmless_known``, where not given)."""
    table = known or _HARMLESS.get()
    issues: list[FileIssue] = []
    imported = [
        g
        for g in walk.globals
        if (g.dotted in table.construct_only and walk.used_beyond_construction(g))
        or (g.dotted == _GETATTR and walk.references[g] > walk.discarded[g])
        or (
            g.dotted != _GETATTR
            and g.dotted not in TORCH_WEIGHTS_ONLY
            and g.dotted not in KNOWN_BENIGN
            and g.dotted not in table.classes
            and not (resolved and resolved(g.dotted))
        )
    ]
    imported.sort(key=lambda g: (g.module.split(".")[0] not in NEVER_ALLOWED, not acts(g.dotted)))
    unsafe = [g.dotted for g in imported]
    rebuilt = _rebuilt(walk, imported, where) if unsafe else None
    calling = [g.dotted for g in imported if _calls(walk, g)]
    reasons: list[str] = []
    if unsafe and acts(unsafe[0]):
        reasons.append(f"calls functions that run commands or touch files: it imports {_names(unsafe)}, outside every allowlist")
    elif calling:
        rest = [name for name in unsafe if name not in calling]
        also = f", and imports {_names(rest)}" if rest else ""
        reasons.append(f"calls functions ({_names(calling)}) when loaded{also}, outside every allowlist")
    elif unsafe:
        reasons.append(f"imports {_names(unsafe)}, outside every allowlist")
    if walk.unresolved:
        reasons.append(f"imports a global whose name is only known when it runs ({walk.unresolved[0]})")
    if walk.foreign:
        opcodes = ", ".join(sorted(walk.foreign, key=walk.foreign.__getitem__))
        reasons.append(f"uses opcodes torch never writes ({opcodes}), the way hand-made pickles hide imports from scanners")
    if walk.tricks:
        reasons.append(f"is framed so that parsers disagree: {walk.tricks[0]}")
    if walk.changed:
        names = ", ".join(sorted(g.dotted for g in walk.changed))
        reasons.append(f"changes the class or function {names} itself (BUILD on an import), which later code then runs")
    if walk.persistent:
        reasons.append("asks its loader for objects by persistent id that are not torch storages")
    if len(reasons) == 1 and rebuilt is not None and not acts(unsafe[0]) and not calling:
        # it only rebuilds objects of classes: the user's question is whether they trust its writer
        how = "" if rebuilt.plain else f" (calling {_names(sorted(rebuilt.other))} with what the file holds)"
        issues.append(
            FileIssue(
                Problem.UNSAFE_PICKLE,
                f"{where} rebuilds objects of these classes: {_names(unsafe)}{how}; safe only if you trust whoever wrote it: "
                "loading it imports them and runs their code, which torch.load(weights_only=True) refuses",
                rebuilt=rebuilt,
            )
        )
    elif reasons:
        sole = rebuilt if len(reasons) == 1 else None
        issues.append(FileIssue(Problem.UNSAFE_PICKLE, f"{where} {'; '.join(reasons)}: loading it would run code", rebuilt=sole))
    if walk.unproven:
        issues.append(
            FileIssue(Problem.UNSAFE_PICKLE, f"{where} cannot be proven safe: {walk.unproven}; a loader would read on and run what follows")
        )
    benign = [g.dotted for g in walk.globals if (g.dotted in KNOWN_BENIGN or g.dotted in table.classes) and g.dotted not in unsafe]
    if benign:
        listed = ", ".join(benign)
        issues.append(
            FileIssue(
                Problem.NON_WEIGHTS,
                f"{where} needs {_names(benign)}: known to be harmless, but torch.load(weights_only=True) "
                f"refuses them; load it with torch.serialization.safe_globals([{listed}])",
                tuple(benign),
            )
        )
    if walk.odd:
        issues.append(FileIssue(Problem.MALFORMED, f"{where} cannot be loaded: {walk.odd[0]}"))
    if walk.error:
        found = f"; imports found before that: {_names([g.dotted for g in walk.globals])}" if walk.globals else ""
        problem = Problem.TRUNCATED if walk.truncated else Problem.MALFORMED
        issues.append(FileIssue(problem, f"{where} stops every unpickler: {walk.error}{found}"))
    return issues


def _calls(walk: Walk, symbol: Global) -> bool:
    """Whether the pickle uses ``symbol`` beyond rebuilding objects of a class: a name that is not
    a class's by Python's convention (its last part starts with no capital: a function, called
    with what the file holds, or kept to be called later), an object built from it called or
    given items, or the class itself altered; or any class of Python's standard library beyond the
    allowlists (``logging.FileHandler``, ``zipfile.ZipFile``, ``sqlite3.Connection`` create or
    truncate the path they are given). Fail closed: a capitalised name is no proof of a class, but
    a lower-case one is never taken for one."""
    return (
        not symbol.name.rpartition(".")[2][:1].isupper()
        or symbol.module.partition(".")[0] in sys.stdlib_module_names
        or symbol in walk.misused
        or symbol in walk.changed
    )


def _rebuilt(walk: Walk, unsafe: list[Global], where: str) -> Rebuilt:
    """What the pickle does with the globals that make it unsafe: those it only uses to rebuild
    plain objects or enum members of their class (``getattr`` only looking up names on them, its
    results kept, never called), and the others (``Rebuilt.other``)."""
    other = [
        symbol
        for symbol in unsafe
        if (
            (walk.lookups_called or walk.references[symbol] != sum(walk.lookups.values()))
            if symbol.dotted == _GETATTR
            else not walk.only_rebuilt(symbol)
        )
    ]
    plain = [g for g in unsafe if g not in other]
    return Rebuilt(
        where,
        frozenset(g.dotted for g in plain if walk.instantiated[g]),
        frozenset(g.dotted for g in plain if walk.by_value[g]),
        frozenset(f"{cls.dotted}.{name}" for cls, name in walk.lookups),
        frozenset(g.dotted for g in plain if walk.called_empty[g]),
        frozenset(g.dotted for g in other),
    )


def _names(names: Iterable[str], limit: int = 5) -> str:
    listed = list(names)
    shown = ", ".join(listed[:limit])
    return f"{shown} and {len(listed) - limit} more" if len(listed) > limit else shown


def weights_only_refusal(walk: Walk, where: str) -> list[FileIssue]:
    """CKD402 for a pickle ``torch.load(weights_only=True)`` reads with opcodes its unpickler
    refuses (``pickle_protocol=4`` writes ``FRAME``): safe, if ``judge`` says so, but not loadable
    the way torch loads by default."""
    if not walk.beyond_weights_only or walk.error or walk.unproven:
        return []
    opcodes = ", ".join(sorted(walk.beyond_weights_only))
    return [
        FileIssue(
            Problem.NON_WEIGHTS,
            f"{where} uses pickle opcodes ({opcodes}) that torch.load(weights_only=True) refuses "
            '("Unsupported operand"): it was saved with a pickle_protocol above 2. Load it with weights_only=False '
            "only once verify finds it safe, or save it again with torch.save's default protocol",
        )
    ]
