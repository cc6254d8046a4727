"""Element-wise math: ``topi.exp(x)``, ``topi.sigmoid(x)``, ``topi.cast(x, "int8")``, ...

float32 ``exp``, ``tanh``, ``sigmoid`` and ``erf`` use the vectorizable polynomials of
``fast_math`` (about 1e-6 relative error, like onnxruntime's MLAS kernels): LLVM turns the libm
versions into one scalar call per vector lane, 15-40x slower. ``exact_exp`` and friends call libm.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.expr import const

from .fast_math import fast_erf_expr, fast_exp_expr, fast_sigmoid_expr, fast_tanh_expr


def _unary(name: str, fn):
    def op(x):
        return te.compute(x.shape, lambda *i: fn(x(*i)), name=f"T_{name}", tag="elemwise")

    op.__name__ = name
    op.__doc__ = f"Element-wise {name}."
    return op


def _sign(v):
    zero = const(0, v.dtype)
    return tir.if_then_else(v > zero, const(1, v.dtype), tir.if_then_else(v < zero, const(-1, v.dtype), zero))


exp = _unary("exp", fast_exp_expr)
exact_exp = _unary("exact_exp", tir.exp)
log = _unary("log", tir.log)
log2 = _unary("log2", tir.log2)
log10 = _unary("log10", tir.log10)
sqrt = _unary("sqrt", tir.sqrt)
rsqrt = _unary("rsqrt", lambda v: const(1.0, v.dtype) / tir.sqrt(v))
tanh = _unary("tanh", fast_tanh_expr)
sigmoid = _unary("sigmoid", fast_sigmoid_expr)
erf = _unary("erf", fast_erf_expr)
exact_tanh = _unary("exact_tanh", tir.tanh)
exact_sigmoid = _unary("exact_sigmoid", tir.sigmoid)
exact_erf = _unary("exact_erf", tir.erf)
sin = _unary("sin", tir.sin)
cos = _unary("cos", tir.cos)
tan = _unary("tan", tir.tan)
asin = _unary("asin", tir.asin)
acos = _unary("acos", tir.acos)
atan = _unary("atan", tir.atan)
sinh = _unary("sinh", tir.sinh)
cosh = _unary("cosh", tir.cosh)
floor = _unary("floor", tir.floor)
ceil = _unary("ceil", tir.ceil)
trunc = _unary("trunc", tir.trunc)
round = _unary("round", tir.round)  # noqa: A001 - halves to even, like numpy and ONNX
abs = _unary("abs", tir.abs)  # noqa: A001
negative = _unary("negative", lambda v: -v)
sign = _unary("sign", _sign)
reciprocal = _unary("reciprocal", lambda v: const(1, v.dtype) / v)
logical_not = _unary("logical_not", lambda v: tir.Not(v) if v.dtype.is_bool else v == const(0, v.dtype))
bitwise_not = _unary("bitwise_not", lambda v: ~v)
isnan = _unary("isnan", tir.isnan)
isinf = _unary("isinf", tir.isinf)
identity = _unary("identity", lambda v: v)


def cast(x, dtype):
    """x converted to dtype (floats to ints truncate toward zero, as C and numpy do)."""
    if not isinstance(x, te.Tensor):
        return tir.cast(x, dtype)
    return te.compute(x.shape, lambda *i: x(*i).astype(dtype), name="T_cast", tag="elemwise")


def full(shape, dtype, fill_value):
    """A tensor of shape filled with fill_value."""
    value = const(fill_value, dtype)
    return te.compute(tuple(shape), lambda *i: value, name="T_full", tag="elemwise")


def full_like(x, fill_value):
    return full(x.shape, x.dtype, fill_value)


def zeros_like(x):
    return full_like(x, 0)


def ones_like(x):
    return full_like(x, 1)
