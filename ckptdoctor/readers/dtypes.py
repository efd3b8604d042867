"""Element types of every format, in torch's spelling, with the bytes each element takes.

Reports and consistency rules compare tensors across formats (a burnpack model beside a
safetensors export), so every reader names dtypes the same way.
"""

from __future__ import annotations

TORCH_SIZES: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
    "complex128": 16, "complex64": 8, "complex32": 4,
    "qint8": 1, "quint8": 1, "qint32": 4, "quint4x2": 1, "quint2x4": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1,
    "bits8": 1, "bits16": 2, "bits1x8": 1, "bits2x4": 1, "bits4x2": 1,
}  # fmt: skip
"""torch dtypes (as ``torch.<name>`` globals name them) and their element sizes."""

TORCH_STORAGES: dict[str, str] = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "ComplexDoubleStorage": "complex128", "ComplexFloatStorage": "complex64",
    "QInt8Storage": "qint8", "QUInt8Storage": "quint8", "QInt32Storage": "qint32",
    "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4",
}  # fmt: skip
"""torch's legacy typed-storage classes (what ``data.pkl`` names) and the dtype each holds."""

SAFETENSORS_BITS: dict[str, tuple[str, int]] = {
    "BOOL": ("bool", 8), "U8": ("uint8", 8), "I8": ("int8", 8), "F8_E5M2": ("float8_e5m2", 8),
    "F8_E4M3": ("float8_e4m3fn", 8), "F8_E8M0": ("float8_e8m0fnu", 8),
    "F8_E4M3FNUZ": ("float8_e4m3fnuz", 8), "F8_E5M2FNUZ": ("float8_e5m2fnuz", 8),
    "I16": ("int16", 16), "U16": ("uint16", 16), "F16": ("float16", 16), "BF16": ("bfloat16", 16),
    "I32": ("int32", 32), "U32": ("uint32", 32), "F32": ("float32", 32), "C64": ("complex64", 64),
    "F64": ("float64", 64), "I64": ("int64", 64), "U64": ("uint64", 64),
    "F4": ("float4_e2m1fn", 4), "F6_E2M3": ("float6_e2m3fn", 6), "F6_E3M2": ("float6_e3m2fn", 6),
}  # fmt: skip
"""safetensors dtypes -> (torch's name, bits per element); sub-byte types pack several per byte."""

BURN_SIZES: dict[str, tuple[str, int]] = {
    "F64": ("float64", 8), "F32": ("float32", 4), "Flex32": ("float32", 4), "F16": ("float16", 2),
    "BF16": ("bfloat16", 2), "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2),
    "I8": ("int8", 1), "U64": ("uint64", 8), "U32": ("uint32", 4), "U16": ("uint16", 2),
    "U8": ("uint8", 1), "Bool": ("bool", 1),
}  # fmt: skip
"""burn dtypes (burnpack descriptors, recorder ``TensorData``) -> (torch's name, bytes per element)."""

BURN_BOOL_SIZES = {"Native": 1, "U8": 1, "U32": 4}
"""burn >= 0.21 stores bools as ``{"Bool": <storage>}``."""

FLOATS = frozenset({"float64", "float32", "float16", "bfloat16"})
"""The floating types of weights (consistency rules compare their shapes)."""

NONFINITE_SCANNED = FLOATS | frozenset({
    "complex64", "complex128", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
})  # fmt: skip
"""Types whose values can be NaN or Inf: the non-finite scan (``--deep``) checks each of them."""


def burn_dtype(value: object) -> tuple[str, int] | None:
    """(torch name, element bytes) of a burn dtype value; None for quantized or unknown ones."""
    if isinstance(value, str):
        return BURN_SIZES.get(value)
    if isinstance(value, dict) and len(value) == 1:
        ((kind, storage),) = value.items()
        if kind == "Bool" and isinstance(storage, str) and storage in BURN_BOOL_SIZES:
            return "bool", BURN_BOOL_SIZES[storage]
    return None
