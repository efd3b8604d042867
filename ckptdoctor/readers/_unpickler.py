"""A pickle machine that follows a pickle's opcodes to learn its shape, and never runs it.

``pickletools.genops`` only parses. On top of it this module keeps a symbolic stack and memo,
so that a torch ``data.pkl`` yields its tensors (name, dtype, shape, storage, device) and any
pickle yields every global it would import: by ``GLOBAL`` and ``INST``, by ``STACK_GLOBAL``
however its strings were shuffled through the memo, or by an extension code. Nothing is
imported or called: a global is a pair of strings, a call is a node that remembers its parts.
Whatever cannot be followed statically is reported as such, never guessed.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ckptdoctor.readers._dtypes import TORCH_SIZES, TORCH_STORAGES

TORCH_OPCODES = frozenset({
    "PROTO", "STOP", "GLOBAL", "NEWOBJ", "REDUCE", "BUILD", "APPEND", "APPENDS", "SETITEM",
    "SETITEMS", "MARK", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE", "NEWFALSE", "NEWTRUE",
    "EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "BININT", "BININT1", "BININT2",
    "BINFLOAT", "BINUNICODE", "SHORT_BINSTRING", "BINPERSID", "BINGET", "LONG_BINGET", "BINPUT",
    "LONG_BINPUT", "LONG1",
})  # fmt: skip
"""The opcodes torch's ``weights_only`` unpickler accepts: all that ``torch.save`` writes."""


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
    tricks: list[str] = field(default_factory=list)
    """Structural tricks that make parsers disagree (an opcode straddling a frame's end)."""
    error: str | None = None
    """Why the walk stopped before STOP, if it did."""
    end: int = 0
    """Offset just past the STOP opcode (where a following pickle would start)."""
    persistent: list[object] = field(default_factory=list)
    """Persistent ids that are not torch storages."""
    storages: list[Storage] = field(default_factory=list)
    """Every storage the pickle names by persistent id, tensors' or not."""
    odd: list[str] = field(default_factory=list)
    """Things a real unpickler would fail on that do not stop the walk (an unhashable key)."""
    called: set[Global] = field(default_factory=set)
    """Globals the pickle calls (REDUCE, INST, OBJ), rather than only rebuilds (NEWOBJ + BUILD)."""
    passed: set[Global] = field(default_factory=set)
    """Globals handed to a call as arguments: a callee may call them in turn."""
    changed: set[Global] = field(default_factory=set)
    """Globals that BUILD sets attributes on: the class or function itself is altered."""


class _Mark:
    pass


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


def walk(data: bytes, start: int = 0, opcodes: frozenset[str] | None = None) -> Walk:
    """Follow the pickle that starts at ``start``; ``opcodes``, if given, is the allowed set."""
    import pickletools  # a parser only; imported when a pickle is walked, not at every start-up
    import warnings

    machine = _Machine(opcodes)
    stream = io.BytesIO(data)
    stream.seek(start)
    position: int | None = start
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # genops warns on escape sequences in STRING opcodes
            for opcode, arg, position in pickletools.genops(stream):
                machine.step(opcode.name, arg, position or 0, stream.tell())
                if opcode.name == "STOP":
                    break
            else:
                machine.result.error = "the pickle ends without its STOP opcode"
    except _Stop as stop:
        machine.result.error = f"{stop} (at byte {position})"
    except (ValueError, KeyError, IndexError, EOFError, UnicodeDecodeError, TypeError, OverflowError, RecursionError) as error:
        machine.result.error = f"cannot be parsed near byte {position} ({type(error).__name__}: {error})"
    return machine.result


class _Stop(Exception):
    """The pickle asks for something a real unpickler would fail on."""


class _Machine:
    def __init__(self, opcodes: frozenset[str] | None) -> None:
        self.allowed = opcodes
        self.result = Walk()
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.seen: set[Global] = set()
        self.frame_end = -1

    def step(self, name: str, arg: Any, position: int, after: int) -> None:
        result = self.result
        if self.allowed is not None and name not in self.allowed and name not in result.foreign:
            result.foreign[name] = position
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
            stack.append(self.memo[arg])
        elif name == "MEMOIZE":
            self.memo[len(self.memo)] = self._top()
        elif name == "MARK":
            self.marks.append(stack)
            self.stack = []
        elif name == "STOP":
            result.root = self._pop()
            result.end = after
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            count = int(name[-1])
            items = tuple(stack[-count:])
            if len(items) != count:
                raise _Stop("a tuple opcode finds too few items on the stack")
            del stack[-count:]
            stack.append(items)
        else:
            self._structural(name, arg, position, after)

    def _structural(self, name: str, arg: Any, position: int, after: int) -> None:
        if name == "GLOBAL":
            module, _, attribute = str(arg).partition(" ")
            self.stack.append(self._import(module, attribute))
        elif name == "STACK_GLOBAL":
            attribute, module = self._pop(), self._pop()
            if isinstance(module, str) and isinstance(attribute, str):
                self.stack.append(self._import(module, attribute))
            else:
                self.stack.append(self._hidden(f"STACK_GLOBAL with a computed name at byte {position}"))
        elif name == "INST":
            module, _, attribute = str(arg).partition(" ")
            cls = self._import(module, attribute)
            args = tuple(self._pop_mark())
            self.result.called.add(cls)
            self.result.passed.update(_globals_in(args))
            self.stack.append(_call(cls, args))
        elif name == "OBJ":
            items = self._pop_mark()
            if not items:
                raise _Stop("OBJ without a class")
            if isinstance(items[0], Global):
                self.result.called.add(items[0])
            self.result.passed.update(_globals_in(items[1:]))
            self.stack.append(_call(items[0], tuple(items[1:])))
        elif name in ("REDUCE", "NEWOBJ"):
            args = self._pop()
            func = self._pop()
            if name == "REDUCE" and isinstance(func, Global):
                self.result.called.add(func)
            self.result.passed.update(_globals_in(args))
            self.stack.append(_call(func, args))
        elif name == "NEWOBJ_EX":
            self._pop()
            args = self._pop()
            self.stack.append(_call(self._pop(), args))
        elif name == "BUILD":
            self.result.passed.update(_globals_in(self._pop()))
            target = self._top()
            if isinstance(target, Global):
                self.result.changed.add(target)
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
            target = self._top()
            if isinstance(target, list):
                target.append(value)
        elif name in ("APPENDS", "ADDITEMS"):
            items = self._pop_mark()
            target = self._top()
            if isinstance(target, list):
                target.extend(items)
        elif name == "SETITEM":
            value, key = self._pop(), self._pop()
            _set_item(self._top(), key, value, self.result.odd)
        elif name == "SETITEMS":
            items = self._pop_mark()
            target = self._top()
            for key, value in zip(items[::2], items[1::2], strict=False):
                _set_item(target, key, value, self.result.odd)
        elif name == "POP":
            if stack:
                stack.pop()
            else:
                self._pop_mark()
        elif name == "POP_MARK":
            self._pop_mark()
        elif name == "DUP":
            stack.append(self._top())
        elif name == "FRAME":
            self.frame_end = after + int(arg)
        elif name in ("NEXT_BUFFER", "READONLY_BUFFER"):
            stack.append(Opaque("out-of-band buffer"))
        elif name != "PROTO":
            raise _Stop(f"opcode {name} is not understood")

    def _import(self, module: str, attribute: str) -> Global:
        symbol = _python3_name(module, attribute)
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
            if isinstance(kind, Global) and isinstance(numel, int) and not isinstance(numel, bool):
                untyped = kind.name == "UntypedStorage"
                storage = Storage(None if untyped else TORCH_STORAGES.get(kind.name, kind.dotted), str(key), str(location), numel)
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


def _globals_in(value: object, limit: int = 1000) -> set[Global]:
    """Globals anywhere in a call's arguments (containers followed, each once, up to ``limit``);
    objects already built (a ``Call``) were checked when they were built."""
    found: set[Global] = set()
    pending = [value]
    seen: set[int] = set()
    while pending and len(seen) < limit:
        item = pending.pop()
        if isinstance(item, Global):
            found.add(item)
        elif isinstance(item, (tuple, list)) and not isinstance(item, (Storage, TensorRef, Opaque, Call)) and id(item) not in seen:
            seen.add(id(item))
            pending.extend(item)
        elif isinstance(item, dict) and id(item) not in seen:
            seen.add(id(item))
            pending.extend(item.values())
    return found


def _python3_name(module: str, attribute: str) -> Global:
    """The name Python 3's unpickler imports for a Python 2 one (``__builtin__ set`` is
    ``builtins.set``): pickle maps them for protocols below 3, which torch writes."""
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
    elif (module, name) == ("torch", "device"):
        return ":".join(str(part) for part in args)
    return Call(func, args)


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
        target[key if isinstance(key, _KEY_TYPES) else f"<{type(key).__name__} key #{len(target)}>"] = value


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


def element_size(dtype: str) -> int | None:
    return TORCH_SIZES.get(dtype)
