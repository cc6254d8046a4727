"""Data types as TVM spells them: "float32", "int8", "uint1"/"bool", "float32x4" (vector lanes),
"bfloat16" (brain float: float32's exponent, 8 significant bits; DLPack type code 4)."""

from __future__ import annotations

import functools
import re

_PATTERN = re.compile(r"^(bfloat|float|int|uint|bool|handle)(\d*)(?:x(\d+))?$")

# DLPack type codes
INT, UINT, FLOAT, HANDLE, BFLOAT, BOOL = 0, 1, 2, 3, 4, 6


class DType(str):
    """A scalar or vector type. It *is* its TVM spelling ("float32", "int8x4"), so
    ``A.dtype == "float32"`` and ``np.zeros(3, A.dtype)`` work as they do in TVM, and it knows
    its kind ('float', 'bfloat', 'int', 'uint', 'bool', 'handle'), bits and lanes. bfloat16 counts
    as a float (``is_float``); ``is_bfloat`` tells it apart."""

    __slots__ = ()

    def __new__(cls, kind: str, bits: int, lanes: int = 1):
        base = "bool" if kind == "bool" else f"{kind}{bits}"
        text = base if lanes == 1 else f"{base}x{lanes}"
        obj = str.__new__(cls, text)
        _PARTS[text] = (kind, bits, lanes)
        return obj

    def __getnewargs__(self):
        return _PARTS[str(self)]

    def __repr__(self) -> str:
        return str.__str__(self)

    @property
    def kind(self) -> str:
        return _PARTS[str(self)][0]

    @property
    def bits(self) -> int:
        return _PARTS[str(self)][1]

    @property
    def lanes(self) -> int:
        return _PARTS[str(self)][2]

    @property
    def is_float(self) -> bool:
        return self.kind in ("float", "bfloat")

    @property
    def is_bfloat(self) -> bool:
        return self.kind == "bfloat"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def is_uint(self) -> bool:
        return self.kind == "uint"

    @property
    def is_integer(self) -> bool:
        """int, uint or bool: types with integer semantics."""
        return self.kind in ("int", "uint", "bool")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def is_handle(self) -> bool:
        return self.kind == "handle"

    @property
    def is_vector(self) -> bool:
        return self.lanes > 1

    @property
    def bytes(self) -> int:
        """Storage size of one lane; bool takes one byte, as in numpy."""
        return 1 if self.kind == "bool" else self.bits // 8

    @property
    def type_code(self) -> int:
        return {"int": INT, "uint": UINT, "float": FLOAT, "bfloat": BFLOAT, "handle": HANDLE, "bool": BOOL}[self.kind]

    def element_of(self) -> "DType":
        return self if self.lanes == 1 else DType(self.kind, self.bits, 1)

    def with_lanes(self, lanes: int) -> "DType":
        return self if self.lanes == lanes else DType(self.kind, self.bits, lanes)


_PARTS: dict[str, tuple[str, int, int]] = {}


@functools.lru_cache(maxsize=None)
def _parse(text: str) -> DType:
    m = _PATTERN.match(text)
    if not m:
        raise ValueError(f"unknown dtype {text!r}; expected e.g. 'float32', 'int8', 'uint8', 'bool', 'float32x4'")
    kind, bits, lanes = m.group(1), m.group(2), m.group(3)
    if kind == "bool":
        nbits = 1
    elif kind == "handle":
        nbits = 64
    else:
        nbits = int(bits) if bits else 32
    valid = {"float": (16, 32, 64), "bfloat": (16,), "int": (1, 8, 16, 32, 64), "uint": (1, 8, 16, 32, 64)}
    if kind in valid and nbits not in valid[kind]:
        raise ValueError(f"unknown dtype {text!r}: {kind} has widths {valid[kind]}")
    if kind == "uint" and nbits == 1:
        kind = "bool"
    if kind == "bfloat":
        _register_numpy_bfloat16()
    return DType(kind, nbits, int(lanes) if lanes else 1)


def dtype(value) -> DType:
    """Turn a string, numpy dtype or DType into a DType."""
    if type(value) is DType:
        return value
    if not isinstance(value, str):
        value = str(getattr(value, "name", value))
    return _parse(value)


def _register_numpy_bfloat16() -> None:
    """Make np.dtype("bfloat16") known (ml_dtypes registers it; onnx depends on ml_dtypes), so
    constants and references of a bfloat16 graph are numpy arrays like any other. Without it
    kiln still compiles bfloat16 kernels; numpy-side conversions then fail with ml_dtypes' name."""
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        pass


BOOL_T = DType("bool", 1)
INT32 = DType("int", 32)
INT64 = DType("int", 64)
FLOAT32 = DType("float", 32)
HANDLE_T = DType("handle", 64)
