"""NCHW4c operators for Adreno graphs whose tensors between operators are images.

relay's AlterOpLayout for adreno (relay/backend/adreno_textures.py) keeps activations in NCHW4c
and conv weights in OIHW4o; the graph then hands each kernel its inputs and its output as
``image2d_t`` (docs/adreno.md). Nothing is packed per call: the kernels read and write the
images directly.

``schedule_nchw4c`` is the one schedule of every operator whose output is NCHW4c (a conv and
its epilogue, a pool, an elementwise chain, a channel concatenation, a layout transform): one
work-item per output texel, its 4 lanes a float4 (``write_imagef``); the reduction, if any,
in private memory at that work-item with the lanes innermost and vectorized, so a conv step
is one weight texel times a broadcast input value, and the 4 input channels of one data texel
are unrolled side by side (the printer fetches the texel once).
"""

from __future__ import annotations

from kiln import te

from .. import gpu
from ..gpu.common import as_list, block, inline_injective, max_threads, producers, thread
from ..nn.pad import pad
from ..utils import const_int, find_stage, knob

CONV_TAG = "conv2d_NCHW4c"
TILE_ATTR = "adreno_tile"  # a tuned config's knobs, on the conv op (read by schedule_nchw4c)
# The knobs of the NCHW4c conv templates: pixels and channel blocks per work-item, work-items per
# group (at most), unrolling the 4 input channels of a data texel, unrolling the kernel window.
KNOBS = ("tile_pixels", "tile_blocks", "threads", "unroll_channels", "unroll_kernel")
DEFAULT_TILE = (2, 1, 64)  # (pixels, blocks, threads) untuned, cut to divisors of the extents


def _dims(t) -> list[int]:
    return [const_int(d) for d in t.shape]


def conv2d_NCHW4c(data, kernel, strides, padding, dilation, groups, out_dtype, in_block, out_block,
                  prepacked=True, cfg=None):
    """conv2d (groups 1) or depthwise conv2d; data NCHW4c (in_block 4) or NCHW, kernel OIHW4o
    (prepacked) or OIHW; output NCHW4c, or NCHW (out_block 0) through a view of it. ``cfg``: a
    tuned config of the template ``conv2d_NCHW4c.adreno`` (kiln/autotvm/templates/adreno.py),
    kept on the conv for ``schedule_nchw4c``; None: the untuned tiles (``conv_tiles``)."""
    out_dtype = out_dtype or data.dtype
    sh, sw = strides
    dh, dw = dilation
    pt, pl, pb, pr = padding
    if in_block:
        n, cb, h, w, _ = _dims(data)
        c = cb * 4
    else:
        n, c, h, w = _dims(data)
    if prepacked:
        ob, _, kh, kw, _ = _dims(kernel)
        o = ob * 4

        def wv(b, k, i, y, x):
            return kernel[b, i, y, x, k]
    else:
        o, _, kh, kw = _dims(kernel)

        def wv(b, k, i, y, x):
            return kernel[b * 4 + k, i, y, x]
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    if pt or pl or pb or pr:
        zeros = [0] * (len(data.shape) - 4)
        data = pad(data, [0, 0, pt, pl] + zeros, [0, 0, pb, pr] + zeros, name="data_pad")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    shape = (n, o // 4, oh, ow, 4)

    def at(y, x, ry_, rx_):
        return y * sh + ry_ * dh, x * sw + rx_ * dw

    if groups == 1 and in_block:
        rco = te.reduce_axis((0, c // 4), name="rco")
        rci = te.reduce_axis((0, 4), name="rci")

        def body(b, ob_, y, x, k):
            iy, ix = at(y, x, ry, rx)
            return te.sum(data[b, rco, iy, ix, rci].astype(out_dtype)
                          * wv(ob_, k, rco * 4 + rci, ry, rx).astype(out_dtype), axis=[rco, ry, rx, rci])
    elif groups == 1:
        rc = te.reduce_axis((0, c), name="rc")

        def body(b, ob_, y, x, k):
            iy, ix = at(y, x, ry, rx)
            return te.sum(data[b, rc, iy, ix].astype(out_dtype) * wv(ob_, k, rc, ry, rx).astype(out_dtype),
                          axis=[rc, ry, rx])
    elif groups == c == o and in_block:
        def body(b, cb_, y, x, k):
            iy, ix = at(y, x, ry, rx)
            return te.sum(data[b, cb_, iy, ix, k].astype(out_dtype) * wv(cb_, k, 0, ry, rx).astype(out_dtype),
                          axis=[ry, rx])
    else:
        raise ValueError(f"conv2d_NCHW4c: groups={groups} with {c} input channels: NCHW4c convs take groups 1 "
                         "or depthwise convolutions on blocked data")
    out = te.compute(shape, body, name="conv2d_NCHW4c", tag=CONV_TAG)
    if cfg is not None:
        out.op.attrs[TILE_ATTR] = {k: knob(cfg, k, None) for k in KNOBS}
    if out_block:
        return out
    return te.compute((n, o, oh, ow), lambda b, ch, y, x: out[b, ch // 4, y, x, ch % 4],
                      name="conv2d_NCHW4c_unpack", tag="injective")


def texel_shaped(t) -> bool:
    return len(t.shape) == 5 and const_int(t.shape[4]) == 4


def schedule_nchw4c(outs, cfg=None):
    """One work-item per output texel (see the module doc); other outputs: topi.gpu's per-item."""
    del cfg
    outs = as_list(outs)
    if len(outs) != 1 or not texel_shaped(outs[0]) or not isinstance(outs[0].op, te.ComputeOp):
        return gpu.schedule_per_item(outs)
    out = outs[0]
    s = te.create_schedule(out.op)
    stages = producers(out)
    if out.op.reduce_axis:  # the reduction goes to private memory; the output stage writes texels
        cache = s.cache_write(out, "local")
        stages = [cache] + producers(cache)
    inline_injective(s, [out])
    st = s[out]
    axes = list(st.op.axis)
    # A conv work-item computes ``tile`` neighbouring pixels of ``blocks`` x 4 channels: each
    # weight texel it fetches serves ``tile`` pixels, each data texel ``blocks`` channel blocks.
    convs = [u for u in stages if CONV_TAG in u.op.tag]
    tuned = _tuned(out)
    tile, blocks, threads = conv_tiles(axes, tuned) if convs else (1, 1, 64)
    channels = (tuned or {}).get("unroll_channels")
    unroll_channels = True if channels is None else bool(channels)
    unroll_kernel = bool((tuned or {}).get("unroll_kernel") or 0)
    cbo, cbi = st.split(axes[1], factor=blocks)
    wo, wi = st.split(axes[3], factor=tile)
    total = const_int(axes[0].dom.extent) * const_int(axes[2].dom.extent)
    total *= const_int(axes[1].dom.extent) // blocks * (const_int(axes[3].dom.extent) // tile)
    st.reorder(axes[0], cbo, axes[2], wo, cbi, wi, axes[4])
    fused = st.fuse(axes[0], cbo, axes[2], wo)
    bx, tx = st.split(fused, factor=_divisor(total, min(max_threads(), threads)))
    st.bind(bx, block("x"))
    st.bind(tx, thread("x"))
    st.reorder(bx, tx, cbi, wi, axes[4])
    for ax, n in ((cbi, blocks), (wi, tile)):
        if n > 1:
            st.unroll(ax)
    st.vectorize(axes[4])
    for u in stages:
        su = s[u]
        if su.attach.value != "root":
            continue
        su.compute_at(st, tx)
        su.set_scope("local")
        if u.op.reduce_axis and texel_shaped(u):
            data_axes, red = list(su.op.axis), list(su.op.reduce_axis)
            su.reorder(data_axes[0], data_axes[2], *red, data_axes[1], data_axes[3], data_axes[4])
            if const_int(red[-1].dom.extent) == 4 and len(red) > 1 and unroll_channels:
                su.unroll(red[-1])  # 4 input channels of one data texel side by side
            if unroll_kernel:  # the window: conv [rco, ry, rx, rci] or [rc, ry, rx], depthwise [ry, rx]
                for r in (red[1:3] if len(red) >= 3 else red):
                    su.unroll(r)
            if blocks > 1:
                su.unroll(data_axes[1])
            if tile > 1:
                su.unroll(data_axes[3])
            su.vectorize(data_axes[4])
    return s


def _tuned(out):
    """The tuned knobs kept on the conv feeding ``out`` (``conv2d_NCHW4c(cfg=...)``), or None."""
    try:
        conv = find_stage(out, lambda op: getattr(op, "attrs", {}).get(TILE_ATTR) is not None, "tuned conv")
    except ValueError:
        return None
    return conv.op.attrs[TILE_ATTR]


def conv_tiles(axes, tuned=None) -> tuple[int, int, int]:
    """(pixels, channel blocks, work-items per group) of a conv work-item: up to 2 pixels and 1
    block, 64 work-items (on the H100's OpenCL, ResNet-18: 1-2 pixels beat 4 and 8, a second
    block or 128 work-items lose), unless ``PassContext(config={"relay.backend.adreno_conv_tile":
    (pixels, blocks, threads)})`` asks for others (the benchmark compares a few); each is cut to
    a divisor of its extent. A tuned config (``tuned``, the template's knobs) comes first."""
    from kiln.transform import PassContext

    pixels, blocks, threads = PassContext.current().config.get("relay.backend.adreno_conv_tile", DEFAULT_TILE)
    if tuned:
        pixels = tuned.get("tile_pixels") or pixels
        blocks = tuned.get("tile_blocks") or blocks
        threads = tuned.get("threads") or threads
    return (_divisor(const_int(axes[3].dom.extent), int(pixels)),
            _divisor(const_int(axes[1].dom.extent), int(blocks)), int(threads))


def untuned_tile(width: int, blocks: int) -> tuple[int, int, int]:
    """(pixels, blocks, threads) of an untuned conv whose output has ``width`` columns and
    ``blocks`` channel blocks, without ``relay.backend.adreno_conv_tile``: the templates' default."""
    return _divisor(width, DEFAULT_TILE[0]), _divisor(blocks, DEFAULT_TILE[1]), DEFAULT_TILE[2]


def _divisor(total: int, limit: int) -> int:
    for d in range(min(total, limit), 0, -1):
        if total % d == 0:
            return d
    return 1


def schedule_injective(outs, cfg=None):
    """NCHW4c outputs by texels (they may be images); everything else as topi.gpu."""
    outs = as_list(outs)
    if len(outs) == 1 and texel_shaped(outs[0]):
        return schedule_nchw4c(outs, cfg)
    return gpu.schedule_injective(outs, cfg)
