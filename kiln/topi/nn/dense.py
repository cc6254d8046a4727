"""dense (a fully connected layer): ``out = data @ weight.T + bias``."""

from __future__ import annotations

from kiln import te

from ..utils import check_ndim, const_int


def dense(data, weight, bias=None, out_dtype=None):
    """data (M, K), weight (N, K), optional bias (N,): ``topi.nn.dense(x, w, b, out_dtype="float32")``."""
    check_ndim("dense", "data", data, 2, "M, K")
    check_ndim("dense", "weight", weight, 2, "N, K")
    out_dtype = out_dtype or str(data.dtype)
    m, k = data.shape
    n, k2 = weight.shape
    if const_int(k) != const_int(k2):
        from kiln.errors import ShapeError

        raise ShapeError(f"dense: input 'data' has K={k} but 'weight' has K={k2} (weight is (units, K))")
    rk = te.reduce_axis((0, k), name="k")
    out = te.compute((m, n), lambda i, j: te.sum(data[i, rk].astype(out_dtype) * weight[j, rk].astype(out_dtype), axis=rk),
                     name="T_dense", tag="dense")
    return add_bias(out, bias, 1)


def add_bias(out, bias, axis):
    """out + bias broadcast along axis (a separate stage the schedules inline into their tile)."""
    if bias is None:
        return out
    check_ndim("bias_add", "bias", bias, 1)
    return te.compute(out.shape, lambda *i: out(*i) + bias[i[axis]].astype(out.dtype), name="T_bias_add", tag="broadcast")


def matmul(a, b, bias=None, out_dtype=None, transpose_a=False, transpose_b=False):
    """a @ b for 2-D tensors, each optionally transposed."""
    out_dtype = out_dtype or str(a.dtype)
    m = a.shape[1] if transpose_a else a.shape[0]
    k = a.shape[0] if transpose_a else a.shape[1]
    n = b.shape[0] if transpose_b else b.shape[1]
    rk = te.reduce_axis((0, k), name="k")

    def fcompute(i, j):
        x = a[rk, i] if transpose_a else a[i, rk]
        y = b[j, rk] if transpose_b else b[rk, j]
        return te.sum(x.astype(out_dtype) * y.astype(out_dtype), axis=rk)

    return add_bias(te.compute((m, n), fcompute, name="T_matmul", tag="matmul"), bias, 1)
