"""dense, matmul and batch_matmul on GPUs: block tiles in shared memory, register tiles per
work-item.

A work-group computes a ``BM x BN`` block of the output (``tile_y`` for rows, ``tile_x`` for
columns: block / virtual thread / thread / inner, TVM's names), each work-item an ``yi x xi``
register tile. The reduction runs in steps of ``tile_k[1]``: per step the group copies a
``BM x BK`` slab of A and a ``BK x BN`` slab of B into shared memory (fetches spread over all
work-items, ``vec`` contiguous elements each: float4 loads), waits at a barrier, and each
work-item multiplies its rows of A by its columns of B from registers. 128 x 128 blocks with 8 x 8
per work-item (256 work-items) is the default for large products. ``auto_unroll_max_step`` /
``unroll_explicit`` unroll the register tile.

Products with few rows (a batch-1 fully connected layer) have too little reuse for tiles: they
read the weight matrix once and are bound by memory. ``schedule_gemv`` gives each output element
a row of ``GEMV_LANES`` work-items (a warp) that splits the reduction: neighbouring work-items
read neighbouring weights (coalesced), and the partial sums meet in a cross-work-item reduction
(warp shuffles on CUDA). ``GEMV_ROWS`` outputs share a work-group.

Ragged products on CUDA (a ViT's 197 tokens, attention's scores x values with 197 terms): where
the tiles do not divide M, N or K, the product is computed on inputs padded to whole tiles
(``_padded``: rows and columns past the end repeat the last one, reduction terms past the end are
zero), read inside the shared-slab fetch, never stored; the output reads its valid part and is
the only stage with a bounds check (its store). Unpadded, every slab fetch, register-tile update
and store of such a product carried a per-element guard, the fetches went scalar, and a prime K
(197) left one-term k steps with a barrier each. Deeper k steps are then chosen as if K divided.
"""

from __future__ import annotations

from kiln import te

from ..nn.batch_matmul import batch_matmul as _batch_matmul
from ..nn.dense import add_bias, dense as _dense, matmul as _matmul
from ..utils import const_int, find_stage, knob
from .common import as_list, block, flat_kernel, inline_injective, max_threads, schedule_per_item, thread, unroll_pragmas
from .tiling import cooperative_fetch, divisor, resolve, split_levels

TAGS = ("dense", "matmul", "batch_matmul")
KNOBS = ("tile_y", "tile_x", "tile_k", "vec", "auto_unroll_max_step", "unroll_explicit")
SMALL_M = 16
GEMV_LANES = 32  # a warp per output: the reduction's cross-work-item tree is all shuffles
GEMV_ROWS = 4
GEMV_MIN_K = 64  # below, a work-item per output (schedule_per_item) wastes less


def _axis_tiles(n: int, threads: int, inner: int = 8) -> list[int]:
    """[blocks, 1, work-items, per item] for an axis of n: exact divisors where they give a
    reasonably wide group, else a ragged last block (guarded) of ``threads`` x ``inner``."""
    i = next((v for v in (inner, 4, 2) if v <= inner and n % v == 0 and n // v >= 2), 1)
    t = divisor(n // i, threads)
    if t * i * 4 < min(n, threads * inner):  # e.g. ViT's 197 rows: 1 x 1 blocks starve the GPU
        i = min(inner, 4)
        t = min(threads, -(-n // i))
        return [-(-n // (t * i)), 1, t, i]
    return [n // (t * i), 1, t, i]


def _side(threads: int) -> int:
    """Work-items per axis of a square group that fits ``threads``."""
    return next(v for v in (16, 8, 4, 2, 1) if v * v <= threads)


def shared_limit(target=None) -> int:
    """Bytes of shared (OpenCL local) memory a work-group may use on the target (48 KiB default)."""
    from kiln.target import Target

    target = target or Target.current(allow_none=True)
    attrs = getattr(target, "attrs", None) or {}
    return int(attrs.get("max_shared_memory_per_block", 48 * 1024) or 48 * 1024)


def default_config(m: int, n: int, k: int, threads: int | None = None, shared: int | None = None,
                   dtype_bytes: int = 4, batch: int = 1, min_blocks: int | None = None, split: bool = True) -> dict:
    """Untuned tiles: 16 x 16 work-items of 8 x 8 outputs where the sizes allow. Always within the
    target's limits, for any shape: at most ``threads`` work-items (``max_num_threads``) and the
    two shared slabs, (BM + BN) x BK elements, within ``shared`` bytes (``max_shared_memory_per_block``).
    With ``min_blocks`` (CUDA: topi/cuda/busy.py), blocks shrink until the product (``batch`` of
    them) has that many: a transformer's 128-token products are 6 to 24 blocks of 128 x 128."""
    threads = threads or max_threads()
    shared = shared or shared_limit()
    side = _side(threads)
    ty = _axis_tiles(m, side)
    tx = _axis_tiles(n, side)
    if min_blocks is None:
        from ..cuda.busy import min_blocks as _cuda_min_blocks

        min_blocks = _cuda_min_blocks()
    slices = 1
    if min_blocks:  # and a long reduction with few output tiles split in slices (busy.split_and_blocks)
        from ..cuda.busy import split_and_blocks

        ty, tx, slices = split_and_blocks(ty, tx, m, n, k, batch, min_blocks, split)
    # shrunk register tiles do less work per k step: deeper steps, fewer barriers (about 512 products
    # per thread between two: 4 x 4 tiles take 32-deep steps; 16 deep, BERT's 128 x 3072 x 768 dense ran
    # 48.6 us against 35.5 us on the H200, weights from memory, bench/cuda_matmul.py --transformer)
    want_k = 8 if not min_blocks else max(8, min(32, 512 // (ty[3] * tx[3])))
    ki = divisor(k, want_k)
    if min_blocks and ki < min(want_k, 8) and k > want_k and m >= SMALL_M:  # ragged K (197): zero-padded (module doc)
        ki = next((d for d in (want_k, 16) if d <= want_k and -(-k // d) * d - k <= k // 16), 8)
    bm, bn = ty[1] * ty[2] * ty[3], tx[1] * tx[2] * tx[3]
    while ki > 1 and (bm + bn) * ki * dtype_bytes > shared:
        ki = divisor(k, ki - 1)
    vec = 4 if ki % 4 == 0 and k % 4 == 0 and n % 4 == 0 and tx[3] % 4 == 0 else 1
    return {"tile_y": ty, "tile_x": tx, "tile_k": [-(-k // ki), ki], "vec": vec,
            "auto_unroll_max_step": 512, "unroll_explicit": True, "split_k": slices}


def config_for(m: int, n: int, k: int, cfg=None, batch: int = 1, split: bool = False) -> dict:
    """The untuned tiles with ``cfg``'s knobs over them; ``split``: a reduction split by default
    (dense only: matmul and batch_matmul compute no slices)."""
    conf = default_config(m, n, k, batch=batch, split=split)
    conf.update({key: knob(cfg, key, v) for key, v in conf.items()})
    for key, total in (("tile_y", m), ("tile_x", n), ("tile_k", k)):
        conf[key] = resolve(conf[key], total, key)
    return conf


def _record(out, m, n, k, cfg, batch: int = 1):
    out.op.attrs["gpu_config"] = config_for(m, n, k, cfg, batch)
    return out


def padded_sizes(conf: dict, m: int, n: int, k: int):
    """(M, N, K) rounded up to whole tiles of ``conf`` where a CUDA product's tiles do not divide
    them (module doc), else None: there, and for products with rows enough for tiles, the
    schedule guards every access instead."""
    from ..cuda.busy import min_blocks

    sizes = tuple(_product(conf[key]) for key in ("tile_y", "tile_x", "tile_k"))
    if sizes == (m, n, k) or not min_blocks() or m < SMALL_M:
        return None
    return sizes


def _product(tiles) -> int:
    total = 1
    for v in tiles:
        total *= int(v)
    return total


def _padded(t, sizes, zero_axis: int):
    """``t`` viewed with the larger ``sizes``: past an axis's end, indices repeat its last entry
    (rows or columns of the product nobody reads), except along ``zero_axis`` (the reduction),
    where the padded terms are zero. Inlined into the shared-slab fetch by the schedule."""
    from kiln.tir import op as tir_op

    dims = [const_int(d) for d in t.shape]
    sizes = list(sizes)
    if sizes == dims:
        return t
    zero = te.const(0, t.dtype)

    def view(*idx):
        value = t[tuple(tir_op.min(i, d - 1) if s != d else i for i, s, d in zip(idx, sizes, dims))]
        if sizes[zero_axis] != dims[zero_axis]:
            value = te.if_then_else(idx[zero_axis] < dims[zero_axis], value, zero)
        return value

    return te.compute(tuple(sizes), view, name=f"{t.op.name}_padded", tag="injective")


def _valid(product, shape, name: str):
    """The first ``shape`` entries of a padded product (its other rows and columns are unread)."""
    if [const_int(d) for d in product.shape] == list(shape):
        return product
    return te.compute(tuple(shape), lambda *i: product[i], name=name, tag="injective")


def dense(data, weight, bias=None, out_dtype=None, cfg=None):
    """topi.nn.dense (weight N x K), recording its GPU tiles (float16 on CUDA: tensor cores)."""
    from ..cuda import tensorcore as tc, wgmma

    if tc.tensorcore_cfg(cfg) is None and wgmma.use_wgmma(data, weight):  # sm_90a: Hopper's wgmma
        return wgmma.dense(data, weight, bias, out_dtype)
    if tc.use_tensorcore(data, weight, pad=True):
        return tc.dense_tensorcore(data, weight, bias, out_dtype, cfg=tc.tensorcore_cfg(cfg))
    m, k = (const_int(d) for d in data.shape)
    n = const_int(weight.shape[0])
    conf = config_for(m, n, k, cfg, split=True)
    pads = padded_sizes(conf, m, n, k)
    split = _split_slices(conf, m)
    if split > 1:
        return add_bias(_split_dense(data, weight, conf, split, pads or (m, n, k), out_dtype), bias, 1)
    if pads is None:
        out = _dense(data, weight, None, out_dtype)
        out.op.attrs["gpu_config"] = conf
        return add_bias(out, bias, 1)
    mp, np_, kp = pads
    out = _dense(_padded(data, (mp, kp), 1), _padded(weight, (np_, kp), 1), None, out_dtype)
    out.op.attrs["gpu_config"] = conf
    return add_bias(_valid(out, (m, n), "dense_valid"), bias, 1)


def _split_slices(conf: dict, m: int) -> int:
    """The ``split_k`` knob's slices (1: none) as many as divide the k steps; CUDA products with rows
    enough for tiles only."""
    from ..cuda.busy import min_blocks

    want = int(conf.get("split_k", 1) or 1)
    if want <= 1 or not min_blocks() or m < SMALL_M:
        return 1
    return divisor(int(conf["tile_k"][0]), want)


def _split_dense(data, weight, conf: dict, split: int, padded: tuple, out_dtype):
    """Split-K dense (knob ``split_k``): slice s of the reduction is product s of a batch computed by
    blocks of its own (blockIdx.z), and the output sums the slices (a second kernel, with the
    epilogue): a product with few output tiles and a long reduction (an FFN's N = 768 x K = 3072)
    gets blocks enough without shrinking its tiles."""
    m, k = (const_int(d) for d in data.shape)
    n = const_int(weight.shape[0])
    mp, np_, kp = padded
    out_dtype = out_dtype or str(data.dtype)
    a, w = _padded(data, (mp, kp), 1), _padded(weight, (np_, kp), 1)
    ks = kp // split
    a3, w3 = slice_views(a, w, split, tag="injective")
    rk = te.reduce_axis((0, ks), name="k")
    slices = te.compute((split, mp, np_), lambda sl, i, j: te.sum(
        a3[sl, i, rk].astype(out_dtype) * w3[sl, j, rk].astype(out_dtype), axis=rk),
        name="T_dense_slices", tag="dense")
    ki = int(conf["tile_k"][1])
    slices.op.attrs["gpu_config"] = {**conf, "tile_k": [ks // ki, ki], "split_k": split}
    return sum_slices(slices, (m, n))


def slice_views(a, w, slices: int, tag: str = ""):
    """A (M, K) and W (N, K) as (slices, M, K / slices) and (slices, N, K / slices): slice s is
    columns s * K / slices on. Views whose last index is the reduction's own (inlined into the slab
    fetch): so busy.pad_slab sees rows along the reduction and pads them (read as a[i, sl * ks + rk],
    the slabs went unpadded, 16-way bank conflicts: 2-4x slower on the H200)."""
    (mp, k), np_ = (const_int(d) for d in a.shape), const_int(w.shape[0])
    ks = k // slices
    a3 = te.compute((slices, mp, ks), lambda sl, i, r: a[i, sl * ks + r], name="dense_slices_a", tag=tag)
    w3 = te.compute((slices, np_, ks), lambda sl, j, r: w[j, sl * ks + r], name="dense_slices_w", tag=tag)
    return a3, w3


def sum_slices(product, shape, out_dtype=None):
    """The (M, N) output (``shape``, a corner of padded products) of a split product (slices, M, N):
    the slices added in order, then cast to ``out_dtype`` where given."""
    def total(i, j):
        value = product[0, i, j]
        for sl in range(1, const_int(product.shape[0])):
            value = value + product[sl, i, j]
        return value if out_dtype is None else value.astype(out_dtype)

    return te.compute(shape, total, name="T_dense", tag="injective")


def matmul(a, b, bias=None, out_dtype=None, transpose_a=False, transpose_b=False, cfg=None):
    out = _matmul(a, b, None, out_dtype, transpose_a, transpose_b)
    m, n = (const_int(d) for d in out.shape)
    k = const_int(a.shape[0 if transpose_a else 1])
    return add_bias(_record(out, m, n, k, cfg), bias, 1)


def batch_matmul(a, b, oshape=None, out_dtype=None, transpose_a=False, transpose_b=True, cfg=None):
    from ..cuda import tensorcore as tc

    if not transpose_a and tc.use_tensorcore(a, b, transpose_b, pad=True) and \
            const_int(a.shape[0]) == const_int(b.shape[0]):
        return tc.batch_matmul_tensorcore(a, b, oshape, out_dtype, transpose_b=transpose_b, cfg=tc.tensorcore_cfg(cfg))
    out = _batch_matmul(a, b, oshape, out_dtype, transpose_a, transpose_b)
    batch, m, n = (const_int(d) for d in out.shape)
    k = const_int(a.shape[1 if transpose_a else 2])
    conf = config_for(m, n, k, cfg, batch)
    pads = None if transpose_a else padded_sizes(conf, m, n, k)
    if pads is None:
        out.op.attrs["gpu_config"] = conf
        return out
    mp, np_, kp = pads
    bb = const_int(b.shape[0])
    b = _padded(b, (bb, np_, kp) if transpose_b else (bb, kp, np_), 2 if transpose_b else 1)
    out = _batch_matmul(_padded(a, (const_int(a.shape[0]), mp, kp), 2), b, None, out_dtype, False, transpose_b)
    out.op.attrs["gpu_config"] = conf
    return _valid(out, (batch, m, n), "batch_matmul_valid")


def _find(out):
    return find_stage(out, lambda op: getattr(op, "tag", "") in TAGS and op.reduce_axis, "dense / matmul stage")


def schedule_dense(outs, cfg=None):
    """Schedule dense / matmul / batch_matmul (with an elementwise epilogue)."""
    from ..cuda import tensorcore as tc, wgmma

    outs = as_list(outs)
    out = outs[0]
    if wgmma.is_wgmma(out):
        return wgmma.schedule_dense_wgmma(outs)
    if tc.is_tensorcore(out):
        return tc.schedule_dense_tensorcore(outs, cfg=tc.tensorcore_cfg(cfg))
    mm = _find(out)
    *_, m, n = (const_int(d) for d in mm.shape)
    k = const_int(mm.op.reduce_axis[0].dom.extent)
    if cfg is None and m < SMALL_M:
        return schedule_gemv(outs, mm) if _gemv_fits(outs, mm, k) else schedule_per_item(outs)
    recorded = mm.op.attrs.get("gpu_config") or {}
    if int(recorded.get("split_k", 1)) > 1:  # slices computed by the tiles, summed by the output (_split_dense)
        s = te.create_schedule([o.op for o in outs])
        inline_injective(s, outs)
        schedule_tiled(s, mm, mm, recorded, shared=True)
        flat_kernel(s, out)
        return s
    conf = config_for(m, n, k, cfg) if cfg is not None else recorded or config_for(m, n, k)
    s = te.create_schedule([o.op for o in outs])
    inline_injective(s, outs)
    schedule_tiled(s, mm, out, conf, shared=True)
    return s


schedule_matmul = schedule_dense
schedule_batch_matmul = schedule_dense


def _gemv_fits(outs, mm, k: int) -> bool:
    """One output, a reduction worth splitting, the product and its epilogue of the same shape."""
    out = outs[0]
    same = [int(getattr(d, "value", d)) for d in out.shape] == [int(getattr(d, "value", d)) for d in mm.shape]
    return len(outs) == 1 and k >= GEMV_MIN_K and same and len(mm.op.reduce_axis) == 1


def schedule_gemv(outs, mm):
    """Few rows: a warp of work-items per output element splits the reduction (module doc)."""
    out = outs[0]
    s = te.create_schedule([out.op])
    inline_injective(s, outs)
    st = s[out]
    total = 1
    for d in out.shape:
        total *= const_int(d)
    fused = st.fuse(*st.op.axis) if len(st.op.axis) > 1 else st.op.axis[0]
    rows = GEMV_ROWS if total >= 16 * GEMV_ROWS else 1
    bx, ty = st.split(fused, factor=rows)
    st.bind(bx, block("x"))
    if rows > 1:
        st.bind(ty, thread("y"))
    red = st
    if mm.op is not out.op:
        s[mm].compute_at(st, ty)
        s[mm].set_scope("local")
        red = s[mm]
    ko, ki = red.split(red.op.reduce_axis[0], factor=GEMV_LANES)
    red.bind(ki, thread("x"))
    # several weight loads in flight per work-item: the serial part of the reduction unrolled
    red.pragma(ko, "auto_unroll_max_step", 16)
    red.pragma(ko, "unroll_explicit", True)
    return s


def schedule_tiled(s, mm, out, conf, shared: bool = True, vector: bool = True) -> None:
    """The block / register tiling above. ``shared=False`` (Mali: local memory is ordinary
    memory there) reads A and B straight into registers; ``vector`` makes each row of the
    register tile one vector (``xi`` of 2, 4, 8 or 16 lanes): one vector load of B's slab per
    row of k, one vector FMA per row of the tile, one vector store per output row."""
    a, b = mm.op.input_tensors[:2]
    if mm.op is out.op:
        local = s.cache_write(mm, "local")
        output = mm
    else:
        s[mm].set_scope("local")
        local, output = mm, out
    st = s[output]
    *batch, y, x = st.op.axis
    by, vy, ty, yi = split_levels(st, y, conf["tile_y"])
    bx, vx, tx, xi = split_levels(st, x, conf["tile_x"])
    st.reorder(*batch, by, bx, vy, vx, ty, tx, yi, xi)
    if batch:
        bz = st.fuse(*batch) if len(batch) > 1 else batch[0]
        st.bind(bz, block("z"))
    st.bind(by, block("y"))
    st.bind(bx, block("x"))
    for v, size in ((vy, conf["tile_y"][1]), (vx, conf["tile_x"][1])):
        if size > 1:
            st.bind(v, te.thread_axis("vthread"))
    st.bind(ty, thread("y"))
    st.bind(tx, thread("x"))
    # Unroll the register tile (inner reduction and write-back), not the shared-memory fetches.
    unroll_pragmas(st, yi, conf)
    if vector and conf["tile_x"][3] in (2, 4, 8, 16):
        st.vectorize(xi)

    lt = s[local]
    lt.compute_at(st, tx)
    *_, ly, lx = lt.op.axis
    (rk,) = lt.op.reduce_axis
    ko, ki = split_levels(lt, rk, conf["tile_k"])
    lt.reorder(ko, ki, ly, lx)
    unroll_pragmas(lt, ki, conf)
    if knob(conf, "auto_unroll_max_step", 512):
        lt.unroll(ki)
        lt.unroll(ly)
    if vector and conf["tile_x"][3] in (2, 4, 8, 16):
        lt.vectorize(lx)
    if not shared:
        return
    # The register tile reads the shared slabs directly: with the tile unrolled, the OpenCL
    # compiler keeps each loaded value in a register for the yi (or xi) products that use it.
    aa = s.cache_read(a, "shared", [local])
    bb = s.cache_read(b, "shared", [local])
    s[aa].compute_at(lt, ko)
    s[bb].compute_at(lt, ko)
    from ..cuda.busy import pad_slab

    pad_slab(s[aa], mm, a)
    pad_slab(s[bb], mm, b)
    threads = [("threadIdx.y", conf["tile_y"][2]), ("threadIdx.x", conf["tile_x"][2])]
    for cache in (aa, bb):
        _fetch(s, cache, threads, int(conf.get("vec", 1)))


def _fetch(s, cache, threads, vec: int) -> None:
    st = s[cache]
    inner = const_int(st.op.axis[-1].dom.extent)
    if vec > 1 and inner % vec == 0:
        axes = list(st.op.axis)
        fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
        fused, v = st.split(fused, factor=vec)
        for tag, count in reversed(threads):
            if count > 1:
                fused, t = st.split(fused, factor=count)
                st.bind(t, te.thread_axis(tag))
        st.vectorize(v)
        return
    cooperative_fetch(s, cache, threads)
