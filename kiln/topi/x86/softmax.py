"""softmax / log_softmax over the last axis for x86: row-wise, with vectorized reductions.

Reducing along the contiguous axis one element at a time is a serial dependency chain; here
each row keeps ``lanes`` partial maxima / sums in a vector (``part[.., v]`` over ``k = ko*lanes + v``)
and folds them, plus the tail of the row, at the end:

    m    = max(part_max[.., v] for v; x[.., tail])      e = exp(x - m)
    s    = sum(part_sum[.., v] for v; e[.., tail])      out = e * (1 / s)

The schedule computes all of it inside a parallel loop over rows, so a row stays in L1.
Other axes fall back to the generic compute and schedule.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.ir.expr import const

from ..cpu import vector_lanes
from ..fast_math import fast_exp_expr
from ..generic.default import default_schedule
from ..nn.softmax import log_softmax as _generic_log_softmax, softmax as _generic_softmax
from ..reduction import normalize_axes
from ..utils import const_int

TAG = "softmax_rows"

# Row maxima as select(a > b, a, b): one vmaxps a vector on x86, where te.max is NaN-propagating
# (llvm.maximum: a compare, a blend and a mask move more). A NaN in a row still makes the row NaN,
# through exp and the row sum.
select_max = te.comm_reducer(lambda a, b: tir.Select(a > b, a, b), tir.min_value, name="select_max")


def _row_reduce(x, n: int, lanes: int, reducer, name: str, tag: str = TAG):
    """reducer over the last axis of x (size n) via lanes partial results."""
    lead = tuple(x.shape[:-1])
    main = n // lanes
    tail = n - main * lanes
    ko = te.reduce_axis((0, main), name="ko")
    part = te.compute(lead + (lanes,), lambda *i: reducer(x(*i[:-1], ko.var * lanes + i[-1]), axis=ko),
                      name=f"{name}_part", tag=f"{tag}_part")
    j = te.reduce_axis((0, lanes + tail), name="j")

    def fold(*i):
        jv = j.var
        v = tir.if_then_else(jv < lanes, part(*i, tir.min(jv, lanes - 1)), x(*i, tir.max(main * lanes + jv - lanes, 0)))
        return reducer(v, axis=j)

    return te.compute(lead, fold, name=name, tag=f"{tag}_fold")


def softmax(x, axis=-1):
    """Same result as topi.nn.softmax."""
    return _softmax(x, axis, log=False)


def log_softmax(x, axis=-1):
    return _softmax(x, axis, log=True)


def _softmax(x, axis, log: bool):
    ndim = len(x.shape)
    (axis,) = normalize_axes(ndim, axis, op="softmax")
    n = const_int(x.shape[-1])
    lanes = vector_lanes()
    if axis != ndim - 1 or n < lanes:
        return _generic_log_softmax(x, axis) if log else _generic_softmax(x, axis)
    m = _row_reduce(x, n, lanes, select_max, "T_softmax_max")
    # float16 rows: exp and sum in float32, one rounding at the end (a float16 sum of n terms
    # loses about n/2 roundings)
    wide = "float32" if str(x.dtype) == "float16" else str(x.dtype)
    # fast_exp: a libm call per lane would dominate the whole softmax.
    e = te.compute(x.shape, lambda *i: fast_exp_expr(x(*i).astype(wide) - m(*i[:-1]).astype(wide)),
                   name="T_softmax_exp", tag=f"{TAG}_exp")
    s = _row_reduce(e, n, lanes, te.sum, "T_softmax_sum")
    if log:
        return te.compute(x.shape, lambda *i: (x(*i).astype(wide) - m(*i[:-1]).astype(wide)
                                               - tir.log(s(*i[:-1]))).astype(x.dtype), name="T_log_softmax", tag=TAG)
    one = const(1.0, wide)
    return te.compute(x.shape, lambda *i: (e(*i) * (one / s(*i[:-1]))).astype(x.dtype), name="T_softmax", tag=TAG)


def schedule_softmax(outs, cfg=None):
    """Rows in parallel; every stage of a row computed at that row, vectorized along it."""
    del cfg
    return schedule_rows(outs, TAG)


def schedule_rows(outs, tag: str):
    """For row-wise ops built from _row_reduce: stages tagged tag* computed per parallel row."""
    outs = [outs] if isinstance(outs, te.Tensor) else list(outs)
    out = outs[0]
    if out.op.tag != tag:
        return default_schedule(outs)
    s = te.create_schedule([o.op for o in outs])
    lanes = vector_lanes()
    *lead, k = s[out].op.axis
    # A 1-d input is one row: no row loop to parallelize or to compute the stages at, so they
    # stay at the root, one after another (the vector partial reductions still apply).
    row = (s[out].fuse(*lead) if len(lead) > 1 else lead[0]) if lead else None
    if row is not None:
        s[out].parallel(row)
    s[out].vectorize(s[out].split(k, factor=lanes)[1])
    stages, seen = [], set()
    stack = list(out.op.input_tensors)
    while stack:
        t = stack.pop()
        if id(t.op) in seen or not t.op.tag.startswith(tag):
            continue
        seen.add(id(t.op))
        stages.append(t)
        stack.extend(t.op.input_tensors)
    for t in stages:
        for u in t.op.input_tensors:
            if u.op.tag == "elemwise":
                s[u].compute_inline()
    for t in stages:
        st = s[t]
        if row is not None:
            st.compute_at(s[out], row)
        if t.op.tag.endswith("_part"):
            *_, v = st.op.axis
            (ko,) = st.op.reduce_axis
            st.reorder(ko, v)
            st.vectorize(v)
        elif t.op.tag.endswith("_exp"):
            *_, kk = st.op.axis
            st.vectorize(st.split(kk, factor=lanes)[1])
    return s
