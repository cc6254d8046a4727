"""Activation functions: relu, leaky_relu, clip, prelu, gelu, hard_sigmoid, hard_swish, softplus."""

from __future__ import annotations

from kiln import te, tir
from kiln.errors import ShapeError
from kiln.ir.expr import const

from ..utils import const_int


def _select_max(a, b):
    """a < b ? b : a: one vmaxps on x86 (tir.max is the NaN-propagating IEEE maximum, which
    LLVM expands to a compare-and-blend sequence). A NaN in a still comes out as NaN."""
    return tir.Select(a < b, b, a, a.dtype)


def _select_min(a, b):
    return tir.Select(b < a, b, a, a.dtype)


def relu(x):
    """max(x, 0); NaN stays NaN, like numpy and onnxruntime."""
    zero = const(0, x.dtype)
    return te.compute(x.shape, lambda *i: _select_max(x(*i), zero), name="T_relu", tag="elemwise")


def leaky_relu(x, alpha=0.01):
    """x if x > 0 else alpha * x."""
    a = const(alpha, x.dtype)
    zero = const(0, x.dtype)
    return te.compute(x.shape, lambda *i: tir.Select(x(*i) > zero, x(*i), x(*i) * a, x.dtype),
                      name="T_leaky_relu", tag="elemwise")


def clip(x, a_min, a_max):
    """min(max(x, a_min), a_max)."""
    lo, hi = const(a_min, x.dtype), const(a_max, x.dtype)
    return te.compute(x.shape, lambda *i: _select_min(_select_max(x(*i), lo), hi), name="T_clip", tag="elemwise")


def prelu(x, slope, axis=1):
    """x if x > 0 else slope[c] * x, with c the index along axis."""
    axis = axis % len(x.shape)
    if len(slope.shape) != 1 or const_int(slope.shape[0]) != const_int(x.shape[axis]):
        raise ShapeError(f"prelu: input 'slope' has shape {tuple(map(str, slope.shape))}; expected "
                         f"({x.shape[axis]},) to match axis {axis} of 'x'")
    zero = const(0, x.dtype)
    return te.compute(x.shape, lambda *i: tir.Select(x(*i) > zero, x(*i), x(*i) * slope[i[axis]], x.dtype),
                      name="T_prelu", tag="broadcast")


def gelu(x, approximate="none"):
    """x * Phi(x): with erf or the tanh approximation (both through topi's vectorizable fast_math)."""
    from ..fast_math import fast_erf_expr, fast_tanh_expr

    def f(v):
        half, one = const(0.5, x.dtype), const(1.0, x.dtype)
        if approximate == "tanh":
            inner = const(0.7978845608028654, x.dtype) * (v + const(0.044715, x.dtype) * v * v * v)
            return half * v * (one + fast_tanh_expr(inner))
        return half * v * (one + fast_erf_expr(v * const(0.7071067811865476, x.dtype)))

    return te.compute(x.shape, lambda *i: f(x(*i)), name="T_gelu", tag="elemwise")


def hard_sigmoid(x, alpha=0.2, beta=0.5):
    """clip(alpha * x + beta, 0, 1)."""
    a, b = const(alpha, x.dtype), const(beta, x.dtype)
    zero, one = const(0, x.dtype), const(1, x.dtype)
    return te.compute(x.shape, lambda *i: tir.min(tir.max(x(*i) * a + b, zero), one),
                      name="T_hard_sigmoid", tag="elemwise")


def hard_swish(x):
    """x * relu6(x + 3) / 6."""
    three, six, zero = const(3, x.dtype), const(6, x.dtype), const(0, x.dtype)
    return te.compute(x.shape, lambda *i: x(*i) * tir.min(tir.max(x(*i) + three, zero), six) / six,
                      name="T_hard_swish", tag="elemwise")


def softplus(x):
    """log(1 + exp(x)), computed without overflow for large x."""
    from ..fast_math import fast_exp_expr

    zero, one = const(0, x.dtype), const(1, x.dtype)
    return te.compute(x.shape, lambda *i: tir.max(x(*i), zero) + tir.log(one + fast_exp_expr(-tir.abs(x(*i)))),
                      name="T_softplus", tag="elemwise")
