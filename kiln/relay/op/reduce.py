"""Reductions: sum, mean, max, min, prod, all, any, argmax, argmin, variance.

Attrs follow relay: ``axis`` (None: all axes; an int or a list), ``keepdims``, and ``exclude``
(reduce over every axis *not* listed).
"""

from __future__ import annotations

import numpy as np

from ..ty import TensorType
from .registry import OpDef, OpPattern, RelCtx

_ATTRS = {"axis": None, "keepdims": False, "exclude": False}


def reduce_axes(axis, ndim: int, exclude: bool = False) -> tuple:
    """The normalized, sorted axes a reduction covers."""
    if axis is None:
        axes = tuple(range(ndim))
    else:
        axes = tuple(sorted({a % ndim for a in ([axis] if isinstance(axis, int) else axis)})) if ndim else ()
    if exclude:
        axes = tuple(a for a in range(ndim) if a not in axes)
    return axes


def _out_shape(ctx: RelCtx) -> tuple:
    t = ctx.tensor(0)
    axis = ctx.attrs.axis
    for a in [] if axis is None else ([axis] if isinstance(axis, int) else axis):
        ctx.axis(a, t.ndim)
    axes = reduce_axes(axis, t.ndim, ctx.attrs.exclude)
    if ctx.attrs.keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(t.shape))
    return tuple(d for i, d in enumerate(t.shape) if i not in axes)


def _rel(ctx: RelCtx) -> TensorType:
    return TensorType(_out_shape(ctx), ctx.tensor(0).dtype)


def _index_rel(ctx: RelCtx) -> TensorType:
    return TensorType(_out_shape(ctx), "int32")


def _bool_rel(ctx: RelCtx) -> TensorType:
    return TensorType(_out_shape(ctx), "bool")


def _ref(fn):
    def run(attrs, x):
        axes = reduce_axes(attrs.axis, x.ndim, attrs.exclude)
        out = fn(x, axis=axes, keepdims=attrs.keepdims)
        return np.asarray(out).astype(x.dtype, copy=False)
    return run


def _mean(x, axis, keepdims):
    return np.mean(x.astype(np.float64) if x.dtype.kind == "f" else x, axis=axis, keepdims=keepdims)


def _extreme(fn, sign):
    """np.max / np.min, which raise on an empty axis; there the result is the reduction's
    identity, as in ONNX ReduceMax/ReduceMin: -inf / +inf for floats, the type's limits for ints."""
    def run(x, axis, keepdims):
        if x.size:
            return fn(x, axis=axis, keepdims=keepdims)
        if x.dtype.kind == "f":
            initial = sign * np.inf
        else:
            info = np.iinfo(x.dtype) if x.dtype.kind in "iu" else None
            initial = (info.max if sign > 0 else info.min) if info else sign > 0
        return fn(x, axis=axis, keepdims=keepdims, initial=initial)
    return run


def _variance(x, axis, keepdims):
    return np.var(x.astype(np.float64), axis=axis, keepdims=keepdims)


def _arg(fn):
    def run(attrs, x):
        axes = reduce_axes(attrs.axis, x.ndim, attrs.exclude)
        if len(axes) != 1:
            raise ValueError(f"argmax/argmin reduce one axis at a time; got axes {axes}")
        out = fn(x, axis=axes[0])
        if attrs.select_last_index:
            out = x.shape[axes[0]] - 1 - fn(np.flip(x, axes[0]), axis=axes[0])
        if attrs.keepdims:
            out = np.expand_dims(out, axes[0])
        return out.astype("int32")
    return run


def _logical(fn):
    def run(attrs, x):
        return np.asarray(fn(x, axis=reduce_axes(attrs.axis, x.ndim, attrs.exclude), keepdims=attrs.keepdims))
    return run


R = OpPattern.COMM_REDUCE
SUM = OpDef("sum", ("data",), dict(_ATTRS), _rel, R, _ref(np.sum), doc="sum over axes")
MEAN = OpDef("mean", ("data",), dict(_ATTRS), _rel, R, _ref(_mean), doc="mean over axes")
MAX = OpDef("max", ("data",), dict(_ATTRS), _rel, R, _ref(_extreme(np.max, -1)), doc="max over axes")
MIN = OpDef("min", ("data",), dict(_ATTRS), _rel, R, _ref(_extreme(np.min, +1)), doc="min over axes")
PROD = OpDef("prod", ("data",), dict(_ATTRS), _rel, R, _ref(np.prod), doc="product over axes")
VARIANCE = OpDef("variance", ("data",), dict(_ATTRS), _rel, R, _ref(_variance), doc="population variance")
ALL = OpDef("all", ("data",), dict(_ATTRS), _bool_rel, R, _logical(np.all), doc="logical and over axes")
ANY = OpDef("any", ("data",), dict(_ATTRS), _bool_rel, R, _logical(np.any), doc="logical or over axes")
_ARG_ATTRS = {**_ATTRS, "select_last_index": False}
ARGMAX = OpDef("argmax", ("data",), dict(_ARG_ATTRS), _index_rel, R, _arg(np.argmax), doc="index of the max")
ARGMIN = OpDef("argmin", ("data",), dict(_ARG_ATTRS), _index_rel, R, _arg(np.argmin), doc="index of the min")

OPS = [SUM, MEAN, MAX, MIN, PROD, VARIANCE, ALL, ANY, ARGMAX, ARGMIN]


def _norm_axis(axis):
    if axis is None or isinstance(axis, int):
        return axis
    return tuple(int(a) for a in axis)


def sum(data, axis=None, keepdims=False, exclude=False):  # noqa: A001 - relay's name
    return SUM(data, axis=_norm_axis(axis), keepdims=bool(keepdims), exclude=bool(exclude))


def mean(data, axis=None, keepdims=False, exclude=False):
    return MEAN(data, axis=_norm_axis(axis), keepdims=bool(keepdims), exclude=bool(exclude))


def max(data, axis=None, keepdims=False, exclude=False):  # noqa: A001
    return MAX(data, axis=_norm_axis(axis), keepdims=bool(keepdims), exclude=bool(exclude))


def min(data, axis=None, keepdims=False, exclude=False):  # noqa: A001
    return MIN(data, axis=_norm_axis(axis), keepdims=bool(keepdims), exclude=bool(exclude))


def prod(data, axis=None, keepdims=False, exclude=False):
    return PROD(data, axis=_norm_axis(axis), keepdims=bool(keepdims), exclude=bool(exclude))


def variance(data, axis=None, keepdims=False, exclude=False):
    return VARIANCE(data, axis=_norm_axis(axis), keepdims=bool(keepdims), exclude=bool(exclude))


def all(data, axis=None, keepdims=False, exclude=False):  # noqa: A001
    return ALL(data, axis=_norm_axis(axis), keepdims=bool(keepdims), exclude=bool(exclude))


def any(data, axis=None, keepdims=False, exclude=False):  # noqa: A001
    return ANY(data, axis=_norm_axis(axis), keepdims=bool(keepdims), exclude=bool(exclude))


def argmax(data, axis=None, keepdims=False, exclude=False, select_last_index=False):
    return ARGMAX(data, axis=_norm_axis(axis), keepdims=bool(keepdims), exclude=bool(exclude),
                  select_last_index=bool(select_last_index))


def argmin(data, axis=None, keepdims=False, exclude=False, select_last_index=False):
    return ARGMIN(data, axis=_norm_axis(axis), keepdims=bool(keepdims), exclude=bool(exclude),
                  select_last_index=bool(select_last_index))
