"""ONNX reductions: Reduce* (axes as attribute or, in newer opsets, as an input) and ArgMax/ArgMin."""

from __future__ import annotations

from ...op import reduce as r
from ...op import tensor
from ...op import transform as tf


def _axes(ctx, ins, attrs):
    if len(ins) > 1 and ins[1] is not None:
        axes = [int(a) for a in ctx.value(ins[1], "axes").reshape(-1)]
    else:
        axes = attrs.get("axes")
    if not axes:
        return None if not attrs.get("noop_with_empty_axes", 0) else ()
    return tuple(axes)


def _reduce(fn, pre=None, post=None):
    def convert(ctx, ins, attrs):
        x = ins[0]
        axes = _axes(ctx, ins, attrs)
        if axes == ():
            return x
        if pre:
            x = pre(ctx, x)
        out = fn(x, axis=axes, keepdims=bool(attrs.get("keepdims", 1)))
        return post(ctx, out) if post else out
    return convert


def _square(ctx, x):
    return tensor.multiply(x, x)


def _abs(ctx, x):
    return tensor.abs(x)


def _sqrt(ctx, x):
    return tensor.sqrt(x)


def _log(ctx, x):
    return tensor.log(x)


def _log_sum_exp(ctx, ins, attrs):
    x = ins[0]
    axes = _axes(ctx, ins, attrs)
    keep = bool(attrs.get("keepdims", 1))
    m = r.max(x, axis=axes, keepdims=True)
    s = r.sum(tensor.exp(tensor.subtract(x, m)), axis=axes, keepdims=True)
    out = tensor.add(tensor.log(s), m)
    return out if keep else tf.squeeze(out, _norm(axes, len(ctx.shape_of(x))))


def _norm(axes, ndim):
    return tuple(range(ndim)) if axes is None else tuple(a % ndim for a in axes)


def _arg(fn):
    def convert(ctx, ins, attrs):
        out = fn(ins[0], axis=int(attrs.get("axis", 0)), keepdims=bool(attrs.get("keepdims", 1)),
                 select_last_index=bool(attrs.get("select_last_index", 0)))
        return tf.cast(out, "int64")
    return convert


CONVERTERS = {
    "ReduceSum": _reduce(r.sum), "ReduceMean": _reduce(r.mean), "ReduceMax": _reduce(r.max),
    "ReduceMin": _reduce(r.min), "ReduceProd": _reduce(r.prod), "ReduceL1": _reduce(r.sum, pre=_abs),
    "ReduceL2": _reduce(r.sum, pre=_square, post=_sqrt), "ReduceSumSquare": _reduce(r.sum, pre=_square),
    "ReduceLogSum": _reduce(r.sum, post=_log), "ReduceLogSumExp": _log_sum_exp,
    "ArgMax": _arg(r.argmax), "ArgMin": _arg(r.argmin),
}

