"""CanonicalizeOps: every qnn op becomes integer relay ops that topi already computes.

- requantize: int64 fixed point (fixed_point.py): ``x * q`` then a rounding shift, written with
  multiply / add / a right shift by ``s`` of a numerator made non-negative (so each
  value is read once in a fused kernel), per channel where the scales are. Every target computes it this way (int64 exists on x86, AArch64, CUDA and OpenCL); scales
  known only at run time (DynamicQuantizeLinear) take float32 instead.
- conv2d / dense / batch_matmul: the integer op on the raw int8/uint8 tensors with an int32
  result, minus the zero-point terms:
  ``sum (x-zx)(w-zw) = sum xw - zw sum x - zx sum w + K zx zw`` (terms with a zero zero point
  are left out; ``sum w`` of a constant kernel folds at build time). A non-zero data zero point
  pads explicitly with that zero point, so padding stays real zero.
- add / subtract / mul / concatenate / global_avg_pool2d: requantize + int32 arithmetic.
- ``rounding="FLOAT32"`` (onnxruntime's arithmetic, the ONNX importer's choice; fixed_point.py):
  requantize is ``round(float32(x) * m)`` with the float32 multiplier ``m``; add/subtract are
  QLinearAdd's two fused multiply-adds, one op (``nn.contrib_qlinear_add``, qlinear_add.py);
  concatenate dequantizes and quantizes in float32.
- unary ops: ``take`` from their 256-entry table; avg_pool2d and softmax: float32 inside.
"""

from __future__ import annotations

import numpy as np

from ..expr import const
from ..op import math_ops as fmath
from ..op import nn as fnn
from ..op import nn_norm as fnorm
from ..op import nn_pool as fpool
from ..op import reduce as fred
from ..op import tensor as ft
from ..op import transform as ftf
from ..transform.infer_type import infer
from ..visitor import ExprMutator
from .fixed_point import dtype_range, float32_multiplier, quantize_multiplier
from . import op as qop
from .op.core import multiplier
from .op.elemwise import lut_table
from .op.params import along, value_of
from .qlinear_add import qlinear_add


def _dtype(e) -> str:
    return infer(e).checked_type.dtype


def _ndim(e) -> int:
    return len(infer(e).checked_type.shape)


def _cast(e, dtype):
    return e if _dtype(e) == dtype else ftf.cast(e, dtype)


def _is_zero(zp) -> bool:
    v = value_of(zp)
    return v is not None and not np.any(v)


def _param(e, axis, ndim, dtype):
    """A scale/zero point expression shaped to broadcast along ``axis`` (constants reshaped here)."""
    v = value_of(e)
    if v is not None:
        return const(along(v, axis, ndim).astype(dtype))
    return _cast(e, dtype)


def _clip_cast(x, dtype):
    lo, hi = dtype_range(dtype)
    src = _dtype(x)
    if src.startswith("float"):
        return ftf.cast(ft.clip(x, lo, hi), dtype)
    # integers: minimum(maximum()) reads x once in TIR (clip's two selects read it three times,
    # and chained requantizes in one fused kernel would repeat whole expressions)
    return ftf.cast(ft.minimum(ft.maximum(x, const(lo, src)), const(hi, src)), dtype)


def fixed_point(x64, real, rounding: str, axis: int, ndim: int):
    """``round(x64 * real)`` as ``(expr, offset)``: int64 relay ops plus a numpy constant to add.

    The constant comes apart so that a caller adds all of its constants as one: kiln's TIR
    simplifier keys two scalar constants of a fused kernel alike and merged them (wrong code)."""
    q, e = quantize_multiplier(real)
    zero = np.zeros((), np.int64)
    if not np.any(q):
        return ft.multiply(x64, const(0, "int64")), zero
    c = lambda v: const(along(np.asarray(v, np.int64), axis, ndim).astype("int64"))  # noqa: E731
    if rounding == "TFLITE":
        left = np.maximum(e, 0)
        right = np.maximum(-e, 0)
        if np.any(left):
            x64 = ft.clip(ft.multiply(x64, c(np.left_shift(1, left))), -(1 << 31), (1 << 31) - 1)
        ab = ft.multiply(x64, c(q))
        # TFLite's (ab + nudge) / 2**31 truncated toward zero, nudge 2**30 or 1 - 2**30 by sign, is
        # floor((ab + 2**30) / 2**31) for either sign (ab < 0: trunc(t / 2**31) = floor((t + 2**31
        # - 1) / 2**31) for t = ab + 1 - 2**30 < 0): one add and an arithmetic shift
        high = fmath.right_shift(ft.add(ab, const(1 << 30, "int64")), const(31, "int64"))
        if not np.any(right):
            return high, zero
        # floor_mod / floor_divide by 2**right as a mask and an arithmetic shift (same integers in
        # two's complement): a per-channel divisor is a run-time 64-bit division on 32-bit cores
        rem = fmath.bitwise_and(high, c(np.left_shift(1, right) - 1))
        threshold = ft.add(c(np.right_shift(np.left_shift(1, right) - 1, 1)),
                           ftf.cast(ft.less(high, const(0, "int64")), "int64"))
        return ft.add(fmath.right_shift(high, c(right)), ftf.cast(ft.greater(rem, threshold), "int64")), zero
    # floor((p + half) / 2**s) as a shift of a non-negative numerator: |p| < 2**62, so adding 2**62
    # keeps it in int64, and p is referenced once (a floor division's select would repeat it, and
    # fused chains of requantize would grow exponentially in TIR). A shift, not a divide: a
    # per-channel 2**s is a run-time 64-bit division (__aeabi_ldivmod) on 32-bit cores.
    s = 31 - e
    p = ft.multiply(x64, c(q))
    bias = c(np.left_shift(1, s - 1) + (1 << 62))
    num = ft.add(p, bias)
    if rounding == "TONEAREST":  # ties away from zero: one less for negative products (sign of x)
        num = ft.subtract(num, ftf.cast(ft.less(x64, const(0, "int64")), "int64"))
    return fmath.right_shift(num, c(s)), -along(np.left_shift(np.int64(1), 62 - s), axis, ndim)


def _plus(expr, offset):
    offset = np.asarray(offset, np.int64)
    return expr if not np.any(offset) else ft.add(expr, const(offset))


def requantize_expr(x, si, zi, so, zo, axis=-1, rounding="UPWARD", out_dtype="int8", clip=True):
    """Lowered qnn.requantize of ``x``; with ``clip=False`` ``(int64 expr, offset)`` before the zero point."""
    ndim = _ndim(x)
    axis = axis % ndim if ndim else 0
    vsi, vso = value_of(si), value_of(so)
    if vsi is None or vso is None:  # scales computed at run time: float32
        centered = ftf.cast(_centered(x, zi, axis, ndim, "int32"), "float32")
        y = ft.round(ft.multiply(centered, ft.divide(_param(si, axis, ndim, "float32"),
                                                     _param(so, axis, ndim, "float32"))))
        if not clip:
            return ftf.cast(y, "int64"), np.zeros((), np.int64)
        return _clip_cast(ft.add(y, _param(zo, axis, ndim, "float32")), out_dtype)
    real = multiplier(vsi, vso)
    if clip and np.all(real == 1.0) and _dtype(x) == out_dtype and _same(zi, zo):
        return x
    if rounding == "FLOAT32":
        m = const(along(float32_multiplier(vsi, vso), axis, ndim).astype("float32"))
        y = ft.round(ft.multiply(ftf.cast(_centered(x, zi, axis, ndim, "int32"), "float32"), m))
        if not clip:
            return ftf.cast(y, "int64"), np.zeros((), np.int64)
        return _clip_cast(ft.add(y, _param(zo, axis, ndim, "float32")), out_dtype)
    y, offset = fixed_point(_centered(x, zi, axis, ndim, "int64"), real, rounding, axis, ndim)
    if not clip:
        return y, offset
    vzo = value_of(zo)
    if vzo is None:
        return _clip_cast(ft.add(_plus(y, offset), _param(zo, axis, ndim, "int64")), out_dtype)
    return _clip_cast(_plus(y, offset + along(vzo.astype(np.int64), axis, ndim)), out_dtype)


def _same(a, b) -> bool:
    va, vb = value_of(a), value_of(b)
    return va is not None and vb is not None and va.shape == vb.shape and bool(np.all(va == vb))


def _centered(x, zp, axis, ndim, dtype):
    x = _cast(x, dtype)
    return x if _is_zero(zp) else ft.subtract(x, _param(zp, axis, ndim, dtype))


# -- one lowering per op --------------------------------------------------------------------------

def _quantize(call, x, s, z):
    a = call.attrs
    ndim = _ndim(x)
    y = ft.round(ft.divide(x, _param(s, a.axis, ndim, "float32")))
    if not _is_zero(z):
        y = ft.add(y, _param(z, a.axis, ndim, "float32"))
    return _clip_cast(y, a.out_dtype)


def _dequantize(call, x, s, z):
    ndim = _ndim(x)
    centered = _centered(x, z, call.attrs.axis, ndim, "int32")
    return ft.multiply(ftf.cast(centered, "float32"), _param(s, call.attrs.axis, ndim, "float32"))


def _requantize(call, x, si, zi, so, zo):
    a = call.attrs
    return requantize_expr(x, si, zi, so, zo, a.axis, a.rounding, a.out_dtype)


def _conv_like(x, w, zx, zw, make, window_sum, weight_sum, k, out_axis, ndim_out):
    """``make(x, w)`` minus the zero-point terms (see the module docstring)."""
    out = make(x, w)
    if not _is_zero(zw):
        out = ft.subtract(out, ft.multiply(window_sum(), _param(zw, out_axis, ndim_out, "int32")))
    if not _is_zero(zx):
        zx32 = _cast(zx, "int32")
        wsum = weight_sum()
        if not _is_zero(zw):  # sum (w - zw) = sum w - K zw
            wsum = ft.subtract(wsum, ft.multiply(const(k, "int32"), _param(zw, out_axis, ndim_out, "int32")))
        out = ft.subtract(out, ft.multiply(zx32, wsum))
    return out


def _conv2d(call, x, w, zx, zw, sx, sw):
    a = call.attrs
    if a.data_layout != "NCHW" or a.kernel_layout != "OIHW":
        raise _unsupported(call, "canonicalizes NCHW data with OIHW kernels; run ConvertLayout after it")
    if value_of(zx) is None or value_of(zw) is None:  # zero points computed at run time (ConvInteger)
        xc, wc = _centered(x, zx, 0, 0, "int32"), _centered(w, zw, 0, 4, "int32")
        return fnn.conv2d(xc, wc, **_conv_kw(a, a.padding))
    padding = a.padding
    if not _is_zero(zx) and any(padding):
        pt, pl, pb, pr = padding
        x = fnn.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), pad_value=float(value_of(zx)))
        padding = (0, 0, 0, 0)
    o, cg, kh, kw = infer(w).checked_type.shape
    g = a.groups

    def window_sum():
        ones = const(np.ones((g, cg, kh, kw), dtype=_dtype(w)))
        sums = fnn.conv2d(x, ones, **{**_conv_kw(a, padding), "channels": g})  # (N, g, OH, OW)
        if g == 1:
            return sums
        n, _, oh, ow = infer(sums).checked_type.shape
        return ftf.reshape(ftf.broadcast_to(ftf.reshape(sums, (n, g, 1, oh, ow)), (n, g, o // g, oh, ow)),
                           (n, o, oh, ow))

    def weight_sum():
        return ftf.reshape(fred.sum(_cast(w, "int32"), axis=(1, 2, 3)), (1, o, 1, 1))

    return _conv_like(x, w, zx, zw, lambda xx, ww: fnn.conv2d(xx, ww, **_conv_kw(a, padding)),
                      window_sum, weight_sum, cg * kh * kw, 1, 4)


def _conv_kw(a, padding):
    return dict(strides=a.strides, padding=padding, dilation=a.dilation, groups=a.groups, channels=a.channels,
                kernel_size=a.kernel_size, data_layout=a.data_layout, kernel_layout=a.kernel_layout,
                out_dtype="int32")


def _conv2d_transpose(call, x, w, zx, zw, sx, sw):
    a = call.attrs
    xc, wc = _centered(x, zx, 0, 0, "int32"), _centered(w, zw, 0, 0, "int32")
    return fnn.conv2d_transpose(xc, wc, strides=a.strides, padding=a.padding, dilation=a.dilation, groups=a.groups,
                                channels=a.channels, kernel_size=a.kernel_size, data_layout=a.data_layout,
                                kernel_layout=a.kernel_layout, output_padding=a.output_padding, out_dtype="int32")


def _dense(call, x, w, zx, zw, sx, sw):
    nd = _ndim(x)
    k = infer(w).checked_type.shape[1]
    return _conv_like(
        x, w, zx, zw, lambda xx, ww: fnn.dense(xx, ww, units=call.attrs.units, out_dtype="int32"),
        lambda: fred.sum(_cast(x, "int32"), axis=-1, keepdims=True),
        lambda: fred.sum(_cast(w, "int32"), axis=1), k, nd - 1, nd)


def _batch_matmul(call, x, y, zx, zy, sx, sy):
    a = call.attrs
    xt, yt = infer(x).checked_type.shape, infer(y).checked_type.shape
    k = xt[1] if a.transpose_a else xt[2]

    def x_sum():  # (B, M, 1)
        s = fred.sum(_cast(x, "int32"), axis=1 if a.transpose_a else 2, keepdims=True)
        return ftf.transpose(s, (0, 2, 1)) if a.transpose_a else s

    def y_sum():  # (B, 1, N)
        s = fred.sum(_cast(y, "int32"), axis=2 if a.transpose_b else 1, keepdims=True)
        return ftf.transpose(s, (0, 2, 1)) if a.transpose_b else s

    return _conv_like(x, y, zx, zy, lambda xx, yy: fnn.batch_matmul(xx, yy, out_dtype="int32",
                                                                    transpose_a=a.transpose_a,
                                                                    transpose_b=a.transpose_b),
                      x_sum, y_sum, k, 0, 0)


def _avg_pool2d(call, x, si, zi, so, zo):
    from .avg_pool_int import integer_avg_pool
    y = integer_avg_pool(call, x, si, zi, so, zo)  # Cortex-M: in integers where exact (avg_pool_int.py)
    if y is not None:
        return y
    a = call.attrs
    # onnxruntime's QLinearAveragePool, step for step in float32: the window's dequantized values
    # summed in order, divided by the count, divided by the output scale, plus the output zero
    # point, rounded half to even (with the zero point added after the rounding, or the scale
    # ratio applied to the integer mean, ties and near-ties round apart: DenseNet's transitions)
    real = ft.multiply(ftf.cast(_centered(x, zi, 0, 0, "int32"), "float32"), _param(si, 0, 0, "float32"))
    kw = {k: a[k] for k in ("pool_size", "strides", "dilation", "padding", "layout", "out_layout", "ceil_mode",
                            "count_include_pad")}
    mean = fpool.avg_pool2d(real, **kw)
    y = ft.round(ft.add(ft.divide(mean, _param(so, 0, 0, "float32")), _param(zo, 0, 0, "float32")))
    return _clip_cast(y, _dtype(x))


def _global_avg_pool2d(call, x, si, zi, so, zo):
    a = call.attrs
    shape = infer(x).checked_type.shape
    hi, wi = a.layout.index("H"), a.layout.index("W")
    total = fred.sum(_centered(x, zi, 0, 0, "int32"), axis=(hi, wi), keepdims=True)
    if a.rounding == "FLOAT32":
        m = float32_multiplier(value_of(si).ravel()[0], value_of(so).ravel()[0], int(shape[hi] * shape[wi]))
        y = ft.round(ft.multiply(ftf.cast(total, "float32"), const(np.float32(m))))
        return _clip_cast(ft.add(y, const(np.float32(value_of(zo).ravel()[0]))), _dtype(x))
    real = multiplier(value_of(si), value_of(so)) / (shape[hi] * shape[wi])
    y, offset = fixed_point(_cast(total, "int64"), real, a.rounding, 0, 0)
    return _clip_cast(_plus(y, offset + np.int64(value_of(zo).ravel()[0])), _dtype(x))


def _add_like(sign):
    def lower(call, a, b, sa, za, sb, zb, so, zo):
        r = call.attrs.rounding
        if r == "FLOAT32":
            return _add_float32(call, a, b, sa, za, sb, zb, so, zo, sign)
        ya, oa = requantize_expr(a, sa, za, so, zo, rounding=r, clip=False)
        yb, ob = requantize_expr(b, sb, zb, so, zo, rounding=r, clip=False)
        y = ft.add(ya, yb) if sign > 0 else ft.subtract(ya, yb)
        offset = oa + sign * ob + np.int64(value_of(zo).ravel()[0])
        return _clip_cast(_plus(y, offset), call.attrs.out_dtype or _dtype(a))
    return lower


def _add_float32(call, a, b, sa, za, sb, zb, so, zo, sign):
    """onnxruntime's QLinearAdd (fixed_point.add_float32) as one op (qlinear_add.py)."""
    vs = [value_of(v) for v in (sa, za, sb, zb, so, zo)]
    if any(v is None or v.size != 1 for v in vs):
        raise _unsupported(call, "FLOAT32 rounding needs constant per-tensor scales and zero points")
    return qlinear_add(a, b, *(v.ravel()[0] for v in vs), sign, call.attrs.out_dtype or _dtype(a),
                       (_dtype(a), _dtype(b)))


def _mul(call, a, b, sa, za, sb, zb, so, zo):
    vs = [value_of(s) for s in (sa, sb, so)]
    if any(v is None for v in vs):
        raise _unsupported(call, "needs constant scales")
    if call.attrs.rounding == "FLOAT32":  # onnxruntime's QLinearMul: float32(prod) * (sa * sb / so)
        prod = ft.multiply(_centered(a, za, 0, 0, "int32"), _centered(b, zb, 0, 0, "int32"))
        m = float32_multiplier(np.float32(np.float32(vs[0].ravel()[0]) * np.float32(vs[1].ravel()[0])), vs[2].ravel()[0])
        y = ft.round(ft.multiply(ftf.cast(prod, "float32"), const(np.float32(m))))
        return _clip_cast(ft.add(y, const(np.float32(value_of(zo).ravel()[0]))), call.attrs.out_dtype or _dtype(a))
    prod = ft.multiply(_centered(a, za, 0, 0, "int64"), _centered(b, zb, 0, 0, "int64"))
    real = np.float64(vs[0]).ravel() * np.float64(vs[1]).ravel() / np.float64(vs[2]).ravel()
    y, offset = fixed_point(prod, real, call.attrs.rounding, 0, 0)
    return _clip_cast(_plus(y, offset + np.int64(value_of(zo).ravel()[0])), call.attrs.out_dtype or _dtype(a))


def _concatenate(call, data, scales, zps, so, zo):
    a = call.attrs
    dtype = a.out_dtype or _dtype(data.fields[0])
    if a.rounding == "FLOAT32":
        parts = [_concat_part_float32(x, s, z, so, zo, dtype) for x, s, z in zip(data.fields, scales.fields, zps.fields)]
    else:
        parts = [requantize_expr(x, s, z, so, zo, rounding=a.rounding, out_dtype=dtype)
                 for x, s, z in zip(data.fields, scales.fields, zps.fields)]
    return ftf.concatenate(parts, a.axis)


def _concat_part_float32(x, s, z, so, zo, dtype):
    """onnxruntime's QLinearConcat of one input: dequantize, then quantize, in float32."""
    vs = [value_of(v) for v in (s, z, so, zo)]
    if any(v is None or v.size != 1 for v in vs):
        return requantize_expr(x, s, z, so, zo, rounding="FLOAT32", out_dtype=dtype)
    vs_, vz, vso, vzo = (v.ravel()[0] for v in vs)
    if np.float32(vs_) == np.float32(vso) and vz == vzo and _dtype(x) == dtype:
        return x
    real = ft.multiply(ftf.cast(_centered(x, z, 0, 0, "int32"), "float32"), const(np.float32(vs_)))
    y = ft.round(ft.divide(real, const(np.float32(vso))))
    return _clip_cast(ft.add(y, const(np.float32(vzo))), dtype)


def _unary(name):
    def lower(call, x, si, zi, so, zo):
        in_dtype = _dtype(x)
        out_dtype = call.attrs.out_dtype or in_dtype
        table = lut_table(name, call.attrs, in_dtype, value_of(si), value_of(zi), value_of(so), value_of(zo),
                          out_dtype)
        index = ft.subtract(_cast(x, "int32"), const(dtype_range(in_dtype)[0], "int32"))
        return ftf.take(const(table), index, axis=0)
    return lower


def _softmax(call, x, si, zi, so, zo):
    real = ft.multiply(ftf.cast(_centered(x, zi, 0, 0, "int32"), "float32"), _param(si, 0, 0, "float32"))
    y = fnorm.softmax(real, call.attrs.axis)
    y = ft.add(ft.round(ft.divide(y, _param(so, 0, 0, "float32"))), _param(zo, 0, 0, "float32"))
    return _clip_cast(y, call.attrs.out_dtype or _dtype(x))


LOWERINGS = {
    "qnn.quantize": _quantize, "qnn.dequantize": _dequantize, "qnn.requantize": _requantize,
    "qnn.conv2d": _conv2d, "qnn.conv2d_transpose": _conv2d_transpose, "qnn.dense": _dense,
    "qnn.batch_matmul": _batch_matmul, "qnn.avg_pool2d": _avg_pool2d, "qnn.global_avg_pool2d": _global_avg_pool2d,
    "qnn.add": _add_like(1), "qnn.subtract": _add_like(-1), "qnn.mul": _mul, "qnn.concatenate": _concatenate,
    "qnn.softmax": _softmax,
    **{f"qnn.{name}": _unary(name) for name in qop.elemwise.UNARY},
}


def _unsupported(call, why: str):
    from kiln.errors import CompileError
    return CompileError(f"{call.op.name}: kiln {why}")


class _Canonicalize(ExprMutator):
    def visit_Function(self, f):
        if f.attrs.get("Primitive"):
            return f
        return super().visit_Function(f)

    def visit_Call(self, call):
        new = super().visit_Call(call)
        lower = LOWERINGS.get(getattr(new.op, "name", ""))
        if lower is None:
            return new
        return lower(new, *new.args)


def canonicalize(func):
    """``func`` with every qnn op replaced by integer relay ops."""
    return _Canonicalize().visit(infer(func))


__all__ = ["canonicalize", "requantize_expr", "fixed_point", "LOWERINGS"]
