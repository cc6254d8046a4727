"""batch_matmul for x86: the transpose_b=True form reuses dense's vector dot tile; the plain
(B, K, N) form vectorizes along N (contiguous in the second operand) with a register tile.

Knobs: as dense (``tile_m``, ``tile_n``, ``lanes``) for transpose_b=True; ``tile_m`` and
``tile_n`` (a multiple of the vector width) for transpose_b=False.
"""

from __future__ import annotations

from kiln import te
from kiln.errors import ShapeError
from kiln.ir.expr import const

from ..cpu import vector_lanes
from ..nn.batch_matmul import batch_matmul as generic_batch_matmul
from ..utils import check_ndim, const_int, knob
from .conv2d import find_tagged
from .dense import TAG as DOT_TAG, dot_nt, schedule_dot_tile
from .injective import tile_root

NN_TAG = "batch_matmul_nn"


def batch_matmul(tensor_a, tensor_b, oshape=None, out_dtype=None, transpose_a=False, transpose_b=True, cfg=None):
    """Same result as topi.nn.batch_matmul; schedule with ``schedule_batch_matmul``."""
    del oshape
    check_ndim("batch_matmul", "tensor_a", tensor_a, 3, "B, M, K")
    check_ndim("batch_matmul", "tensor_b", tensor_b, 3, "B, N, K")
    out_dtype = out_dtype or str(tensor_a.dtype)
    if transpose_a:
        # Rare in models; the generic compute with the default schedule is correct.
        return generic_batch_matmul(tensor_a, tensor_b, None, out_dtype, transpose_a, transpose_b)
    ba, bb = const_int(tensor_a.shape[0]), const_int(tensor_b.shape[0])
    if ba != bb and 1 not in (ba, bb):
        raise ShapeError(f"batch_matmul: batch sizes {ba} ('tensor_a') and {bb} ('tensor_b') do not broadcast")
    zero = const(0, "int32")
    m, k = tensor_a.shape[1], tensor_a.shape[2]
    n = tensor_b.shape[1] if transpose_b else tensor_b.shape[2]
    kb = tensor_b.shape[2] if transpose_b else tensor_b.shape[1]
    if const_int(k) != const_int(kb):
        raise ShapeError(f"batch_matmul: reduction sizes differ: 'tensor_a' has {k}, 'tensor_b' has {kb}")

    def fa(b, i, kk):
        return tensor_a[zero if ba == 1 else b, i, kk]

    if transpose_b:
        return dot_nt((max(ba, bb),), m, n, k, fa, lambda b, j, kk: tensor_b[zero if bb == 1 else b, j, kk],
                      out_dtype, cfg, name="batch_matmul")
    lanes = vector_lanes()
    conf = {"tile_m": 4, "tile_n": 2 * lanes if const_int(n) >= 2 * lanes else lanes}
    conf.update({key: knob(cfg, key, v) for key, v in conf.items()})
    rk = te.reduce_axis((0, k), name="k")
    return te.compute((max(ba, bb), m, n), lambda b, i, j: te.sum(
        fa(b, i, rk).astype(out_dtype) * tensor_b[zero if bb == 1 else b, rk, j].astype(out_dtype), axis=rk),
        name="T_batch_matmul", tag=NN_TAG, attrs={"config": conf})


def schedule_batch_matmul(outs, cfg=None):
    del cfg
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    out = outs[0]
    try:
        dot = find_tagged(out, DOT_TAG)
    except ValueError:
        dot = None
    if dot is not None:
        schedule_dot_tile(s, dot, out)
        return s
    mm = find_tagged(out, NN_TAG)
    conf = mm.op.attrs["config"]
    out = tile_root(s, out, mm, mm)
    if mm.op is out.op:
        acc = s.cache_write(out, "local")
        mm_stage = s[acc]
    else:
        mm_stage = s[mm]
    b, i, j = s[out].op.axis
    io, jo, ii, ji = s[out].tile(i, j, conf["tile_m"], conf["tile_n"])
    s[out].parallel(s[out].fuse(b, io, jo))
    lanes = vector_lanes()
    s[out].vectorize(s[out].split(ji, factor=lanes)[1])
    mm_stage.compute_at(s[out], s[out].leaf_iter_vars[0])
    _, ci, cj = mm_stage.op.axis
    (rk,) = mm_stage.op.reduce_axis
    mm_stage.reorder(rk, ci, cj)
    mm_stage.unroll(ci)
    cjo, cji = mm_stage.split(cj, factor=lanes)
    mm_stage.unroll(cjo)
    mm_stage.vectorize(cji)
    return s
