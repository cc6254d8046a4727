"""Reductions over axes: sum, max, min, prod, mean, all, any, argmax, argmin.

``axis`` is None (all axes), an int or a list of ints (negative counts from the end);
``keepdims`` keeps reduced axes as size 1; ``exclude`` reduces every axis *not* listed.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.errors import ShapeError
from kiln.ir.dtype import dtype as _dtype
from kiln.ir.expr import const


def normalize_axes(ndim: int, axis, exclude: bool = False, op: str = "reduce") -> list[int]:
    if axis is None:
        axes = list(range(ndim))
    else:
        raw = [axis] if isinstance(axis, int) else list(axis)
        axes = []
        for a in raw:
            if not -ndim <= a < ndim:
                raise ShapeError(f"{op}: axis {a} is out of range for input 'data' with {ndim} dims")
            axes.append(a % ndim)
        axes = sorted(set(axes))
    if exclude:
        axes = [a for a in range(ndim) if a not in axes]
    return axes


def _reduce(data, axis, keepdims, exclude, reducer, name, map_value=None):
    ndim = len(data.shape)
    axes = normalize_axes(ndim, axis, exclude, name)
    raxes = {a: te.reduce_axis((0, data.shape[a]), name=f"k{a}") for a in axes}
    out_shape = [(1 if keepdims else None) if a in raxes else data.shape[a] for a in range(ndim)]
    out_shape = [s for s in out_shape if s is not None]

    def fcompute(*idx):
        it = iter(idx)
        src = []
        for a in range(ndim):
            if a in raxes:
                if keepdims:
                    next(it)
                src.append(raxes[a].var)
            else:
                src.append(next(it))
        value = data(*src)
        if map_value is not None:
            value = map_value(value)
        if not raxes:
            return value
        return reducer(value, axis=[raxes[a] for a in axes])

    return te.compute(tuple(out_shape), fcompute, name=f"T_{name}", tag="comm_reduce" if raxes else "elemwise"), axes


def sum(data, axis=None, keepdims=False, exclude=False):  # noqa: A001
    """Sum over axes: ``topi.sum(x, axis=1, keepdims=True)``."""
    return _reduce(data, axis, keepdims, exclude, te.sum, "sum")[0]


# The identities are -inf / +inf for floats (the largest finite float for te.max / te.min), so a
# reduction over an empty axis gives what numpy's max(initial=-inf) and ONNX ReduceMax give.
_max = te.comm_reducer(tir.max, lambda t: const(float("-inf"), t) if _dtype(t).is_float else tir.min_value(t), name="max")
_min = te.comm_reducer(tir.min, lambda t: tir.infinity(t) if _dtype(t).is_float else tir.max_value(t), name="min")


def max(data, axis=None, keepdims=False, exclude=False):  # noqa: A001
    """Max over axes; over an empty axis, -inf for floats and the type's minimum for integers."""
    return _reduce(data, axis, keepdims, exclude, _max, "max")[0]


def min(data, axis=None, keepdims=False, exclude=False):  # noqa: A001
    """Min over axes; over an empty axis, +inf for floats and the type's maximum for integers."""
    return _reduce(data, axis, keepdims, exclude, _min, "min")[0]


def prod(data, axis=None, keepdims=False, exclude=False):
    return _reduce(data, axis, keepdims, exclude, te.prod, "prod")[0]


def all(data, axis=None, keepdims=False, exclude=False):  # noqa: A001
    """True where every element along the axes is nonzero (a min over bools)."""
    return _reduce(data, axis, keepdims, exclude, te.min, "all", lambda v: (v != const(0, v.dtype)).astype("uint8"))[0] \
        if not data.dtype.is_bool else _reduce(data, axis, keepdims, exclude, te.min, "all", lambda v: v.astype("uint8"))[0]


def any(data, axis=None, keepdims=False, exclude=False):  # noqa: A001
    return _reduce(data, axis, keepdims, exclude, te.max, "any", lambda v: (v != const(0, v.dtype)).astype("uint8"))[0] \
        if not data.dtype.is_bool else _reduce(data, axis, keepdims, exclude, te.max, "any", lambda v: v.astype("uint8"))[0]


def mean(data, axis=None, keepdims=False, exclude=False):
    """Arithmetic mean over axes (sum, then one division)."""
    total, axes = _reduce(data, axis, keepdims, exclude, te.sum, "sum")
    count = 1
    for a in axes:
        count = count * data.shape[a]
    c = tir.cast(count, data.dtype) if data.dtype.is_float else count
    return te.compute(total.shape, lambda *i: total(*i) / c, name="T_mean", tag="elemwise")


def _arg_reducer(better):
    """(index, value) pairs; ties keep the first index, as numpy does."""
    def fcombine(li, lv, ri, rv):
        take_right = tir.any(better(rv, lv), tir.all(rv == lv, ri < li))
        return tir.Select(take_right, ri, li, li.dtype), tir.Select(take_right, rv, lv, lv.dtype)

    return fcombine


_argmax = te.comm_reducer(_arg_reducer(lambda a, b: a > b), lambda ti, tv: (const(-1, ti), tir.min_value(tv)), name="argmax")
_argmin = te.comm_reducer(_arg_reducer(lambda a, b: a < b), lambda ti, tv: (const(-1, ti), tir.max_value(tv)), name="argmin")


def _arg(data, axis, keepdims, reducer, name, select_last_index=False):
    ndim = len(data.shape)
    if axis is None:
        raise ShapeError(f"{name}: pass one axis (flatten the input to reduce over everything)")
    (a,) = normalize_axes(ndim, axis, False, name)
    k = te.reduce_axis((0, data.shape[a]), name="k")
    out_shape = [s for d, s in enumerate(data.shape) if d != a or keepdims]
    if keepdims:
        out_shape[a] = 1
    n = data.shape[a]

    def fcompute(*idx):
        src = list(idx)
        if keepdims:
            src[a] = k.var
        else:
            src.insert(a, k.var)
        if select_last_index:
            # Walk the axis backwards; the first hit from the back is the last index.
            src[a] = n - 1 - k.var
        return reducer((k.var.astype("int32"), data(*src)), axis=k)

    idx, _val = te.compute(tuple(out_shape), fcompute, name=f"T_{name}_pair", tag="comm_reduce")
    # Always a separate output stage: a function argument that is one output of a two-output
    # stage leaves the other output without storage (kiln.te lowering; see docs/topi.md).
    if select_last_index:
        return te.compute(idx.shape, lambda *i: (n - 1 - idx(*i)).astype("int32"), name=f"T_{name}", tag="elemwise")
    return te.compute(idx.shape, lambda *i: idx(*i), name=f"T_{name}", tag="elemwise")


def argmax(data, axis=None, keepdims=False, select_last_index=False):
    """Index of the largest element along axis (int32; the first one on ties)."""
    return _arg(data, axis, keepdims, _argmax, "argmax", select_last_index)


def argmin(data, axis=None, keepdims=False, select_last_index=False):
    return _arg(data, axis, keepdims, _argmin, "argmin", select_last_index)
