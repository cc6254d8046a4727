"""``nn.contrib_qavg_pool2d``: qnn.avg_pool2d in integers, for Cortex-M targets (issue 36).

qnn's canonical lowering (canonicalize.py ``_avg_pool2d``) is onnxruntime's, in float32:
``round(sum(float32(x - zi) * si) / count / so + zo)``. Written as relay ops, the elementwise
prefix (``x - zi`` as float32) fuses into the producer (a conv), which then stores a float32
tensor four times its int8 output, and the pool sums floats. This op reads the int8 tensor,
sums each window in int32 and divides with rounding half to even in integers.

The same integers as the float form when the input and output scales are the same float32 ``s``,
the windows are unpadded and the count ``n`` is odd and small (``exact_for``): the float form
computes ``S / n`` (``S`` the integer window sum) with an error of at most ``255 (n + 2) 2**-24``
(each ``s * k`` and each partial sum rounded once, the two divisions once each) plus ``2**-16``
for adding ``zo``, while an odd count puts ``S / n`` at least ``1 / (2 n)`` from any half (no
ties), so the float rounding never crosses a half. With an even count a tie ``k + 1/2`` goes
either way in float32 (the products' rounding decides), so those windows keep the float form.
Only chosen on Cortex-M targets (``integer_avg_pool``); other targets keep the float form.
"""

from __future__ import annotations

import numpy as np

from ..op.registry import OpDef, OpPattern, RelCtx
from ..ty import TensorType
from .fixed_point import dtype_range

_ATTRS = {"pool_size": (1, 1), "strides": (1, 1), "zi": 0, "zo": 0, "out_dtype": "int8"}


def _out_hw(h, w, attrs):
    (kh, kw), (sh, sw) = attrs.pool_size, attrs.strides
    return (h - kh) // sh + 1, (w - kw) // sw + 1


def _rel(ctx: RelCtx):
    x = ctx.tensor(0)
    if x.dtype not in ("int8", "uint8") or len(x.shape) != 4:
        ctx.fail(f"input 'data' must be an NCHW int8/uint8 tensor, got {x.dtype} of {len(x.shape)} dims")
    oh, ow = _out_hw(int(x.shape[2]), int(x.shape[3]), ctx.attrs)
    return TensorType((x.shape[0], x.shape[1], oh, ow), ctx.attrs.out_dtype)


def _ref(attrs, x):
    (kh, kw), (sh, sw) = attrs.pool_size, attrs.strides
    n = kh * kw
    oh, ow = _out_hw(x.shape[2], x.shape[3], attrs)
    s = np.zeros(x.shape[:2] + (oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            s += x[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw].astype(np.int64)
    num = 2 * (s - attrs.zi * n) + n
    q = np.floor_divide(num, 2 * n)
    q -= (np.mod(num, 2 * n) == 0) & (q % 2 == 1)  # a tie: to even
    lo, hi = dtype_range(attrs.out_dtype)
    return np.clip(q + attrs.zo, lo, hi).astype(attrs.out_dtype)


QAVG_POOL2D = OpDef("nn.contrib_qavg_pool2d", ("data",), dict(_ATTRS), _rel, OpPattern.OUT_ELEMWISE_FUSABLE, _ref,
                    doc="clip(round_half_even(sum(window) - zi * count) / count) + zo) of an int NCHW tensor")


def exact_for(count: int) -> bool:
    """Whether the integer form gives the float form's integers for windows of ``count`` values
    (module docstring): odd, and the float error below the distance to a half."""
    return count % 2 == 1 and 2 * count * (255 * (count + 2) * 2.0 ** -24 + 2.0 ** -16) < 1


def integer_avg_pool(call, x, si, zi, so, zo):
    """The op for qnn.avg_pool2d ``call`` on a Cortex-M target when it gives the float form's
    integers (module docstring), else None."""
    from kiln.target import Target

    from .op.params import value_of

    target = Target.current(allow_none=True)
    a = call.attrs
    zs = [value_of(v) for v in (zi, zo)]
    if target is None or not target.cortex_m or any(v is None or np.size(v) != 1 for v in zs):
        return None
    kh, kw = (int(v) for v in a.pool_size)
    if (a.layout != "NCHW" or (a.out_layout or "NCHW") != "NCHW" or any(int(p) for p in a.padding)
            or tuple(int(d) for d in a.dilation) != (1, 1) or not exact_for(kh * kw)
            or np.float32(np.ravel(value_of(si))[0]) != np.float32(np.ravel(value_of(so))[0])):
        return None
    from ..transform.infer_type import infer
    ty = infer(x).checked_type
    h, w = int(ty.shape[2]), int(ty.shape[3])
    sh, sw = (int(v) for v in a.strides)
    if a.ceil_mode and ((h - kh) % sh or (w - kw) % sw):
        return None
    return QAVG_POOL2D(x, pool_size=(kh, kw), strides=(sh, sw), zi=int(np.ravel(zs[0])[0]),
                       zo=int(np.ravel(zs[1])[0]), out_dtype=str(ty.dtype))


def compute(a, x, t, ctx):
    """TE: the windows' int32 sums (``pool_sum``), then the rounding division, zero point, clamp."""
    from kiln import te, tir

    data = x[0]
    (kh, kw), (sh, sw) = a.pool_size, a.strides
    n, c, h, w = (int(d) for d in data.shape)
    oh, ow = _out_hw(h, w, a)
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    total = te.compute((n, c, oh, ow), lambda b, ch, y, z: te.sum(
        data[b, ch, y * sh + ry, z * sw + rx].astype("int32"), axis=[ry, rx]), name="pool_sum")
    count = kh * kw
    lo, hi = dtype_range(a.out_dtype)
    i32 = "int32"

    def out(*i):
        num = (total(*i) - tir.const(a.zi * count, i32)) * 2 + tir.const(count, i32)
        q = tir.floordiv(num, tir.const(2 * count, i32))
        if count % 2 == 0:  # ties only for even counts: to even
            tie = tir.floormod(num, tir.const(2 * count, i32)) == tir.const(0, i32)
            q = q - tir.if_then_else(tie, tir.floormod(q, tir.const(2, i32)), tir.const(0, i32))
        y = q + tir.const(a.zo, i32)
        return tir.min(tir.max(y, tir.const(lo, i32)), tir.const(hi, i32)).astype(a.out_dtype)
    return te.compute((n, c, oh, ow), out, name="T_qavg_pool", tag="injective")


COMPUTES = {QAVG_POOL2D.name: (compute, "injective")}
