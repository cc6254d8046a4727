"""A tunable direct conv2d in NCHW: register tiles of output channels x output columns.

Knobs: ``tile_f`` (output channels: outer x register block, unrolled), ``tile_x`` (output
columns: outer x vector), ``tile_rc`` (input channels: outer x inner, inner moved next to the
register tile), ``order`` (kernel window loops outside or inside the channel block).
"""

from __future__ import annotations

from kiln import te

from ..space import SplitEntity
from ..task import get_config, template


@template("kiln/conv2d_nchw")
def conv2d_nchw(N, C, H, W, F, KH, KW, stride=1, pad=1, dtype="float32"):
    data = te.placeholder((N, C, H, W), name="data", dtype=dtype)
    kernel = te.placeholder((F, C, KH, KW), name="kernel", dtype=dtype)
    OH = (H + 2 * pad - KH) // stride + 1
    OW = (W + 2 * pad - KW) // stride + 1
    padded = te.compute(
        (N, C, H + 2 * pad, W + 2 * pad),
        lambda n, c, y, x: te.if_then_else(
            te.all(y >= pad, y < H + pad, x >= pad, x < W + pad), data[n, c, y - pad, x - pad],
            te.const(0.0, dtype)),
        name="pad")
    rc = te.reduce_axis((0, C), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    out = te.compute(
        (N, F, OH, OW),
        lambda n, f, y, x: te.sum(padded[n, rc, y * stride + ry, x * stride + rx] * kernel[f, rc, ry, rx],
                                  axis=[rc, ry, rx]),
        name="conv")

    cfg = get_config()
    cfg.define_split("tile_f", F, num_outputs=2, filter=lambda e: e.size[-1] <= 8)
    cfg.define_split("tile_x", OW, num_outputs=2, policy="verbose", filter=lambda e: e.size[-1] <= 32)
    cfg.define_split("tile_rc", C, num_outputs=2, filter=lambda e: e.size[-1] <= 64)
    cfg.define_knob("order", ["window_outer", "window_inner"])
    cfg.add_flop(2.0 * N * F * OH * OW * C * KH * KW)
    if cfg.is_fallback:
        cfg["tile_f"] = SplitEntity([-1, 1])
        cfg["tile_x"] = SplitEntity([-1, 1])
        cfg["tile_rc"] = SplitEntity([-1, 1])

    s = te.create_schedule(out.op)
    OL = s.cache_write(out, "local")
    n, f, y, x = s[out].op.axis
    fo, fi = cfg["tile_f"].apply(s, out, f)
    xo, xi = cfg["tile_x"].apply(s, out, x)
    s[out].reorder(n, fo, y, xo, fi, xi)
    outer = s[out].fuse(n, fo, y)
    s[out].parallel(outer)
    s[out].vectorize(xi)
    s[OL].compute_at(s[out], xo)
    _, fl, _, xl = s[OL].op.axis
    rc_, ry_, rx_ = s[OL].op.reduce_axis
    rco, rci = cfg["tile_rc"].apply(s, OL, rc_)
    if cfg["order"].val == "window_outer":
        s[OL].reorder(rco, ry_, rx_, rci, fl, xl)
    else:
        s[OL].reorder(rco, rci, ry_, rx_, fl, xl)
    s[OL].unroll(fl)
    s[OL].vectorize(xl)
    s[padded].compute_inline()
    return s, [data, kernel, out]
