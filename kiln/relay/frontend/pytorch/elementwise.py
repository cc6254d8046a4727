"""aten elementwise ops: arithmetic (tensors or Python numbers), activations, clamps."""

from __future__ import annotations

import math
import operator

import numpy as np

from ...expr import Constant, RelayExpr, const
from ...op import nn, tensor
from ...op import transform as tf


def _is_expr(v) -> bool:
    return isinstance(v, RelayExpr)


def _operands(ctx, a, b):
    """Both operands as relay expressions of one dtype, promoted as torch does for these cases:
    a Python number takes the tensor's dtype, int meets float as float, and a 0-d tensor
    takes the other operand's dtype."""
    if not _is_expr(a):
        a = const(np.asarray(a), ctx.dtype_of(b)) if _is_expr(b) else const(a)
    if not _is_expr(b):
        b = const(np.asarray(b), ctx.dtype_of(a))
    da, db = ctx.dtype_of(a), ctx.dtype_of(b)
    if da == db:
        return a, b
    fa, fb = da.startswith("float"), db.startswith("float")
    if fa != fb:
        return (a, tf.cast(b, da)) if fa else (tf.cast(a, db), b)
    if ctx.shape_of(b) == ():
        return a, tf.cast(b, da)
    return tf.cast(a, db), b


def _binary(relay_fn, py_fn):
    def convert(ctx, ins):
        a, b = ins[0], ins[1]
        alpha = ins[2] if len(ins) > 2 and not isinstance(ins[2], str) else 1
        if not _is_expr(a) and not _is_expr(b):
            return py_fn(a, b * alpha if alpha != 1 else b)
        a, b = _operands(ctx, a, b)
        if alpha is not None and alpha != 1:
            b = tensor.multiply(b, const(np.asarray(alpha), ctx.dtype_of(b)))
        return relay_fn(a, b)
    return convert


def _rsub(ctx, ins):
    a, b, alpha = ins
    return _binary(tensor.subtract, operator.sub)(ctx, [b, a if alpha == 1 else _scaled(ctx, a, alpha)])


def _scaled(ctx, a, alpha):
    return a * alpha if not _is_expr(a) else tensor.multiply(a, const(np.asarray(alpha), ctx.dtype_of(a)))


def _div(ctx, ins):
    a, b = ins[0], ins[1]
    mode = ins[2] if len(ins) > 2 else None
    if not _is_expr(a) and not _is_expr(b):
        return {None: operator.truediv, "floor": operator.floordiv}.get(mode, lambda x, y: int(x / y))(a, b)
    a, b = _operands(ctx, a, b)
    out = tensor.divide(a, b)
    if mode == "floor":
        out = tensor.floor(out) if ctx.dtype_of(a).startswith("float") else tensor.floor_divide(a, b)
    elif mode == "trunc" and ctx.dtype_of(a).startswith("float"):
        out = tensor.multiply(tensor.sign(out), tensor.floor(tensor.abs(out)))
    return out


def _floor_divide(ctx, ins):
    return _div(ctx, [ins[0], ins[1], "floor"])


def _unary(fn):
    return lambda ctx, ins: fn(ins[0])


def _c(ctx, x, value):
    return const(value, ctx.dtype_of(x))


def _gelu(ctx, ins):
    x = ins[0]
    if len(ins) > 1 and ins[1] == "tanh":
        inner = tensor.multiply(_c(ctx, x, math.sqrt(2 / math.pi)),
                                tensor.add(x, tensor.multiply(_c(ctx, x, 0.044715),
                                                              tensor.multiply(x, tensor.multiply(x, x)))))
        return tensor.multiply(tensor.multiply(_c(ctx, x, 0.5), x), tensor.add(_c(ctx, x, 1.0), tensor.tanh(inner)))
    cdf = tensor.add(_c(ctx, x, 0.5), tensor.multiply(_c(ctx, x, 0.5),
                                                     tensor.erf(tensor.multiply(x, _c(ctx, x, 1 / math.sqrt(2))))))
    return tensor.multiply(x, cdf)


def _silu(ctx, ins):
    return tensor.multiply(ins[0], tensor.sigmoid(ins[0]))


def _clamp(ctx, ins):
    x, lo, hi = ins[0], ins[1], ins[2]
    if isinstance(lo, Constant):
        lo = float(lo.data)
    if isinstance(hi, Constant):
        hi = float(hi.data)
    if _is_expr(lo) or _is_expr(hi):
        ctx.fail("clamp bounds computed at run time are not supported")
    return tensor.clip(x, -math.inf if lo is None else float(lo), math.inf if hi is None else float(hi))


def _relu6(ctx, ins):
    return tensor.clip(ins[0], 0.0, 6.0)


def _hardsigmoid(ctx, ins):
    x = ins[0]
    return tensor.clip(tensor.add(tensor.multiply(x, _c(ctx, x, 1 / 6)), _c(ctx, x, 0.5)), 0.0, 1.0)


def _hardswish(ctx, ins):
    return tensor.multiply(ins[0], _hardsigmoid(ctx, ins))


def _leaky_relu(ctx, ins):
    return nn.leaky_relu(ins[0], float(ins[1]))


def _to_python(kind):
    def convert(ctx, ins):
        v = ins[0]
        if isinstance(v, Constant):
            return kind(v.data)
        if _is_expr(v):
            ctx.fail("a tensor computed at run time is used as a Python number; kiln needs static shapes")
        return kind(v)
    return convert


CONVERTERS = {
    "aten::add": _binary(tensor.add, operator.add), "aten::sub": _binary(tensor.subtract, operator.sub),
    "aten::mul": _binary(tensor.multiply, operator.mul), "aten::div": _div, "aten::floor_divide": _floor_divide,
    "aten::floordiv": _floor_divide, "aten::rsub": _rsub, "aten::pow": _binary(tensor.power, operator.pow),
    "aten::maximum": _binary(tensor.maximum, max), "aten::minimum": _binary(tensor.minimum, min),
    "aten::relu": _unary(nn.relu), "aten::sigmoid": _unary(tensor.sigmoid), "aten::tanh": _unary(tensor.tanh),
    "aten::exp": _unary(tensor.exp), "aten::log": _unary(tensor.log), "aten::sqrt": _unary(tensor.sqrt),
    "aten::rsqrt": _unary(tensor.rsqrt), "aten::neg": _unary(tensor.negative), "aten::abs": _unary(tensor.abs),
    "aten::erf": _unary(tensor.erf), "aten::gelu": _gelu, "aten::silu": _silu, "aten::clamp": _clamp,
    "aten::hardtanh": _clamp, "aten::relu6": _relu6, "aten::hardsigmoid": _hardsigmoid,
    "aten::hardswish": _hardswish, "aten::leaky_relu": _leaky_relu,
    "aten::Int": _to_python(int), "aten::Float": _to_python(float), "aten::ScalarImplicit": _to_python(float),
}
