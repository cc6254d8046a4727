"""Depthwise conv2d for x86 in the blocked layout NCHW{b}c: channels vectorized, pixels in registers.

    data[n, c // b, h, w, c % b]        (N, C/b, H, W, b); b divides C (no padding channels)
    kernel_vec[c // b, kh, kw, c % b]   (C/b, KH, KW, b); the OIHW (C, 1, KH, KW) weight regrouped
    out[n, c // b, oh, ow, c % b]       (N, C/b, OH, OW, b)

Every tap of every pixel is one contiguous load of b channels, so a width stride (or dilation)
costs nothing extra: the stride only changes which pixel a load starts at. Each register tile
holds ``tile_ow`` output pixels x b channels (b / lanes vectors per pixel) and accumulates the
kh*kw taps: per tap one weight vector load and one input load (an FMA memory operand) per pixel.
The loops over (n, channel chunk, output row) are the parallel ones; a fused elementwise
epilogue (bias, clip, residual add) is computed on the tile before it is stored.

The zero padding is a select between a clamped load and zero (uniform over the block, so it
vectorizes). It is written either as a separate parallel pass over the whole padded input
(``pad_at="root"``) or, per register tile, into a small stack buffer holding just the tile's
input window (``pad_at="tile"``: no extra pass over memory and no large scratch allocation).

Knobs: ``tile_ow`` (pixels per register tile), ``unroll_kh`` (unroll the kernel rows as well as
the columns), ``pad_at`` ("root" or "tile"); see ``default_config``.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.expr import const
from kiln.errors import ShapeError

from ..cpu import vector_lanes, vector_registers
from ..nn.conv2d import conv2d_shape
from ..utils import check_ndim, const_int, const_shape, divisor_at_most, knob, with_default
from .conv2d import find_tagged
from .conv2d_nchwc import accumulation_dtype
from .injective import tile_root

TAG = "depthwise_conv2d_NCHWc"


def default_config(out_width: int, block: int, kernel_h: int = 3, stride_w: int = 1) -> dict:
    """Heuristic knobs (measured on MobileNetV2's layers, AVX-512):

    - ``pad_at="tile"`` for strided layers and rows of at most 14 pixels (no pass over memory and
      no large scratch buffer; each input row is read by few tiles), ``"root"`` for the large
      stride-1 layers, where every input row feeds three output rows, unless the registers hold
      no more than the 8 accumulators a padded tile takes anyway (16 registers, AVX2: 32@112
      ran 37% and 144@56 9% faster padded per tile; on AVX-512 root, with 16-pixel tiles, stays
      24% faster);
    - ``tile_ow``: a divisor of the row filling about 24 accumulator registers (a tail is accepted
      rather than tiles below 4 pixels); stride 1 with the padding per tile takes 8 (14 measured
      2x slower: the tile's copy and accumulators no longer fit the registers).
    """
    lanes, regs = vector_lanes(), vector_registers()
    per_pixel = max(1, -(-block // lanes))
    accumulators = max(1, (regs - 8) // per_pixel)
    pad_at = "tile" if stride_w > 1 or out_width <= 14 or accumulators <= 8 else "root"
    if pad_at == "tile" and stride_w == 1:
        accumulators = min(accumulators, 8)
        tile_ow = min(out_width, accumulators)
    else:
        tile_ow = divisor_at_most(out_width, accumulators, prefer=(28, 16, 14, 8, 7))
        if tile_ow < 4 and out_width > 4:
            tile_ow = min(out_width, accumulators)  # a tail is cheaper than a 1-wide tile
    return {"tile_ow": tile_ow, "unroll_kh": kernel_h <= 3, "pad_at": pad_at}


def config_space(out_width: int, block: int, kernel_h: int = 3, stride_w: int = 1) -> dict:
    """Candidate values of each knob, for the tuner."""
    lanes = vector_lanes()
    limit = max(1, 28 // max(1, block // lanes))
    space = {"tile_ow": sorted({d for d in range(1, limit + 1) if out_width % d == 0} | {min(out_width, limit), min(out_width, 8)}),
             "unroll_kh": [False, True],
             "pad_at": ["root", "tile"]}
    return with_default(space, default_config(out_width, block, kernel_h, stride_w))


def _kernel_is_packed(data_shape, kernel_shape) -> bool:
    """The rule: a 4-dim kernel is pre-packed (C/b, KH, KW, b) when its first dim is the data's
    chunk count and its last the data's block b; it is OIHW (C, 1, KH, KW) when its first dim is
    C and its second 1. (The two cannot both match: C/b != C for b >= 2.)"""
    _, chunks, _, _, b = data_shape
    c = chunks * b
    if kernel_shape[0] == chunks and kernel_shape[3] == b and not (kernel_shape[0] == c and kernel_shape[1] == 1):
        return True
    if kernel_shape[1] == 1 and kernel_shape[0] == c:
        return False
    if kernel_shape[1] == 1 and kernel_shape[0] % c == 0:
        raise ShapeError(f"depthwise_conv2d_NCHWc: input 'kernel' {tuple(kernel_shape)} has channel multiplier "
                         f"{kernel_shape[0] // c}; only multiplier 1 is supported")
    raise ShapeError(f"depthwise_conv2d_NCHWc: input 'kernel' has shape {tuple(kernel_shape)}; expected OIHW "
                     f"({c}, 1, KH, KW) or pre-packed ({chunks}, KH, KW, {b}) for 'data' {tuple(data_shape)}")


def depthwise_conv2d_NCHWc(data, kernel, strides, padding, dilation, out_dtype=None, cfg=None):  # noqa: N802
    """Depthwise conv2d of NCHW{b}c ``data`` (N, C/b, H, W, b) -> (N, C/b, OH, OW, b).

    ``kernel``: the OIHW depthwise weight (C, 1, KH, KW), regrouped inside (a stage tagged
    ``injective,kernel_pack``), or pre-packed by ``prepack_depthwise_kernel`` (C/b, KH, KW, b);
    see ``_kernel_is_packed`` for how the two are told apart. ``padding`` as for conv2d.
    """
    check_ndim("depthwise_conv2d_NCHWc", "data", data, 5, "NCHW{b}c")
    check_ndim("depthwise_conv2d_NCHWc", "kernel", kernel, 4, "C, 1, KH, KW or C/b, KH, KW, b")
    dshape = const_shape(data, "depthwise_conv2d_NCHWc data")
    kshape = const_shape(kernel, "depthwise_conv2d_NCHWc kernel")
    n, chunks, h, w, b = dshape
    c = chunks * b
    packed = _kernel_is_packed(dshape, kshape)
    kh, kw = (kshape[1], kshape[2]) if packed else (kshape[2], kshape[3])
    p = conv2d_shape("depthwise_conv2d_NCHWc", (n, c, h, w), (c, 1, kh, kw), strides, padding, dilation, c)
    out_dtype = out_dtype or str(data.dtype)
    conf = default_config(p.out_width, b, kh, p.stride_w)
    conf.update({k: knob(cfg, k, v) for k, v in conf.items()})
    if conf["pad_at"] not in ("root", "tile"):
        raise ShapeError(f"depthwise_conv2d_NCHWc: pad_at {conf['pad_at']!r} must be 'root' or 'tile'")
    if packed:
        kernel_vec = kernel
    else:
        kernel_vec = te.compute((chunks, kh, kw, b), lambda o, y, x, i: kernel[o * b + i, 0, y, x],
                                name="kernel_vec", tag="injective,kernel_pack")
    acc = _accumulation_dtype(str(data.dtype), out_dtype)
    padded = _pad_blocked(data, p, acc if acc != str(data.dtype) else None)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def fcompute(i, o, y, x, j):
        a = padded[i, o, y * p.stride_h + ry * p.dilation_h, x * p.stride_w + rx * p.dilation_w, j]
        return te.sum(a.astype(acc) * kernel_vec[o, ry, rx, j].astype(acc), axis=[ry, rx])

    out = te.compute((n, chunks, p.out_height, p.out_width, b), fcompute, name="depthwise_conv2d_NCHWc", tag=TAG,
                     attrs={"workload": p, "config": conf, "layout": f"NCHW{b}c"})
    if acc == out_dtype:
        return out
    return te.compute(out.shape, lambda *i: out(*i).astype(out_dtype), name="depthwise_round", tag="elemwise")


def _accumulation_dtype(data_dtype: str, out_dtype: str) -> str:
    """What the taps are summed in. A narrow output from narrow data (bfloat16 -> bfloat16, or
    float16 -> float16 on a CPU without native half arithmetic) would cost two conversions
    around every float32 FMA: there the data is converted to float32 once, in the padding pass
    (or the tile's padded window), summed in float32 and rounded once at the store. Otherwise
    ``out_dtype``: bfloat16 -> float32 (ToMixedPrecision's depthwise convs) converts at each
    load, a shift that costs about what the conversion pass does (measured within noise on
    MobileNetV2's layers, AVX-512); float16 with AVX512-FP16 runs native half FMAs, 1.3-1.7x
    faster there than the float32 path on the small layers."""
    if data_dtype == out_dtype == "bfloat16":
        return "float32"
    return accumulation_dtype(data_dtype, out_dtype)


def _pad_blocked(data, p, dtype=None):
    """The zero-padded input, (N, C/b, H + pads, W + pads, b), converted to ``dtype`` if given
    (then also without padding: a conversion pass). A select between a load at a clamped
    (always valid) pixel and zero, with a condition that is the same for the whole block, so the
    copy vectorizes along b without branches. nn.pad's if_then_else also vectorizes now (one
    branch per pixel) but measured 16.1 vs 12.6 us on 576@14 with the padding per tile."""
    n, chunks, h, w, b = (const_int(d) for d in data.shape)
    if not (p.pad_top or p.pad_left or p.pad_bottom or p.pad_right):
        if dtype is None:
            return data
        return te.compute(data.shape, lambda *i: data(*i).astype(dtype), name="data_pad", tag="injective,pad")
    dtype = dtype or str(data.dtype)
    zero = const(0, dtype)

    def fpad(i, o, y, x, j):
        conds = []
        if p.pad_top:
            conds.append(y >= p.pad_top)
        if p.pad_bottom:
            conds.append(y < h + p.pad_top)
        if p.pad_left:
            conds.append(x >= p.pad_left)
        if p.pad_right:
            conds.append(x < w + p.pad_left)
        yy = tir.min(tir.max(y - p.pad_top, 0), h - 1) if p.pad_top or p.pad_bottom else y
        xx = tir.min(tir.max(x - p.pad_left, 0), w - 1) if p.pad_left or p.pad_right else x
        return tir.Select(tir.all(*conds), data[i, o, yy, xx, j].astype(dtype), zero, dtype)

    shape = (n, chunks, h + p.pad_top + p.pad_bottom, w + p.pad_left + p.pad_right, b)
    return te.compute(shape, fpad, name="data_pad", tag="injective,pad")


def prepack_depthwise_kernel(weight, b: int):
    """numpy: the depthwise OIHW weight (C, 1, KH, KW) -> (C/b, KH, KW, b), what the compute packs."""
    c, m, kh, kw = weight.shape
    if m != 1 or c % b:
        raise ShapeError(f"prepack_depthwise_kernel: 'weight' {weight.shape} must be (C, 1, KH, KW) with {b} | C")
    import numpy as np

    return np.ascontiguousarray(weight.reshape(c // b, b, kh, kw).transpose(0, 2, 3, 1))


def schedule_depthwise_conv2d_NCHWc(outs, cfg=None):  # noqa: N802
    """Schedule for ``depthwise_conv2d_NCHWc`` and a fused elementwise epilogue on its output."""
    del cfg  # the knobs travel in the compute's attrs
    s, conv, out, conv_stage = anchor_stages(outs, TAG)
    conf = conv.op.attrs["config"]
    lanes = vector_lanes()
    b = const_int(conv.shape[4])
    st = s[out]
    n, o, y, x, j = st.op.axis
    xo, xi = st.split(x, factor=conf["tile_ow"])
    st.reorder(n, o, y, xo, xi, j)
    st.unroll(xi)
    _vectorize_block(st, j, b, lanes)
    padded = next((t for t in conv.op.input_tensors if "pad" in t.op.tag), None)
    st.parallel(st.fuse(n, o, y))
    if padded is not None:
        _inline_inputs(s, padded)
        pst = s[padded]
        if conf["pad_at"] == "tile":
            pst.compute_at(st, xo)
        else:
            pn, po, py, _, _ = pst.op.axis
            pst.parallel(pst.fuse(pn, po, py))
        _vectorize_block(pst, pst.op.axis[4], b, lanes)
    conv_stage.compute_at(st, xo)
    schedule_tap_tile(conv_stage, b, lanes, conf.get("unroll_kh"))
    for t in conv.op.input_tensors:
        if "kernel_pack" in t.op.tag:
            kst = s[t]
            ko, ky, _, kj = kst.op.axis
            kst.parallel(kst.fuse(ko, ky))
            _vectorize_block(kst, kj, b, lanes)
    return s


def anchor_stages(outs, tag: str):
    """(schedule, the op tagged ``tag``, the tensor its register tile is stored to, the stage that
    computes the tile): with no epilogue, the op's own output gets a local cache to tile."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    conv = find_tagged(outs[0], tag)
    out = tile_root(s, outs[0], conv, conv)
    stage = s[s.cache_write(out, "local")] if conv.op is out.op else s[conv]
    return s, conv, out, stage


def schedule_tap_tile(stage, b: int, lanes: int, unroll_kh: bool = True) -> None:
    """A depthwise register tile (pixels x block, computed at its output tile): the kernel taps
    outside, the pixels unrolled inside them, the block vectorized."""
    _, _, _, cx, cj = stage.op.axis
    ry, rx = stage.op.reduce_axis
    stage.reorder(ry, rx, cx, cj)
    if unroll_kh:
        stage.unroll(ry)
    stage.unroll(rx)
    stage.unroll(cx)
    _vectorize_block(stage, cj, b, lanes)


def _inline_inputs(s, t):
    for u in t.op.input_tensors:
        if isinstance(u.op, te.ComputeOp) and "injective" in u.op.tag:
            s[u].compute_inline()


def _vectorize_block(stage, axis, b: int, lanes: int) -> None:
    """Vectorize the block axis: one vector up to two registers wide, else register-sized pieces."""
    if b <= 2 * lanes:
        stage.vectorize(axis)
    else:
        jo, ji = stage.split(axis, factor=lanes)
        stage.unroll(jo)
        stage.vectorize(ji)
