"""Index-driven data movement: gather_nd, scatter_nd, scatter_elements, and cumsum.

Scatters are written as gathers: each output element searches the update positions that land on
it (a reduction over them). That is O(output x updates) but needs no in-place writes, so it is an
ordinary TE compute any schedule can lower; duplicate positions resolve in update order ("none":
the last update wins, as onnxruntime does) or are combined by the reduction.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.dtype import dtype as _dtype
from kiln.ir.expr import const

from .utils import const_int

I32 = "int32"


def _wrap(raw, n):
    """Index ``raw`` (any int dtype) as int32, negatives counted from the end of an axis of size n."""
    raw = raw.astype(I32)
    return tir.if_then_else(raw < const(0, I32), raw + n, raw)


def _unflatten(flat, shape) -> list:
    """The multi-index of row-major position ``flat`` in ``shape``."""
    out = []
    for d in reversed(shape):
        out.append(tir.floormod(flat, d))
        flat = tir.floordiv(flat, d)
    return out[::-1]


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= const_int(d)
    return n


def gather_nd(data, indices, batch_dims: int = 0):
    """ONNX GatherND: the last axis of ``indices`` addresses the leading axes of ``data`` after
    ``batch_dims`` shared batch axes."""
    b = batch_dims
    k = const_int(indices.shape[-1])
    idx_lead = tuple(indices.shape[:-1])
    shape = idx_lead + tuple(data.shape[b + k:])
    nl = len(idx_lead)

    def fcompute(*o):
        lead, rest = o[:nl], o[nl:]
        picked = [_wrap(indices(*lead, const(j, I32)), data.shape[b + j]) for j in range(k)]
        return data(*lead[:b], *picked, *rest)

    return te.compute(shape, fcompute, name="T_gather_nd", tag="injective")


def _identity(reduction: str, dtype: str):
    dt = _dtype(dtype)
    if reduction in ("add", "none"):
        return const(0, dtype)
    if reduction == "mul":
        return const(1, dtype)
    if reduction == "max":
        return const(float("-inf"), dtype) if dt.is_float else tir.min_value(dtype)
    return tir.infinity(dtype) if dt.is_float else tir.max_value(dtype)


_REDUCERS = {"add": te.sum, "mul": te.prod, "max": te.max, "min": te.min}


def _combine(reduction: str, a, b):
    return {"add": lambda: a + b, "mul": lambda: a * b, "max": lambda: tir.max(a, b),
            "min": lambda: tir.min(a, b)}[reduction]()


def _scatter(data, shape_q, match, update, reduction: str, name: str):
    """out[i] = data[i] combined with every update q (over ``shape_q``) with ``match(i, q)``."""
    dtype = str(data.dtype)
    nq = _prod(shape_q)
    if reduction == "none":
        r = te.reduce_axis((0, nq), name="q")

        def last(*i):
            q = _unflatten(r.var, shape_q)
            return te.max(tir.if_then_else(match(i, q), r.var, const(-1, I32)), axis=r)

        winner = te.compute(tuple(data.shape), last, name=f"{name}_last")

        def pick(*i):
            w = winner(*i)
            q = _unflatten(tir.max(w, const(0, I32)), shape_q)
            return tir.if_then_else(w >= const(0, I32), update(i, q), data(*i))

        return te.compute(tuple(data.shape), pick, name=name, tag="scatter")

    r = te.reduce_axis((0, nq), name="q")

    def gathered(*i):
        q = _unflatten(r.var, shape_q)
        return _REDUCERS[reduction](tir.if_then_else(match(i, q), update(i, q), _identity(reduction, dtype)), axis=r)

    acc = te.compute(tuple(data.shape), gathered, name=f"{name}_acc")
    return te.compute(tuple(data.shape), lambda *i: _combine(reduction, data(*i), acc(*i)), name=name, tag="scatter")


def scatter_nd(data, indices, updates, reduction: str = "none"):
    """ONNX ScatterND: ``indices[q]`` (last axis k) addresses data[:k]; updates[q] is the slice."""
    k = const_int(indices.shape[-1])
    shape_q = [const_int(d) for d in indices.shape[:-1]]

    def match(i, q):
        return tir.all(*[_wrap(indices(*q, const(j, I32)), data.shape[j]) == i[j] for j in range(k)])

    def update(i, q):
        return updates(*q, *i[k:])

    return _scatter(data, shape_q, match, update, reduction, "T_scatter_nd")


def scatter_elements(data, indices, updates, axis: int = 0, reduction: str = "none"):
    """ONNX ScatterElements: out[.., indices[p], ..] (at ``axis``) = updates[p] for every p."""
    ndim = len(data.shape)
    axis = axis % ndim
    ishape = [const_int(d) for d in indices.shape]
    n = data.shape[axis]

    def at(i, j):
        # other coordinates of i clamped into indices' extent; `inside` rejects the clamped ones
        return [j if d == axis else tir.min(i[d], const(ishape[d] - 1, I32)) for d in range(ndim)]

    def inside(i):
        return tir.all(*[i[d] < const(ishape[d], I32) for d in range(ndim) if d != axis] or [const(True, "bool")])

    def match(i, q):
        return tir.all(inside(i), _wrap(indices(*at(i, q[0])), n) == i[axis])

    def update(i, q):
        return updates(*at(i, q[0]))

    return _scatter(data, [ishape[axis]], match, update, reduction, "T_scatter_elements")


def cumsum(data, axis: int = 0, exclusive: bool = False, reverse: bool = False):
    """ONNX CumSum along ``axis`` (exclusive leaves out the element itself; reverse sums from the end)."""
    ndim = len(data.shape)
    axis = axis % ndim
    r = te.reduce_axis((0, data.shape[axis]), name="j")
    zero = const(0, str(data.dtype))

    def fcompute(*i):
        j, here = r.var, i[axis]
        keep = (j > here if exclusive else j >= here) if reverse else (j < here if exclusive else j <= here)
        src = list(i)
        src[axis] = j
        return te.sum(tir.if_then_else(keep, data(*src), zero), axis=r)

    return te.compute(tuple(data.shape), fcompute, name="T_cumsum", tag="cumsum")


def cumprod(data, axis: int = 0, exclusive: bool = False, reverse: bool = False):
    """ONNX CumProd along ``axis``: the running product (exclusive leaves out the element itself,
    reverse multiplies from the end)."""
    ndim = len(data.shape)
    axis = axis % ndim
    r = te.reduce_axis((0, data.shape[axis]), name="j")
    one = const(1, str(data.dtype))

    def fcompute(*i):
        j, here = r.var, i[axis]
        keep = (j > here if exclusive else j >= here) if reverse else (j < here if exclusive else j <= here)
        src = list(i)
        src[axis] = j
        return te.prod(tir.if_then_else(keep, data(*src), one), axis=r)

    return te.compute(tuple(data.shape), fcompute, name="T_cumprod", tag="cumprod")
