"""Index expressions as Python functions, for evaluating loop nests at compile time.

The instruction stream is static: every loop of a VTA kernel has a constant extent, so the
emitter walks the loops and needs each index and condition many times. ``compile_expr(e,
names, consts)`` turns a TIR expression into a Python lambda over ``names`` (the nest's loop
variables), with the enclosing loop variables folded in as constants.
"""

from __future__ import annotations

import functools

from kiln.errors import CompileError
from kiln.ir import expr as E
from kiln.ir.functor import Visitor

_BIN = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.FloorDiv: "//", E.FloorMod: "%",
        E.LT: "<", E.LE: "<=", E.GT: ">", E.GE: ">=", E.EQ: "==", E.NE: "!="}


def to_source(e, names: dict, consts: dict) -> str:
    """Python source for e; names maps Var -> identifier, consts maps Var -> int."""
    t = type(e)
    if t is E.IntImm:
        return str(int(e.value))
    if isinstance(e, E.Var):
        if e in names:
            return names[e]
        if e in consts:
            return str(consts[e])
        raise CompileError(f"vta: index uses {e.name}, which is not a constant loop variable here; "
                           "the accelerator's instruction stream needs loops of constant extent")
    if t in _BIN:
        return f"({to_source(e.a, names, consts)} {_BIN[t]} {to_source(e.b, names, consts)})"
    if t is E.Div:
        a, b = to_source(e.a, names, consts), to_source(e.b, names, consts)
        return f"_tdiv({a}, {b})"
    if t is E.Mod:
        a, b = to_source(e.a, names, consts), to_source(e.b, names, consts)
        return f"_tmod({a}, {b})"
    if t is E.Min:
        return f"min({to_source(e.a, names, consts)}, {to_source(e.b, names, consts)})"
    if t is E.Max:
        return f"max({to_source(e.a, names, consts)}, {to_source(e.b, names, consts)})"
    if t is E.And:
        return f"({to_source(e.a, names, consts)} and {to_source(e.b, names, consts)})"
    if t is E.Or:
        return f"({to_source(e.a, names, consts)} or {to_source(e.b, names, consts)})"
    if t is E.Not:
        return f"(not {to_source(e.a, names, consts)})"
    if t is E.Cast:
        return to_source(e.value, names, consts)
    if t is E.Select:
        c, a, b = (to_source(x, names, consts) for x in (e.condition, e.true_value, e.false_value))
        return f"({a} if {c} else {b})"
    if t is E.Call and e.op in ("tir.likely", "tir.assume"):
        return to_source(e.args[0], names, consts)
    if t is E.Let:
        raise CompileError("vta: Let in an index; simplify the schedule's index expressions")
    raise CompileError(f"vta: cannot evaluate {type(e).__name__} ({e}) in an index at compile time")


def _tdiv(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _tmod(a, b):
    return a - _tdiv(a, b) * b


_COMPILED: dict = {}  # (id(e), ids of the loop variables) -> (function, free variables, e)


def _free_vars(e, bound: dict) -> list:
    """Variables of e not in bound, in first-use order."""
    out: list = []

    class _Find(Visitor):
        def visit_Var(self, v):
            if v not in bound and not any(v is y for y in out):
                out.append(v)

        visit_SizeVar = visit_Var

    _Find().visit(e)
    return out


def compile_expr(e, loop_vars: list, consts: dict):
    """A function of the loop variables' values (positional) computing e, with the other
    variables of e taken from consts. The Python source is compiled once per expression and
    set of loop variables (the emitter evaluates the same index under many outer iterations)."""
    key = (id(e), tuple(id(v) for v in loop_vars))
    hit = _COMPILED.get(key)
    if hit is None or hit[2] is not e:
        names = {v: f"v{k}" for k, v in enumerate(loop_vars)}
        free = _free_vars(e, names)
        params = [f"c{k}" for k in range(len(free))]
        body = to_source(e, {**names, **dict(zip(free, params))}, {})
        src = f"lambda {', '.join(params + list(names.values())) or '*_'}: {body}"
        fn = eval(src, {"_tdiv": _tdiv, "_tmod": _tmod, "min": min, "max": max})  # noqa: S307 - our own source
        if len(_COMPILED) > 8192:
            _COMPILED.clear()
        hit = _COMPILED[key] = (fn, free, e)
    fn, free, _ = hit
    if not free:
        return fn
    try:
        values = [consts[v] for v in free]
    except KeyError as err:
        raise CompileError(f"vta: index uses {err.args[0].name}, which is not a constant loop variable here; "
                           "the accelerator's instruction stream needs loops of constant extent") from None
    return functools.partial(fn, *values)


def evaluate(e, consts: dict) -> int:
    if isinstance(e, E.IntImm):
        return int(e.value)
    return compile_expr(e, [], consts)()
