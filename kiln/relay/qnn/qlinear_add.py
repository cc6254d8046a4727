"""``nn.contrib_qlinear_add``: qnn.add / qnn.subtract with ``FLOAT32`` rounding as one elementwise op.

onnxruntime's QLinearAdd (fixed_point.add_float32) is ``round(fma(ra, a, fma(rb, b, k)))`` in
float32. Written as relay ops, the part that reads only ``b`` fuses into ``b``'s producer (a conv
of the other residual branch) and is stored there as a float tensor four or eight times the size
of ``b``; as one op with two inputs, the add fuses into one producer and reads the other operand's
bytes. The fused multiply-adds are ``tir.fma`` (one rounding, as onnxruntime's AVX2 kernel): an
FMA instruction where the target has one, the C library's ``fmaf`` otherwise.
"""

from __future__ import annotations

import numpy as np

from ..op.registry import OpDef, OpPattern, RelCtx, broadcast_shapes
from ..ty import TensorType
from .fixed_point import dtype_range

_ATTRS = {"ra": 1.0, "rb": 1.0, "k": 0.0, "out_dtype": "uint8", "float_clamp": True}


def _rel(ctx: RelCtx):
    a, b = ctx.tensor(0), ctx.tensor(1)
    for i, t in enumerate((a, b)):
        if t.dtype not in ("int8", "uint8", "int16", "uint16", "int32"):
            ctx.fail(f"input {ctx.op.inputs[i]!r} must be an integer tensor, got {t.dtype}")
    return TensorType(broadcast_shapes(ctx, [a.shape, b.shape]), ctx.attrs.out_dtype)


def _fma32(x, r, c):
    return (np.asarray(x, np.float64) * np.float64(np.float32(r)) + np.asarray(c, np.float64)).astype(np.float32)


def _ref(attrs, a, b):
    """fixed_point.add_float32's arithmetic, from the op's float32 constants."""
    inner = _fma32(b.astype(np.float32), attrs.rb, np.float32(attrs.k))
    y = np.rint(_fma32(a.astype(np.float32), attrs.ra, inner))
    lo, hi = dtype_range(attrs.out_dtype)
    return np.clip(y, lo, hi).astype(attrs.out_dtype)


QLINEAR_ADD = OpDef("nn.contrib_qlinear_add", ("lhs", "rhs"), dict(_ATTRS), _rel, OpPattern.BROADCAST, _ref,
                    doc="clip(round(fma(ra, lhs, fma(rb, rhs, k)))) in float32 (onnxruntime's QLinearAdd)")
OPS = [QLINEAR_ADD]


def qlinear_add(a, b, sa, za, sb, zb, so, zo, sign: int, out_dtype: str, in_dtypes=("int32", "int32")):
    """The op for ``a + sign * b`` of the given (float32 scales, int zero points); ``in_dtypes``
    bound the inputs, so that a result that cannot leave int32's range skips the float clamp."""
    f = np.float32
    ra, rb = f(f(sa) / f(so)), f(sign) * f(f(sb) / f(so))
    k = f(f(zo) - f(np.float64(ra) * np.float64(f(za)) + np.float64(f(rb * f(zb)))))
    big = [max(abs(v) for v in dtype_range(d)) for d in in_dtypes]
    bound = abs(float(ra)) * big[0] + abs(float(rb)) * big[1] + abs(float(k)) + 1
    return QLINEAR_ADD(a, b, ra=float(ra), rb=float(rb), k=float(k), out_dtype=out_dtype,
                       float_clamp=bool(bound >= 2.0 ** 30))


def _compute(a, x, t, ctx):
    from kiln import te, tir
    from kiln.topi.broadcast import broadcast_index, broadcast_shape
    from kiln.topi.x86.conv2d_int8 import clamp_float, float_operand

    lhs, rhs = x
    lo, hi = dtype_range(a.out_dtype)
    f32 = "float32"

    def f(*i):
        u = float_operand(lhs, broadcast_index(lhs, i))  # a fused int8 conv's value before narrowing
        v = float_operand(rhs, broadcast_index(rhs, i))
        inner = tir.call_intrin(f32, "fma", v, tir.const(a.rb, f32), tir.const(a.k, f32))
        y = tir.round(tir.call_intrin(f32, "fma", u, tir.const(a.ra, f32), inner))
        if a.float_clamp:
            return clamp_float(y, lo, hi).astype(a.out_dtype)
        y = y.astype("int32")  # |y| < 2**30: the int32 clamp and narrowing are saturating packs
        return tir.min(tir.max(y, tir.const(lo, "int32")), tir.const(hi, "int32")).astype(a.out_dtype)
    return te.compute(broadcast_shape(lhs.shape, rhs.shape, "qlinear_add"), f, name="T_qlinear_add", tag="broadcast")


COMPUTES = {QLINEAR_ADD.name: (_compute, "injective")}
