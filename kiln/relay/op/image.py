"""Image ops: resize2d (nearest and bilinear, with ONNX's coordinate transformation modes)."""

from __future__ import annotations

import numpy as np

from ..ty import TensorType
from .registry import OpDef, OpPattern, RelCtx, as_tuple

_COORD_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
_ROUNDING = ("", "round", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def source_coords(out_size: int, in_size: int, mode: str) -> np.ndarray:
    """Where each output pixel samples the input, before rounding or interpolation."""
    x = np.arange(out_size, dtype=np.float64)
    scale = in_size / out_size
    if mode == "half_pixel":
        return (x + 0.5) * scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) * scale - 0.5 if out_size > 1 else np.zeros_like(x)
    if mode == "align_corners":
        return x * ((in_size - 1) / (out_size - 1)) if out_size > 1 else np.zeros_like(x)
    return x * scale  # asymmetric


def _nearest_index(src: np.ndarray, in_size: int, rounding: str) -> np.ndarray:
    if rounding in ("", "round", "round_prefer_floor"):
        idx = np.ceil(src - 0.5)  # ties go down
    elif rounding == "round_prefer_ceil":
        idx = np.floor(src + 0.5)
    elif rounding == "floor":
        idx = np.floor(src)
    else:
        idx = np.ceil(src)
    return np.clip(idx, 0, in_size - 1).astype(np.int64)


def _resize_rel(ctx: RelCtx):
    a = ctx.attrs
    data = ctx.ndim(0, 4, a.layout)
    if a.method not in ("nearest_neighbor", "linear"):
        ctx.fail(f"method {a.method!r} is not supported; use 'nearest_neighbor' or 'linear'")
    if a.coordinate_transformation_mode not in _COORD_MODES:
        ctx.fail(f"coordinate_transformation_mode must be one of {_COORD_MODES}")
    if a.rounding_method not in _ROUNDING:
        ctx.fail(f"rounding_method must be one of {_ROUNDING}")
    shape = list(data.shape)
    shape[a.layout.index("H")], shape[a.layout.index("W")] = a.size
    return TensorType(tuple(shape), a.out_dtype or data.dtype)


def _resize_axis(x: np.ndarray, axis: int, out_size: int, a) -> np.ndarray:
    in_size = x.shape[axis]
    src = source_coords(out_size, in_size, a.coordinate_transformation_mode)
    if a.method == "nearest_neighbor":
        return np.take(x, _nearest_index(src, in_size, a.rounding_method), axis=axis)
    src = np.clip(src, 0, in_size - 1)
    lo = np.floor(src).astype(np.int64)
    hi = np.minimum(lo + 1, in_size - 1)
    w = (src - lo).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    return np.take(x, lo, axis=axis) * (1 - w) + np.take(x, hi, axis=axis) * w


def _resize_ref(a, x):
    out = x.astype(np.float64)
    out = _resize_axis(out, a.layout.index("H"), a.size[0], a)
    out = _resize_axis(out, a.layout.index("W"), a.size[1], a)
    return out.astype(a.out_dtype or x.dtype)


RESIZE2D = OpDef("image.resize2d", ("data",),
                 {"size": (1, 1), "layout": "NCHW", "method": "linear",
                  "coordinate_transformation_mode": "half_pixel", "rounding_method": "", "out_dtype": ""},
                 _resize_rel, OpPattern.INJECTIVE, _resize_ref, doc="resize H and W to ``size``")

OPS = [RESIZE2D]


def resize2d(data, size, roi=None, layout="NCHW", method="linear", coordinate_transformation_mode="half_pixel",
             rounding_method="", cubic_alpha=-0.5, cubic_exclude=0, extrapolation_value=0.0, out_dtype=""):
    """Resize to ``size`` = (height, width). ``roi`` and the cubic options are accepted for API
    compatibility; only nearest_neighbor and linear are implemented."""
    return RESIZE2D(data, size=as_tuple(size, 2, "size"), layout=layout, method=method,
                    coordinate_transformation_mode=coordinate_transformation_mode,
                    rounding_method=rounding_method, out_dtype=out_dtype)
