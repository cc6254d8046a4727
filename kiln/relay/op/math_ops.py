"""More elementwise ops (the ONNX node tests need them): tan, inverse and hyperbolic trigonometry,
isinf, bitwise logic and shifts on integers."""

from __future__ import annotations

import numpy as np

from ..expr import Call
from ..ty import TensorType
from .registry import OpDef, OpPattern, RelCtx, broadcast_shapes, identity_rel

ELEMWISE, BROADCAST = OpPattern.ELEMWISE, OpPattern.BROADCAST


def _unary(name: str, fn, doc: str) -> OpDef:
    return OpDef(name, ("data",), {}, identity_rel, ELEMWISE,
                 lambda attrs, x: np.asarray(fn(x)).astype(x.dtype, copy=False), doc=doc)


def _int_rel(ctx: RelCtx) -> TensorType:
    t = ctx.tensor(0)
    if not t.dtype.startswith(("int", "uint", "bool")):
        ctx.fail(f"input 'data' must have an integer dtype, got {t.dtype}")
    return t


def _int_binary_rel(ctx: RelCtx) -> TensorType:
    dtype = ctx.same_dtype(0, 1)
    if not dtype.startswith(("int", "uint", "bool")):
        ctx.fail(f"inputs 'lhs' and 'rhs' must have an integer dtype, got {dtype}")
    return TensorType(broadcast_shapes(ctx, [ctx.tensor(0).shape, ctx.tensor(1).shape]), dtype)


def _int_binary(name: str, fn, doc: str) -> OpDef:
    return OpDef(name, ("lhs", "rhs"), {}, _int_binary_rel, BROADCAST,
                 lambda attrs, a, b: np.asarray(fn(a, b)).astype(a.dtype, copy=False), doc=doc)


def _shift(a, b, left: bool):
    # ONNX BitShift is on unsigned types; a shift by the width or more gives 0 (C leaves it undefined)
    width = a.dtype.itemsize * 8
    with np.errstate(over="ignore"):
        out = np.left_shift(a, b) if left else np.right_shift(a, b)
    return np.where(b >= width, 0, out)


TAN = _unary("tan", np.tan, "tangent")
ASIN = _unary("asin", np.arcsin, "inverse sine")
ACOS = _unary("acos", np.arccos, "inverse cosine")
ATAN = _unary("atan", np.arctan, "inverse tangent")
SINH = _unary("sinh", np.sinh, "hyperbolic sine")
COSH = _unary("cosh", np.cosh, "hyperbolic cosine")
ISINF = OpDef("isinf", ("data",), {}, lambda ctx: TensorType(ctx.tensor(0).shape, "bool"), ELEMWISE,
              lambda attrs, x: np.isinf(x), doc="x is +inf or -inf")
BITWISE_NOT = OpDef("bitwise_not", ("data",), {}, _int_rel, ELEMWISE, lambda attrs, x: np.invert(x),
                    doc="~x (integers)")
BITWISE_AND = _int_binary("bitwise_and", np.bitwise_and, "lhs & rhs (integers)")
BITWISE_OR = _int_binary("bitwise_or", np.bitwise_or, "lhs | rhs (integers)")
BITWISE_XOR = _int_binary("bitwise_xor", np.bitwise_xor, "lhs ^ rhs (integers)")
LEFT_SHIFT = _int_binary("left_shift", lambda a, b: _shift(a, b, True), "lhs << rhs (0 past the width)")
RIGHT_SHIFT = _int_binary("right_shift", lambda a, b: _shift(a, b, False), "lhs >> rhs (0 past the width)")



def _reinterpret_rel(ctx: RelCtx) -> TensorType:
    t = ctx.tensor(0)
    if np.dtype(t.dtype).itemsize != np.dtype(ctx.attrs.dtype).itemsize:
        ctx.fail(f"reinterpret {t.dtype} as {ctx.attrs.dtype}: the element sizes differ")
    return TensorType(t.shape, ctx.attrs.dtype)


REINTERPRET = OpDef("reinterpret", ("data",), {"dtype": "int32"}, _reinterpret_rel, ELEMWISE,
                    lambda attrs, x: x.view(attrs.dtype), doc="the same bits read as another dtype of one width")

OPS = [REINTERPRET, TAN, ASIN, ACOS, ATAN, SINH, COSH, ISINF, BITWISE_NOT, BITWISE_AND, BITWISE_OR, BITWISE_XOR,
       LEFT_SHIFT, RIGHT_SHIFT]


def tan(data) -> Call: return TAN(data)
def asin(data) -> Call: return ASIN(data)
def acos(data) -> Call: return ACOS(data)
def atan(data) -> Call: return ATAN(data)
def sinh(data) -> Call: return SINH(data)
def cosh(data) -> Call: return COSH(data)
def isinf(data) -> Call: return ISINF(data)
def bitwise_not(data) -> Call: return BITWISE_NOT(data)
def bitwise_and(lhs, rhs) -> Call: return BITWISE_AND(lhs, rhs)
def bitwise_or(lhs, rhs) -> Call: return BITWISE_OR(lhs, rhs)
def bitwise_xor(lhs, rhs) -> Call: return BITWISE_XOR(lhs, rhs)
def left_shift(lhs, rhs) -> Call: return LEFT_SHIFT(lhs, rhs)
def right_shift(lhs, rhs) -> Call: return RIGHT_SHIFT(lhs, rhs)
def reinterpret(data, dtype) -> Call: return REINTERPRET(data, dtype=str(dtype))
