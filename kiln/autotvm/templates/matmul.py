"""A tunable fp32 matmul: the schedule of examples/matmul_schedule.py with its sizes as knobs.

Knobs: ``tile_x`` (N into panels of nr, the vectorized width), ``tile_y`` (M into outer tiles,
row blocks that reuse one B panel from cache, and mr register rows), ``tile_k`` (k unrolled by
ku), ``order`` (whether column panels or row tiles are the outer loop).
"""

from __future__ import annotations

from kiln import te

from ..space import SplitEntity
from ..task import get_config, template

# Panel widths that are whole vectors on x86 (AVX2: 8 floats, AVX-512: 16).
_PANEL_WIDTHS = (8, 16, 32, 48, 64, 96, 128)


@template("kiln/matmul")
def matmul(M: int, N: int, K: int, dtype: str = "float32"):
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    cfg = get_config()
    cfg.define_split("tile_x", N, num_outputs=2, filter=lambda e: e.size[-1] in _PANEL_WIDTHS)
    # mr rows x nr columns of accumulators must fit the register file.
    cfg.define_split("tile_y", M, num_outputs=3, filter=lambda e: e.size[-1] <= 16)
    cfg.define_split("tile_k", K, num_outputs=2, filter=lambda e: e.size[-1] <= 8)
    cfg.define_knob("order", ["panel_outer", "row_outer"])
    if cfg.is_fallback:
        cfg["tile_x"] = SplitEntity([-1, 32 if N % 32 == 0 else 1])
        cfg["tile_y"] = SplitEntity([-1, 1, 8 if M % 8 == 0 else 1])
        cfg["tile_k"] = SplitEntity([-1, 1])
    nr = cfg["tile_x"].size[-1]
    if N % nr:
        nr = 1
    packed = te.compute((N // nr, K, nr), lambda jo, k, ji: B[k, jo * nr + ji], name="packedB")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * packed[j // nr, k, j % nr], axis=k),
                   name="C")
    cfg.add_flop(2.0 * M * N * K)

    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, ii, mr = cfg["tile_y"].apply(s, C, i)
    jo, nr_axis = s[C].split(j, factor=nr)
    if cfg["order"].val == "panel_outer":
        s[C].reorder(jo, io, ii, mr, nr_axis)
        outer = s[C].fuse(jo, io)
    else:
        s[C].reorder(io, jo, ii, mr, nr_axis)
        outer = s[C].fuse(io, jo)
    s[C].parallel(outer)
    s[C].vectorize(nr_axis)
    s[CC].compute_at(s[C], ii)
    xc, yc = s[CC].op.axis
    (kk,) = s[CC].op.reduce_axis
    ko, ki = cfg["tile_k"].apply(s, CC, kk)
    s[CC].reorder(ko, ki, xc, yc)
    s[CC].unroll(ki)
    s[CC].unroll(xc)
    s[CC].vectorize(yc)
    po, _, pi = s[packed].op.axis
    s[packed].vectorize(pi)
    s[packed].parallel(po)
    return s, [A, B, C]
