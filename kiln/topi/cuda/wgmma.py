"""dense on Hopper's warpgroup tensor cores (``wgmma``, sm_90a): intrinsics and a schedule.

The product C = A W^T (A: M x K, W: N x K, float16; C float32) is written over views of A and W
in the layout wgmma reads from shared memory without swizzling: ``A_il[c, i, e] = A[i, 8 c + e]``,
so the 8 halves of a row's k chunk are 16 contiguous bytes and the 8 rows of a chunk form one
128-byte core matrix (kiln/codegen/cuda_wgmma.py). The views are never stored: the block's
shared slabs are fetched from A and W directly, 16 bytes per thread-copy (``cp.async``, a
``stages``-deep pipeline).

A block computes ``64 * warpgroups x n`` of C: each warpgroup (128 threads, threadIdx.x; the
warpgroup index is threadIdx.y) owns a 64 x n accumulator tile in registers and, per k step of
``bk``, issues ``bk / 16`` wgmma m64n{n}k16 reading its 64 rows of the A slab and the whole B
slab. The accumulators are stored row-major straight to C.

    C = dense_wgmma(A, W)
    s = schedule_dense_wgmma([C], {"warpgroups": 2, "n": 128, "bk": 64, "stages": 3})
    f = tvm.build(s, [A, W, C], target="cuda -arch=sm_90a")

With ``"copy": "tma"`` the slabs are instead fetched by Hopper's copy engine: one thread issues a
bulk tensor copy per slab (``cp.async.bulk.tensor.2d`` of a ``rows x 64`` box of A or W as they
are, row-major), which lands in the 128-byte swizzled layout wgmma reads conflict-free (rows of
64 halves; the 16-byte chunk c of row r at c ^ r % 8) and completes on the slot's mbarrier
(kiln/tir/transform/double_buffer.py); bk is then 64, one swizzle row. The tensor maps are
kernel parameters the runtime encodes from the arguments' addresses.

relay's float16 dense takes this product on sm_90a targets where ``strategy_config`` finds blocks
for the shape (``topi.gpu.dense`` asks ``use_wgmma``); the elementwise ops fused after it run from
a shared staging tile in the product's kernel (EPILOGUE "fused") or in a kernel of their own.
"""

from __future__ import annotations

from kiln import te
from kiln.ir import expr as E
from kiln.ir.stmt import AttrStmt, Evaluate, SeqStmt, decl_buffer
from kiln.tir.transform.double_buffer import LAG

from ..gpu.common import block, flat_kernel, thread
from ..nn.dense import add_bias
from ..utils import const_int, find_stage, has_stage

ROWS = 64  # rows of one warpgroup's tile (wgmma's m)
DEFAULT = {"warpgroups": 2, "n": 128, "bk": 64, "stages": 4, "copy_order": "chunks", "copy": "cp.async"}
SWIZZLE = 128  # bytes: the bulk tensor copies' swizzle, one row of the tiles they write
# relay's epilogue (cast, bias, activation) after a copy="tma" product: "fused" (from a shared
# staging tile in the product's kernel) or "kernel" (a kernel of its own, reading the float32
# product from global memory); the conf's "epilogue" overrides it. H200, fp16 dense + bias + relu
# 4096^3 through relay: fused 0.198 ms, kernel 0.247 ms (torch relu(linear) 0.211 ms)
EPILOGUE = "fused"


def _call(op: str, *args):
    return Evaluate(E.Call(E.const(0).dtype, op, tuple(E.convert(a) for a in args)))


def _tile(buf, size):
    return E.FloorDiv(buf.elem_offset, E.const(size), buf.elem_offset.dtype)


def intrin_wgmma_gemm(n: int, kc: int, dtype: str = "float16", lag: int = 0):
    """acc (64 x n, float32) += sum over kc chunks of 8: a[c, i, e] * b[c, j, e], a and b in shared
    memory in the core-matrix layout (rows of 8 contiguous halves). With lag = 1 the products are
    left running: each call waits for the previous call's only (its tiles' pipeline keeps them,
    kiln/tir/transform/double_buffer.py), and the store waits for the last."""
    if kc % 2:
        raise ValueError(f"wgmma steps k by 16: the chunk count kc={kc} (of 8 halves) must be even")
    a = te.placeholder((kc, ROWS, 8), dtype, name="a")
    b = te.placeholder((kc, n, 8), dtype, name="b")
    rc = te.reduce_axis((0, kc), name="rc")
    re = te.reduce_axis((0, 8), name="re")
    c = te.compute((ROWS, n), lambda i, j: te.sum(a[rc, i, re].astype("float32") * b[rc, j, re].astype("float32"),
                                                  axis=[rc, re]), name="acc")

    def fintrin(ins, outs):
        (A, B), (C,) = ins, outs
        index = _tile(C, ROWS * n)
        fill = _call("tir.kiln_wgmma_fill", C.data, index, n)
        # lbo: bytes between k chunks (the slab's outer stride); 128 between 8-row groups
        mma = _call("tir.kiln_wgmma_mma", C.data, index, n, A.access_ptr("r"), A.strides[0] * 2,
                    B.access_ptr("r"), B.strides[0] * 2, kc // 2, lag)
        if lag:
            mma = AttrStmt(E.const(0), LAG, E.const(lag), mma)
        return SeqStmt((fill, mma)), fill, mma

    binds = {a: decl_buffer(a.shape, dtype, "a", strides=[te.var("a_s0"), 8, 1], scope="shared", offset_factor=8),
             b: decl_buffer(b.shape, dtype, "b", strides=[te.var("b_s0"), 8, 1], scope="shared", offset_factor=8),
             c: decl_buffer(c.shape, "float32", "acc", strides=[te.var("acc_s"), 1], scope="wgmma.accumulator",
                            offset_factor=1)}
    return te.decl_tensor_intrin(c.op, fintrin, name=f"wgmma_m64n{n}", binds=binds)


def intrin_wgmma_gemm_swizzled(n: int, bk: int = 64, dtype: str = "float16", lag: int = 0):
    """acc (64 x n, float32) += a (64 x bk) . b (n x bk)^T, a and b row-major tiles in shared memory
    as the bulk tensor copies write them (128-byte swizzle: rows of bk = 64 halves)."""
    if bk * 2 != SWIZZLE:
        raise ValueError(f"128-byte swizzled tiles have rows of 64 halves; bk={bk}")
    a = te.placeholder((ROWS, bk), dtype, name="a")
    b = te.placeholder((n, bk), dtype, name="b")
    rk = te.reduce_axis((0, bk), name="rk")
    c = te.compute((ROWS, n), lambda i, j: te.sum(a[i, rk].astype("float32") * b[j, rk].astype("float32"), axis=rk),
                   name="acc")

    def fintrin(ins, outs):
        (A, B), (C,) = ins, outs
        index = _tile(C, ROWS * n)
        fill = _call("tir.kiln_wgmma_fill", C.data, index, n)
        mma = _call("tir.kiln_wgmma_mma", C.data, index, n, A.access_ptr("r"), 16, B.access_ptr("r"), 16, bk // 16,
                    lag, SWIZZLE)
        if lag:
            mma = AttrStmt(E.const(0), LAG, E.const(lag), mma)
        return SeqStmt((fill, mma)), fill, mma

    binds = {a: decl_buffer(a.shape, dtype, "a", strides=[bk, 1], scope="shared", offset_factor=8),
             b: decl_buffer(b.shape, dtype, "b", strides=[bk, 1], scope="shared", offset_factor=8),
             c: decl_buffer(c.shape, "float32", "acc", strides=[te.var("acc_s"), 1], scope="wgmma.accumulator",
                            offset_factor=1)}
    return te.decl_tensor_intrin(c.op, fintrin, name=f"wgmma_m64n{n}_sw128", binds=binds)


def intrin_tma_load(rows: int, cols: int, shape, dtype: str = "float16"):
    """The rows x cols tile of a row-major 2-D tensor of ``shape`` (height, width) to shared memory:
    one bulk tensor copy (128-byte swizzle), issued by one thread; the pipeline gives it its
    mbarrier (kiln/tir/transform/double_buffer.py)."""
    elem = 2 if dtype in ("float16", "bfloat16") else 4
    height, width = (int(x) for x in shape)
    src = te.placeholder((rows, cols), dtype, name="src")
    dst = te.compute((rows, cols), lambda i, j: src[i, j], name="dst")

    def fintrin(ins, outs):
        (sb,), (db,) = ins, outs
        off, ld = sb.elem_offset, sb.strides[0]
        x = E.FloorMod(off, ld, off.dtype)
        y = E.FloorDiv(off, ld, off.dtype)
        return _call("tir.kiln_tma_load", db.access_ptr("w"), sb.access_ptr("r"), x, y, width, height, width * elem, cols, rows,
                     elem, SWIZZLE)

    binds = {src: decl_buffer(src.shape, dtype, "src", strides=[te.var("src_s"), 1], offset_factor=1),
             dst: decl_buffer(dst.shape, dtype, "dst", scope="shared", offset_factor=1)}
    return te.decl_tensor_intrin(dst.op, fintrin, name=f"tma_load_{rows}x{cols}", binds=binds)


def intrin_wgmma_store(n: int, out_dtype: str = "float32", scope: str = "global"):
    """The 64 x n accumulator tile to memory, row-major (scope "shared": the block's staging tile,
    which the printer lays over the slabs: kiln/codegen/cuda_wgmma.py)."""
    acc = te.placeholder((ROWS, n), "float32", name="acc")
    dst = te.compute((ROWS, n), lambda i, j: acc[i, j].astype(out_dtype), name="dst")

    def fintrin(ins, outs):
        (f,), (d,) = ins, outs
        return _call("tir.kiln_wgmma_store", f.data, _tile(f, ROWS * n), n, d.access_ptr("w"), d.strides[0])

    binds = {acc: decl_buffer(acc.shape, "float32", "acc", strides=[te.var("acc_s"), 1], scope="wgmma.accumulator",
                              offset_factor=1),
             dst: decl_buffer(dst.shape, out_dtype, "dst", strides=[te.var("dst_s"), 1], scope=scope, offset_factor=1)}
    return te.decl_tensor_intrin(dst.op, fintrin, name=f"wgmma_store{n}" + ("_shared" if scope == "shared" else ""),
                                 binds=binds)


def fits(m: int, n: int, k: int, dtype, conf=None) -> bool:
    conf = {**DEFAULT, **(conf or {})}
    return (str(dtype) == "float16" and m % (ROWS * conf["warpgroups"]) == 0 and n % conf["n"] == 0
            and k % conf["bk"] == 0)


def dense_wgmma(data, weight, conf=None):
    """topi.nn.dense (weight N x K) as the wgmma product (module doc): float16 in, float32 out."""
    conf = {**DEFAULT, **(conf or {})}
    m, k = (const_int(d) for d in data.shape)
    n = const_int(weight.shape[0])
    if not fits(m, n, k, data.dtype, conf) or str(weight.dtype) != "float16":
        raise ValueError(f"dense on wgmma needs float16 inputs, M a multiple of {ROWS * conf['warpgroups']}, N of "
                         f"{conf['n']} and K of {conf['bk']}; got {data.dtype} M={m} N={n} K={k}")
    if conf["copy"] == "tma":  # A and W as they are: the copy engine swizzles the tiles
        if conf["bk"] != 64:
            raise ValueError(f"dense on wgmma with bulk tensor copies steps k by 64 (one 128-byte swizzle row); "
                             f"bk={conf['bk']}")
        if k < 128 or conf["stages"] < 2:
            raise ValueError(f"dense on wgmma with bulk tensor copies pipelines its k steps (their mbarriers): "
                             f"K at least 128 and stages at least 2; got K={k}, stages={conf['stages']}")
        rk = te.reduce_axis((0, k), name="rk")
        out = te.compute((m, n), lambda i, j: te.sum(data[i, rk].astype("float32") * weight[j, rk].astype("float32"),
                                                     axis=rk), name="dense_wgmma", tag="dense")
        out.op.attrs["wgmma_config"] = conf
        return out
    a_il = te.compute((k // 8, m, 8), lambda c, i, e: data[i, c * 8 + e], name="A_il")
    w_il = te.compute((k // 8, n, 8), lambda c, j, e: weight[j, c * 8 + e], name="W_il")
    rc = te.reduce_axis((0, k // 8), name="rc")
    re = te.reduce_axis((0, 8), name="re")
    out = te.compute((m, n), lambda i, j: te.sum(a_il[rc, i, re].astype("float32") * w_il[rc, j, re].astype("float32"),
                                                 axis=[rc, re]), name="dense_wgmma", tag="dense")
    out.op.attrs["wgmma_config"] = conf
    return out


def shared_bytes(conf) -> int:
    """Shared memory of a ``copy="tma"`` block: the slots of the A and W slabs, the slots'
    mbarriers (one 1024-byte aligned array) and the 1024 bytes of alignment slack."""
    conf = {**DEFAULT, **conf}
    return conf["stages"] * (ROWS * conf["warpgroups"] + conf["n"]) * conf["bk"] * 2 + 2 * 1024


# relay's choices, best first: (blocks, deepest pipeline, least share of a wave of blocks, least
# share where K is at most SHORT_K). 128 x 256 blocks 4 stages deep, then 128 x 128 up to 6 deep,
# for products that fill the GPU (H200, 4096^3: 0.91-0.93x cuBLAS, docs/cuda.md); then 64 x 64
# blocks 8 deep. Small products are latency-bound (a 5-10 us product): on the H200 64 x 64 blocks
# 8 stages deep beat the wmma path on BERT's and GPT-2's products with K = 768 from 24 blocks on
# (128 x 768 x 768: 5.3 us against 5.6; 64 x 2304 x 768: 5.9 against 7.1; 128 x 3072 x 768: 5.7
# against 6.7), but not with K = 3072 on 12-24 blocks (one block walks 48 k steps: 15 us against
# 7-11). 3 stages at least, so a step's products overlap the next fetch.
STRATEGY = (({"warpgroups": 2, "n": 256, "copy": "tma"}, 4, 1.0, 1.0),
            ({"warpgroups": 2, "n": 128, "copy": "tma"}, 6, 1.0, 1.0),
            ({"warpgroups": 1, "n": 64, "copy": "tma"}, 8, 0.5, 0.125))
SHORT_K = 1024  # 16 k steps


def strategy_config(m: int, n: int, k: int, target=None) -> dict | None:
    """The wgmma dense relay's float16 products take (``topi.gpu.dense``), or None for the other
    tensor-core paths: an sm_90a CUDA target, K a multiple of 64 (at least 128), and of the
    STRATEGY blocks the first that divides M x N into at least its share of a wave of the target's
    multiprocessors (kiln/topi/cuda/busy.py; a smaller share for K up to SHORT_K) with 3 or more
    stages within its shared memory
    (``-max_shared_memory_per_block``: 232448 on Hopper; the 48 KiB default fits none)."""
    from kiln.runtime.devices.nvrtc import arch_number, arch_specific
    from kiln.target import Target

    from ..gpu.dense import shared_limit
    from .busy import multiprocessors

    target = target or Target.current(allow_none=True)
    if target is None or target.kind != "cuda":
        return None
    arch = str(target.attrs.get("arch", "") or "")
    try:
        if not arch or arch_number(arch) != 90 or not arch_specific(arch):
            return None
    except ValueError:
        return None
    if k % 64 or k < 128:
        return None
    limit, wave = shared_limit(target), multiprocessors(target)
    for conf, deepest, share, short_share in STRATEGY:
        rows = ROWS * conf["warpgroups"]
        need = (short_share if k <= SHORT_K else share) * wave
        if m % rows or n % conf["n"] or (m // rows) * (n // conf["n"]) < need:
            continue
        for stages in range(min(deepest, k // 64), 2, -1):
            if shared_bytes({**conf, "stages": stages}) <= limit:
                return {**conf, "bk": 64, "stages": stages}
    return None


def use_wgmma(data, weight) -> bool:
    """Whether topi.gpu's dense takes the wgmma product: float16 (M, K) and (N, K) kernel
    arguments (the bulk tensor copies read them through tensor maps) of a shape
    ``strategy_config`` takes for the current target."""
    if len(data.shape) != 2 or len(weight.shape) != 2 or not (str(data.dtype) == str(weight.dtype) == "float16"):
        return False
    if not isinstance(data.op, te.PlaceholderOp) or not isinstance(weight.op, te.PlaceholderOp):
        return False
    try:
        m, k = (const_int(d) for d in data.shape)
        n = const_int(weight.shape[0])
    except (TypeError, ValueError):
        return False
    return strategy_config(m, n, k) is not None


def dense(data, weight, bias=None, out_dtype=None):
    """topi.nn.dense on wgmma for relay (``use_wgmma``): the float32 product, then the cast to
    ``out_dtype`` and the bias as elementwise stages (the epilogue: EPILOGUE)."""
    m, k = (const_int(d) for d in data.shape)
    n = const_int(weight.shape[0])
    conf = strategy_config(m, n, k)
    if conf is None:
        raise ValueError(f"dense on wgmma: no wgmma block suits M={m} N={n} K={k} on this target "
                         "(topi.cuda.wgmma.strategy_config); use topi.gpu.dense")
    out = dense_wgmma(data, weight, conf)
    out_dtype = str(out_dtype or data.dtype)
    if out_dtype != "float32":
        product = out
        out = te.compute(product.shape, lambda i, j: product[i, j].astype(out_dtype), name="dense_cast",
                         tag="elemwise")
    return add_bias(out, bias, 1)


def is_wgmma(out) -> bool:
    """Whether out (or a stage it reads) is a product made by dense_wgmma."""
    return has_stage(out, _made_here)


def _find(out):
    return find_stage(out, _made_here, "wgmma dense stage")


def _made_here(op) -> bool:
    return "wgmma_config" in getattr(op, "attrs", {})


def _fusable(outs, C) -> bool:
    """One output over the product's index space (relay's cast, bias, activation of a dense)."""
    return len(outs) == 1 and outs[0].op is not C.op and \
        [const_int(d) for d in outs[0].shape] == [const_int(d) for d in C.shape]


def _epilogue(s, kernels, C, outs=None) -> None:
    """Elementwise stages after the product (relay's cast, bias, activation) inlined into the
    outputs; each of ``kernels`` but the product is a kernel of its own reading the product from
    global memory (a fused epilogue, the one output, is laid out by _schedule_tma)."""
    out_ops = [o.op for o in (outs or kernels)]
    for st in list(s.stages):
        if isinstance(st.op, te.ComputeOp) and st.op is not C.op and st.op not in out_ops \
                and not _feeds_product(st.op, C):
            st.compute_inline()
    for o in kernels:
        if o.op is not C.op:
            flat_kernel(s, o)


def _feeds_product(op, C) -> bool:
    """Whether op is one of the product's own stages (the cp.async path's A_il / W_il views)."""
    return any(t.op is op for t in C.op.input_tensors)


def schedule_dense_wgmma(outs, conf=None):
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    C = _find(outs[0])
    conf = {**C.op.attrs["wgmma_config"], **(conf or {})}
    wg, n, bk, stages = conf["warpgroups"], conf["n"], conf["bk"], conf["stages"]
    s = te.create_schedule([o.op for o in outs])
    fused = conf["copy"] == "tma" and conf.get("epilogue", EPILOGUE) == "fused" and _fusable(outs, C)
    _epilogue(s, [C] if fused else outs, C, outs)
    if conf["copy"] == "tma":
        return _schedule_tma(s, C, conf, outs[0] if fused else None)
    a_il, w_il = C.op.input_tensors
    s[a_il].compute_inline()
    s[w_il].compute_inline()
    AS = s.cache_read(a_il, "shared", [C])
    BS = s.cache_read(w_il, "shared", [C])
    CF = s.cache_write(C, "wgmma.accumulator")

    st, tg = _output_tiles(s, C, wg, n)

    cf = s[CF]
    cf.compute_at(st, tg)
    ci, cj = cf.op.axis
    rc, re = cf.op.reduce_axis
    ko, ki = cf.split(rc, factor=bk // 8)
    cf.reorder(ko, ci, cj, ki, re)
    # one group of products left running while the next tile's are issued, where the pipeline
    # has the slots for it (4 stages: tiles fetched 2 ahead)
    lag = 1 if stages >= 3 and const_int(C.op.reduce_axis[0].dom.extent) // (bk // 8) >= stages else 0
    cf.tensorize(ci, intrin_wgmma_gemm(n, bk // 8, lag=lag))

    for slab in (AS, BS):
        sh = s[slab]
        sh.compute_at(cf, ko)
        c, r, e = sh.op.axis
        if conf.get("copy_order", "chunks") == "chunks":
            # neighbouring threads copy neighbouring 16-byte chunks of a row: whole 128-byte lines
            # from global memory, but their shared-memory slots are a chunk plane (rows * 16
            # bytes) apart, 8-way bank conflicts on the writes
            sh.reorder(r, c, e)
            fused = sh.fuse(r, c)
        else:  # "rows": neighbouring threads fill neighbouring shared slots, 16 bytes of 32 per sector read
            fused = sh.fuse(c, r)
        fused, tx = sh.split(fused, factor=128)
        fused, ty = sh.split(fused, factor=wg)
        sh.bind(tx, thread("x"))
        sh.bind(ty, thread("y"))
        sh.vectorize(e)  # 8 halves: one 16-byte copy (cp.async in the pipeline's prefetches)
        if stages > 1:
            sh.double_buffer(stages)
    return s


def _output_tiles(s, C, wg, n):
    """C's blocks (64 wg x n) over blockIdx, warpgroups over threadIdx.y, each one 64 x n store."""
    st = s[C]
    i, j = st.op.axis
    bi, ii = st.split(i, factor=ROWS * wg)
    bj, jj = st.split(j, factor=n)
    tg, iii = st.split(ii, factor=ROWS)
    st.reorder(bi, bj, tg, iii, jj)
    st.bind(bi, block("y"))
    st.bind(bj, block("x"))
    st.bind(tg, thread("y"))
    st.tensorize(iii, intrin_wgmma_store(n, str(C.dtype)))
    return st, tg


def _fused_output(s, C, out, wg, n):
    """The epilogue in the product's kernel: each block's 64 wg x n product tile stored to a shared
    staging tile (laid over the slabs, which are done with by then), then the output's elementwise
    expression over it, the block's threads along its rows (conflict-free reads, coalesced
    writes)."""
    so = s[out]
    i, j = so.op.axis
    bi, ii = so.split(i, factor=ROWS * wg)
    bj, jj = so.split(j, factor=n)
    so.reorder(bi, bj, ii, jj)
    so.bind(bi, block("y"))
    so.bind(bj, block("x"))
    fused = so.fuse(ii, jj)
    fused, tx = so.split(fused, factor=128)
    fused, ty = so.split(fused, factor=wg)
    so.bind(tx, thread("x"))
    so.bind(ty, thread("y"))
    s[C].set_scope("shared")
    st = s[C]
    st.compute_at(so, bj)
    ci, _ = st.op.axis
    tg, iii = st.split(ci, factor=ROWS)
    st.bind(tg, thread("y"))
    st.tensorize(iii, intrin_wgmma_store(n, str(C.dtype), scope="shared"))
    return st, tg


def _schedule_tma(s, C, conf, fused_out=None):
    wg, n, bk, stages = conf["warpgroups"], conf["n"], conf["bk"], conf["stages"]
    a, w = C.op.input_tensors
    AS = s.cache_read(a, "shared", [C])
    BS = s.cache_read(w, "shared", [C])
    CF = s.cache_write(C, "wgmma.accumulator")
    st, tg = _fused_output(s, C, fused_out, wg, n) if fused_out is not None else _output_tiles(s, C, wg, n)
    cf = s[CF]
    cf.compute_at(st, tg)
    ci, cj = cf.op.axis
    (rk,) = cf.op.reduce_axis
    ko, ki = cf.split(rk, factor=bk)
    cf.reorder(ko, ci, cj, ki)
    steps = const_int(C.op.reduce_axis[0].dom.extent) // bk
    lag = 1 if stages >= 3 and steps >= stages else 0
    cf.tensorize(ci, intrin_wgmma_gemm_swizzled(n, bk, lag=lag))
    # A warpgroup is 128 threads along threadIdx.x; the copies are one thread's (kiln_elected):
    # bound to threadIdx.x over one iteration, they are also guarded by threadIdx.x < 1.
    tx = te.thread_axis((0, 128), "threadIdx.x")
    for slab, src, rows in ((AS, a, ROWS * wg), (BS, w, n)):
        sh = s[slab]
        sh.compute_at(cf, ko)
        r, _ = sh.op.axis
        one, r = sh.split(r, nparts=1)
        sh.bind(one, tx)
        sh.tensorize(r, intrin_tma_load(rows, bk, src.shape, str(src.dtype)))
        if stages > 1:
            sh.double_buffer(stages)
    return s
