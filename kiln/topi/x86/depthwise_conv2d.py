"""Depthwise conv2d for x86 (NCHW): rows vectorized along width, a tile of rows in registers.

The padded input is one parallel pass; each output tile (one channel, ``tile_h`` rows of
``tile_w`` pixels) accumulates kh*kw shifted input vectors times a broadcast weight. Stride 2
turns the input loads into strided ones, which LLVM turns into shuffles of two loads.

Knobs: ``tile_w`` (pixels per row of the tile; a multiple of the vector width, or the width),
``tile_h`` (rows per tile).
"""

from __future__ import annotations

from kiln import te, tir

from ..cpu import vector_lanes
from ..nn.depthwise_conv2d import depthwise_conv2d_nchw as _generic
from ..utils import as_pair, const_int, divisor_at_most, knob, with_default
from .conv2d import find_tagged
from .injective import tile_root

TAG = "depthwise_conv2d_nchw"


def default_config(ow: int, oh: int) -> dict:
    """A tile width that divides the row (no tail) and is at most two vectors; odd widths such
    as 7 or 14 become one (partial) vector rather than scalar code."""
    lanes = vector_lanes()
    tile_w = divisor_at_most(ow, 2 * lanes, prefer=(2 * lanes, lanes))
    if tile_w < min(ow, lanes // 2):
        tile_w = min(ow, 2 * lanes)  # a prime-ish width: accept a tail
    return {"tile_w": tile_w, "tile_h": 2 if oh % 2 == 0 else 1}


def config_space(ow: int, oh: int) -> dict:
    space = {"tile_w": sorted({d for d in range(1, 33) if ow % d == 0} | {min(ow, 32)}),
             "tile_h": [h for h in (1, 2, 4) if h <= oh]}
    return with_default(space, default_config(ow, oh))


def depthwise_conv2d_nchw(Input, Filter, stride, padding, dilation, out_dtype=None, cfg=None):  # noqa: N803
    """Same result as topi.nn.depthwise_conv2d_nchw (Filter (C, M, KH, KW))."""
    sw = as_pair(stride, "depthwise_conv2d", "stride")[1]
    out = _generic(Input, Filter, stride, padding, dilation, out_dtype) if sw == 1 else \
        _strided(Input, Filter, stride, padding, dilation, out_dtype)
    conf = default_config(const_int(out.shape[3]), const_int(out.shape[2]))
    conf.update({k: knob(cfg, k, v) for k, v in conf.items()})
    out.op.attrs["config"] = conf
    return out


def _strided(Input, Filter, stride, padding, dilation, out_dtype):  # noqa: N803
    """Width stride s > 1: the padded input is stored phase-split, [.., row, x % s, x // s], so
    that each tap reads a contiguous run of the row instead of every s-th element."""
    ref = _generic(Input, Filter, stride, padding, dilation, out_dtype)
    padded = ref.op.input_tensors[0] if ref.op.input_tensors[0].op.name == "data_pad" else Input
    n, c, hp, wp = (const_int(d) for d in padded.shape)
    sh, sw = as_pair(stride, "depthwise_conv2d", "stride")
    dh, dw = as_pair(dilation, "depthwise_conv2d", "dilation")
    m = const_int(Filter.shape[1])
    xs_len = -(-wp // sw)
    phased = te.compute((n, c, hp, sw, xs_len),
                        lambda b, ch, y, ph, xs: padded[b, ch, y, tir.min(xs * sw + ph, wp - 1)],
                        name="data_phased", tag="pad,phase_split")
    ry, rx = (te.reduce_axis((0, const_int(Filter.shape[a])), name=nm) for a, nm in ((2, "ry"), (3, "rx")))
    out_dtype = out_dtype or str(Input.dtype)

    def fcompute(b, f, y, x):
        ch = f // m
        tap = rx * dw
        return te.sum(phased[b, ch, y * sh + ry * dh, tap % sw, x + tap // sw].astype(out_dtype)
                      * Filter[ch, f % m, ry, rx].astype(out_dtype), axis=[ry, rx])

    return te.compute(ref.shape, fcompute, name="depthwise_conv2d_nchw", tag=TAG)


def schedule_depthwise_conv2d_nchw(outs, cfg=None):
    del cfg
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    out = outs[0]
    conv = find_tagged(out, TAG)
    conf = conv.op.attrs.get("config") or default_config(const_int(conv.shape[3]), const_int(conv.shape[2]))
    out = tile_root(s, out, conv, conv)
    if conv.op is out.op:
        conv_stage = s[s.cache_write(out, "local")]
    else:
        conv_stage = s[conv]
    n, c, y, x = s[out].op.axis
    yo, xo, yi, xi = s[out].tile(y, x, conf["tile_h"], conf["tile_w"])
    s[out].parallel(s[out].fuse(n, c, yo))
    lanes = vector_lanes()
    tile_w = conf["tile_w"]
    # Whole vectors of `lanes` when they divide the tile, else the tile is one odd-sized vector.
    step = lanes if tile_w % lanes == 0 else tile_w
    vectorize = step <= 2 * lanes
    if vectorize:
        s[out].vectorize(s[out].split(xi, factor=step)[1] if step != tile_w else xi)
    conv_stage.compute_at(s[out], xo)
    _, _, cy, cx = conv_stage.op.axis
    ry, rx = conv_stage.op.reduce_axis
    conv_stage.reorder(ry, rx, cy, cx)
    conv_stage.unroll(rx)
    conv_stage.unroll(cy)
    if vectorize and step != tile_w:
        cxo, cxi = conv_stage.split(cx, factor=step)
        conv_stage.unroll(cxo)
        conv_stage.vectorize(cxi)
    elif vectorize:
        conv_stage.vectorize(cx)
    for t in conv.op.input_tensors:
        if "pad" in t.op.tag:
            st = s[t]
            for u in t.op.input_tensors:
                if isinstance(u.op, te.ComputeOp) and "injective" in u.op.tag:
                    s[u].compute_inline()
            axes = st.op.axis
            st.parallel(st.fuse(axes[0], axes[1]))
            if "phase_split" in t.op.tag:
                # Stores are contiguous per phase; the (strided) loads are the unavoidable cost.
                _, _, _, ph, xs = axes
                st.reorder(ph, xs)
                xo, xi = st.split(xs, factor=lanes)
                st.vectorize(xi)
    return s
