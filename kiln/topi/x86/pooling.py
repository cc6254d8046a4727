"""Pooling for x86.

NCHW / NHWC: the generic compute with a phase-split padded input when the width stride is above
one (contiguous vector loads instead of per-lane gathers), and a schedule that vectorizes the
output width with the window taps outside it.

Blocked layouts (NCHW{b}c, any layout whose innermost axis is a channel block and whose H and W
are unsplit): no padded copy at all; each tap is one contiguous load of the b channels of a
clamped pixel (the select for the padding is uniform over the block). The schedule vectorizes
the block axis, runs a tile of ``tile_w`` output pixels (independent max/add chains) with the
taps outside it, and parallelizes (n, channel chunk, output row).
"""

from __future__ import annotations

from kiln import te

from ..cpu import vector_lanes
from ..generic.default import default_schedule
from ..nn.pooling import pool2d as _generic_pool2d
from ..utils import const_int
from .conv2d import find_tagged
from .depthwise_conv2d_nchwc import _vectorize_block

POOL_TAGS = ("pool_max", "pool_sum")


def _blocked(layout: str) -> bool:
    return layout not in ("NCHW", "NHWC") and layout[-1:].islower()


def pool2d(data, kernel, stride, dilation=(1, 1), padding=(0, 0, 0, 0), pool_type="max", ceil_mode=False,
           layout="NCHW", count_include_pad=True):
    """Same result as topi.nn.pool2d (blocked layouts read the input without a padded copy)."""
    return _generic_pool2d(data, kernel, stride, dilation, padding, pool_type, ceil_mode, layout, count_include_pad,
                           split_width_phases=True, clamp_window=_blocked(layout))


def schedule_pool(outs, layout="NCHW", cfg=None):
    """Schedule for ``x86.pool2d`` and global / generic pools in any layout.

    Blocked-layout pools (the op's ``layout`` attr, or ``layout=``) get ``schedule_pool_NCHWc``;
    global pools in a blocked layout get ``schedule_global_pool_NCHWc``; the rest get the default
    schedule plus a vectorized, parallel phase-split pass when there is one.
    """
    del cfg
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    red = _find_any(outs[0], POOL_TAGS + ("global_pool",))
    if red is not None:
        op_layout = red.op.attrs.get("layout", layout) if red.op.tag != "global_pool" else layout
        if red.op.tag == "global_pool" and len(red.shape) == 5:
            return schedule_global_pool_NCHWc(outs)
        if red.op.tag in POOL_TAGS and (_blocked(op_layout) or _blocked(layout)):
            return schedule_pool_NCHWc(outs)
    s = default_schedule(outs)
    lanes = vector_lanes()
    for stage in s.stages:
        op = stage.op
        if "phase_split" in getattr(op, "tag", "") and stage.attach.value == "root":
            for u in op.input_tensors:
                if isinstance(u.op, te.ComputeOp) and "injective" in u.op.tag:
                    s[u].compute_inline()
            b, c, y, ph, xs = op.axis
            stage.reorder(b, c, y, ph, xs)
            stage.parallel(stage.fuse(b, c))
            stage.vectorize(stage.split(xs, factor=lanes)[1])
    return s


def _find_any(out, tags):
    for tag in tags:
        try:
            return find_tagged(out, tag)
        except ValueError:
            continue
    return None


def schedule_pool_NCHWc(outs, tile_w: int = 4):  # noqa: N802
    """Blocked-layout pool2d (N, C/b, H, W, b): parallel (n, chunk, row), a tile of ``tile_w``
    pixels of b channels (vectorized) accumulating the taps in registers; the average's division
    and any fused elementwise epilogue are applied to the tile before it is stored."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    out = outs[0]
    red = _find_any(out, POOL_TAGS)
    from .injective import tile_root

    out = tile_root(s, out, red, red)
    stage = s[s.cache_write(out, "local")] if out.op is red.op else s[red]
    lanes = vector_lanes()
    b = const_int(out.shape[-1])
    st = s[out]
    axes = list(st.op.axis)
    x, j = axes[-2], axes[-1]
    tile = min(tile_w, const_int(x.dom.extent))
    xo, xi = st.split(x, factor=tile)
    st.reorder(*axes[:-2], xo, xi, j)
    st.parallel(st.fuse(*axes[:-2]))
    st.unroll(xi)
    _vectorize_block(st, j, b, lanes)
    stage.compute_at(st, xo)
    caxes = list(stage.op.axis)
    ry, rx = stage.op.reduce_axis
    stage.reorder(ry, rx, caxes[-2], caxes[-1])
    if const_int(ry.dom.extent) <= 3:
        stage.unroll(ry)
    stage.unroll(rx)
    stage.unroll(caxes[-2])
    _vectorize_block(stage, caxes[-1], b, lanes)
    return s


def schedule_global_pool_NCHWc(outs):  # noqa: N802
    """Global max/avg pool of a blocked (N, C/b, H, W, b) input: parallel over (n, chunk), the
    H*W reduction in a vector of b channels, the average's scale applied to that vector."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    out = outs[0]
    red = find_tagged(out, "global_pool")
    from .injective import tile_root

    out = tile_root(s, out, red, red)
    lanes = vector_lanes()
    b = const_int(red.shape[-1])
    st = s[out]
    n, o, y, x, j = st.op.axis
    if out.op is red.op:
        ry, rx = st.op.reduce_axis
        st.reorder(n, o, y, x, ry, rx, j)
    st.parallel(st.fuse(n, o))
    _vectorize_block(st, j, b, lanes)
    if out.op is not red.op:
        rst = s[red]
        rst.compute_at(st, x)
        rn, ro, r_y, r_x, rj = rst.op.axis
        rry, rrx = rst.op.reduce_axis
        rst.reorder(rn, ro, r_y, r_x, rry, rrx, rj)
        _vectorize_block(rst, rj, b, lanes)
    return s
