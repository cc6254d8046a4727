"""dense and batch_matmul on tensor cores (float16 inputs, float16 or float32 accumulation).

A block computes a ``BM x BN`` output tile with ``block_row_warps x block_col_warps`` warps, each
warp ``warp_row_tiles x warp_col_tiles`` wmma tiles of 16 x 16 held in accumulator fragments.
The reduction runs in steps of ``16 * chunk``: per step the block copies a ``BM x 16*chunk`` slab
of A and of B (dense's weight, N x K) into shared memory (all threads, ``vec`` halves each, rows
padded by ``offset`` halves against bank conflicts), then each warp loads its A and B tiles into
fragments and multiplies. With ``double_buffer`` = P the block keeps P slabs and fetches P - 1
ahead (``cp.async`` on sm_80+) while the warps work on the current one. The accumulators go
straight to global memory (``wmma.store``). An elementwise epilogue (bias, activation, the
cast back to float16, the valid part of a padded product) is done in the same kernel where
the block's BM x BN float tile also fits in shared memory (``fuse_epilogue``, default on): the
warps store their accumulators there, and after a barrier all threads apply the epilogue to
the tile and write it out; else it is a second kernel that reads the product back.

``cfg`` knobs (AutoTVM template ``dense_tensorcore.cuda`` / ``batch_matmul_tensorcore.cuda``):
block_row_warps, block_col_warps, warp_row_tiles, warp_col_tiles, chunk, offset, vec, double_buffer,
mma (ldmatrix + mma.sync instead of wmma, sm_80+), raster (block rows walked per block column),
fuse_epilogue.
"""

from __future__ import annotations

from kiln import te

from ..gpu.common import as_list, block, thread
from ..nn.batch_matmul import batch_matmul as _batch_matmul
from ..nn.dense import add_bias, dense as _dense
from ..utils import const_int, find_stage, knob
from .tensor_intrin import intrin_wmma_gemm, intrin_wmma_load_matrix, intrin_wmma_store_matrix

WMMA = 16
WARP = 32
TAGS = ("dense", "batch_matmul")
KNOBS = {"block_row_warps": [1, 2, 4], "block_col_warps": [1, 2, 4], "warp_row_tiles": [1, 2, 4],
         "warp_col_tiles": [1, 2, 4], "chunk": [1, 2, 4, 8], "offset": [0, 8], "vec": [1, 2, 4, 8],
         "double_buffer": [0, 2, 3, 4],  # 0: one slab; P: P slabs in flight (a P-stage pipeline)
         "mma": [0, 1],  # 1: ldmatrix + mma.sync.m16n8k16 instead of wmma (sm_80+; codegen/cuda_mma.py)
         "raster": [1, 8]}  # R > 1: consecutive blocks walk R block rows before the next column (L2 reuse)


TC_DTYPES = ("float16", "bfloat16")  # bfloat16: float32 accumulation only


def fits(m: int, n: int, k: int, dtype) -> bool:
    """Whether a product can run on tensor cores here: float16 or bfloat16 inputs, every size a multiple of 16."""
    return str(dtype) in TC_DTYPES and m % WMMA == 0 and n % WMMA == 0 and k % WMMA == 0


def shared_bytes(conf: dict) -> int:
    """Shared memory of a config: its slabs of A and B (rows padded by offset), times the stages."""
    rows = WMMA * (conf["block_row_warps"] * conf["warp_row_tiles"] + conf["block_col_warps"] * conf["warp_col_tiles"])
    stages = {0: 1, 1: 2}.get(conf.get("double_buffer", 0), conf.get("double_buffer", 0))
    return stages * rows * (WMMA * conf["chunk"] + conf["offset"]) * 2


def default_config(m: int, n: int, k: int, batch: int = 1) -> dict:
    """Untuned: 2 x 2 warps of 4 x 4 tiles (a 128 x 128 block, 64-wide k steps) where the sizes
    allow (the best point measured on an H100, bench/cuda_matmul.py) and those blocks keep
    ``BUSY_WARPS`` warps in flight; else (a transformer's 128-token products: 6 to 24 such
    blocks) the smaller block the NCHW convs choose (conv_config, without split-K); and a
    3-stage cp.async pipeline where the target's shared memory per block holds it (one slab
    within 48 KiB)."""
    from kiln.target import Target

    def largest(options, total):
        return max(x for x in options if total % x == 0)

    brw = largest([1, 2], m // WMMA)
    wrt = largest([1, 2, 4], m // (WMMA * brw))
    bcw = largest([1, 2], n // WMMA)
    wct = largest([1, 2, 4], n // (WMMA * bcw))
    chunk = largest([1, 2, 4], k // WMMA)
    conf = {"block_row_warps": brw, "block_col_warps": bcw, "warp_row_tiles": wrt, "warp_col_tiles": wct,
            "chunk": chunk, "offset": 8, "vec": 8, "double_buffer": 0, "mma": 0, "raster": 1, "fuse_epilogue": 1}
    bm, bn = WMMA * brw * wrt, WMMA * bcw * wct
    if batch * (m // bm) * (n // bn) * brw * bcw < BUSY_WARPS:
        small = _busiest_tile(m, n, k, batch)
        conf.update({key: small[key] for key in ("block_row_warps", "block_col_warps", "warp_row_tiles",
                                                  "warp_col_tiles", "chunk")})
    target = Target.current(allow_none=True)
    limit = (target.attrs.get("max_shared_memory_per_block") if target is not None else None) or 48 * 1024
    for stages in (3, 2):
        if k // (WMMA * chunk) >= stages and shared_bytes({**conf, "double_buffer": stages}) <= limit:
            conf["double_buffer"] = stages
            break
    return conf


def config_for(m: int, n: int, k: int, cfg=None, batch: int = 1) -> dict:
    conf = default_config(m, n, k, batch)
    conf.update({key: int(knob(cfg, key, v)) for key, v in conf.items()})
    return conf


def dense_tensorcore(data, weight, bias=None, out_dtype=None, cfg=None):
    """topi.nn.dense on tensor cores: data (M, K) and weight (N, K) float16, K a multiple of 16.
    M and N that are not (a transformer's sequence of 197 tokens) are padded to one inside the
    fetch: the padded rows repeat the last row, so the tiles stay contiguous copies, and the
    output view reads the valid part (a second kernel, as an epilogue is)."""
    from kiln.tir import op as tir_op

    m, k = (const_int(d) for d in data.shape)
    n = const_int(weight.shape[0])
    mp, np_ = _round_up(m, WMMA), _round_up(n, WMMA)
    _check(mp, np_, k, data.dtype, "dense")
    a = data if mp == m else te.compute((mp, k), lambda i, r: data[tir_op.min(i, m - 1), r], name="dense_rows")
    w = weight if np_ == n else te.compute((np_, k), lambda j, r: weight[tir_op.min(j, n - 1), r], name="dense_cols")
    out = _dense(a, w, None, out_dtype)
    out.op.attrs["tensorcore_config"] = config_for(mp, np_, k, cfg)
    if (mp, np_) != (m, n):
        product = out
        out = te.compute((m, n), lambda i, j: product[i, j], name="dense_valid", tag="injective")
    return add_bias(out, bias, 1)


def batch_matmul_tensorcore(a, b, oshape=None, out_dtype=None, transpose_a=False, transpose_b=True, cfg=None):
    """topi.nn.batch_matmul (b as (B, N, K)) on tensor cores."""
    if transpose_a:
        raise ValueError("batch_matmul_tensorcore: a must be (B, M, K) (transpose_a=False)")
    from kiln.tir import op as tir_op

    batch, m, k = (const_int(d) for d in a.shape)
    n = const_int(b.shape[1 if transpose_b else 2])
    mp, np_, kp = _round_up(m, WMMA), _round_up(n, WMMA), _round_up(k, WMMA)
    _check(mp, np_, kp, a.dtype, "batch_matmul")
    if (mp, np_, kp) != (m, n, k):
        # as dense_tensorcore: padded rows repeat the last one; padded k terms are zero in a
        zero = te.const(0, a.dtype)
        a0, b0 = a, b
        a = te.compute((batch, mp, kp), lambda t, i, r: te.if_then_else(
            r < k, a0[t, tir_op.min(i, m - 1), tir_op.min(r, k - 1)], zero) if kp != k else a0[t, tir_op.min(i, m - 1), r],
            name="bmm_rows")
        if transpose_b:
            b = te.compute((batch, np_, kp), lambda t, j, r: b0[t, tir_op.min(j, n - 1), tir_op.min(r, k - 1)],
                           name="bmm_cols")
        else:
            b = te.compute((batch, kp, np_), lambda t, r, j: b0[t, tir_op.min(r, k - 1), tir_op.min(j, n - 1)],
                           name="bmm_cols")
    out = _batch_matmul(a, b, None if (mp, np_) != (m, n) else oshape, out_dtype, False, transpose_b)
    # b as (B, K, N) (ONNX MatMul's layout): a row-major wmma B, as the NCHW convs'
    out.op.attrs["tensorcore_config"] = {**config_for(mp, np_, kp, cfg, batch),
                                         **({} if transpose_b else {"b_layout": "row_major"})}
    if (mp, np_) != (m, n):
        product = out
        out = te.compute((batch, m, n), lambda t, i, j: product[t, i, j], name="bmm_valid", tag="injective")
    return out


def conv2d_nhwc_tensorcore(data, kernel, strides=1, padding=0, dilation=1, out_dtype=None, cfg=None):
    """conv2d NHWC / HWIO (no groups) as an implicit GEMM on tensor cores: rows (n, y, x), columns
    the output channels, reduction (ky, kx, c). The im2col gather is inlined into the shared-slab
    fetch, so it is never stored; M = N*OH*OW, K = KH*KW*C and the output channels must be
    multiples of 16."""
    from ..nn.conv2d import conv2d_shape
    from ..nn.pad import pad
    from ..utils import const_shape

    p = conv2d_shape("conv2d", const_shape(data, "conv2d data"), const_shape(kernel, "conv2d kernel"),
                     strides, padding, dilation, 1, layout="NHWC")
    out_dtype = out_dtype or str(data.dtype)
    oh, ow, c, kw = p.out_height, p.out_width, p.in_channel, p.kernel_w
    m, n, k = p.batch * oh * ow, p.out_channel, p.kernel_h * kw * c
    _check(m, n, k, data.dtype, "conv2d_nhwc")
    padded = pad(data, (0, p.pad_top, p.pad_left, 0), (0, p.pad_bottom, p.pad_right, 0), name="data_pad")

    def rows(i, r):
        y, x = (i // ow) % oh, i % ow
        ky, kx, ch = r // (kw * c), (r // c) % kw, r % c
        return padded[i // (oh * ow), y * p.stride_h + ky * p.dilation_h, x * p.stride_w + kx * p.dilation_w, ch]

    im2col = te.compute((m, k), rows, name="im2col")
    wmat = te.compute((n, k), lambda f, r: kernel[r // (kw * c), (r // c) % kw, r % c, f], name="weight_t")
    rk = te.reduce_axis((0, k), name="k")
    gemm = te.compute((m, n), lambda i, j: te.sum(im2col[i, rk].astype(out_dtype) * wmat[j, rk].astype(out_dtype),
                                                    axis=rk), name="conv2d_gemm", tag="dense")
    gemm.op.attrs["tensorcore_config"] = config_for(m, n, k, cfg)
    return te.compute((p.batch, oh, ow, n), lambda b, y, x, f: gemm[(b * oh + y) * ow + x, f],
                      name="conv2d_nhwc", tag="conv2d_nhwc")



def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step


def _pixel_step(p: int) -> int:
    """The multiple the pixel count of an NCHW conv is padded to: the widest tile (64, 32, 16
    pixels) that wastes at most a sixth of the product (14 x 14 = 196 -> 224, 7 x 7 -> 64)."""
    for step in (64, 32):
        if _round_up(p, step) - p <= p // 6:
            return step
    return 16 if p > 64 else min(64, _round_up(p, 16))


# Warps an NCHW conv's GEMM aims at: 16 per multiprocessor (an H100/H200 has 132), so that
# while some wait for their gathered input tile (plain loads: the im2col of a 3x3 conv cannot be
# cp.async) the others compute. Measured on the H200 (bench/cuda_e2e.py, ncu): with one 4-warp
# block per multiprocessor the 3x3 layers of ResNet-18 took 20-32 us each, bound by that latency.
BUSY_WARPS = 16 * 132


def _warps(bm: int, bn: int) -> int:
    return (2 if bm >= 32 else 1) * (2 if bn >= 32 else 1)


def _busiest_tile(f: int, q: int, k: int, batch: int = 1) -> dict:
    """Without split-K: the block tile (64 x 64 down to 16 x 16) and chunk that keep the most warps
    in flight, up to BUSY_WARPS, then reuse their loads most (conv_config's choice)."""
    steps = k // WMMA

    def score(choice):
        (bm, bn), chunk = choice
        return min(batch * (f // bm) * (q // bn) * _warps(bm, bn), BUSY_WARPS), bm * bn / (bm + bn), chunk

    options = [((bm, bn), chunk) for bm, bn in TILES
               for chunk in ([c for c in (4, 2) if steps % c == 0] or [1]) if f % bm == 0 and q % bn == 0]
    (bm, bn), chunk = max(options, key=score)
    brw, bcw = (2 if bm >= 32 else 1), (2 if bn >= 32 else 1)
    return {"block_row_warps": brw, "block_col_warps": bcw, "warp_row_tiles": bm // (WMMA * brw),
            "warp_col_tiles": bn // (WMMA * bcw), "chunk": chunk}


TILES = ((64, 64), (64, 32), (32, 64), (32, 32), (16, 64), (32, 16), (16, 32), (16, 16))


def conv_config(f: int, q: int, k: int, cfg=None) -> dict:
    """Untuned tiles of an NCHW implicit GEMM (f output channels x q pixels x k reduction terms,
    each padded to a multiple of 16): the block tile (64 x 64 down to 16 x 16, 4 warps where it
    allows) that keeps the most warps in flight, up to ``BUSY_WARPS``, then the one that reuses
    its loads most. Where too few blocks remain (batch-1 7 x 7 and 14 x 14 layers), the reduction
    is split into ``split_k`` slices computed by separate blocks and summed by the output kernel."""
    from kiln.target import Target

    steps = k // WMMA

    def warps(bm, bn):
        return (2 if bm >= 32 else 1) * (2 if bn >= 32 else 1)

    def split_for(blocks: int, chunk: int, per_block: int) -> int:
        split = 1
        # partial sums cost memory traffic: many slices only for long reductions
        most = 16 if steps // chunk >= 32 else 4
        while blocks * split * per_block < BUSY_WARPS and split < most and steps % (chunk * split * 2) == 0 and \
                steps // (chunk * split * 2) >= 2:
            split *= 2
        return split

    def score(choice):  # warps in flight (up to BUSY_WARPS), then the tile's reuse of its loads
        (bm, bn), chunk = choice
        blocks, per_block = (f // bm) * (q // bn), warps(bm, bn)
        busy = min(blocks * split_for(blocks, chunk, per_block) * per_block, BUSY_WARPS)
        return busy, bm * bn / (bm + bn), chunk

    options = [((bm, bn), chunk)
               for bm, bn in TILES
               for chunk in ([c for c in (4, 2) if steps % c == 0] or [1]) if f % bm == 0 and q % bn == 0]
    (bm, bn), chunk = max(options, key=score)
    split = split_for((f // bm) * (q // bn), chunk, warps(bm, bn))
    brw, bcw = (2 if bm >= 32 else 1), (2 if bn >= 32 else 1)
    conf = {"block_row_warps": brw, "block_col_warps": bcw, "warp_row_tiles": bm // (WMMA * brw),
            "warp_col_tiles": bn // (WMMA * bcw), "chunk": chunk, "offset": 8, "vec": 8, "double_buffer": 0,
            "mma": 0, "raster": 1, "split_k": split, "unroll_fetch": 1, "fit_vec": 1, "fuse_epilogue": 1}
    target = Target.current(allow_none=True)
    limit = (target.attrs.get("max_shared_memory_per_block") if target is not None else None) or 48 * 1024
    for stages in (3, 2):
        if steps // (chunk * split) >= stages and shared_bytes({**conf, "double_buffer": stages}) <= limit:
            conf["double_buffer"] = stages
            break
    conf.update({key: int(knob(cfg, key, v)) for key, v in conf.items()})
    return conf


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


def _taps(r, kh: int, kw: int):
    """(channel, ky, kx) of reduction index r = (c * kh + ky) * kw + kx, written so that the
    simplifier folds the flattened OIHW index back to r (a contiguous, vectorizable row)."""
    if kh * kw == 1:
        return r, 0, 0
    ch = r // (kh * kw)
    rem = r - ch * (kh * kw)
    ky = rem // kw
    return ch, ky, rem - ky * kw


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


def _check(m, n, k, dtype, what):
    if not fits(m, n, k, dtype):
        raise ValueError(f"{what} on tensor cores needs float16 inputs and M, N, K multiples of 16; got "
                         f"{dtype} with M={m} N={n} K={k} (use the default CUDA schedule)")


def is_tensorcore(out) -> bool:
    """Whether out (or a stage it reads) is a product made by dense_tensorcore / batch_matmul_tensorcore."""
    try:
        _find(out)
    except ValueError:
        return False
    return True


def _find(out):
    return find_stage(out, lambda op: "tensorcore_config" in getattr(op, "attrs", {}),
                      "tensor-core dense / batch_matmul stage")


def schedule_dense_tensorcore(outs, cfg=None):
    """Schedule dense / batch_matmul made by dense_tensorcore / batch_matmul_tensorcore (module doc)."""
    outs = as_list(outs)
    mm = _find(outs[0])
    *_, m, n = (const_int(d) for d in mm.shape)
    k = const_int(mm.op.reduce_axis[0].dom.extent)
    conf = config_for(m, n, k, cfg) if cfg is not None else mm.op.attrs["tensorcore_config"]
    s = te.create_schedule([o.op for o in outs])
    out_ops = [o.op for o in outs]
    for st in list(s.stages):  # elementwise stages between the product and the outputs
        if isinstance(st.op, te.ComputeOp) and st.op is not mm.op and st.op not in out_ops:
            st.compute_inline()
    if _fusable(outs, mm, conf):
        _schedule_mma(s, mm, conf, epilogue=outs[0])
        return s
    if _conv_fusable(outs, mm, conf):
        _schedule_mma(s, mm, conf, epilogue=outs[0], output=_schedule_fused_conv_output)
        return s
    _schedule_mma(s, mm, conf)
    for o in outs:  # an epilogue reads the product from global memory, in a kernel of its own
        if o.op is not mm.op:
            _schedule_epilogue(s, o)
    return s


def _tile_shape(conf) -> tuple[int, int]:
    return (WMMA * conf["block_row_warps"] * conf["warp_row_tiles"],
            WMMA * conf["block_col_warps"] * conf["warp_col_tiles"])


def _fusable(outs, mm, conf) -> bool:
    """One elementwise output over the product's index space (module doc) whose float tile fits
    in shared memory beside the slabs."""
    from kiln.target import Target

    if len(outs) != 1 or outs[0].op is mm.op or not conf.get("fuse_epilogue", 1) or len(outs[0].shape) != len(mm.shape):
        return False
    bm, bn = _tile_shape(conf)
    target = Target.current(allow_none=True)
    limit = (target.attrs.get("max_shared_memory_per_block") if target is not None else None) or 48 * 1024
    return shared_bytes(conf) + bm * (bn + 8) * mm.dtype.bits // 8 <= limit


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


def use_tensorcore(a, b, transpose_b: bool = True, pad: bool = False) -> bool:
    """Whether topi.gpu should take the tensor-core path: a CUDA target, float16 inputs, sizes
    multiples of 16 (a (.., M, K) and b (.., N, K)); with pad (dense), M and N may be any of at
    least 16 (a GEMM, not a matrix-vector product) and are padded."""
    from kiln.target import Target

    target = Target.current(allow_none=True)
    if target is None or target.kind != "cuda" or len(a.shape) != len(b.shape):
        return False
    if not transpose_b and not (pad and len(a.shape) == 3):  # b as (B, K, N): batch_matmul only
        return False
    try:
        m, k = (const_int(d) for d in a.shape[-2:])
        n = const_int(b.shape[-2] if transpose_b else b.shape[-1])
    except (TypeError, ValueError):
        return False
    if pad and min(m, n) >= WMMA:
        m, n = _round_up(m, WMMA), _round_up(n, WMMA)
        if len(a.shape) == 3:  # batch_matmul: the reduction too (attention's scores x values: k = tokens)
            k = _round_up(k, WMMA)
    return str(b.dtype) == str(a.dtype) == "float16" and fits(m, n, k, a.dtype)


def use_tensorcore_conv(data, kernel, strides, padding, dilation) -> bool:
    """Whether conv2d NHWC / HWIO should run as a tensor-core implicit GEMM (CUDA, float16,
    N*OH*OW, KH*KW*C and the output channels multiples of 16)."""
    from kiln.target import Target

    from ..nn.conv2d import conv2d_shape
    from ..utils import const_shape

    target = Target.current(allow_none=True)
    if target is None or target.kind != "cuda" or str(data.dtype) != "float16" or str(kernel.dtype) != "float16":
        return False
    try:
        p = conv2d_shape("conv2d", const_shape(data, "data"), const_shape(kernel, "kernel"), strides, padding,
                         dilation, 1, layout="NHWC")
    except Exception:  # noqa: BLE001 - symbolic or invalid shapes: the default path reports them
        return False
    return str(data.dtype) == "float16" and fits(p.batch * p.out_height * p.out_width, p.out_channel,
                                                 p.kernel_h * p.kernel_w * p.in_channel, data.dtype)


def tensorcore_cfg(cfg):
    """cfg when it holds tensor-core knobs (a dense_tensorcore.cuda config), else None."""
    return cfg if cfg is not None and knob(cfg, "block_row_warps", None) is not None else None


schedule_batch_matmul_tensorcore = schedule_dense_tensorcore
schedule_conv2d_nhwc_tensorcore = schedule_dense_tensorcore  # the gemm, then the NHWC view (epilogue)


def _schedule_epilogue(s, out):
    st = s[out]
    fused = st.fuse(*st.op.axis)
    bx, tx = st.split(fused, factor=256)
    st.bind(bx, block("x"))
    st.bind(tx, thread("x"))


def _schedule_mma(s, C, conf, epilogue=None, output=None):
    A, B = C.op.input_tensors[:2]
    in_dtype, out_dtype = str(A.dtype), str(C.dtype)
    b_layout = conf.get("b_layout", "col_major")  # row_major: B is (K, N), as conv2d_nchw_tensorcore's
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    AF = s.cache_read(AS, "wmma.matrix_a", [C])
    BF = s.cache_read(BS, "wmma.matrix_b", [C])
    CF = s.cache_write(C, "wmma.accumulator")
    if epilogue is not None:  # output: how the epilogue's loops cover the product's tiles
        tz = (output or _schedule_fused_output)(s, C, epilogue, conf, out_dtype)
    else:
        tz = _schedule_output(s[C], conf, out_dtype)
    cf, ko, kc = _schedule_accumulators(s[CF], s[C], tz, conf, in_dtype, out_dtype, b_layout)
    for frag, layout, scope in ((AF, "row_major", "wmma.matrix_a"), (BF, b_layout, "wmma.matrix_b")):
        _schedule_fragments(s[frag], cf, kc, layout, scope, in_dtype)
    _schedule_slab(s[AS], cf, ko, conf)
    _schedule_slab(s[BS], cf, ko, conf, k_rows=b_layout == "row_major")


# Fragment arrays must live in registers: every loop that indexes them is unrolled.

def _schedule_output(st, conf, out_dtype):
    """Blocks of BM x BN, warps of (wrt x wct) tiles, each tile one wmma store; returns the warp
    column loop (threadIdx.z), where the accumulators are computed."""
    brw, bcw, wrt, wct = (conf[k] for k in ("block_row_warps", "block_col_warps", "warp_row_tiles", "warp_col_tiles"))
    *batch, y, x = st.op.axis
    by, yi = st.split(y, factor=WMMA * wrt * brw)
    bx, xi = st.split(x, factor=WMMA * wct * bcw)
    ty, tz, yo, xo, yt, xt = _warp_tiles(st, yi, xi, brw, bcw)
    st.reorder(*batch, by, bx, ty, tz, yo, xo, yt, xt)
    if batch:
        st.bind(batch[0], block("z"))
    raster = int(conf.get("raster", 1))
    if raster > 1:  # one grid axis: R block rows, then the next block column, then the next R rows
        byo, byi = st.split(by, factor=raster)
        st.reorder(byo, bx, byi)
        st.bind(st.fuse(byo, bx, byi), block("x"))
    else:
        st.bind(by, block("y"))
        st.bind(bx, block("x"))
    _store_warp_tiles(st, ty, tz, yo, xo, yt, out_dtype, "global")
    return tz


def _warp_tiles(stage, rows, cols, brw, bcw):
    """A block's rows and columns over its warps (threadIdx.y, .z), each warp's part in WMMA tiles:
    (ty, tz, yo, xo, yt, xt)."""
    ty, yi = stage.split(rows, nparts=brw)
    tz, xi = stage.split(cols, nparts=bcw)
    yo, yt = stage.split(yi, factor=WMMA)
    xo, xt = stage.split(xi, factor=WMMA)
    return ty, tz, yo, xo, yt, xt


def _store_warp_tiles(stage, ty, tz, yo, xo, yt, out_dtype, scope):
    """Each warp stores its accumulator tiles to ``scope`` memory, one wmma store a tile."""
    stage.bind(ty, thread("y"))
    stage.bind(tz, thread("z"))
    stage.tensorize(yt, intrin_wmma_store_matrix((WMMA,) * 3, out_dtype, scope))
    stage.unroll(yo)
    stage.unroll(xo)


def _schedule_fused_output(s, C, out, conf, out_dtype):
    """The epilogue ``out`` in BM x BN blocks over all the block's threads; the product C, in
    shared memory, computed per block: each warp stores its tiles there (module doc)."""
    brw, bcw = conf["block_row_warps"], conf["block_col_warps"]
    bm, bn = _tile_shape(conf)
    so = s[out]
    *batch, y, x = so.op.axis
    by, yi = so.split(y, factor=bm)
    bx, xi = so.split(x, factor=bn)
    so.reorder(*batch, by, bx, yi, xi)
    if batch:
        so.bind(so.fuse(*batch) if len(batch) > 1 else batch[0], block("z"))
    so.bind(by, block("y"))
    so.bind(bx, block("x"))
    *_, oy, ox = (const_int(d) for d in out.shape)
    threads = WARP * brw * bcw
    vec = 4 if oy % bm == 0 and ox % bn == 0 and bm * bn % (threads * 4) == 0 else 1
    _spread_over_block(so, so.fuse(yi, xi), vec, brw, bcw)
    return _product_in_shared(s, C, so, bx, conf, out_dtype)


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


def _product_in_shared(s, C, so, bx, conf, out_dtype):
    """The product C in shared memory, a BM x BN tile per block of the epilogue ``so`` (at its
    block loop ``bx``): each warp stores its accumulator tiles there."""
    brw, bcw = conf["block_row_warps"], conf["block_col_warps"]
    _, bn = _tile_shape(conf)
    s[C].set_scope("shared")
    sc = s[C]
    sc.compute_at(so, bx)
    *cb, cy, cx = sc.op.axis
    sc.storage_align(cy, bn, 8)  # rows 8 floats apart from a multiple of BN: fewer bank conflicts
    ty, tz, yo, xo, yt, xt = _warp_tiles(sc, cy, cx, brw, bcw)
    sc.reorder(*cb, ty, tz, yo, xo, yt, xt)
    _store_warp_tiles(sc, ty, tz, yo, xo, yt, out_dtype, "shared")
    return tz


def _spread_over_block(stage, fused, vec, brw, bcw, inner=None):
    """One fused loop over the block's threads, vec elements each (x: the warp's lanes, y and z:
    the warps), or the loop ``inner`` (split off before) each; what is left of the loop, the
    passes each thread makes, is returned."""
    if inner is not None:
        fused = _spread_over_block(stage, fused, 1, brw, bcw)
        stage.vectorize(inner)
        return fused
    fused, v = stage.split(fused, factor=vec)
    fused, tx = stage.split(fused, factor=WARP)
    fused, ty = stage.split(fused, factor=brw)
    fused, tz = stage.split(fused, factor=bcw)
    stage.bind(tz, thread("z"))
    stage.bind(ty, thread("y"))
    stage.bind(tx, thread("x"))
    if vec > 1:
        stage.vectorize(v)
    return fused


def _schedule_accumulators(cf, st, tz, conf, in_dtype, out_dtype, b_layout="col_major"):
    """The warp's accumulator tiles over the reduction in steps of chunk tiles: (stage, ko, kc)."""
    cf.compute_at(st, tz)
    *cbatch, cy, cx = cf.op.axis
    (rk,) = cf.op.reduce_axis
    cyo, cyi = cf.split(cy, factor=WMMA)
    cxo, cxi = cf.split(cx, factor=WMMA)
    ko, ki = cf.split(rk, factor=WMMA)
    ko, kc = cf.split(ko, factor=conf["chunk"])
    cf.reorder(*cbatch, ko, kc, cyo, cxo, cyi, cxi, ki)
    cf.tensorize(cyi, intrin_wmma_gemm((WMMA,) * 3, in_dtype, out_dtype, b_layout))
    for ax in (kc, cyo, cxo):
        cf.unroll(ax)
    if conf.get("mma", 0):
        cf.pragma(ko, "kiln_mma_sync", 1)
    return cf, ko, kc


def _schedule_fragments(f, cf, kc, layout, scope, in_dtype):
    """A or B fragments of one k tile, loaded from the shared slab."""
    f.compute_at(cf, kc)
    *fb, fi, fk = f.op.axis
    fio, fii = f.split(fi, factor=WMMA)
    fko, fki = f.split(fk, factor=WMMA)
    f.reorder(*fb, fio, fko, fii, fki)
    f.tensorize(fii, intrin_wmma_load_matrix(scope, (WMMA,) * 3, layout, in_dtype, "shared"))
    f.unroll(fio)
    f.unroll(fko)


def _schedule_slab(sh, cf, ko, conf, k_rows=False):
    """A shared slab per k step, fetched by all threads, vec halves each (rows padded by offset).
    With k_rows (a row-major B, K x N) the slab's rows are its 16*chunk k steps, each BN wide."""
    brw, bcw, vec = conf["block_row_warps"], conf["block_col_warps"], conf["vec"]
    sh.compute_at(cf, ko)
    *sb, si, sk = sh.op.axis
    if conf.get("fit_vec", 0):
        # a slab smaller than one vec-wide pass of all threads would leave a guarded partial pass,
        # which is not vectorized: narrower copies (8 or 4 bytes) in whole passes instead
        rows = WMMA * (conf["block_row_warps"] * conf["warp_row_tiles"] if not k_rows else conf["chunk"])
        cols = WMMA * (conf["chunk"] if not k_rows else conf["block_col_warps"] * conf["warp_col_tiles"])
        threads = WARP * brw * bcw
        vec = next((v for v in (vec, 4, 2) if v <= vec and rows * cols % (threads * v) == 0), vec)
    if conf["offset"]:
        width = WMMA * conf["block_col_warps"] * conf["warp_col_tiles"] if k_rows else WMMA * conf["chunk"]
        sh.storage_align(si, width, conf["offset"])  # rows padded by offset halves against bank conflicts
    runs = conf.get("column_runs", 0) if k_rows else 0
    if runs > 1:
        # a thread's elements are one run of columns (conv2d_nchw_tensorcore's pixel runs), whose
        # index stays apart from the thread's: its image row is computed once, not per element
        sko, sv = sh.split(sk, factor=min(vec, runs))
        fused = _spread_over_block(sh, sh.fuse(*sb, si, sko), 1, brw, bcw, inner=sv)
    else:
        fused = _spread_over_block(sh, sh.fuse(*sb, si, sk), vec, brw, bcw)
    if conf.get("unroll_fetch", 0):  # every load of the slab in flight at once
        sh.unroll(fused)
    if conf.get("double_buffer", 0):
        sh.double_buffer(max(2, conf["double_buffer"]))
