"""Simplify every expression of a function, using the ranges of the loops around it."""

from __future__ import annotations

from dataclasses import replace

from kiln.ir import expr as E
from kiln.ir.functor import substitute
from kiln.ir.stmt import Evaluate, For, ForKind, IfThenElse, PrimFunc, seq
from kiln.tir.simplify import Analyzer, _Simplifier


class _StmtSimplifier(_Simplifier):
    def visit_For(self, op):
        mn = self.visit(op.min)
        ext = self.visit(op.extent)
        if isinstance(ext, E.IntImm) and ext.value <= 0:
            return seq()
        if isinstance(ext, E.IntImm) and ext.value == 1 and op.kind != ForKind.THREAD_BINDING:
            # A one-iteration loop is its body with the variable fixed.
            return self.visit(substitute(op.body, {op.loop_var: mn}))
        saved = self.an.bounds.get(id(op.loop_var))
        self.an.bind(op.loop_var, (mn, ext))
        body = self.visit(op.body)
        if saved is None:
            self.an.bounds.pop(id(op.loop_var), None)
        else:
            self.an.bounds[id(op.loop_var)] = saved
        if isinstance(body, Evaluate) and isinstance(body.value, E.IntImm):
            return body
        if mn is op.min and ext is op.extent and body is op.body:
            return op
        return replace(op, min=mn, extent=ext, body=body)

    def visit_IfThenElse(self, op):
        cond = self.visit(op.condition)
        if isinstance(cond, E.IntImm):
            if cond.value:
                return self.visit(op.then_case)
            return self.visit(op.else_case) if op.else_case is not None else seq()
        then = self.visit(op.then_case)
        other = self.visit(op.else_case) if op.else_case is not None else None
        if cond is op.condition and then is op.then_case and other is op.else_case:
            return op
        return IfThenElse(cond, then, other)

    def visit_SeqStmt(self, op):
        items = [self.visit(s) for s in op.seq]
        if all(a is b for a, b in zip(items, op.seq)):
            return op
        return seq(*items)


def simplify_func(func: PrimFunc) -> PrimFunc:
    body = _StmtSimplifier(Analyzer()).visit(func.body)
    return func if body is func.body else replace(func, body=body)
