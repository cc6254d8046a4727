"""The register-tiled GEMM kernel behind dense and batch_matmul when M is not tiny.

    out[.., i, j] = sum_k a(.., i, k) * b(.., k, j)        (b contiguous along j)

A ``tile_m`` x ``tile_n`` tile of accumulators (``tile_n`` a multiple of the vector width) is
computed at the output's tile loop: per k it loads tile_n/lanes vectors of b and broadcasts tile_m
values of a. When b arrives as (N, K) (dense weights, batch_matmul with transpose_b) it is first
copied into column panels ``[.., N/tile_n, K, tile_n]`` so each k step reads one contiguous run;
that pass costs N*K against the kernel's M*N*K; relay.build does it once at build time for
constant weights (``prepack_weight`` in dense.py), so then the kernel reads the panels directly.

Work order: the parallel loop runs over (column panel, row tile) with the panel outermost, so a
thread walks down M with one panel of b (K x tile_n) in its L2 while rows of a stream by; a
transformer's M is the sequence length (64 to 1500), not a batch of 1.

Rows that ``tile_m`` does not divide (ViT's 197 tokens): the product is defined over M rounded
up to a multiple of ``tile_m`` (the extra rows read row M-1 again), and the output (M rows, with
its elementwise epilogue) is tiled like any other: each row tile computes a full ``tile_m``-row
tile of the product (constant extents, so the accumulators stay in registers; a guarded tail
tile of the product itself made LLVM keep them in memory: 2.5x slower for 197 rows), and only
the store of the last tile is guarded. Before, the padded product went to a buffer that the
output copied (3% of 197 x 768 x 768).

K blocking (knob ``tile_k``, default 0 = off): a task is a block of row tiles (``BLOCK_ROWS``
rows) of one panel; the reduction is split into blocks of ``tile_k`` outermost in the task, so
a block of the panel (tile_k x tile_n) is read by every row tile of the task from L1, and the
task's accumulators live in an L1 buffer between K blocks. Measured one thread against the
unblocked kernel (bench/gemm_shapes.py, Sapphire Rapids): equal for 64-128 rows, 5-15% slower for
197 and 1500 rows (A's rows are read in short runs of tile_k), so it is not the default.
"""

from __future__ import annotations

from kiln import te

from ..cpu import accumulator_rows, vector_lanes, vector_registers
from ..utils import const_int, with_default

NN_TAG = "matmul_nn"
PACK_TAG = "matmul_panel_pack"
UNPAD_TAG = f"{NN_TAG}_unpad,injective"


def default_config(m: int, n: int, k: int | None = None) -> dict:
    """Two vectors of columns; as many rows as keep the tile, a row of b and the broadcast of a in
    registers (``cpu.accumulator_rows``): up to 12x32 with AVX-512 (32 registers), 6x16 with AVX2
    (16); fewer rows where they divide M (``_rows_for``: 8 for 128 rows, 11 for 197).

    With AVX-512 (32 registers of 16 lanes), tiles of three and four vectors are candidates too (8x48 and 6x64 with
    AVX-512: 24 accumulators for 11 or 10 loads a k step, against 14 for 12x32): the one with
    the fewest loads per useful multiply-add, counting the rows and columns padded past M and N
    (``_tile_cost``). Measured one thread against onnxruntime's MatMul (bench/gemm_shapes.py):
    8x48 for 64 and 128 rows, 6x64 for 197 and 1500 (docs/topi.md). Not for K below
    ``WIDE_TILE_MIN_K`` (attention's batch_matmuls, K or N = 64: the wider tiles ran 1.05-1.23x
    slower for 64-197 rows, their fixed cost per tile weighing more against a short K);
    ``k=None`` (unknown) allows them."""
    lanes, regs = vector_lanes(), vector_registers()
    narrow = k is not None and k < WIDE_TILE_MIN_K
    if regs < 32 or lanes < 16 or n < 2 * lanes or narrow:  # wider tiles measured on AVX-512 only
        tile_n = 2 * lanes if n >= 2 * lanes else lanes
        vectors = tile_n // lanes
        most = max(1, min(accumulator_rows(vectors, regs), 12))
        return {"tile_m": _rows_for(m, most), "tile_n": tile_n}
    best = None
    for vectors in (2, 3, 4):
        rows = _rows_for(m, max(1, min(accumulator_rows(vectors, regs), 12)))
        cost = _tile_cost(m, n, rows, vectors * lanes, vectors)
        if best is None or cost < best[0] - 1e-9:
            best = (cost, {"tile_m": rows, "tile_n": vectors * lanes})
    return best[1]


WIDE_TILE_MIN_K = 256


def _tile_cost(m: int, n: int, rows: int, cols: int, vectors: int) -> float:
    """Loads (rows broadcasts + ``vectors`` vectors of b) per k step over the tile's multiply-adds,
    times the work padded past M and N, and 10% more when rows do not divide M (the padded rows'
    buffer and its copy; 6x64 over 132 rows ran 9% slower than 8x48 over 128): relative cost per
    useful multiply-add."""
    padded = (-(-m // rows) * rows / m) * (-(-n // cols) * cols / n) * (1.1 if m % rows else 1.0)
    return padded * (rows + vectors) / (rows * vectors)


def _rows_for(m: int, most: int) -> int:
    """Rows per tile: the largest divisor of m above most/2 + 1 (no padded rows); else the row
    count that costs least per useful row, counting the padded last tile and the tile's fixed
    loads (``tile_n`` vectors of b per k step, about two rows' worth of work)."""
    if m <= most:
        return max(m, 1)
    for r in range(most, most // 2 + 1, -1):
        if m % r == 0:
            return r
    return min(range(most, max(1, most // 2) - 1, -1), key=lambda r: -(-m // r) * r * (r + 2) / r)


def config_space(m: int, n: int, k: int | None = None) -> dict:
    lanes = vector_lanes()
    space = {"tile_m": [t for t in (1, 2, 4, 6, 8, 12) if t <= max(m, 1)],
             "tile_n": [lanes, 2 * lanes, 3 * lanes, 4 * lanes]}
    return with_default(space, default_config(m, n, k))


def pack_panels(batch: tuple, n, k, fb_nk, nr: int, name: str):
    """b given as fb_nk(*batch, j, k) -> panels[*batch, ceil(N/nr), K, nr] (zero past N)."""
    from kiln import tir
    from kiln.ir.expr import const

    from ..utils import const_int

    ni = const_int(n)
    chunks = -(-ni // nr)

    def fpack(*idx):
        *b, jo, kk, ji = idx
        j = jo * nr + ji
        if ni % nr == 0:
            return fb_nk(*b, j, kk)
        value = fb_nk(*b, tir.min(j, ni - 1), kk)
        return tir.if_then_else(j < ni, value, const(0, value.dtype))

    return te.compute(tuple(batch) + (chunks, k, nr), fpack, name=f"{name}_panels", tag=PACK_TAG)


def dot_nn(batch: tuple, m, n, k, fa, fb_kn, out_dtype: str, conf: dict, name: str):
    from kiln import tir

    from ..utils import const_int

    rk = te.reduce_axis((0, k), name="k")
    mi, tm = const_int(m), int(conf["tile_m"])
    rows = -(-mi // tm) * tm

    def row(i):
        return i if rows == mi else tir.min(i, mi - 1)

    def fcompute(*idx):
        *b, i, j = idx
        return te.sum(fa(*b, row(i), rk.var).astype(out_dtype) * fb_kn(*b, rk.var, j).astype(out_dtype), axis=rk)

    mm = te.compute(tuple(batch) + (rows, n), fcompute, name=f"T_{name}" if rows == mi else f"T_{name}_rows",
                    tag=NN_TAG, attrs={"config": conf, "padded_rows": rows != mi})
    if rows == mi:
        return mm
    return te.compute(tuple(batch) + (m, n), lambda *idx: mm(*idx), name=f"T_{name}", tag=UNPAD_TAG)


def dot_nt_packed(batch: tuple, m, n, k, fa, fb_nk, out_dtype: str, conf: dict, name: str):
    """dot_nn over b = fb_nk transposed, through column panels of width tile_n."""
    nr = conf["tile_n"]
    panels = pack_panels(batch, n, k, fb_nk, nr, name)
    return dot_nn(batch, m, n, k, fa, lambda *idx: panels(*idx[:-2], idx[-1] // nr, idx[-2], idx[-1] % nr),
                  out_dtype, conf, name)


def schedule_nn_tile(s, mm, out):
    """out: mm itself or an elementwise epilogue with mm's shape (see injective.tile_root)."""
    conf = mm.op.attrs["config"]
    mm_stage = s[s.cache_write(out, "local")] if mm.op is out.op else s[mm]
    _tile(s, s[out], mm_stage, conf)
    _schedule_pack(s, mm)


def _tile(s, st, mm_stage, conf):
    lanes = vector_lanes()
    *batch, i, j = st.op.axis
    tm = conf["tile_m"]
    io, jo, ii, ji = st.tile(i, j, tm, conf["tile_n"])
    tk = conf.get("tile_k") or 0
    (rk,) = mm_stage.op.reduce_axis
    fused = None
    if tk:  # K blocking (module docstring): a block of row tiles per task
        ioo, ioi = st.split(io, factor=_tiles_per_block(const_int(i.dom.extent), tm))
        st.reorder(*batch, jo, ioo, ioi, ii, ji)
        st.parallel(st.fuse(*batch, jo, ioo))
    else:
        st.reorder(*batch, jo, io, ii, ji)  # a panel of b outermost: it stays in cache down M
        fused = st.fuse(*batch, jo, io)
        st.parallel(fused)
    st.vectorize(st.split(ji, factor=lanes)[1])
    mm_stage.compute_at(st, _parallel_axis(st))
    *_, ci, cj = mm_stage.op.axis
    if tk:
        cio, ci = mm_stage.split(ci, factor=tm)
        ko, rk = mm_stage.split(rk, factor=tk)
        mm_stage.reorder(ko, cio, rk, ci, cj)
    else:
        mm_stage.reorder(rk, ci, cj)
        panels = _panels_read(mm_stage.op, conf["tile_n"])
        if conf.get("prefetch") and not batch and panels is not None:
            tiles = -(-const_int(i.dom.extent) // tm)
            mm_stage.pragma(rk, "prefetch", _next_panel_lines(panels, fused.var, rk.var, tiles))
    mm_stage.unroll(ci)
    cjo, cji = mm_stage.split(cj, factor=lanes)
    mm_stage.unroll(cjo)
    mm_stage.vectorize(cji)


def prefetch_default(m: int, k: int, tile_n: int, batched: bool = False, elem_bytes: int = 4,
                     tile_m: int = 8) -> int:
    """1 when the kernel should prefetch the next column panel (``_next_panel_lines``): not
    batched, at most ``PREFETCH_MAX_TILES`` row tiles per panel (with more, the first tile's
    wait for the panel is a small part of the panel's time, and the prefetches in every step
    cost 3-7%: 1500 rows) and two panels within the target's L2 budget (``PREFETCH_L2_BYTES``
    with 32 vector registers, else ``PREFETCH_L2_BYTES_SMALL``)."""
    if batched or -(-m // max(1, tile_m)) > PREFETCH_MAX_TILES:
        return 0
    budget = PREFETCH_L2_BYTES if vector_registers() >= 32 else PREFETCH_L2_BYTES_SMALL
    return int(2 * k * tile_n * elem_bytes <= budget)


PREFETCH_MAX_TILES = 48
# A budget within the L2 of AVX-512-class cores (1-2 MiB; 32 vector registers stand for them):
# two panels of K = 3072 (1.1 MiB with 48 columns, 1.5 MiB with 64). Measured on Sapphire Rapids
# (2 MiB L2) only: with weights streaming from memory, 128 x 3072 x 768 1.06x -> 0.93x
# onnxruntime, 64 x 3072 x 768 1.13x -> 0.96x, 197 x 3072 x 768 1.02x -> 1.01x.
PREFETCH_L2_BYTES = 3 << 19
PREFETCH_L2_BYTES_SMALL = 256 << 10  # other targets (AVX2: 256 KiB - 1 MiB of L2)


def _panels_read(op, tile_n: int):
    """The (N/tile_n, K, tile_n) panel tensor the GEMM stage reads, or None."""
    for t in op.input_tensors:
        if len(t.shape) == 3 and const_int(t.shape[2]) == tile_n:
            return t
    return None


def _next_panel_lines(panels, task, k, tiles: int) -> list:
    """Loads naming the lines of the next column panel that k step ``k`` of row tile
    ``task % tiles`` of panel ``task // tiles`` asks for: the row tiles of a panel share the
    next panel's lines in order, ceil(tile_n / tiles) values a step (a line every few steps,
    one prefetch a step at most, where a prefetch of every line of the next panel at every step
    cost 3-8% for 197 and more rows; an address divided by the tile count each step cost 14
    integer instructions beside the tile's 24 FMAs). Weights that stream from memory (a model's layers, larger
    than the caches) then arrive before their panel starts: one thread, 64 x 768 x 2304 with
    30 weights in turn, 1.01x -> 0.88x onnxruntime's time."""
    from kiln import tir
    from kiln.ir.dtype import dtype

    chunks, kk, nr = (const_int(d) for d in panels.shape)
    jo, io = task // tiles, task % tiles
    nxt = tir.min(jo + 1, chunks - 1)
    step = -(-nr // tiles)  # values a step: the tiles' runs together cover the panel
    f = (io * kk + k) * step  # no division in the loop: LLVM adds `step` a k step
    line = 64 // dtype(panels.dtype).bytes  # values of a 64-byte cache line
    per_step = -(-step // line)
    elems = [tir.min(f + c * line, kk * nr - 1) for c in range(per_step)]  # within the panel
    return [panels[nxt, e // nr, e % nr] for e in elems]


BLOCK_ROWS = 64  # rows of a K-blocked task (knob tile_k): its accumulators stay in L1


def _tiles_per_block(rows: int, tm: int) -> int:
    """Row tiles per task: the largest divisor of the tile count up to BLOCK_ROWS rows (a divisor:
    no guarded tail block)."""
    tiles = -(-rows // tm)
    per = max(1, BLOCK_ROWS // tm)
    return max(d for d in range(1, min(per, tiles) + 1) if tiles % d == 0)


def _schedule_pack(s, mm):
    for t in mm.op.input_tensors:
        if t.op.tag == PACK_TAG:
            st = s[t]
            *pb, jo_, kk, ji_ = st.op.axis
            st.parallel(st.fuse(*pb, jo_))
            st.vectorize(ji_)


def _parallel_axis(stage):
    for iv in stage.leaf_iter_vars:
        if stage.kinds.get(iv) == "parallel":
            return iv
    return stage.leaf_iter_vars[0]
