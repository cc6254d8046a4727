"""Index-driven ops of sequence and transformer models: gather_nd, scatter_nd, scatter_elements,
cumsum, cumprod. The scatters and the running sums/products reduce over update positions (topi/scatter.py), so they are
never fused (OPAQUE); gather_nd reads one element per output and is injective."""

from __future__ import annotations

import numpy as np

from ..expr import Call
from ..ty import TensorType
from .registry import OpDef, OpPattern, RelCtx

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _int_indices(ctx: RelCtx, i: int) -> TensorType:
    t = ctx.tensor(i)
    if not t.dtype.startswith(("int", "uint")):
        ctx.fail(f"input {ctx.op.inputs[i]!r} must have an integer dtype, got {t.dtype}")
    return t


def _reduction(ctx: RelCtx) -> str:
    if ctx.attrs.reduction not in REDUCTIONS:
        ctx.fail(f"reduction={ctx.attrs.reduction!r} is not one of {REDUCTIONS}")
    return ctx.attrs.reduction


def _wrap(idx, size):
    return np.where(idx < 0, idx + size, idx)


# -- gather_nd ------------------------------------------------------------------------------------

def _gather_nd_rel(ctx: RelCtx):
    data, idx = ctx.tensor(0), _int_indices(ctx, 1)
    b = int(ctx.attrs.batch_dims)
    if idx.ndim < 1 or not 0 <= b < min(data.ndim, idx.ndim):
        ctx.fail(f"batch_dims={b} must be below the ranks of 'data' ({data.ndim}) and 'indices' ({idx.ndim})")
    k = int(idx.shape[-1])
    if tuple(data.shape[:b]) != tuple(idx.shape[:b]):
        ctx.fail(f"the first {b} dims of 'data' {data.shape} and 'indices' {idx.shape} must match")
    if b + k > data.ndim:
        ctx.fail(f"indices address {k} axes after {b} batch axes, but 'data' has {data.ndim}")
    return TensorType(tuple(idx.shape[:-1]) + tuple(data.shape[b + k:]), data.dtype)


def _gather_nd_ref(a, x, idx):
    b = a.batch_dims
    k = idx.shape[-1]
    lead = idx.shape[:-1]
    out = np.empty(lead + x.shape[b + k:], x.dtype)
    for pos in np.ndindex(*lead):
        where = tuple(int(_wrap(idx[pos][j], x.shape[b + j])) for j in range(k))
        out[pos] = x[pos[:b] + where]
    return out


GATHER_ND = OpDef("gather_nd", ("data", "indices"), {"batch_dims": 0}, _gather_nd_rel, OpPattern.INJECTIVE,
                  _gather_nd_ref, doc="ONNX GatherND: indices' last axis addresses data's leading axes")


# -- scatter_nd -----------------------------------------------------------------------------------

def _scatter_nd_rel(ctx: RelCtx):
    data, idx, upd = ctx.tensor(0), _int_indices(ctx, 1), ctx.tensor(2)
    _reduction(ctx)
    k = int(idx.shape[-1]) if idx.ndim else 0
    if idx.ndim < 1 or k > data.ndim:
        ctx.fail(f"'indices' {idx.shape} must have a last axis of at most {data.ndim} (the rank of 'data')")
    want = tuple(idx.shape[:-1]) + tuple(data.shape[k:])
    if tuple(upd.shape) != want or upd.dtype != data.dtype:
        ctx.fail(f"'updates' must be {want} {data.dtype} for 'data' {data.shape} and 'indices' {idx.shape}; "
                 f"got {upd.shape} {upd.dtype}")
    return data


_NP_COMBINE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _put(out, where, value, reduction):
    out[where] = value if reduction == "none" else _NP_COMBINE[reduction](out[where], value)


def _scatter_nd_ref(a, x, idx, upd):
    out = x.copy()
    k = idx.shape[-1]
    for pos in np.ndindex(*idx.shape[:-1]):
        where = tuple(int(_wrap(idx[pos][j], x.shape[j])) for j in range(k))
        _put(out, where, upd[pos], a.reduction)
    return out


SCATTER_ND = OpDef("scatter_nd", ("data", "indices", "updates"), {"reduction": "none"}, _scatter_nd_rel,
                   OpPattern.OPAQUE, _scatter_nd_ref,
                   doc="ONNX ScatterND: copy of data with updates written (or combined) at indices")


# -- scatter_elements -----------------------------------------------------------------------------

def _scatter_elements_rel(ctx: RelCtx):
    data, idx, upd = ctx.tensor(0), _int_indices(ctx, 1), ctx.tensor(2)
    _reduction(ctx)
    axis = ctx.axis(int(ctx.attrs.axis), data.ndim)
    if idx.ndim != data.ndim or tuple(upd.shape) != tuple(idx.shape) or upd.dtype != data.dtype:
        ctx.fail(f"'indices' {idx.shape} and 'updates' {upd.shape} {upd.dtype} must share one shape of the rank "
                 f"of 'data' {data.shape} {data.dtype}")
    if any(int(i) > int(d) for ax, (i, d) in enumerate(zip(idx.shape, data.shape)) if ax != axis):
        ctx.fail(f"'indices' {idx.shape} is larger than 'data' {data.shape} off the axis {axis}")
    return data


def _scatter_elements_ref(a, x, idx, upd):
    out = x.copy()
    axis = a.axis % x.ndim
    for pos in np.ndindex(*idx.shape):
        where = list(pos)
        where[axis] = int(_wrap(idx[pos], x.shape[axis]))
        _put(out, tuple(where), upd[pos], a.reduction)
    return out


SCATTER_ELEMENTS = OpDef("scatter_elements", ("data", "indices", "updates"), {"axis": 0, "reduction": "none"},
                         _scatter_elements_rel, OpPattern.OPAQUE, _scatter_elements_ref,
                         doc="ONNX ScatterElements: out[.., indices[p], ..] = updates[p] along axis")


# -- cumsum ---------------------------------------------------------------------------------------

def _cumsum_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    ctx.axis(int(ctx.attrs.axis), t.ndim)
    return t


def _cumsum_ref(a, x):
    axis = a.axis % x.ndim
    y = np.flip(x, axis) if a.reverse else x
    out = np.cumsum(y, axis=axis, dtype=x.dtype)
    if a.exclusive:
        out = out - y
    return np.flip(out, axis) if a.reverse else out


CUMSUM = OpDef("cumsum", ("data",), {"axis": 0, "exclusive": False, "reverse": False}, _cumsum_rel,
               OpPattern.OPAQUE, _cumsum_ref, doc="running sum along axis (ONNX CumSum)")



def _cumprod_ref(a, x):
    axis = a.axis % x.ndim
    y = np.flip(x, axis) if a.reverse else x
    if a.exclusive:  # shift by one: the product of the elements before
        pad = [(0, 0)] * x.ndim
        pad[axis] = (1, 0)
        y = np.take(np.pad(y, pad, constant_values=1), np.arange(x.shape[axis]), axis=axis)
    out = np.cumprod(y, axis=axis, dtype=x.dtype)
    return np.flip(out, axis) if a.reverse else out


CUMPROD = OpDef("cumprod", ("data",), {"axis": 0, "exclusive": False, "reverse": False}, _cumsum_rel,
                OpPattern.OPAQUE, _cumprod_ref, doc="running product along axis (ONNX CumProd)")

OPS = [GATHER_ND, SCATTER_ND, SCATTER_ELEMENTS, CUMSUM, CUMPROD]


def gather_nd(data, indices, batch_dims=0) -> Call:
    return GATHER_ND(data, indices, batch_dims=int(batch_dims))


def scatter_nd(data, indices, updates, reduction="none") -> Call:
    return SCATTER_ND(data, indices, updates, reduction=reduction)


def scatter_elements(data, indices, updates, axis=0, reduction="none") -> Call:
    return SCATTER_ELEMENTS(data, indices, updates, axis=int(axis), reduction=reduction)


def cumsum(data, axis=0, exclusive=False, reverse=False) -> Call:
    return CUMSUM(data, axis=int(axis), exclusive=bool(exclusive), reverse=bool(reverse))


def cumprod(data, axis=0, exclusive=False, reverse=False) -> Call:
    return CUMPROD(data, axis=int(axis), exclusive=bool(exclusive), reverse=bool(reverse))
