"""Relay types: tensors with a static shape and a dtype, tuples of types, function types.

Types are values: two ``TensorType((1, 3), "float32")`` are equal (``==``) and hash alike,
unlike expressions, which compare by identity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class Type:
    """Base of relay types."""


@dataclass(frozen=True)
class TensorType(Type):
    """A tensor of a static ``shape`` (a tuple of ints) and a ``dtype`` name ("float32", "int64", "bool")."""

    shape: tuple
    dtype: str = "float32"

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", str(self.dtype))

    @property
    def concrete_shape(self) -> tuple:
        return self.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        if len(self.shape) == 1:
            dims += ","
        return f"Tensor[({dims}), {self.dtype}]"


@dataclass(frozen=True)
class TupleType(Type):
    """The type of a relay Tuple: one type per field."""

    fields: tuple

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))

    def __str__(self) -> str:
        return "(" + ", ".join(str(f) for f in self.fields) + ("," if len(self.fields) == 1 else "") + ")"


@dataclass(frozen=True)
class FuncType(Type):
    """The type of a Function: argument types and the result type."""

    arg_types: tuple
    ret_type: Type
    type_params: tuple = ()
    type_constraints: tuple = ()

    def __str__(self) -> str:
        return "fn (" + ", ".join(str(a) for a in self.arg_types) + f") -> {self.ret_type}"


def scalar_type(dtype: str) -> TensorType:
    return TensorType((), dtype)


def np_dtype(dtype: str) -> np.dtype:
    """numpy dtype for a relay dtype name."""
    return np.dtype("bool" if dtype == "bool" else dtype)


def dtype_of(array: np.ndarray) -> str:
    return "bool" if array.dtype == np.bool_ else str(array.dtype)
