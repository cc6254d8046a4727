"""Count the floating-point work of a schedule's compute stages (for GFLOPS when a template
does not call ``cfg.add_flop``).

Each arithmetic node on a float value counts 1 per point of the stage's iteration domain; a
sum reduction adds one more per reduced element. So ``C[i,j] = sum(A[i,k] * B[k,j])`` counts
2·M·N·K, the usual multiply-add convention.
"""

from __future__ import annotations

import math

from kiln.errors import TuningError
from kiln.ir import expr as E
from kiln.ir.functor import post_order_visit

_ARITH = (E.Add, E.Sub, E.Mul, E.Div, E.Min, E.Max)


def _extent(iv) -> int:
    value = getattr(getattr(iv.dom, "extent", None), "value", None)
    if value is None:
        raise TuningError(f"cannot count FLOPs: axis {iv.var.name} has a symbolic extent; call "
                          "cfg.add_flop(n) in the template")
    return int(value)


def _count_expr(body) -> int:
    count = 0

    def visit(node):
        nonlocal count
        if isinstance(node, _ARITH) and "float" in str(node.dtype):
            count += 1
        elif isinstance(node, E.Call) and "float" in str(node.dtype):
            count += 1  # exp, sqrt, ...: one op each, as TVM's counter does
    post_order_visit(body, visit)
    return count


def compute_flop(sch) -> int:
    """The FLOPs of every compute stage of ``sch`` (te.Schedule)."""
    from kiln.te.tensor import ComputeOp

    total = 0
    for stage in sch.stages:
        op = stage.origin_op if hasattr(stage, "origin_op") else stage.op
        if not isinstance(op, ComputeOp):
            continue
        points = math.prod(_extent(iv) for iv in op.axis)
        for body in op.body:
            if isinstance(body, E.Reduce):
                inner = math.prod(_extent(iv) for iv in body.axis)
                per = sum(_count_expr(src) for src in body.source) + 1
                total += points * inner * per
            else:
                total += points * _count_expr(body)
    return total
