"""Depthwise conv2d for x86 (NCHW): rows vectorized along width, a tile of rows in registers.

The padded input is one parallel pass; each output tile (one channel, ``tile_h`` rows of
``tile_w`` pixels) accumulates kh*kw shifted input vectors times a broadcast weight. Stride 2
turns the input loads into strided ones, which LLVM turns into shuffles of two loads.

Knobs: ``tile_w`` (pixels per row of the tile; a multiple of the vector width, or the width),
``tile_h`` (rows per tile).
"""

from __future__ import annotations

from kiln import te

from ..cpu import vector_lanes
from ..nn.depthwise_conv2d import depthwise_conv2d_nchw as _generic
from ..utils import const_int, knob
from .conv2d import find_tagged
from .injective import inline_injective_between

TAG = "depthwise_conv2d_nchw"


def default_config(ow: int, oh: int) -> dict:
    lanes = vector_lanes()
    tile_w = ow if ow <= 2 * lanes else (2 * lanes if ow % (2 * lanes) == 0 or ow > 4 * lanes else lanes)
    return {"tile_w": tile_w, "tile_h": 2 if oh % 2 == 0 else 1}


def depthwise_conv2d_nchw(Input, Filter, stride, padding, dilation, out_dtype=None, cfg=None):  # noqa: N803
    """Same result as topi.nn.depthwise_conv2d_nchw (Filter (C, M, KH, KW))."""
    out = _generic(Input, Filter, stride, padding, dilation, out_dtype)
    conf = default_config(const_int(out.shape[3]), const_int(out.shape[2]))
    conf.update({k: knob(cfg, k, v) for k, v in conf.items()})
    out.op.attrs["config"] = conf
    return out


def schedule_depthwise_conv2d_nchw(outs, cfg=None):
    del cfg
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    out = outs[0]
    conv = find_tagged(out, TAG)
    conf = conv.op.attrs.get("config") or default_config(const_int(conv.shape[3]), const_int(conv.shape[2]))
    inline_injective_between(s, out, conv)
    if conv.op is out.op:
        conv_stage = s[s.cache_write(out, "local")]
    else:
        conv_stage = s[conv]
    n, c, y, x = s[out].op.axis
    yo, xo, yi, xi = s[out].tile(y, x, conf["tile_h"], conf["tile_w"])
    s[out].parallel(s[out].fuse(n, c, yo))
    lanes = vector_lanes()
    if conf["tile_w"] % lanes == 0:
        xio, xii = s[out].split(xi, factor=lanes)
        s[out].vectorize(xii)
    conv_stage.compute_at(s[out], xo)
    _, _, cy, cx = conv_stage.op.axis
    ry, rx = conv_stage.op.reduce_axis
    conv_stage.reorder(ry, rx, cy, cx)
    conv_stage.unroll(rx)
    conv_stage.unroll(cy)
    if conf["tile_w"] % lanes == 0:
        cxo, cxi = conv_stage.split(cx, factor=lanes)
        conv_stage.unroll(cxo)
        conv_stage.vectorize(cxi)
    for t in conv.op.input_tensors:
        if "pad" in t.op.tag:
            st = s[t]
            pn, pc, py, px = st.op.axis
            st.parallel(st.fuse(pn, pc))
    return s
