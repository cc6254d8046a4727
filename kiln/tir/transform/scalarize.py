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
from kiln.tir.lanes import lane


class _Scalarize(Mutator):
    def visit_BufferStore(self, s):
        index = s.indices[0]
        lanes = max(s.value.dtype.lanes, index.dtype.lanes)
        if lanes == 1:
            return s
        k = E.Var("lane", E.const(0).dtype)
        body = BufferStore(s.buffer, lane(s.value, k, what="the C target"), tuple(lane(i, k, what="the C target") for i in s.indices))
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

