"""int8 dense (``(M, K) x (N, K) -> (M, N)`` int32) on Cortex-M, the dot product tensorized.

The schedule splits the reduction by the tier's width (4 bytes for the DSP's ``__smlad``, 16
for MVE's ``vmladavaq_s8``) and the output columns by ``rows``, and tensorizes the ``rows x
width`` tile (kiln/topi/cortex_m/intrin.py): the data word is loaded once per ``rows``
accumulators. ``rows`` is a knob (AutoTVM's ``tile_n``); ``tier=None`` is the naive schedule
(plain loops, the compiler's ``mla``). A 1x1 NHWC conv is this op with ``M = H * W``.
"""

from __future__ import annotations

from kiln import te

from .intrin import WIDTH, dot_intrin


def dense_int8(data, weight):
    """int32 ``sum_k data[m, k] * weight[n, k]`` of int8 ``data`` (M, K) and ``weight`` (N, K)."""
    m, k = (int(v) for v in data.shape)
    n, k2 = (int(v) for v in weight.shape)
    if k != k2 or data.dtype != "int8" or weight.dtype != "int8":
        raise ValueError(f"cortex-m dense_int8: data {data.shape} {data.dtype} and weight {weight.shape} "
                         f"{weight.dtype}: expected int8 (M, K) and int8 (N, K)")
    r = te.reduce_axis((0, k), name="k")
    return te.compute((m, n), lambda i, j: te.sum(data[i, r].astype("int32") * weight[j, r].astype("int32"), axis=r),
                      name="dense_int8")


def usable(tier: str | None, k: int) -> bool:
    """Whether the tier's intrinsic tiles a reduction of ``k``."""
    return tier is not None and k % WIDTH[tier] == 0


def schedule_dense_int8(out, tier: str | None, rows: int = 1, local: bool = True):
    """Schedule of ``dense_int8``'s result: ``tier`` "dsp" / "mve" tensorized with ``rows``
    accumulators per data slice, or None for plain loops. ``local``: the ``rows`` sums live in a
    local array (registers, once the C compiler scalarizes it) and are stored once; else each
    update reads and writes the output, which an int8 pointer may alias."""
    s = te.create_schedule(out.op)
    n, k = int(out.shape[1]), int(out.op.reduce_axis[0].dom.extent)
    if not usable(tier, k):
        return s
    if n % rows:
        raise ValueError(f"cortex-m dense_int8: rows={rows} does not divide the {n} output columns")
    acc = out
    if local:
        acc = s.cache_write(out, "local")
        i, j = s[out].op.axis
        jo, ji = s[out].split(j, factor=rows)
        s[out].unroll(ji)
        s[acc].compute_at(s[out], jo)
    i, j = s[acc].op.axis
    (r,) = s[acc].op.reduce_axis
    ro, ri = s[acc].split(r, factor=WIDTH[tier])
    jo, ji = s[acc].split(j, factor=rows)
    s[acc].reorder(i, jo, ro, ji, ri)
    s[acc].tensorize(ji, dot_intrin(tier, rows))
    return s


__all__ = ["dense_int8", "schedule_dense_int8", "usable"]
