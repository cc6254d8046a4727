"""Rewrite training-time ops for inference: ``batch_norm(x)[0]`` becomes ``x * scale + shift``
with per-channel scale/shift computed from the statistics (FoldConstant then folds them when
the statistics are constants), and ``dropout(x)[0]`` becomes ``x``.
"""

from __future__ import annotations

from ..expr import Call, TupleGetItem, const
from ..op import nn_norm, tensor, transform
from ..op.registry import OpDef
from ..visitor import ExprMutator
from .infer_type import infer


def _per_channel(vec, ndim: int, axis: int):
    """Shape a (C,) vector so it broadcasts along ``axis`` of an ndim-d tensor."""
    trailing = ndim - axis - 1
    return transform.expand_dims(vec, 1, trailing) if trailing else vec


def _expand_batch_norm(call: Call):
    data, gamma, beta, mean, var = call.args
    a = call.attrs
    ndim = infer(data).checked_type.ndim
    axis = a.axis % ndim
    dtype = data.checked_type.dtype
    inv_std = tensor.rsqrt(tensor.add(var, const(a.epsilon, dtype)))
    scale = tensor.multiply(inv_std, gamma) if a.scale else inv_std
    shift = tensor.negative(tensor.multiply(mean, scale))
    if a.center:
        shift = tensor.add(shift, beta)
    out = tensor.multiply(data, _per_channel(scale, ndim, axis))
    return tensor.add(out, _per_channel(shift, ndim, axis))


class _Simplify(ExprMutator):
    def visit_TupleGetItem(self, t):
        value = self.visit(t.tuple_value)
        if isinstance(value, Call) and isinstance(value.op, OpDef) and t.index == 0:
            if value.op is nn_norm.BATCH_NORM:
                return _expand_batch_norm(value)
            if value.op is nn_norm.DROPOUT:
                return value.args[0]
        return t if value is t.tuple_value else TupleGetItem(value, t.index)


def simplify_inference(expr):
    return _Simplify().visit(expr)
