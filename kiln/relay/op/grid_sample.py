"""``image.grid_sample``: ONNX GridSample / torch.nn.functional.grid_sample on 2-D and 3-D inputs
(topi/grid_sample.py computes it)."""

from __future__ import annotations

import itertools

import numpy as np

from ..expr import Call
from ..ty import TensorType
from .registry import OpDef, OpPattern, RelCtx

MODES = ("nearest", "linear", "cubic")
PADDING = ("zeros", "border", "reflection")


def _rel(ctx: RelCtx) -> TensorType:
    data, grid = ctx.tensor(0), ctx.tensor(1)
    a = ctx.attrs
    if a.mode not in MODES or a.padding_mode not in PADDING:
        ctx.fail(f"mode={a.mode!r} must be one of {MODES}, padding_mode={a.padding_mode!r} one of {PADDING}")
    nd = data.ndim - 2
    if nd not in (2, 3) or grid.ndim != data.ndim or int(grid.shape[-1]) != nd or grid.shape[0] != data.shape[0]:
        ctx.fail(f"'data' {data.shape} must be (N, C, H, W) or (N, C, D, H, W) and 'grid' {grid.shape} "
                 f"(N, *out, {nd})")
    if nd == 3 and a.mode == "cubic":
        ctx.fail("cubic interpolation is defined for 2-D inputs only")
    return TensorType(tuple(data.shape[:2]) + tuple(grid.shape[1:-1]), data.dtype)


def _reflect(x, lo, hi):
    rng = hi - lo
    if rng <= 0:
        return lo
    if lo <= x <= hi:
        return x
    dx = lo - x if x < lo else x - hi
    n = np.floor(dx / rng)
    r = dx - n * rng
    if x < lo:
        return lo + r if n % 2 == 0 else hi - r
    return hi - r if n % 2 == 0 else lo + r


def _cubic(t, a=-0.75):
    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _ref(a, data, grid):
    """A direct per-pixel numpy reference (float64)."""
    spatial = data.shape[2:]
    nd = len(spatial)
    lo = [0.0 if a.align_corners else -0.5] * nd
    hi = [s - 1.0 if a.align_corners else s - 0.5 for s in spatial]
    out = np.zeros(data.shape[:2] + grid.shape[1:-1], np.float64)

    def pixel(img, idx):
        safe = []
        for d, i in enumerate(idx):
            if a.padding_mode == "zeros" and not 0 <= i < spatial[d]:
                return 0.0
            if a.padding_mode == "reflection":
                i = int(_reflect(float(i), lo[d], hi[d]))
            safe.append(min(max(i, 0), spatial[d] - 1))
        return float(img[tuple(safe)])

    for n in range(data.shape[0]):
        for o in np.ndindex(*grid.shape[1:-1]):
            pos = []
            for d in range(nd):
                g = float(grid[(n,) + o + (nd - 1 - d,)])
                s = spatial[d]
                x = (g + 1) / 2 * (s - 1) if a.align_corners else ((g + 1) * s - 1) / 2
                if a.mode == "nearest":
                    x = float(np.rint(x))
                if a.padding_mode == "border" and not lo[d] <= x <= hi[d]:
                    x = min(max(x, 0.0), s - 1.0)
                elif a.padding_mode == "reflection":
                    x = _reflect(x, lo[d], hi[d])
                pos.append(x)
            for c in range(data.shape[1]):
                img = data[n, c]
                if a.mode == "nearest":
                    out[(n, c) + o] = pixel(img, [int(p) for p in pos])
                    continue
                base = [int(np.floor(p)) for p in pos]
                frac = [p - b for p, b in zip(pos, base)]
                offs = (0, 1) if a.mode == "linear" else (-1, 0, 1, 2)
                ws = [[1 - t, t] if a.mode == "linear" else _cubic(t) for t in frac]
                total = 0.0
                for combo in itertools.product(range(len(offs)), repeat=nd):
                    w = np.prod([ws[d][k] for d, k in enumerate(combo)])
                    total += w * pixel(img, [base[d] + offs[k] for d, k in enumerate(combo)])
                out[(n, c) + o] = total
    return out.astype(data.dtype)


GRID_SAMPLE = OpDef("image.grid_sample", ("data", "grid"),
                    {"mode": "linear", "padding_mode": "zeros", "align_corners": False}, _rel, OpPattern.OPAQUE,
                    _ref, doc="sample data at the grid's normalized positions (ONNX GridSample)")

OPS = [GRID_SAMPLE]


def grid_sample(data, grid, mode="linear", padding_mode="zeros", align_corners=False) -> Call:
    return GRID_SAMPLE(data, grid, mode=mode, padding_mode=padding_mode, align_corners=bool(align_corners))
