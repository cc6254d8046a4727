"""conv2d NCHW / OIHW on tensor cores: an implicit GEMM in the model's own layout (float16, or
bfloat16 with float32 sums), what relay's half-precision models get on CUDA.

    C[f, q] = sum_r W[f, r] * X[r, q]      f: output channel, q: output pixel (n, y, x),
                                           r: (input channel, ky, kx), OIHW's own order

The product is scheduled as tensorcore.py's (shared slabs, wmma fragments, a cp.async pipeline);
what is particular to convs lives here: the gather of the input (B, row-major: the pixels
contiguous, in runs that never cross an output row), the padding of every size to the tiles,
the tiles (``conv_config``: the most warps in flight, split-K where blocks are too few), and the
epilogue (bias, batch norm, activation, residual add) in the product's kernel where the
reduction is not split (``schedule_conv2d_nchw_tensorcore``). docs/cuda.md, "Tensor cores".
"""

from __future__ import annotations

from kiln import te

from ..gpu.common import block
from ..utils import const_int, knob
from . import tensorcore as tc
from .tensorcore import (TC_DTYPES, TILES, WARP, WMMA, _product_in_shared, _round_up, _spread_over_block,
                         _tile_shape, _warps)


def schedule_conv2d_nchw_tensorcore(outs, cfg=None):
    """Schedule conv2d_nchw_tensorcore and the elementwise ops after it: the product as
    tensorcore.schedule_dense_tensorcore's, the epilogue in its kernel where _conv_fusable allows."""
    return tc.schedule_dense_tensorcore(outs, cfg, fused_output=_fused_output)


def _fused_output(outs, mm, conf):
    return _schedule_fused_conv_output if _conv_fusable(outs, mm, conf) else None


def use_tensorcore_conv_nchw(data, kernel, strides, padding, dilation, groups=1, out_dtype=None) -> bool:
    """Whether conv2d NCHW / OIHW should run as the tensor-core implicit GEMM: a CUDA target,
    float16 (or bfloat16 with float32 sums) data and kernel, no groups, enough work to fill a 16 x 16 x 16 tile (at least 16
    output channels and 16 reduction terms: the 3-channel 7 x 7 stem has 147)."""
    from kiln.target import Target

    target = Target.current(allow_none=True)
    if target is None or target.kind != "cuda" or groups != 1:
        return False
    if str(data.dtype) not in TC_DTYPES or str(kernel.dtype) != str(data.dtype):
        return False
    if str(data.dtype) == "bfloat16" and str(out_dtype or data.dtype) != "float32":
        return False
    try:
        shape = [const_int(d) for d in kernel.shape]
        [const_int(d) for d in data.shape]
    except (TypeError, ValueError):
        return False
    return shape[0] >= WMMA and shape[1] * shape[2] * shape[3] >= WMMA


def conv2d_nchw_tensorcore(data, kernel, strides=1, padding=0, dilation=1, out_dtype=None, cfg=None):
    """conv2d NCHW / OIHW (no groups) as an implicit GEMM on tensor cores, in the model's layout:

        C[f, q] = sum_r W[f, r] * X[r, q]      f: output channel, q: output pixel (n, y, x),
                                               r: (input channel, ky, kx), OIHW's own order

    A is the kernel, read as stored (row-major, r contiguous); B is the im2col of the input,
    built on the fly by the shared-slab fetch with the pixels contiguous (row-major B), so
    neighbouring threads read neighbouring pixels: the NCHW rows (stride-1 1x1 convs load 16
    bytes at a time). For batch 1, C is the NCHW output itself. Sizes that are not multiples of
    16 (the 3-channel stem's r = 147, 14 x 14 pixels, 24 channels) are padded with zeros in the
    fetch (``_pixel_step``); the output stage reads the valid part and carries the fused
    epilogue (bias, batch norm, ReLU, residual add), a second kernel."""
    from kiln.tir import op as tir_op

    from ..nn.conv2d import conv2d_shape
    from ..utils import const_shape

    p = conv2d_shape("conv2d", const_shape(data, "conv2d data"), const_shape(kernel, "conv2d kernel"),
                     strides, padding, dilation, 1, layout="NCHW")
    out_dtype = out_dtype or str(data.dtype)
    oh, ow, c, kh, kw = p.out_height, p.out_width, p.in_channel, p.kernel_h, p.kernel_w
    h, w = (const_int(d) for d in data.shape[2:])
    f, k = p.out_channel, c * kh * kw
    fp, kp = _round_up(f, WMMA), _round_up(k, WMMA)
    if str(data.dtype) not in TC_DTYPES or str(kernel.dtype) != str(data.dtype):
        raise ValueError(f"conv2d_nchw on tensor cores needs float16 or bfloat16 data and kernel, got "
                         f"{data.dtype}/{kernel.dtype}")
    if str(data.dtype) == "bfloat16" and out_dtype != "float32":
        raise ValueError(f"bfloat16 convolutions on tensor cores accumulate in float32, not {out_dtype}")
    plain = (kh, kw, p.stride_h, p.stride_w) == (1, 1, 1, 1) and (p.pad_top, p.pad_left, p.pad_bottom,
                                                                  p.pad_right) == (0, 0, 0, 0)
    zero = te.const(0, data.dtype)
    owp, run, qp, conf = _pixel_layout(p.batch, oh, ow, fp, kp, plain, cfg)
    q = p.batch * oh * owp  # pixels of the product: rows of owp (ow and padding) per image

    def wmat(i, r):
        # OIHW rows: the flat index simplifies to i * k + r. Padded output channels repeat the
        # last filter (their results are never read), so the row stays one contiguous load.
        value = kernel[(tir_op.min(i, f - 1) if fp != f else i, *_taps(r, kh, kw))]
        return te.if_then_else(r < k, value, zero) if kp != k else value

    def xmat(r, j):
        ch, ky, kx = _taps(r, kh, kw)
        if plain:  # 1x1, stride 1, no padding: the pixel index is the input's
            n = j // (oh * ow) if p.batch > 1 else 0
            pix = j % (oh * ow) if p.batch > 1 else j
            y, x = pix // w, pix % w
            conds = []
        else:
            # j as runs of `run` pixels that never cross a row (owp is a multiple of run): a
            # thread's run (its slab fetch) shares its image, row and input rows, only the
            # column moves with the element
            per_image, per_row = oh * owp // run, owp // run
            jr, col = (j // run, j % run) if run > 1 else (j, 0)
            n = jr // per_image if p.batch > 1 else 0
            row = (jr % per_image if p.batch > 1 else jr) // per_row
            y = row * p.stride_h + ky * p.dilation_h - p.pad_top
            x = ((jr % per_row) * run + col) * p.stride_w + kx * p.dilation_w - p.pad_left
            conds = [y >= 0, y < h, x >= 0, x < w]  # (columns past ow read inside the image or nothing)
        if plain and kp != k:  # rows past the channels repeat the last one: A is zero there
            ch = tir_op.min(ch, c - 1)
        else:
            conds += [r < k] if kp != k else []
        if qp != q:  # pixels past the last image
            conds += [j // run < q // run] if not plain else [j < q]
        value = data[n, ch, y, x]
        # if_then_else evaluates the chosen side only: padding reads nothing
        return te.if_then_else(tir_op.all(*conds), value, zero) if conds else value

    a = te.compute((fp, kp), wmat, name="conv_weight")
    b = te.compute((kp, qp), xmat, name="conv_im2col")
    conf = {**conf, "b_layout": "row_major", **({"column_runs": run} if run > 1 else {})}
    split = conf["split_k"]
    ks = kp // split
    rk = te.reduce_axis((0, ks), name="k")
    # split-K: slice s of the reduction in its own blocks (the batch axis of the product)
    gemm = te.compute((split, fp, qp), lambda sl, i, j: te.sum(
        a[i, sl * ks + rk].astype(out_dtype) * b[sl * ks + rk, j].astype(out_dtype), axis=rk),
        name="conv2d_gemm", tag="dense")
    gemm.op.attrs["tensorcore_config"] = conf
    gemm.op.attrs["conv_nchw_output"] = (p.batch, f, oh, ow, owp)  # the output this product is read as

    def out(n, i, y, x):
        j = (n * oh + y) * owp + x
        total = gemm[0, i, j]
        for sl in range(1, split):
            total = total + gemm[sl, i, j]
        return total

    return te.compute((p.batch, f, oh, ow), out, name="conv2d_nchw", tag="conv2d_nchw_tensorcore")


def _pixel_layout(batch: int, oh: int, ow: int, fp: int, kp: int, plain: bool, cfg=None):
    """(owp, run, qp, conf): the product's pixel columns are rows of owp >= ow pixels per output row
    (qp in all, padded to the tile), gathered in runs of ``run`` pixels inside a row, and the tiles.
    A 1x1 stride-1 conv reads its input rows as they are (owp = ow, no runs). Other convs gather:
    runs of 8 (or 4) pixels where the rows hold whole runs; else the rows are padded to a
    multiple of 8 where the reduction is split anyway (its epilogue is a kernel of its own: the
    fused one reads unpadded rows; 14 -> 16 and 7 -> 8 pad nothing after the tile's rounding of
    196 and 49 pixels), else no runs."""
    def layout(owp, run):  # (the step of the unpadded count: 14 x 16 pixels stay 224, not 256)
        qp = _round_up(batch * oh * owp, _pixel_step(batch * oh * ow))
        return owp, run, qp, conv_config(fp, qp, kp, cfg)

    if plain:
        return layout(ow, 1)
    run = next((r for r in (8, 4) if ow % r == 0), 1)
    if run > 1:
        return layout(ow, run)
    flat = layout(ow, 1)
    padded = layout(_round_up(ow, 8), 8)
    return padded if padded[3]["split_k"] > 1 and flat[3]["split_k"] > 1 else flat


def _pixel_step(p: int) -> int:
    """The multiple the pixel count of an NCHW conv is padded to: the widest tile (64, 32, 16
    pixels) that wastes at most a sixth of the product (14 x 14 = 196 -> 224, 7 x 7 -> 64)."""
    for step in (64, 32):
        if _round_up(p, step) - p <= p // 6:
            return step
    return 16 if p > 64 else min(64, _round_up(p, 16))


def _taps(r, kh: int, kw: int):
    """(channel, ky, kx) of reduction index r = (c * kh + ky) * kw + kx, written so that the
    simplifier folds the flattened OIHW index back to r (a contiguous, vectorizable row)."""
    if kh * kw == 1:
        return r, 0, 0
    ch = r // (kh * kw)
    rem = r - ch * (kh * kw)
    ky = rem // kw
    return ch, ky, rem - ky * kw


def conv_config(f: int, q: int, k: int, cfg=None) -> dict:
    """Untuned tiles of an NCHW implicit GEMM (f output channels x q pixels x k reduction terms,
    each padded to a multiple of 16): the block tile (64 x 64 down to 16 x 16, 4 warps where it
    allows) that keeps the most warps in flight, up to ``BUSY_WARPS``, then the one that reuses
    its loads most. Where too few blocks remain (batch-1 7 x 7 and 14 x 14 layers), the reduction
    is split into ``split_k`` slices computed by separate blocks and summed by the output kernel."""
    steps = k // WMMA

    def split_for(blocks: int, chunk: int, per_block: int) -> int:
        split = 1
        # partial sums cost memory traffic: many slices only for long reductions
        most = 16 if steps // chunk >= 32 else 4
        while blocks * split * per_block < tc.BUSY_WARPS and split < most and steps % (chunk * split * 2) == 0 and \
                steps // (chunk * split * 2) >= 2:
            split *= 2
        return split

    def score(choice):  # warps in flight (up to BUSY_WARPS), then the tile's reuse of its loads
        (bm, bn), chunk = choice
        blocks, per_block = (f // bm) * (q // bn), _warps(bm, bn)
        busy = min(blocks * split_for(blocks, chunk, per_block) * per_block, tc.BUSY_WARPS)
        return busy, bm * bn / (bm + bn), chunk

    options = [((bm, bn), chunk)
               for bm, bn in TILES
               for chunk in ([c for c in (4, 2) if steps % c == 0] or [1]) if f % bm == 0 and q % bn == 0]
    (bm, bn), chunk = max(options, key=score)
    split = split_for((f // bm) * (q // bn), chunk, _warps(bm, bn))
    brw, bcw = (2 if bm >= 32 else 1), (2 if bn >= 32 else 1)
    conf = {"block_row_warps": brw, "block_col_warps": bcw, "warp_row_tiles": bm // (WMMA * brw),
            "warp_col_tiles": bn // (WMMA * bcw), "chunk": chunk, "offset": 8, "vec": 8, "double_buffer": 0,
            "mma": 0, "raster": 1, "split_k": split, "unroll_fetch": 1, "fit_vec": 1, "fuse_epilogue": 1}
    conf["double_buffer"] = tc.pipeline_stages(conf, steps // (chunk * split))
    conf.update({key: int(knob(cfg, key, v)) for key, v in conf.items()})
    return conf


def _conv_fusable(outs, mm, conf) -> bool:
    """conv2d_nchw_tensorcore's epilogue (bias, batch norm, activation, residual add, casts: what
    relay fuses after a conv is elementwise) over the conv's own output, in the product's kernel:
    one output of the conv's shape, the reduction not split (split-K slices are separate blocks,
    summed by the epilogue kernel), and the float tile fits in shared memory beside the slabs."""
    from kiln.target import Target

    geometry = mm.op.attrs.get("conv_nchw_output")
    if geometry is None or len(outs) != 1 or outs[0].op is mm.op or not conf.get("fuse_epilogue", 1) or \
            conf.get("split_k", 1) != 1 or tuple(const_int(d) for d in outs[0].shape) != tuple(geometry[:4]):
        return False
    # padded rows: the output's pixels are not the product's columns; a one-pixel axis: a
    # broadcast reads it at 0, and the fused index would not fold back to the column
    if geometry[3] != geometry[4] or min(geometry[2:4]) == 1:
        return False
    bm, bn = _tile_shape(conf)
    target = Target.current(allow_none=True)
    limit = (target.attrs.get("max_shared_memory_per_block") if target is not None else None) or 48 * 1024
    return _conv_shared_bytes(conf) + bm * (bn + 8) * mm.dtype.bits // 8 <= limit


def _conv_shared_bytes(conf) -> int:
    """The slabs of an NCHW conv's product: A (BM rows of 16*chunk, padded by offset) and the
    row-major B (16*chunk rows of BN, padded by offset), times the stages."""
    bm, bn = _tile_shape(conf)
    depth = WMMA * conf["chunk"]
    stages = {0: 1, 1: 2}.get(conf.get("double_buffer", 0), conf.get("double_buffer", 0))
    return stages * (bm * (depth + conf["offset"]) + depth * (bn + conf["offset"])) * 2


def _schedule_fused_conv_output(s, C, out, conf, out_dtype):
    """As _schedule_fused_output for conv2d_nchw_tensorcore's NCHW output: its channels in
    blocks of BM, its pixels (n, y, x) fused into the product's column index (n * OH + y) * OW + x
    and in blocks of BN, so that a block reads exactly its BM x BN tile (te's bound inference
    evaluates that index on the fused loop); a ragged last block is guarded. A batch of one
    stays out of the fused index: a broadcasting epilogue reads the conv at batch 0, not n (as it
    would read row 0 of a one-row image, which _conv_fusable refuses)."""
    brw, bcw = conf["block_row_warps"], conf["block_col_warps"]
    bm, bn = _tile_shape(conf)
    so = s[out]
    batch, channels, oh, ow = (const_int(d) for d in out.shape)
    n, f, y, x = so.op.axis
    if batch == 1:
        by, fi = so.split(f, factor=bm)
        bx, qi = so.split(so.fuse(y, x), factor=bn)
        so.reorder(n, by, bx, fi, qi)
        so.bind(n, block("z"))
    else:
        so.reorder(f, n, y, x)
        by, fi = so.split(f, factor=bm)
        bx, qi = so.split(so.fuse(n, y, x), factor=bn)
        so.reorder(by, bx, fi, qi)
    so.bind(by, block("y"))
    so.bind(bx, block("x"))
    threads = WARP * brw * bcw
    # vector stores where every tile is whole and its pixels are consecutive in memory (batch 1)
    vec = 4 if batch == 1 and channels % bm == 0 and oh * ow % bn == 0 and bm * bn % (threads * 4) == 0 else 1
    _spread_over_block(so, so.fuse(fi, qi), vec, brw, bcw)
    return _product_in_shared(s, C, so, bx, conf, out_dtype)
