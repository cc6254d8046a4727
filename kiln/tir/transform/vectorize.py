"""Turn loops marked VECTORIZED into vector expressions (Ramp, Broadcast, vector loads/stores).

A loop qualifies when its extent is a constant and its body is straight-line stores (no inner
loops, no conditions that depend on the loop variable). Otherwise it stays a serial loop and
LLVM's own vectorizer may still take it. Index expressions linear in the loop variable become
``Ramp(base, stride, lanes)``, which the backend turns into contiguous vector loads/stores.
"""

from __future__ import annotations

from dataclasses import replace

from kiln.ir import expr as E
from kiln.ir.expr import Broadcast, PrimExpr, Ramp
from kiln.ir.functor import Mutator, Visitor, uses_var
from kiln.ir.stmt import BufferStore, For, ForKind, LetStmt, PrimFunc, SeqStmt, Evaluate
from kiln.tir.simplify import simplify

MAX_LANES = 64


class _CannotVectorize(Exception):
    pass


def _lanes_of(e: PrimExpr) -> int:
    return e.dtype.lanes


def _bcast(e: PrimExpr, lanes: int) -> PrimExpr:
    if e.dtype.lanes == lanes:
        return e
    if e.dtype.lanes != 1:
        raise _CannotVectorize(f"mixed lane counts {e.dtype.lanes} and {lanes}")
    return Broadcast(e, lanes, e.dtype.with_lanes(lanes))


class _Vectorizer(Mutator):
    def __init__(self, var: E.Var, lanes: int):
        super().__init__()
        self.var = var
        self.lanes = lanes
        self.lets: dict[int, E.Var] = {}

    def visit_Var(self, v):
        if v is self.var:
            return Ramp(E.const(0, v.dtype), E.const(1, v.dtype), self.lanes, v.dtype.with_lanes(self.lanes))
        return self.lets.get(id(v), v)

    visit_SizeVar = visit_Var

    def _binary(self, op):
        a, b = self.visit(op.a), self.visit(op.b)
        if a is op.a and b is op.b:
            return op
        t = type(op)
        la, lb = _lanes_of(a), _lanes_of(b)
        n = max(la, lb)
        # A lane-invariant operand is its scalar: Broadcast(x) op Broadcast(y) is Broadcast(x op y),
        # and Ramp + Broadcast(x) a Ramp, so contiguous accesses stay Ramps.
        if isinstance(a, Broadcast) and (lb == 1 or isinstance(b, (Ramp, Broadcast))):
            a, la = a.value, 1
        if isinstance(b, Broadcast) and (la == 1 or isinstance(a, Ramp)):
            b, lb = b.value, 1
        if la == 1 and lb == 1:
            return Broadcast(simplify(t(a, b, op.dtype.element_of())), n, op.dtype.element_of().with_lanes(n))
        if t in (E.Add, E.Sub) and (isinstance(a, Ramp) or isinstance(b, Ramp)):
            if isinstance(a, Ramp) and lb == 1:
                return Ramp(simplify(t(a.base, b, b.dtype)), a.stride, n, a.dtype)
            if isinstance(b, Ramp) and la == 1 and t is E.Add:
                return Ramp(simplify(E.Add(a, b.base, a.dtype)), b.stride, n, b.dtype)
            if isinstance(a, Ramp) and isinstance(b, Ramp):
                return Ramp(simplify(t(a.base, b.base, a.base.dtype)), simplify(t(a.stride, b.stride, a.stride.dtype)), n, a.dtype)
        if t is E.Mul and (isinstance(a, Ramp) and lb == 1 or isinstance(b, Ramp) and la == 1):
            r, s = (a, b) if isinstance(a, Ramp) else (b, a)
            return Ramp(simplify(E.Mul(r.base, s, s.dtype)), simplify(E.Mul(r.stride, s, s.dtype)), n, r.dtype)
        if t in (E.FloorDiv, E.FloorMod) and isinstance(a, Ramp) and isinstance(b, E.IntImm):
            # A ramp that stays inside one block of b: constant quotient, ramp remainder.
            base, stride, c = a.base, a.stride, b.value
            if isinstance(stride, E.IntImm) and stride.value * (n - 1) < c:
                from kiln.tir.simplify import Analyzer

                mod = simplify(E.FloorMod(base, b, base.dtype))
                lo, hi = Analyzer().const_bound(mod)
                span = stride.value * n
                # base a multiple of the ramp's span, and the span dividing c: never crosses a block.
                aligned = span > 0 and c % span == 0 and _multiple_of(base, span)
                if isinstance(mod, E.IntImm) or hi + stride.value * (n - 1) < c or aligned:
                    if t is E.FloorDiv:
                        return Broadcast(simplify(E.FloorDiv(base, b, base.dtype)), n, a.dtype)
                    return Ramp(mod, stride, n, a.dtype)
        elem = op.dtype.element_of()
        return t(_bcast(a, n), _bcast(b, n), elem.with_lanes(n))

    visit_Add = visit_Sub = visit_Mul = visit_Div = visit_Mod = _binary
    visit_FloorDiv = visit_FloorMod = visit_Min = visit_Max = _binary
    visit_EQ = visit_NE = visit_LT = visit_LE = visit_GT = visit_GE = _binary
    visit_And = visit_Or = _binary

    def visit_Not(self, op):
        a = self.visit(op.a)
        return op if a is op.a else E.Not(a, a.dtype)

    def visit_Cast(self, op):
        v = self.visit(op.value)
        if v is op.value:
            return op
        return E.Cast(op.dtype.element_of().with_lanes(v.dtype.lanes), v)

    def visit_Select(self, op):
        c, t, f = self.visit(op.condition), self.visit(op.true_value), self.visit(op.false_value)
        if c is op.condition and t is op.true_value and f is op.false_value:
            return op
        n = max(_lanes_of(c), _lanes_of(t), _lanes_of(f))
        return E.Select(_bcast(c, n), _bcast(t, n), _bcast(f, n), op.dtype.element_of().with_lanes(n))

    def visit_Call(self, op):
        args = [self.visit(a) for a in op.args]
        if all(a is b for a, b in zip(args, op.args)):
            return op
        if op.op == "tir.if_then_else":
            if args[0] is not op.args[0]:
                # Only the chosen side may be evaluated; lanes can disagree, so stay scalar.
                raise _CannotVectorize("if_then_else depends on the vectorized variable")
            # One condition for all lanes (padding along an axis outside the vector): a branch
            # between two vector values, each evaluated only when chosen.
            n = max(_lanes_of(a) for a in args[1:])
            return E.Call(op.dtype.element_of().with_lanes(n), op.op, (args[0], _bcast(args[1], n), _bcast(args[2], n)))
        if op.op in ("tir.likely",):
            return args[0]
        n = max(_lanes_of(a) for a in args)
        return E.Call(op.dtype.element_of().with_lanes(n), op.op, tuple(_bcast(a, n) for a in args))

    def visit_BufferLoad(self, op):
        idx = [self.visit(i) for i in op.indices]
        if all(a is b for a, b in zip(idx, op.indices)):
            return op
        if len(idx) != 1:
            raise _CannotVectorize("multi-dimensional access")
        n = _lanes_of(idx[0])
        return E.BufferLoad(op.buffer, (idx[0],), op.dtype.element_of().with_lanes(n))

    def visit_Let(self, op):
        value = self.visit(op.value)
        new_var = op.var
        if value is not op.value:
            new_var = E.Var(op.var.name, value.dtype)
            self.lets[id(op.var)] = new_var
        body = self.visit(op.body)
        if new_var is op.var and body is op.body:
            return op
        # The Let has its body's type, which may have become a vector even with a scalar value.
        return E.Let(new_var, value, body, body.dtype)

    def visit_Ramp(self, op):
        raise _CannotVectorize("nested vectorization")

    def visit_Broadcast(self, op):
        raise _CannotVectorize("nested vectorization")

    # Statements --------------------------------------------------------------------------
    def visit_BufferStore(self, op):
        value = self.visit(op.value)
        idx = [self.visit(i) for i in op.indices]
        if len(idx) != 1:
            raise _CannotVectorize("multi-dimensional store")
        n = max(_lanes_of(value), _lanes_of(idx[0]))
        if _lanes_of(idx[0]) == 1 and n > 1:
            raise _CannotVectorize("store of a vector to one address (a reduction over the vectorized axis)")
        if n == 1:
            # The store does not depend on the variable: every lane writes the same element.
            return op
        return BufferStore(op.buffer, _bcast(value, n), (idx[0],))

    def visit_LetStmt(self, op):
        value = self.visit(op.value)
        if value is op.value:
            return replace(op, body=self.visit(op.body))
        new_var = E.Var(op.var.name, value.dtype)
        self.lets[id(op.var)] = new_var
        return LetStmt(new_var, value, self.visit(op.body))

    def visit_SeqStmt(self, op):
        return SeqStmt(tuple(self.visit(s) for s in op.seq))

    def visit_Evaluate(self, op):
        return op

    def visit_For(self, op):
        raise _CannotVectorize("inner loop")

    def visit_IfThenElse(self, op):
        if uses_var(op.condition, lambda v: v is self.var):
            raise _CannotVectorize("condition depends on the vectorized variable")
        return replace(op, then_case=self.visit(op.then_case),
                       else_case=self.visit(op.else_case) if op.else_case is not None else None)

    def visit_Allocate(self, op):
        raise _CannotVectorize("allocation inside a vectorized loop")


class _VectorizeLoops(Mutator):
    def visit_For(self, op):
        body = self.visit(op.body)
        if op.kind != ForKind.VECTORIZED:
            return op if body is op.body else replace(op, body=body)
        ext = op.extent
        if not isinstance(ext, E.IntImm) or not isinstance(op.min, E.IntImm) or ext.value > MAX_LANES or ext.value < 2:
            return replace(op, kind=ForKind.SERIAL, body=body)
        try:
            vec = _Vectorizer(op.loop_var, ext.value).visit(body)
        except _CannotVectorize:
            return replace(op, kind=ForKind.SERIAL, body=body)
        if op.min.value != 0:
            from kiln.ir.functor import substitute

            vec = substitute(vec, {op.loop_var: op.min})
        return vec


def vectorize_loops(func: PrimFunc) -> PrimFunc:
    return replace(func, body=_VectorizeLoops().visit(func.body))


_ = (Visitor, Evaluate)


def _multiple_of(e, k: int) -> bool:
    """Whether the integer expression e is provably a multiple of k (sums and products of terms)."""
    if isinstance(e, E.IntImm):
        return e.value % k == 0
    if isinstance(e, E.Mul):
        return any(isinstance(x, E.IntImm) and x.value % k == 0 for x in (e.a, e.b)) or \
            _multiple_of(e.a, k) or _multiple_of(e.b, k)
    if isinstance(e, (E.Add, E.Sub)):
        return _multiple_of(e.a, k) and _multiple_of(e.b, k)
    return False
