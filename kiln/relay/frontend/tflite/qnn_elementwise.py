"""Quantized TFLite elementwise and data-movement operators, as TFLite's integer kernels compute them.

- ADD / SUB: TFLite's three roundings: each centered input shifted left by 20 bits (15 for
  int16), rescaled by ``s_in / (2 * max(s1, s2))``, the sum rescaled by
  ``2 * max(s1, s2) / (2**20 * s_out)`` (``qnn.requantize``, rounding TFLITE each time).
- MUL: ``qnn.mul`` with TFLITE rounding (one rescale of the exact product).
- MAXIMUM / MINIMUM, RESHAPE, SQUEEZE, TRANSPOSE, PAD: on the stored integers, as TFLite.
- 8-bit unary ops (LOGISTIC, TANH, HARD_SWISH, RELU, RELU6, RELU_N1_TO_1): a 256-entry table of
  TFLite's own arithmetic for every input value, computed at import, read with ``take``.
- QUANTIZE: float -> integer rounds half away from zero; integer -> integer is TFLite's
  requantize. DEQUANTIZE: ``float32(q - zero_point) * scale``.
- CONCATENATION: inputs whose parameters differ from the output's are requantized first.
"""

from __future__ import annotations

import numpy as np

from ...expr import const
from ...op import nn, tensor
from ...op import transform as tf
from ...qnn import op as qnn
from . import quantize as Q
from .importer import Held

_NCHW_AXIS = (0, 2, 3, 1)   # the file's NHWC axis -> its position in NCHW


def _tflite():
    import tflite
    return tflite


def _fused(ctx, options_name):
    if not ctx.has_options():
        return 0
    return ctx.options(getattr(_tflite(), options_name)).FusedActivationFunction()


def _layout_for(ctx, ks):
    """NCHW when some input is held NCHW and every input is 4-D of the output's rank (else NHWC)."""
    infos = [ctx.info(k) for k in ks]
    if any(i is None or len(i.shape) != 4 for i in infos) or len(ctx.out_info().shape) != 4:
        return "NHWC"
    return "NCHW" if any(ctx.layout(k) == "NCHW" for k in ks) else "NHWC"


def _hold(y, layout):
    return Held(y, layout) if layout == "NCHW" else y


def _centered32(ctx, k, layout):
    return tensor.subtract(tf.cast(ctx.input(k, layout), "int32"), const(ctx.q(k).z, "int32"))


def _finish(ctx, y, code):
    oinfo = ctx.out_info()
    return Q.clamp(y, *Q.activation_range(code, ctx.out_q(), oinfo.dtype), oinfo.dtype)


def _add(sign):
    def convert(ctx):
        code = _fused(ctx, "AddOptions" if sign > 0 else "SubOptions")
        layout = _layout_for(ctx, (0, 1))
        q1, q2, oq = ctx.q(0), ctx.q(1), ctx.out_q()
        wide = ctx.info(0).dtype == "int16"
        shift = 15 if wide else 20
        twice_max = 2.0 * max(q1.s, q2.s)
        parts = []
        for k, q, sg in ((0, q1, 1), (1, q2, sign)):
            x = tensor.multiply(_centered32(ctx, k, layout), const(sg * (1 << shift), "int32"))
            parts.append(Q.requantize(x, q.s / twice_max, 0, "int32"))
        total = tensor.add(parts[0], parts[1])
        y = Q.requantize(total, twice_max / ((1 << shift) * oq.s), oq.z, ctx.out_info().dtype)
        return _hold(_finish(ctx, y, code), layout)
    return convert


def _mul(ctx):
    code = _fused(ctx, "MulOptions")
    layout = _layout_for(ctx, (0, 1))
    q1, q2, oq = ctx.q(0), ctx.q(1), ctx.out_q()
    f32 = np.float32
    Q.checked_multiplier(float(f32(q1.s) * f32(q2.s)) / float(f32(oq.s)))
    y = qnn.mul(ctx.input(0, layout), ctx.input(1, layout), f32(q1.s), q1.z, f32(q2.s), q2.z, f32(oq.s), oq.z,
                rounding="TFLITE", out_dtype=ctx.out_info().dtype)
    return _hold(_finish(ctx, y, code), layout)


def _minmax(fn):
    def convert(ctx):  # TFLite compares the stored integers (its converter gives all one scale)
        layout = _layout_for(ctx, (0, 1))
        return _hold(fn(ctx.input(0, layout), ctx.input(1, layout)), layout)
    return convert


# -- 8-bit unary ops as tables of TFLite's arithmetic ---------------------------------------------

def _float_table(fn):
    """TFLite's LUTPopulate: dequantize in float32, the float function, round half away."""
    def table(values, iq, oq, lo, hi):
        real = np.float32(iq.s) * (values - iq.z).astype(np.float32)
        with np.errstate(over="ignore"):
            y = fn(real).astype(np.float32)
        q = Q.round_away_np(y * (np.float32(1.0) / np.float32(oq.s))) + oq.z
        return np.clip(q, lo, hi)
    return table


def _relu_table(act_lo, act_hi):
    """TFLite's ReluX: requantize to the output's parameters, clamp to the activation's range."""
    def table(values, iq, oq, lo, hi):
        y = Q.requantize_np(values - iq.z, iq.s / oq.s) + oq.z
        f32 = np.float32
        qlo = lo if act_lo is None else max(lo, oq.z + int(Q.round_away_np(f32(act_lo) / f32(oq.s))))
        qhi = hi if act_hi is None else min(hi, oq.z + int(Q.round_away_np(f32(act_hi) / f32(oq.s))))
        return np.clip(y, qlo, qhi)
    return table


def _hard_swish_table(values, iq, oq, lo, hi):
    """TFLite's integer HardSwish (reference_ops::HardSwish), value by value."""
    from .hard_swish import hard_swish_int
    return np.clip(hard_swish_int(values, iq, oq), lo, hi)


_TABLES = {
    "LOGISTIC": _float_table(lambda x: np.float32(1.0) / (np.float32(1.0) + np.exp(-x))),
    "TANH": _float_table(np.tanh),
    "HARD_SWISH": _hard_swish_table,
    "RELU": _relu_table(0.0, None), "RELU6": _relu_table(0.0, 6.0), "RELU_N1_TO_1": _relu_table(-1.0, 1.0),
}


def _unary(name):
    def convert(ctx):
        info, oinfo = ctx.info(0), ctx.out_info()
        if info.dtype not in ("int8", "uint8") or oinfo.dtype != info.dtype:
            return ctx.importer.float_route(ctx, ctx.op_name)
        lo, hi = Q.RANGES[info.dtype]
        table = _TABLES[name](np.arange(lo, hi + 1, dtype=np.int64), ctx.q(0), ctx.out_q(), lo, hi)
        layout = ctx.layout(0)
        index = tensor.subtract(tf.cast(ctx.input(0), "int32"), const(lo, "int32"))
        return _hold(tf.take(const(table.astype(info.dtype)), index, axis=0), layout)
    return convert


# -- QUANTIZE / DEQUANTIZE --------------------------------------------------------------------------

def _quantize(ctx):
    info, oinfo = ctx.info(0), ctx.out_info()
    layout = ctx.layout(0)
    x = ctx.input(0)
    if info.dtype.startswith("float"):
        return _hold(Q.quantize(x, ctx.out_q(), oinfo.dtype), layout)
    iq, oq = ctx.q(0), ctx.out_q()
    centered = tensor.subtract(tf.cast(x, "int32"), const(iq.z, "int32"))
    return _hold(Q.requantize(centered, iq.s / oq.s, oq.z, oinfo.dtype), layout)


def _dequantize(ctx):
    layout = ctx.layout(0)
    return _hold(Q.dequantize(ctx.input(0), ctx.q(0)), layout)


# -- data movement on the stored integers -----------------------------------------------------------

def _concatenation(ctx):
    opts = ctx.options(_tflite().ConcatenationOptions)
    ks = [k for k, i in enumerate(ctx.in_idx) if i >= 0]
    layout = _layout_for(ctx, ks)
    oq, oinfo = ctx.out_q(), ctx.out_info()
    parts = []
    for k in ks:
        q, x = ctx.q(k), ctx.input(k, layout)
        if q.s != oq.s or q.z != oq.z:
            x = Q.requantize(tensor.subtract(tf.cast(x, "int32"), const(q.z, "int32")), q.s / oq.s, oq.z,
                             oinfo.dtype)
        parts.append(x)
    axis = int(opts.Axis()) % len(oinfo.shape)
    if layout == "NCHW":
        axis = _NCHW_AXIS[axis]
    return _hold(_finish(ctx, tf.concatenate(parts, axis), opts.FusedActivationFunction()), layout)


def _pad(ctx):
    pads = [(int(lo), int(hi)) for lo, hi in np.asarray(ctx.constant(1, "paddings")).reshape(-1, 2)]
    value = ctx.out_q().z
    if len(ctx.in_idx) > 2 and ctx.in_idx[2] >= 0:  # PADV2: the stored value of the constant
        value = int(np.asarray(ctx.constant(2, "constant value")).reshape(-1)[0])
    layout = ctx.layout(0)
    if layout == "NCHW":
        pads = [pads[0], pads[3], pads[1], pads[2]]
    return _hold(nn.pad(ctx.input(0), pads, float(value)), layout)


def _reshape(ctx):
    return tf.reshape(ctx.input(0, "NHWC"), ctx.out_info(0).shape)


def _transpose(ctx):
    return tf.transpose(ctx.input(0, "NHWC"), [int(a) for a in np.asarray(ctx.constant(1, "perm")).reshape(-1)])


CONVERTERS = {
    "ADD": _add(1), "SUB": _add(-1), "MUL": _mul,
    "MAXIMUM": _minmax(tensor.maximum), "MINIMUM": _minmax(tensor.minimum),
    **{name: _unary(name) for name in _TABLES},
    "QUANTIZE": _quantize, "DEQUANTIZE": _dequantize,
    "CONCATENATION": _concatenation, "PAD": _pad, "PADV2": _pad,
    "RESHAPE": _reshape, "SQUEEZE": _reshape, "TRANSPOSE": _transpose,
}
