"""MergeComposite: wrap each match of a pattern in a "composite" function.

``merge_composite(func, [("dnnl.conv2d_bias_relu", pattern, check), ...])`` replaces every
subgraph matching ``pattern`` (and accepted by ``check(root)``, when given) by

    Call(Function([%FunctionVar_0, ...], <the matched ops>, Composite="dnnl.conv2d_bias_relu"), inputs)

The expressions bound to wildcards become the function's parameters; constants matched by
``is_constant()`` stay inside the body. Patterns are applied in table order (put longer ones
first); a node joins at most one composite. A match is rejected when one of its inner values
(not the root) is used outside it, as the composite only gives back its root's value.
"""

from __future__ import annotations

from ..dataflow_pattern import ConstantPattern, VarPattern, WildcardPattern, match
from ..expr import Call, Constant, Function, If, Let, RelayExpr, Tuple, TupleGetItem, Var, var
from ..visitor import children, post_order
from .infer_type import infer


def merge_composite(func: Function, pattern_table) -> Function:
    body = func.body
    for entry in pattern_table:
        name, pattern = entry[0], entry[1]
        check = entry[2] if len(entry) > 2 else None
        body = _merge_one(body, name, pattern, check)
    return Function(func.params, body, func.ret_type, func.type_params, func.attrs)


def _merge_one(body, name: str, pattern, check):
    infer(body)  # checks read types, and the previous pattern's rewrite made new nodes
    order = post_order(body)
    users: dict = {}
    for node in order:
        for c in children(node):
            users.setdefault(c, []).append(node)
    taken: set = set()
    replace: dict = {}
    for root in reversed(order):  # consumers first: a long chain matches at its last op
        if not isinstance(root, Call) or root in taken or isinstance(root.op, Function):
            continue
        env = match(pattern, root)
        if env is None or (check is not None and not check(root)):
            continue
        inputs, inner = [], []
        for p, e in env.items():
            if isinstance(p, (WildcardPattern, VarPattern)):
                if not any(e is x for x in inputs):
                    inputs.append(e)
            elif not isinstance(p, ConstantPattern) and isinstance(e, (Call, Tuple, TupleGetItem)):
                inner.append(e)
        inner = [e for e in inner if not any(e is x for x in inputs)]
        inner_ids = {id(e) for e in inner}
        if any(e in taken for e in inner):
            continue
        leaked = [e for e in inner if e is not root and any(id(u) not in inner_ids for u in users.get(e, []))]
        if leaked:
            continue
        params = [var(f"FunctionVar_{len(replace)}_{k}", e.checked_type) for k, e in enumerate(inputs)]
        fbody = copy_subgraph(root, {e: p for e, p in zip(inputs, params)})
        composite = Function(params, fbody, None, None, {"Composite": name})
        replace[root] = (composite, inputs)
        taken.update(inner)
    if not replace:
        return body
    new_of: dict = {}
    for node in order:
        if node in replace:
            composite, inputs = replace[node]
            new_of[node] = Call(composite, [new_of.get(i, i) for i in inputs])
        else:
            new_of[node] = rebuild(node, new_of)
    return new_of[body]


def copy_subgraph(root, stop: dict):
    """A copy of the graph under ``root`` with each key of ``stop`` replaced by its value
    (the copy stops there). Constants and nested functions are shared, not copied."""
    memo = dict(stop)
    stack = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if node in memo:
            continue
        if not ready:
            stack.append((node, True))
            stack.extend((c, False) for c in children(node) if c not in memo)
            continue
        memo[node] = rebuild(node, memo)
    return memo[root]


def rebuild(node, new_of: dict):
    """``node`` with its children replaced by ``new_of[child]`` (the node itself if none change)."""
    get = lambda x: new_of.get(x, x)  # noqa: E731
    if isinstance(node, Call):
        op = get(node.op) if isinstance(node.op, RelayExpr) else node.op
        args = [get(a) for a in node.args]
        if op is node.op and all(a is b for a, b in zip(args, node.args)):
            return node
        return Call(op, args, node.attrs, node.type_args)
    if isinstance(node, Tuple):
        fields = [get(f) for f in node.fields]
        return node if all(a is b for a, b in zip(fields, node.fields)) else Tuple(fields)
    if isinstance(node, TupleGetItem):
        v = get(node.tuple_value)
        return node if v is node.tuple_value else TupleGetItem(v, node.index)
    if isinstance(node, Let):
        return Let(get(node.var), get(node.value), get(node.body))
    if isinstance(node, If):
        return If(get(node.cond), get(node.true_branch), get(node.false_branch))
    assert isinstance(node, (Var, Constant, Function)) or not isinstance(node, RelayExpr), node
    return node
