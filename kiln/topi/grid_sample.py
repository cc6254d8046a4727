"""ONNX GridSample (2-D and 3-D): each output pixel reads the input at the normalized position the
grid gives (x first, then y, then z), with nearest, linear or cubic (Keys, a = -0.75)
interpolation and zeros, border or reflection padding. Two stages: the positions, then the
taps (unrolled), so a reflected position is computed once, not once per tap."""

from __future__ import annotations

import itertools

from kiln import te, tir
from kiln.ir.expr import const

CUBIC_A = -0.75


def _f(v):
    return const(float(v), "float32")


def _reflect(x, lo: float, hi: float):
    """Fold x into [lo, hi] by reflecting at the nearer border, repeatedly."""
    rng = hi - lo
    if rng <= 0:
        return _f(lo)
    below, above = _f(lo) - x, x - _f(hi)
    dx = tir.if_then_else(x < _f(lo), below, above)
    n = tir.floor(dx / _f(rng))
    r = dx - n * _f(rng)
    even = (n - _f(2.0) * tir.floor(n / _f(2.0))) == _f(0.0)
    from_lo, from_hi = _f(lo) + r, _f(hi) - r
    folded = tir.if_then_else(x < _f(lo), tir.if_then_else(even, from_lo, from_hi),
                              tir.if_then_else(even, from_hi, from_lo))
    return tir.if_then_else(tir.any(x < _f(lo), x > _f(hi)), folded, x)


def _cubic_weights(t):
    a = _f(CUBIC_A)
    one, two = _f(1.0), _f(2.0)

    def far(d):  # 1 < |d| < 2
        return ((a * d - _f(5.0) * a) * d + _f(8.0) * a) * d - _f(4.0) * a

    def near(d):  # |d| <= 1
        return ((a + two) * d - (a + _f(3.0))) * d * d + one
    return [far(t + one), near(t), near(one - t), far(two - t)]


def grid_sample(data, grid, mode: str = "linear", padding_mode: str = "zeros", align_corners: bool = False):
    """data (N, C, *spatial), grid (N, *out_spatial, ndim) -> (N, C, *out_spatial)."""
    spatial = [int(s) for s in data.shape[2:]]
    nd = len(spatial)
    out_shape = tuple(data.shape[:2]) + tuple(grid.shape[1:-1])
    dtype = str(data.dtype)
    lo = [0.0 if align_corners else -0.5 for _ in spatial]
    hi = [s - 1.0 if align_corners else s - 0.5 for s in spatial]

    def fcoord(n, *o_d):
        # one stage of its own: the padded, denormalized position of each output pixel along
        # spatial axis d (taps and reflections below read it instead of repeating it)
        *o, d = o_d
        parts = []
        for dd in range(nd):
            parts.append(_coord(grid(n, *o, nd - 1 - dd).astype("float32"), dd))
        out = parts[nd - 1]
        for dd in range(nd - 2, -1, -1):
            out = tir.if_then_else(d == dd, parts[dd], out)
        return out

    def _coord(g, d):
        size = spatial[d]
        x = (g + _f(1.0)) / _f(2.0) * _f(size - 1) if align_corners else ((g + _f(1.0)) * _f(size) - _f(1.0)) / _f(2.0)
        if mode == "nearest":
            x = tir.nearbyint(x)
        if padding_mode == "border":  # clamped only outside the border, as onnx's reference does
            x = tir.if_then_else(tir.any(x < _f(lo[d]), x > _f(hi[d])), tir.max(tir.min(x, _f(size - 1)), _f(0.0)), x)
        elif padding_mode == "reflection":
            x = _reflect(x, lo[d], hi[d])
        return x

    coords = te.compute(tuple(grid.shape), fcoord, name="T_grid_coords", tag="grid_coords")

    def fcompute(n, c, *o):
        pos = [coords(n, *o, d) for d in range(nd)]

        def pixel(idx):
            valid, safe = [], []
            for d, i in enumerate(idx):
                size = spatial[d]
                if padding_mode == "zeros":
                    valid.append(tir.all(i >= 0, i < size))
                elif padding_mode == "reflection":
                    i = _reflect(i.astype("float32"), lo[d], hi[d]).astype("int32")
                safe.append(tir.max(tir.min(i, const(size - 1, "int32")), const(0, "int32")))
            v = data(n, c, *safe).astype("float32")
            return tir.if_then_else(tir.all(*valid), v, _f(0.0)) if valid else v

        if mode == "nearest":
            return pixel([p.astype("int32") for p in pos]).astype(dtype)
        base = [tir.floor(p) for p in pos]
        frac = [p - b for p, b in zip(pos, base)]
        if mode == "linear":
            offsets, weights = (0, 1), [[_f(1.0) - t, t] for t in frac]
        else:
            offsets, weights = (-1, 0, 1, 2), [_cubic_weights(t) for t in frac]
        total = _f(0.0)
        for combo in itertools.product(range(len(offsets)), repeat=nd):
            w = weights[0][combo[0]]
            for d in range(1, nd):
                w = w * weights[d][combo[d]]
            idx = [base[d].astype("int32") + const(offsets[k], "int32") for d, k in enumerate(combo)]
            total = total + w * pixel(idx)
        return total.astype(dtype)

    return te.compute(out_shape, fcompute, name="T_grid_sample", tag="grid_sample")
