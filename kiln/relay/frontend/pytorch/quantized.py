"""Quantized TorchScript (eager-mode ``torch.ao.quantization``, fbgemm or qnnpack) as qnn ops.

A quantized tensor is a ``QTensor``: its integers (a relay uint8/int8 expression) with the
per-tensor scale and zero point torch gives it. The ops:

- ``aten::quantize_per_tensor`` -> ``qnn.quantize``; ``aten::dequantize`` -> ``qnn.dequantize``;
- ``quantized::conv2d(_relu)`` / ``quantized::linear(_relu)``: the packed weights unpacked at import
  (int8, per tensor or per channel), ``qnn.conv2d`` / ``qnn.dense`` in int32, the float bias as
  int32 at scale ``input_scale * weight_scale``, ``qnn.requantize`` (round half away from zero, as
  fbgemm's float requantization rounds) to the output's scale and zero point, relu a clamp at it;
- ``quantized::add(_relu)`` rounded once; ``quantized::mul``, ``quantized::cat``: ``qnn.mul`` /
  ``qnn.concatenate``; ``quantized::hardswish``, ``quantized::leaky_relu`` and ``aten::sigmoid``,
  ``aten::hardsigmoid``, ``aten::tanh`` of a quantized tensor: 256-entry tables (torch's fixed
  output parameters for the last three); ``aten::adaptive_avg_pool2d`` to 1x1:
  ``qnn.global_avg_pool2d``; ``quantized::batch_norm2d``: the affine map in float32, quantized;
- reshapes, ``aten::max_pool2d``, ``aten::relu``, ``quantized::relu6`` work on the integers and keep
  the parameters.

torch computes its requantization in float32 and its quantized add/mul through float, so
results agree with torch's quantized kernels within one quantization step, not bit for bit.
"""

from __future__ import annotations

import numpy as np

from ...expr import const
from ...op import nn, tensor
from ...op import transform as tf
from ...qnn import op as qnn

_TORCH_QDTYPES = {12: "int8", 13: "uint8"}  # torch.qint8, torch.quint8 (ScalarType codes)


class QTensor:
    """A quantized tensor of the TorchScript graph: integers plus per-tensor parameters."""

    def __init__(self, expr, scale: float, zero_point: int, dtype: str):
        self.expr, self.scale, self.zero_point, self.dtype = expr, float(scale), int(zero_point), dtype


def is_quantized(value) -> bool:
    if isinstance(value, QTensor):
        return True
    return isinstance(value, (list, tuple)) and any(isinstance(v, QTensor) for v in value)


def _q(ctx, value, what="input") -> QTensor:
    if not isinstance(value, QTensor):
        ctx.fail(f"the {what} is not a quantized tensor; quantize it first (torch.ao.quantization.QuantStub)")
    return value


def _check(ctx, scale, zero_point, dtype):
    lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
    if not np.isfinite(scale) or scale <= 0:
        ctx.fail(f"output scale {scale} must be finite and > 0")
    if not lo <= zero_point <= hi:
        ctx.fail(f"output zero point {zero_point} is outside {dtype} [{lo}, {hi}]")


def _quantize_per_tensor(ctx, ins):
    x, scale, zp, code = ins
    dtype = _TORCH_QDTYPES.get(int(code))
    if dtype is None:
        ctx.fail(f"dtype code {code} is not quint8 or qint8 (qint32 activations are not supported)")
    _check(ctx, float(scale), int(zp), dtype)
    return QTensor(qnn.quantize(x, np.float32(scale), int(zp), out_dtype=dtype), scale, zp, dtype)


def _dequantize(ctx, ins):
    x = _q(ctx, ins[0])
    return qnn.dequantize(x.expr, np.float32(x.scale), x.zero_point)


def _weight(ctx, qw):
    """(int8 array, scales, zero points) of a torch quantized weight (per tensor or per channel)."""
    import torch
    if qw.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        if qw.q_per_channel_axis() != 0:
            ctx.fail(f"weights quantized along axis {qw.q_per_channel_axis()}; kiln takes axis 0")
        scales = qw.q_per_channel_scales().numpy().astype("float64")
        zps = qw.q_per_channel_zero_points().numpy().astype("int64")
    else:
        scales, zps = np.array([qw.q_scale()], "float64"), np.array([qw.q_zero_point()], "int64")
    w = qw.int_repr().numpy()
    if w.dtype != np.int8:
        ctx.fail(f"weights of dtype {w.dtype}; kiln takes qint8 weights (torch's default for fbgemm and qnnpack)")
    if np.any(scales <= 0) or not np.all(np.isfinite(scales)):
        ctx.fail(f"weight scales {scales[:8].tolist()} must be finite and > 0")
    return w, scales, zps


def _rescale(ctx, acc, x: QTensor, wscales, bias, out_scale, out_zp, relu, axis):
    dtype = x.dtype
    _check(ctx, out_scale, out_zp, dtype)
    bscale = x.scale * wscales
    if bias is not None:
        b = bias.detach().numpy().astype("float64")
        q = np.round(b / bscale)
        if np.any(np.abs(q) >= 2 ** 31):
            ctx.fail("the bias does not fit int32 at scale input_scale * weight_scale")
        acc = nn.bias_add(acc, const(q.astype("int32")), axis=axis)
    per_channel = wscales.size > 1
    y = qnn.requantize(acc, const(bscale if per_channel else bscale.reshape(())), 0,
                       const(np.float64(out_scale)), int(out_zp), axis=axis if per_channel else -1,
                       rounding="TONEAREST", out_dtype=dtype)
    if relu:
        lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
        y = tensor.minimum(tensor.maximum(y, const(max(lo, int(out_zp)), dtype)), const(hi, dtype))
    return QTensor(y, out_scale, out_zp, dtype)


def _conv(relu):
    def convert(ctx, ins):
        import torch
        x, packed, out_scale, out_zp = _q(ctx, ins[0]), ins[1], float(ins[2]), int(ins[3])
        qw, bias = torch.ops.quantized.conv2d_unpack(packed)
        stride = [int(s) for s in packed.stride()]
        pad = [int(p) for p in packed.padding()]
        dil = [int(d) for d in packed.dilation()]
        groups = int(packed.groups())
        if packed.transpose():
            ctx.fail("quantized transposed convolutions are not supported")
        w, ws, wz = _weight(ctx, qw)
        acc = qnn.conv2d(x.expr, const(w), x.zero_point, wz if wz.size > 1 else int(wz[0]), np.float32(x.scale),
                         ws.astype("float32"), kernel_size=w.shape[2:], channels=w.shape[0], strides=stride,
                         padding=(pad[0], pad[1], pad[0], pad[1]), dilation=dil, groups=groups)
        return _rescale(ctx, acc, x, ws, bias, out_scale, out_zp, relu, 1)
    return convert


def _linear(relu):
    def convert(ctx, ins):
        import torch
        x, packed, out_scale, out_zp = _q(ctx, ins[0]), ins[1], float(ins[2]), int(ins[3])
        qw, bias = torch.ops.quantized.linear_unpack(packed)
        w, ws, wz = _weight(ctx, qw)
        shape = ctx.shape_of(x.expr)
        data = tf.reshape(x.expr, (-1, shape[-1])) if len(shape) != 2 else x.expr
        acc = qnn.dense(data, const(w), x.zero_point, wz if wz.size > 1 else int(wz[0]), np.float32(x.scale),
                        ws.astype("float32"), units=w.shape[0])
        out = _rescale(ctx, acc, x, ws, bias, out_scale, out_zp, relu, 1)
        if len(shape) != 2:
            out.expr = tf.reshape(out.expr, tuple(shape[:-1]) + (w.shape[0],))
        return out
    return convert


def _binary(kind, relu=False):
    def convert(ctx, ins):
        a, b = _q(ctx, ins[0]), _q(ctx, ins[1], "second input")
        scale, zp = float(ins[2]), int(ins[3])
        _check(ctx, scale, zp, a.dtype)
        f = np.float32
        if kind == "mul":
            y = qnn.mul(a.expr, b.expr, f(a.scale), a.zero_point, f(b.scale), b.zero_point, f(scale), zp,
                        rounding="TONEAREST", out_dtype=a.dtype)
        else:
            y = _add(a, b, scale, zp)
        if relu:
            lo, hi = (0, 255) if a.dtype == "uint8" else (-128, 127)
            y = tensor.minimum(tensor.maximum(y, const(max(lo, zp), a.dtype)), const(hi, a.dtype))
        return QTensor(y, scale, zp, a.dtype)
    return convert


_ADD_BITS = 16


def _add(a: QTensor, b: QTensor, scale: float, zp: int):
    """torch adds the real values and rounds once. Each input is rescaled to the output's scale
    with 16 extra fraction bits (int32; the error of that rounding is 2**-17 of a step), summed,
    and rounded once more: results differ from torch only where the sum is within 2**-16 of a tie."""
    parts = []
    for x in (a, b):
        centered = tensor.subtract(tf.cast(x.expr, "int32"), const(x.zero_point, "int32"))
        parts.append(qnn.requantize(centered, const(np.float64(x.scale) * 2 ** _ADD_BITS), 0,
                                    const(np.float64(scale)), 0, rounding="TONEAREST", out_dtype="int32"))
    total = tensor.add(parts[0], parts[1])
    return qnn.requantize(total, const(np.float64(2.0 ** -_ADD_BITS)), 0, const(np.float64(1.0)), int(zp),
                          rounding="TONEAREST", out_dtype=a.dtype)


def _cat(ctx, ins):
    xs = [_q(ctx, v) for v in ins[0]]
    axis, scale, zp = int(ins[1]), float(ins[2]), int(ins[3])
    f = np.float32
    y = qnn.concatenate([x.expr for x in xs], [f(x.scale) for x in xs], [x.zero_point for x in xs], f(scale), zp,
                        axis=axis % len(ctx.shape_of(xs[0].expr)), rounding="TONEAREST", out_dtype=xs[0].dtype)
    return QTensor(y, scale, zp, xs[0].dtype)


def _table(name, fixed=None):
    """A unary op on the 256 values: output parameters given (quantized::hardswish) or torch's
    fixed ones for the op (sigmoid, tanh, hardsigmoid)."""
    def convert(ctx, ins):
        x = _q(ctx, ins[0])
        if fixed is None:
            scale, zp = float(ins[1]), int(ins[2])
        else:
            scale, zp = fixed[x.dtype]
        fn = getattr(qnn, name)
        kw = {"alpha": 1 / 6, "beta": 0.5} if name == "hardsigmoid" else {}
        y = fn(x.expr, np.float32(x.scale), x.zero_point, np.float32(scale), zp, **kw)
        return QTensor(y, scale, zp, x.dtype)
    return convert


# torch's fixed output parameters (aten/src/ATen/native/quantized/cpu: sigmoid, tanh, hardsigmoid)
_SIGMOID = {"uint8": (1 / 256, 0), "int8": (1 / 256, -128)}
_TANH = {"uint8": (2 / 256, 128), "int8": (2 / 256, 0)}


def _adaptive_avg_pool(ctx, ins):
    x = _q(ctx, ins[0])
    size = [int(s) for s in (ins[1] if isinstance(ins[1], (list, tuple)) else [ins[1]] * 2)]
    if size != [1, 1]:
        ctx.fail(f"quantized adaptive average pooling to {size}; kiln converts the global one ([1, 1])")
    f = np.float32
    y = qnn.global_avg_pool2d(x.expr, f(x.scale), x.zero_point, f(x.scale), x.zero_point, rounding="TONEAREST")
    return QTensor(y, x.scale, x.zero_point, x.dtype)


def _relu6(ctx, ins):
    x = _q(ctx, ins[0])
    lo, hi = (0, 255) if x.dtype == "uint8" else (-128, 127)
    top = min(hi, x.zero_point + int(np.rint(6.0 / x.scale)))
    y = tensor.minimum(tensor.maximum(x.expr, const(max(lo, x.zero_point), x.dtype)), const(top, x.dtype))
    return QTensor(y, x.scale, x.zero_point, x.dtype)


def _leaky_relu(ctx, ins):
    x = _q(ctx, ins[0])
    slope, scale, zp = float(ins[1]), float(ins[3]), int(ins[4])
    _check(ctx, scale, zp, x.dtype)
    y = qnn.leaky_relu(x.expr, np.float32(x.scale), x.zero_point, np.float32(scale), zp, alpha=slope)
    return QTensor(y, scale, zp, x.dtype)


def _batch_norm(ctx, ins):
    """Per-channel affine of the real values (float32 inside), quantized to the output's parameters."""
    x = _q(ctx, ins[0])
    w, b, mean, var = (np.asarray(v.data, "float64") if v is not None else None for v in ins[1:5])
    eps, scale, zp = float(ins[5]), float(ins[6]), int(ins[7])
    _check(ctx, scale, zp, x.dtype)
    a = (w if w is not None else 1.0) / np.sqrt(var + eps)
    shift = (b if b is not None else 0.0) - mean * a
    shape = (-1,) + (1,) * (len(ctx.shape_of(x.expr)) - 2)
    real = qnn.dequantize(x.expr, np.float32(x.scale), x.zero_point)
    y = tensor.add(tensor.multiply(real, const(a.reshape(shape).astype("float32"))),
                   const(shift.reshape(shape).astype("float32")))
    return QTensor(qnn.quantize(y, np.float32(scale), zp, out_dtype=x.dtype), scale, zp, x.dtype)


def _relu(ctx, ins):
    x = _q(ctx, ins[0])
    hi = 255 if x.dtype == "uint8" else 127
    y = tensor.minimum(tensor.maximum(x.expr, const(x.zero_point, x.dtype)), const(hi, x.dtype))
    return QTensor(y, x.scale, x.zero_point, x.dtype)


QCONVERTERS = {
    "aten::quantize_per_tensor": _quantize_per_tensor, "aten::dequantize": _dequantize,
    "quantized::conv2d": _conv(False), "quantized::conv2d_relu": _conv(True),
    "quantized::linear": _linear(False), "quantized::linear_relu": _linear(True),
    "quantized::add": _binary("add"), "quantized::add_relu": _binary("add", True), "quantized::mul": _binary("mul"),
    "quantized::cat": _cat, "quantized::hardswish": _table("hardswish"),
    "aten::sigmoid": _table("sigmoid", _SIGMOID), "aten::tanh": _table("tanh", _TANH),
    "aten::hardsigmoid": _table("hardsigmoid", _SIGMOID), "quantized::relu6": _relu6,
    "quantized::leaky_relu": _leaky_relu, "quantized::batch_norm2d": _batch_norm,
    "aten::adaptive_avg_pool2d": _adaptive_avg_pool, "aten::relu": _relu,
}

# aten ops that move or select integers: the float converter runs on the integers, parameters kept
SAME_PARAMS = {"aten::flatten", "aten::reshape", "aten::view", "aten::contiguous", "aten::clone", "aten::detach",
               "aten::permute", "aten::transpose", "aten::squeeze", "aten::unsqueeze", "aten::max_pool2d",
               "aten::slice", "aten::select", "aten::chunk"}


def is_quantized_call(kind: str, ins) -> bool:
    """Whether a node takes the quantized path: a quantized:: op, quantize_per_tensor, or any
    op reading a quantized tensor."""
    return kind.startswith("quantized::") or kind == "aten::quantize_per_tensor" or \
        any(is_quantized(v) for v in ins)


def convert(ctx, kind: str, ins, converters: dict):
    """The value of a quantized node (a QTensor, a float expression, or a list of QTensors)."""
    if kind in QCONVERTERS:
        return QCONVERTERS[kind](ctx, ins)
    first = next((v for v in ins if isinstance(v, QTensor)), None)
    if kind in SAME_PARAMS and first is not None and kind in converters:
        out = converters[kind](ctx, [v.expr if isinstance(v, QTensor) else v for v in ins])
        wrap = lambda e: QTensor(e, first.scale, first.zero_point, first.dtype)  # noqa: E731
        return [wrap(e) for e in out] if isinstance(out, (list, tuple)) else wrap(out)
    ctx.fail("has no quantized conversion in kiln; dequantize before it (torch.ao.quantization.DeQuantStub) "
             "so that it runs in float")
