"""qnn.conv2d, qnn.conv2d_transpose, qnn.dense, qnn.batch_matmul and the pools.

The matmul-like ops compute ``sum((data - input_zp) * (weight - kernel_zp))`` exactly in int32
(padding is the data's zero point, i.e. real zero). Their scales are not used by the op itself:
the result's scale is ``input_scale * kernel_scale`` (per output channel where the kernel's
is), which the requantize that follows reads. Kernel zero points may be per output channel.
"""

from __future__ import annotations

import numpy as np

from ...op import nn as fnn
from ...op import nn_pool as fpool
from ...op.registry import OpDef, OpPattern, RelCtx
from ...ty import TensorType
from ..fixed_point import dtype_range, float32_multiplier, requantize_float32, requantize_int
from .core import multiplier
from .params import along, scalar_or_vector

OEF = OpPattern.OUT_ELEMWISE_FUSABLE
_QIN = ("input_zero_point", "kernel_zero_point", "input_scale", "kernel_scale")


def float_type(float_op: OpDef, ctx: RelCtx, n_args: int, attrs: dict) -> TensorType:
    """The type rule of the float op this qnn op computes, on its first ``n_args`` inputs."""
    return float_op.type_rel(RelCtx(float_op, ctx.args[:n_args], float_op.make_attrs(attrs), ctx.where))


def _float_attrs(float_op: OpDef, attrs) -> dict:
    return {k: attrs[k] for k in float_op.attrs if k in attrs.keys()}


def _check_int(ctx: RelCtx, *idx):
    for i in idx:
        if ctx.tensor(i).dtype not in ("int8", "uint8", "int16", "uint16", "int32"):
            ctx.fail(f"input {ctx.op.inputs[i]!r} must be an integer tensor, got {ctx.tensor(i).dtype}")


def _mm_rel(float_op: OpDef, out_channels):
    def rel(ctx: RelCtx):
        _check_int(ctx, 0, 1)
        t = float_type(float_op, ctx, 2, _float_attrs(float_op, ctx.attrs))
        oc = out_channels(ctx)
        scalar_or_vector(ctx, 2, None, "input zero point")
        scalar_or_vector(ctx, 3, oc, "kernel zero point")
        scalar_or_vector(ctx, 4, None, "input scale")
        scalar_or_vector(ctx, 5, oc, "kernel scale")
        return TensorType(t.shape, ctx.attrs.out_dtype or "int32")
    return rel


def _centered(x, zp, axis, ndim):
    return x.astype(np.int64) - along(zp, axis, ndim).astype(np.int64)


def _mm_ref(float_op: OpDef, kernel_axis):
    def ref(attrs, x, w, xz, wz, xs, ws):
        xc = _centered(x, xz, 0, 0)
        wc = _centered(w, wz, kernel_axis(attrs), w.ndim)
        out = float_op.reference(float_op.make_attrs({**_float_attrs(float_op, attrs), "out_dtype": "int64"}), xc, wc)
        return out.astype(attrs.out_dtype or "int32")
    return ref


def _conv_oc(ctx):
    return ctx.tensor(1).shape[ctx.attrs.kernel_layout.index("O")]


def _convt_oc(ctx):
    w = ctx.tensor(1).shape
    return w[1] * ctx.attrs.groups if ctx.attrs.kernel_layout == "IOHW" else w[0] * ctx.attrs.groups


_CONV_ATTRS = {**fnn.CONV2D.attrs, "out_dtype": "int32"}
CONV2D = OpDef("qnn.conv2d", ("data", "weight") + _QIN, _CONV_ATTRS, _mm_rel(fnn.CONV2D, _conv_oc), OEF,
               _mm_ref(fnn.CONV2D, lambda a: a.kernel_layout.index("O")),
               doc="integer conv2d: int32 sum of (data - input_zp) * (weight - kernel_zp)")
CONV2D_TRANSPOSE = OpDef("qnn.conv2d_transpose", ("data", "weight") + _QIN,
                         {**fnn.CONV2D_TRANSPOSE.attrs, "out_dtype": "int32"},
                         _mm_rel(fnn.CONV2D_TRANSPOSE, _convt_oc), OEF,
                         _mm_ref(fnn.CONV2D_TRANSPOSE, lambda a: a.kernel_layout.index("O")),
                         doc="integer transposed conv2d (per-tensor kernel zero point)")
DENSE = OpDef("qnn.dense", ("data", "weight") + _QIN, {"units": None, "out_dtype": "int32"},
              _mm_rel(fnn.DENSE, lambda ctx: ctx.tensor(1).shape[0]), OEF, _mm_ref(fnn.DENSE, lambda a: 0),
              doc="integer dense: (data - input_zp) @ (weight - kernel_zp).T in int32")
BATCH_MATMUL = OpDef("qnn.batch_matmul", ("x", "y", "x_zero_point", "y_zero_point", "x_scale", "y_scale"),
                     {"out_dtype": "int32", "transpose_a": False, "transpose_b": True},
                     _mm_rel(fnn.BATCH_MATMUL, lambda ctx: None), OEF, _mm_ref(fnn.BATCH_MATMUL, lambda a: 0),
                     doc="integer batch_matmul (per-tensor zero points)")


# -- pools ----------------------------------------------------------------------------------------

_POOL_Q = ("input_scale", "input_zero_point", "output_scale", "output_zero_point")


def _pool_rel(float_op):
    def rel(ctx: RelCtx):
        _check_int(ctx, 0)
        for i, what in zip(range(1, 5), ("input scale", "input zero point", "output scale", "output zero point")):
            scalar_or_vector(ctx, i, 1, what)
        return float_type(float_op, ctx, 1, _float_attrs(float_op, ctx.attrs))
    return rel


def _avg_pool_ref(attrs, x, si, zi, so, zo):
    """onnxruntime's QLinearAveragePool in float32: the mean of the dequantized values, divided by
    the output scale, plus the output zero point, rounded half to even (canonicalize._avg_pool2d)."""
    f32 = np.float32
    real = _centered(x, zi, 0, 0).astype(f32) * f32(np.ravel(si)[0])
    mean = fpool.avg_pool2d_in_order(fpool.AVG_POOL2D.make_attrs(_float_attrs(fpool.AVG_POOL2D, attrs)), real)
    q = np.rint((mean / f32(np.ravel(so)[0])).astype(f32) + f32(np.ravel(zo)[0]))
    lo, hi = dtype_range(x.dtype.name)
    return np.clip(q, lo, hi).astype(x.dtype)


def _global_avg_ref(attrs, x, si, zi, so, zo):
    """Integer: the int32 sum over H, W requantized by ``si / (so * H * W)``."""
    hi, wi = attrs.layout.index("H"), attrs.layout.index("W")
    count = x.shape[hi] * x.shape[wi]
    total = _centered(x, zi, 0, 0).sum(axis=(hi, wi), keepdims=True)
    if attrs.rounding == "FLOAT32":  # onnxruntime: si / (so * count) in float32
        y = requantize_float32(total, float32_multiplier(np.ravel(si)[0], np.ravel(so)[0], count))
    else:
        y = requantize_int(total, multiplier(si, so)[0] / count, attrs.rounding)
    q = y + np.asarray(zo, np.int64)
    lo, hi_ = dtype_range(x.dtype.name)
    return np.clip(q, lo, hi_).astype(x.dtype)


AVG_POOL2D = OpDef("qnn.avg_pool2d", ("data",) + _POOL_Q, dict(fpool.AVG_POOL2D.attrs), _pool_rel(fpool.AVG_POOL2D),
                   OpPattern.OUT_ELEMWISE_FUSABLE, _avg_pool_ref,
                   doc="average pool of the real values, requantized (float32 mean, as ONNX)")
GLOBAL_AVG_POOL2D = OpDef("qnn.global_avg_pool2d", ("data",) + _POOL_Q,
                          {**fpool.GLOBAL_AVG_POOL2D.attrs, "rounding": "UPWARD"},
                          _pool_rel(fpool.GLOBAL_AVG_POOL2D), OpPattern.OUT_ELEMWISE_FUSABLE, _global_avg_ref,
                          doc="integer mean over H, W: int32 sum, fixed-point requantize")

OPS = [CONV2D, CONV2D_TRANSPOSE, DENSE, BATCH_MATMUL, AVG_POOL2D, GLOBAL_AVG_POOL2D]
