"""Fold constant subgraphs: a call whose inputs are all constants becomes one Constant,
computed with the numpy reference executor. Fused primitive functions are left alone.
"""

from __future__ import annotations

from ..expr import Constant, Tuple, const
from ..op.registry import OpDef
from ..visitor import ExprMutator

# Ops whose result is cheaper to recompute than to store: a broadcast of a scalar would turn
# into a full-size constant tensor.
_KEEP = {"broadcast_to", "zeros_like", "ones_like"}


def _const_value(e):
    if isinstance(e, Constant):
        return e.data
    if isinstance(e, Tuple) and all(isinstance(f, Constant) for f in e.fields):
        return tuple(f.data for f in e.fields)
    return None


def _as_expr(value):
    if isinstance(value, tuple):
        return Tuple([_as_expr(v) for v in value])
    return const(value)


class _Fold(ExprMutator):
    def visit_Function(self, f):
        if f.attrs.get("Primitive"):
            return f
        return super().visit_Function(f)

    def visit_Call(self, call):
        call = super().visit_Call(call)
        if not isinstance(call.op, OpDef) or call.op.name in _KEEP:
            return call
        values = [_const_value(a) for a in call.args]
        if any(v is None for v in values):
            return call
        return _as_expr(call.op.reference(call.attrs, *values))

    def visit_TupleGetItem(self, t):
        t = super().visit_TupleGetItem(t)
        if isinstance(t.tuple_value, Tuple):
            return t.tuple_value.fields[t.index]
        return t


def fold_constant(expr):
    """Fold every constant subgraph of ``expr`` (an expression or Function)."""
    return _Fold().visit(expr)
