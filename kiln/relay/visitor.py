"""Memoized traversal of relay expressions: ExprVisitor (read) and ExprMutator (rebuild).

Both walk the graph iteratively (children before parents) so a deep network does not hit
Python's recursion limit, then dispatch ``visit_<ClassName>``. Each node is visited once.
Function bodies are entered only through ``visit_Function``, so a subclass may skip them
(e.g. to leave fused primitive functions alone).
"""

from __future__ import annotations

from .expr import Call, Constant, Function, If, Let, RelayExpr, Tuple, TupleGetItem, Var


def children(node) -> list:
    """The sub-expressions the walker visits before ``node`` (Function bodies excluded)."""
    if isinstance(node, Call):
        head = [node.op] if isinstance(node.op, RelayExpr) else []
        return head + list(node.args)
    if isinstance(node, Tuple):
        return list(node.fields)
    if isinstance(node, TupleGetItem):
        return [node.tuple_value]
    if isinstance(node, Let):
        return [node.var, node.value, node.body]
    if isinstance(node, If):
        return [node.cond, node.true_branch, node.false_branch]
    return []


def _walk(root, memo: dict, dispatch, kids=children) -> None:
    stack = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if node in memo:
            continue
        if ready:
            memo[node] = dispatch(node)
            continue
        stack.append((node, True))
        for child in reversed(kids(node)):
            if child not in memo:
                stack.append((child, False))


class ExprVisitor:
    """Visit every node once. Override ``visit_Call`` etc.; call ``super()`` to keep walking."""

    def __init__(self):
        self.memo: dict = {}

    def visit(self, expr) -> None:
        if expr not in self.memo:
            _walk(expr, self.memo, self._dispatch)

    def _dispatch(self, node):
        getattr(self, "visit_" + type(node).__name__)(node)
        return True

    def visit_Var(self, v): pass
    def visit_Constant(self, c): pass
    def visit_GlobalVar(self, g): pass

    def visit_Call(self, call):
        if isinstance(call.op, RelayExpr):
            self.visit(call.op)
        for a in call.args:
            self.visit(a)

    def visit_Tuple(self, t):
        for f in t.fields:
            self.visit(f)

    def visit_TupleGetItem(self, t):
        self.visit(t.tuple_value)

    def visit_Let(self, let):
        self.visit(let.var)
        self.visit(let.value)
        self.visit(let.body)

    def visit_If(self, node):
        self.visit(node.cond)
        self.visit(node.true_branch)
        self.visit(node.false_branch)

    def visit_Function(self, f):
        for p in f.params:
            self.visit(p)
        self.visit(f.body)


class ExprMutator:
    """Rebuild an expression bottom-up. A node is rebuilt only when one of its children changed."""

    def __init__(self):
        self.memo: dict = {}

    def visit(self, expr):
        if expr not in self.memo:
            _walk(expr, self.memo, self._dispatch)
        return self.memo[expr]

    def _dispatch(self, node):
        return getattr(self, "visit_" + type(node).__name__)(node)

    def visit_Var(self, v):
        return v

    def visit_Constant(self, c):
        return c

    def visit_GlobalVar(self, g):
        return g

    def visit_Call(self, call):
        op = self.visit(call.op) if isinstance(call.op, RelayExpr) else call.op
        args = [self.visit(a) for a in call.args]
        if op is call.op and all(a is b for a, b in zip(args, call.args)):
            return call
        return Call(op, args, call.attrs, call.type_args)

    def visit_Tuple(self, t):
        fields = [self.visit(f) for f in t.fields]
        return t if all(a is b for a, b in zip(fields, t.fields)) else Tuple(fields)

    def visit_TupleGetItem(self, t):
        v = self.visit(t.tuple_value)
        return t if v is t.tuple_value else TupleGetItem(v, t.index)

    def visit_Let(self, let):
        var, value, body = self.visit(let.var), self.visit(let.value), self.visit(let.body)
        if var is let.var and value is let.value and body is let.body:
            return let
        return Let(var, value, body)

    def visit_If(self, node):
        c, t, f = self.visit(node.cond), self.visit(node.true_branch), self.visit(node.false_branch)
        if c is node.cond and t is node.true_branch and f is node.false_branch:
            return node
        return If(c, t, f)

    def visit_Function(self, f):
        params = [self.visit(p) for p in f.params]
        body = self.visit(f.body)
        if body is f.body and all(a is b for a, b in zip(params, f.params)):
            return f
        return Function(params, body, f.ret_type, f.type_params, f.attrs)


class DataflowRewriter(ExprMutator):
    """An ExprMutator for graph rewrites that check who consumes a node (``consumers``: the
    ``analysis.users`` of the function's body); fused primitive functions are left as they are."""

    def __init__(self, consumers: dict):
        super().__init__()
        self.consumers = consumers

    def visit_Function(self, f):
        return f if f.attrs.get("Primitive") else super().visit_Function(f)


def post_order(expr) -> list:
    """All nodes reachable from ``expr`` (not inside nested Functions), children first."""
    order: list = []
    memo: dict = {}

    def record(node):
        order.append(node)
        return True

    _walk(expr, memo, record)
    return order


def post_order_visit(expr, fn) -> None:
    """Call ``fn(node)`` on every node, children first, entering Function bodies too."""
    for node in post_order(expr):
        if isinstance(node, Function):
            post_order_visit(node.body, fn)
        fn(node)


__all__ = ["ExprVisitor", "ExprMutator", "post_order", "post_order_visit", "children",
           "Var", "Constant", "Call", "Tuple", "TupleGetItem", "Let", "If", "Function"]


def bind(expr: RelayExpr, binds: dict) -> RelayExpr:
    """Replace Vars by expressions (``{var: expr}``). Binding a Function's params drops them."""
    class _Bind(ExprMutator):
        def visit_Var(self, v):
            return binds.get(v, v)

    if isinstance(expr, Function):
        params = [p for p in expr.params if p not in binds]
        body = _Bind().visit(expr.body)
        return Function(params, body, expr.ret_type, expr.type_params, expr.attrs)
    return _Bind().visit(expr)
