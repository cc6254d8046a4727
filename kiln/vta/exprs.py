"""Index expressions as Python functions, for evaluating loop nests at compile time.

The instruction stream is static: every loop of a VTA kernel has a constant extent, so the
emitter walks the loops and needs each index and condition many times. ``compile_expr(e,
names, consts)`` turns a TIR expression into a Python lambda over ``names`` (the nest's loop
variables), with the enclosing loop variables folded in as constants.
"""

from __future__ import annotations

from kiln.errors import CompileError
from kiln.ir import expr as E

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


def compile_expr(e, loop_vars: list, consts: dict):
    """A function of the loop variables' values (positional) computing e."""
    names = {v: f"v{k}" for k, v in enumerate(loop_vars)}
    src = f"lambda {', '.join(names.values()) or '*_'}: {to_source(e, names, consts)}"
    return eval(src, {"_tdiv": _tdiv, "_tmod": _tmod, "min": min, "max": max})  # noqa: S307 - our own source


def evaluate(e, consts: dict) -> int:
    return compile_expr(e, [], consts)()
