"""ONNX ops that make, select or rearrange tensors: CenterCropPad, the window functions
(Hann/Hamming/Blackman), EyeLike, OneHot, DepthToSpace, SpaceToDepth, BitCast, CumProd, TopK,
Compress. Sizes (window length, OneHot depth, TopK k, CenterCropPad shape, Compress condition)
must be known at import; the ONNX backend bakes them when a model passes them as inputs."""

from __future__ import annotations

import numpy as np

from ...expr import const
from ...op import math_ops, nn, scatter, sort, tensor
from ...op import transform as tf


def _np_dtype(onnx_type: int) -> str:
    from onnx import helper
    return helper.tensor_dtype_to_np_dtype(onnx_type).name


def _int(ctx, expr, what) -> int:
    value = np.asarray(ctx.value(expr, what))
    if value.size != 1:
        ctx.fail(f"{what} must hold one value, got shape {list(value.shape)}")
    return int(value.reshape(()))


def _center_crop_pad(ctx, ins, attrs):
    x = ins[0]
    shape = list(ctx.shape_of(x))
    target = [int(s) for s in np.asarray(ctx.value(ins[1], "input 'shape'")).reshape(-1)]
    axes = [a % len(shape) for a in attrs.get("axes", range(len(shape)))]
    if len(axes) != len(target):
        ctx.fail(f"input 'shape' has {len(target)} values for {len(axes)} axes")
    pads = [(0, 0)] * len(shape)
    for a, want in zip(axes, target):
        dim = shape[a]
        if want < dim:
            lo = (dim - want) // 2
            x = tf.strided_slice(x, [lo], [lo + want], axes=[a])
        elif want > dim:
            lo = (want - dim) // 2
            pads[a] = (lo, want - dim - lo)
    return nn.pad(x, pads) if any(p != (0, 0) for p in pads) else x


def _window(kind):
    def convert(ctx, ins, attrs):
        size = _int(ctx, ins[0], "input 'size'")
        dtype = _np_dtype(attrs.get("output_datatype", 1))
        denom = size if attrs.get("periodic", 1) else size - 1
        n = np.arange(size, dtype=np.float64)
        angle = 2 * np.pi * n / denom if denom else np.zeros(size)
        if kind == "hann":
            w = np.sin(np.pi * n / denom) ** 2 if denom else np.zeros(size)
        elif kind == "hamming":
            w = 25 / 46 - 21 / 46 * np.cos(angle)
        else:
            w = 0.42 - 0.5 * np.cos(angle) + 0.08 * np.cos(2 * angle)
        return const(w.astype(dtype))
    return convert


def _eye_like(ctx, ins, attrs):
    t = ctx.type_of(ins[0])
    if len(t.shape) != 2:
        ctx.fail(f"input must be 2-D, got shape {list(t.shape)}")
    dtype = _np_dtype(attrs["dtype"]) if "dtype" in attrs else t.dtype
    return const(np.eye(*t.shape, k=attrs.get("k", 0), dtype=dtype))


def _one_hot(ctx, ins, attrs):
    idx, values = ins[0], ins[2]
    depth = _int(ctx, ins[1], "input 'depth'")
    rank = len(ctx.shape_of(idx))
    axis = attrs.get("axis", -1)
    axis = axis + rank + 1 if axis < 0 else axis
    if ctx.type_of(idx).dtype != "int64":
        idx = tf.cast(idx, "int64")
    idx = tensor.floor_mod(idx, const(np.array(depth, dtype="int64")))  # negative indices count from the end
    positions = np.arange(depth, dtype="int64").reshape([-1 if a == axis else 1 for a in range(rank + 1)])
    hit = tensor.equal(tf.expand_dims(idx, axis), const(positions))
    off, on = (tf.take(values, const(np.array(i, dtype="int64"))) for i in (0, 1))
    return tensor.where(hit, on, off)


def _depth_to_space(ctx, ins, attrs):
    x = ins[0]
    b, c, h, w = ctx.shape_of(x)
    bs = attrs["blocksize"]
    if attrs.get("mode", "DCR") == "DCR":
        t = tf.transpose(tf.reshape(x, (b, bs, bs, c // bs ** 2, h, w)), (0, 3, 4, 1, 5, 2))
    else:
        t = tf.transpose(tf.reshape(x, (b, c // bs ** 2, bs, bs, h, w)), (0, 1, 4, 2, 5, 3))
    return tf.reshape(t, (b, c // bs ** 2, h * bs, w * bs))


def _space_to_depth(ctx, ins, attrs):
    x = ins[0]
    b, c, h, w = ctx.shape_of(x)
    bs = attrs["blocksize"]
    t = tf.transpose(tf.reshape(x, (b, c, h // bs, bs, w // bs, bs)), (0, 3, 5, 1, 2, 4))
    return tf.reshape(t, (b, c * bs * bs, h // bs, w // bs))


def _bit_cast(ctx, ins, attrs):
    src, dst = ctx.type_of(ins[0]).dtype, _np_dtype(attrs["to"])
    if np.dtype(src).itemsize != np.dtype(dst).itemsize:
        ctx.fail(f"BitCast from {src} to {dst}: the element sizes differ")
    if src == dst:
        return ins[0]
    if "bool" in (src, dst):  # one byte holding 0 or 1 either way
        return tf.cast(ins[0], dst)
    return math_ops.reinterpret(ins[0], dst)


def _cumprod(ctx, ins, attrs):
    rank = len(ctx.shape_of(ins[0]))
    axis = _int(ctx, ins[1], "input 'axis'")
    if not -rank <= axis < rank:
        ctx.fail(f"input 'axis'={axis} is out of range for a {rank}-d input")
    return scatter.cumprod(ins[0], axis % rank, attrs.get("exclusive", 0), attrs.get("reverse", 0))


def _top_k(ctx, ins, attrs):
    x = ins[0]
    rank = len(ctx.shape_of(x))
    k = _int(ctx, ins[1], "input 'K'") if ctx.opset >= 10 else attrs["k"]
    axis = attrs.get("axis", -1) % rank
    idx = sort.topk_indices(x, k, axis, bool(attrs.get("largest", 1)))
    return [tf.gather(x, axis, idx), idx]


def _compress(ctx, ins, attrs):
    x = ins[0]
    cond = np.asarray(ctx.value(ins[1], "input 'condition'")).reshape(-1).astype(bool)
    axis = attrs.get("axis")
    if axis is None:
        x = tf.reshape(x, (-1,))
        axis = 0
    axis %= len(ctx.shape_of(x))
    keep = np.nonzero(cond[:ctx.shape_of(x)[axis]])[0].astype("int64")
    return tf.take(x, const(keep), axis=axis)


def _reverse_sequence(ctx, ins, attrs):
    x, lens = ins[0], ins[1]
    shape = ctx.shape_of(x)
    t_axis, b_axis = attrs.get("time_axis", 0), attrs.get("batch_axis", 1)
    steps = shape[t_axis]
    t = const(np.arange(steps, dtype="int64").reshape([steps if a == t_axis else 1 for a in range(len(shape))]))
    n = tf.reshape(tf.cast(lens, "int64"), [shape[b_axis] if a == b_axis else 1 for a in range(len(shape))])
    src = tensor.where(tensor.less(t, n), tensor.subtract(tensor.subtract(n, const(np.array(1, "int64"))), t), t)
    return tf.gather(x, t_axis, tf.broadcast_to(src, shape))


CONVERTERS = {"ReverseSequence": _reverse_sequence,
    "CenterCropPad": _center_crop_pad, "HannWindow": _window("hann"), "HammingWindow": _window("hamming"),
    "BlackmanWindow": _window("blackman"), "EyeLike": _eye_like, "OneHot": _one_hot,
    "DepthToSpace": _depth_to_space, "SpaceToDepth": _space_to_depth, "BitCast": _bit_cast, "CumProd": _cumprod,
    "TopK": _top_k, "Compress": _compress,
}
