"""qnn.quantize, qnn.dequantize, qnn.requantize: moving between float and integer domains.

``real = scale * (q - zero_point)``. Scales and zero points are scalars (per-tensor) or 1-D
(per-channel, along ``axis``). The references follow ONNX's definitions: quantize divides in
float32 and rounds half to even; requantize is fixed point (fixed_point.py).
"""

from __future__ import annotations

import numpy as np

from ...op.registry import OpDef, OpPattern, RelCtx
from ...ty import TensorType
from ..fixed_point import ROUNDINGS, dtype_range, requantize_int
from .params import QDTYPES, along, scalar_or_vector


def _channels(ctx: RelCtx, axis: int):
    t = ctx.tensor(0)
    if t.ndim == 0:
        return 1
    return t.shape[ctx.axis(axis, t.ndim)]


def _check_dtype(ctx: RelCtx, dtype: str, what: str):
    if dtype not in QDTYPES:
        ctx.fail(f"{what} {dtype!r} is not a quantized dtype; use one of {', '.join(QDTYPES)}")


def _quantize_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    if not t.dtype.startswith("float"):
        ctx.fail(f"input 'data' must be float, got {t.dtype}")
    _check_dtype(ctx, ctx.attrs.out_dtype, "out_dtype")
    if ctx.attrs.rounding not in ROUNDINGS:
        ctx.fail(f"rounding={ctx.attrs.rounding!r}; use one of {', '.join(ROUNDINGS)}")
    n = _channels(ctx, ctx.attrs.axis)
    scalar_or_vector(ctx, 1, n, "scale")
    scalar_or_vector(ctx, 2, n, "zero point")
    return TensorType(t.shape, ctx.attrs.out_dtype)


def quantize_ref(attrs, x, scale, zp):
    ax, nd = attrs.axis, x.ndim
    q = np.rint(x.astype(np.float32) / along(scale, ax, nd).astype(np.float32))
    q = q + along(zp, ax, nd).astype(np.float32)
    lo, hi = dtype_range(attrs.out_dtype)
    return np.clip(q, lo, hi).astype(attrs.out_dtype)


def _dequantize_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    _check_dtype(ctx, t.dtype, "input 'data' dtype")
    n = _channels(ctx, ctx.attrs.axis)
    scalar_or_vector(ctx, 1, n, "scale")
    scalar_or_vector(ctx, 2, n, "zero point")
    return TensorType(t.shape, "float32")


def dequantize_ref(attrs, q, scale, zp):
    ax, nd = attrs.axis, q.ndim
    centered = q.astype(np.int64) - along(zp, ax, nd).astype(np.int64)
    return centered.astype(np.float32) * along(scale, ax, nd).astype(np.float32)


def _requantize_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    _check_dtype(ctx, t.dtype, "input 'data' dtype")
    _check_dtype(ctx, ctx.attrs.out_dtype, "out_dtype")
    if ctx.attrs.rounding not in ROUNDINGS:
        ctx.fail(f"rounding={ctx.attrs.rounding!r}; use one of {', '.join(ROUNDINGS)}")
    n = _channels(ctx, ctx.attrs.axis)
    for i, what in ((1, "input scale"), (2, "input zero point"), (3, "output scale"), (4, "output zero point")):
        scalar_or_vector(ctx, i, n, what)
    return TensorType(t.shape, ctx.attrs.out_dtype)


def multiplier(in_scale, out_scale) -> np.ndarray:
    """in_scale / out_scale in float64, per channel where either is (1-D)."""
    return np.asarray(in_scale, np.float64).ravel() / np.asarray(out_scale, np.float64).ravel()


def requantize_ref(attrs, x, in_scale, in_zp, out_scale, out_zp):
    ax, nd = attrs.axis, x.ndim
    real = along(multiplier(in_scale, out_scale), ax, nd)
    centered = x.astype(np.int64) - along(in_zp, ax, nd).astype(np.int64)
    q = requantize_int(centered, real, attrs.rounding) + along(out_zp, ax, nd).astype(np.int64)
    lo, hi = dtype_range(attrs.out_dtype)
    return np.clip(q, lo, hi).astype(attrs.out_dtype)


QUANTIZE = OpDef("qnn.quantize", ("data", "output_scale", "output_zero_point"),
                 {"axis": -1, "out_dtype": "int8", "rounding": "UPWARD"}, _quantize_rel, OpPattern.ELEMWISE, quantize_ref,
                 doc="clip(round_half_even(data / scale) + zero_point)")
DEQUANTIZE = OpDef("qnn.dequantize", ("data", "input_scale", "input_zero_point"), {"axis": -1},
                   _dequantize_rel, OpPattern.ELEMWISE, dequantize_ref, doc="scale * (data - zero_point)")
REQUANTIZE = OpDef("qnn.requantize", ("data", "input_scale", "input_zero_point", "output_scale",
                                      "output_zero_point"),
                   {"axis": -1, "rounding": "UPWARD", "out_dtype": "int8", "compute_dtype": "int64"},
                   _requantize_rel, OpPattern.ELEMWISE, requantize_ref,
                   doc="an integer tensor to another scale/zero point/dtype, in fixed point")

OPS = [QUANTIZE, DEQUANTIZE, REQUANTIZE]
