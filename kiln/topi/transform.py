"""Shape and data movement: reshape, transpose, concatenate, split, strided_slice, take, ..."""

from __future__ import annotations

from kiln import te, tir
from kiln.errors import ShapeError
from kiln.ir.expr import const, convert

from .utils import const_int


def _size(shape):
    n = 1
    for s in shape:
        n = n * s
    return n


def _unravel(flat, shape):
    idx = []
    for s in reversed(shape):
        idx.append(flat % s)
        flat = flat // s
    return list(reversed(idx))


def _ravel(idx, shape):
    flat = const(0, "int32")
    for i, s in zip(idx, shape):
        flat = flat * s + i
    return flat


def reshape(data, newshape):
    """data with a new shape of the same size (``-1`` infers one dim, ``0`` copies the input's)."""
    shape = [const_int(s, "reshape: newshape") for s in newshape]
    in_shape = [const_int(s, "reshape: data shape") for s in data.shape]
    shape = [in_shape[i] if s == 0 else s for i, s in enumerate(shape)]
    total = _size(in_shape)
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape: newshape {list(newshape)} has more than one -1")
    if -1 in shape:
        known = _size([s for s in shape if s != -1])
        shape[shape.index(-1)] = total // known if known else 0
    if _size(shape) != total:
        raise ShapeError(f"reshape: input 'data' of shape {tuple(in_shape)} ({total} elements) cannot become {tuple(shape)}")
    return te.compute(tuple(shape), lambda *i: data(*_unravel(_ravel(i, shape), in_shape)), name="T_reshape", tag="injective")


def transpose(data, axes=None):
    """Permute the axes (reverse them when axes is None)."""
    ndim = len(data.shape)
    axes = list(range(ndim - 1, -1, -1)) if axes is None else [a % ndim for a in axes]
    if sorted(axes) != list(range(ndim)):
        raise ShapeError(f"transpose: axes {axes} are not a permutation of {ndim} dims of input 'data'")
    shape = tuple(data.shape[a] for a in axes)

    def fcompute(*i):
        src = [None] * ndim
        for out_pos, a in enumerate(axes):
            src[a] = i[out_pos]
        return data(*src)

    return te.compute(shape, fcompute, name="T_transpose", tag="injective")


def concatenate(tensors, axis=0):
    """Join tensors along axis."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("concatenate: needs at least one tensor")
    ndim = len(tensors[0].shape)
    axis = axis % ndim
    sizes = [const_int(t.shape[axis], "concatenate: axis size") for t in tensors]
    for k, t in enumerate(tensors):
        if len(t.shape) != ndim:
            raise ShapeError(f"concatenate: input {k} has {len(t.shape)} dims; expected {ndim}")
    shape = list(tensors[0].shape)
    shape[axis] = sum(sizes)

    def fcompute(*i):
        # Select from the last piece backwards; each branch only loads when its range holds.
        offsets = [sum(sizes[:k]) for k in range(len(tensors))]
        value = None
        for k in range(len(tensors) - 1, -1, -1):
            src = list(i)
            src[axis] = i[axis] - offsets[k]
            load = tensors[k](*src)
            value = load if value is None else tir.if_then_else(i[axis] < offsets[k + 1], load, value)
        return value

    return te.compute(tuple(shape), fcompute, name="T_concat", tag="injective")


def stack(tensors, axis=0):
    expanded = [expand_dims(t, axis) for t in tensors]
    return concatenate(expanded, axis)


def split(data, indices_or_sections, axis=0):
    """Split along axis into equal sections (an int) or at the given indices (a list)."""
    ndim = len(data.shape)
    axis = axis % ndim
    size = const_int(data.shape[axis], "split: axis size")
    if isinstance(indices_or_sections, int):
        if size % indices_or_sections:
            raise ShapeError(f"split: axis {axis} of size {size} is not divisible into {indices_or_sections} sections")
        step = size // indices_or_sections
        bounds = [step * k for k in range(indices_or_sections)] + [size]
    else:
        bounds = [0] + [const_int(x, "split: index") for x in indices_or_sections] + [size]
    outs = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        begin = [0] * ndim
        end = [const_int(s) for s in data.shape]
        begin[axis], end[axis] = lo, hi
        outs.append(strided_slice(data, begin, end))
    return outs


def strided_slice(data, begin, end, strides=None, axes=None):
    """numpy-style slicing with begin/end/strides per axis (negative indices count from the end)."""
    ndim = len(data.shape)
    shape = [const_int(s, "strided_slice: data shape") for s in data.shape]
    axes = list(range(len(begin))) if axes is None else [a % ndim for a in axes]
    strides = [1] * len(axes) if strides is None else list(strides)
    if len(strides) < len(axes):
        strides = strides + [1] * (len(axes) - len(strides))
    starts, steps, out_shape = [0] * ndim, [1] * ndim, list(shape)
    for k, a in enumerate(axes):
        n, s = shape[a], const_int(strides[k], "strided_slice: stride")
        if s == 0:
            raise ShapeError("strided_slice: stride 0 is not allowed")
        b = const_int(begin[k], "strided_slice: begin")
        e = const_int(end[k], "strided_slice: end") if k < len(end) else (n if s > 0 else -n - 1)
        b, e = _clamp(b, n, s), _clamp(e, n, s)
        count = max(0, (e - b + (s - (1 if s > 0 else -1))) // s)
        starts[a], steps[a], out_shape[a] = b, s, count
    return te.compute(tuple(out_shape), lambda *i: data(*[st + x * sp for x, st, sp in zip(i, starts, steps)]),
                      name="T_strided_slice", tag="injective")


def _clamp(i: int, n: int, step: int) -> int:
    if i < 0:
        i += n
    return min(max(i, 0), n) if step > 0 else min(max(i, -1), n - 1)


def take(a, indices, axis=None, mode="clip"):
    """Gather along axis by an index tensor (or a Python int), numpy's take modes: "clip" clamps
    indices into [0, n) (so a negative index reads element 0), "wrap" takes them modulo n (so -1
    is the last element, as ONNX Gather wants)."""
    if mode not in ("clip", "wrap"):
        raise ValueError(f"take: mode {mode!r} is not supported; use 'clip' or 'wrap'")
    if axis is None:
        a = reshape(a, (_size([const_int(s) for s in a.shape]),))
        axis = 0
    ndim = len(a.shape)
    axis = axis % ndim
    n = a.shape[axis]

    def in_range(raw):
        if mode == "wrap":
            return tir.floormod(raw, n)
        return tir.min(tir.max(raw, const(0, "int32")), n - 1)

    if not isinstance(indices, te.Tensor):
        i = const_int(indices, "take: indices")
        i = i % const_int(n) if mode == "wrap" else min(max(i, 0), const_int(n) - 1)
        shape = [s for d, s in enumerate(a.shape) if d != axis]
        return te.compute(tuple(shape), lambda *o: a(*o[:axis], const(i, "int32"), *o[axis:]), name="T_take", tag="injective")
    ind_nd = len(indices.shape)
    shape = tuple(a.shape[:axis]) + tuple(indices.shape) + tuple(a.shape[axis + 1:])

    def fcompute(*o):
        # int32 index math: tensors stay far below 2**31 elements along one axis.
        raw = indices(*o[axis:axis + ind_nd]).astype("int32")
        return a(*o[:axis], in_range(raw), *o[axis + ind_nd:])

    return te.compute(shape, fcompute, name="T_take", tag="injective")


def gather(data, axis, indices):
    """out[i][j][k] = data[i][indices[i][j][k]][k] for axis 1 (ONNX GatherElements)."""
    ndim = len(data.shape)
    axis = axis % ndim
    n = data.shape[axis]

    def fcompute(*o):
        raw = indices(*o).astype("int32")
        raw = tir.if_then_else(raw < 0, raw + n, raw)
        return data(*o[:axis], raw, *o[axis + 1:])

    return te.compute(indices.shape, fcompute, name="T_gather", tag="injective")


def squeeze(data, axis=None):
    """Drop size-1 axes (all of them, or those listed)."""
    ndim = len(data.shape)
    shape = [const_int(s) for s in data.shape]
    axes = [d for d in range(ndim) if shape[d] == 1] if axis is None else \
        [a % ndim for a in ([axis] if isinstance(axis, int) else axis)]
    for a in axes:
        if shape[a] != 1:
            raise ShapeError(f"squeeze: axis {a} of input 'data' has size {shape[a]}, not 1")
    keep = [d for d in range(ndim) if d not in axes]

    def fcompute(*o):
        src = [const(0, "int32")] * ndim
        for pos, d in enumerate(keep):
            src[d] = o[pos]
        return data(*src)

    return te.compute(tuple(data.shape[d] for d in keep), fcompute, name="T_squeeze", tag="injective")


def expand_dims(data, axis, num_newaxis=1):
    """Insert num_newaxis size-1 axes at axis."""
    ndim = len(data.shape)
    axis = axis if axis >= 0 else axis + ndim + 1
    shape = list(data.shape[:axis]) + [1] * num_newaxis + list(data.shape[axis:])
    return te.compute(tuple(shape), lambda *o: data(*o[:axis], *o[axis + num_newaxis:]), name="T_expand_dims", tag="broadcast")


def where(condition, x, y):
    """condition ? x : y element-wise, with broadcasting among the three."""
    from .broadcast import broadcast_index, broadcast_shape

    tensors = [t for t in (condition, x, y) if isinstance(t, te.Tensor)]
    shape = tensors[0].shape if tensors else ()
    for t in tensors[1:]:
        shape = broadcast_shape(shape, t.shape, "where")
    dtype = x.dtype if isinstance(x, te.Tensor) else (y.dtype if isinstance(y, te.Tensor) else None)

    def val(t, idx):
        if isinstance(t, te.Tensor):
            return t(*broadcast_index(t, idx))
        return const(t, dtype) if dtype else convert(t)

    def fcompute(*i):
        c = val(condition, i)
        if not c.dtype.is_bool:
            c = c != const(0, c.dtype)
        return tir.Select(c, val(x, i), val(y, i), dtype or val(x, i).dtype)

    return te.compute(tuple(shape), fcompute, name="T_where", tag="broadcast")


def flatten(data):
    """(N, ...) -> (N, prod(...)) (relay's nn.batch_flatten)."""
    shape = [const_int(s) for s in data.shape]
    return reshape(data, (shape[0], _size(shape[1:])))


def tile(data, reps):
    """Repeat the whole tensor reps[i] times along axis i (numpy.tile)."""
    reps = [const_int(r) for r in reps]
    ndim = max(len(data.shape), len(reps))
    reps = [1] * (ndim - len(reps)) + reps
    in_shape = [1] * (ndim - len(data.shape)) + [const_int(s) for s in data.shape]
    skip = ndim - len(data.shape)
    return te.compute(tuple(s * r for s, r in zip(in_shape, reps)),
                      lambda *o: data(*[o[d] % in_shape[d] for d in range(skip, ndim)]), name="T_tile", tag="injective")


def repeat(data, repeats, axis):
    axis = axis % len(data.shape)
    shape = list(data.shape)
    shape[axis] = shape[axis] * repeats
    return te.compute(tuple(shape), lambda *o: data(*o[:axis], o[axis] // repeats, *o[axis + 1:]), name="T_repeat", tag="injective")


def flip(data, axis=0):
    """Reverse the order along axis."""
    axis = axis % len(data.shape)
    n = data.shape[axis]
    return te.compute(data.shape, lambda *o: data(*o[:axis], n - 1 - o[axis], *o[axis + 1:]), name="T_reverse", tag="injective")


reverse = flip


def layout_transform(data, src_layout: str, dst_layout: str):
    """Between NCHW-style layouts, including blocked ones: "NCHW" -> "NCHW16c", "NHWC" -> "NCHW", ..."""
    from .layout import layout_transform as _lt

    return _lt(data, src_layout, dst_layout)


def one_hot(indices, on_value, off_value, depth, axis=-1, dtype="float32"):
    ndim = len(indices.shape) + 1
    axis = axis % ndim
    shape = list(indices.shape)
    shape.insert(axis, depth)
    on, off = const(on_value, dtype), const(off_value, dtype)

    def fcompute(*o):
        idx = indices(*o[:axis], *o[axis + 1:]).astype("int32")
        return tir.Select(idx == o[axis], on, off, on.dtype)

    return te.compute(tuple(shape), fcompute, name="T_one_hot", tag="injective")
