"""A pickle's opcodes and their arguments, read the way the unpicklers that load them read them.

``pickletools.genops`` is stricter than the unpicklers: it stops at ``I0x1\\n`` or ``p0\\x00\\n``,
which CPython's C unpickler (``pickle.load``, ``torch.load``, ``numpy.load``) accepts, so a scanner
built on it stops where the loader goes on. This reader follows ``Modules/_pickle.c`` (``strtol``
with base 0 for ``INT``, ``PyOS_string_to_double`` for ``FLOAT``, C strings that end at the first
NUL) and the pure-Python ``pickle._Unpickler`` that joblib and dill load with (Python's ``int()``
and ``float()``, lines that need no newline at the end of the stream).

Where either unpickler accepts an argument, the walk goes on; where the two read it differently
(one accepts, the other refuses, or they get different values), the opcode says so in ``note``:
no real pickler writes such an argument, and a loader could read the rest of the stream unlike
the scanner. The stream stops (:class:`StreamEnd`) only where both unpicklers stop.
"""

from __future__ import annotations

import codecs
import re
import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

HIGHEST_PROTOCOL = 5
"""The highest protocol CPython 3.8-3.14 reads; a higher ``PROTO`` stops every unpickler."""
_LONG_MAX = 2**63 - 1
_C_SPACE = b" \t\n\v\f\r"


class Op(NamedTuple):
    name: str
    arg: Any
    position: int
    end: int
    """Offset just past the opcode and its argument."""
    note: str | None = None
    """Why unpicklers disagree about this opcode's argument, when they do."""


class Unproven(Exception):
    """This reader stops looking, though a loader would read on: nothing after is proven."""


class StreamEnd(Exception):
    """Every unpickler stops here: the stream is cut short (``truncated``) or it is invalid."""

    def __init__(self, why: str, position: int, truncated: bool = False, imported: tuple[str, str] | None = None) -> None:
        super().__init__(why)
        self.position = position
        self.truncated = truncated
        self.imported = imported
        """What the pure-Python unpickler imports before it stops at a cut ``GLOBAL``."""


def _c_strtol(line: bytes) -> tuple[int, int, bool]:
    """C ``strtol(line, &end, 0)``: (value, end index, overflowed)."""
    i, n = 0, len(line)
    while i < n and line[i] in _C_SPACE:
        i += 1
    negative = False
    if i < n and line[i] in b"+-":
        negative = line[i] == ord("-")
        i += 1
    base, digits = 10, "0123456789"
    if i < n and line[i] == ord("0"):
        if i + 2 < n and line[i + 1] in b"xX" and chr(line[i + 2]) in "0123456789abcdefABCDEF":
            base, digits, i = 16, "0123456789abcdefABCDEF", i + 2
        else:
            base, digits = 8, "01234567"
    start = i
    while i < n and chr(line[i]) in digits:
        i += 1
    if i == start:
        return 0, 0, False
    if i - start > 64:  # beyond any long, and int() refuses very long digit strings
        return 0, i, True
    value = int(line[start:i], base) * (-1 if negative else 1)
    return value, i, not (-_LONG_MAX - 1 <= value <= _LONG_MAX)


def _c_string(line: bytes) -> bytes:
    """What C sees of a line: up to its first NUL."""
    return line.split(b"\0", 1)[0]


def _python_int(text: bytes, base: int) -> int | None:
    try:
        return int(text, base)
    except ValueError:
        return None


def _c_int(line: bytes) -> object:
    """``load_int`` in _pickle.c; None where it fails."""
    value, end, overflowed = _c_strtol(line)
    if overflowed or line[end : end + 1] not in (b"\n", b"\0"):
        return _python_int(_c_string(line), 0)  # PyLong_FromString(s, NULL, 0)
    return bool(value) if len(line) == 3 and value in (0, 1) else value


def _py_int(line: bytes) -> object:
    """``load_int`` in pickle.py."""
    if line == b"00\n":
        return False
    if line == b"01\n":
        return True
    return _python_int(line, 0)


def _c_long(line: bytes) -> object:
    text = line[:-2] if len(line) >= 2 and line[-2:-1] == b"L" else line
    return _python_int(_c_string(text), 0)


def _py_long(line: bytes) -> object:
    text = line[:-1]
    return _python_int(text[:-1] if text.endswith(b"L") else text, 0)


_C_FLOAT = re.compile(rb"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|(?i:infinity|inf|nan))")


def _c_float(line: bytes) -> object:
    """``PyOS_string_to_double``: no leading space or underscores; ``\\n`` or NUL must follow;
    a finite literal that overflows fails."""
    match = _C_FLOAT.match(line)
    if match is None or line[match.end() : match.end() + 1] not in (b"\n", b"\0"):
        return None
    value = float(match.group())
    if value in (float("inf"), float("-inf")) and b"inf" not in match.group().lower():
        return None
    return value


def _py_float(line: bytes) -> object:
    try:
        return float(line[:-1])
    except ValueError:
        return None


def _c_index(line: bytes) -> object:
    """The memo index of ``GET``/``PUT`` in C: ``PyLong_FromString(s, NULL, 10)``."""
    return _python_int(_c_string(line), 10)


def _py_index(line: bytes) -> object:
    return _python_int(line[:-1], 10)


_TEXT_ARGUMENTS: dict[str, tuple[Callable[[bytes], object], Callable[[bytes], object]]] = {
    "INT": (_c_int, _py_int),
    "LONG": (_c_long, _py_long),
    "FLOAT": (_c_float, _py_float),
    "GET": (_c_index, _py_index),
    "PUT": (_c_index, _py_index),
}


def _same(first: object, second: object) -> bool:
    if type(first) is not type(second):
        return False
    if isinstance(first, float) and first != first:  # NaN
        return second != second
    return first == second


_NO_ARG = {
    b"(": "MARK", b".": "STOP", b"0": "POP", b"1": "POP_MARK", b"2": "DUP", b"N": "NONE",
    b"Q": "BINPERSID", b"R": "REDUCE", b"a": "APPEND", b"b": "BUILD", b"d": "DICT", b"}": "EMPTY_DICT",
    b"e": "APPENDS", b"l": "LIST", b"]": "EMPTY_LIST", b"o": "OBJ", b"s": "SETITEM", b"t": "TUPLE",
    b")": "EMPTY_TUPLE", b"u": "SETITEMS", b"\x81": "NEWOBJ", b"\x85": "TUPLE1", b"\x86": "TUPLE2",
    b"\x87": "TUPLE3", b"\x88": "NEWTRUE", b"\x89": "NEWFALSE", b"\x8f": "EMPTY_SET",
    b"\x90": "ADDITEMS", b"\x91": "FROZENSET", b"\x92": "NEWOBJ_EX", b"\x93": "STACK_GLOBAL",
    b"\x94": "MEMOIZE", b"\x97": "NEXT_BUFFER", b"\x98": "READONLY_BUFFER",
}  # fmt: skip
_FIXED = {
    b"J": ("BININT", struct.Struct("<i")), b"K": ("BININT1", struct.Struct("<B")),
    b"M": ("BININT2", struct.Struct("<H")), b"h": ("BINGET", struct.Struct("<B")),
    b"j": ("LONG_BINGET", struct.Struct("<I")), b"q": ("BINPUT", struct.Struct("<B")),
    b"r": ("LONG_BINPUT", struct.Struct("<I")), b"G": ("BINFLOAT", struct.Struct(">d")),
    b"\x80": ("PROTO", struct.Struct("<B")), b"\x82": ("EXT1", struct.Struct("<B")),
    b"\x83": ("EXT2", struct.Struct("<H")), b"\x84": ("EXT4", struct.Struct("<i")),
    b"\x95": ("FRAME", struct.Struct("<Q")),
}  # fmt: skip
_COUNTED = {
    b"T": ("BINSTRING", struct.Struct("<i")), b"U": ("SHORT_BINSTRING", struct.Struct("<B")),
    b"X": ("BINUNICODE", struct.Struct("<I")), b"\x8c": ("SHORT_BINUNICODE", struct.Struct("<B")),
    b"\x8d": ("BINUNICODE8", struct.Struct("<Q")), b"B": ("BINBYTES", struct.Struct("<I")),
    b"C": ("SHORT_BINBYTES", struct.Struct("<B")), b"\x8e": ("BINBYTES8", struct.Struct("<Q")),
    b"\x96": ("BYTEARRAY8", struct.Struct("<Q")), b"\x8a": ("LONG1", struct.Struct("<B")),
    b"\x8b": ("LONG4", struct.Struct("<i")),
}  # fmt: skip
_LINES = {b"I": "INT", b"L": "LONG", b"F": "FLOAT", b"g": "GET", b"p": "PUT", b"S": "STRING", b"V": "UNICODE", b"P": "PERSID"}
_TWO_LINES = {b"c": "GLOBAL", b"i": "INST"}


def _decode_string(raw: bytes) -> str | bytes:
    """A Python 2 ``str``: loaders decode it with their own encoding (ASCII by default, UTF-8 in
    torch, latin-1 where users ask); a value no encoding agrees on stays bytes."""
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        return raw


def _counted(name: str, data: bytes) -> object:
    if name in ("BINSTRING", "SHORT_BINSTRING"):
        return _decode_string(data)
    if name in ("BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8"):
        return data.decode("utf-8", "surrogatepass")
    if name in ("LONG1", "LONG4"):
        return int.from_bytes(data, "little", signed=True)
    return data


_NONE, _FIXED_ARG, _COUNTED_ARG, _LINE_ARG, _LINES_ARG = range(5)
_BY_BYTE: list[tuple[int, str, struct.Struct | None] | None] = [None] * 256
for _code, _name in _NO_ARG.items():
    _BY_BYTE[_code[0]] = (_NONE, _name, None)
for _code, (_name, _layout) in _FIXED.items():
    _BY_BYTE[_code[0]] = (_FIXED_ARG, _name, _layout)
for _code, (_name, _layout) in _COUNTED.items():
    _BY_BYTE[_code[0]] = (_COUNTED_ARG, _name, _layout)
for _code, _name in _LINES.items():
    _BY_BYTE[_code[0]] = (_LINE_ARG, _name, None)
for _code, _name in _TWO_LINES.items():
    _BY_BYTE[_code[0]] = (_LINES_ARG, _name, None)
"""Each opcode byte's argument kind, name and layout: one list lookup per opcode."""
OPCODE_NAMES = frozenset(entry[1] for entry in _BY_BYTE if entry is not None)
"""Every opcode of pickle protocols 0-5."""


def read(data: bytes, start: int = 0) -> Iterator[Op]:
    """Every opcode from ``start`` up to and including ``STOP``; raises :class:`StreamEnd` where
    the unpicklers stop, :class:`Unproven` where this reader stops looking."""
    size = len(data)
    position = start
    table = _BY_BYTE
    while True:
        if position >= size:
            raise StreamEnd("the pickle ends without its STOP opcode", position, truncated=True)
        entry = table[data[position]]
        after = position + 1
        if entry is None:
            raise StreamEnd(f"invalid opcode {data[position : position + 1]!r}", position)
        kind, name, layout = entry
        if kind == _NONE:
            yield Op(name, None, position, after)
            if name == "STOP":
                return
        elif kind == _FIXED_ARG:
            assert layout is not None
            if after + layout.size > size:
                raise StreamEnd(f"the pickle is cut inside a {name} opcode", position, truncated=True)
            (value,) = layout.unpack_from(data, after)
            if name == "PROTO" and value > HIGHEST_PROTOCOL:
                raise StreamEnd(f"unsupported pickle protocol {value}", position)
            after += layout.size
            yield Op(name, value, position, after)
        elif kind == _COUNTED_ARG:
            assert layout is not None
            if after + layout.size > size:
                raise StreamEnd(f"the pickle is cut inside a {name} opcode", position, truncated=True)
            (length,) = layout.unpack_from(data, after)
            if length < 0:
                raise StreamEnd(f"a {name} opcode has a negative length", position)
            after += layout.size
            if after + length > size:
                raise StreamEnd(f"the pickle is cut inside a {name} opcode", position, truncated=True)
            try:
                value = _counted(name, data[after : after + length])
            except UnicodeDecodeError as error:
                raise StreamEnd(f"a {name} opcode holds invalid UTF-8 ({error.reason})", position) from None
            after += length
            yield Op(name, value, position, after)
        elif kind == _LINE_ARG:
            line, after = _line(data, after, position, name)
            yield _text_op(name, line, position, after)
        else:
            op = _global_op(data, name, position, after)
            after = op.end
            yield op
        position = after


_MAX_LINE = 64 * 1024 * 1024
"""A text argument longer than this is not looked for further (a loader would read on)."""


def _line(data: bytes, start: int, position: int, name: str) -> tuple[bytes, int]:
    end = data.find(b"\n", start, start + _MAX_LINE)
    if end < 0:
        if len(data) - start >= _MAX_LINE:
            raise Unproven(f"a {name} opcode at byte {position} has a line longer than {_MAX_LINE} bytes")
        raise StreamEnd(f"the pickle is cut inside a {name} opcode", position, truncated=True)
    return data[start : end + 1], end + 1


_INT_DIGITS_LIMIT = 4300
"""CPython's default ``int_max_str_digits``: a setting (``PYTHONINTMAXSTRDIGITS=0``), not the syntax."""
_LONG_DECIMAL = re.compile(rb"\s*[+-]?[0-9_]{%d,}L?\s*" % _INT_DIGITS_LIMIT)


def _text_op(name: str, line: bytes, position: int, after: int) -> Op:
    if name in ("INT", "LONG") and _LONG_DECIMAL.fullmatch(line.split(b"\0", 1)[0]):
        # refused under the default digit limit, read on where a process lifted it
        note = f"{name} at byte {position} has a decimal argument of over {_INT_DIGITS_LIMIT} digits, which loaders read only where the digit limit is lifted"
        return Op(name, 0, position, after, note)
    if name in _TEXT_ARGUMENTS:
        c_reader, py_reader = _TEXT_ARGUMENTS[name]
        c_value = c_reader(line) if len(line) >= 2 else None
        py_value = py_reader(line)
        if c_value is None and py_value is None:
            raise StreamEnd(f"a {name} opcode's argument {line[:40]!r} is invalid", position)
        if name == "PUT" and isinstance(c_value, int) and c_value < 0:
            raise StreamEnd("a negative PUT index", position)
        if c_value is None or py_value is None or not _same(c_value, py_value):
            note = (
                f"{name} {line[:40]!r} at byte {position}, read as {c_value!r} by pickle.load and as {py_value!r} by pure-Python unpicklers"
            )
            return Op(name, c_value if c_value is not None else py_value, position, after, note)
        return Op(name, c_value, position, after)
    text = line[:-1]
    try:
        if name == "STRING":
            if len(text) < 2 or text[:1] != text[-1:] or text[:1] not in (b"'", b'"'):
                raise StreamEnd("a STRING opcode's argument is not quoted", position)
            return Op(name, _decode_string(codecs.escape_decode(text[1:-1])[0]), position, after)
        if name == "UNICODE":
            return Op(name, codecs.raw_unicode_escape_decode(text)[0], position, after)
        return Op(name, text.decode("ascii"), position, after)  # PERSID
    except (UnicodeDecodeError, ValueError) as error:
        raise StreamEnd(f"a {name} opcode's argument cannot be decoded ({error})", position) from None


def _global_op(data: bytes, name: str, position: int, after: int) -> Op:
    """``GLOBAL``/``INST``: a module line and a name line, decoded as UTF-8 (C) or ASCII (Python's
    INST). At the very end of the stream the pure-Python unpickler drops the last byte of a line
    that has no newline and still imports the module before it fails: the stream ends there, with
    that import."""
    first = data.find(b"\n", after, after + _MAX_LINE)
    second = data.find(b"\n", first + 1, first + 1 + _MAX_LINE) if first >= 0 else -1
    if second < 0 and len(data) - after >= _MAX_LINE:
        raise Unproven(f"a {name} opcode at byte {position} has a line longer than {_MAX_LINE} bytes")
    rest = data[after : second + 1 if second >= 0 else None]
    first, second = (first - after, second - after) if second >= 0 else (rest.find(b"\n"), -1)
    if second < 0:
        module, attribute = (rest[:first], rest[first + 1 : -1]) if first >= 0 else (rest[:-1], b"")
        imported = (module.decode("utf-8", "replace"), attribute.decode("utf-8", "replace"))
        raise StreamEnd(f"the pickle is cut inside a {name} opcode", position, truncated=True, imported=imported)
    module, attribute = rest[:first], rest[first + 1 : second]
    try:
        text = f"{module.decode('utf-8')} {attribute.decode('utf-8')}"
    except UnicodeDecodeError:
        raise StreamEnd(f"a {name} opcode names a module or attribute that is not UTF-8", position) from None
    if not attribute:  # C refuses an empty name; pure Python imports the module, then fails
        return Op(name, text, position, after + second + 1, f"{name} at byte {position} names no attribute")
    return Op(name, text, position, after + second + 1)
