"""Sorting ops: ``topk_indices`` (the indices of ONNX TopK; the values are a gather of them)."""

from __future__ import annotations

import numpy as np

from ..expr import Call
from ..ty import TensorType
from .registry import OpDef, OpPattern, RelCtx


def _topk_rel(ctx: RelCtx) -> TensorType:
    t = ctx.tensor(0)
    axis = ctx.axis(int(ctx.attrs.axis), t.ndim)
    k = int(ctx.attrs.k)
    if not 0 <= k <= int(t.shape[axis]):
        ctx.fail(f"k={k} must be between 0 and the axis' extent {t.shape[axis]}")
    shape = list(t.shape)
    shape[axis] = k
    return TensorType(tuple(shape), "int64")


def _topk_ref(a, x):
    axis = a.axis % x.ndim
    keys = -x if a.largest else x
    if x.dtype.kind == "u" and a.largest:
        keys = -x.astype(np.float64)
    order = np.argsort(keys, axis=axis, kind="stable")
    return np.take(order, np.arange(a.k), axis=axis).astype(np.int64)


TOPK_INDICES = OpDef("topk_indices", ("data",), {"k": 1, "axis": -1, "largest": True}, _topk_rel, OpPattern.OPAQUE,
                     _topk_ref, doc="indices of the k largest (or smallest) along axis, ties in index order")

OPS = [TOPK_INDICES]


def topk_indices(data, k, axis=-1, largest=True) -> Call:
    return TOPK_INDICES(data, k=int(k), axis=int(axis), largest=bool(largest))
