"""Lane k of a vector expression, as a scalar expression: the one place that knows how.

Used wherever a vector value must be written lane by lane: the C target's scalarize pass (k a
loop variable), the CUDA printer (vector structs have no arithmetic; k an int), and the printers'
gathers and texture reads (``index_lane``: an index vector's lane, left unfolded as printed).
"""

from __future__ import annotations

from dataclasses import replace

from kiln.errors import CompileError
from kiln.ir import expr as E
from kiln.ir.functor import substitute


def lane(e, k, leaf=None, what: str = ""):
    """Lane ``k`` (an int, or an int32 PrimExpr) of ``e``; a scalar is the same in every lane.

    ``leaf(e, k)`` is asked first for each vector BufferLoad and Var: a scalar expression, or
    None for the default (a BufferLoad of the lane's index; a vector Var has none). ``what``
    names the caller in the error for expressions no lane can be taken of."""
    if e.dtype.lanes == 1:
        return e
    if leaf is not None and isinstance(e, (E.BufferLoad, E.Var)):
        got = leaf(e, k)
        if got is not None:
            return got
    el = e.dtype.element_of()

    def sub(x):
        return lane(x, k, leaf, what)

    if isinstance(e, E.Ramp):
        return _ramp_lane(e, k)
    if isinstance(e, E.Broadcast):
        return e.value
    if isinstance(e, E.BufferLoad):
        return E.BufferLoad(e.buffer, tuple(sub(i) for i in e.indices), el)
    if isinstance(e, E.Cast):
        return E.Cast(el, sub(e.value))
    if isinstance(e, E.BinaryOp):
        return replace(e, a=sub(e.a), b=sub(e.b), dtype=el)
    if isinstance(e, E.Not):
        return E.Not(sub(e.a), el)
    if isinstance(e, E.Select):
        return E.Select(sub(e.condition), sub(e.true_value), sub(e.false_value), el)
    if isinstance(e, E.Let):
        return sub(substitute(e.body, {e.var: e.value}))
    if isinstance(e, E.Call):
        return E.Call(el, e.op, tuple(sub(a) if isinstance(a, E.PrimExpr) else a for a in e.args))
    raise CompileError(f"{what + ': ' if what else ''}cannot take lane {k} of the vector expression "
                       f"{type(e).__name__} ({e}); do not vectorize this loop")


def _ramp_lane(e: E.Ramp, k):
    if isinstance(k, int):  # a constant lane: fold what is constant
        if isinstance(e.stride, E.IntImm):
            return E.Add(e.base, E.const(k * e.stride.value, e.stride.dtype), e.base.dtype) if k else e.base
        return E.Add(e.base, E.Mul(e.stride, E.const(k, e.stride.dtype), e.stride.dtype), e.base.dtype)
    kk = k if k.dtype == e.base.dtype else E.Cast(e.base.dtype, k)
    unit = isinstance(e.stride, E.IntImm) and e.stride.value == 1
    return E.Add(e.base, kk if unit else E.Mul(e.stride, kk, e.base.dtype), e.base.dtype)


def index_lane(idx, k: int):
    """Lane ``k`` of an index vector (Ramp or Broadcast) as printed: ``base + stride * k``; None
    for other index vectors (the caller takes its lane another way)."""
    if isinstance(idx, E.Ramp):
        return E.Add(idx.base, E.Mul(idx.stride, E.const(k, idx.stride.dtype), idx.stride.dtype), idx.base.dtype)
    if isinstance(idx, E.Broadcast):
        return idx.value
    return None
