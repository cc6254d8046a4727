"""ONNX data-movement and shape ops: Reshape, Transpose, Concat, Split, Slice, Gather, Squeeze,
Unsqueeze, Expand, Pad, Tile, Shape, Size, Constant, ConstantOfShape, Range."""

from __future__ import annotations

import numpy as np

from ...expr import const
from ...op import nn as nn_ops
from ...op import transform as tf


def constant_indices(ctx, idx, sizes, what: str):
    """Indices known at import checked against ``sizes`` (one size, or one per entry of the last
    axis for GatherND/ScatterND), negative ones counted from the end: kiln's gather and scatter
    kernels do not check them, so an out-of-range constant would read or write outside the
    tensor at run time. Indices computed at run time pass as they are."""
    from ...expr import Constant
    if not isinstance(idx, Constant) or np.asarray(idx.data).dtype.kind not in "iu":
        return idx
    v = np.asarray(idx.data).astype(np.int64)
    n = np.asarray(sizes, dtype=np.int64)
    if n.ndim and (v.ndim == 0 or v.shape[-1] != n.size):
        return idx  # the op's own shape check names this
    bad = (v < -n) | (v >= n)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        ctx.fail(f"{what} hold {int(v[where])} at {list(where)}, outside the data's "
                 f"{'sizes ' + str(n.tolist()) if n.ndim else 'size ' + str(int(n))} (ONNX makes an index out of "
                 "range an error); the file is damaged")
    return const(np.where(v < 0, v + n, v).astype(np.asarray(idx.data).dtype))


def _ints(ctx, x, what):
    return [int(v) for v in np.asarray(ctx.value(x, what)).reshape(-1)]


def _reshape(ctx, ins, attrs):
    shape = _ints(ctx, ins[1], "shape")
    in_shape = ctx.shape_of(ins[0])
    if not attrs.get("allowzero", 0):
        # ONNX 0 copies the input dim, like relay's reshape code 0
        return tf.reshape(ins[0], shape)
    if 0 in shape and -1 in shape:
        ctx.fail(f"allowzero=1 with both 0 and -1 in shape {shape} is invalid ONNX")
    if 0 in shape:
        # allowzero: 0 is a real zero-size dim, which relay's reshape codes cannot say; the
        # result has no elements, so it does not depend on the input.
        if int(np.prod(in_shape)) != 0:
            ctx.fail(f"cannot reshape {in_shape} into {shape}: element counts differ")
        return const(np.zeros(ctx.allocation(shape, ctx.type_of(ins[0]).dtype), dtype=ctx.type_of(ins[0]).dtype))
    return tf.reshape(ins[0], shape)


def _transpose(ctx, ins, attrs):
    return tf.transpose(ins[0], attrs.get("perm"))


def _concat(ctx, ins, attrs):
    return tf.concatenate([x for x in ins if x is not None], attrs["axis"])


def _split(ctx, ins, attrs):
    x = ins[0]
    axis = attrs.get("axis", 0)
    size = ctx.shape_of(x)[axis]
    if len(ins) > 1 and ins[1] is not None:
        parts = _ints(ctx, ins[1], "split")
    elif "split" in attrs:
        parts = list(attrs["split"])
    else:
        n = attrs.get("num_outputs", len(ctx.node.output))
        chunk = -(-size // n)  # opset 18: the last chunk may be smaller
        parts = [chunk] * (n - 1) + [size - chunk * (n - 1)]
    indices = list(np.cumsum(parts)[:-1])
    return tf.split(x, indices, axis)


def _slice(ctx, ins, attrs):
    x = ins[0]
    if ctx.opset < 10:  # starts/ends/axes were attributes
        return tf.strided_slice(x, attrs["starts"], attrs["ends"], None,
                                axes=[a % len(ctx.shape_of(x)) for a in attrs.get("axes", range(len(attrs["starts"])))])
    starts = _ints(ctx, ins[1], "starts")
    ends = _ints(ctx, ins[2], "ends")
    ndim = len(ctx.shape_of(x))
    axes = _ints(ctx, ins[3], "axes") if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = _ints(ctx, ins[4], "steps") if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    return tf.strided_slice(x, starts, ends, steps, axes=[a % ndim for a in axes])


def _gather(ctx, ins, attrs):
    x, idx = ins
    axis = attrs.get("axis", 0)
    shape = ctx.shape_of(x)
    if not -len(shape) <= axis < len(shape):
        ctx.fail(f"attribute axis={axis} is out of range for a {len(shape)}-d input")
    idx = constant_indices(ctx, idx, shape[axis], "indices")
    return tf.take(x, idx, axis=axis, mode="wrap")  # wrap makes negative indices count from the end


def _gather_elements(ctx, ins, attrs):
    shape = ctx.shape_of(ins[0])
    axis = attrs.get("axis", 0)
    if not -len(shape) <= axis < len(shape):
        ctx.fail(f"attribute axis={axis} is out of range for a {len(shape)}-d input")
    return tf.gather(ins[0], axis % len(shape), constant_indices(ctx, ins[1], shape[axis], "indices"))


def _axes_arg(ctx, ins, attrs):
    if len(ins) > 1 and ins[1] is not None:
        return _ints(ctx, ins[1], "axes")
    return attrs.get("axes")


def _squeeze(ctx, ins, attrs):
    axes = _axes_arg(ctx, ins, attrs)
    ndim = len(ctx.shape_of(ins[0]))
    return tf.squeeze(ins[0], None if axes is None else [a % ndim for a in axes])


def _unsqueeze(ctx, ins, attrs):
    shape = list(ctx.shape_of(ins[0]))
    axes = _axes_arg(ctx, ins, attrs)
    out_rank = len(shape) + len(axes)
    for a in sorted(a % out_rank for a in axes):
        shape.insert(a, 1)
    return tf.reshape(ins[0], shape)


def _expand(ctx, ins, attrs):
    shape = tuple(_ints(ctx, ins[1], "shape"))
    target = tuple(np.broadcast_shapes(ctx.shape_of(ins[0]), shape))
    return tf.broadcast_to(ins[0], target)


def _pad(ctx, ins, attrs):
    x = ins[0]
    ndim = len(ctx.shape_of(x))
    pads = _ints(ctx, ins[1], "pads") if len(ins) > 1 else list(attrs.get("pads"))  # attribute before opset 11
    axes = _ints(ctx, ins[3], "axes") if len(ins) > 3 and ins[3] is not None else list(range(ndim))
    value = attrs.get("value", 0.0)
    if len(ins) > 2 and ins[2] is not None:
        value = float(np.asarray(ctx.value(ins[2], "constant_value")).reshape(-1)[0])
    width = [(0, 0)] * ndim
    for k, a in enumerate(axes):
        width[a % ndim] = (pads[k], pads[k + len(axes)])
    if any(lo < 0 or hi < 0 for lo, hi in width):
        ctx.fail("negative pads (cropping) are not supported")
    mode = attrs.get("mode", "constant")
    if mode == "wrap":  # periodic: the end of the axis before it, its start after it
        for a, (lo, hi) in enumerate(width):
            dim = ctx.shape_of(x)[a]
            if lo > dim or hi > dim:
                ctx.fail(f"wrap padding of ({lo}, {hi}) on an axis of {dim}: at most one period each side")
            parts = ([tf.strided_slice(x, [dim - lo], [dim], axes=[a])] if lo else []) + [x] + \
                ([tf.strided_slice(x, [0], [hi], axes=[a])] if hi else [])
            x = tf.concatenate(parts, a) if len(parts) > 1 else x
        return x
    return nn_ops.pad(x, width, value, {"constant": "constant", "edge": "edge", "reflect": "reflect"}.get(mode, mode))


def _tile(ctx, ins, attrs):
    return tf.tile(ins[0], _ints(ctx, ins[1], "repeats"))


def _shape(ctx, ins, attrs):
    shape = np.array(ctx.shape_of(ins[0]), dtype="int64")
    start, end = attrs.get("start", 0), attrs.get("end", None)
    return const(shape[start:end])


def _size(ctx, ins, attrs):
    return const(np.array(int(np.prod(ctx.shape_of(ins[0]))), dtype="int64"))


def _constant(ctx, ins, attrs):
    if "value" in attrs:
        return const(np.asarray(attrs["value"]))
    for key, dtype in (("value_float", "float32"), ("value_floats", "float32"), ("value_int", "int64"),
                       ("value_ints", "int64")):
        if key in attrs:
            return const(np.asarray(attrs[key], dtype=dtype))
    ctx.fail(f"unsupported Constant attributes {sorted(attrs)}")


def _constant_of_shape(ctx, ins, attrs):
    shape = _ints(ctx, ins[0], "shape")
    value = np.asarray(attrs.get("value", np.zeros(1, dtype="float32"))).reshape(-1)
    if value.size != 1:
        ctx.fail(f"the value attribute holds {value.size} elements; ConstantOfShape takes one")
    return const(np.full(ctx.allocation(shape, value.dtype), value[0], dtype=value.dtype))


def _range(ctx, ins, attrs):
    start, limit, delta = (np.asarray(ctx.value(x, name)) for x, name in zip(ins, ("start", "limit", "delta")))
    if any(v.size != 1 for v in (start, limit, delta)):
        ctx.fail("start, limit and delta must be scalars")
    if delta == 0 or not np.isfinite([start, limit, delta]).all():
        ctx.fail(f"Range({start}, {limit}, {delta}) has no finite length")
    count = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)  # ONNX's formula
    ctx.allocation((count,), start.dtype)
    return const(np.arange(start, limit, delta).astype(start.dtype))


CONVERTERS = {
    "Reshape": _reshape, "Transpose": _transpose, "Concat": _concat, "Split": _split, "Slice": _slice,
    "Gather": _gather, "GatherElements": _gather_elements, "Squeeze": _squeeze, "Unsqueeze": _unsqueeze,
    "Expand": _expand, "Pad": _pad, "Tile": _tile, "Shape": _shape, "Size": _size,
    "Constant": _constant, "ConstantOfShape": _constant_of_shape, "Range": _range,
}
