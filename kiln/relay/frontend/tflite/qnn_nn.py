"""Quantized TFLite operators with weights or windows, as TFLite's integer kernels compute them:
CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, AVERAGE_POOL_2D, MAX_POOL_2D, MEAN, SOFTMAX.

- convolutions: ``qnn.conv2d`` (NCHW, OIHW; per-channel filter scales; int32 accumulator), the
  int32 bias, ``qnn.requantize`` by ``input_scale * filter_scale[c] / output_scale`` (float64)
  with TFLite's rounding, the fused activation as an integer clamp. The result is held NCHW.
- FULLY_CONNECTED: ``qnn.dense`` the same way (per-tensor or per-channel weights).
- pools: max on the integers; average as TFLite's: the integer mean of the stored values rounded
  half away from zero (float32 inside, exact for windows below 2**16 values).
- MEAN: the int32 sum of the centered values, requantized by ``input_scale / output_scale`` and
  divided by the count with TFLite's rounding.
- SOFTMAX: TFLite's table: ``exp(-input_scale * beta * (max - x))`` for the 256 possible
  distances, summed in float32, scaled by ``1 / (sum * output_scale)``, rounded half away.
"""

from __future__ import annotations

import math

import numpy as np

from ...expr import const
from ...op import nn, nn_pool, reduce, tensor
from ...op import transform as tf
from ...qnn import op as qnn
from . import quantize as Q
from .importer import Held
from .nn import _tflite, padding_of


def _hw(ctx, x, layout):
    shape = ctx.rank(x, 4)
    return (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])


def _const_weights(ctx, k, what):
    info = ctx.info(k)
    if info is None or info.data is None:
        return None
    if info.qp is None or not info.quantized:
        ctx.fail(f"the {what} is {info.dtype} without quantization parameters; a quantized "
                 f"{ctx.op_name} needs an int8 {what}")
    return info


def _bias(ctx, k, channels):
    info = ctx.info(k)
    if info is None:
        return None
    if info.data is None:
        ctx.fail("the bias must be a constant tensor")
    if info.dtype not in ("int32", "int64"):
        ctx.fail(f"the bias is {info.dtype}; a quantized {ctx.op_name} needs an int32 bias (int64 for int16 inputs)")
    b = np.asarray(info.data).reshape(-1)
    if b.size not in (1, channels):
        ctx.fail(f"the bias has {b.size} values for {channels} output channels")
    if np.any(np.abs(b.astype(np.int64)) >= 1 << 31):
        ctx.fail("an int64 bias value does not fit int32; kiln accumulates int16x8 convolutions in int32")
    return b.astype("int32")


def _same_dtype(ctx) -> None:
    """Quantized convolutions and FULLY_CONNECTED write the type they read (TFLite's uint8 -> int16
    FULLY_CONNECTED, which drops the output's zero point, is not imported)."""
    i, o = ctx.info(0).dtype, ctx.out_info().dtype
    if i != o:
        ctx.fail(f"reads {i} and writes {o}; kiln imports a quantized {ctx.op_name} whose input and output "
                 "types match")


def _wide(ctx) -> bool:
    """int16 activations (int16x8): TFLite's 64-bit rescale."""
    return ctx.info(0).dtype == "int16"


def _gemm(ctx) -> str:
    """TFLite's two-rounding rescale, or one rounding (``from_tflite(exact_rounding=False)``)."""
    return "GEMM" if ctx.importer.exact_rounding else "UPWARD"


def _rescale(ctx, acc, bias, real, axis, code, rounding="TFLITE"):
    """acc (+ bias), rescaled to the output, fused activation clamped."""
    if bias is not None:
        acc = nn.bias_add(acc, const(bias), axis=axis)
    out_info, oq = ctx.out_info(), ctx.out_q()
    wide = _wide(ctx) and ctx.op_name != "FULLY_CONNECTED"  # int16 FC keeps the whole multiplier
    y = Q.requantize(acc, real, oq.z, out_info.dtype, axis=axis if np.size(real) > 1 else -1, wide=wide,
                     rounding=rounding)
    return Q.clamp(y, *Q.activation_range(code, oq, out_info.dtype), out_info.dtype)


def _conv(depthwise: bool):
    def convert(ctx):
        t = _tflite()
        opts = ctx.options(t.DepthwiseConv2DOptions if depthwise else t.Conv2DOptions)
        winfo = _const_weights(ctx, 1, "filter")
        if winfo is None:
            return ctx.importer.float_route(ctx, ctx.op_name)
        _same_dtype(ctx)
        x = ctx.input(0, "NCHW")
        cin = ctx.rank(x, 4)[1]
        w = winfo.data
        ctx.rank(w, 4, "filter")
        if depthwise:  # (1, KH, KW, C*m) -> (C*m, 1, KH, KW): one group per input channel
            weight, groups, w_axis = w.transpose(3, 0, 1, 2), cin, 3
            if w.shape[3] % cin:
                ctx.fail(f"the filter's {w.shape[3]} channels are not a multiple of the input's {cin}")
        else:          # OHWI -> OIHW
            if w.shape[3] < 1 or cin % w.shape[3]:
                ctx.fail(f"the filter's {w.shape[3]} input channels do not divide the input's {cin}")
            weight, groups, w_axis = w.transpose(0, 3, 1, 2), cin // w.shape[3], 0
        wq, xq = winfo.qp, ctx.q(0)
        if wq.scale.size > 1 and wq.axis != w_axis:
            ctx.fail(f"the filter is quantized along dimension {wq.axis}; TFLite quantizes it along {w_axis}")
        oc = weight.shape[0]
        strides, dil = (opts.StrideH(), opts.StrideW()), (opts.DilationHFactor(), opts.DilationWFactor())
        h, wd = _hw(ctx, x, "NCHW")
        pad = padding_of(opts, h, wd, weight.shape[2:], strides, dil)
        wz = wq.zero_point if wq.zero_point.size > 1 else wq.z
        acc = qnn.conv2d(x, const(np.ascontiguousarray(weight)), xq.z, wz, np.float32(xq.s),
                         wq.scale.astype("float32"), kernel_size=weight.shape[2:], channels=oc, strides=strides,
                         padding=pad, dilation=dil, groups=groups, data_layout="NCHW", kernel_layout="OIHW")
        real = xq.s * wq.scale / ctx.out_q().s
        out = _rescale(ctx, acc, _bias(ctx, 2, oc), real, 1, opts.FusedActivationFunction(), _gemm(ctx))
        return Held(out, "NCHW")
    return convert


def _fully_connected(ctx):
    opts = ctx.options(_tflite().FullyConnectedOptions)
    winfo = _const_weights(ctx, 1, "weights")
    if winfo is None:
        return ctx.importer.float_route(ctx, ctx.op_name)
    _same_dtype(ctx)
    x = ctx.input(0, "NHWC")
    w = winfo.data
    ctx.rank(w, 2, "weights")
    units, depth = w.shape
    shape = ctx.shape_of(x)
    if math.prod(shape) % depth:
        ctx.fail(f"the input's {math.prod(shape)} values are not rows of the weights' depth {depth}")
    wq, xq = winfo.qp, ctx.q(0)
    wz = wq.zero_point if wq.zero_point.size > 1 else wq.z
    acc = qnn.dense(tf.reshape(x, (-1, depth)), const(w), xq.z, wz, np.float32(xq.s), wq.scale.astype("float32"),
                    units=units)
    real = xq.s * wq.scale / ctx.out_q().s
    out = _rescale(ctx, acc, _bias(ctx, 2, units), real, 1, opts.FusedActivationFunction(),
                   "UPWARD" if _wide(ctx) else _gemm(ctx))  # int16: TFLite's 64-bit rescale, full multiplier
    if opts.KeepNumDims():
        out = tf.reshape(out, tuple(shape[:-1]) + (units,))
    return out


def _pool(kind):
    def convert(ctx):
        opts = ctx.options(_tflite().Pool2DOptions)
        layout = ctx.layout(0)
        x = ctx.input(0)
        dtype, oinfo = ctx.info(0).dtype, ctx.out_info()
        if oinfo.dtype != dtype:
            ctx.fail(f"reads {dtype} and writes {oinfo.dtype}; a quantized pool keeps its input's type")
        oq = ctx.out_q()  # an int8, uint8 or int16 output (so input) with parameters
        size, strides = (opts.FilterHeight(), opts.FilterWidth()), (opts.StrideH(), opts.StrideW())
        pads = padding_of(opts, *_hw(ctx, x, layout), size, strides)
        if kind == "max":
            y = nn_pool.max_pool2d(x, size, strides, (1, 1), pads, layout=layout)
        else:  # the stored integers' mean, rounded half away from zero, as TFLite's integer kernel
            mean = nn_pool.avg_pool2d(tf.cast(x, "float32"), size, strides, (1, 1), pads, layout=layout,
                                      count_include_pad=False)
            lo, hi = Q.RANGES[dtype]
            y = tf.cast(tensor.clip(Q.round_away(mean), float(lo), float(hi)), dtype)
        # TFLite's pooling kernels keep the stored integers: an output whose parameters differ from
        # the input's (its converter never writes one) is not requantized, only clamped
        y = Q.clamp(y, *Q.activation_range(opts.FusedActivationFunction(), oq, oinfo.dtype), oinfo.dtype)
        return Held(y, layout)
    return convert


def _mean(ctx):
    axes_data = np.asarray(ctx.constant(1, "axis")).reshape(-1)
    keep = bool(ctx.options(_tflite().ReducerOptions).KeepDims()) if ctx.has_options() else False
    layout = ctx.layout(0)
    x = ctx.input(0)
    shape = ctx.shape_of(x)
    nd = len(shape)
    if not all(-nd <= int(a) < nd for a in axes_data):
        ctx.fail(f"axes {axes_data.tolist()} do not fit an input of {nd} dimensions")
    axes = sorted({int(a) % nd for a in axes_data})
    if layout == "NCHW":  # the file's NHWC axes, on the value held NCHW
        axes = sorted({(0, 2, 3, 1)[a] for a in axes})
    count = int(np.prod([shape[a] for a in axes]))
    iq, oq, dtype = ctx.q(0), ctx.out_q(), ctx.out_info().dtype
    # TFLite's int8 mean: the raw sum rescaled by a float32 multiplier, the input zero point's
    # share subtracted afterwards as one rounded constant
    f32 = np.float32
    total = reduce.sum(tf.cast(x, "int32"), axis=tuple(axes), keepdims=keep)
    real = float(f32(iq.s) / (f32(count) * f32(oq.s)))
    temp = f32(iq.z) * f32(iq.s) / f32(oq.s)
    bias = oq.z - int(temp + f32(0.5) if temp > 0 else temp - f32(0.5))  # float32 sum, truncated
    y = Q.requantize(total, real, 0, "int32", rounding="GEMM")
    c_in = 1 if layout == "NCHW" else 3
    if nd == 4 and c_in not in axes and shape[c_in] % 16 and dtype != "int16":
        # TFLite's kernel rescales channels 16 at a time with SIMD (two roundings half up) and
        # the last C % 16 one by one (MultiplyByQuantizedMultiplier: TFLITE rounding)
        c = shape[c_in]
        out_axis = c_in if keep else [a for a in range(nd) if a not in axes].index(c_in)
        mask_shape = [1] * (nd if keep else nd - len(axes))
        mask_shape[out_axis] = c
        simd = (np.arange(c) < 16 * (c // 16)).reshape(mask_shape)
        y = tensor.where(const(simd), y, Q.requantize(total, real, 0, "int32", rounding="TFLITE"))
    y = tensor.add(y, const(bias, "int32"))
    lo, hi = Q.RANGES[dtype]
    y = tf.cast(tensor.minimum(tensor.maximum(y, const(lo, "int32")), const(hi, "int32")), dtype)
    if keep and layout == "NCHW":
        return Held(y, "NCHW")
    if layout == "NCHW" and not keep:  # the kept axes keep their order only if C is not among them
        kept = [a for a in range(4) if a not in axes]
        if 1 in kept and len(kept) > 1 and kept != [0, 1]:
            y = tf.transpose(y, [kept.index(a) for a in sorted(kept, key=lambda a: (0, 2, 3, 1).index(a))])
    return y


def _softmax(ctx):
    beta = float(ctx.options(_tflite().SoftmaxOptions).Beta()) if ctx.has_options() else 1.0
    x = ctx.input(0, "NHWC")
    info, oinfo = ctx.info(0), ctx.out_info()
    if info.dtype not in ("int8", "uint8"):
        return ctx.importer.float_route(ctx, ctx.op_name)
    iq, oq = ctx.q(0), ctx.out_q()
    x32 = tf.cast(x, "int32")
    dist = tensor.subtract(reduce.max(x32, axis=-1, keepdims=True), x32)   # 0..255
    table = np.exp(np.float32(-iq.s * beta) * np.arange(256, dtype=np.float32)).astype("float32")
    e = tf.take(const(table), dist, axis=0)
    total = reduce.sum(e, axis=-1, keepdims=True)
    inv = tensor.divide(const(1.0, "float32"), tensor.multiply(total, const(np.float32(oq.s), "float32")))
    lo, hi = Q.RANGES[oinfo.dtype]
    y = tensor.add(Q.round_away(tensor.multiply(e, inv)), const(float(oq.z), "float32"))
    return tf.cast(tensor.clip(y, float(lo), float(hi)), oinfo.dtype)


CONVERTERS = {
    "CONV_2D": _conv(False), "DEPTHWISE_CONV_2D": _conv(True), "FULLY_CONNECTED": _fully_connected,
    "AVERAGE_POOL_2D": _pool("avg"), "MAX_POOL_2D": _pool("max"), "MEAN": _mean, "SOFTMAX": _softmax,
}
