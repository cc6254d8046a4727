"""ONNX ops that sequence and transformer exports use: GatherND, ScatterND, ScatterElements
(and the old Scatter), CumSum, Trilu, InstanceNormalization, GroupNormalization."""

from __future__ import annotations

import numpy as np

from ...expr import const
from ...op import reduce, scatter, tensor
from ...op import transform as tf


def _nd_indices(ctx, ins, batch_dims: int = 0):
    """GatherND/ScatterND indices known at import, checked against the data's leading axes."""
    from .tensor import constant_indices
    shape = ctx.shape_of(ins[0])
    if not 0 <= batch_dims < len(shape):
        ctx.fail(f"attribute batch_dims={batch_dims} must be in [0, {len(shape)}) for a {len(shape)}-d input")
    k = ctx.shape_of(ins[1])[-1] if ctx.shape_of(ins[1]) else 0
    return constant_indices(ctx, ins[1], shape[batch_dims:batch_dims + k], "indices")


def _gather_nd(ctx, ins, attrs):
    batch_dims = attrs.get("batch_dims", 0)
    return scatter.gather_nd(ins[0], _nd_indices(ctx, ins, batch_dims), batch_dims)


def _reduction(ctx, attrs) -> str:
    red = attrs.get("reduction", "none")
    if red not in scatter.REDUCTIONS:
        ctx.fail(f"attribute reduction={red!r} is not one of {list(scatter.REDUCTIONS)}; "
                 "the file is malformed or newer than kiln")
    return red


def _scatter_nd(ctx, ins, attrs):
    return scatter.scatter_nd(ins[0], _nd_indices(ctx, ins), ins[2], _reduction(ctx, attrs))


def _scatter_elements(ctx, ins, attrs):
    rank = len(ctx.shape_of(ins[0]))
    axis = attrs.get("axis", 0)
    if not -rank <= axis < rank:
        ctx.fail(f"attribute axis={axis} is out of range for a {rank}-d input")
    from .tensor import constant_indices
    idx = constant_indices(ctx, ins[1], ctx.shape_of(ins[0])[axis], "indices")
    return scatter.scatter_elements(ins[0], idx, ins[2], axis % rank, _reduction(ctx, attrs))


def _scalar_input(ctx, expr, what: str) -> int:
    value = np.asarray(ctx.value(expr, what))
    if value.size != 1:
        ctx.fail(f"{what} must hold one value, got shape {list(value.shape)}")
    return int(value.reshape(()))


def _cumsum(ctx, ins, attrs):
    rank = len(ctx.shape_of(ins[0]))
    axis = _scalar_input(ctx, ins[1], "input 'axis'")
    if not -rank <= axis < rank:
        ctx.fail(f"input 'axis'={axis} is out of range for a {rank}-d input")
    return scatter.cumsum(ins[0], axis % rank, bool(attrs.get("exclusive", 0)), bool(attrs.get("reverse", 0)))


def _trilu(ctx, ins, attrs):
    x = ins[0]
    shape = ctx.shape_of(x)
    if len(shape) < 2:
        ctx.fail(f"the input must have at least 2 dims, got shape {list(shape)}")
    k = _scalar_input(ctx, ins[1], "input 'k'") if len(ins) > 1 and ins[1] is not None else 0
    rows, cols = np.arange(shape[-2])[:, None], np.arange(shape[-1])[None, :]
    keep = (cols - rows >= k) if attrs.get("upper", 1) else (cols - rows <= k)
    zero = const(np.zeros((), ctx.type_of(x).dtype))
    return tensor.where(const(keep), x, zero)


def _normalize(ctx, x, axes, eps):
    """(x - mean) / sqrt(var + eps) over ``axes``, the statistics in the input's dtype."""
    dtype = ctx.type_of(x).dtype
    mean = reduce.mean(x, axes, keepdims=True)
    centered = tensor.subtract(x, mean)
    var = reduce.mean(tensor.multiply(centered, centered), axes, keepdims=True)
    return tensor.multiply(centered, tensor.rsqrt(tensor.add(var, const(eps, dtype))))


def _instance_norm(ctx, ins, attrs):
    x, scale, bias = ins[:3]
    shape = ctx.shape_of(x)
    if len(shape) < 3:
        ctx.fail(f"the input must be N x C x D1 ..., got shape {list(shape)}")
    per_channel = (-1,) + (1,) * (len(shape) - 2)
    y = _normalize(ctx, x, tuple(range(2, len(shape))), attrs.get("epsilon", 1e-5))
    return tensor.add(tensor.multiply(y, tf.reshape(scale, per_channel)), tf.reshape(bias, per_channel))


def _group_norm(ctx, ins, attrs):
    x, scale, bias = ins[:3]
    shape = ctx.shape_of(x)
    if "num_groups" not in attrs:
        ctx.fail("attribute num_groups is required")
    groups = int(attrs["num_groups"])
    if len(shape) < 3 or groups < 1 or shape[1] % groups:
        ctx.fail(f"num_groups={groups} must be positive and divide the channels of the N x C x ... input "
                 f"{list(shape)}")
    n, c = shape[0], shape[1]
    grouped = tf.reshape(x, (n, groups, -1))
    y = tf.reshape(_normalize(ctx, grouped, (2,), attrs.get("epsilon", 1e-5)), shape)
    per_channel = (-1,) + (1,) * (len(shape) - 2)
    scale_shape = ctx.shape_of(scale)
    if ctx.opset < 21 and tuple(scale_shape) == (groups,) and groups != c:
        # opset 18 gives scale and bias per group
        scale = tf.reshape(tf.broadcast_to(tf.reshape(scale, (groups, 1)), (groups, c // groups)), (c,))
        bias = tf.reshape(tf.broadcast_to(tf.reshape(bias, (groups, 1)), (groups, c // groups)), (c,))
    return tensor.add(tensor.multiply(y, tf.reshape(scale, per_channel)), tf.reshape(bias, per_channel))


CONVERTERS = {
    "GatherND": _gather_nd, "ScatterND": _scatter_nd, "ScatterElements": _scatter_elements,
    "Scatter": _scatter_elements, "CumSum": _cumsum, "Trilu": _trilu,
    "InstanceNormalization": _instance_norm, "GroupNormalization": _group_norm,
}
