"""Commutative reducers: ``te.sum``, ``te.max``, ``te.min`` and ``te.comm_reducer``."""

from __future__ import annotations

from typing import Callable

from kiln.ir.dtype import BOOL_T
from kiln.ir.expr import IterVar, PrimExpr, Reduce, Var, const, convert
from kiln.tir import op as tir_op


class CommReducer:
    """A commutative, associative combine function with an identity element per dtype."""

    def __init__(self, name: str, fcombine: Callable, fidentity: Callable):
        self.name = name
        self._fcombine = fcombine
        self._fidentity = fidentity

    def combine(self, lhs: list[PrimExpr], rhs: list[PrimExpr]) -> list[PrimExpr]:
        out = self._fcombine(*lhs, *rhs) if len(lhs) > 1 else self._fcombine(lhs[0], rhs[0])
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def identity(self, dtypes: list) -> list[PrimExpr]:
        ident = self._fidentity(*dtypes)
        return [convert(x) for x in (ident if isinstance(ident, (list, tuple)) else [ident])]

    def __call__(self, expr, axis=None, where=None, init=None, *args):
        # te.max(a, b) with two expressions is the element-wise max, as in TVM.
        if axis is not None and not isinstance(axis, (IterVar, list, tuple)):
            return self.combine([convert(expr)], [convert(axis)])[0]
        if axis is None:
            raise ValueError(f"te.{self.name}: pass axis=<reduce_axis or list of them>")
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for a in axes:
            if not isinstance(a, IterVar):
                raise TypeError(f"te.{self.name}: axis entries must be te.reduce_axis, got {a!r}")
        sources = tuple(convert(e) for e in (expr if isinstance(expr, (list, tuple)) else [expr]))
        cond = convert(where) if where is not None else const(True, BOOL_T)
        inits = tuple(convert(i) for i in (init if isinstance(init, (list, tuple)) else [init])) if init is not None else ()
        if len(sources) == 1:
            return Reduce(self, sources, axes, cond, 0, inits, sources[0].dtype)
        return tuple(Reduce(self, sources, axes, cond, i, inits, s.dtype) for i, s in enumerate(sources))

    def __repr__(self) -> str:
        return f"comm_reducer({self.name})"


def comm_reducer(fcombine: Callable, fidentity: Callable, name: str = "reduce") -> CommReducer:
    """A new reducer: ``te.comm_reducer(lambda x, y: x * y, lambda t: tvm.tir.const(1, dtype=t), name="prod")``."""
    return CommReducer(name, fcombine, fidentity)


sum = comm_reducer(lambda x, y: x + y, lambda t: const(0, t), name="sum")  # noqa: A001
max = comm_reducer(tir_op.max, tir_op.min_value, name="max")  # noqa: A001
min = comm_reducer(tir_op.min, tir_op.max_value, name="min")  # noqa: A001
prod = comm_reducer(lambda x, y: x * y, lambda t: const(1, t), name="prod")


def _var_name(v: Var) -> str:
    return v.name
