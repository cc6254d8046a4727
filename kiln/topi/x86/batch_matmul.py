"""batch_matmul for x86 with dense's kernels: transpose_b=True (B, N, K) goes through dense's
dot tile (small M) or panel-packed GEMM; the plain (B, K, N) form is the GEMM directly (N is
already contiguous). Batch is fused into the parallel loop.

Knobs: as dense (``kernel``, ``tile_m``, ``tile_n``, ``lanes``).
"""

from __future__ import annotations

from kiln import te
from kiln.errors import ShapeError
from kiln.ir.expr import const

from ..nn.batch_matmul import batch_matmul as generic_batch_matmul
from ..utils import check_ndim, const_int, knob
from . import matmul_nn
from .dense import accumulation_dtype, dot_nt, narrowed, schedule_any_dot


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

    acc = accumulation_dtype(out_dtype)
    if transpose_b:
        return narrowed(dot_nt((max(ba, bb),), m, n, k, fa, lambda b, j, kk: tensor_b[zero if bb == 1 else b, j, kk],
                               acc, cfg, name="batch_matmul"), out_dtype)
    conf = matmul_nn.default_config(const_int(m), const_int(n), const_int(k))
    conf.update({key: knob(cfg, key, v) for key, v in conf.items()})
    conf["tile_k"] = knob(cfg, "tile_k", 0)
    return narrowed(matmul_nn.dot_nn((max(ba, bb),), m, n, k, fa,
                                     lambda b, kk, j: tensor_b[zero if bb == 1 else b, kk, j], acc, conf,
                                     "batch_matmul"), out_dtype)


def schedule_batch_matmul(outs, cfg=None):
    del cfg
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    s = te.create_schedule([o.op for o in outs])
    schedule_any_dot(s, outs[0])
    return s
