"""Split loops so that the guards of non-divisible splits vanish from the main body.

A guard ``if likely(c*v + rest < bound)`` inside a loop over v is true for every inner
iteration while ``v < v_end``; the loop becomes ``[min, v_end)`` without the guard and
``[v_end, min+extent)`` with it. Runs before vectorization so the main body vectorizes.
"""

from __future__ import annotations

from dataclasses import replace

from kiln.ir import expr as E
from kiln.ir.functor import Mutator, Visitor
from kiln.ir.stmt import For, ForKind, IfThenElse, PrimFunc, seq
from kiln.tir.simplify import INF, Analyzer, _linear, simplify


class _Guards(Visitor):
    """likely() conditions in a loop body, with the ranges of the loops around each."""

    def __init__(self):
        super().__init__()
        self.loops: list[For] = []
        self.found: list[tuple[E.PrimExpr, list[For]]] = []

    def visit_For(self, op):
        self.loops.append(op)
        self.visit(op.body)
        self.loops.pop()

    def visit_IfThenElse(self, op):
        c = op.condition
        if isinstance(c, E.Call) and c.op == "tir.likely":
            for part in _conjuncts(c.args[0]):
                self.found.append((part, list(self.loops)))
        self.generic_visit(op)


def _conjuncts(c):
    if isinstance(c, E.And):
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _end_for(cond, v: E.Var, inner: list[For]):
    """v_end such that cond holds for all inner iterations when v < v_end, or None."""
    if not isinstance(cond, E.LT) or not cond.a.dtype.is_integer:
        return None
    lin = _linear(simplify(cond.a - cond.b))
    key = ("var", id(v))
    if key not in lin.terms:
        return None
    coeff = lin.terms[key][1]
    if coeff <= 0:
        return None
    inner_ids = {id(f.loop_var) for f in inner}
    an = Analyzer()
    for f in inner:
        an.bind(f.loop_var, (f.min, f.extent))
    hi_inner = 0
    invariant = E.const(lin.const, cond.a.dtype)
    for k, (atom, c) in lin.terms.items():
        if k == key:
            continue
        from kiln.ir.functor import uses_var

        if uses_var(atom, lambda x: id(x) in inner_ids):
            lo, hi = an.const_bound(atom)
            bound = c * hi if c > 0 else c * lo
            if bound in (INF, -INF):
                return None
            hi_inner += bound
        elif uses_var(atom, lambda x: x is v):
            return None
        else:
            invariant = invariant + atom * c
    # coeff*v + invariant + hi_inner < 0  <=>  v < ceil(-(invariant + hi_inner) / coeff)
    num = simplify(E.const(0, cond.a.dtype) - invariant - hi_inner)
    return simplify(E.FloorDiv(num + (coeff - 1), E.const(coeff, cond.a.dtype), cond.a.dtype))


class _Drop(Mutator):
    """Replace the given guard conditions by true."""

    def __init__(self, conds: list):
        super().__init__()
        self.conds = {id(c) for c in conds}

    def visit_IfThenElse(self, op):
        c = op.condition
        if isinstance(c, E.Call) and c.op == "tir.likely":
            parts = [p for p in _conjuncts(c.args[0]) if id(p) not in self.conds]
            then = self.visit(op.then_case)
            if not parts:
                return then
            cond = parts[0]
            for p in parts[1:]:
                cond = E.And(cond, p, cond.dtype)
            return IfThenElse(E.Call(c.dtype, "tir.likely", (cond,)), then, op.else_case)
        return self.generic_visit(op)


class _Partition(Mutator):
    def visit_For(self, op):
        if op.kind in (ForKind.VECTORIZED, ForKind.THREAD_BINDING):
            return op
        finder = _Guards()
        finder.visit(op.body)
        ends, conds = [], []
        for cond, inner in finder.found:
            end = _end_for(cond, op.loop_var, inner)
            if end is not None:
                ends.append(end)
                conds.append(cond)
        if not ends:
            return replace(op, body=self.visit(op.body))
        end = ends[0]
        for e in ends[1:]:
            end = E.Min(end, e, end.dtype)
        stop = simplify(op.min + op.extent)
        end = simplify(E.Max(E.Min(end, stop, end.dtype), op.min, end.dtype))
        main_ext = simplify(end - op.min)
        tail_ext = simplify(stop - end)
        main_body = self.visit(_Drop(conds).visit(op.body))
        parts = []
        if not (isinstance(main_ext, E.IntImm) and main_ext.value <= 0):
            parts.append(replace(op, extent=main_ext, body=main_body))
        if not (isinstance(tail_ext, E.IntImm) and tail_ext.value <= 0):
            # The tail is short: run it serially, whatever the kind of the main loop.
            kind = op.kind if op.kind != ForKind.PARALLEL else ForKind.SERIAL
            tail_var = E.Var(op.loop_var.name, op.loop_var.dtype)
            from kiln.ir.functor import substitute

            tail_body = substitute(op.body, {op.loop_var: tail_var})
            parts.append(replace(op, loop_var=tail_var, min=end, extent=tail_ext, kind=kind, body=self.visit(tail_body)))
        return seq(*parts)


def partition_loops(func: PrimFunc) -> PrimFunc:
    return replace(func, body=_Partition().visit(func.body))
