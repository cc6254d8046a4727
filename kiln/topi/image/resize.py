"""2-D resize (nearest and bilinear) with ONNX's coordinate transformation modes."""

from __future__ import annotations

from kiln import te, tir
from kiln.errors import ShapeError
from kiln.ir.expr import const

from ..utils import check_ndim, const_shape

COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
ROUNDING = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source(x, in_size: int, out_size: int, mode: str):
    """The input coordinate (float32) that output index x maps to."""
    xf = x.astype("float32")
    scale = in_size / out_size
    if mode == "half_pixel" or (mode == "pytorch_half_pixel" and out_size > 1):
        return (xf + const(0.5, "float32")) * const(scale, "float32") - const(0.5, "float32")
    if mode == "pytorch_half_pixel":
        return const(0.0, "float32")
    if mode == "align_corners":
        ratio = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
        return xf * const(ratio, "float32")
    if mode == "asymmetric":
        return xf * const(scale, "float32")
    raise ShapeError(f"resize2d: coordinate_transformation_mode {mode!r} is not one of {COORDINATE_MODES}")


def _round(v, method: str):
    half = const(0.5, "float32")
    if method == "round_prefer_floor":
        return tir.ceil(v - half)
    if method == "round_prefer_ceil":
        return tir.floor(v + half)
    if method == "floor":
        return tir.floor(v)
    if method == "ceil":
        return tir.ceil(v)
    raise ShapeError(f"resize2d: rounding_method {method!r} is not one of {ROUNDING}")


def resize2d(data, size, layout="NCHW", method="nearest_neighbor", coordinate_transformation_mode="half_pixel",
             rounding_method="round_prefer_floor", out_dtype=None, separable=False):
    """Resize H and W to size = (out_h, out_w); method "nearest_neighbor" or "linear" (bilinear).

    ``separable`` (CPU schedules; NCHW bilinear that does not shrink H): two stages, the rows
    interpolated along W first (``resize_rows``, (N, C, H, out_w), not inlined), then each output
    row the blend of two of those rows, contiguous along W, so it vectorizes with no gather and
    per-row weights (DeepLabV3's 33 -> 520: ~h/out_h of the gathers). The same arithmetic in the
    same order as one stage, so the same values.
    """
    check_ndim("resize2d", "data", data, 4, layout)
    if layout not in ("NCHW", "NHWC"):
        raise ShapeError(f"resize2d: layout {layout!r} is not supported; use 'NCHW' or 'NHWC'")
    if method in ("nearest", "nearest_neighbor"):
        method = "nearest_neighbor"
    elif method in ("linear", "bilinear"):
        method = "linear"
    else:
        raise ShapeError(f"resize2d: method {method!r} is not supported; use 'nearest_neighbor' or 'linear'")
    ha, wa = (2, 3) if layout == "NCHW" else (1, 2)
    shape = const_shape(data, "resize2d data")
    h, w = shape[ha], shape[wa]
    oh, ow = (int(s) for s in size)
    out_shape = list(shape)
    out_shape[ha], out_shape[wa] = oh, ow
    out_dtype = out_dtype or str(data.dtype)

    def at(i, y, x):
        src = list(i)
        src[ha], src[wa] = y, x
        return data(*src).astype("float32")

    def clamp(v, n):
        return tir.min(tir.max(v, const(0, "int32")), const(n - 1, "int32"))

    def nearest(*i):
        y = clamp(_round(_source(i[ha], h, oh, coordinate_transformation_mode), rounding_method).astype("int32"), h)
        x = clamp(_round(_source(i[wa], w, ow, coordinate_transformation_mode), rounding_method).astype("int32"), w)
        src = list(i)
        src[ha], src[wa] = y, x
        return data(*src)

    def linear(*i):
        zero = const(0.0, "float32")
        sy = tir.min(tir.max(_source(i[ha], h, oh, coordinate_transformation_mode), zero), const(h - 1, "float32"))
        sx = tir.min(tir.max(_source(i[wa], w, ow, coordinate_transformation_mode), zero), const(w - 1, "float32"))
        y0, x0 = tir.floor(sy).astype("int32"), tir.floor(sx).astype("int32")
        y1, x1 = tir.min(y0 + 1, h - 1), tir.min(x0 + 1, w - 1)
        fy, fx = sy - y0.astype("float32"), sx - x0.astype("float32")
        one = const(1.0, "float32")
        top = at(i, y0, x0) * (one - fx) + at(i, y0, x1) * fx
        bottom = at(i, y1, x0) * (one - fx) + at(i, y1, x1) * fx
        return (top * (one - fy) + bottom * fy).astype(out_dtype)

    def source_y(y):
        zero = const(0.0, "float32")
        sy = tir.min(tir.max(_source(y, h, oh, coordinate_transformation_mode), zero), const(h - 1, "float32"))
        y0 = tir.floor(sy).astype("int32")
        return y0, tir.min(y0 + 1, h - 1), sy - y0.astype("float32")

    if separable and method == "linear" and layout == "NCHW" and oh >= h:
        def rows(n, c, y, x):
            zero, one = const(0.0, "float32"), const(1.0, "float32")
            sx = tir.min(tir.max(_source(x, w, ow, coordinate_transformation_mode), zero), const(w - 1, "float32"))
            x0 = tir.floor(sx).astype("int32")
            x1, fx = tir.min(x0 + 1, w - 1), sx - x0.astype("float32")
            return at((n, c, y, x), y, x0) * (one - fx) + at((n, c, y, x), y, x1) * fx

        tmp = te.compute((shape[0], shape[1], h, ow), rows, name="resize_rows", tag="resize_rows")

        def blend(n, c, y, x):
            y0, y1, fy = source_y(y)
            one = const(1.0, "float32")
            return (tmp(n, c, y0, x) * (one - fy) + tmp(n, c, y1, x) * fy).astype(out_dtype)

        return te.compute(tuple(out_shape), blend, name="resize", tag="injective,resize")

    fcompute = nearest if method == "nearest_neighbor" else linear
    return te.compute(tuple(out_shape), fcompute, name="resize", tag="injective,resize")


def upsampling(data, scale_h, scale_w, layout="NCHW", method="nearest_neighbor", align_corners=False):
    """Resize by integer-or-float scales (relay's nn.upsampling)."""
    ha, wa = (2, 3) if layout == "NCHW" else (1, 2)
    shape = const_shape(data, "upsampling data")
    size = (int(round(shape[ha] * scale_h)), int(round(shape[wa] * scale_w)))
    mode = "align_corners" if align_corners else "asymmetric"
    return resize2d(data, size, layout, method, mode, "floor" if method.startswith("nearest") else "round_prefer_floor")
