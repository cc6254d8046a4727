"""ONNX quantized ops, imported as relay.qnn ops (never dequantized to float).

- QDQ: ``QuantizeLinear`` / ``DequantizeLinear`` become qnn.quantize / qnn.dequantize; the float
  ops between them are turned into integer ops by ``FakeQuantizationToInteger`` in relay.build.
  A DequantizeLinear of a constant (a weight, a bias) is kept, not folded to float at import,
  so that pass sees the integer weight.
- QOperator: QLinearConv (1-D, 2-D, 3-D), QLinearMatMul, ConvInteger, MatMulInteger,
  DynamicQuantizeLinear, and onnxruntime's com.microsoft QLinearAdd/Mul, QLinearConcat,
  QLinearAveragePool, QLinearGlobalAveragePool, QLinearSigmoid/LeakyRelu/Softmax, QGemm.

Rounding is onnxruntime's (``FLOAT32``, relay/qnn/fixed_point.py): a requantize multiplies the
int32 accumulator by ``x_scale * w_scale / y_scale`` in float32 and rounds half to even, QLinearAdd
is one float32 expression of both inputs, QLinearConcat dequantizes and quantizes in float32.
QDQ models get the same through the ``rounding`` attribute of their qnn.quantize, which
FakeQuantizationToInteger gives the integer ops it makes. Scales and zero points
must be constants (DynamicQuantizeLinear's outputs excepted); a zero, negative or non-finite
scale, a zero point outside its dtype or per-channel lengths that do not match the axis are
one error naming the node.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from ...expr import Constant, const
from ...op import reduce, tensor
from ...op import transform as tf
from ...qnn import op as qop
from ...qnn.fixed_point import dtype_range
from .conv3d import depth_sliced
from .nn import _pads_nd

ROUNDING = "FLOAT32"  # onnxruntime's requantize arithmetic
MS_DOMAIN = "com.microsoft"


def _scale(ctx, expr, what: str, channels: int | None = None) -> Constant:
    if expr is None:
        ctx.fail(f"{what} is missing")
    if not isinstance(expr, Constant):
        ctx.fail(f"{what} must be a constant (an initializer); kiln quantizes with static scales")
    s = np.asarray(expr.data, dtype=np.float64)
    if s.size == 0 or np.any(~np.isfinite(s)) or np.any(s <= 0):
        ctx.fail(f"{what} {s.ravel()[:8].tolist()} must be finite and > 0 (re-run the quantizer's calibration)")
    if s.ndim > 1 or (channels is not None and s.size not in (1, channels)):
        ctx.fail(f"{what} has {s.size} values (shape {list(s.shape)}) for an axis of {channels} channels; "
                 "give one scale, or one per channel")
    return const(np.asarray(expr.data, "float32").reshape(-1) if s.ndim else np.float32(s))


def _zero_point(ctx, expr, what: str, dtype: str | None = None, channels: int | None = None):
    """(zero point constant int32, its dtype): a missing zero point is 0 of ``dtype`` (uint8)."""
    if expr is None:
        return const(np.int32(0)), dtype or "uint8"
    if not isinstance(expr, Constant):
        ctx.fail(f"{what} must be a constant (an initializer)")
    z = np.asarray(expr.data)
    zdtype = z.dtype.name
    if zdtype not in ("int8", "uint8", "int16", "uint16", "int32"):
        ctx.fail(f"{what} has dtype {zdtype}; quantized tensors are int8, uint8, int16, uint16 or int32")
    lo, hi = dtype_range(dtype or zdtype)
    if np.any(z.astype(np.int64) < lo) or np.any(z.astype(np.int64) > hi):
        ctx.fail(f"{what} {z.ravel()[:8].tolist()} is outside {dtype or zdtype} [{lo}, {hi}]")
    if z.ndim > 1 or (channels is not None and z.size not in (1, channels)):
        ctx.fail(f"{what} has {z.size} values for an axis of {channels} channels; give one, or one per channel")
    return const(z.astype("int32").reshape(-1) if z.ndim else np.int32(z)), zdtype


def _channels(ctx, x, axis):
    shape = ctx.shape_of(x)
    return shape[axis % len(shape)] if shape else 1


def _per_tensor(ctx, ins, k: int, what: str) -> None:
    """Input ``k`` (a scale or zero point ONNX defines as a scalar) holds one value when given."""
    expr = ins[k] if len(ins) > k else None
    if isinstance(expr, Constant) and np.asarray(expr.data).size != 1:
        ctx.fail(f"{what} has {np.asarray(expr.data).size} values (shape {list(np.shape(expr.data))}); "
                 f"{ctx.node.op_type} takes one (per-tensor) {what}")


def _shape(ctx, x, what: str, least: int) -> tuple:
    """The shape of input ``what``, which needs ``least`` dimensions or more."""
    shape = ctx.shape_of(x)
    if len(shape) < least:
        ctx.fail(f"input {what} has shape {list(shape)}; it needs {least} or more dimensions")
    return shape


def _dtype(ctx, x) -> str:
    return ctx.type_of(x).dtype


# -- QDQ ----------------------------------------------------------------------------------------

def _dynamic(ctx, ins, what):
    """A per-tensor scale / zero point computed by the graph (DynamicQuantizeLinear written out)."""
    s, z = ins[1], ins[2] if len(ins) > 2 else None
    for e, name in ((s, "scale"), (z, "zero point")):
        if e is not None and len(ctx.shape_of(e)) > (0 if not isinstance(e, Constant) else 1):
            ctx.fail(f"{what} {name} computed at run time must be a scalar, got shape {list(ctx.shape_of(e))}")
    zdtype = _dtype(ctx, z) if z is not None else "uint8"
    z = tf.cast(z, "int32") if z is not None else const(np.int32(0))
    return s, z, zdtype


def _block_expand(ctx, x, expr, axis: int, block: int, what: str) -> np.ndarray:
    """A blocked scale or zero point (opset 21's ``block_size``) repeated to ``x``'s shape."""
    if not isinstance(expr, Constant):
        ctx.fail(f"{what} must be a constant (an initializer)")
    shape = list(ctx.shape_of(x))
    a = np.asarray(expr.data)
    axis %= len(shape)
    want = [-(-d // block) if i == axis else d for i, d in enumerate(shape)]
    if list(a.shape) != want:
        ctx.fail(f"{what} has shape {list(a.shape)}; block_size {block} along axis {axis} of an input "
                 f"{shape} needs {want}")
    return np.repeat(a, block, axis=axis).take(np.arange(shape[axis]), axis=axis)


def _blocked_quantize(ctx, x, ins, axis, block, attrs):
    """Blocked quantization stays elementwise float arithmetic (the spec's formula, half to even):
    blocks are for weight-only quantized layers, which qnn's per-tensor/per-channel ops do not cover."""
    s = _block_expand(ctx, x, ins[1], axis, block, "y_scale").astype(np.float32)
    _scale(ctx, const(s.reshape(-1)), "y_scale")
    zp = ins[2] if len(ins) > 2 else None
    if zp is not None:
        z = _block_expand(ctx, x, zp, axis, block, "y_zero_point")
        dtype = z.dtype.name
    else:
        dtype = helper.tensor_dtype_to_np_dtype(attrs["output_dtype"]).name if attrs.get("output_dtype") else "uint8"
        z = np.zeros(s.shape, dtype)
    _zero_point(ctx, const(z.reshape(-1)), "y_zero_point")
    lo, hi = dtype_range(dtype)
    q = tensor.add(tensor.round(tensor.divide(x, const(s))), const(z.astype(np.float32)))
    return tf.cast(tensor.clip(q, float(lo), float(hi)), dtype)


def _blocked_dequantize(ctx, x, ins, axis, block):
    s = _block_expand(ctx, x, ins[1], axis, block, "x_scale").astype(np.float32)
    _scale(ctx, const(s.reshape(-1)), "x_scale")
    xf = tf.cast(x, "float32")
    if len(ins) > 2 and ins[2] is not None:
        z = _block_expand(ctx, x, ins[2], axis, block, "x_zero_point")
        xf = tensor.subtract(xf, const(z.astype(np.float32)))
    return tensor.multiply(xf, const(s))


def _quantize_linear(ctx, ins, attrs):
    x = ins[0]
    if attrs.get("block_size", 0) > 0:
        return _blocked_quantize(ctx, x, ins, attrs.get("axis", 1), attrs["block_size"], attrs)
    if not isinstance(ins[1], Constant) or (len(ins) > 2 and ins[2] is not None and not isinstance(ins[2], Constant)):
        s, z, dtype = _dynamic(ctx, ins, "y")
        return qop.quantize(x, s, z, out_dtype=dtype, rounding=ROUNDING)
    axis = attrs.get("axis", 1)
    n = _channels(ctx, x, axis)
    s = _scale(ctx, ins[1], "y_scale", n)
    z, dtype = _zero_point(ctx, ins[2] if len(ins) > 2 else None, "y_zero_point", None, n)
    return qop.quantize(x, s, z, axis=axis if s.data.size > 1 else -1, out_dtype=dtype, rounding=ROUNDING)


def _dequantize_linear(ctx, ins, attrs):
    x = ins[0]
    if attrs.get("block_size", 0) > 0:
        return _blocked_dequantize(ctx, x, ins, attrs.get("axis", 1), attrs["block_size"])
    axis = attrs.get("axis", 1)
    n = _channels(ctx, x, axis)
    s = _scale(ctx, ins[1], "x_scale", n)
    z, _ = _zero_point(ctx, ins[2] if len(ins) > 2 else None, "x_zero_point", _dtype(ctx, x), n)
    return qop.dequantize(x, s, z, axis=axis if s.data.size > 1 else -1)


_dequantize_linear.keep_unfolded = True  # the importer keeps DequantizeLinear(weight) integer


# -- QOperator: conv / matmul ---------------------------------------------------------------------

def _conv3d_core(ctx, x, w, zx, zw, sx, sw, attrs):
    """int32 accumulators of a 3-D (NCDHW) convolution: one qnn.conv2d per kernel depth tap over
    depth slices (conv3d.py's scheme), depth padded with the input's zero point (a quantized zero)."""
    if not isinstance(w, Constant) or np.asarray(zx.data).size != 1:
        ctx.fail("a 3-D quantized convolution needs a constant weight and one input zero point")
    return depth_sliced(ctx, x, w, attrs, lambda xs, ws, a: _conv_core(ctx, xs, ws, zx, zw, sx, sw, a)[0],
                        pad_value=float(np.asarray(zx.data)))


def _conv_core(ctx, x, w, zx, zw, sx, sw, attrs):
    """qnn.conv2d (int32) for 2-D, 1-D lifted to H = 1 (second result True), 3-D by depth slices."""
    xs, ws = ctx.shape_of(x), ctx.shape_of(w)
    if len(xs) == 5 and len(ws) == 5:
        return _conv3d_core(ctx, x, w, zx, zw, sx, sw, attrs), False
    one_d = len(xs) == 3
    if len(xs) not in (3, 4) or len(ws) != len(xs):
        ctx.fail(f"only 1-D, 2-D and 3-D convolutions are supported; input shape {list(xs)}, weight {list(ws)}")
    attrs = dict(attrs)
    if one_d:
        x, w = tf.expand_dims(x, 2), (const(w.data[:, :, None]) if isinstance(w, Constant) else tf.expand_dims(w, 2))
        for key in ("kernel_shape", "strides", "dilations"):
            if key in attrs:
                attrs[key] = [1] + list(attrs[key])
        if "pads" in attrs:
            if len(attrs["pads"]) != 2:
                ctx.fail(f"attribute pads={attrs['pads']} of a 1-D convolution needs 2 values (begin, end)")
            attrs["pads"] = [0, attrs["pads"][0], 0, attrs["pads"][1]]
        xs, ws = xs[:2] + (1,) + xs[2:], ws[:2] + (1,) + ws[2:]
    kernel = list(attrs.get("kernel_shape", ws[2:]))
    strides = list(attrs.get("strides", [1, 1]))
    dil = list(attrs.get("dilations", [1, 1]))
    lo, hi = _pads_nd(attrs, xs[2:], kernel, strides, dil)
    out = qop.conv2d(x, w, zx, zw, sx, sw, kernel_size=kernel, channels=ws[0], strides=strides,
                     padding=(lo[0], lo[1], hi[0], hi[1]), dilation=dil, groups=attrs.get("group", 1))
    return out, one_d


def _out_params(ctx, ins, i_scale, i_zp, what="y"):
    s = _scale(ctx, ins[i_scale], f"{what}_scale")
    z, dtype = _zero_point(ctx, ins[i_zp] if len(ins) > i_zp else None, f"{what}_zero_point")
    return s, z, dtype


def _qlinear_conv(ctx, ins, attrs):
    x, w = ins[0], ins[3]
    for k, what in ((1, "x_scale"), (2, "x_zero_point"), (6, "y_scale"), (7, "y_zero_point")):
        _per_tensor(ctx, ins, k, what)
    oc = _shape(ctx, w, "w", 3)[0]
    sx = _scale(ctx, ins[1], "x_scale")
    zx, _ = _zero_point(ctx, ins[2], "x_zero_point", _dtype(ctx, x))
    sw = _scale(ctx, ins[4], "w_scale", oc)
    zw, _ = _zero_point(ctx, ins[5], "w_zero_point", _dtype(ctx, w), oc)
    sy, zy, ydtype = _out_params(ctx, ins, 6, 7)
    acc, one_d = _conv_core(ctx, x, w, zx, zw, sx, sw, attrs)
    acc_scale = const((np.float64(sx.data) * sw.data.astype(np.float64)).astype("float32"))
    if len(ins) > 8 and ins[8] is not None:
        acc = tensor.add(acc, tf.reshape(tf.cast(ins[8], "int32"), (1, -1) + (1,) * (len(ctx.shape_of(acc)) - 2)))
    out = qop.requantize(acc, acc_scale, 0, sy, zy, axis=1, rounding=ROUNDING, out_dtype=ydtype)
    return tf.squeeze(out, [2]) if one_d else out


def _conv_integer(ctx, ins, attrs):
    x, w = ins[0], ins[1]
    zx = ins[2] if len(ins) > 2 and ins[2] is not None else const(np.int32(0))
    zw = ins[3] if len(ins) > 3 and ins[3] is not None else const(np.int32(0))
    _per_tensor(ctx, ins, 2, "x_zero_point")
    if isinstance(zx, Constant):
        zx, _ = _zero_point(ctx, zx, "x_zero_point", _dtype(ctx, x))
    if isinstance(zw, Constant):
        zw, _ = _zero_point(ctx, zw, "w_zero_point", _dtype(ctx, w), _shape(ctx, w, "w", 3)[0])
    acc, one_d = _conv_core(ctx, x, w, zx, zw, const(np.float32(1)), const(np.float32(1)), attrs)
    return tf.squeeze(acc, [2]) if one_d else acc


def _matmul_core(ctx, a, b, za, zb, sa, sb):
    """int32 (a - za) @ (b - zb) for a of rank >= 1 and b of rank 2 (dense) or equal rank 3."""
    sa_shape, sb_shape = ctx.shape_of(a), ctx.shape_of(b)
    if len(sb_shape) == 2:
        k, n = sb_shape
        rows = a if len(sa_shape) == 2 else tf.reshape(a, (-1, k))
        w = const(np.ascontiguousarray(b.data.T)) if isinstance(b, Constant) else tf.transpose(b, (1, 0))
        out = qop.dense(rows, w, za, zb, sa, sb, units=n)
        return out if len(sa_shape) == 2 else tf.reshape(out, sa_shape[:-1] + (n,))
    if len(sa_shape) == 3 and len(sb_shape) == 3 and np.asarray(zb.data if isinstance(zb, Constant) else 0).size <= 1:
        return qop.batch_matmul(a, b, za, zb, sa, sb, transpose_b=False)
    ctx.fail(f"supports A of any rank with a 2-D B, or two 3-D operands; got {list(sa_shape)} @ {list(sb_shape)}")


def _qlinear_matmul(ctx, ins, attrs):
    a, b = ins[0], ins[3]
    n = _shape(ctx, b, "b", 1)[-1]
    sa = _scale(ctx, ins[1], "a_scale")
    za, _ = _zero_point(ctx, ins[2], "a_zero_point", _dtype(ctx, a))
    sb = _scale(ctx, ins[4], "b_scale", n)
    zb, _ = _zero_point(ctx, ins[5], "b_zero_point", _dtype(ctx, b), n)
    sy, zy, ydtype = _out_params(ctx, ins, 6, 7)
    acc = _matmul_core(ctx, a, b, za, zb, sa, sb)
    acc_scale = const((np.float64(sa.data) * sb.data.astype(np.float64)).astype("float32"))
    return qop.requantize(acc, acc_scale, 0, sy, zy, axis=-1, rounding=ROUNDING, out_dtype=ydtype)


def _matmul_integer(ctx, ins, attrs):
    a, b = ins[0], ins[1]
    za = ins[2] if len(ins) > 2 and ins[2] is not None else const(np.int32(0))
    zb = ins[3] if len(ins) > 3 and ins[3] is not None else const(np.int32(0))
    if isinstance(za, Constant):
        za, _ = _zero_point(ctx, za, "a_zero_point", _dtype(ctx, a))
    if isinstance(zb, Constant):
        zb, _ = _zero_point(ctx, zb, "b_zero_point", _dtype(ctx, b), _shape(ctx, b, "b", 1)[-1])
    one = const(np.float32(1))
    return _matmul_core(ctx, a, b, za, zb, one, one)


def _qgemm(ctx, ins, attrs):
    a, b = ins[0], ins[3]
    if attrs.get("transA", 0):
        a = tf.transpose(a, (1, 0))
    if attrs.get("transB", 0):
        b = const(np.ascontiguousarray(b.data.T)) if isinstance(b, Constant) else tf.transpose(b, (1, 0))
    n = _shape(ctx, b, "B", 1)[-1]
    sa = _scale(ctx, ins[1], "a_scale")
    za, _ = _zero_point(ctx, ins[2], "a_zero_point", _dtype(ctx, a))
    sb = _scale(ctx, ins[4], "b_scale", n)
    zb, _ = _zero_point(ctx, ins[5], "b_zero_point", _dtype(ctx, b), n)
    acc = _matmul_core(ctx, a, b, za, zb, sa, sb)
    alpha = float(attrs.get("alpha", 1.0))
    acc_scale = (np.float64(sa.data) * sb.data.astype(np.float64) * alpha).astype("float32")
    if len(ins) > 6 and ins[6] is not None:  # C: int32 at scale alpha * a_scale * b_scale
        acc = tensor.add(acc, tf.cast(ins[6], "int32"))
    if len(ins) > 7 and ins[7] is not None:
        sy, zy, ydtype = _out_params(ctx, ins, 7, 8)
        return qop.requantize(acc, const(acc_scale), 0, sy, zy, axis=-1, rounding=ROUNDING, out_dtype=ydtype)
    return qop.dequantize(acc, const(acc_scale), 0, axis=-1)


# -- QOperator: elementwise, pools, tables ---------------------------------------------------------

def _qlinear_binary(fn):
    def convert(ctx, ins, attrs):
        a, b = ins[0], ins[3]
        sa = _scale(ctx, ins[1], "A_scale")
        za, _ = _zero_point(ctx, ins[2], "A_zero_point", _dtype(ctx, a))
        sb = _scale(ctx, ins[4], "B_scale")
        zb, _ = _zero_point(ctx, ins[5], "B_zero_point", _dtype(ctx, b))
        sc, zc, cdtype = _out_params(ctx, ins, 6, 7, "C")
        return fn(a, b, sa, za, sb, zb, sc, zc, rounding=ROUNDING, out_dtype=cdtype)
    return convert


def _qlinear_concat(ctx, ins, attrs):
    sy, zy, ydtype = _out_params(ctx, ins, 0, 1, "Y")
    rest = ins[2:]
    if len(rest) % 3 or not rest:
        ctx.fail(f"takes Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples; got {len(ins)} inputs")
    xs = rest[0::3]
    scales = [_scale(ctx, s, f"input {i} scale") for i, s in enumerate(rest[1::3])]
    zps = [_zero_point(ctx, z, f"input {i} zero point", _dtype(ctx, x))[0]
           for i, (x, z) in enumerate(zip(xs, rest[2::3]))]
    if "axis" not in attrs:
        ctx.fail("the required attribute 'axis' is missing")
    return qop.concatenate(xs, scales, zps, sy, zy, attrs["axis"], rounding=ROUNDING, out_dtype=ydtype)


def _io_params(ctx, ins):
    x = ins[0]
    sx = _scale(ctx, ins[1], "X_scale")
    zx, _ = _zero_point(ctx, ins[2] if len(ins) > 2 else None, "X_zero_point", _dtype(ctx, x))
    sy = _scale(ctx, ins[3], "Y_scale")
    zy, _ = _zero_point(ctx, ins[4] if len(ins) > 4 else None, "Y_zero_point", _dtype(ctx, x))
    return x, sx, zx, sy, zy


def _qlinear_avg_pool(ctx, ins, attrs):
    x, sx, zx, sy, zy = _io_params(ctx, ins)
    if attrs.get("channels_last", 0):
        ctx.fail("channels_last=1 is not supported; export the model with NCHW pooling")
    shape = ctx.shape_of(x)
    one_d = len(shape) == 3
    if len(shape) not in (3, 4):
        ctx.fail(f"only 1-D and 2-D pooling is supported; input shape {list(shape)}")
    if "kernel_shape" not in attrs:
        ctx.fail("the required attribute 'kernel_shape' is missing")
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1] * len(kernel)))
    pads = list(attrs.get("pads", [0] * 2 * len(kernel)))
    if one_d:
        x = tf.expand_dims(x, 2)
        kernel, strides, pads, shape = [1] + kernel, [1] + strides, [0, pads[0], 0, pads[1]], shape[:2] + (1,) + shape[2:]
    lo, hi = _pads_nd({**attrs, "pads": pads}, shape[2:], kernel, strides, [1, 1])
    out = qop.avg_pool2d(x, sx, zx, sy, zy, pool_size=kernel, strides=strides, padding=(lo[0], lo[1], hi[0], hi[1]),
                         ceil_mode=bool(attrs.get("ceil_mode", 0)),
                         count_include_pad=bool(attrs.get("count_include_pad", 0)))
    return tf.squeeze(out, [2]) if one_d else out


def _qlinear_global_avg_pool(ctx, ins, attrs):
    x, sx, zx, sy, zy = _io_params(ctx, ins)
    if len(ctx.shape_of(x)) != 4:
        ctx.fail(f"only 4-d inputs are supported; got shape {list(ctx.shape_of(x))}")
    layout = "NHWC" if attrs.get("channels_last", 0) else "NCHW"
    return qop.global_avg_pool2d(x, sx, zx, sy, zy, layout=layout, rounding=ROUNDING)


def _qlinear_unary(fn, **fixed):
    def convert(ctx, ins, attrs):
        x, sx, zx, sy, zy = _io_params(ctx, ins)
        if _dtype(ctx, x) not in ("int8", "uint8"):
            ctx.fail(f"input X is {_dtype(ctx, x)}; the table ops take int8 or uint8")
        extra = {k: attrs.get(k, v) for k, v in fixed.items()}
        return fn(x, sx, zx, sy, zy, **extra)
    return convert


def _qlinear_softmax(ctx, ins, attrs):
    x, sx, zx, sy, zy = _io_params(ctx, ins)
    shape = ctx.shape_of(x)
    axis = attrs.get("axis", -1)
    if attrs.get("opset", 13) < 13:  # softmax over the flattened tail, as Softmax-1/11
        axis = axis % len(shape)
        flat = tf.reshape(x, (int(np.prod(shape[:axis])), -1))
        return tf.reshape(qop.softmax(flat, sx, zx, sy, zy, axis=1), shape)
    return qop.softmax(x, sx, zx, sy, zy, axis=axis)


def _dynamic_quantize_linear(ctx, ins, attrs):
    """uint8 with a scale and zero point from the tensor's range (computed at run time)."""
    x = ins[0]
    zero = const(np.float32(0))
    hi = tensor.maximum(reduce.max(x), zero)
    lo = tensor.minimum(reduce.min(x), zero)
    scale = tensor.divide(tensor.subtract(hi, lo), const(np.float32(255)))
    zp = tf.cast(tensor.clip(tensor.round(tensor.divide(tensor.negative(lo), scale)), 0, 255), "uint8")
    y = qop.quantize(x, scale, tf.cast(zp, "int32"), out_dtype="uint8")
    return [y, scale, zp]


def _arity(fn, least: int, most: int):
    """onnxruntime's contrib ops have no ONNX schema to check the node against: check here."""
    def convert(ctx, ins, attrs):
        if not least <= len(ins) <= most or any(i is None for i in ins[:least]):
            ctx.fail(f"has {len(ins)} inputs ({sum(i is not None for i in ins)} given); "
                     f"{ctx.node.op_type} takes {least} to {most}, the first {least} required")
        return fn(ctx, ins, attrs)
    return convert


CONVERTERS = {
    "QuantizeLinear": _quantize_linear, "DequantizeLinear": _dequantize_linear,
    "QLinearConv": _qlinear_conv, "ConvInteger": _conv_integer, "QLinearMatMul": _qlinear_matmul,
    "MatMulInteger": _matmul_integer, "DynamicQuantizeLinear": _dynamic_quantize_linear,
    # onnxruntime's com.microsoft contrib ops
    "QGemm": _arity(_qgemm, 6, 9), "QLinearAdd": _arity(_qlinear_binary(qop.add), 7, 8),
    "QLinearMul": _arity(_qlinear_binary(qop.mul), 7, 8), "QLinearConcat": _arity(_qlinear_concat, 5, 10 ** 6),
    "QLinearAveragePool": _arity(_qlinear_avg_pool, 4, 5),
    "QLinearGlobalAveragePool": _arity(_qlinear_global_avg_pool, 4, 5),
    "QLinearSigmoid": _arity(_qlinear_unary(qop.sigmoid), 4, 5),
    "QLinearLeakyRelu": _arity(_qlinear_unary(qop.leaky_relu, alpha=0.01), 4, 5),
    "QLinearSoftmax": _arity(_qlinear_softmax, 4, 5),
}

# Ops of another domain that the importer accepts: (domain, op_type).
DOMAIN_OPS = {(MS_DOMAIN, name) for name in ("QGemm", "QLinearAdd", "QLinearMul", "QLinearConcat",
                                             "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearSigmoid",
                                             "QLinearLeakyRelu", "QLinearSoftmax", "QuantizeLinear",
                                             "DequantizeLinear")}
