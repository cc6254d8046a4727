"""softmax and log_softmax along one axis (max-subtracted, so large inputs do not overflow)."""

from __future__ import annotations

from kiln import te, tir

from ..reduction import normalize_axes


def _reduce_along(x, axis, reducer, name, fvalue=None):
    k = te.reduce_axis((0, x.shape[axis]), name="k")
    shape = tuple(s for d, s in enumerate(x.shape) if d != axis)

    def fcompute(*i):
        v = fvalue(*i[:axis], k.var, *i[axis:]) if fvalue else x(*i[:axis], k.var, *i[axis:])
        return reducer(v, axis=k)

    return te.compute(shape, fcompute, name=name, tag="softmax_reduce")


def softmax(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) along axis: ``topi.nn.softmax(x, axis=1)``."""
    (axis,) = normalize_axes(len(x.shape), axis, op="softmax")

    def drop(i):
        return i[:axis] + i[axis + 1:]

    max_elem = _reduce_along(x, axis, te.max, "T_softmax_maxelem")
    exp = te.compute(x.shape, lambda *i: tir.exp(x(*i) - max_elem(*drop(i))), name="T_softmax_exp", tag="softmax_exp")
    expsum = _reduce_along(exp, axis, te.sum, "T_softmax_expsum")
    return te.compute(x.shape, lambda *i: exp(*i) / expsum(*drop(i)), name="T_softmax_norm", tag="softmax_output",
                      attrs={"axis": axis})


def log_softmax(x, axis=-1):
    """x - max - log(sum(exp(x - max))) along axis."""
    (axis,) = normalize_axes(len(x.shape), axis, op="log_softmax")

    def drop(i):
        return i[:axis] + i[axis + 1:]

    max_elem = _reduce_along(x, axis, te.max, "T_softmax_maxelem")
    expsum = _reduce_along(x, axis, te.sum, "T_softmax_expsum",
                           lambda *i: tir.exp(x(*i) - max_elem(*drop(i))))
    return te.compute(x.shape, lambda *i: x(*i) - max_elem(*drop(i)) - tir.log(expsum(*drop(i))),
                      name="T_log_softmax", tag="log_softmax_output", attrs={"axis": axis})
