"""Math calls some kernel languages lack, written with calls they have: the formulas, once.

The C and GPU printers (kiln/codegen/c.py, c_family_expr.py) print ``expand(call)`` where their
language has no such function; LLVM lowers the same calls to intrinsics itself (llvm/intrin.py).
"""

from __future__ import annotations

from kiln.ir import expr as E

# name -> how it is written with other calls; each a function of (x, dtype)
_FORMULAS = {
    "sigmoid": lambda x, t: E.Div(_c(1.0, t), E.Add(_c(1.0, t), _call("exp", t, E.Sub(_c(0.0, t), x, t)), t), t),
    "rsqrt": lambda x, t: E.Div(_c(1.0, t), _call("sqrt", t, x), t),
    "exp10": lambda x, t: _call("pow", t, _c(10.0, t), x),
}


def expand(call: E.Call, names=None) -> E.PrimExpr | None:
    """``call`` written with other math calls when its name is in ``names`` (default: every
    name this module knows: sigmoid, rsqrt, exp10), else None."""
    name = call.op[4:] if call.op.startswith("tir.") else call.op
    if name not in _FORMULAS or (names is not None and name not in names) or len(call.args) != 1:
        return None
    return _FORMULAS[name](call.args[0], call.dtype)


def _c(value: float, dtype):
    scalar = E.const(value, dtype.element_of())
    return scalar if dtype.lanes == 1 else E.Broadcast(scalar, dtype.lanes, dtype)


def _call(name: str, dtype, *args):
    return E.Call(dtype, f"tir.{name}", tuple(args))
