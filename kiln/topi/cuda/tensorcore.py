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

Untuned dense on CUDA: a long reduction with few output tiles (an FFN's down projection, 128 x 768
x 3072: 96 blocks of 4 warps) is split (``split_slices``, knob ``split_k``): slice s is product s
of a batch (blockIdx.z) over columns s * K / S on of A and the weight, read in place, with float32
sums, and a second kernel adds the S slices, casts and applies the epilogue. 

``cfg`` knobs (AutoTVM template ``dense_tensorcore.cuda`` / ``batch_matmul_tensorcore.cuda``):
block_row_warps, block_col_warps, warp_row_tiles, warp_col_tiles, chunk, offset, vec, double_buffer,
mma (ldmatrix + mma.sync instead of wmma, sm_80+), raster (block rows walked per block column),
fuse_epilogue; dense also split_k (slices of the reduction, below).
"""

from __future__ import annotations

from kiln import te

from ..gpu.common import as_list, block, flat_kernel, thread
from ..nn.batch_matmul import batch_matmul as _batch_matmul
from ..nn.dense import add_bias, dense as _dense
from ..utils import const_int, find_stage, has_stage, knob
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
        if batch == 1 and _tile_shape(conf) == (WMMA, 2 * WMMA) and n % (4 * WMMA) == 0:
            # rows only 16 divides (a ViT's 197 tokens, padded to 208): 16 x 64 blocks, each warp two
            # tiles wide. H200, weights from memory: 197 x 2304 x 768 19.3 -> 14.2 us, 197 x 3072 x 768
            # 22.6 -> 18.5, 197 x 768 x 768 7.3 -> 6.5 (bench/cuda_matmul.py --transformer shapes)
            conf["warp_col_tiles"] = 2
    conf["double_buffer"] = pipeline_stages(conf, k // (WMMA * chunk))
    return conf


def pipeline_stages(conf: dict, k_steps: int) -> int:
    """The deepest copy pipeline (3, then 2 stages; else 0) that ``k_steps`` reduction steps fill and
    whose slabs fit the current target's shared memory per block (48 KiB when it says nothing)."""
    from kiln.target import Target

    target = Target.current(allow_none=True)
    limit = (target.attrs.get("max_shared_memory_per_block") if target is not None else None) or 48 * 1024
    for stages in (3, 2):
        if k_steps >= stages and shared_bytes({**conf, "double_buffer": stages}) <= limit:
            return stages
    return conf["double_buffer"]


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
    # rows rounded up to 16 (a ViT's 197 tokens: 208); to 32 (224: 32-row blocks) its products were
    # slower on the H200: 197 x 3072 x 768 31.0 us against 22.4, 197 x 768 x 768 8.5 against 7.2
    # (bench/cuda_matmul.py --transformer)
    mp, np_ = _round_up(m, WMMA), _round_up(n, WMMA)
    _check(mp, np_, k, data.dtype, "dense")
    a = data if mp == m else te.compute((mp, k), lambda i, r: data[tir_op.min(i, m - 1), r], name="dense_rows")
    w = weight if np_ == n else te.compute((np_, k), lambda j, r: weight[tir_op.min(j, n - 1), r], name="dense_cols")
    slices = int(knob(cfg, "split_k", split_slices(mp, np_, k)))
    if slices > 1 and k % (slices * WMMA) == 0:
        return add_bias(_split_dense(a, w, (m, n), slices, out_dtype or str(data.dtype), cfg), bias, 1)
    out = _dense(a, w, None, out_dtype)
    out.op.attrs["tensorcore_config"] = config_for(mp, np_, k, cfg)
    if (mp, np_) != (m, n):
        product = out
        out = te.compute((m, n), lambda i, j: product[i, j], name="dense_valid", tag="injective")
    return add_bias(out, bias, 1)


def split_slices(m: int, n: int, k: int) -> int:
    """Split-K for the untuned tensor-core dense (module doc): a reduction of SPLIT_MIN_K terms or
    more whose blocks keep fewer than 2/3 of BUSY_WARPS busy is cut into the fewest of 2, 4 or 8
    slices (each at least 3 k steps of 64, a full pipeline) that reach 2/3; else 1. On the H200
    (weights from memory) FFN down went 16.6 -> 10.4 us at 128 tokens (4 slices), 16.4 -> 7.2 at
    64 (8 slices; cuBLAS 7.3)."""
    from .busy import SPLIT_MIN_K

    conf = default_config(m, n, k)
    bm, bn = _tile_shape(conf)
    warps = (m // bm) * (n // bn) * conf["block_row_warps"] * conf["block_col_warps"]
    if k < SPLIT_MIN_K or 3 * warps >= 2 * BUSY_WARPS:
        return 1
    for slices in (2, 4, 8):
        if k % (slices * 64) == 0 and k // (slices * 64) >= 3 and 3 * slices * warps >= 2 * BUSY_WARPS:
            return slices
    return 1


def _split_dense(a, w, shape, slices: int, out_dtype: str, cfg):
    """dense on tensor cores with the reduction cut into ``slices``: slice s is product s of a batch
    (blockIdx.z; its A and B tiles read in place, columns s * K/slices on), float32 sums, and a
    second kernel adds the slices up, casts and applies the epilogue."""
    from ..gpu.dense import slice_views, sum_slices

    (mp, k), np_ = (const_int(d) for d in a.shape), const_int(w.shape[0])
    product = _batch_matmul(*slice_views(a, w, slices), None, "float32", False, True)
    product.op.attrs["tensorcore_config"] = config_for(mp, np_, k // slices, cfg, slices)
    return sum_slices(product, shape, out_dtype)


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


def _check(m, n, k, dtype, what):
    if not fits(m, n, k, dtype):
        raise ValueError(f"{what} on tensor cores needs float16 inputs and M, N, K multiples of 16; got "
                         f"{dtype} with M={m} N={n} K={k} (use the default CUDA schedule)")


def is_tensorcore(out) -> bool:
    """Whether out (or a stage it reads) is a product made by dense_tensorcore / batch_matmul_tensorcore."""
    return has_stage(out, _made_here)


def _find(out):
    return find_stage(out, _made_here, "tensor-core dense / batch_matmul stage")


def _made_here(op) -> bool:
    return "tensorcore_config" in getattr(op, "attrs", {})


def schedule_dense_tensorcore(outs, cfg=None, fused_output=None):
    """Schedule dense / batch_matmul made by dense_tensorcore / batch_matmul_tensorcore (module doc).
    ``fused_output(outs, product, conf)``: for an epilogue over another index space (an NCHW
    conv's output, conv2d_tensorcore.py), the function that lays its loops over the product's
    tiles in the product's kernel (as _schedule_fused_output), or None where it cannot."""
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
    output = fused_output(outs, mm, conf) if fused_output is not None else None
    if output is not None:
        _schedule_mma(s, mm, conf, epilogue=outs[0], output=output)
        return s
    _schedule_mma(s, mm, conf)
    for o in outs:  # an epilogue reads the product from global memory, in a kernel of its own
        if o.op is not mm.op:
            flat_kernel(s, o)
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
