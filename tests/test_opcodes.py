"""The opcode reader against the real unpicklers: it must never stop where either goes on.

The streams here import nothing (the unpicklers below refuse every global and persistent id), so
loading them runs no code: CPython's C unpickler and its pure-Python one (what joblib and dill
load with) can be asked directly where a stream ends and what it holds.
"""

from __future__ import annotations

import io
import pickle
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptdoctor.readers._opcodes import StreamEnd, read
from ckptdoctor.readers.unpickler import walk


class _Refuse(Exception):
    pass


class _CUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        raise _Refuse(f"{module}.{name}")

    def persistent_load(self, pid: object) -> object:
        raise _Refuse("persistent id")


class _PyUnpickler(pickle._Unpickler):  # type: ignore[name-defined,misc]
    def find_class(self, module: str, name: str) -> object:
        raise _Refuse(f"{module}.{name}")

    def persistent_load(self, pid: object) -> object:
        raise _Refuse("persistent id")


def _load(unpickler: type[pickle.Unpickler], data: bytes) -> tuple[bool, int, object]:
    """(loaded, bytes consumed, value) as the real unpickler reads ``data``."""
    stream = io.BytesIO(data)
    try:
        value = unpickler(stream, encoding="latin1").load()
    except _Refuse:
        return False, -1, None
    except Exception:
        return False, -1, None
    return True, stream.tell(), value


def _check(data: bytes) -> None:
    c_loaded, c_end, _ = _load(_CUnpickler, data)
    py_loaded, py_end, _ = _load(_PyUnpickler, data)
    walked = walk(data)
    if c_loaded or py_loaded:
        # a loader reads it to its STOP: the walk must get there too, or say it could not
        assert walked.error is None or walked.tricks or walked.unproven, (data, walked)
        if walked.error is None and not walked.unproven and not walked.tricks:
            # the loaders' file position may be past STOP by the rest of a frame they read ahead
            assert walked.end <= max(c_end, py_end), (data, walked.end, c_end, py_end)
    if walked.error is not None and not walked.tricks:
        assert not c_loaded and not py_loaded, data


TEXT_ARGS = [
    b"0", b"1", b"00", b"01", b"-0", b"+1", b" 1", b"1 ", b"1_0", b"010", b"0x1", b"0X1f", b"0o7", b"0b1",
    b"1\x00z", b"1\x00", b"\x00", b"", b"0x", b"-", b"99999999999999999999", b"-9223372036854775809", b"1L",
    b"0x1L", b"L", b"1.0", b"1.0\x00", b" 1.0", b"1_0.0", b"inf", b"-Infinity", b"nan", b"1e999", b"1e-999",
    b".5", b"1.", b"1e", b"abc", b"\xff",
]  # fmt: skip


@pytest.mark.parametrize("opcode", [b"I", b"L", b"F"])
@pytest.mark.parametrize("arg", TEXT_ARGS)
def test_text_numbers_are_read_as_the_unpicklers_read_them(opcode: bytes, arg: bytes) -> None:
    _check(b"(" + opcode + arg + b"\nl.")


@pytest.mark.parametrize("arg", TEXT_ARGS)
def test_memo_indices_are_read_as_the_unpicklers_read_them(arg: bytes) -> None:
    _check(b"N" + b"p" + arg + b"\n" + b"0g" + arg + b"\n.")


@pytest.mark.parametrize(
    "data",
    [
        b"I0x1\ncos\nsystem\n(S'true'\ntR.",
        b"I1\x00z\ncos\nsystem\n(S'true'\ntR.",
        b"L0x1L\ncos\nsystem\n(S'true'\ntR.",
        b"F1.0\x00\ncos\nsystem\n(S'true'\ntR.",
        b"Np0\x00\n0cos\nsystem\n(S'true'\ntR.",
    ],
)
def test_arguments_pickletools_refuses_do_not_hide_what_follows(data: bytes) -> None:
    import pickletools

    with pytest.raises(ValueError):
        list(pickletools.genops(data))
    walked = walk(data)
    assert [g.dotted for g in walked.globals] == ["os.system"]


def test_a_stream_cut_inside_an_opcode_is_a_truncation_every_unpickler_shares() -> None:
    data = pickle.dumps({"a": [1, 2, 3]}, protocol=2)
    walked = walk(data[:-3])
    assert walked.truncated and walked.error


def test_protocols_above_five_stop_every_unpickler() -> None:
    with pytest.raises(StreamEnd):
        list(read(b"\x80\x06N."))


def test_the_pure_python_unpickler_imports_a_cut_global() -> None:
    walked = walk(b"\x80\x02cos\nsystem")
    assert walked.truncated
    assert [g.dotted for g in walked.globals] == ["os.syste"]


def _frame(length: int) -> bytes:
    return b"\x95" + struct.pack("<Q", length)


@pytest.mark.parametrize(
    "data",
    [  # found by test_grammar_streams_agree_with_the_unpicklers: the C unpickler stops at another STOP
        _frame(16) + b"NNNK\x00" + _frame(3) + b"\x8c\x01.NN.",
        _frame(16) + b"NNNK\x00" + _frame(3) + b"\x8c\x01.(.",
    ],
)
def test_a_frame_begun_inside_a_frame_is_a_trick(data: bytes) -> None:
    _check(data)
    assert any("inside the frame" in trick for trick in walk(data).tricks)


def test_a_payload_the_c_unpickler_runs_from_a_file_behind_a_nested_frame_is_unsafe(tmp_path, cli) -> None:
    """CPython's C unpickler, reading a file object that cannot peek (``io.BytesIO``, as torch.load
    hands it a zip archive's ``data.pkl``; an unbuffered file), drops what is left of the open
    frame when a new FRAME begins inside it and reads the new frame from the file: the payload
    below is a string's contents to a reader that goes byte by byte, and the opcodes the C
    unpickler runs."""
    payload = b"cposix\nsystem\n(S'echo owned'\ntR."
    body = b"\x8c" + bytes([len(payload)]) + payload + b"."
    data = b"\x80\x04" + _frame(1 + 9 + 2) + b"N" + _frame(len(body)) + body + b"XX"
    called: list[str] = []

    class Recording(_CUnpickler):
        def find_class(self, module: str, name: str) -> object:
            called.append(f"{module}.{name}")
            raise _Refuse(module)

    with pytest.raises(_Refuse):
        Recording(io.BytesIO(data)).load()
    assert called == ["posix.system"]  # what torch.load(weights_only=False) would call from a data.pkl
    assert walk(data).tricks
    (tmp_path / "state.pkl").write_bytes(data)
    report = cli("verify", "--json", tmp_path).json
    assert "CKD401" in {f["code"] for f in report["findings"]}, report["findings"]


def test_a_frame_that_runs_on_past_its_stop_is_a_trick(tmp_path, cli) -> None:
    """The C unpickler reading a file object that cannot peek has read the whole frame when it
    meets STOP, so the next pickle of a legacy ``torch.save`` file (``torch.load(io.BytesIO(blob))``)
    starts where the frame ends, not after STOP."""
    torch = pytest.importorskip("torch")
    data = b"\x80\x04" + _frame(6) + b"K\x01.cos" + b"\nsystem\n."
    stream = io.BytesIO(data)
    assert pickle.load(stream) == 1 and stream.tell() == 17  # where the C unpickler leaves the file
    walked = walk(data)
    assert walked.end == 14 and any("runs on to byte 17" in trick for trick in walked.tricks)
    legacy = tmp_path / "state.pt"
    torch.save({"w": torch.zeros(2)}, legacy, _use_new_zipfile_serialization=False)
    saved = legacy.read_bytes()
    magic = walk(saved).end  # the first pickle: the magic number; its frame now holds the next one too
    protocol = walk(saved[magic:]).end
    body = saved[2:magic] + saved[magic : magic + protocol]
    legacy.write_bytes(b"\x80\x04" + _frame(len(body)) + body + saved[magic + protocol :])
    report = cli("verify", "--json", tmp_path).json
    assert "CKD401" in {f["code"] for f in report["findings"]}, report["findings"]


_SIMPLE = st.sampled_from([b"N", b"\x88", b"\x89", b")", b"]", b"}", b"(", b"t", b"l", b"d", b"a", b"e", b"s", b"u", b"0", b"1", b"2", b"\x85", b"\x86", b"\x87", b"\x8f", b"\x90", b"\x91", b"\x94", b"."])  # fmt: skip


@st.composite
def _opcode(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return draw(_SIMPLE)
    if kind == 1:
        return draw(st.sampled_from([b"I", b"L", b"F", b"p", b"g"])) + draw(st.sampled_from(TEXT_ARGS)) + b"\n"
    if kind == 2:
        return b"K" + bytes([draw(st.integers(0, 255))])
    if kind == 3:
        return draw(st.sampled_from([b"q", b"h"])) + bytes([draw(st.integers(0, 4))])
    if kind == 4:
        text = draw(st.binary(max_size=6))
        return b"\x8c" + bytes([len(text)]) + text
    if kind == 5:
        return b"S" + draw(st.sampled_from([b"'a'", b"'\\x4'", b"'a", b'"b"', b"''"])) + b"\n"
    return b"\x95" + struct.pack("<Q", draw(st.integers(0, 40)))


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.lists(_opcode(), max_size=24), st.sampled_from([b"", b"\x80\x02", b"\x80\x04", b"\x80\x05"]))
def test_grammar_streams_agree_with_the_unpicklers(ops: list[bytes], proto: bytes) -> None:
    _check(proto + b"".join(ops) + b".")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_agree_with_the_unpicklers(data: bytes) -> None:
    _check(data)


@pytest.mark.parametrize("protocol", [1, 2, 3, 4, 5])
def test_torch_save_at_every_protocol_it_loads_is_proven_safe(protocol: int) -> None:
    """The opcodes allowed inside torch archives are every opcode ``torch.save`` writes at any
    protocol whose files ``torch.load`` reads back (protocol 0 writes text persistent ids that
    torch.load refuses)."""
    torch = pytest.importorskip("torch")
    from ckptdoctor.model import Problem
    from ckptdoctor.readers.files import BytesSample, verify_sample

    recursive: list[object] = []
    recursive.append(recursive)
    shared = (1, [2])
    value = {
        "model": torch.nn.Linear(3, 2).state_dict(), "parameter": torch.nn.Parameter(torch.zeros(2)),
        "big": 2**70, "float": 1.5, "text": "é" * 300, "bytes": b"x" * 300, "bytearray": bytearray(b"y"),
        "set": {1, 2}, "frozenset": frozenset({3}), "recursive": recursive, "shared": [shared, shared],
        "device": torch.device("cpu"), "dtype": torch.float16, "size": torch.Size([2]),
    }  # fmt: skip
    buffer = io.BytesIO()
    torch.save(value, buffer, pickle_protocol=protocol)
    assert torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)["big"] == 2**70  # our own file
    report = verify_sample(BytesSample(buffer.getvalue()), "state.pt")
    assert not {i.problem for i in report.issues} & {Problem.UNSAFE_PICKLE, Problem.MALFORMED, Problem.ZIP_ANOMALY}, report.issues


@pytest.mark.parametrize("defaults, said", [((1_000, 30.0), "more opcodes"), ((50_000_000, 0.0), "takes more than")])
def test_a_pickle_past_the_files_budget_is_unproven_not_an_error(
    monkeypatch: pytest.MonkeyPatch, defaults: tuple[int, float], said: str
) -> None:
    """Every file has a budget of opcodes and seconds; past it the verdict is CKD401 "too complex
    to prove safe" for that file, never an internal error (issue 12, resource bounds)."""
    from ckptdoctor.model import Problem
    from ckptdoctor.readers.files import BytesSample, verify_sample
    from ckptdoctor.readers.unpickler import Budget

    data = pickle.dumps(list(range(20_000)), protocol=2)
    assert not verify_sample(BytesSample(data), "big.pkl").issues
    monkeypatch.setattr(Budget.__init__, "__defaults__", defaults)
    issues = verify_sample(BytesSample(data), "big.pkl").issues
    unproven = [i for i in issues if i.problem is Problem.UNSAFE_PICKLE]
    assert unproven and said in unproven[0].detail and "too complex to prove safe" in unproven[0].detail
