"""Arithmetic simplification: constant folding and canonical index arithmetic.

Integer expressions built from +, -, * by constants are brought to a canonical linear form
(sum of coefficient × atom, plus a constant). Floor division and modulo by positive constants
use the known ranges of loop variables, which is what turns the index arithmetic of
split/fuse (``(i*32 + j) // 32`` with ``0 <= j < 32``) back into ``i``. Floats are only
constant-folded: reassociating them would change results.
"""

from __future__ import annotations

import math

from kiln.ir import expr as E
from kiln.ir.expr import IntImm, FloatImm, PrimExpr, Var, const
from kiln.ir.dtype import BOOL_T
from kiln.ir.functor import Mutator
from kiln.ir.stmt import IfThenElse
from kiln.tir.op import likely

INF = math.inf


# Linear forms -------------------------------------------------------------------------------


class Linear:
    """sum(coeff * atom) + constant, atoms keyed by identity (Vars) or structure (the rest)."""

    __slots__ = ("terms", "const", "dtype")

    def __init__(self, terms: dict, c: int, dtype):
        self.terms = terms  # key -> (atom, coeff)
        self.const = c
        self.dtype = dtype

    def scaled(self, k: int) -> "Linear":
        return Linear({key: (a, c * k) for key, (a, c) in self.terms.items()}, self.const * k, self.dtype)

    def plus(self, other: "Linear", sign: int = 1) -> "Linear":
        terms = dict(self.terms)
        for key, (a, c) in other.terms.items():
            if key in terms:
                nc = terms[key][1] + sign * c
                if nc:
                    terms[key] = (terms[key][0], nc)
                else:
                    del terms[key]
            else:
                terms[key] = (a, sign * c)
        return Linear(terms, self.const + sign * other.const, self.dtype)

    def to_expr(self) -> PrimExpr:
        pos, neg = [], []
        for a, c in self.terms.values():
            (pos if c > 0 else neg).append((a, abs(c)))
        out: PrimExpr | None = None
        if not pos and self.const > 0:
            out = IntImm(self.dtype, self.const)
            self = Linear(self.terms, 0, self.dtype)
        for a, c in pos:
            t = a if c == 1 else E.Mul(a, IntImm(self.dtype, c), self.dtype)
            out = t if out is None else E.Add(out, t, self.dtype)
        for a, c in neg:
            t = a if c == 1 else E.Mul(a, IntImm(self.dtype, c), self.dtype)
            out = E.Sub(out if out is not None else IntImm(self.dtype, 0), t, self.dtype)
        if out is None:
            return IntImm(self.dtype, self.const)
        if self.const > 0:
            out = E.Add(out, IntImm(self.dtype, self.const), self.dtype)
        elif self.const < 0:
            out = E.Sub(out, IntImm(self.dtype, -self.const), self.dtype)
        return out


def _key(e: PrimExpr):
    if isinstance(e, Var):
        return ("var", id(e))
    from kiln.ir.structural import structural_key

    return structural_key(e)


def _linear(e: PrimExpr) -> Linear:
    dt = e.dtype
    if isinstance(e, IntImm):
        return Linear({}, e.value, dt)
    if isinstance(e, E.Add):
        return _linear(e.a).plus(_linear(e.b))
    if isinstance(e, E.Sub):
        return _linear(e.a).plus(_linear(e.b), -1)
    if isinstance(e, E.Mul):
        if isinstance(e.b, IntImm):
            return _linear(e.a).scaled(e.b.value)
        if isinstance(e.a, IntImm):
            return _linear(e.b).scaled(e.a.value)
    return Linear({_key(e): (e, 1)}, 0, dt)


_DIV_OF = {E.FloorMod: E.FloorDiv, E.Mod: E.Div}


def _join_divmod(lin: Linear) -> Linear:
    """k*c*(x // c) + k*(x % c) -> k*x, for floor and for truncating division alike.

    A fused loop splits its index into (row, column) and the row-major address puts it back;
    without this the address of a flat walk over H x W pixels keeps a divide and a modulo."""
    for key, (atom, k) in list(lin.terms.items()):
        div = _DIV_OF.get(type(atom))
        if div is None or key not in lin.terms or not isinstance(atom.b, IntImm) or atom.b.value <= 0:
            continue
        dkey = _key(div(atom.a, atom.b, atom.dtype))
        if dkey in lin.terms and lin.terms[dkey][1] == k * atom.b.value:
            rest = Linear({q: t for q, t in lin.terms.items() if q not in (key, dkey)}, lin.const, lin.dtype)
            lin = rest.plus(_linear(atom.a).scaled(k))
    return lin


def _is_index(e: PrimExpr) -> bool:
    dt = e.dtype
    return dt.kind in ("int", "uint") and dt.lanes == 1 and dt.bits >= 32


# Bounds -------------------------------------------------------------------------------------


class Analyzer:
    """Knows the ranges of loop variables; answers constant bounds and simplifies."""

    def __init__(self, ranges: dict | None = None):
        self.bounds: dict[int, tuple[float, float]] = {}
        for v, r in (ranges or {}).items():
            self.bind(v, r)

    def bind(self, v: Var, rng) -> None:
        """Record v ∈ rng (a Range, or (min, extent))."""
        lo, ext = (rng.min, rng.extent) if isinstance(rng, E.Range) else rng
        lo_b = self.const_bound(E.convert(lo))
        ext_b = self.const_bound(E.convert(ext))
        self.bounds[id(v)] = (lo_b[0], lo_b[1] + ext_b[1] - 1)

    def bind_bounds(self, v: Var, lo: float, hi: float) -> None:
        self.bounds[id(v)] = (lo, hi)

    def const_bound(self, e: PrimExpr) -> tuple[float, float]:
        """Constant lower and upper bounds of an integer expression (±inf when unknown)."""
        t = type(e)
        if t is IntImm:
            return (e.value, e.value)
        if isinstance(e, Var):
            b = self.bounds.get(id(e))
            if b is not None:
                return b
            if isinstance(e, E.SizeVar):
                return (0, INF)
            if e.dtype.is_uint or e.dtype.is_bool:
                return (0, INF)
            return (-INF, INF)
        if t is E.Add:
            a, b = self.const_bound(e.a), self.const_bound(e.b)
            return (a[0] + b[0], a[1] + b[1])
        if t is E.Sub:
            a, b = self.const_bound(e.a), self.const_bound(e.b)
            return (a[0] - b[1], a[1] - b[0])
        if t is E.Mul:
            a, b = self.const_bound(e.a), self.const_bound(e.b)
            prods = [_mul(x, y) for x in a for y in b]
            return (min(prods), max(prods))
        if t in (E.FloorDiv, E.Div) and isinstance(e.b, IntImm) and e.b.value > 0:
            a = self.const_bound(e.a)
            c = e.b.value
            return (_fdiv(a[0], c), _fdiv(a[1], c))
        if t in (E.FloorMod,) and isinstance(e.b, IntImm) and e.b.value > 0:
            a = self.const_bound(e.a)
            c = e.b.value
            if a[0] >= 0 and a[1] < c:
                return a
            return (0, c - 1)
        if t is E.Min:
            a, b = self.const_bound(e.a), self.const_bound(e.b)
            return (min(a[0], b[0]), min(a[1], b[1]))
        if t is E.Max:
            a, b = self.const_bound(e.a), self.const_bound(e.b)
            return (max(a[0], b[0]), max(a[1], b[1]))
        if t is E.Select:
            a, b = self.const_bound(e.true_value), self.const_bound(e.false_value)
            return (min(a[0], b[0]), max(a[1], b[1]))
        if t is E.Cast and e.dtype.is_integer and e.value.dtype.is_integer:
            return self.const_bound(e.value)
        if isinstance(e, E.CmpOp) or t in (E.And, E.Or, E.Not):
            return (0, 1)
        return (-INF, INF)

    def can_prove(self, cond: PrimExpr) -> bool:
        s = self.simplify(cond)
        return isinstance(s, IntImm) and s.value == 1

    def simplify(self, e):
        return _Simplifier(self).visit(e)


def _mul(x: float, y: float) -> float:
    if x == 0 or y == 0:
        return 0
    return x * y


def _fdiv(x: float, c: int) -> float:
    if x in (INF, -INF):
        return x
    return x // c


# The rewriter -------------------------------------------------------------------------------


def _fold_int(t, a: int, b: int, dt):
    if t is E.Add:
        return a + b
    if t is E.Sub:
        return a - b
    if t is E.Mul:
        return a * b
    if t is E.Div:
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    if t is E.Mod:
        return a - b * _fold_int(E.Div, a, b, dt)
    if t is E.FloorDiv:
        return a // b
    if t is E.FloorMod:
        return a % b
    if t is E.Min:
        return min(a, b)
    if t is E.Max:
        return max(a, b)
    return None


def _fold_float(t, a: float, b: float):
    try:
        if t is E.Add:
            return a + b
        if t is E.Sub:
            return a - b
        if t is E.Mul:
            return a * b
        if t is E.Div:
            return a / b if b != 0 else None
        if t is E.Min:
            return min(a, b)
        if t is E.Max:
            return max(a, b)
        if t is E.FloorDiv:
            return math.floor(a / b) if b != 0 else None
    except (OverflowError, ZeroDivisionError):
        return None
    return None


_CMP = {E.EQ: lambda a, b: a == b, E.NE: lambda a, b: a != b, E.LT: lambda a, b: a < b,
        E.LE: lambda a, b: a <= b, E.GT: lambda a, b: a > b, E.GE: lambda a, b: a >= b}


def _float32_round(v: float, dt) -> float:
    if dt.bits == 32:
        import struct

        try:
            return struct.unpack("f", struct.pack("f", v))[0]
        except OverflowError:
            return math.copysign(INF, v)
    return v


class _Simplifier(Mutator):
    def __init__(self, analyzer: Analyzer):
        super().__init__()
        self.an = analyzer

    def _binary(self, op):
        a, b = self.visit(op.a), self.visit(op.b)
        t = type(op)
        dt = op.dtype
        if isinstance(a, IntImm) and isinstance(b, IntImm) and dt.lanes == 1:
            if t in (E.Div, E.Mod, E.FloorDiv, E.FloorMod) and b.value == 0:
                return op if (a is op.a and b is op.b) else t(a, b, dt)
            v = _fold_int(t, a.value, b.value, dt)
            if v is not None:
                return const(v, dt)
        if isinstance(a, FloatImm) and isinstance(b, FloatImm):
            v = _fold_float(t, a.value, b.value)
            if v is not None:
                return FloatImm(dt, _float32_round(v, dt))
        node = op if (a is op.a and b is op.b) else t(a, b, dt)
        if _is_index(node):
            return self._index(node)
        return self._algebra(node)

    visit_Add = visit_Sub = visit_Mul = visit_Div = visit_Mod = _binary
    visit_FloorDiv = visit_FloorMod = visit_Min = visit_Max = _binary

    def _algebra(self, e):
        # Identities that hold for floats too.
        t = type(e)
        a, b = e.a, e.b
        if t is E.Mul and _is_const(b, 1):
            return a
        if t is E.Mul and _is_const(a, 1):
            return b
        if t is E.Add and _is_const(b, 0) and not e.dtype.is_float:
            return a
        if t is E.Div and _is_const(b, 1):
            return a
        return e

    def _index(self, e):
        t = type(e)
        if t in (E.Add, E.Sub, E.Mul):
            return _join_divmod(_linear(e)).to_expr()
        if t in (E.FloorDiv, E.Div) and isinstance(e.b, IntImm) and e.b.value > 0:
            return self._div(e)
        if t in (E.FloorMod, E.Mod) and isinstance(e.b, IntImm) and e.b.value > 0:
            return self._mod(e)
        if t in (E.Min, E.Max):
            ba, bb = self.an.const_bound(e.a), self.an.const_bound(e.b)
            diff = self.an.const_bound(_linear(E.Sub(e.a, e.b, e.dtype)).to_expr())
            if t is E.Min:
                if ba[1] <= bb[0] or diff[1] <= 0:
                    return e.a
                if bb[1] <= ba[0] or diff[0] >= 0:
                    return e.b
            else:
                if ba[1] <= bb[0] or diff[1] <= 0:
                    return e.b
                if bb[1] <= ba[0] or diff[0] >= 0:
                    return e.a
        return e

    def _split(self, lin: Linear, c: int):
        """(quotient terms that are multiples of c, the rest)."""
        q = Linear({}, 0, lin.dtype)
        r = Linear({}, 0, lin.dtype)
        for key, (atom, coeff) in lin.terms.items():
            if coeff % c == 0:
                q.terms[key] = (atom, coeff // c)
            else:
                r.terms[key] = (atom, coeff)
        q.const, r.const = lin.const // c, lin.const % c
        return q, r

    def _div(self, e):
        c = e.b.value
        lin = _linear(e.a)
        floor = type(e) is E.FloorDiv
        if not floor and self.an.const_bound(e.a)[0] < 0:
            return e
        q, r = self._split(lin, c)
        r_expr = r.to_expr()
        lo, hi = self.an.const_bound(r_expr)
        if lo >= 0 and hi < c:
            return q.to_expr()
        if lo > -INF and hi < INF and lo // c == hi // c:
            q.const += int(lo // c)
            return q.to_expr()
        if not q.terms and q.const == 0:
            return E.FloorDiv(r_expr, e.b, e.dtype) if floor else E.Div(r_expr, e.b, e.dtype)
        rest = E.FloorDiv(r_expr, e.b, e.dtype)
        return _linear(E.Add(q.to_expr(), rest, e.dtype)).to_expr()

    def _mod(self, e):
        c = e.b.value
        floor = type(e) is E.FloorMod
        if not floor and self.an.const_bound(e.a)[0] < 0:
            return e
        lin = _linear(e.a)
        _, r = self._split(lin, c)
        r_expr = r.to_expr()
        lo, hi = self.an.const_bound(r_expr)
        if lo >= 0 and hi < c:
            return r_expr
        if lo > -INF and hi < INF and lo // c == hi // c:
            return _linear(E.Sub(r_expr, IntImm(e.dtype, int(lo // c) * c), e.dtype)).to_expr()
        return E.FloorMod(r_expr, e.b, e.dtype)

    def _compare(self, op):
        a, b = self.visit(op.a), self.visit(op.b)
        t = type(op)
        if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)):
            return const(bool(_CMP[t](a.value, b.value)), op.dtype)
        if _is_index(a) and a.dtype == b.dtype:
            diff = _linear(E.Sub(a, b, a.dtype)).to_expr()
            lo, hi = self.an.const_bound(diff)
            verdict = None
            if t is E.LT:
                verdict = True if hi < 0 else False if lo >= 0 else None
            elif t is E.LE:
                verdict = True if hi <= 0 else False if lo > 0 else None
            elif t is E.GT:
                verdict = True if lo > 0 else False if hi <= 0 else None
            elif t is E.GE:
                verdict = True if lo >= 0 else False if hi < 0 else None
            elif t is E.EQ:
                verdict = True if lo == hi == 0 else False if (lo > 0 or hi < 0) else None
            elif t is E.NE:
                verdict = False if lo == hi == 0 else True if (lo > 0 or hi < 0) else None
            if verdict is not None:
                return const(verdict, op.dtype)
        return op if (a is op.a and b is op.b) else t(a, b, op.dtype)

    visit_EQ = visit_NE = visit_LT = visit_LE = visit_GT = visit_GE = _compare

    def visit_And(self, op):
        a, b = self.visit(op.a), self.visit(op.b)
        if isinstance(a, IntImm):
            return b if a.value else a
        if isinstance(b, IntImm):
            return a if b.value else b
        return op if (a is op.a and b is op.b) else E.And(a, b, op.dtype)

    def visit_Or(self, op):
        a, b = self.visit(op.a), self.visit(op.b)
        if isinstance(a, IntImm):
            return a if a.value else b
        if isinstance(b, IntImm):
            return b if b.value else a
        return op if (a is op.a and b is op.b) else E.Or(a, b, op.dtype)

    def visit_Not(self, op):
        a = self.visit(op.a)
        if isinstance(a, IntImm):
            return const(not a.value, op.dtype)
        if isinstance(a, E.Not):
            return a.a
        return op if a is op.a else E.Not(a, op.dtype)

    def visit_Select(self, op):
        c = self.visit(op.condition)
        if isinstance(c, IntImm):
            return self.visit(op.true_value if c.value else op.false_value)
        return self.generic_visit(op)

    def visit_Call(self, op):
        if op.op in ("tir.if_then_else", "tir.likely"):
            c = self.visit(op.args[0])
            if isinstance(c, IntImm):
                if op.op == "tir.likely":
                    return c
                return self.visit(op.args[1] if c.value else op.args[2])
        return self.generic_visit(op)

    def visit_Cast(self, op):
        v = self.visit(op.value)
        if isinstance(v, (IntImm, FloatImm)) and op.dtype.lanes == 1:
            if op.dtype.is_float:
                return FloatImm(op.dtype, _float32_round(float(v.value), op.dtype))
            if op.dtype.is_integer and (isinstance(v, IntImm) or math.isfinite(v.value)):
                return const(int(v.value), op.dtype)
        if v.dtype == op.dtype:
            return v
        return op if v is op.value else E.Cast(op.dtype, v)


def _is_const(e, value) -> bool:
    return isinstance(e, (IntImm, FloatImm)) and e.value == value


def simplify(e, ranges: dict | None = None):
    """Simplify an expression or statement, given optional ranges {Var: Range} of variables."""
    return Analyzer(ranges).simplify(e)


def guard_with(stmt, conds: list):
    """``stmt`` run only where every condition holds (``if likely(c0 && c1 ...)``), the conditions
    simplified first and those that are always true dropped; ``stmt`` itself when none is left."""
    conds = [c for c in (simplify(c) for c in conds) if not (isinstance(c, E.IntImm) and c.value)]
    if not conds:
        return stmt
    cond = conds[0]
    for c in conds[1:]:
        cond = E.And(cond, c, BOOL_T)
    return IfThenElse(likely(cond), stmt)
