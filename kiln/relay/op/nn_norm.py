"""Normalization and probability ops: batch_norm, layer_norm, softmax, log_softmax, dropout."""

from __future__ import annotations

import numpy as np

from ..expr import TupleWrapper
from ..ty import TensorType, TupleType
from .registry import OpDef, OpPattern, RelCtx


def _channel_shape(x_ndim: int, axis: int) -> tuple:
    return (-1,) + (1,) * (x_ndim - axis - 1)


def _bn_rel(ctx: RelCtx):
    data = ctx.tensor(0)
    axis = ctx.axis(ctx.attrs.axis, data.ndim)
    c = data.shape[axis]
    for i in range(1, 5):
        t = ctx.ndim(i, 1, "channels")
        if t.shape[0] != c:
            ctx.fail(f"input {ctx.op.inputs[i]!r} has {t.shape[0]} values but 'data' {data.shape} has {c} channels on axis {axis}")
    vec = TensorType((c,), data.dtype)
    return TupleType([data, vec, vec])


def _bn_ref(a, x, gamma, beta, mean, var):
    axis = a.axis % x.ndim
    shape = _channel_shape(x.ndim, axis)
    scale = (gamma if a.scale else np.ones_like(gamma)).astype(np.float64) / np.sqrt(var.astype(np.float64) + a.epsilon)
    shift = (beta if a.center else np.zeros_like(beta)) - mean * scale
    out = x * scale.reshape(shape) + shift.reshape(shape)
    return out.astype(x.dtype), mean, var


BATCH_NORM = OpDef("nn.batch_norm", ("data", "gamma", "beta", "moving_mean", "moving_var"),
                   {"axis": 1, "epsilon": 1e-5, "center": True, "scale": True}, _bn_rel, OpPattern.OPAQUE, _bn_ref,
                   num_outputs=3, doc="inference batch norm; outputs (normalized, mean, var)")


def _ln_rel(ctx: RelCtx):
    data = ctx.tensor(0)
    axis = ctx.axis(ctx.attrs.axis, data.ndim)
    for i in (1, 2):
        t = ctx.ndim(i, 1, "features")
        if t.shape[0] != data.shape[axis]:
            ctx.fail(f"input {ctx.op.inputs[i]!r} has {t.shape[0]} values; axis {axis} of 'data' has {data.shape[axis]}")
    return data


def _ln_ref(a, x, gamma, beta):
    axis = a.axis % x.ndim
    xd = x.astype(np.float64)
    mean = xd.mean(axis=axis, keepdims=True)
    var = ((xd - mean) ** 2).mean(axis=axis, keepdims=True)
    out = (xd - mean) / np.sqrt(var + a.epsilon)
    shape = _channel_shape(x.ndim, axis)
    if a.scale:
        out = out * gamma.reshape(shape)
    if a.center:
        out = out + beta.reshape(shape)
    return out.astype(x.dtype)


LAYER_NORM = OpDef("nn.layer_norm", ("data", "gamma", "beta"), {"axis": -1, "epsilon": 1e-5, "center": True,
                                                               "scale": True},
                   _ln_rel, OpPattern.OPAQUE, _ln_ref, doc="normalize over one axis, then scale and shift")


def _softmax_rel(ctx: RelCtx):
    data = ctx.tensor(0)
    ctx.axis(ctx.attrs.axis, data.ndim)
    return data


def _softmax_ref(a, x):
    xd = x.astype(np.float64)
    e = np.exp(xd - xd.max(axis=a.axis, keepdims=True))
    return (e / e.sum(axis=a.axis, keepdims=True)).astype(x.dtype)


def _log_softmax_ref(a, x):
    xd = x.astype(np.float64)
    shifted = xd - xd.max(axis=a.axis, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=a.axis, keepdims=True))).astype(x.dtype)


SOFTMAX = OpDef("nn.softmax", ("data",), {"axis": -1}, _softmax_rel, OpPattern.OPAQUE, _softmax_ref,
                doc="exp(x) / sum(exp(x)) along axis")
LOG_SOFTMAX = OpDef("nn.log_softmax", ("data",), {"axis": -1}, _softmax_rel, OpPattern.OPAQUE, _log_softmax_ref,
                    doc="log(softmax(x)) along axis, computed stably")


def _dropout_rel(ctx: RelCtx):
    data = ctx.tensor(0)
    return TupleType([data, data])


DROPOUT = OpDef("nn.dropout", ("data",), {"rate": 0.5}, _dropout_rel, OpPattern.OPAQUE,
                lambda a, x: (x, np.ones_like(x)), num_outputs=2,
                doc="identity at inference; outputs (data, mask). SimplifyInference removes it.")

OPS = [BATCH_NORM, LAYER_NORM, SOFTMAX, LOG_SOFTMAX, DROPOUT]


def batch_norm(data, gamma, beta, moving_mean, moving_var, axis=1, epsilon=1e-5, center=True, scale=True):
    """Batch norm with running statistics; returns a TupleWrapper: ``bn[0]`` is the output."""
    return BATCH_NORM(data, gamma, beta, moving_mean, moving_var, axis=int(axis), epsilon=float(epsilon),
                      center=bool(center), scale=bool(scale))


def layer_norm(data, gamma, beta, axis=-1, epsilon=1e-5, center=True, scale=True):
    return LAYER_NORM(data, gamma, beta, axis=int(axis), epsilon=float(epsilon), center=bool(center),
                      scale=bool(scale))


def softmax(data, axis=-1):
    return SOFTMAX(data, axis=int(axis))


def log_softmax(data, axis=-1):
    return LOG_SOFTMAX(data, axis=int(axis))


def dropout_raw(data, rate=0.5) -> TupleWrapper:
    return DROPOUT(data, rate=float(rate))


def dropout(data, rate=0.5):
    """Dropout; at inference this is the identity (the output is field 0 of ``nn.dropout``)."""
    return dropout_raw(data, rate)[0]
