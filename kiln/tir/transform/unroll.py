"""Unroll loops marked UNROLLED, and small inner loops under ``pragma("auto_unroll_max_step", n)``.

Under ``pragma("unroll_explicit", False)`` the loops stay loops of kind UNROLLED: the code
generator asks its compiler to unroll them (``#pragma unroll`` in GPU source, LLVM metadata).
"""

from __future__ import annotations

from dataclasses import replace

from kiln.ir import expr as E
from kiln.ir.functor import Mutator, Visitor, substitute
from kiln.ir.stmt import For, ForKind, PrimFunc, seq

MAX_UNROLL = 256


def _steps(stmt) -> int:
    """Iterations of the innermost statements: the product of nested constant extents."""
    total = 1

    class _Count(Visitor):
        def visit_For(self, op):
            nonlocal total
            if op.kind == ForKind.THREAD_BINDING:  # GPU threads run it in parallel, not in steps
                self.visit(op.body)
                return
            if isinstance(op.extent, E.IntImm):
                total *= max(op.extent.value, 1)
            else:
                total = 1 << 30
            self.visit(op.body)

    _Count().visit(stmt)
    return total


class _Unroll(Mutator):
    def __init__(self):
        super().__init__()
        self.auto_max = 0
        self.explicit = True

    def visit_For(self, op):
        saved = self.auto_max, self.explicit
        step = op.annotations.get("pragma_auto_unroll_max_step")
        if step is not None:
            self.auto_max = int(step)
        explicit = op.annotations.get("pragma_unroll_explicit")
        if explicit is not None:
            self.explicit = bool(int(explicit))
        body = self.visit(op.body)
        self.auto_max, self.explicit = saved
        const_loop = isinstance(op.extent, E.IntImm) and isinstance(op.min, E.IntImm)
        want = op.kind == ForKind.UNROLLED or (
            self.auto_max and op.kind == ForKind.SERIAL and const_loop and _steps(op) <= self.auto_max
        )
        if want and const_loop and op.extent.value <= MAX_UNROLL and not self.explicit:
            return replace(op, kind=ForKind.UNROLLED, body=body)
        if want and const_loop and op.extent.value <= MAX_UNROLL:
            lo = op.min.value
            return seq(*[substitute(body, {op.loop_var: E.const(lo + i, op.loop_var.dtype)}) for i in range(op.extent.value)])
        if body is op.body:
            return op
        return replace(op, body=body)


def unroll_loops(func: PrimFunc) -> PrimFunc:
    return replace(func, body=_Unroll().visit(func.body))
