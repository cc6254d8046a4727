"""The register-tiled GEMM kernel behind dense and batch_matmul when M is not tiny.

    out[.., i, j] = sum_k a(.., i, k) * b(.., k, j)        (b contiguous along j)

A ``tile_m`` x ``tile_n`` tile of accumulators (``tile_n`` a multiple of the vector width) is
computed at the output's tile loop: per k it loads tile_n/lanes vectors of b and broadcasts tile_m
values of a. When b arrives as (N, K) (dense weights, batch_matmul with transpose_b) it is first
copied into column panels ``[.., N/tile_n, K, tile_n]`` so each k step reads one contiguous run;
that pass costs N*K against the kernel's M*N*K.
"""

from __future__ import annotations

from kiln import te

from ..cpu import tile_fits, vector_lanes, vector_registers
from ..utils import with_default

NN_TAG = "matmul_nn"
PACK_TAG = "matmul_panel_pack"


def default_config(m: int, n: int) -> dict:
    """Two vectors of columns; as many rows (at most 8) as keep the tile, a row of b and the
    broadcast of a in registers: 8x32 with AVX-512 (19 of 32), 6x16 with AVX2 (15 of 16)."""
    lanes, regs = vector_lanes(), vector_registers()
    tile_n = 2 * lanes if n >= 2 * lanes else lanes
    vectors = tile_n // lanes
    tile_m = next((r for r in range(8, 0, -1) if tile_fits(r, vectors, regs)), 1)
    return {"tile_m": min(tile_m, m), "tile_n": tile_n}


def config_space(m: int, n: int) -> dict:
    lanes = vector_lanes()
    space = {"tile_m": [t for t in (1, 2, 4, 6, 8, 12) if t <= max(m, 1)],
             "tile_n": [lanes, 2 * lanes, 3 * lanes, 4 * lanes]}
    return with_default(space, default_config(m, n))


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
    rk = te.reduce_axis((0, k), name="k")

    def fcompute(*idx):
        *b, i, j = idx
        return te.sum(fa(*b, i, rk.var).astype(out_dtype) * fb_kn(*b, rk.var, j).astype(out_dtype), axis=rk)

    return te.compute(tuple(batch) + (m, n), fcompute, name=f"T_{name}", tag=NN_TAG, attrs={"config": conf})


def dot_nt_packed(batch: tuple, m, n, k, fa, fb_nk, out_dtype: str, conf: dict, name: str):
    """dot_nn over b = fb_nk transposed, through column panels of width tile_n."""
    nr = conf["tile_n"]
    panels = pack_panels(batch, n, k, fb_nk, nr, name)
    return dot_nn(batch, m, n, k, fa, lambda *idx: panels(*idx[:-2], idx[-1] // nr, idx[-2], idx[-1] % nr),
                  out_dtype, conf, name)


def schedule_nn_tile(s, mm, out):
    """out: mm itself or an elementwise epilogue with mm's shape (see injective.tile_root)."""
    conf = mm.op.attrs["config"]
    lanes = vector_lanes()
    mm_stage = s[s.cache_write(out, "local")] if mm.op is out.op else s[mm]
    *batch, i, j = s[out].op.axis
    io, jo, ii, ji = s[out].tile(i, j, conf["tile_m"], conf["tile_n"])
    s[out].parallel(s[out].fuse(*batch, io, jo))
    s[out].vectorize(s[out].split(ji, factor=lanes)[1])
    mm_stage.compute_at(s[out], _parallel_axis(s[out]))
    *_, ci, cj = mm_stage.op.axis
    (rk,) = mm_stage.op.reduce_axis
    mm_stage.reorder(rk, ci, cj)
    mm_stage.unroll(ci)
    cjo, cji = mm_stage.split(cj, factor=lanes)
    mm_stage.unroll(cjo)
    mm_stage.vectorize(cji)
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
