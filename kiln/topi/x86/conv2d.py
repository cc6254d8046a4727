"""Fast conv2d for x86 (NCHW): output channels in vector blocks, a register tile over width.

The compute keeps NCHW at its boundary but works in a blocked form inside:

    kernel_vec[oc_chunk, ic, kh, kw, oc_block]         (the OIHW kernel regrouped; zero tail)
    conv[n, oc_chunk, oh, ow, oc_block]                (computed per tile, stays in registers)
    out[n, oc, oh, ow] = conv[n, oc // bn, oh, ow, oc % bn]

Each tile accumulates ``tile_ow`` × ``oc_bn`` outputs: per (ic, kh, kw) it loads one kernel
vector of oc_bn lanes and broadcasts tile_ow input pixels into FMAs, so strides and dilation
cost nothing extra. The schedule inlines the unpack (and any fused elementwise epilogue) into
the output stage and computes the tile at the output's width loop.

Knobs (``cfg``, all optional): ``oc_bn`` (vector block of output channels), ``tile_ow`` (pixels
per register tile), ``unroll_kw`` (unroll the kernel-width loop), ``ic_unroll`` (input channels
unrolled per step), ``vectorize_out`` (vector stores for the NCHW copy-out).
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.expr import const

from ..nn.conv2d import Conv2DShape, conv2d_shape
from ..nn.pad import pad
from ..utils import check_ndim, const_int, const_shape, divisor_at_most, find_stage, knob, with_default
from ..cpu import accumulator_rows, pixel_major, vector_lanes, vector_registers
from .injective import tile_root

TAG = "conv2d_nchw_blocked"


def default_config(p: Conv2DShape) -> dict:
    """Heuristic knobs: one or two vectors of channels per block, registers nearly all accumulators."""
    lanes, regs = vector_lanes(), vector_registers()
    ocg = p.out_channel // p.groups
    # Rows shorter than a one-vector tile (late layers: 14 pixels with AVX-512's 24 accumulators,
    # 7 with AVX2's 14) have too few pixels for it: take two vectors of channels. (NEON's 4 lanes
    # are too narrow for one vector to carry the tile.)
    wide = p.out_width < accumulator_rows(1, regs) or lanes <= 4
    oc_bn = 2 * lanes if ocg % (2 * lanes) == 0 and wide else lanes
    if ocg % oc_bn:
        oc_bn = divisor_at_most(ocg, lanes, prefer=(lanes, lanes // 2)) if p.groups > 1 else lanes
    vectors_per_pixel = max(1, oc_bn // lanes)
    # Leave room for the kernel vectors and a broadcast: 28 accumulators of 2 vectors spill.
    accumulators = accumulator_rows(vectors_per_pixel, regs)
    tile_ow = divisor_at_most(p.out_width, accumulators, prefer=(14, 16, 8, 7, 12, 6))
    if tile_ow < 4 and p.out_width > 4:
        tile_ow = min(p.out_width, accumulators)  # a tail is cheaper than a 1-wide tile
    return {"oc_bn": oc_bn, "tile_ow": tile_ow, "unroll_kw": p.kernel_w <= 3, "ic_unroll": 1, "vectorize_out": False}


def config_space(p: Conv2DShape) -> dict:
    """Candidate values of each knob, for the tuner."""
    space = {
        "oc_bn": [b for b in (8, 16, 32, 64) if (p.out_channel // p.groups) % b == 0 or p.groups == 1],
        "tile_ow": sorted({d for d in range(1, 33) if p.out_width % d == 0} | {min(p.out_width, 28)}),
        "unroll_kw": [False, True],
        "ic_unroll": [1, 2, 4],
        "vectorize_out": [False, True],
    }
    return with_default(space, default_config(p))


def conv2d_nchw(data, kernel, strides=1, padding=0, dilation=1, out_dtype=None, groups=1, cfg=None,
                out_channels=None):
    """conv2d NCHW / OIHW with the blocked x86 compute; same result as topi.nn.conv2d_nchw.

    ``kernel`` may also be pre-packed by ``prepack_kernel`` (5 dims: O/bn, I/groups, KH, KW, bn;
    pass ``out_channels`` when bn does not divide O). Graph compilers do that once for constant
    weights, which saves re-packing them on every call (large for late ResNet layers).
    """
    check_ndim("conv2d", "data", data, 4, "NCHW")
    prepacked = len(kernel.shape) == 5
    if not prepacked:
        check_ndim("conv2d", "kernel", kernel, 4, "OIHW, or 5 dims when pre-packed")
    out_dtype = str(data.dtype) if not out_dtype else out_dtype
    kshape = const_shape(kernel, "conv2d kernel")
    if prepacked:
        kshape = (out_channels or kshape[0] * kshape[4],) + kshape[1:4]
    p = conv2d_shape("conv2d", const_shape(data, "conv2d data"), kshape,
                     strides, padding, dilation, const_int(groups, "conv2d: groups"))
    if p.groups > 1 and p.groups == p.in_channel and not prepacked:
        return _depthwise(data, kernel, p, strides, padding, dilation, out_dtype, cfg)
    conf = dict(default_config(p))
    conf.update({k: knob(cfg, k, v) for k, v in conf.items()})
    if prepacked:
        conf["oc_bn"] = const_int(kernel.shape[4])
    bn = conf["oc_bn"]
    icg, ocg = p.channels_per_group, p.out_channel // p.groups
    if p.groups > 1 and ocg % bn:
        raise ValueError(f"conv2d: oc_bn={bn} must divide the {ocg} output channels per group")
    chunks = -(-p.out_channel // bn)
    padded = pad(data, (0, 0, p.pad_top, p.pad_left), (0, 0, p.pad_bottom, p.pad_right), name="data_pad")
    kernel_vec = kernel if prepacked else pack_kernel(kernel, bn)
    rc = te.reduce_axis((0, icg), name="rc")
    ry = te.reduce_axis((0, p.kernel_h), name="ry")
    rx = te.reduce_axis((0, p.kernel_w), name="rx")

    def fconv(n, occ, y, x, ocb):
        c = rc if p.groups == 1 else (occ * bn // ocg) * icg + rc
        a = padded[n, c, y * p.stride_h + ry * p.dilation_h, x * p.stride_w + rx * p.dilation_w]
        w = kernel_vec[occ, rc, ry, rx, ocb]
        return te.sum(a.astype(out_dtype) * w.astype(out_dtype), axis=[rc, ry, rx])

    conv = te.compute((p.batch, chunks, p.out_height, p.out_width, bn), fconv, name="conv2d_blocked",
                      tag=TAG, attrs={"workload": p, "config": conf})
    return te.compute((p.batch, p.out_channel, p.out_height, p.out_width),
                      lambda n, c, y, x: conv[n, c // bn, y, x, c % bn], name="conv2d_nchw",
                      tag="injective,conv2d_unpack")


def _depthwise(data, kernel, p, strides, padding, dilation, out_dtype, cfg):
    """groups == channels: the OIHW kernel (C*M, 1, KH, KW) is the (C, M, KH, KW) depthwise filter."""
    from .depthwise_conv2d import depthwise_conv2d_nchw

    m = p.out_channel // p.in_channel
    filt = kernel
    if m > 1:
        filt = te.compute((p.in_channel, m, p.kernel_h, p.kernel_w), lambda c, j, y, x: kernel[c * m + j, 0, y, x],
                          name="depthwise_filter", tag="injective")
    return depthwise_conv2d_nchw(data, filt, strides, padding, dilation, out_dtype, cfg)


def pack_kernel(kernel, bn: int):
    """OIHW -> [O/bn, I, KH, KW, bn], zero-filled past O. Constant-folded when the kernel is a parameter."""
    oc, ic, kh, kw = kernel.shape
    chunks = -(-const_int(oc) // bn)
    if const_int(oc) % bn == 0:
        return te.compute((chunks, ic, kh, kw, bn), lambda o, i, y, x, b: kernel[o * bn + b, i, y, x],
                          name="kernel_vec", tag="injective,kernel_pack")
    zero = const(0, kernel.dtype)
    return te.compute((chunks, ic, kh, kw, bn),
                      lambda o, i, y, x, b: tir.if_then_else(o * bn + b < oc, kernel[tir.min(o * bn + b, oc - 1), i, y, x], zero),
                      name="kernel_vec", tag="injective,kernel_pack")


def prepack_kernel(weight, bn: int):
    """numpy: OIHW weight -> (O/bn, I, KH, KW, bn), zero-filled past O (what pack_kernel computes)."""
    import numpy as np

    o, i, kh, kw = weight.shape
    chunks = -(-o // bn)
    padded = np.zeros((chunks * bn, i, kh, kw), dtype=weight.dtype)
    padded[:o] = weight
    return np.ascontiguousarray(padded.reshape(chunks, bn, i, kh, kw).transpose(0, 2, 3, 4, 1))


def config_for(data_shape, kernel_shape, strides=1, padding=0, dilation=1, groups=1, cfg=None) -> dict:
    """The knobs conv2d_nchw will use for these shapes (e.g. to pre-pack weights with oc_bn)."""
    p = conv2d_shape("conv2d", tuple(data_shape), tuple(kernel_shape), strides, padding, dilation, groups)
    conf = dict(default_config(p))
    conf.update({k: knob(cfg, k, v) for k, v in conf.items()})
    return conf


def schedule_conv2d_nchw(outs, cfg=None):
    """Schedule for ``x86.conv2d_nchw`` (and a fused elementwise epilogue on its output)."""
    del cfg  # the knobs travel in the compute's attrs, so compute and schedule agree
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    out = outs[0]
    try:
        conv = find_tagged(out, TAG)
    except ValueError:
        from .depthwise_conv2d import schedule_depthwise_conv2d_nchw

        return schedule_depthwise_conv2d_nchw(outs)
    unpack = _consumer_of(out, conv)
    schedule_blocked_tile(s, conv, tile_root(s, out, unpack, conv))
    return s


def _consumer_of(out, conv):
    """The NCHW unpack stage reading the blocked conv (found walking down from out)."""
    stack = [out]
    while stack:
        t = stack.pop()
        if any(u.op is conv.op for u in t.op.input_tensors):
            return t
        stack.extend(u for u in t.op.input_tensors if isinstance(u.op, te.ComputeOp))
    raise ValueError(f"schedule_conv2d_nchw: no stage reads {conv.name}")


def find_tagged(out, tag):
    """The tensor with ``tag`` reachable from out (a fused epilogue may sit on top)."""
    return find_stage(out, lambda op: getattr(op, "tag", "") == tag, f"{tag} stage")


def schedule_blocked_tile(s, conv, out, blocked_input=False):
    """Tile out (N, C, H, W) into (chunk, row, width tile); compute a conv tile in registers there."""
    conf = conv.op.attrs["config"]
    bn, tile_ow = conf["oc_bn"], conf["tile_ow"]
    n, c, y, x = s[out].op.axis
    co, ci = s[out].split(c, factor=bn)
    xo, xi = s[out].split(x, factor=tile_ow)
    s[out].reorder(n, co, y, xo, ci, xi)
    s[out].unroll(ci)
    # vectorize_out: each channel's row segment as one vector store, lanes shuffled out of the
    # tile's registers. Measured slower for small-channel 1x1 convs, so off by default.
    if conf.get("vectorize_out"):
        s[out].vectorize(xi)
    else:
        s[out].unroll(xi)
    s[out].parallel(s[out].fuse(n, co, y))
    s[conv].compute_at(s[out], xo)
    _schedule_tile(s, conv, conf, blocked_input)
    _schedule_packing(s, conv)


def _schedule_tile(s, conv, conf, blocked_input=False, oc_chunks=1):
    """Reduction outside the (pixels x channel block) tile. Blocked input (conv2d_NCHWc) has
    reduce axes (rco, ry, rx, rci): the inner channels of one input block run innermost. With
    ``oc_chunks`` > 1 the tile spans that many channel blocks (the caller computes the conv at a
    loop covering them), unrolled inside the reduction like the pixels. A conv over flat pixels
    (conv2d_NCHWc's 1x1 convs: axes n, occ, q, ocb; reduction rco, rci) has no row and no taps."""
    n, occ, *rows, x, ocb = s[conv].op.axis
    # The smaller side of the tile varies outermost, so that only its operands stay live: pixel-
    # major keeps one broadcast and the chunks' kernel vectors, chunk-major one kernel vector and
    # the tile's broadcasts (the other way round they spill: 3 x 6 tiles measured 2x slower).
    outer, inner = [n, occ, *rows], [x, ocb]
    if blocked_input:
        rco, *taps, rc = s[conv].op.reduce_axis
        order = outer + [rco, *taps]
    else:
        rc, *taps = s[conv].op.reduce_axis
        order = list(outer)
    if oc_chunks > 1:
        order = [n, *rows] + order[len(outer):]  # the blocks' loop moves into the tile
        vectors = max(1, const_int(ocb.dom.extent) // vector_lanes())
        window = blocked_input and const_int(rc.dom.extent) == 1 and bool(taps) and const_int(taps[-1].dom.extent) > 1
        inner = [x, occ, ocb] if pixel_major(conf["tile_ow"], oc_chunks, vectors, window) else [occ, x, ocb]
    if conf.get("ic_unroll", 1) > 1 and const_int(rc.dom.extent) % conf["ic_unroll"] == 0:
        rco, rci = s[conv].split(rc, factor=conf["ic_unroll"])
        order += [rco, rci] if blocked_input else [rco, *taps, rci]
        s[conv].unroll(rci)
    else:
        order += [rc] if blocked_input else [rc, *taps]
    s[conv].reorder(*order, *inner)
    if conf.get("unroll_kw") and taps:
        s[conv].unroll(taps[-1])
    if oc_chunks > 1:
        s[conv].unroll(occ)
    s[conv].unroll(x)
    s[conv].vectorize(ocb)


def _schedule_packing(s, conv):
    """The padded input and the regrouped kernel are separate parallel passes; injective stages
    feeding them (conv2d_transpose's dilation and kernel flip) are inlined into them."""
    for t in conv.op.input_tensors:
        if "pad" not in t.op.tag and "kernel_pack" not in t.op.tag:
            continue
        st = s[t]
        for u in t.op.input_tensors:
            if isinstance(u.op, te.ComputeOp) and "injective" in u.op.tag:
                s[u].compute_inline()
        axes = st.op.axis
        st.parallel(st.fuse(axes[0], axes[1]))
        if "kernel_pack" in t.op.tag or (len(axes) == 5 and const_int(axes[-1].dom.extent) >= 8):
            st.vectorize(axes[-1])  # the kernel's channel block, or a blocked input's
