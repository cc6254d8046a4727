"""layer_norm over the last axis for x86: vectorized row sums (see softmax.py), one parallel
loop over rows, every intermediate of a row kept at that row.

    mean = sum(x) / n      d = x - mean      var = sum(d * d) / n      out = d * rsqrt(var + eps) * gamma + beta

Other axis choices fall back to the generic compute and schedule.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.expr import const

from ..cpu import vector_lanes
from ..nn.layer_norm import layer_norm as _generic_layer_norm
from ..reduction import normalize_axes
from ..utils import const_int
from .softmax import _row_reduce, schedule_rows

TAG = "layer_norm_rows"


def layer_norm(data, gamma, beta, axis=-1, epsilon=1e-5):
    """Same result as topi.nn.layer_norm."""
    ndim = len(data.shape)
    axes = normalize_axes(ndim, axis, op="layer_norm")
    n = const_int(data.shape[-1])
    lanes = vector_lanes()
    if axes != [ndim - 1] or n < lanes or not str(data.dtype).startswith("float"):
        return _generic_layer_norm(data, gamma, beta, axis, epsilon)
    inv_n = const(1.0 / n, data.dtype)
    total = _row_reduce(data, n, lanes, te.sum, "T_ln_sum", TAG)
    diff = te.compute(data.shape, lambda *i: data(*i) - total(*i[:-1]) * inv_n, name="T_ln_diff", tag=f"{TAG}_exp")
    sq = te.compute(data.shape, lambda *i: diff(*i) * diff(*i), name="T_ln_sq", tag="elemwise")
    sqsum = _row_reduce(sq, n, lanes, te.sum, "T_ln_sqsum", TAG)
    eps = const(epsilon, data.dtype)

    def fout(*i):
        v = diff(*i) * tir.rsqrt(sqsum(*i[:-1]) * inv_n + eps)
        if gamma is not None:
            v = v * gamma(i[-1])
        if beta is not None:
            v = v + beta(i[-1])
        return v

    return te.compute(data.shape, fout, name="T_layer_norm", tag=TAG)


def schedule_layer_norm(outs, cfg=None):
    del cfg
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    if outs[0].op.tag != TAG:
        from ..generic.default import default_schedule

        return default_schedule(outs)
    s = schedule_rows(outs, TAG)
    return s
