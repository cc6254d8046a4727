"""Reductions on GPUs: sums / maxima, softmax and layer norm.

Two shapes of work:

- many outputs, short reductions (pooling-like, a row sum of a wide matrix): one work-item per
  output, the reduction serial inside it (``schedule_per_item``);
- few outputs, long reductions (a row softmax, layer norm of a hidden vector, a global sum):
  one work-group per output row, the reduction split across its work-items and combined by a
  cross-work-item (tree) reduction; the row's other stages are computed in the same work-group,
  so the row is read from global memory a bounded number of times and the op is one kernel.
"""

from __future__ import annotations

from kiln import te
from kiln.te.tensor import ComputeOp

from .common import as_list, block, inline_injective, max_threads, producers, schedule_per_item, thread

# Below this many outputs a serial reduction per work-item leaves the device idle.
_FEW_OUTPUTS = 4096
_MIN_REDUCE = 64


def _size(axes) -> int:
    n = 1
    for a in axes:
        n *= int(a.dom.extent.value) if hasattr(a.dom.extent, "value") else int(a.dom.extent)
    return n


def _row_threads(n: int, limit: int) -> int:
    """Work-items splitting a reduction of n: the largest divisor of n up to limit (no ragged
    tail, so the tree reduction needs no guard); 0 when n has no useful divisor."""
    for d in range(min(n, limit), 15, -1):
        if n % d == 0:
            return d
    return 0


def _cross_thread(st, nthreads: int) -> None:
    """Split st's reduction across the threadIdx.x of the enclosing work-group."""
    k = st.fuse(*st.op.reduce_axis) if len(st.op.reduce_axis) > 1 else st.op.reduce_axis[0]
    _, ki = st.split(k, factor=nthreads)
    st.bind(ki, thread("x"))


def schedule_reduce(outs, cfg=None):
    """sum / max / min / mean / argmax... with any epilogue of elementwise ops."""
    outs = as_list(outs)
    out = outs[0]
    red = _the_reduction(out)
    if len(outs) != 1 or red is None:
        return schedule_per_item(outs, cfg)
    n_out = _size(out.op.axis) if out.op.axis else 1
    n_red = _size(red.op.reduce_axis)
    nthreads = _row_threads(n_red, max_threads())
    if not red.op.axis and red.op is out.op:
        # a reduction to a scalar: one work-group, the whole reduction across its work-items
        s = te.create_schedule([out.op])
        inline_injective(s, outs)
        _cross_thread(s[out], nthreads or min(n_red, max_threads()))
        return s
    if n_out >= _FEW_OUTPUTS or n_red < _MIN_REDUCE or not nthreads or not red.op.axis:
        return schedule_per_item(outs, cfg)
    s = te.create_schedule([out.op])
    inline_injective(s, outs)
    st = s[out]
    fused = st.fuse(*st.op.axis) if len(st.op.axis) > 1 else st.op.axis[0]
    st.bind(fused, block("x"))
    if red.op is not out.op:
        s[red].compute_at(st, fused)
        s[red].set_scope("local")
        _cross_thread(s[red], nthreads)
    else:
        _cross_thread(st, nthreads)
    return s


def _the_reduction(out):
    """The single reduction stage of a reduce-then-elementwise chain, or None."""
    if out.op.reduce_axis:
        return out
    found = [t for t in producers(out) if isinstance(t.op, ComputeOp) and t.op.reduce_axis]
    return found[0] if len(found) == 1 and found[0].op.axis else None


def _rows(outs, tag: str, row_axes: int):
    """Row schedule: out's first ``row_axes`` axes are rows (one work-group each), the rest one
    row split across the work-items; every reduction of the row is a cross-thread reduction
    computed in the row's work-group. None when the shape does not suit (caller falls back)."""
    outs = as_list(outs)
    out = outs[0]
    if len(outs) != 1 or out.op.tag != tag or row_axes < 1:
        return None
    axes = list(out.op.axis)
    rows, cols = axes[:row_axes], axes[row_axes:]
    if not cols:
        return None
    reds = [t for t in producers(out) if isinstance(t.op, ComputeOp) and t.op.reduce_axis]
    n_row = _size(cols)
    nthreads = _row_threads(n_row, max_threads())
    if not nthreads or _size(rows) >= 4 * _FEW_OUTPUTS or n_row < _MIN_REDUCE:
        return None
    for r in reds:
        if _size(r.op.reduce_axis) != n_row:
            return None
    s = te.create_schedule([out.op])
    inline_injective(s, outs)
    for t in producers(out):  # the row's elementwise stages (softmax's exp) are recomputed where read
        if isinstance(t.op, ComputeOp) and not t.op.reduce_axis and s[t].attach.value == "root":
            s[t].compute_inline()
    st = s[out]
    row = st.fuse(*rows) if len(rows) > 1 else rows[0]
    col = st.fuse(*cols) if len(cols) > 1 else cols[0]
    st.bind(row, block("x"))
    _, ci = st.split(col, factor=nthreads)
    st.bind(ci, thread("x"))
    for r in reds:
        s[r].compute_at(st, row)
        s[r].set_scope("local")
        _cross_thread(s[r], nthreads)
    return s


def schedule_softmax(outs, cfg=None):
    """softmax / log_softmax (topi.nn) over the last axis: a work-group per row."""
    outs = as_list(outs)
    out = outs[0]
    axis = out.op.attrs.get("axis") if hasattr(out.op, "attrs") else None
    tag = out.op.tag if out.op.tag in ("softmax_output", "log_softmax_output") else None
    ndim = len(out.shape)
    s = None
    if tag and axis == ndim - 1 and ndim > 1:
        s = _rows(outs, tag, ndim - 1)
    return s if s is not None else schedule_per_item(outs, cfg)


def schedule_layer_norm(outs, cfg=None):
    """topi.nn.layer_norm over trailing axes: a work-group per row (mean and variance as two
    cross-thread reductions in the group, then the normalized row)."""
    outs = as_list(outs)
    out = outs[0]
    reds = [t for t in producers(out) if isinstance(t.op, ComputeOp) and t.op.reduce_axis]
    s = None
    if out.op.tag == "layer_norm_output" and reds:
        # the rows are the leading axes when the reduced ones are trailing (kept as size 1)
        row_axes = len(out.shape) - len(reds[0].op.reduce_axis)
        if all(int(getattr(d, "value", d)) == 1 for d in reds[0].shape[row_axes:]):
            s = _rows(outs, "layer_norm_output", row_axes)
    return s if s is not None else schedule_per_item(outs, cfg)


def layer_norm(data, gamma, beta, axis=-1, epsilon=1e-5):
    """topi.nn.layer_norm; float16 / bfloat16 data is normalized in float32 (moments, scale and
    shift; gamma and beta of any float dtype) and the result rounded once to the data's dtype:
    what ToMixedPrecision's float32 norm between two casts computes, in one kernel (on CUDA,
    FlattenRows folds those casts into the norm: relay/transform/combine_dense.fold_norm_casts)."""
    from ..nn.layer_norm import layer_norm as _layer_norm

    dtype = str(data.dtype)
    if dtype not in ("float16", "bfloat16"):
        return _layer_norm(data, gamma, beta, axis, epsilon)

    def wide(t, name):
        if t is None or str(t.dtype) == "float32":
            return t
        return te.compute(t.shape, lambda *i: t(*i).astype("float32"), name=name, tag="elemwise")

    out = _layer_norm(wide(data, "T_layer_norm_in"), wide(gamma, "T_layer_norm_gamma"), wide(beta, "T_layer_norm_beta"),
                      axis, epsilon)
    return te.compute(data.shape, lambda *i: out(*i).astype(dtype), name="T_layer_norm_cast", tag="layer_norm_output")


def softmax(x, axis=-1):
    """topi.nn.softmax; float16 / bfloat16 rows in float32 (maximum, exponentials, sum), the
    result rounded once to the input's dtype (layer_norm above says why)."""
    from ..nn.softmax import softmax as _softmax

    dtype = str(x.dtype)
    if dtype not in ("float16", "bfloat16"):
        return _softmax(x, axis)
    wide = te.compute(x.shape, lambda *i: x(*i).astype("float32"), name="T_softmax_in", tag="elemwise")
    out = _softmax(wide, axis)
    return te.compute(x.shape, lambda *i: out(*i).astype(dtype), name="T_softmax_cast", tag="softmax_output",
                      attrs=dict(out.op.attrs))
