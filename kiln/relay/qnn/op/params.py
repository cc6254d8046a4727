"""Scales and zero points of qnn ops: their types (scalar or one value per channel) and values.

A qnn op takes its scales and zero points as relay expressions, as TVM's do; they are
constants in every model kiln imports (DynamicQuantizeLinear's are computed, and take the
float route). ``check_qparams`` refuses what no kernel can run: a scale that is zero, negative
or not finite, a zero point outside its dtype, per-channel lengths that differ from the axis.
"""

from __future__ import annotations

import numpy as np

from kiln.errors import ShapeError

from ...expr import Constant, const
from ...ty import TensorType
from ..fixed_point import dtype_range

QDTYPES = ("int8", "uint8", "int16", "uint16", "int32")


def scalar_or_vector(ctx, i: int, channels: int | None, what: str) -> TensorType:
    """Type check input ``i``: a scalar, or 1-D of 1 or ``channels`` values."""
    t = ctx.tensor(i)
    if t.ndim > 1:
        ctx.fail(f"input {ctx.op.inputs[i]!r} ({what}) must be a scalar or 1-D, got shape {t.shape}")
    if t.ndim == 1 and t.shape[0] != 1 and channels is not None and t.shape[0] != channels:
        ctx.fail(f"input {ctx.op.inputs[i]!r} ({what}) has {t.shape[0]} values; the quantization axis "
                 f"has {channels} channels. Give one value, or one per channel.")
    return t


def as_const(value, dtype: str):
    """A relay expression for a scale or zero point given as a number, array or expression."""
    if isinstance(value, (int, float, np.integer, np.floating, list, tuple, np.ndarray)):
        return const(np.asarray(value, dtype=dtype))
    return value


def check_qparams(op: str, scale=None, zero_point=None, dtype: str | None = None, channels: int | None = None,
                  where: str = ""):
    """Fail with one ShapeError naming ``op`` if a constant scale or zero point cannot be used."""
    at = f" ({where})" if where else ""
    if isinstance(scale, Constant):
        s = np.asarray(scale.data, dtype=np.float64)
        if s.size == 0 or np.any(~np.isfinite(s)) or np.any(s <= 0):
            raise ShapeError(f"{op}{at}: scale {s.ravel()[:8].tolist()} must be finite and > 0; a quantized "
                             "tensor needs a positive step (re-run the quantizer's calibration)")
        if channels is not None and s.size not in (1, channels):
            raise ShapeError(f"{op}{at}: {s.size} per-channel scales for an axis of {channels} channels; "
                             "give one scale, or one per channel")
    if isinstance(zero_point, Constant) and dtype is not None and dtype in QDTYPES:
        z = np.asarray(zero_point.data)
        lo, hi = dtype_range(dtype)
        if z.dtype.kind == "f" and np.any(z != np.round(z)):
            raise ShapeError(f"{op}{at}: zero point {z.ravel()[:8].tolist()} must be an integer")
        if z.size and (np.any(z < lo) or np.any(z > hi)):
            raise ShapeError(f"{op}{at}: zero point {z.ravel()[:8].tolist()} is outside {dtype} [{lo}, {hi}]; "
                             "it must be a value of the quantized dtype")
        if channels is not None and z.size not in (1, channels):
            raise ShapeError(f"{op}{at}: {z.size} per-channel zero points for an axis of {channels} channels; "
                             "give one zero point, or one per channel")


def along(value: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """A scalar or per-channel array shaped to broadcast along ``axis`` of an ``ndim``-d tensor."""
    value = np.asarray(value)
    if value.size <= 1 or ndim == 0:
        return value.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = value.size
    return value.reshape(shape)


def value_of(expr):
    """The numpy value of a constant scale/zero point, or None when it is computed at run time."""
    return np.asarray(expr.data) if isinstance(expr, Constant) else None
