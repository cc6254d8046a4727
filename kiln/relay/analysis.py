"""``relay.analysis``: questions about expressions (free variables, users of each node)."""

from __future__ import annotations

from .expr import Call, Function, Let, TupleWrapper, Var
from .visitor import children, post_order


def free_vars(expr) -> list:
    """Vars used in ``expr`` but not bound inside it (by a Function or a Let), in first-use order."""
    bound: set = set()
    seen: set = set()
    out: list = []

    def scan(e):
        for node in post_order(e):
            if isinstance(node, Function):
                bound.update(node.params)
                scan(node.body)
            elif isinstance(node, Let):
                bound.add(node.var)
        for node in post_order(e):
            if isinstance(node, Var) and node not in seen:
                seen.add(node)
                out.append(node)

    scan(expr)
    if isinstance(expr, Function):
        bound.update(expr.params)
    return [v for v in out if v not in bound]


def all_vars(expr) -> list:
    """Every Var reachable from ``expr`` (free or bound), in first-use order."""
    seen: list = []
    for node in post_order(expr):
        if isinstance(node, Function):
            seen.extend(v for v in all_vars(node.body) + list(node.params) if v not in seen)
        elif isinstance(node, Var) and node not in seen:
            seen.append(node)
    return seen


def bound_vars(expr) -> list:
    free = set(free_vars(expr))
    return [v for v in all_vars(expr) if v not in free]


def users(expr) -> dict:
    """``{node: [consumers]}`` over the dataflow graph of ``expr`` (not entering Functions)."""
    out: dict = {}
    for node in post_order(expr):
        out.setdefault(node, [])
        for c in children(node):
            out.setdefault(c, []).append(node)
    return out


def only_user(node, consumers: dict, user) -> bool:
    """Whether ``user`` is the one consumer of ``node`` in ``consumers`` (``users``' map): a
    rewrite may then fold ``node`` into ``user``."""
    return consumers.get(node, []) == [user]


def op_calls(expr, ops=None) -> list:
    """Every call of an OpDef under ``expr`` (entering fused Functions), children first, typed.

    ``ops`` limits the result to some ops (OpDefs or names); the tuner's task extraction uses
    ``op_calls(mod["main"], [relay.op.get("nn.conv2d")])`` and reads ``call.attrs`` and
    ``call.args[i].checked_type``.
    """
    from .op.registry import OpDef
    from .transform.infer_type import infer
    from .visitor import post_order_visit

    wanted = None if ops is None else {o if isinstance(o, str) else o.name for o in ops}
    infer(expr)
    found: list = []

    def keep(node):
        if isinstance(node, Call) and isinstance(node.op, OpDef) and (wanted is None or node.op.name in wanted):
            found.append(node)

    post_order_visit(expr, keep)
    return found


def as_function(expr) -> Function:
    """``expr`` itself if it is a Function; otherwise a Function whose params are its free vars."""
    if isinstance(expr, Function):
        return expr
    if isinstance(expr, TupleWrapper):
        expr = expr.astuple()
    return Function(free_vars(expr), expr)
