"""Data movement ops: reshape, transpose, concatenate, split, slicing, gather, padding-free layout
changes, cast. All are injective (each output element reads one input element) except
``broadcast_to`` (broadcast) and ``cast`` (elementwise).
"""

from __future__ import annotations

import math

import numpy as np

from ..expr import Call, Tuple, TupleWrapper
from ..ty import TensorType, TupleType, np_dtype
from . import layout
from .registry import OpDef, OpPattern, RelCtx, broadcast_shapes

INJ = OpPattern.INJECTIVE


# -- reshape --------------------------------------------------------------------------------------

def infer_reshape(in_shape: tuple, newshape, fail=None) -> tuple:
    """Apply relay's reshape codes: 0 copies the input dim at that index, -1 is inferred."""
    def bad(msg):
        if fail:
            fail(msg)
        raise ValueError(msg)

    out = []
    for i, d in enumerate(newshape):
        if d == 0:
            if i >= len(in_shape):
                bad(f"newshape {tuple(newshape)}: 0 at index {i} has no input dim to copy from {in_shape}")
            out.append(in_shape[i])
        else:
            out.append(int(d))
    total = math.prod(in_shape)
    if out.count(-1) > 1:
        bad(f"newshape {tuple(newshape)} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            bad(f"cannot reshape {in_shape} into {tuple(newshape)}")
        out[out.index(-1)] = total // known
    if math.prod(out) != total or any(d < 0 for d in out):
        bad(f"cannot reshape {in_shape} ({total} elements) into {tuple(newshape)}")
    return tuple(out)


def _reshape_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    return TensorType(infer_reshape(t.shape, ctx.attrs.newshape, ctx.fail), t.dtype)


RESHAPE = OpDef("reshape", ("data",), {"newshape": ()}, _reshape_rel, INJ,
                lambda a, x: x.reshape(infer_reshape(x.shape, a.newshape)), doc="reshape with 0/-1 codes")


# -- transpose / layout_transform --------------------------------------------------------------

def _perm(axes, ndim):
    return tuple(reversed(range(ndim))) if axes is None else tuple(a % ndim for a in axes)


def _transpose_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    perm = _perm(ctx.attrs.axes, t.ndim)
    if sorted(perm) != list(range(t.ndim)):
        ctx.fail(f"axes {ctx.attrs.axes} are not a permutation of {t.ndim} dims")
    return TensorType(tuple(t.shape[p] for p in perm), t.dtype)


TRANSPOSE = OpDef("transpose", ("data",), {"axes": None}, _transpose_rel, INJ,
                  lambda a, x: np.ascontiguousarray(np.transpose(x, _perm(a.axes, x.ndim))), doc="permute axes")


def layout_perm(src: str, dst: str) -> tuple:
    """The transpose that turns layout ``src`` into ``dst`` (both permutations of the same letters)."""
    if sorted(src) != sorted(dst) or len(set(src)) != len(src):
        raise ValueError(f"layout_transform supports permutations of the same axes; got {src!r} -> {dst!r}")
    return tuple(src.index(c) for c in dst)


def _layout_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    try:
        return TensorType(layout.blocked_shape(t.shape, ctx.attrs.src_layout, ctx.attrs.dst_layout), t.dtype)
    except ValueError as e:
        ctx.fail(str(e))


LAYOUT_TRANSFORM = OpDef(
    "layout_transform", ("data",), {"src_layout": "", "dst_layout": ""}, _layout_rel, INJ,
    lambda a, x: layout.transform(x, a.src_layout, a.dst_layout),
    doc="change the data layout, e.g. NCHW -> NHWC or NCHW -> NCHW16c (blocks must divide their axis)")


# -- concatenate / split ------------------------------------------------------------------------

def _concat_rel(ctx: RelCtx):
    fields = ctx.tuple(0).fields
    if not fields:
        ctx.fail("needs at least one input")
    first = fields[0]
    axis = ctx.axis(ctx.attrs.axis, first.ndim)
    total = 0
    for i, f in enumerate(fields):
        if f.ndim != first.ndim or f.dtype != first.dtype or any(
                a != b for k, (a, b) in enumerate(zip(f.shape, first.shape)) if k != axis):
            ctx.fail(f"input {i} is {f}; every input must match {first} except on axis {axis}")
        total += f.shape[axis]
    return TensorType(first.shape[:axis] + (total,) + first.shape[axis + 1:], first.dtype)


CONCATENATE = OpDef("concatenate", ("data",), {"axis": 0}, _concat_rel, INJ,
                    lambda a, xs: np.concatenate(xs, axis=a.axis), doc="join tensors along axis")


def _split_points(ios, dim: int) -> list:
    if isinstance(ios, int):
        if dim % ios:
            raise ValueError(f"split: axis of size {dim} is not divisible into {ios} sections")
        return [dim // ios * i for i in range(1, ios)]
    return [int(i) for i in ios]


def _split_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    axis = ctx.axis(ctx.attrs.axis, t.ndim)
    try:
        points = _split_points(ctx.attrs.indices_or_sections, t.shape[axis])
    except ValueError as e:
        ctx.fail(str(e))
    bounds = [0] + points + [t.shape[axis]]
    if any(b < a for a, b in zip(bounds, bounds[1:])):
        ctx.fail(f"split indices {points} are not increasing within size {t.shape[axis]}")
    return TupleType([TensorType(t.shape[:axis] + (hi - lo,) + t.shape[axis + 1:], t.dtype)
                      for lo, hi in zip(bounds, bounds[1:])])


def _split_ref(a, x):
    axis = a.axis % x.ndim
    return tuple(np.split(x, _split_points(a.indices_or_sections, x.shape[axis]), axis=axis))


SPLIT = OpDef("split", ("data",), {"indices_or_sections": 1, "axis": 0}, _split_rel, INJ, _split_ref,
              doc="split into equal sections (int) or at indices (list)")


# -- slicing and gathering ------------------------------------------------------------------------

def slice_ranges(shape, begin, end, strides, axes, slice_mode) -> list:
    """Per-axis python slices for strided_slice (numpy clamping semantics)."""
    ndim = len(shape)
    axes = list(range(len(begin))) if axes is None else [a % ndim for a in axes]
    strides = list(strides) if strides else [1] * len(axes)
    if len(strides) == 1 and len(axes) > 1:
        strides = strides * len(axes)
    out = [slice(None)] * ndim
    for k, ax in enumerate(axes):
        b = int(begin[k])
        s = int(strides[k]) if k < len(strides) else 1
        e = end[k] if k < len(end) else None
        if slice_mode == "size":
            e = None if e is None or int(e) < 0 else b + int(e)
            s = 1
        elif e is not None:
            e = int(e)
            # huge sentinels (INT64_MAX/MIN from ONNX) mean "to the edge"
            if e > shape[ax]:
                e = None if s > 0 else e
            elif e < -shape[ax]:
                e = None if s < 0 else -shape[ax] - 1
        out[ax] = slice(b, e, s)
    return out


def _slice_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    a = ctx.attrs
    if a.strides and 0 in a.strides:
        ctx.fail("strides must be non-zero")
    probe = np.empty(t.shape, dtype=np.bool_)
    try:
        shape = probe[tuple(slice_ranges(t.shape, a.begin, a.end, a.strides, a.axes, a.slice_mode))].shape
    except (IndexError, ValueError) as e:
        ctx.fail(f"bad slice of {t.shape}: {e}")
    return TensorType(shape, t.dtype)


STRIDED_SLICE = OpDef(
    "strided_slice", ("data",), {"begin": (), "end": (), "strides": None, "axes": None, "slice_mode": "end"},
    _slice_rel, INJ,
    lambda a, x: np.ascontiguousarray(x[tuple(slice_ranges(x.shape, a.begin, a.end, a.strides, a.axes, a.slice_mode))]),
    doc="x[begin:end:strides] on the given axes")


def _take_rel(ctx: RelCtx):
    t, idx = ctx.tensor(0), ctx.tensor(1)
    if not (idx.dtype.startswith("int") or idx.dtype.startswith("uint")):
        ctx.fail(f"input 'indices' must be an integer tensor, got {idx.dtype}")
    if ctx.attrs.axis is None:
        return TensorType(idx.shape, t.dtype)
    axis = ctx.axis(ctx.attrs.axis, t.ndim)
    return TensorType(t.shape[:axis] + idx.shape + t.shape[axis + 1:], t.dtype)


def _take_ref(a, x, idx):
    if a.axis is None:
        x, axis = x.reshape(-1), 0
    else:
        axis = a.axis % x.ndim
    n = x.shape[axis]
    idx = np.mod(idx, n) if a.mode == "wrap" else np.clip(idx, 0, n - 1)
    return np.take(x, idx, axis=axis)


TAKE = OpDef("take", ("data", "indices"), {"axis": None, "mode": "clip"}, _take_rel, INJ, _take_ref,
             doc="gather slices along axis (mode clip or wrap handles out-of-range indices)")


def _gather_rel(ctx: RelCtx):
    t, idx = ctx.tensor(0), ctx.tensor(1)
    ctx.axis(ctx.attrs.axis, t.ndim)
    if idx.ndim != t.ndim:
        ctx.fail(f"input 'indices' has {idx.ndim} dims; expected {t.ndim} like 'data'")
    return TensorType(idx.shape, t.dtype)


def _gather_ref(a, x, idx):
    axis = a.axis % x.ndim
    return np.take_along_axis(x, np.where(idx < 0, idx + x.shape[axis], idx), axis=axis)


GATHER = OpDef("gather", ("data", "indices"), {"axis": 0}, _gather_rel, INJ, _gather_ref,
               doc="out[..i..] = data[..indices[..i..]..] along axis (torch.gather)")


# -- squeeze / expand_dims / broadcast_to / tile / reverse ----------------------------------------

def _squeeze_axes(shape, axis):
    if axis is None:
        return [i for i, d in enumerate(shape) if d == 1]
    return [a % len(shape) for a in axis]


def _squeeze_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    axes = _squeeze_axes(t.shape, ctx.attrs.axis)
    for a in axes:
        if t.shape[a] != 1:
            ctx.fail(f"cannot squeeze axis {a} of size {t.shape[a]} (shape {t.shape})")
    return TensorType(tuple(d for i, d in enumerate(t.shape) if i not in axes), t.dtype)


SQUEEZE = OpDef("squeeze", ("data",), {"axis": None}, _squeeze_rel, INJ,
                lambda a, x: x.reshape([d for i, d in enumerate(x.shape) if i not in _squeeze_axes(x.shape, a.axis)]),
                doc="drop size-1 axes")


def _expand_shape(shape, axis, num):
    ndim = len(shape)
    axis = axis if axis >= 0 else axis + ndim + 1
    return shape[:axis] + (1,) * num + shape[axis:]


def _expand_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    if not -t.ndim - 1 <= ctx.attrs.axis <= t.ndim:
        ctx.fail(f"axis={ctx.attrs.axis} is out of range for a {t.ndim}-d input")
    return TensorType(_expand_shape(t.shape, ctx.attrs.axis, ctx.attrs.num_newaxis), t.dtype)


EXPAND_DIMS = OpDef("expand_dims", ("data",), {"axis": 0, "num_newaxis": 1}, _expand_rel, INJ,
                    lambda a, x: x.reshape(_expand_shape(x.shape, a.axis, a.num_newaxis)), doc="insert size-1 axes")


def _broadcast_to_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    shape = broadcast_shapes(ctx, [t.shape, tuple(ctx.attrs.shape)])
    if shape != tuple(ctx.attrs.shape):
        ctx.fail(f"cannot broadcast {t.shape} to {tuple(ctx.attrs.shape)}")
    return TensorType(shape, t.dtype)


BROADCAST_TO = OpDef("broadcast_to", ("data",), {"shape": ()}, _broadcast_to_rel, OpPattern.BROADCAST,
                     lambda a, x: np.ascontiguousarray(np.broadcast_to(x, a.shape)), doc="broadcast to shape")


def _tile_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    reps = tuple(ctx.attrs.reps)
    n = max(len(reps), t.ndim)
    shape = (1,) * (n - t.ndim) + t.shape
    reps = (1,) * (n - len(reps)) + reps
    return TensorType(tuple(d * r for d, r in zip(shape, reps)), t.dtype)


TILE = OpDef("tile", ("data",), {"reps": ()}, _tile_rel, INJ, lambda a, x: np.tile(x, a.reps), doc="repeat the whole tensor")


def _reverse_rel(ctx: RelCtx):
    t = ctx.tensor(0)
    ctx.axis(ctx.attrs.axis, t.ndim)
    return t


REVERSE = OpDef("reverse", ("data",), {"axis": 0}, _reverse_rel, INJ,
                lambda a, x: np.ascontiguousarray(np.flip(x, a.axis)), doc="reverse along axis")


# -- cast ------------------------------------------------------------------------------------------

def _cast_rel(ctx: RelCtx):
    try:
        np_dtype(ctx.attrs.dtype)
    except TypeError:
        ctx.fail(f"unknown dtype {ctx.attrs.dtype!r}")
    return TensorType(ctx.tensor(0).shape, ctx.attrs.dtype)


CAST = OpDef("cast", ("data",), {"dtype": "float32"}, _cast_rel, OpPattern.ELEMWISE,
             lambda a, x: x.astype(np_dtype(a.dtype)), doc="convert the element type")

OPS = [RESHAPE, TRANSPOSE, LAYOUT_TRANSFORM, CONCATENATE, SPLIT, STRIDED_SLICE, TAKE, GATHER, SQUEEZE,
       EXPAND_DIMS, BROADCAST_TO, TILE, REVERSE, CAST]


# -- constructors ---------------------------------------------------------------------------------

def _ints(v):
    return None if v is None else tuple(int(x) for x in v)


def reshape(data, newshape):
    """Reshape; 0 copies the input dim at that index and -1 is inferred."""
    return RESHAPE(data, newshape=(int(newshape),) if isinstance(newshape, int) else _ints(newshape))


def transpose(data, axes=None):
    return TRANSPOSE(data, axes=_ints(axes))


def layout_transform(data, src_layout, dst_layout):
    return LAYOUT_TRANSFORM(data, src_layout=src_layout, dst_layout=dst_layout)


def concatenate(data, axis):
    """Join a list (or relay Tuple) of tensors along ``axis``."""
    tup = data if isinstance(data, Tuple) else Tuple(list(data))
    return CONCATENATE(tup, axis=int(axis))


def stack(data, axis):
    fields = data.fields if isinstance(data, Tuple) else list(data)
    return concatenate([expand_dims(f, axis) for f in fields], axis)


def split(data, indices_or_sections, axis=0):
    ios = int(indices_or_sections) if isinstance(indices_or_sections, (int, np.integer)) else _ints(indices_or_sections)
    n = ios if isinstance(ios, int) else len(ios) + 1
    return TupleWrapper(Call(SPLIT, [data], SPLIT.make_attrs({"indices_or_sections": ios, "axis": int(axis)})), n)


def strided_slice(data, begin, end, strides=None, axes=None, slice_mode="end"):
    return STRIDED_SLICE(data, begin=_ints(begin), end=_ints(end), strides=_ints(strides), axes=_ints(axes),
                         slice_mode=slice_mode)


def take(data, indices, axis=None, mode="clip"):
    return TAKE(data, indices, axis=None if axis is None else int(axis), mode=mode)


def gather(data, axis, indices):
    return GATHER(data, indices, axis=int(axis))


def squeeze(data, axis=None):
    return SQUEEZE(data, axis=_ints(axis))


def expand_dims(data, axis, num_newaxis=1):
    return EXPAND_DIMS(data, axis=int(axis), num_newaxis=int(num_newaxis))


def broadcast_to(data, shape):
    return BROADCAST_TO(data, shape=_ints(shape))


def tile(data, reps):
    return TILE(data, reps=_ints(reps))


def reverse(data, axis):
    return REVERSE(data, axis=int(axis))


def cast(data, dtype):
    return CAST(data, dtype=str(dtype))


def full(fill_value, shape, dtype="float32"):
    """A tensor of ``shape`` filled with a scalar expression (broadcast, no data stored)."""
    from ..expr import RelayExpr, const
    if not isinstance(fill_value, RelayExpr):
        fill_value = const(fill_value, dtype)
    return broadcast_to(fill_value, shape)


def zeros(shape, dtype="float32"):
    return full(0, shape, dtype)


def ones(shape, dtype="float32"):
    return full(1, shape, dtype)
