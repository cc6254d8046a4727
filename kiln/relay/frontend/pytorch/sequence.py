"""aten ops of transformer traces (BERT, GPT-2): embedding, arange, gather, index (one tensor
index), cumsum, new_ones/new_zeros, zeros/ones/full, where, split, comparisons, logical/bitwise
and/or, diff and scaled_dot_product_attention (written as matmul -> scale -> mask -> softmax -> matmul, the
pattern FuseAttention forms nn.attention from)."""

from __future__ import annotations

import math
import operator

import numpy as np

from ...expr import const
from ...op import math_ops, nn_norm, scatter, tensor
from ...op import transform as tf
from .elementwise import _is_expr, _operands
from .tensor import _SCALAR_TYPES


def _embedding(ctx, ins):
    weight, idx = ins[0], ins[1]
    if ctx.dtype_of(idx) not in ("int32", "int64"):
        idx = tf.cast(idx, "int64")
    return tf.take(weight, idx, axis=0)


def _dtype(code, default):
    if code is None:
        return default
    if isinstance(code, int) and code in _SCALAR_TYPES:
        return _SCALAR_TYPES[code]
    from .importer import _torch_dtype_name
    return _torch_dtype_name(code)


def _arange(ctx, ins):
    # arange(end, dtype, layout, device, pin) | arange(start, end, dtype, ...) | arange(start, end, step, dtype, ...)
    numbers = []
    for v in ins:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and len(numbers) < 3:
            numbers.append(v)
        else:
            break
    if any(_is_expr(v) for v in ins[:3]):
        ctx.fail("arange bounds must be known at import (trace with fixed sizes)")
    rest = ins[len(numbers):]
    if len(ins) in (5, 6, 7) and len(numbers) == len(ins) - 4:
        code = rest[0]
    else:
        code = rest[0] if rest else None
    if len(numbers) == 1:
        start, end, step = 0, numbers[0], 1
    elif len(numbers) == 2:
        (start, end), step = numbers, 1
    else:
        start, end, step = numbers
    default = "int64" if all(isinstance(v, int) for v in (start, end, step)) else "float32"
    return const(np.arange(start, end, step).astype(_dtype(code, default)))


def _gather(ctx, ins):
    x, dim, idx = ins[0], ins[1], ins[2]
    return tf.gather(x, int(dim) % len(ctx.shape_of(x)), idx)


def _index(ctx, ins):
    """x[idx], x[:, idx] (take) and x[i, j, ...] with several index tensors broadcast together
    (gather_nd): torch puts the broadcast axes where the indexed ones were if those are adjacent,
    else first."""
    x, indices = ins[0], list(ins[1])
    used = [(d, i) for d, i in enumerate(indices) if i is not None]
    if not used:
        return x
    if any(_is_expr(i) and ctx.dtype_of(i) == "bool" for _, i in used):
        ctx.fail("boolean mask indexing gives a data-dependent shape; kiln needs static shapes")
    used = [(d, i if _is_expr(i) else const(np.asarray(i, "int64"))) for d, i in used]
    if len(used) == 1:
        return tf.take(x, used[0][1], axis=used[0][0])
    shape = ctx.shape_of(x)
    dims = [d for d, _ in used]
    lanes = tuple(np.broadcast_shapes(*(tuple(int(n) for n in ctx.shape_of(i)) for _, i in used)))
    parts = []
    for d, i in used:
        i = tf.cast(i, "int64") if ctx.dtype_of(i) != "int64" else i
        zero, size = const(np.asarray(0, "int64")), const(np.asarray(shape[d], "int64"))
        i = tensor.where(tensor.less(i, zero), tensor.add(i, size), i)  # negative: from the end
        parts.append(tf.broadcast_to(i, lanes))
    rest = [d for d in range(len(shape)) if d not in dims]
    order = dims + rest
    data = x if order == list(range(len(shape))) else tf.transpose(x, order)
    out = scatter.gather_nd(data, tf.stack(parts, len(lanes)))  # (*lanes, *rest)
    lead = dims[0]
    if dims == list(range(lead, lead + len(dims))) and lead > 0:  # adjacent: lanes go where dims were
        nb = len(lanes)
        out = tf.transpose(out, list(range(nb, nb + lead)) + list(range(nb)) + list(range(nb + lead, nb + len(rest))))
    return out


def _cumsum(ctx, ins):
    x, dim = ins[0], int(ins[1])
    code = ins[2] if len(ins) > 2 else None
    if code is not None:
        x = tf.cast(x, _dtype(code, ctx.dtype_of(x)))
    elif ctx.dtype_of(x) in ("bool", "int8", "int16", "int32", "uint8"):
        x = tf.cast(x, "int64")  # torch accumulates integers in int64
    return scatter.cumsum(x, dim % len(ctx.shape_of(x)))


def _new_full(value):
    def convert(ctx, ins):
        x, size = ins[0], [int(s) for s in ins[1]]
        code = ins[2] if len(ins) > 2 else None
        return const(np.full(size, value, dtype=_dtype(code, ctx.dtype_of(x))))
    return convert


def _full(value):
    """zeros/ones(size, dtype, ...) and full(size, fill_value, dtype, ...): a constant."""
    def convert(ctx, ins):
        if _is_expr(ins[0]) or any(_is_expr(s) for s in ins[0]):
            ctx.fail("the size must be known at import (trace with fixed sizes)")
        size = [int(s) for s in ins[0]]
        fill, code = (value, ins[1]) if value is not None else (ins[1], ins[2])
        if _is_expr(fill):
            ctx.fail("the fill value must be known at import")
        default = "float32" if isinstance(fill, float) or value is not None else \
            ("bool" if isinstance(fill, bool) else "int64")
        return const(np.full(size, fill, dtype=_dtype(code, default)))
    return convert


def _where(ctx, ins):
    if len(ins) == 1:
        ctx.fail("where(condition) alone (nonzero) gives a data-dependent shape; kiln needs static shapes")
    cond, a, b = ins[0], ins[1], ins[2]
    if not _is_expr(cond):
        return a if cond else b
    if ctx.dtype_of(cond) != "bool":
        cond = tf.cast(cond, "bool")
    if not _is_expr(a) and not _is_expr(b):
        a = const(np.asarray(a, "float32" if isinstance(a, float) or isinstance(b, float) else "int64"))
    a, b = _operands(ctx, a, b)
    return tensor.where(cond, a, b)


def _split(ctx, ins):
    """split(x, split_size or [sizes], dim) and split_with_sizes: a list of tensors."""
    x, sizes, dim = ins[0], ins[1], int(ins[2]) if len(ins) > 2 else 0
    length = ctx.shape_of(x)[dim % len(ctx.shape_of(x))]
    if isinstance(sizes, int):
        sizes = [min(sizes, length - start) for start in range(0, length, sizes)]
    sizes = [int(s) for s in sizes]
    if sum(sizes) != length:
        ctx.fail(f"split sizes {sizes} do not add up to the axis's {length}")
    points = list(np.cumsum(sizes)[:-1])
    if not points:
        return [x]
    parts = tf.split(x, [int(p) for p in points], dim % len(ctx.shape_of(x)))
    return [parts[i] for i in range(len(sizes))]


def _compare(relay_fn, py_fn):
    def convert(ctx, ins):
        a, b = ins[0], ins[1]
        if not _is_expr(a) and not _is_expr(b):
            return py_fn(a, b)
        a, b = _operands(ctx, a, b)
        return relay_fn(a, b)
    return convert


def _logic(logical, bitwise, py_fn):
    def convert(ctx, ins):
        a, b = ins[0], ins[1]
        if not _is_expr(a) and not _is_expr(b):
            return py_fn(a, b)
        a, b = _operands(ctx, a, b)
        return (logical if ctx.dtype_of(a) == "bool" else bitwise)(a, b)
    return convert


def _diff(ctx, ins):
    x, n, dim = ins[0], int(ins[1]), int(ins[2])
    prepend, append = (ins[3] if len(ins) > 3 else None), (ins[4] if len(ins) > 4 else None)
    rank = len(ctx.shape_of(x))
    dim %= rank
    parts = [p for p in (prepend, x, append) if p is not None]
    x = tf.concatenate(parts, dim) if len(parts) > 1 else x
    for _ in range(n):
        size = ctx.shape_of(x)[dim]
        hi, lo = tf.strided_slice(x, [1], [size], axes=[dim]), tf.strided_slice(x, [0], [size - 1], axes=[dim])
        x = tensor.not_equal(hi, lo) if ctx.dtype_of(x) == "bool" else tensor.subtract(hi, lo)
    return x


def _sdpa(ctx, ins):
    from .nn import matmul
    q, k, v = ins[0], ins[1], ins[2]
    mask = ins[3] if len(ins) > 3 else None
    causal = bool(ins[5]) if len(ins) > 5 and ins[5] is not None else False
    scale = ins[6] if len(ins) > 6 and ins[6] is not None else None
    if len(ins) > 7 and ins[7]:
        ctx.fail("enable_gqa=True is not supported; repeat the key/value heads before the call")
    dtype = ctx.dtype_of(q)
    qs, ks = ctx.shape_of(q), ctx.shape_of(k)
    rank = len(ks)
    scale = 1.0 / math.sqrt(qs[-1]) if scale is None else float(scale)
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    scores = tensor.multiply(matmul(ctx, q, tf.transpose(k, perm)), const(np.asarray(scale, dtype)))
    lq, lk = qs[-2], ks[-2]
    if causal:
        scores = tensor.add(scores, const(np.triu(np.full((lq, lk), -np.inf, dtype), 1)))
    if mask is not None:
        if ctx.dtype_of(mask) == "bool":
            mask = tensor.where(mask, const(np.asarray(0, dtype)), const(np.asarray(-np.inf, dtype)))
        scores = tensor.add(scores, mask)
    return matmul(ctx, nn_norm.softmax(scores, -1), v)


def _unbind(ctx, ins):
    x, dim = ins[0], int(ins[1]) if len(ins) > 1 else 0
    shape = ctx.shape_of(x)
    dim %= len(shape)
    return [tf.squeeze(tf.strided_slice(x, [i], [i + 1], axes=[dim]), [dim]) for i in range(shape[dim])]


CONVERTERS = {
    "aten::unbind": _unbind, "aten::remainder": _compare(tensor.floor_mod, operator.mod),
    "aten::embedding": _embedding, "aten::arange": _arange, "aten::gather": _gather, "aten::index": _index,
    "aten::cumsum": _cumsum, "aten::new_ones": _new_full(1), "aten::new_zeros": _new_full(0),
    "aten::eq": _compare(tensor.equal, operator.eq), "aten::ne": _compare(tensor.not_equal, operator.ne),
    "aten::lt": _compare(tensor.less, operator.lt), "aten::gt": _compare(tensor.greater, operator.gt),
    "aten::le": _compare(tensor.less_equal, operator.le), "aten::ge": _compare(tensor.greater_equal, operator.ge),
    "aten::__and__": _logic(tensor.logical_and, math_ops.bitwise_and, operator.and_),
    "aten::bitwise_and": _logic(tensor.logical_and, math_ops.bitwise_and, operator.and_),
    "aten::__or__": _logic(tensor.logical_or, math_ops.bitwise_or, operator.or_),
    "aten::bitwise_or": _logic(tensor.logical_or, math_ops.bitwise_or, operator.or_),
    "aten::diff": _diff, "aten::scaled_dot_product_attention": _sdpa,
    "aten::zeros": _full(0), "aten::ones": _full(1), "aten::full": _full(None), "aten::where": _where,
    "aten::split": _split, "aten::split_with_sizes": _split,
}
