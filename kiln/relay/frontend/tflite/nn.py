"""TFLite operators with weights or windows: CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED,
AVERAGE_POOL_2D, MAX_POOL_2D, SOFTMAX, MEAN."""

from __future__ import annotations

import math

import numpy as np

from ...expr import Constant, const
from ...op import nn, nn_norm, nn_pool, reduce, tensor
from ...op import transform as tf
from .elementwise import fused


def _tflite():
    import tflite
    return tflite


def _same(size, k, stride, dilation=1):
    total = max((math.ceil(size / stride) - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def padding_of(opts, h, w, kernel, strides, dilation=(1, 1)):
    """(top, left, bottom, right) of an op's TFLite padding (SAME or VALID) over an h x w image."""
    if opts.Padding() == _tflite().Padding.VALID:
        return (0, 0, 0, 0)
    top, bottom = _same(h, kernel[0], strides[0], dilation[0])
    left, right = _same(w, kernel[1], strides[1], dilation[1])
    return (top, left, bottom, right)


def _padding(ctx, opts, x, kernel, strides, dilation=(1, 1)):
    _, h, w, _ = ctx.shape_of(x)
    return padding_of(opts, h, w, kernel, strides, dilation)


def _weights(ctx, ins, k, what):
    if k >= len(ins):
        ctx.fail(f"has {len(ins)} inputs; the {what} (input {k}) is missing")
    w = ins[k]
    if not isinstance(w, Constant):
        ctx.fail(f"the {what} must be a constant tensor")
    return w.data


def _conv2d(ctx, ins):
    opts = ctx.options(_tflite().Conv2DOptions)
    x = ins[0]
    w = _weights(ctx, ins, 1, "filter")  # OHWI
    ctx.rank(x, 4), ctx.rank(w, 4, "filter")
    if w.shape[3] < 1 or ctx.shape_of(x)[3] % w.shape[3]:
        ctx.fail(f"the filter's {w.shape[3]} input channels do not divide the input's {ctx.shape_of(x)[3]}")
    strides, dil = (opts.StrideH(), opts.StrideW()), (opts.DilationHFactor(), opts.DilationWFactor())
    cin = ctx.shape_of(x)[3]
    groups = cin // w.shape[3]
    out = nn.conv2d(x, const(np.ascontiguousarray(w.transpose(1, 2, 3, 0))), strides=strides,
                    padding=_padding(ctx, opts, x, w.shape[1:3], strides, dil), dilation=dil, groups=groups,
                    channels=w.shape[0], kernel_size=w.shape[1:3], data_layout="NHWC", kernel_layout="HWIO")
    if len(ins) > 2 and ins[2] is not None:
        out = nn.bias_add(out, ins[2], axis=3)
    return fused(ctx, out, opts.FusedActivationFunction())


def _depthwise_conv2d(ctx, ins):
    opts = ctx.options(_tflite().DepthwiseConv2DOptions)
    x = ins[0]
    w = _weights(ctx, ins, 1, "filter")  # 1, H, W, C*multiplier
    ctx.rank(x, 4), ctx.rank(w, 4, "filter")
    cin = ctx.shape_of(x)[3]
    strides, dil = (opts.StrideH(), opts.StrideW()), (opts.DilationHFactor(), opts.DilationWFactor())
    weight = const(np.ascontiguousarray(w.transpose(1, 2, 0, 3)))  # HWIO with I=1: one group per input channel
    out = nn.conv2d(x, weight, strides=strides, padding=_padding(ctx, opts, x, w.shape[1:3], strides, dil),
                    dilation=dil, groups=cin, channels=w.shape[3], kernel_size=w.shape[1:3], data_layout="NHWC",
                    kernel_layout="HWIO")
    if len(ins) > 2 and ins[2] is not None:
        out = nn.bias_add(out, ins[2], axis=3)
    return fused(ctx, out, opts.FusedActivationFunction())


def _fully_connected(ctx, ins):
    opts = ctx.options(_tflite().FullyConnectedOptions)
    x, w = ins[0], ins[1] if len(ins) > 1 else None
    if w is None:
        ctx.fail("has no weights (input 1); the file is damaged")
    units, depth = ctx.rank(w, 2, "weights")
    shape = ctx.shape_of(x)
    out = nn.dense(tf.reshape(x, (-1, depth)), w)
    if len(ins) > 2 and ins[2] is not None:
        out = nn.bias_add(out, ins[2], axis=1)
    out = fused(ctx, out, opts.FusedActivationFunction())
    if opts.KeepNumDims():
        out = tf.reshape(out, shape[:-1] + (units,))
    return out


def _pool(kind):
    def convert(ctx, ins):
        opts = ctx.options(_tflite().Pool2DOptions)
        x = ins[0]
        ctx.rank(x, 4)
        size, strides = (opts.FilterHeight(), opts.FilterWidth()), (opts.StrideH(), opts.StrideW())
        pads = _padding(ctx, opts, x, size, strides)
        if kind == "max":
            out = nn_pool.max_pool2d(x, size, strides, (1, 1), pads, layout="NHWC")
        else:  # TFLite's SAME average divides by the pixels inside the input
            out = nn_pool.avg_pool2d(x, size, strides, (1, 1), pads, layout="NHWC", count_include_pad=False)
        return fused(ctx, out, opts.FusedActivationFunction())
    return convert


def _softmax(ctx, ins):
    beta = ctx.options(_tflite().SoftmaxOptions).Beta() if ctx.has_options() else 1.0
    x = ins[0] if beta == 1.0 else tensor.multiply(ins[0], const(float(beta), "float32"))
    return nn_norm.softmax(x, -1)


def _mean(ctx, ins):
    axes = [int(a) for a in np.asarray(ctx.constant(1, "axis")).reshape(-1)]
    keep = bool(ctx.options(_tflite().ReducerOptions).KeepDims()) if ctx.has_options() else False
    nd = len(ctx.shape_of(ins[0]))
    return reduce.mean(ins[0], tuple(a % nd for a in axes), keepdims=keep)


CONVERTERS = {
    "CONV_2D": _conv2d, "DEPTHWISE_CONV_2D": _depthwise_conv2d, "FULLY_CONNECTED": _fully_connected,
    "AVERAGE_POOL_2D": _pool("avg"), "MAX_POOL_2D": _pool("max"), "SOFTMAX": _softmax, "MEAN": _mean,
}
