"""numpy reference for 2-D resize (nearest, bilinear) with the ONNX coordinate modes."""

from __future__ import annotations

import numpy as np


def _source_coord(out_idx, in_size, out_size, mode, scale=None):
    scale = in_size / out_size if scale is None else 1.0 / scale
    x = out_idx.astype(np.float64)
    if mode == "half_pixel":
        return (x + 0.5) * scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) * scale - 0.5 if out_size > 1 else np.zeros_like(x)
    if mode == "align_corners":
        return x * ((in_size - 1) / (out_size - 1)) if out_size > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x * scale
    raise ValueError(f"resize2d_python: coordinate mode {mode!r}")


def _nearest(src, mode):
    if mode == "round_prefer_floor":
        return np.ceil(src - 0.5)
    if mode == "round_prefer_ceil":
        return np.floor(src + 0.5)
    if mode == "floor":
        return np.floor(src)
    if mode == "ceil":
        return np.ceil(src)
    raise ValueError(f"resize2d_python: rounding {mode!r}")


def resize2d_python(x, out_hw, layout="NCHW", method="nearest_neighbor",
                    coordinate_transformation_mode="half_pixel", rounding_method="round_prefer_floor"):
    """Resize the two spatial axes of x to out_hw."""
    if layout == "NHWC":
        return resize2d_python(x.transpose(0, 3, 1, 2), out_hw, "NCHW", method,
                               coordinate_transformation_mode, rounding_method).transpose(0, 2, 3, 1)
    h, w = x.shape[2:]
    oh, ow = out_hw
    sy = _source_coord(np.arange(oh), h, oh, coordinate_transformation_mode)
    sx = _source_coord(np.arange(ow), w, ow, coordinate_transformation_mode)
    if method == "nearest_neighbor":
        iy = np.clip(_nearest(sy, rounding_method), 0, h - 1).astype(int)
        ix = np.clip(_nearest(sx, rounding_method), 0, w - 1).astype(int)
        return x[:, :, iy][:, :, :, ix]
    if method != "linear":
        raise ValueError(f"resize2d_python: method {method!r}")
    sy = np.clip(sy, 0, h - 1)
    sx = np.clip(sx, 0, w - 1)
    y0 = np.floor(sy).astype(int)
    x0 = np.floor(sx).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy = (sy - y0)[:, None]
    fx = (sx - x0)[None, :]
    xf = x.astype(np.float64)
    top = xf[:, :, y0][:, :, :, x0] * (1 - fx) + xf[:, :, y0][:, :, :, x1] * fx
    bot = xf[:, :, y1][:, :, :, x0] * (1 - fx) + xf[:, :, y1][:, :, :, x1] * fx
    return (top * (1 - fy) + bot * fy).astype(x.dtype)
