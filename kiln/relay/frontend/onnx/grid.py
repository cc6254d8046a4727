"""ONNX GridSample (relay image.grid_sample) and AffineGrid (a constant base grid times theta)."""

from __future__ import annotations

import numpy as np

from ...expr import const
from ...op import grid_sample as gs
from ...op import transform as tf

_OLD_MODES = {"bilinear": "linear", "bicubic": "cubic"}  # opset 16 names


def _grid_sample(ctx, ins, attrs):
    mode = attrs.get("mode", "linear" if ctx.opset >= 20 else "bilinear")
    mode = _OLD_MODES.get(mode, mode)
    padding = attrs.get("padding_mode", "zeros")
    if mode not in gs.MODES or padding not in gs.PADDING:
        ctx.fail(f"mode={mode!r} / padding_mode={padding!r}: kiln supports {gs.MODES} / {gs.PADDING}")
    return gs.grid_sample(ins[0], ins[1], mode, padding, bool(attrs.get("align_corners", 0)))


def _affine_grid(ctx, ins, attrs):
    from .nn import CONVERTERS as NN
    theta = ins[0]
    size = [int(s) for s in np.asarray(ctx.value(ins[1], "input 'size'")).reshape(-1)]
    spatial = size[2:]
    nd = len(spatial)
    if nd not in (2, 3) or tuple(ctx.shape_of(theta)[1:]) != (nd, nd + 1):
        ctx.fail(f"theta {list(ctx.shape_of(theta))} and size {size} must describe a 2-D or 3-D affine grid")
    align = attrs.get("align_corners", 0)

    def steps(n):
        if align:
            return np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
        return (2 * np.arange(n) + 1) / n - 1
    axes = np.meshgrid(*[steps(n) for n in spatial], indexing="ij")  # D/H/W order
    coords = [a.reshape(-1) for a in reversed(axes)]  # x (W) first
    dtype = ctx.type_of(theta).dtype
    base = np.stack(coords + [np.ones_like(coords[0])], axis=1).astype(dtype)  # (P, nd + 1)
    out = NN["MatMul"](ctx, [const(base[None]), tf.transpose(theta, (0, 2, 1))], {})
    return tf.reshape(out, (size[0],) + tuple(spatial) + (nd,))


CONVERTERS = {"GridSample": _grid_sample, "AffineGrid": _affine_grid}
