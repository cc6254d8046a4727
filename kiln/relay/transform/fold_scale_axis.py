"""Fold a per-output-channel constant scale into the weights of the conv2d/dense before it:

    multiply(nn.conv2d(x, W), S)  ->  nn.conv2d(x, W * S)      (S varies only along the channels)

This is what makes SimplifyInference + FoldConstant + FoldScaleAxis turn batch norm into
"conv with folded weights, then add a bias". It applies only when W and S are constants and
the conv has no other consumer (otherwise the unscaled result is still needed).
"""

from __future__ import annotations

import numpy as np

from ..analysis import users
from ..expr import Call, Constant, Function, const
from ..op import nn as nn_ops
from ..op import tensor
from ..visitor import DataflowRewriter
from .infer_type import infer


def _channel_scale(scale: np.ndarray, out_shape: tuple, axis: int):
    """``scale`` as a (C,) vector if it broadcasts along ``axis`` only, else None."""
    if scale.ndim > len(out_shape):
        return None
    full = (1,) * (len(out_shape) - scale.ndim) + scale.shape
    if any(d != 1 for i, d in enumerate(full) if i != axis) or full[axis] not in (1, out_shape[axis]):
        return None
    return np.broadcast_to(scale.reshape(-1), (out_shape[axis],))


def _fold(call: Call, scale: np.ndarray):
    """The producer call with its weight scaled, or None if it cannot absorb ``scale``."""
    weight = call.args[1]
    if not isinstance(weight, Constant):
        return None
    out_shape = infer(call).checked_type.shape
    if call.op is nn_ops.CONV2D:
        a = call.attrs
        vec = _channel_scale(scale, out_shape, (a.out_layout or a.data_layout).index("C"))
        o_axis = a.kernel_layout.index("O")
    elif call.op is nn_ops.DENSE:
        vec = _channel_scale(scale, out_shape, len(out_shape) - 1)
        o_axis = 0
    else:
        return None
    if vec is None:
        return None
    shape = [1] * weight.data.ndim
    shape[o_axis] = -1
    new_w = (weight.data * vec.reshape(shape).astype(weight.data.dtype)).astype(weight.data.dtype)
    return Call(call.op, [call.args[0], const(new_w)], call.attrs)


class _FoldScale(DataflowRewriter):
    def visit_Call(self, call):
        new = super().visit_Call(call)
        if call.op is not tensor.MULTIPLY:
            return new
        for i in (0, 1):
            producer, scale = call.args[i], call.args[1 - i]
            if (isinstance(producer, Call) and isinstance(scale, Constant)
                    and producer.op in (nn_ops.CONV2D, nn_ops.DENSE) and len(self.consumers.get(producer, ())) == 1
                    and scale.data.dtype == infer(producer).checked_type.dtype):
                folded = _fold(self.visit(producer), scale.data)
                if folded is not None:
                    return folded
        return new


def fold_scale_axis(func: Function) -> Function:
    return _FoldScale(users(func.body)).visit(func)
