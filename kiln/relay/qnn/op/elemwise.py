"""qnn.add, qnn.subtract, qnn.mul, qnn.concatenate, and unary ops as 256-entry lookup tables.

- add/subtract: each input is requantized to the output scale (fixed point, int32), then they
  are added and the output zero point applied: two roundings, as TVM's qnn.add.
- mul: the exact int32 product of the centered inputs, requantized once by
  ``lhs_scale * rhs_scale / output_scale``.
- concatenate: each input requantized to the output's scale and zero point, then joined.
- ``rounding="FLOAT32"`` (onnxruntime's arithmetic, fixed_point.py): add/subtract are one float32
  expression of both inputs rounded once (QLinearAdd), mul multiplies by ``sa * sb / so`` in
  float32, concatenate dequantizes and quantizes in float32 (QLinearConcat).
- unary ops (sigmoid, tanh, exp, erf, hardswish, ...): for 8-bit inputs every possible input is
  one of 256 values, so the op is a table computed at build time: dequantize each value, apply
  the float function (float64), quantize (round half to even). ``qnn.softmax`` is not
  elementwise and takes the float route (canonicalize.py).
"""

from __future__ import annotations

import math

import numpy as np

from ...op.registry import OpDef, OpPattern, RelCtx, broadcast_shapes
from ...ty import TensorType
from ..fixed_point import add_float32, concat_float32, dtype_range, float32_multiplier, requantize_float32, requantize_int
from .core import multiplier
from .params import scalar_or_vector

_BIN_Q = ("lhs_scale", "lhs_zero_point", "rhs_scale", "rhs_zero_point", "output_scale", "output_zero_point")


def _binary_rel(ctx: RelCtx):
    lt, rt = ctx.tensor(0), ctx.tensor(1)
    for i in (0, 1):
        if ctx.tensor(i).dtype not in ("int8", "uint8", "int16", "uint16", "int32"):
            ctx.fail(f"input {ctx.op.inputs[i]!r} must be an integer tensor, got {ctx.tensor(i).dtype}")
    for i in range(2, 8):
        scalar_or_vector(ctx, i, 1, ctx.op.inputs[i].replace("_", " "))
    return TensorType(broadcast_shapes(ctx, [lt.shape, rt.shape]), ctx.attrs.out_dtype or lt.dtype)


def _to_output(x, s, z, so, rounding):
    return requantize_int(x.astype(np.int64) - np.int64(z), multiplier(s, so)[0], rounding)


def _clip_out(attrs, q, zo, fallback):
    dtype = attrs.out_dtype or fallback
    lo, hi = dtype_range(dtype)
    return np.clip(q + np.int64(zo), lo, hi).astype(dtype)


def _add_ref(sign):
    def ref(attrs, a, b, sa, za, sb, zb, so, zo):
        if attrs.rounding == "FLOAT32":
            q = add_float32(a, za, b, zb, sa, sb, so, zo, sign)
            return _clip_out(attrs, q, 0, a.dtype.name)
        q = _to_output(a, sa, za, so, attrs.rounding) + sign * _to_output(b, sb, zb, so, attrs.rounding)
        return _clip_out(attrs, q, zo, a.dtype.name)
    return ref


def _mul_ref(attrs, a, b, sa, za, sb, zb, so, zo):
    prod = (a.astype(np.int64) - np.int64(za)) * (b.astype(np.int64) - np.int64(zb))
    if attrs.rounding == "FLOAT32":
        m = float32_multiplier(np.float32(np.float32(sa) * np.float32(sb)), so)
        return _clip_out(attrs, requantize_float32(prod, m), zo, a.dtype.name)
    real = float(np.float64(sa) * np.float64(sb) / np.float64(so))
    return _clip_out(attrs, requantize_int(prod, real, attrs.rounding), zo, a.dtype.name)


_BIN_ATTRS = {"rounding": "UPWARD", "out_dtype": ""}
ADD = OpDef("qnn.add", ("lhs", "rhs") + _BIN_Q, dict(_BIN_ATTRS), _binary_rel, OpPattern.BROADCAST, _add_ref(1),
            doc="quantized lhs + rhs at the output's scale")
SUBTRACT = OpDef("qnn.subtract", ("lhs", "rhs") + _BIN_Q, dict(_BIN_ATTRS), _binary_rel, OpPattern.BROADCAST,
                 _add_ref(-1), doc="quantized lhs - rhs at the output's scale")
MUL = OpDef("qnn.mul", ("lhs", "rhs") + _BIN_Q, dict(_BIN_ATTRS), _binary_rel, OpPattern.BROADCAST, _mul_ref,
            doc="quantized lhs * rhs: exact int32 product, one requantize")


def _concat_rel(ctx: RelCtx):
    data = ctx.tuple(0)
    n = len(data.fields)
    for i in (1, 2):
        if len(ctx.tuple(i).fields) != n:
            ctx.fail(f"input {ctx.op.inputs[i]!r} has {len(ctx.tuple(i).fields)} entries for {n} tensors")
    from ...op import transform as ftf
    from ...ty import TupleType
    same = TupleType([TensorType(f.shape, data.fields[0].dtype) for f in data.fields])  # inputs may differ in dtype
    t = ftf.CONCATENATE.type_rel(RelCtx(ftf.CONCATENATE, [same], ftf.CONCATENATE.make_attrs({"axis": ctx.attrs.axis}),
                                        ctx.where))
    return TensorType(t.shape, ctx.attrs.out_dtype or t.dtype)


def _concat_ref(attrs, data, scales, zps, so, zo):
    dtype = attrs.out_dtype or data[0].dtype.name
    lo, hi = dtype_range(dtype)
    if attrs.rounding == "FLOAT32":
        parts = [np.clip(concat_float32(x, s, z, so, zo), lo, hi) for x, s, z in zip(data, scales, zps)]
    else:
        parts = [np.clip(_to_output(x, s, z, so, attrs.rounding) + np.int64(zo), lo, hi)
                 for x, s, z in zip(data, scales, zps)]
    return np.concatenate(parts, axis=attrs.axis).astype(dtype)


CONCATENATE = OpDef("qnn.concatenate", ("data", "input_scales", "input_zero_points", "output_scale",
                                        "output_zero_point"), {"axis": 0, "rounding": "UPWARD", "out_dtype": ""},
                    _concat_rel, OpPattern.INJECTIVE, _concat_ref, doc="join tensors at one scale and zero point")


# -- lookup-table unary ops -------------------------------------------------------------------------

def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _hardswish(x):
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _safe(fn, lo=None):
    def run(x, **kw):
        with np.errstate(all="ignore"):
            v = fn(np.maximum(x, lo) if lo is not None else x, **kw)
        return np.nan_to_num(v, nan=0.0, posinf=np.finfo(np.float32).max, neginf=np.finfo(np.float32).min)
    return run


UNARY_FUNCTIONS = {
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "exp": _safe(np.exp),
    "erf": _erf,
    "gelu": _gelu,
    "hardswish": _hardswish,
    "hardsigmoid": lambda x, alpha=0.2, beta=0.5: np.clip(alpha * x + beta, 0.0, 1.0),
    "sqrt": _safe(np.sqrt, 0.0),
    "rsqrt": _safe(lambda x: 1.0 / np.sqrt(x), 0.0),
    "log": _safe(np.log, 0.0),
    "abs": np.abs,
    "leaky_relu": lambda x, alpha=0.01: np.where(x >= 0, x, alpha * x),
}


def lut_table(name: str, attrs, in_dtype: str, si, zi, so, zo, out_dtype: str) -> np.ndarray:
    """The table of a unary qnn op: entry ``k`` is the output for input ``dtype_min + k``."""
    lo, hi = dtype_range(in_dtype)
    q = np.arange(lo, hi + 1, dtype=np.int64)
    real = (q - np.int64(zi)).astype(np.float64) * float(np.float32(si))
    kw = {k: attrs[k] for k in ("alpha", "beta") if k in attrs.keys()}
    y = UNARY_FUNCTIONS[name](real, **kw)
    olo, ohi = dtype_range(out_dtype)
    return np.clip(np.rint(y / float(np.float32(so))) + np.int64(zo), olo, ohi).astype(out_dtype)


def _unary_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    if t.dtype not in ("int8", "uint8"):
        ctx.fail(f"input 'data' must be int8 or uint8 (a 256-entry table), got {t.dtype}")
    for i in range(1, 5):
        scalar_or_vector(ctx, i, 1, ctx.op.inputs[i].replace("_", " "))
    return TensorType(t.shape, ctx.attrs.out_dtype or t.dtype)


def _unary_ref(name):
    def ref(attrs, x, si, zi, so, zo):
        table = lut_table(name, attrs, x.dtype.name, si, zi, so, zo, attrs.out_dtype or x.dtype.name)
        return table[x.astype(np.int64) - dtype_range(x.dtype.name)[0]]
    return ref


_UNARY_Q = ("input_scale", "input_zero_point", "output_scale", "output_zero_point")
_EXTRA = {"leaky_relu": {"alpha": 0.01}, "hardsigmoid": {"alpha": 0.2, "beta": 0.5}}
UNARY = {name: OpDef(f"qnn.{name}", ("data",) + _UNARY_Q, {"out_dtype": "", **_EXTRA.get(name, {})}, _unary_rel,
                     OpPattern.ELEMWISE, _unary_ref(name), doc=f"quantized {name} by a 256-entry table")
         for name in UNARY_FUNCTIONS}


def _softmax_rel(ctx: RelCtx):
    t = _unary_rel(ctx)
    ctx.axis(ctx.attrs.axis, t.ndim)
    return t


def _softmax_ref(attrs, x, si, zi, so, zo):
    real = (x.astype(np.int64) - np.int64(zi)).astype(np.float32) * np.float32(si)
    e = np.exp(real - real.max(axis=attrs.axis, keepdims=True))
    y = (e / e.sum(axis=attrs.axis, keepdims=True)).astype(np.float32)
    dtype = attrs.out_dtype or x.dtype.name
    lo, hi = dtype_range(dtype)
    return np.clip(np.rint(y / np.float32(so)) + np.float32(zo), lo, hi).astype(dtype)


SOFTMAX = OpDef("qnn.softmax", ("data",) + _UNARY_Q, {"axis": -1, "out_dtype": ""}, _softmax_rel,
                OpPattern.OPAQUE, _softmax_ref, doc="softmax of the real values, quantized (float32 inside)")

OPS = [ADD, SUBTRACT, MUL, CONCATENATE, SOFTMAX, *UNARY.values()]
