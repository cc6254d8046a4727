"""conv2d NHWC / HWIO for x86: the output channels are already innermost and contiguous in the
kernel, so the generic compute is scheduled directly: a ``tile_ow`` x ``oc_bn`` register tile
(vector loads of the kernel, broadcast input pixels), reduction outside the tile.

Knobs: ``oc_bn`` (output channels per vector tile), ``tile_ow`` (pixels per tile).
"""

from __future__ import annotations

from kiln import te

from ..cpu import tile_fits, vector_lanes, vector_registers
from ..nn.conv2d import conv2d_nhwc as _generic
from ..utils import divisor_at_most, knob, with_default
from .conv2d import find_tagged
from .injective import tile_root

TAG = "conv2d_nhwc"


def default_config(p) -> dict:
    lanes, regs = vector_lanes(), vector_registers()
    oc = p.out_channel
    oc_bn = 2 * lanes if oc % (2 * lanes) == 0 and p.out_width <= 14 else lanes if oc >= lanes else oc
    vectors = max(1, -(-oc_bn // lanes))
    # 28 pixels of one vector (14 of two) with AVX-512's 32 registers; what fits with fewer.
    acc = min(28 // vectors, next((r for r in range(28, 0, -1) if tile_fits(r, vectors, regs)), 1))
    tile_ow = divisor_at_most(p.out_width, acc, prefer=(14, 16, 8, 7))
    if tile_ow < 4 and p.out_width > 4:
        tile_ow = min(p.out_width, acc)
    return {"oc_bn": oc_bn, "tile_ow": tile_ow}


def config_space(p) -> dict:
    space = {"oc_bn": [b for b in (4, 8, 16, 32, 64) if p.out_channel % b == 0] or [p.out_channel],
             "tile_ow": sorted({d for d in range(1, 33) if p.out_width % d == 0} | {min(p.out_width, 28)})}
    return with_default(space, default_config(p))


def conv2d_nhwc(data, kernel, strides=1, padding=0, dilation=1, out_dtype=None, groups=1, cfg=None):
    """Same result as topi.nn.conv2d_nhwc."""
    out = _generic(data, kernel, strides, padding, dilation, out_dtype, groups)
    conf = default_config(out.op.attrs["workload"])
    conf.update({k: knob(cfg, k, v) for k, v in conf.items()})
    out.op.attrs["config"] = conf
    return out


def schedule_conv2d_nhwc(outs, cfg=None):
    del cfg
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    out = outs[0]
    conv = find_tagged(out, TAG)
    conf = conv.op.attrs.get("config") or default_config(conv.op.attrs["workload"])
    out = tile_root(s, out, conv, conv)
    conv_stage = s[s.cache_write(out, "local")] if conv.op is out.op else s[conv]
    n, y, x, f = s[out].op.axis
    lanes = vector_lanes()
    bn = conf["oc_bn"]
    fo, fi = s[out].split(f, factor=bn)
    xo, xi = s[out].split(x, factor=conf["tile_ow"])
    s[out].reorder(n, fo, y, xo, xi, fi)
    s[out].parallel(s[out].fuse(n, fo, y))
    if bn % lanes == 0:
        s[out].vectorize(s[out].split(fi, factor=lanes)[1])
    conv_stage.compute_at(s[out], xo)
    _, cy, cx, cf = conv_stage.op.axis
    rc, ry, rx = conv_stage.op.reduce_axis
    conv_stage.reorder(ry, rx, rc, cy, cx, cf)
    conv_stage.unroll(cx)
    if bn % lanes == 0:
        cfo, cfi = conv_stage.split(cf, factor=lanes)
        conv_stage.unroll(cfo)
        conv_stage.vectorize(cfi)
    for t in conv.op.input_tensors:
        if "pad" in t.op.tag:
            st = s[t]
            pn, py, px, pc = st.op.axis
            st.parallel(st.fuse(pn, py))
    return s
