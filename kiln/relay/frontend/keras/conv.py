"""Keras spatial layers (channels_last): Conv2D, DepthwiseConv2D, BatchNormalization,
Max/AveragePooling2D, Global{Average,Max}Pooling2D, ZeroPadding2D."""

from __future__ import annotations

import math

import numpy as np

from ...expr import const
from ...op import nn, nn_norm, nn_pool
from ...op import transform as tf
from .core import activation


def _pair(v):
    return (int(v), int(v)) if isinstance(v, int) else tuple(int(x) for x in v)


def same_padding(size, k, stride, dilation=1):
    """TensorFlow's 'same': output ceil(size / stride), the odd pixel of padding at the end."""
    total = max((math.ceil(size / stride) - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _padding(ctx, x, kernel, strides, dilation=(1, 1)):
    mode = ctx.config.get("padding", "valid")
    if mode == "valid":
        return (0, 0, 0, 0)
    if mode != "same":
        ctx.fail(f"padding={mode!r} is not supported (use 'valid' or 'same')")
    _, h, w, _ = ctx.shape_of(x)
    top, bottom = same_padding(h, kernel[0], strides[0], dilation[0])
    left, right = same_padding(w, kernel[1], strides[1], dilation[1])
    return (top, left, bottom, right)


def _check_4d(ctx, x):
    ctx.channels_last()
    if len(ctx.shape_of(x)) != 4:
        ctx.fail(f"expects a 4-d NHWC input, got shape {ctx.shape_of(x)}")


def _conv2d(ctx, ins):
    x = ins[0]
    _check_4d(ctx, x)
    kernel = ctx.weight("kernel")  # HWIO
    strides, dil = _pair(ctx.config.get("strides", 1)), _pair(ctx.config.get("dilation_rate", 1))
    groups = int(ctx.config.get("groups", 1))
    out = nn.conv2d(x, const(kernel), strides=strides, padding=_padding(ctx, x, kernel.shape[:2], strides, dil),
                    dilation=dil, groups=groups, channels=kernel.shape[3], kernel_size=kernel.shape[:2],
                    data_layout="NHWC", kernel_layout="HWIO")
    if ctx.config.get("use_bias", True):
        out = nn.bias_add(out, const(ctx.weight("bias")), axis=3)
    return activation(ctx, out)


def _depthwise_conv2d(ctx, ins):
    x = ins[0]
    _check_4d(ctx, x)
    kernel = ctx.weight("depthwise_kernel", "kernel")  # (kh, kw, C, multiplier); Keras 3 says "kernel"
    kh, kw, c, mult = kernel.shape
    # one group per input channel: HWIO with I=1 and O = C*multiplier, output c*mult+m as Keras orders it
    weight = const(np.ascontiguousarray(kernel.reshape(kh, kw, 1, c * mult)))
    strides, dil = _pair(ctx.config.get("strides", 1)), _pair(ctx.config.get("dilation_rate", 1))
    out = nn.conv2d(x, weight, strides=strides, padding=_padding(ctx, x, (kh, kw), strides, dil), dilation=dil,
                    groups=c, channels=c * mult, kernel_size=(kh, kw), data_layout="NHWC", kernel_layout="HWIO")
    if ctx.config.get("use_bias", True):
        out = nn.bias_add(out, const(ctx.weight("bias")), axis=3)
    return activation(ctx, out)


def _batch_norm(ctx, ins):
    x = ins[0]
    shape = ctx.shape_of(x)
    axis = ctx.config.get("axis", -1)
    axis = (axis[0] if isinstance(axis, (list, tuple)) else axis) % len(shape)
    n = shape[axis]
    dtype = ctx.dtype_of(x)
    gamma = ctx.weight("gamma") if ctx.config.get("scale", True) else np.ones(n, dtype)
    beta = ctx.weight("beta") if ctx.config.get("center", True) else np.zeros(n, dtype)
    out = nn_norm.batch_norm(x, const(gamma), const(beta), const(ctx.weight("moving_mean")),
                             const(ctx.weight("moving_variance")), axis=axis,
                             epsilon=float(ctx.config.get("epsilon", 1e-3)))
    return out[0]


def _pool(kind):
    def convert(ctx, ins):
        x = ins[0]
        _check_4d(ctx, x)
        size = _pair(ctx.config.get("pool_size", 2))
        strides = _pair(ctx.config.get("strides") or size)
        pads = _padding(ctx, x, size, strides)
        if kind == "max":
            return nn_pool.max_pool2d(x, size, strides, (1, 1), pads, layout="NHWC")
        # Keras' 'same' average divides by the pixels inside the input
        return nn_pool.avg_pool2d(x, size, strides, (1, 1), pads, layout="NHWC", count_include_pad=False)
    return convert


def _global_pool(fn):
    def convert(ctx, ins):
        x = ins[0]
        _check_4d(ctx, x)
        out = fn(x, layout="NHWC")
        if ctx.config.get("keepdims", False):
            return out
        n, _, _, c = ctx.shape_of(x)
        return tf.reshape(out, (n, c))
    return convert


def _zero_padding(ctx, ins):
    x = ins[0]
    _check_4d(ctx, x)
    pad = ctx.config.get("padding", 1)
    if isinstance(pad, int):
        (t, b), (l, r) = (pad, pad), (pad, pad)
    elif isinstance(pad[0], int):
        (t, b), (l, r) = (pad[0], pad[0]), (pad[1], pad[1])
    else:
        (t, b), (l, r) = pad
    return nn.pad(x, ((0, 0), (t, b), (l, r), (0, 0)))


CONVERTERS = {
    "Conv2D": _conv2d, "DepthwiseConv2D": _depthwise_conv2d, "BatchNormalization": _batch_norm,
    "MaxPooling2D": _pool("max"), "AveragePooling2D": _pool("avg"), "MaxPool2D": _pool("max"),
    "AvgPool2D": _pool("avg"), "GlobalAveragePooling2D": _global_pool(nn_pool.global_avg_pool2d),
    "GlobalMaxPooling2D": _global_pool(nn_pool.global_max_pool2d),
    "GlobalAvgPool2D": _global_pool(nn_pool.global_avg_pool2d), "ZeroPadding2D": _zero_padding,
}
