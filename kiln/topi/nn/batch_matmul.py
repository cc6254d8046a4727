"""batch_matmul: ``out[b] = x[b] @ y[b].T`` (transpose_b=True, relay's default), batch 1 broadcasts."""

from __future__ import annotations

from kiln import te
from kiln.errors import ShapeError
from kiln.ir.expr import const

from ..utils import check_ndim, const_int


def batch_matmul(tensor_a, tensor_b, oshape=None, out_dtype=None, transpose_a=False, transpose_b=True):
    """tensor_a (B, M, K) [or (B, K, M)], tensor_b (B, N, K) [or (B, K, N) with transpose_b=False]."""
    del oshape
    check_ndim("batch_matmul", "tensor_a", tensor_a, 3, "B, M, K")
    check_ndim("batch_matmul", "tensor_b", tensor_b, 3, "B, N, K")
    out_dtype = out_dtype or str(tensor_a.dtype)
    ba, bb = const_int(tensor_a.shape[0]), const_int(tensor_b.shape[0])
    if ba != bb and 1 not in (ba, bb):
        raise ShapeError(f"batch_matmul: batch sizes {ba} ('tensor_a') and {bb} ('tensor_b') do not broadcast")
    m = tensor_a.shape[2] if transpose_a else tensor_a.shape[1]
    k = tensor_a.shape[1] if transpose_a else tensor_a.shape[2]
    n = tensor_b.shape[1] if transpose_b else tensor_b.shape[2]
    kb = tensor_b.shape[2] if transpose_b else tensor_b.shape[1]
    if const_int(k) != const_int(kb):
        raise ShapeError(f"batch_matmul: reduction sizes differ: 'tensor_a' has {k}, 'tensor_b' has {kb}")
    rk = te.reduce_axis((0, k), name="k")
    zero = const(0, "int32")

    def fcompute(b, i, j):
        b_a = zero if ba == 1 else b
        b_b = zero if bb == 1 else b
        x = tensor_a[b_a, rk, i] if transpose_a else tensor_a[b_a, i, rk]
        y = tensor_b[b_b, j, rk] if transpose_b else tensor_b[b_b, rk, j]
        return te.sum(x.astype(out_dtype) * y.astype(out_dtype), axis=rk)

    return te.compute((max(ba, bb), m, n), fcompute, name="T_batch_matmul", tag="batch_matmul",
                      attrs={"transpose_a": transpose_a, "transpose_b": transpose_b})
