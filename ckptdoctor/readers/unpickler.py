"""A pickle machine that follows a pickle's opcodes to learn its shape, and never runs it.

``_opcodes.read`` parses, the way the real unpicklers do. On top of it this module keeps a
symbolic stack and memo,
so that a torch ``data.pkl`` yields its tensors (name, dtype, shape, storage, device) and any
pickle yields every global it would import: by ``GLOBAL`` and ``INST``, by ``STACK_GLOBAL``
however its strings were shuffled through the memo, or by an extension code. Nothing is
imported or called: a global is a pair of strings, a call is a node that remembers its parts.
Whatever cannot be followed statically is reported as such, never guessed.

The machine is linear in its input: values shared through the memo are references, never copied
or rendered, and every walk runs within a :class:`Budget` of opcodes and seconds; a pickle that
needs more is *unproven*, which is itself a finding.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ckptdoctor import bundles
from ckptdoctor.readers import _opcodes
from ckptdoctor.readers.dtypes import TORCH_SIZES, TORCH_STORAGES

_NEVER_PICKLED = frozenset({
    "INST", "OBJ", "EXT1", "EXT2", "EXT4", "NEXT_BUFFER", "READONLY_BUFFER", "DUP", "STRING",
    "BINSTRING", "SHORT_BINSTRING",
})  # fmt: skip
"""Opcodes CPython 3's pickler never writes without a ``buffer_callback`` or a copyreg extension
registry (torch.save passes neither): old-style instances, extension codes, out-of-band buffers,
``DUP``, and Python 2 byte strings."""
TORCH_OPCODES = _opcodes.OPCODE_NAMES - _NEVER_PICKLED
"""The opcodes ``torch.save`` can write, at any ``pickle_protocol`` it accepts (0-5): a pickle
with any other is hand-made."""


WEIGHTS_ONLY_OPCODES = frozenset({
    "PROTO", "STOP", "GLOBAL", "NEWOBJ", "REDUCE", "BUILD", "APPEND", "APPENDS", "SETITEM", "SETITEMS",
    "MARK", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE", "NEWFALSE", "NEWTRUE", "EMPTY_TUPLE",
    "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "BININT", "BININT1", "BININT2", "BINFLOAT", "BINUNICODE",
    "SHORT_BINSTRING", "BINPERSID", "BINGET", "LONG_BINGET", "BINPUT", "LONG_BINPUT", "LONG1",
})  # fmt: skip
"""The opcodes ``torch.load(weights_only=True)`` reads (``torch/_weights_only_unpickler.py``,
``Unpickler.load``, torch 2.13): any other stops it with ``Unsupported operand``. The default
``pickle_protocol=2`` writes no other; protocols 4 and 5 add ``FRAME`` and ``MEMOIZE``."""


class Global(NamedTuple):
    """An import the pickle asks for: ``module`` and ``name`` exactly as written."""

    module: str
    name: str

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.name}"


class Storage(NamedTuple):
    """A torch storage named by a persistent id: ``('storage', type, key, location, numel)``."""

    dtype: str | None
    """None for ``UntypedStorage`` (counted in bytes; the tensor names its dtype); for a class that
    is no torch storage, its dotted name (which no dtype table knows)."""
    key: str
    location: str
    numel: int


class TensorRef(NamedTuple):
    """A tensor rebuilt from a storage: what ``torch._utils._rebuild_tensor*`` would be given."""

    storage: Storage | None
    """None for tensors saved without data (``meta``)."""
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str


class Call(NamedTuple):
    """The result of calling something the machine does not model: only its parts are kept."""

    func: object
    args: object


class Opaque(NamedTuple):
    """A value the machine cannot know (out-of-band buffers, an unrecognised persistent id)."""

    what: str


@dataclass
class Walk:
    """What following one pickle found."""

    root: object = None
    globals: list[Global] = field(default_factory=list)
    """Every global the pickle imports, in order of first appearance."""
    unresolved: list[str] = field(default_factory=list)
    """Imports whose name is computed or hidden, described; each is unsafe."""
    foreign: dict[str, int] = field(default_factory=dict)
    """Opcodes outside the allowed set, with the position of the first of each."""
    beyond_weights_only: set[str] = field(default_factory=set)
    """Opcodes torch's ``weights_only`` unpickler refuses (``FRAME`` of ``pickle_protocol=4``)."""
    tricks: list[str] = field(default_factory=list)
    """Things that make parsers disagree: an opcode straddling a frame's end, an argument the C and
    the pure-Python unpickler read differently."""
    error: str | None = None
    """Why the walk stopped before STOP where every unpickler stops too, if it did."""
    truncated: bool = False
    """The stream ends before its STOP: the save was cut short (``error`` says where)."""
    unproven: str | None = None
    """Why the walk gave up where a loader would read on (too complex, too large, not understood):
    nothing after that point is proven, which is unsafe."""
    end: int = 0
    """Offset just past the STOP opcode (where a following pickle would start)."""
    persistent: list[object] = field(default_factory=list)
    """Persistent ids that are not torch storages."""
    storages: list[Storage] = field(default_factory=list)
    """Every storage the pickle names by persistent id, tensors' or not."""
    odd: list[str] = field(default_factory=list)
    """Things a real unpickler would fail on that do not stop the walk (an unhashable key)."""
    references: Counter[Global] = field(default_factory=Counter)
    """How often each global is put on the stack (imported, read back from the memo, duplicated)."""
    constructed: Counter[Global] = field(default_factory=Counter)
    """How often each global is only instantiated (``NEWOBJ``, ``copyreg._reconstructor`` of
    ``object``) with its fields set afterwards, rather than called with arguments."""
    instantiated: Counter[Global] = field(default_factory=Counter)
    """Of those, how often with no argument at all (``NEWOBJ`` of ``()``): ``cls.__new__(cls)``,
    how pickle writes a plain object."""
    by_value: Counter[Global] = field(default_factory=Counter)
    """How often each global is called with one literal (``REDUCE`` of ``(2,)``): how pickle
    writes an enum member."""
    called_empty: Counter[Global] = field(default_factory=Counter)
    """How often each global is called with no argument (``REDUCE`` of ``()``), its fields set
    afterwards, if at all, by ``BUILD``: how a ``types.SimpleNamespace`` pickles itself (its
    ``__reduce__`` is ``(type(self), (), vars(self))``)."""
    misused: set[Global] = field(default_factory=set)
    """Globals an object built from which is itself called, given items (``APPEND``, ``SETITEM``,
    ``ADDITEMS``: its own ``append``, ``__setitem__`` or ``add`` would run), or, built from one
    literal, given fields (``BUILD``): beyond rebuilding a plain object or an enum member."""
    discarded: Counter[Global] = field(default_factory=Counter)
    """How often a reference to each global is popped unused (``POP``)."""
    changed: set[Global] = field(default_factory=set)
    """Globals that BUILD sets attributes on: the class or function itself is altered."""
    states: dict[int, tuple[object, object]] = field(default_factory=dict)
    """What BUILD gave each object the machine does not model, by id (kept with its object)."""
    lookups: Counter[tuple[Global, str]] = field(default_factory=Counter)
    """How often ``builtins.getattr`` is called on an imported class with a constant name
    (``getattr(HistoryBuffer, "min")``), by class and name."""
    lookups_called: int = 0
    """How often the result of such a lookup is itself called (the method run, not kept)."""

    def state(self, value: object) -> object:
        """The BUILD state of a built object (a dataclass's fields), or None."""
        entry = self.states.get(id(value))
        return entry[1] if entry is not None and entry[0] is value else None

    def absorb(self, other: Walk) -> None:
        """Add what a pickle nested in this one found (joblib's arrays of objects)."""
        self.globals += [g for g in other.globals if g not in self.globals]
        self.unresolved += other.unresolved
        self.tricks += other.tricks
        self.persistent += other.persistent
        self.odd += other.odd
        self.references.update(other.references)
        self.constructed.update(other.constructed)
        self.instantiated.update(other.instantiated)
        self.by_value.update(other.by_value)
        self.called_empty.update(other.called_empty)
        self.misused |= other.misused
        self.discarded.update(other.discarded)
        self.changed |= other.changed
        self.lookups.update(other.lookups)
        self.lookups_called += other.lookups_called
        for name, position in other.foreign.items():
            self.foreign.setdefault(name, position)
        self.beyond_weights_only |= other.beyond_weights_only

    def used_beyond_construction(self, symbol: Global) -> bool:
        """Whether some reference to ``symbol`` is called, passed, stored or returned rather than
        only instantiated: set-up classes are benign only when rebuilt field by field."""
        return self.references[symbol] > self.constructed[symbol] + self.discarded[symbol]

    def only_rebuilt(self, symbol: Global) -> bool:
        """Whether every reference to ``symbol`` rebuilds a plain object of it (``cls.__new__(cls)``,
        or ``cls()``, its fields set afterwards), rebuilds an enum member (``cls(literal)``) or is
        looked up on for a name (``getattr(cls, "min")``, kept, not called), and nothing else
        touches it."""
        looked_up = sum(count for (cls, _), count in self.lookups.items() if cls == symbol)
        rebuilt = self.instantiated[symbol] + self.called_empty[symbol] + self.by_value[symbol] + looked_up
        return symbol not in self.misused and symbol not in self.changed and self.references[symbol] == rebuilt


_FILE_STEPS = 50_000_000
_FILE_INFLATED = 32 * 1024 * 1024
"""One file's opcodes and decompressed bytes (``Budget``'s defaults)."""


class Budget:
    """Opcodes, decompressed bytes and seconds that one file's pickles and archive members may
    take together; past any of them, what is left is unproven (an error-level finding naming the
    budget: the file could not be fully checked). A budget may have a ``parent`` (a run's, whose
    parent is the command's): every spend is charged up the chain, so that many files each just
    under a file's budget still end."""

    def __init__(
        self,
        steps: int = _FILE_STEPS,
        seconds: float = 30.0,
        *,
        inflated: int = _FILE_INFLATED,
        parent: Budget | None = None,
        scope: str = "one file",
        most_stopped: int | None = None,
    ) -> None:
        self.steps = steps
        self.inflated = inflated
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.parent = parent
        self.scope = scope
        self._limits = (steps, inflated)
        self.stopped = 0
        """Files charged here that went past a limit."""
        self.counted = False
        self.most_stopped = most_stopped
        """After that many, nothing more charged here is followed: real files never reach a limit,
        and a folder of small bombs, each stopped at its own limit, would still cost a fraction
        of a second apiece."""

    @classmethod
    def for_command(cls) -> Budget:
        """A whole command's: a hundred files' worth, with no clock (a big run takes its time)."""
        return cls(100 * _FILE_STEPS, math.inf, inflated=100 * _FILE_INFLATED, scope="one command", most_stopped=10)

    def for_run(self) -> Budget:
        """A run's share of this (the command's) budget: twenty files' worth."""
        return Budget(20 * _FILE_STEPS, math.inf, inflated=20 * _FILE_INFLATED, parent=self, scope="one run", most_stopped=3)

    def for_file(self) -> Budget:
        """One file's, charged to this one too."""
        return Budget(parent=self)

    def spend(self, steps: int) -> None:
        """Charge ``steps`` opcodes followed."""
        for budget in self._chain():
            budget.steps -= steps
        self._check()

    def inflate(self, count: int) -> None:
        """Charge ``count`` bytes decompressed from an archive member or a compressed stream."""
        for budget in self._chain():
            budget.inflated -= count
        self._check()

    def _check(self) -> None:
        chain = list(self._chain())
        try:
            for budget in chain:
                budget._within()
        except OverBudget:
            # the file under the first budget that counts stopped files is counted there, once
            for file, counting in itertools.pairwise(chain):
                if counting.most_stopped is not None:
                    if not file.counted:
                        file.counted = True
                        for budget in counting._chain():
                            budget.stopped += 1
                    break
            raise

    def _within(self) -> None:
        if self.most_stopped is not None and self.stopped >= self.most_stopped:
            raise OverBudget(
                f"{self.stopped} files of {self.scope} already went past ckptdoctor's limits (bombs, or too complex to "
                "prove safe): it follows no more of them, so this one could not be fully checked"
            )
        if self.steps < 0:
            raise OverBudget(
                f"it needs more opcodes than the {self._limits[0]:,} ckptdoctor follows in {self.scope}: "
                "too complex to prove safe, it could not be fully checked"
            )
        if self.inflated < 0:
            raise OverBudget(
                f"it decompresses past the {self._limits[1]:,} bytes ckptdoctor decompresses in {self.scope}: it could not be fully checked"
            )
        if time.monotonic() > self.deadline:
            raise OverBudget(
                f"following it takes more than the {self.seconds:g} s ckptdoctor spends on {self.scope}: "
                "too complex to prove safe, it could not be fully checked"
            )

    def _chain(self) -> Iterator[Budget]:
        budget: Budget | None = self
        while budget is not None:
            yield budget
            budget = budget.parent


def file_budget() -> Budget:
    """A fresh budget for one file, charged to the budget in force (a run's, in ``verify``)."""
    outer = _BUDGET.get()
    return outer.for_file() if outer is not None else Budget()


def current_budget() -> Budget:
    """The budget in force (see ``one_budget``), or a fresh one."""
    return _BUDGET.get() or Budget()


_BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("budget", default=None)


@contextlib.contextmanager
def one_budget(budget: Budget | None = None) -> Iterator[Budget]:
    """Every walk inside shares one budget: all the pickles of one file. Without ``budget``, the
    budget already in force (a member of a file shares the file's), or else a fresh one."""
    shared = budget or _BUDGET.get() or Budget()
    token = _BUDGET.set(shared)
    try:
        yield shared
    finally:
        _BUDGET.reset(token)


_CHECK_EVERY = 4096
"""Opcodes between two looks at the clock."""


_PUSH_ARG = frozenset({
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "BINUNICODE8",
    "SHORT_BINUNICODE", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8",
})  # fmt: skip
_CONSTANTS: dict[str, Callable[[], object]] = {
    "NONE": lambda: None,
    "NEWTRUE": lambda: True,
    "NEWFALSE": lambda: False,
    "EMPTY_TUPLE": tuple,
    "EMPTY_LIST": list,
    "EMPTY_DICT": dict,
    "EMPTY_SET": list,
}
_REBUILD_TENSOR = frozenset({"_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_qtensor"})
_REBUILD_PARAMETER = frozenset({"_rebuild_parameter", "_rebuild_parameter_with_state"})
_RECONSTRUCTOR = Global("copyreg", "_reconstructor")
_OBJECT = Global("builtins", "object")
_GETATTR = Global("builtins", "getattr")


def walk(
    data: bytes,
    start: int = 0,
    opcodes: frozenset[str] | None = None,
    budget: Budget | None = None,
    arrays: bool = False,
    objects_end: bool = False,
) -> Walk:
    """Follow the pickle that starts at ``start``; ``opcodes``, if given, is the allowed set.
    ``arrays``: read it as joblib does, whose ``NumpyArrayWrapper`` is followed in the stream by
    the array's raw bytes, or by a pickle of its objects. ``objects_end``: read it as
    ``pickle.load`` does, but only up to a joblib array of objects, whose own pickle ``pickle.load``
    would then run against the outer pickle's memo (on real files, importing a module named
    after joblib's wrapper, and failing)."""
    machine = _Machine(opcodes)
    budget = budget or _BUDGET.get() or Budget()
    result = machine.result
    position: int | None = start
    steps = 0
    try:
        budget.spend(0)  # nothing is followed once the run's budget stopped following its files
        while position is not None:
            resume_at, position = position, None
            for op in _opcodes.read(data, resume_at):
                position = op.position
                if op.note:
                    result.tricks.append(f"an argument loaders read differently: {op.note}")
                machine.step(op.name, op.arg, op.position, op.end)
                steps += 1
                if steps == _CHECK_EVERY:
                    budget.spend(steps)
                    steps = 0
                if op.name == "BUILD" and (arrays or objects_end) and (payload := _payload(machine, arrays)) is not None:
                    if not arrays:
                        if payload.nbytes is None:
                            result.end = op.end
                            return result
                        continue
                    position = _skip_array(data, op.end, payload, machine, budget)
                    break
            else:
                position = None
        budget.spend(steps)
    except _opcodes.StreamEnd as end:
        if end.imported:
            machine.push_import(*end.imported)
        result.error = f"{end} (at byte {end.position})"
        result.truncated = end.truncated
        line_end = data.find(b"\n", end.position)
        if end.position < machine.frame_end and (line_end < 0 or line_end >= machine.frame_end):
            # CPython's C unpickler reads a line that crosses its frame's end from past the frame
            # (`I` + `1e` | `999\n` is 999 to it): where this walk stops, a loader may read on
            result.tricks.append(f"an opcode at byte {end.position} runs past the end of its frame ({machine.frame_end})")
    except _Stop as stop:
        result.error = f"{stop} (at byte {position})"
    except _opcodes.Unproven as unproven:
        result.unproven = str(unproven)
    except _Unproven as unproven:
        result.unproven = f"{unproven} (at byte {position})"
    except (RecursionError, MemoryError) as error:
        result.unproven = f"it is too complex to follow near byte {position} ({type(error).__name__})"
    except Exception as error:  # a shape the machine does not model: unknown, so unproven
        result.unproven = f"ckptdoctor cannot follow it near byte {position} ({type(error).__name__}: {error})"
    return result


_FIRST_LOOK = 64 * 1024
"""Bytes of a streamed pickle walked first; four times as many each time the walk runs out."""


def walk_chunks(chunks: Iterable[bytes], start: int = 0, opcodes: frozenset[str] | None = None) -> Walk:
    """Follow a pickle whose bytes arrive in chunks (an archive member as it inflates), taking no
    more of them than its STOP needs: the walk is tried on what has arrived, then on four times
    as much while it runs out before its end (the walks again cost a third more opcodes at most).
    Where the budget in force stops the chunks (``OverBudget``), what arrived is walked and the
    rest is unproven, saying which budget."""
    source = iter(chunks)
    buffer = bytearray()
    wanted = _FIRST_LOOK
    ended: str | None = None
    while True:
        try:
            while len(buffer) < wanted and ended is None:
                chunk = next(source, None)
                if chunk is None:
                    ended = ""
                else:
                    buffer += chunk
        except OverBudget as spent:
            ended = str(spent)
        walked = walk(bytes(buffer), start, opcodes)
        if ended is not None or not walked.truncated:
            if ended and walked.truncated:
                walked.error, walked.truncated, walked.unproven = None, False, f"{ended} (at byte {len(buffer)})"
            return walked
        wanted *= 4


JOBLIB_WRAPPERS = frozenset(
    {Global("joblib.numpy_pickle", "NumpyArrayWrapper"), Global("sklearn.externals.joblib.numpy_pickle", "NumpyArrayWrapper")}
)


class ArrayPayload(NamedTuple):
    """What joblib reads after a ``NumpyArrayWrapper``: ``nbytes`` raw bytes (after a padding
    byte and padding when ``aligned``), or, for an array of objects, a pickle (``nbytes`` None)."""

    nbytes: int | None
    aligned: bool


def joblib_payload(top: object, states: dict[int, tuple[object, object]]) -> ArrayPayload | None:
    """The payload behind a just-built ``NumpyArrayWrapper``; None when ``top`` is not one.
    Raises :class:`_Unproven` for a wrapper whose size is only known when it runs."""
    if not (isinstance(top, Call) and top.func in JOBLIB_WRAPPERS):
        return None
    state = states.get(id(top), (None, None))[1]
    if not isinstance(state, dict):
        raise _Unproven("a joblib array wrapper without a literal state")
    shape, dtype = state.get("shape"), state.get("dtype")
    if not (isinstance(shape, tuple) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise _Unproven("a joblib array wrapper whose shape is not literal")
    alignment = state.get("numpy_array_alignment_bytes")
    itemsize = _dtype_itemsize(dtype, states)
    if itemsize is None:
        return ArrayPayload(None, False)
    count = 1
    for dimension in shape:
        count *= dimension
    return ArrayPayload(count * itemsize, alignment is not None)


def _payload(machine: _Machine, strict: bool) -> ArrayPayload | None:
    """The payload behind a just-built joblib wrapper; a wrapper joblib's reading cannot size is
    unproven when reading as joblib, and no wrapper at all when reading as ``pickle.load``."""
    try:
        return joblib_payload(machine.stack[-1], machine.states)
    except _Unproven:
        if strict:
            raise
        return None


def _dtype_itemsize(dtype: object, states: dict[int, tuple[object, object]]) -> int | None:
    """Bytes per element of a pickled ``numpy.dtype``; None for objects (joblib then pickles them).
    Its BUILD state can resize or restructure it (``__setstate__``): only a state that leaves the
    dtype as its name says is followed."""
    if not (
        isinstance(dtype, Call)
        and dtype.func == Global("numpy", "dtype")
        and isinstance(dtype.args, tuple)
        and dtype.args
        and isinstance(dtype.args[0], str)
    ):
        raise _Unproven("a joblib array wrapper whose dtype is not a literal numpy.dtype")
    # imported when a file needs it: start-up stays lean
    import numpy

    try:
        named = numpy.dtype(dtype.args[0])
    except (TypeError, ValueError) as error:
        raise _Unproven(f"a joblib array wrapper of dtype {dtype.args[0][:40]!r}") from error
    state = states.get(id(dtype), (None, None))[1]
    itemsize = int(named.itemsize)
    if isinstance(state, tuple) and len(state) in (8, 9) and (state[3] is not None or state[4] is not None):
        return _record_itemsize(named, state, states)
    if state is not None:
        if not (isinstance(state, tuple) and len(state) in (8, 9) and state[2:5] == (None, None, None) and isinstance(state[5], int)):
            raise _Unproven("a joblib array wrapper whose dtype's state restructures it")
        if state[7] != named.flags:
            raise _Unproven("a joblib array wrapper whose dtype's state changes its flags")
        if itemsize == 0 and state[5] > 0:
            itemsize = state[5]  # flexible dtypes ('U', 'S', 'V') carry their size in the state
        elif state[5] not in (-1, itemsize):
            raise _Unproven("a joblib array wrapper whose dtype's state resizes it")
    if named.hasobject:
        return None
    return itemsize


def _record_itemsize(named: Any, state: tuple[Any, ...], states: dict[int, tuple[object, object]]) -> int | None:
    """A structured dtype (``V<n>`` with named fields): ``n`` bytes per record, or None when a field
    holds objects; the fields and the state's object flag must agree, as numpy trusts the flag."""
    names, fields, elsize, flags = state[3], state[4], state[5], state[7]
    if not (
        named.kind == "V" and state[2] is None and isinstance(names, tuple) and isinstance(fields, dict)
        and elsize == named.itemsize and isinstance(flags, int) and not isinstance(flags, bool)
        and all(isinstance(field, tuple) and len(field) in (2, 3) and isinstance(field[1], int) for field in fields.values())
    ):  # fmt: skip
        raise _Unproven("a joblib array wrapper whose structured dtype is not literal")
    objects = any(_dtype_itemsize(field[0], states) is None for field in fields.values())
    if objects != bool(flags & 1):  # NPY_ITEM_REFCOUNT: numpy decides "holds objects" by it
        raise _Unproven("a joblib array wrapper whose structured dtype's flags contradict its fields")
    return None if objects else int(elsize)


def _skip_array(data: bytes, position: int, payload: ArrayPayload, machine: _Machine, budget: Budget) -> int:
    """Where the pickle goes on after what joblib reads behind an array wrapper: raw bytes are
    skipped, a pickle of objects is walked (and judged with the rest)."""
    if payload.nbytes is None:
        nested = walk(data, position, None, budget)
        machine.result.absorb(nested)
        if nested.error:
            raise _Stop(f"the objects of a joblib array stop: {nested.error}")
        if nested.unproven:
            raise _Unproven(f"the objects of a joblib array: {nested.unproven}")
        position = nested.end
    else:
        if payload.aligned:
            if position >= len(data):
                raise _opcodes.StreamEnd("the stream ends before an array's padding", position, truncated=True)
            position += 1 + data[position]
        position += payload.nbytes
        if position > len(data):
            raise _opcodes.StreamEnd("the stream ends inside an array's bytes", position, truncated=True)
    machine.stack[-1] = Opaque("joblib array")
    return position


class _Stop(Exception):
    """The pickle asks for something every real unpickler fails on: loading stops here too."""


class _Unproven(Exception):
    """The walk cannot go on, though a loader might."""


class OverBudget(_Unproven):
    """A budget is spent (its message names which): what is left of the file is not checked."""


class _Machine:
    def __init__(self, opcodes: frozenset[str] | None) -> None:
        self.allowed = opcodes
        self.result = Walk()
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.seen: set[Global] = set()
        self.frame_end = -1
        self.protocol = 0
        """The last PROTO's number: below 3, loaders map Python 2 names to Python 3 ones."""
        self.states = self.result.states

    def step(self, name: str, arg: Any, position: int, after: int) -> None:
        result = self.result
        if self.allowed is not None and name not in self.allowed and name not in result.foreign:
            result.foreign[name] = position
        if name not in WEIGHTS_ONLY_OPCODES:
            result.beyond_weights_only.add(name)
        if position < self.frame_end < after:
            result.tricks.append(f"an opcode at byte {position} runs past the end of its frame ({self.frame_end})")
        stack = self.stack
        if name in _PUSH_ARG:
            stack.append(arg)
        elif name in _CONSTANTS:
            stack.append(_CONSTANTS[name]())
        elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
            self.memo[arg] = self._top()
        elif name in ("BINGET", "LONG_BINGET", "GET"):
            if arg not in self.memo:
                raise _Stop(f"memo value {arg} is read before it is written")
            self._push_value(self.memo[arg])
        elif name == "MEMOIZE":
            self.memo[len(self.memo)] = self._top()
        elif name == "MARK":
            self.marks.append(stack)
            self.stack = []
        elif name == "STOP":
            result.root = self._pop()
            result.end = after
            if self.frame_end > after:
                # pickle ends a frame at its STOP; a loader reading a file has read the frame to its end,
                # so the next read (torch's legacy format: the next pickle) starts there, not here
                result.tricks.append(f"the frame around the STOP at byte {position} runs on to byte {self.frame_end}")
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            count = int(name[-1])
            items = tuple(stack[-count:])
            if len(items) != count:
                raise _Stop("a tuple opcode finds too few items on the stack")
            del stack[-count:]
            stack.append(items)
        else:
            self._structural(name, arg, position, after)

    def push_import(self, module: str, attribute: str) -> None:
        self._push_value(self._import(module, attribute))

    def _push_value(self, value: object) -> None:
        if isinstance(value, Global):
            self.result.references[value] += 1
        self.stack.append(value)

    def _structural(self, name: str, arg: Any, position: int, after: int) -> None:
        if name == "GLOBAL":
            module, _, attribute = str(arg).partition(" ")
            self.push_import(module, attribute)
        elif name == "STACK_GLOBAL":
            attribute, module = self._pop(), self._pop()
            if isinstance(module, str) and isinstance(attribute, str):
                self.push_import(module, attribute)
            else:
                self.stack.append(self._hidden(f"STACK_GLOBAL with a computed name at byte {position}"))
        elif name == "INST":
            module, _, attribute = str(arg).partition(" ")
            cls = self._import(module, attribute)
            self.result.references[cls] += 1
            self.stack.append(_call(cls, tuple(self._pop_mark())))
        elif name == "OBJ":
            items = self._pop_mark()
            if not items:
                raise _Stop("OBJ without a class")
            self._called(items[0])
            self.stack.append(_call(items[0], tuple(items[1:])))
        elif name in ("REDUCE", "NEWOBJ"):
            args = self._pop()
            func = self._pop()
            if name == "NEWOBJ" and isinstance(func, Global):
                self._constructed(func, args == ())
            elif (
                func == _RECONSTRUCTOR and isinstance(args, tuple) and len(args) == 3 and args[1] == _OBJECT and isinstance(args[0], Global)
            ):
                self._constructed(args[0], True)  # copyreg's protocol 0-1 NEWOBJ: object.__new__(cls)
            elif (
                func == _GETATTR and isinstance(args, tuple) and len(args) == 2 and isinstance(args[0], Global) and isinstance(args[1], str)
            ):
                self.result.lookups[args[0], args[1]] += 1
            elif isinstance(func, Call) and func.func == _GETATTR:
                self.result.lookups_called += 1
            elif name == "REDUCE" and isinstance(func, Global) and _by_value(args):
                self.result.by_value[func] += 1
            elif name == "REDUCE" and isinstance(func, Global) and args == ():
                self.result.called_empty[func] += 1
            self._called(func)
            self.stack.append(_call(func, args))
        elif name == "NEWOBJ_EX":
            kwargs = self._pop()
            args = self._pop()
            cls = self._pop()
            if isinstance(cls, Global):
                self._constructed(cls, args == () and kwargs == {})
            self._called(cls)
            self.stack.append(_call(cls, args))
        elif name == "BUILD":
            state = self._pop()
            target = self._top()
            if isinstance(target, Global):
                self.result.changed.add(target)
            elif isinstance(target, Call):
                self.states[id(target)] = (target, state)
                if isinstance(target.func, Global) and _by_value(target.args):
                    self.result.misused.add(target.func)  # an enum member is a shared singleton: never given fields
        elif name in ("EXT1", "EXT2", "EXT4"):
            self.stack.append(self._hidden(f"an import by extension code {arg} at byte {position}"))
        elif name in ("BINPERSID", "PERSID"):
            pid = self._pop() if name == "BINPERSID" else arg
            self.stack.append(self._persistent(pid))
        else:
            self._containers(name, arg, position, after)

    def _containers(self, name: str, arg: Any, position: int, after: int) -> None:
        if name in ("TUPLE", "LIST", "DICT", "FROZENSET"):
            items = self._pop_mark()  # replaces self.stack: push only after it
            self.stack.append(tuple(items) if name == "TUPLE" else _pairs_to_dict(items) if name == "DICT" else items)
            return
        stack = self.stack
        if name == "APPEND":
            value = self._pop()
            target = self._given_items()
            if isinstance(target, list):
                target.append(value)
        elif name in ("APPENDS", "ADDITEMS"):
            items = self._pop_mark()
            target = self._given_items()
            if isinstance(target, list):
                target.extend(items)
        elif name == "SETITEM":
            value, key = self._pop(), self._pop()
            _set_item(self._given_items(), key, value, self.result.odd)
        elif name == "SETITEMS":
            items = self._pop_mark()
            target = self._given_items()
            for key, value in zip(items[::2], items[1::2], strict=False):
                _set_item(target, key, value, self.result.odd)
        elif name == "POP":
            if stack:
                self._discard([stack.pop()])
            else:
                self._pop_mark()
        elif name == "POP_MARK":
            self._discard(self._pop_mark())
        elif name == "DUP":
            self._push_value(self._top())
        elif name == "FRAME":
            if position < self.frame_end:
                # pickle never writes one; CPython's C unpickler reading a file drops the rest of the open
                # frame and reads the new one from the file, so it runs bytes this walk reads as data
                self.result.tricks.append(f"a frame begins at byte {position}, inside the frame that ends at byte {self.frame_end}")
            self.frame_end = after + int(arg)
        elif name in ("NEXT_BUFFER", "READONLY_BUFFER"):
            stack.append(Opaque("out-of-band buffer"))
        elif name == "PROTO":
            self.protocol = int(arg)
        else:
            raise _Unproven(f"opcode {name} is not modelled")

    def _constructed(self, cls: Global, plain: bool) -> None:
        self.result.constructed[cls] += 1
        if plain:
            self.result.instantiated[cls] += 1

    def _called(self, func: object) -> None:
        """An object built from a global, called in turn (a module's ``__call__``, a class's
        instance as a callable): that global is used beyond rebuilding."""
        if isinstance(func, Call) and isinstance(func.func, Global):
            self.result.misused.add(func.func)

    def _given_items(self) -> Any:
        """The object ``APPEND``, ``SETITEM`` and their kin fill: where it was built from a global,
        the unpickler calls that object's own ``append``, ``extend``, ``__setitem__`` or ``add``."""
        target = self._top()
        if isinstance(target, Call) and isinstance(target.func, Global):
            self.result.misused.add(target.func)
        return target

    def _discard(self, items: list[Any]) -> None:
        for item in items:
            if isinstance(item, Global):
                self.result.discarded[item] += 1

    def _import(self, module: str, attribute: str) -> Global:
        symbol = _python3_name(module, attribute) if self.protocol < 3 else Global(module, attribute)
        if symbol not in self.seen:
            self.seen.add(symbol)
            self.result.globals.append(symbol)
        return symbol

    def _hidden(self, why: str) -> Opaque:
        self.result.unresolved.append(why)
        return Opaque(why)

    def _persistent(self, pid: object) -> object:
        if isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage":
            kind, key, location, numel = pid[1:5]
            plain = isinstance(key, (str, int)) and not isinstance(key, bool) and isinstance(location, str)
            if plain and isinstance(kind, Global) and isinstance(numel, int) and not isinstance(numel, bool):
                untyped = kind.name == "UntypedStorage"
                storage = Storage(None if untyped else TORCH_STORAGES.get(kind.name, kind.dotted), str(key), location, numel)
                self.result.storages.append(storage)
                return storage
        self.result.persistent.append(pid)
        return Opaque("persistent id")

    def _top(self) -> Any:
        if not self.stack:
            raise _Stop("the stack is empty")
        return self.stack[-1]

    def _pop(self) -> Any:
        if not self.stack:
            raise _Stop("the stack is empty")
        return self.stack.pop()

    def _pop_mark(self) -> list[Any]:
        if not self.marks:
            raise _Stop("a MARK is missing")
        items = self.stack
        self.stack = self.marks.pop()
        return items


def _python3_name(module: str, attribute: str) -> Global:
    """The name Python 3's unpickler imports for a Python 2 one (``__builtin__ set`` is
    ``builtins.set``): pickle maps them for protocols below 3 (torch writes 2), never above."""
    # imported when a file needs it: start-up stays lean
    import _compat_pickle

    if (module, attribute) in _compat_pickle.NAME_MAPPING:
        module, attribute = _compat_pickle.NAME_MAPPING[(module, attribute)]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    return Global(module, attribute)


def _call(func: object, args: object) -> object:
    """What calling ``func`` yields, for the few torch and stdlib callables that rebuild data."""
    if not isinstance(func, Global) or not isinstance(args, tuple):
        return Call(func, args)
    module, name = func
    if module == "torch._utils":
        if name in _REBUILD_TENSOR:
            return _tensor(name, args) or Call(func, args)
        if name in _REBUILD_PARAMETER and args:
            return args[0]
        if name == "_rebuild_meta_tensor_no_storage" and len(args) >= 3 and isinstance(args[0], Global):
            return TensorRef(None, 0, _ints(args[1]), _ints(args[2]), args[0].name)
    elif module == "torch._tensor" and name == "_rebuild_from_type_v2" and len(args) >= 3:
        return _call(args[0], args[2]) if isinstance(args[2], tuple) else Call(func, args)
    elif (module, name) == ("collections", "OrderedDict"):
        return _pairs_to_dict([item for pair in args[0] for item in pair]) if args and isinstance(args[0], list) else {}
    elif (module, name) == ("torch", "Size") and args and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    elif (module, name) == ("torch", "device") and all(isinstance(part, (str, int)) for part in args):
        return ":".join(str(part) for part in args)
    return Call(func, args)


def _by_value(args: object) -> bool:
    """Whether ``args`` are one literal: how pickle calls an enum to get its member back."""
    return isinstance(args, tuple) and len(args) == 1 and type(args[0]) in (int, float, str, bytes, bool, type(None))


def _tensor(name: str, args: tuple[Any, ...]) -> TensorRef | None:
    if len(args) < 4 or not isinstance(args[0], Storage):
        return None
    storage = args[0]
    dtype = storage.dtype
    if name == "_rebuild_tensor_v3" and len(args) >= 7 and isinstance(args[6], Global):
        dtype = args[6].name
    if dtype is None or not isinstance(args[1], int):
        return None
    return TensorRef(storage, args[1], _ints(args[2]), _ints(args[3]), dtype)


def _ints(value: object) -> tuple[int, ...]:
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return ()


def _pairs_to_dict(items: list[Any]) -> dict[Any, Any]:
    result: dict[Any, Any] = {}
    for key, value in zip(items[::2], items[1::2], strict=False):
        _set_item(result, key, value)
    return result


_KEY_TYPES = (str, int, float, bytes, bool, type(None))


def _set_item(target: object, key: object, value: object, odd: list[str] | None = None) -> None:
    if isinstance(target, dict):
        if not isinstance(key, _KEY_TYPES) and odd is not None and _unhashable(key):
            odd.append(f"a dict key is a {type(key).__name__} (or nests one, or nests too deep), which cannot be hashed")
        # only plain keys are hashed: hashing a hostile, deeply nested tuple recurses in C
        target[key if isinstance(key, _KEY_TYPES) else ObjectKey(key, len(target))] = value


class ObjectKey:
    """A dict key that is an object the machine built (DCP's ``MetadataIndex``): kept, but hashed
    and compared by identity, as hashing a hostile nested tuple recurses in C."""

    __slots__ = ("position", "value")

    def __init__(self, value: object, position: int) -> None:
        self.value = value
        self.position = position

    def __str__(self) -> str:
        return f"<{type(self.value).__name__} key #{self.position}>"

    __repr__ = __str__


def _unhashable(key: object, depth: int = 100, items: int = 10_000) -> bool:
    """Whether a real unpickler would fail to hash ``key``: a list or dict in it, or nesting absurd
    in depth or size (tuples shared through the memo are visited once: no blow-up)."""
    level = [key]
    seen: set[int] = set()
    for _ in range(depth):
        nested: list[object] = []
        for item in level:
            if isinstance(item, (list, dict)):
                return True
            if isinstance(item, tuple) and not isinstance(item, (Global, Storage, TensorRef, Call, Opaque)) and id(item) not in seen:
                seen.add(id(item))
                nested.extend(item)
        if not nested:
            return False
        if len(seen) > items:
            return True
        level = nested
    return True


def top_keys(root: object) -> tuple[str, ...]:
    """The top-level keys of a walked pickle that is a dict (a bundled checkpoint's roles), with
    the role keys further down (``state.optimizers``, ``trainer._trainer.optimizer``); a key whose
    value is None holds nothing (DeepSpeed's ``optimizer=None`` under ZeRO) and is left out."""
    if not isinstance(root, dict):
        return ()
    keys = [str(key) for key, value in root.items() if _holds(str(key), value)]
    below = [(str(key), value) for key, value in root.items() if str(key) in bundles.NESTED and isinstance(value, dict)]
    while below:  # as deep as the role keys go, no deeper: a dict the memo makes hold itself ends there
        path, inner = below.pop(0)
        for key, value in inner.items():
            dotted = f"{path}.{key}"
            if dotted in bundles.NESTED_KEYS and _holds(dotted, value):
                keys.append(dotted)
            if dotted in bundles.NESTED and isinstance(value, dict):
                below.append((dotted, value))
    return tuple(keys)


def top_numbers(root: object, at_most: int = 16) -> tuple[tuple[str, int], ...]:
    """The top-level keys of a walked dict whose values are integers (Lightning's ``global_step``),
    as the skim ``inspect`` does reports them."""
    if not isinstance(root, dict):
        return ()
    return tuple((str(key), value) for key, value in root.items() if type(value) is int)[:at_most]


def recorded_paths(root: object, keys: frozenset[str], depth: int = 3) -> tuple[tuple[str, str], ...]:
    """The texts a walked dict keeps under ``keys`` (``bundles.PATH_KEYS``) at most ``depth``
    levels down (Lightning's ``callbacks.<ModelCheckpoint…>.last_model_path``), each key once."""
    found: dict[str, str] = {}
    level = [root]
    for _ in range(depth):
        below: list[object] = []
        for value in level:
            if isinstance(value, dict):
                for key, item in value.items():
                    if isinstance(key, str) and key in keys and isinstance(item, str):
                        found.setdefault(key, item)
                    elif isinstance(item, dict):
                        below.append(item)
        level = below
    return tuple(found.items())


def _holds(key: str, value: object) -> bool:
    return bundles.holds(key, none=value is None, empty=isinstance(value, (list, dict)) and not value)


def tensors(root: object, prefix: str = "") -> Iterator[tuple[str, TensorRef]]:
    """Every tensor in a walked object, with its dotted path (``state.0.exp_avg``)."""
    stack: list[tuple[str, object]] = [(prefix, root)]
    seen: set[int] = set()
    while stack:
        path, value = stack.pop()
        if isinstance(value, TensorRef):
            yield path, value
        elif isinstance(value, (dict, list, tuple)) and not isinstance(value, (Global, Storage, Call, Opaque)):
            if id(value) in seen:  # the memo can make a container hold itself
                continue
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            children = [(f"{path}.{key}" if path else str(key), child) for key, child in items]
            stack.extend(reversed(children))


def outside_weights(found: Iterable[tuple[str, TensorRef]]) -> frozenset[str]:
    """Keys of the storages that only state other than weights refers to (a Lightning callback's
    ``kth_value = inf``): ``--deep`` does not call their NaN and Inf values damage."""
    return only_named(found, lambda name: not bundles.weights(name))


def masks(found: Iterable[tuple[str, TensorRef]]) -> frozenset[str]:
    """Keys of the storages that only attention masks refer to: Inf is their design, NaN is not."""
    return only_named(found, bundles.may_be_infinite)


def only_named(found: Iterable[tuple[str, TensorRef]], such: Callable[[str], bool]) -> frozenset[str]:
    """Keys of the storages whose every tensor's name is ``such``."""
    matching: set[str] = set()
    other: set[str] = set()
    for name, ref in found:
        if ref.storage is not None:
            (matching if such(name) else other).add(ref.storage.key)
    return frozenset(matching - other)


def element_size(dtype: str) -> int | None:
    return TORCH_SIZES.get(dtype)
