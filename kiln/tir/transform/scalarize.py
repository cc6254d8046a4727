"""Vector statements as loops over lanes, for targets that print portable C (no vector types):
the C target's pipeline step tir.Scalarize (C_PIPELINE).

After the TIR pipeline a vectorized loop is a store of a vector value at a Ramp index. Plain C99
has no vector types, and the microcontrollers the C target is for have no SIMD the compiler could
use through them anyway, so each such store becomes ``for (lane = 0; lane < L; ++lane)`` of the
scalar store that lane would do. The C compiler may vectorize it again where the CPU can.
"""

from __future__ import annotations

from dataclasses import replace

from kiln.errors import CompileError
from kiln.ir import expr as E
from kiln.ir.functor import Mutator
from kiln.ir.stmt import BufferStore, For, ForKind, PrimFunc


def _lane(e, k):
    """Lane k (an int32 expression) of e; a scalar is the same in every lane."""
    if e.dtype.lanes == 1:
        return e
    if isinstance(e, E.Ramp):
        kk = _as(k, e.base)
        unit = isinstance(e.stride, E.IntImm) and e.stride.value == 1
        return E.Add(e.base, kk if unit else E.Mul(e.stride, kk, e.base.dtype), e.base.dtype)
    if isinstance(e, E.Broadcast):
        return e.value
    elem = e.dtype.element_of()
    if isinstance(e, E.BufferLoad):
        return E.BufferLoad(e.buffer, tuple(_lane(i, k) for i in e.indices), elem)
    if isinstance(e, E.Cast):
        return E.Cast(elem, _lane(e.value, k))
    if isinstance(e, E.BinaryOp):
        return replace(e, a=_lane(e.a, k), b=_lane(e.b, k), dtype=elem)
    if isinstance(e, E.Not):
        return E.Not(_lane(e.a, k), elem)
    if isinstance(e, E.Select):
        return E.Select(_lane(e.condition, k), _lane(e.true_value, k), _lane(e.false_value, k), elem)
    if isinstance(e, E.Call):
        return E.Call(elem, e.op, tuple(_lane(a, k) if isinstance(a, E.PrimExpr) else a for a in e.args))
    raise CompileError(f"the C target cannot split the vector expression {type(e).__name__} ({e}) into lanes; "
                       "do not vectorize this loop")


def _as(k, like):
    return k if like.dtype == k.dtype else E.Cast(like.dtype, k)


class _Scalarize(Mutator):
    def visit_BufferStore(self, s):
        index = s.indices[0]
        lanes = max(s.value.dtype.lanes, index.dtype.lanes)
        if lanes == 1:
            return s
        k = E.Var("lane", E.const(0).dtype)
        body = BufferStore(s.buffer, _lane(s.value, k), tuple(_lane(i, k) for i in s.indices))
        return For(k, E.const(0), E.const(lanes), ForKind.SERIAL, body)

    def visit_LetStmt(self, s):
        if s.var.dtype.lanes > 1:
            raise CompileError(f"the C target cannot hold the vector value {s.var.name} ({s.var.dtype}); "
                               "do not vectorize this loop")
        return self.generic_visit(s)


def scalarize(func: PrimFunc) -> PrimFunc:
    """func with every vector store turned into a loop over its lanes."""
    body = _Scalarize().visit(func.body)
    return func if body is func.body else replace(func, body=body)

