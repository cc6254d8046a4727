"""aten data-movement and shape ops: view/reshape/flatten, permute/transpose, cat, size,
slicing, (un)squeeze, reductions, and the no-ops of inference (contiguous, clone, detach)."""

from __future__ import annotations

import numpy as np

from ...op import reduce as r
from ...op import transform as tf


def _ints(ctx, v, what):
    try:
        return [int(x) for x in v]
    except TypeError:
        ctx.fail(f"{what} must be known at import time (got {v!r})")


def _reshape(ctx, ins):
    return tf.reshape(ins[0], _ints(ctx, ins[1], "shape"))


def _flatten(ctx, ins):
    x, start, end = ins
    shape = ctx.shape_of(x)
    if not shape:
        return tf.reshape(x, (1,))
    start, end = start % len(shape), end % len(shape)
    return tf.reshape(x, shape[:start] + (int(np.prod(shape[start:end + 1])),) + shape[end + 1:])


def _permute(ctx, ins):
    return tf.transpose(ins[0], _ints(ctx, ins[1], "dims"))


def _transpose(ctx, ins):
    x, d0, d1 = ins
    n = len(ctx.shape_of(x))
    perm = list(range(n))
    perm[d0 % n], perm[d1 % n] = perm[d1 % n], perm[d0 % n]
    return tf.transpose(x, perm)


def _t(ctx, ins):
    return ins[0] if len(ctx.shape_of(ins[0])) < 2 else tf.transpose(ins[0], (1, 0))


def _cat(ctx, ins):
    parts = list(ins[0])
    # torch skips empty 1-d tensors beside tensors of higher rank (an empty key/value cache)
    kept = [p for p in parts if tuple(ctx.shape_of(p)) != (0,)] or parts[:1]
    return kept[0] if len(kept) == 1 else tf.concatenate(kept, int(ins[1]))


def _stack(ctx, ins):
    return tf.stack(list(ins[0]), int(ins[1]))


def _size(ctx, ins):
    shape = ctx.shape_of(ins[0])
    return list(shape) if len(ins) == 1 else int(shape[ins[1]])


def _identity(ctx, ins):
    return ins[0]


def _unsqueeze(ctx, ins):
    n = len(ctx.shape_of(ins[0])) + 1
    return tf.expand_dims(ins[0], int(ins[1]) % n)


def _squeeze(ctx, ins):
    shape = ctx.shape_of(ins[0])
    if len(ins) == 1:
        return tf.squeeze(ins[0])
    dims = ins[1] if isinstance(ins[1], (list, tuple)) else [ins[1]]
    dims = [d % len(shape) for d in dims if shape[d % len(shape)] == 1]  # torch ignores non-1 dims
    return tf.squeeze(ins[0], dims) if dims else ins[0]


def _slice(ctx, ins):
    x, dim, start, end, step = ins
    n = ctx.shape_of(x)[dim]
    start = 0 if start is None else start
    end = n if end is None else min(end, n)
    return tf.strided_slice(x, [start], [end], [step], axes=[dim % len(ctx.shape_of(x))])


def _select(ctx, ins):
    x, dim, index = ins
    shape = ctx.shape_of(x)
    dim = dim % len(shape)
    index = index % shape[dim]
    return tf.squeeze(tf.strided_slice(x, [index], [index + 1], [1], axes=[dim]), [dim])


def _chunk(ctx, ins):
    x, chunks, dim = ins
    size = ctx.shape_of(x)[dim]
    step = -(-size // chunks)
    points = list(range(step, size, step))
    parts = tf.split(x, points, dim)
    return [parts[i] for i in range(len(points) + 1)]


def _expand(ctx, ins):
    x, sizes = ins[0], _ints(ctx, ins[1], "size")
    shape = ctx.shape_of(x)
    lead = len(sizes) - len(shape)
    target = [s if s != -1 else shape[i - lead] for i, s in enumerate(sizes)]
    return tf.broadcast_to(x, tuple(target))


def _reduce(fn):
    def convert(ctx, ins):
        x = ins[0]
        dims = ins[1] if len(ins) > 1 else None
        if isinstance(dims, int):
            dims = [dims]
        keep = bool(ins[2]) if len(ins) > 2 and isinstance(ins[2], (bool, int)) else False
        return fn(x, axis=None if not dims else tuple(dims), keepdims=keep)
    return convert


def _to(ctx, ins):
    """Only casts between dtypes are converted; the device arguments are ignored."""
    import torch
    for v in ins[1:]:
        if isinstance(v, int) and not isinstance(v, bool) and v in _SCALAR_TYPES:
            return tf.cast(ins[0], _SCALAR_TYPES[v])
        if isinstance(v, torch.dtype):
            from .importer import _torch_dtype_name
            return tf.cast(ins[0], _torch_dtype_name(v))
    return ins[0]


# torch's ScalarType codes as they appear in traced graphs
_SCALAR_TYPES = {0: "uint8", 1: "int8", 3: "int32", 4: "int64", 5: "float16", 6: "float32", 7: "float64", 11: "bool"}


CONVERTERS = {
    "aten::view": _reshape, "aten::reshape": _reshape, "aten::flatten": _flatten, "aten::permute": _permute,
    "aten::transpose": _transpose, "aten::t": _t, "aten::cat": _cat, "aten::concat": _cat, "aten::stack": _stack,
    "aten::size": _size, "aten::contiguous": _identity, "aten::clone": _identity, "aten::detach": _identity,
    "aten::unsqueeze": _unsqueeze, "aten::squeeze": _squeeze, "aten::slice": _slice, "aten::select": _select,
    "aten::chunk": _chunk, "aten::expand": _expand, "aten::mean": _reduce(r.mean), "aten::sum": _reduce(r.sum),
    "aten::amax": _reduce(r.max), "aten::to": _to,
}
