"""3-D Conv and ConvTranspose (NCDHW) as 2-D ones over depth slices, so they use conv2d's
schedules: depth folds into the batch, one 2-D op runs per kernel depth tap, and the taps'
results are shifted along depth and summed. Video networks' 3x3x3 kernels cost three conv2d.

``lift(convert_2d, transpose)`` wraps the 2-D converter of nn.py; inputs of other ranks pass
through to it unchanged.
"""

from __future__ import annotations

import numpy as np

from ...expr import Constant, const
from ...op import nn as nn_op
from ...op import tensor
from ...op import transform as tf
from .nn import CONVERTERS as _NN_CONVERTERS
from .nn import _pads_nd


def _tap(w, kd):
    """Kernel depth slice ``kd`` of an O x I x kD x kH x kW weight."""
    if isinstance(w, Constant):
        return const(w.data[:, :, kd].copy())
    return tf.take(w, const(kd, "int32"), axis=2)


def _fold_depth(x, shape):
    n, c, d, h, w = shape
    return tf.reshape(tf.transpose(x, (0, 2, 1, 3, 4)), (n * d, c, h, w))


def _attrs_2d(attrs, kernel, strides, dil, lo, hi, extra=()):
    out = {"kernel_shape": list(kernel[1:]), "strides": list(strides[1:]), "dilations": list(dil[1:]),
           "pads": [lo[1], lo[2], hi[1], hi[2]], "group": attrs.get("group", 1)}
    return {**out, **dict(extra)}


def depth_sliced(ctx, x, w, attrs, conv_2d, pad_value: float = 0.0):
    """The NCDHW result of a 3-D convolution of ``x`` by the 5-d weight ``w`` made of 2-D ones:
    ``conv_2d(folded_x, weight_tap, attrs_2d)`` per kernel depth tap, shifted along depth and summed
    (no bias). Depth padding holds ``pad_value`` (a quantized convolution's input zero point)."""
    group = attrs.get("group", 1)
    if not isinstance(group, int) or group < 1:
        ctx.fail(f"attribute group={group} must be a positive integer")
    shape, wshape = ctx.shape_of(x), ctx.shape_of(w)
    kernel = list(attrs.get("kernel_shape", wshape[2:]))
    strides = list(attrs.get("strides", [1] * 3))
    dil = list(attrs.get("dilations", [1] * 3))
    lo, hi = _pads_nd(attrs, shape[2:], kernel, strides, dil)
    n, depth = shape[0], shape[2] + lo[0] + hi[0]
    if lo[0] or hi[0]:
        x = nn_op.pad(x, [(0, 0), (0, 0), (lo[0], hi[0]), (0, 0), (0, 0)], pad_value=pad_value)
    out_d = (depth - dil[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    if out_d < 1:
        ctx.fail(f"kernel depth {kernel[0]} (dilation {dil[0]}) is larger than the padded input depth {depth}")
    folded = _fold_depth(x, (n, shape[1], depth, shape[3], shape[4]))
    total = None
    for kd in range(kernel[0]):
        y = conv_2d(folded, _tap(w, kd), _attrs_2d(attrs, kernel, strides, dil, lo, hi))
        o, oh, ow = ctx.shape_of(y)[1:]
        y = tf.reshape(y, (n, depth, o, oh, ow))
        start = kd * dil[0]
        y = tf.strided_slice(y, [start], [start + (out_d - 1) * strides[0] + 1], [strides[0]], axes=[1])
        total = y if total is None else tensor.add(total, y)
    return tf.transpose(total, (0, 2, 1, 3, 4))


def _conv3d(ctx, convert_2d, ins, attrs):
    out = depth_sliced(ctx, ins[0], ins[1], attrs, lambda x, w, a: convert_2d(ctx, [x, w], a))
    if len(ins) > 2 and ins[2] is not None:
        out = tensor.add(out, tf.reshape(ins[2], (-1, 1, 1, 1)))
    return out


def _conv_transpose3d(ctx, convert_2d, ins, attrs):
    x, w = ins[0], ins[1]
    shape, wshape = ctx.shape_of(x), ctx.shape_of(w)
    if "output_shape" in attrs or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        ctx.fail("3-D ConvTranspose takes explicit pads and output_padding only (no output_shape or SAME auto_pad)")
    kernel = list(attrs.get("kernel_shape", wshape[2:]))
    strides = list(attrs.get("strides", [1] * 3))
    dil = list(attrs.get("dilations", [1] * 3))
    out_pad = list(attrs.get("output_padding", [0] * 3))
    lo, hi = _pads_nd({k: v for k, v in attrs.items() if k != "auto_pad"}, shape[2:], kernel, strides, dil)
    n, depth = shape[0], shape[2]
    full = (depth - 1) * strides[0] + dil[0] * (kernel[0] - 1) + 1 + out_pad[0]
    folded = _fold_depth(x, shape)
    attrs_2d = _attrs_2d(attrs, kernel, strides, dil, lo, hi, {"output_padding": out_pad[1:]})
    total = None
    for kd in range(kernel[0]):
        y = convert_2d(ctx, [folded, _tap(w, kd)], attrs_2d)
        o, oh, ow = ctx.shape_of(y)[1:]
        y = tf.reshape(y, (n, depth, 1, o * oh * ow))
        if strides[0] > 1:  # input depth d lands at d * stride: interleave stride - 1 zero slices
            zeros = const(np.zeros((n, depth, strides[0] - 1, o * oh * ow), ctx.type_of(y).dtype))
            y = tf.reshape(tf.concatenate([y, zeros], 2), (n, depth * strides[0], o * oh * ow))
            y = tf.strided_slice(y, [0], [(depth - 1) * strides[0] + 1], axes=[1])
        else:
            y = tf.reshape(y, (n, depth, o * oh * ow))
        start = kd * dil[0]
        y = nn_op.pad(y, [(0, 0), (start, full - start - ctx.shape_of(y)[1]), (0, 0)])
        total = y if total is None else tensor.add(total, y)
    total = tf.strided_slice(total, [lo[0]], [full - hi[0]], axes=[1])
    out = tf.transpose(tf.reshape(total, (n, full - lo[0] - hi[0], o, oh, ow)), (0, 2, 1, 3, 4))
    if len(ins) > 2 and ins[2] is not None:
        out = tensor.add(out, tf.reshape(ins[2], (-1, 1, 1, 1)))
    return out


def lift(convert_2d, transpose: bool = False):
    """The converter of ``convert_2d``'s op for 5-D (NCDHW) inputs too."""
    def convert(ctx, ins, attrs):
        if len(ctx.shape_of(ins[0])) != 5:
            return convert_2d(ctx, ins, attrs)
        if len(ctx.shape_of(ins[1])) != 5:
            ctx.fail(f"a 3-D input needs a 5-d weight, got shape {list(ctx.shape_of(ins[1]))}")
        return (_conv_transpose3d if transpose else _conv3d)(ctx, convert_2d, ins, attrs)
    return convert


CONVERTERS = {"Conv": lift(_NN_CONVERTERS["Conv"]), "ConvTranspose": lift(_NN_CONVERTERS["ConvTranspose"], True)}
