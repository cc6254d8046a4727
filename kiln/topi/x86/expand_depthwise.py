"""A 1x1 "expand" conv2d, its bias and clip, and the depthwise conv2d after it, as one kernel
(the first half of a MobileNetV2 inverted-residual block) in the blocked layout NCHW{b}c.

    expanded = clip(conv1x1(data, expand_weight) + expand_bias, act_min, act_max)
    out      = depthwise_conv2d(zero_pad(expanded), depthwise_weight, strides)

Run as two kernels, the expanded tensor (six times the input's channels, 4.8 MB at 112x112x96)
is written to memory by the first and read back by the second; between kernels it has left the
core's L2, and the depthwise conv, which does 9 FMAs per element it reads, waits on it (in
MobileNetV2 on a 2-core Zen 4 it ran 2.2x slower than on a warm input). Here each parallel task
computes ``rows`` output rows of ``chunks`` channel blocks: it first computes the expanded rows
those need (``rows * stride + KH - stride`` of them, the padding included, into a buffer that
stays in L1/L2), then the depthwise conv from that buffer. Neighbouring tasks recompute the
``KH - stride`` rows they share, so ``rows`` trades that recomputation against the buffer's size.

    data              (N, C/ib, H, W, ib)
    expand_weight     (O/b, C/ib, 1, 1, ib, b)   conv2d_NCHWc's packed kernel (prepack_kernel_nchwc)
    expand_bias       (1, O/b, 1, 1, b)
    depthwise_weight  (O/b, KH, KW, b)           depthwise_conv2d_NCHWc's (prepack_depthwise_kernel)
    out               (N, O/b, OH, OW, b)

The expanded pixels are computed in register tiles of ``tile_e`` pixels x ``chunks`` blocks (as
conv2d_NCHWc's 1x1 tiles), the depthwise conv in tiles of ``tile_ow`` pixels (as
depthwise_conv2d_NCHWc's). relay builds it from the pattern by the FuseExpandDepthwise pass
(kiln/relay/transform/fuse_expand_depthwise.py); a fused epilogue (the depthwise conv's bias
and clip) is computed on its output tile.
"""

from __future__ import annotations

import numpy as np

from kiln import te, tir
from kiln.errors import ShapeError
from kiln.ir.expr import const

from ..cpu import vector_lanes, vector_registers
from ..nn.conv2d import conv2d_shape
from ..utils import const_shape, divisor_at_most, knob
from .conv2d_nchwc import MIN_TASKS, chunk_tile
from .depthwise_conv2d_nchwc import _vectorize_block, anchor_stages, schedule_tap_tile

TAG = "expand_depthwise_NCHWc"
WIDEN_TAG = "expand_depthwise_widen"

# The expanded rows one task keeps (chunks x rows x padded width x block floats): inside a core's
# L2 with the input rows it reads. MobileNetV2's four fused layers (AVX2, Zen 4, 2 threads) ran
# fastest with buffers of 56-420 KB and larger rows groups were rarely slower.
BUFFER_BYTES = 256 * 1024

# Data types the kernel reads and writes but computes in float32: the expanded rows are buffered
# in float32 and the output is rounded once, at its store. float16 inputs and weights are widened
# to float32 once per call, by a pass before the tiles (a half -> float conversion per broadcast
# made 16->96@112/2 1.7x float32's time for znver3, widened 1.2x; on AVX-512 the same either
# way); bfloat16's are converted as they are loaded (a shift: widening measured 1.3x slower on
# AVX-512, the same for znver3). A depthwise conv has no dot product for
# bfloat16/float16 instructions to speed up; the narrow type saves memory traffic only.
LOW_PRECISION = ("bfloat16", "float16")


def default_config(out_height: int, out_width: int, padded_width: int, stride: int, kernel_h: int,
                   chunks: int, block: int, itemsize: int = 4) -> dict:
    """Heuristic knobs:

    - ``chunks``, ``tile_e``: conv2d_NCHWc's register tile (``chunk_tile``) over the padded row,
      at most 3 blocks wide, and narrower when the wider tile's buffer leaves room for so few
      rows that more than one in eight is recomputed (96@112, stride 2, AVX2: 4 blocks x 2 rows,
      25% recomputed, ran 0.33 ms; 2-3 blocks x 8-28 rows 0.26-0.29 ms);
    - ``rows``: the largest divisor of the output height whose expanded rows fit ``BUFFER_BYTES``
      while the tasks (row groups x block groups) stay at least ``MIN_TASKS``;
    - ``tile_ow``: depthwise_conv2d_NCHWc's pixel tile (about 24 accumulators, a divisor of the row).
    """
    lanes, regs = vector_lanes(), vector_registers()
    vectors = max(1, -(-block // lanes))
    widest, _ = chunk_tile(padded_width, chunks, vectors, regs)
    widest = min(widest, 3)
    best = None
    for limit in sorted((d for d in range(1, widest + 1) if chunks % d == 0), reverse=True):
        k, tile_e = chunk_tile(padded_width, limit, vectors, regs)
        rows = _rows(out_height, stride, kernel_h, chunks // k, k * padded_width * block * itemsize)
        waste = (kernel_h - stride) / (rows * stride)  # recomputed rows per output row
        if best is None or waste < best[0]:
            best = (waste, k, tile_e, rows)
        if waste <= 1 / 8:  # narrower tiles cost less than recomputing more rows
            break
    _, k, tile_e, rows = best
    accumulators = max(1, (regs - 8) // vectors)
    tile_ow = divisor_at_most(out_width, accumulators, prefer=(28, 16, 14, 8, 7))
    if tile_ow < 4 and out_width > 4:
        tile_ow = min(out_width, accumulators)
    return {"rows": rows, "chunks": k, "tile_e": tile_e, "tile_ow": tile_ow}


def _rows(out_height: int, stride: int, kernel_h: int, groups: int, row_bytes: int) -> int:
    """The largest divisor of the output height whose expanded rows fit ``BUFFER_BYTES`` while
    the tasks (row groups x ``groups`` block groups) stay at least ``MIN_TASKS``."""
    rows = 1
    for t in range(1, out_height + 1):
        if out_height % t:
            continue
        if (t * stride + kernel_h - stride) * row_bytes > BUFFER_BYTES or (out_height // t) * groups < MIN_TASKS:
            break
        rows = t
    return rows


def expand_depthwise_NCHWc(data, expand_weight, expand_bias, depthwise_weight, strides=1, padding=1,  # noqa: N802
                           act_min=None, act_max=None, cfg=None):
    """The fused expand + depthwise conv (module docstring); ``act_min``/``act_max`` bound the
    expanded values (None: no bound; MobileNetV2's ReLU6 is 0 and 6). ``strides`` and
    ``padding`` (int, (h, w) or (top, left, bottom, right)) are the depthwise conv's."""
    name = "expand_depthwise_NCHWc"
    shapes = {}
    for what, t, ndim in (("data", data, 5), ("expand_weight", expand_weight, 6), ("expand_bias", expand_bias, 5),
                          ("depthwise_weight", depthwise_weight, 4)):
        if len(t.shape) != ndim:
            raise ShapeError(f"{name}: input {what!r} has {len(t.shape)} dims; expected {ndim}")
        shapes[what] = const_shape(t, f"{name} {what}")
    n, c_chunks, h, w, ib = shapes["data"]
    chunks, wc, kh1, kw1, wib, b = shapes["expand_weight"]
    if (wc, kh1, kw1, wib) != (c_chunks, 1, 1, ib):
        raise ShapeError(f"{name}: input 'expand_weight' {shapes['expand_weight']} must be ({chunks}, {c_chunks}, "
                         f"1, 1, {ib}, {b}) for 'data' {shapes['data']} (a packed 1x1 kernel)")
    if shapes["expand_bias"] != (1, chunks, 1, 1, b):
        raise ShapeError(f"{name}: input 'expand_bias' has shape {shapes['expand_bias']}; "
                         f"expected (1, {chunks}, 1, 1, {b})")
    dchunks, kh, kw, db = shapes["depthwise_weight"]
    if (dchunks, db) != (chunks, b):
        raise ShapeError(f"{name}: input 'depthwise_weight' {shapes['depthwise_weight']} must be "
                         f"({chunks}, KH, KW, {b}), one filter per expanded channel")
    channels = chunks * b
    p = conv2d_shape(name, (n, channels, h, w), (channels, 1, kh, kw), strides, padding, 1, channels)
    sh, sw, pt, pl, pb, pr = p.stride_h, p.stride_w, p.pad_top, p.pad_left, p.pad_bottom, p.pad_right
    oh, ow = p.out_height, p.out_width
    dtype = str(data.dtype)
    acc = "float32" if dtype in LOW_PRECISION else dtype  # what the kernel computes and buffers in
    hp, wp = h + pt + pb, w + pl + pr
    conf = default_config(oh, ow, wp, sh, kh, chunks, b, np.dtype(acc).itemsize)
    conf.update({k: int(knob(cfg, k, v)) for k, v in conf.items()})
    if chunks % conf["chunks"]:
        conf["chunks"] = 1

    if dtype == "float16":  # widened once per call (a pass over the input, tiny for the weights), not per load
        data, expand_weight, expand_bias, depthwise_weight = (
            te.compute(t.shape, lambda *i, t=t: t(*i).astype(acc), name=f"{t.op.name}_{acc}", tag=WIDEN_TAG)
            for t in (data, expand_weight, expand_bias, depthwise_weight))

    rco = te.reduce_axis((0, c_chunks), name="rco")
    rci = te.reduce_axis((0, ib), name="rci")

    def fexpand(i, c, y, x, v):  # over the padded grid; the padding's values are replaced below
        yy = tir.min(tir.max(y - pt, 0), h - 1) if pt or pb else y
        xx = tir.min(tir.max(x - pl, 0), w - 1) if pl or pr else x
        return te.sum(data[i, rco, yy, xx, rci].astype(acc) * expand_weight[c, rco, 0, 0, rci, v].astype(acc),
                      axis=[rco, rci])

    expanded = te.compute((n, chunks, hp, wp, b), fexpand, name="expand", tag="expand_depthwise_expand")

    def factivate(i, c, y, x, v):
        value = expanded[i, c, y, x, v] + expand_bias[0, c, 0, 0, v].astype(acc)
        if act_min is not None:
            value = tir.max(value, const(float(act_min), acc))
        if act_max is not None:
            value = tir.min(value, const(float(act_max), acc))
        conds = [c for c, on in ((y >= pt, pt), (y < h + pt, pb), (x >= pl, pl), (x < w + pl, pr)) if on]
        return tir.Select(tir.all(*conds), value, const(0, acc), acc) if conds else value

    activated = te.compute((n, chunks, hp, wp, b), factivate, name="expand_act", tag="expand_depthwise_act")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    out = te.compute(
        (n, chunks, oh, ow, b),
        lambda i, c, y, x, v: te.sum(activated[i, c, y * sh + ry, x * sw + rx, v]
                                     * depthwise_weight[c, ry, rx, v].astype(acc), axis=[ry, rx]),
        name="expand_depthwise_NCHWc", tag=TAG, attrs={"config": conf})
    if acc == dtype:
        return out
    # rounded once, at the store (an epilogue stage the schedule inlines into the output tile)
    return te.compute(out.shape, lambda *i: out(*i).astype(dtype), name="expand_depthwise_round",
                      tag="elemwise")


def schedule_expand_depthwise_NCHWc(outs, cfg=None):  # noqa: N802
    """Schedule for ``expand_depthwise_NCHWc`` and a fused elementwise epilogue on its output."""
    del cfg  # the knobs travel in the compute's attrs
    s, dw, out, dw_stage = anchor_stages(outs, TAG)
    conf = dw.op.attrs["config"]
    activated = dw.op.input_tensors[0]
    expanded = activated.op.input_tensors[0]
    lanes = vector_lanes()
    b = int(dw.shape[4])
    k = conf["chunks"]

    st = s[out]
    n, c, y, x, v = st.op.axis
    yo, yi = st.split(y, factor=conf["rows"])
    co, ci = st.split(c, factor=k)
    xo, xi = st.split(x, factor=conf["tile_ow"])
    st.reorder(n, yo, co, ci, yi, xo, xi, v)
    st.unroll(xi)
    _vectorize_block(st, v, b, lanes)
    task = st.fuse(n, yo, co)
    st.parallel(task)

    # the depthwise register tile, at each output tile
    dw_stage.compute_at(st, xo)
    schedule_tap_tile(dw_stage, b, lanes)

    # the task's expanded rows (bias, clip and padding applied), one register tile at a time
    act = s[activated]
    act.compute_at(st, task)
    _, ac, ay, ax, av = act.op.axis
    axo, axi = act.split(ax, factor=conf["tile_e"])
    act.reorder(ay, axo, axi, ac, av)
    act.unroll(axi)
    act.unroll(ac)
    _vectorize_block(act, av, b, lanes)
    ex = s[expanded]
    ex.compute_at(act, axo)
    _, ec, _, exx, ev = ex.op.axis
    erco, erci = ex.op.reduce_axis
    ex.reorder(erco, erci, exx, ec, ev)
    ex.unroll(erci)
    ex.unroll(exx)
    ex.unroll(ec)
    _vectorize_block(ex, ev, b, lanes)
    for t in list(activated.op.input_tensors) + list(expanded.op.input_tensors) + list(dw.op.input_tensors):
        if t.op.tag == WIDEN_TAG:
            wst = s[t]
            axes = wst.op.axis
            wst.parallel(wst.fuse(*axes[:-1]) if len(axes) > 2 else axes[0])
            wst.vectorize(axes[-1])
    return s
