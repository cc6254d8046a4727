"""FuseOps: partition the dataflow graph into groups, each becoming one primitive Function
(``attrs["Primitive"] == 1``) that the compiler lowers to a single kernel.

Rule (greedy, in topological order). Every op call starts as its own group. An op N then
absorbs the groups that produce its inputs when, for such a producer group G,

1. G's output is an input of N and N is its *only* consumer (so G's result need not be
   stored for anyone else, and the merged group keeps exactly one output), and
2. the patterns allow it:
   - N elementwise/broadcast: G may be elementwise, broadcast or injective; plus at most one
     "anchor" group (conv2d/dense/pool, OUT_ELEMWISE_FUSABLE, or a reduction) -- this is the
     conv + bias + relu epilogue. With an anchor, the other absorbed groups must be
     elementwise/broadcast.
   - N injective (reshape, transpose, concat...): G elementwise, broadcast or injective.
   - N a reduction: G elementwise, broadcast or injective (the reduction reads them inline).
   - N conv2d/dense/pool or opaque: absorbs nothing.
3. the merged group stays under ``max_depth`` ops (PassContext config "relay.FuseOps.max_depth",
   default 256).

Merging along rule 1 can never create a cycle: all paths out of G go through N.

Inside a primitive function, scalar constants stay inline; every other input (tensors,
including non-scalar constants) becomes a parameter ``%p0, %p1, ...`` in first-use order. A
Tuple input (concatenate) contributes one parameter per field.
``fuse_opt_level=0`` puts every op in a function of its own.
"""

from __future__ import annotations

from ..analysis import users
from ..expr import Call, Constant, Function, If, Let, Tuple, TupleGetItem, Var
from ..op.registry import OpDef, OpPattern as P
from ..visitor import post_order
from .infer_type import infer


class _Group:
    __slots__ = ("nodes", "pattern", "output")

    def __init__(self, node, pattern):
        self.nodes = [node]
        self.pattern = pattern
        self.output = node


def _absorbable(n_pattern: P, groups: list) -> list:
    if n_pattern <= P.BROADCAST:
        anchors = [g for g in groups if g.pattern in (P.COMM_REDUCE, P.OUT_ELEMWISE_FUSABLE)]
        if anchors:
            return [anchors[0]] + [g for g in groups if g.pattern <= P.BROADCAST]
        return [g for g in groups if g.pattern <= P.INJECTIVE]
    if n_pattern in (P.INJECTIVE, P.COMM_REDUCE):
        return [g for g in groups if g.pattern <= P.INJECTIVE]
    return []


def partition(body, fuse_opt_level: int = 1, max_depth: int = 256) -> dict:
    """``{node: group}`` for every op call in ``body`` (groups are shared objects)."""
    consumers = users(body)
    group_of: dict = {}
    for node in post_order(body):
        if not (isinstance(node, Call) and isinstance(node.op, OpDef)):
            continue
        group = _Group(node, node.op.pattern)
        if fuse_opt_level > 0:
            producers = []
            for arg in dict.fromkeys(_flat_args(node)):
                g = group_of.get(arg)
                tuples_ok = all(consumers[t] == [node] for t in _tuple_users(node) if arg in t.fields)
                if g is not None and g.output is arg and set(consumers[arg]) <= {node, *_tuple_users(node)} \
                        and len(consumers[arg]) == _uses(node, arg) and tuples_ok and g not in producers:
                    producers.append(g)
            size = 1
            for g in _absorbable(node.op.pattern, producers):
                if size + len(g.nodes) > max_depth:
                    continue
                size += len(g.nodes)
                group.nodes = g.nodes + group.nodes
                group.pattern = max(group.pattern, g.pattern)
        for n in group.nodes:
            group_of[n] = group
    return group_of


def _flat_args(call: Call) -> list:
    out = []
    for a in call.args:
        out.extend(a.fields if isinstance(a, Tuple) else [a])
    return out


def _tuple_users(call: Call) -> list:
    return [a for a in call.args if isinstance(a, Tuple)]


def _uses(call: Call, arg) -> int:
    """How many consumer edges of ``arg`` go to ``call`` (directly or through its Tuple args)."""
    n = sum(1 for a in call.args if a is arg)
    n += sum(1 for a in call.args if isinstance(a, Tuple) and arg in a.fields)
    return n


class _Builder:
    """Turns a group into ``Call(Function(params, body, Primitive=1), external_args)``."""

    def __init__(self, group: _Group, new_of: dict):
        self.members = set(group.nodes)
        self.new_of = new_of
        self.params: list = []
        self.args: list = []
        self.param_of: dict = {}
        self.inner: dict = {}
        for node in group.nodes:
            self.inner[node] = Call(node.op, [self.operand(a) for a in node.args], node.attrs)
        self.body = self.inner[group.output]

    def operand(self, a):
        if a in self.members:
            return self.inner[a]
        if isinstance(a, Constant) and a.data.ndim == 0:
            return a
        if isinstance(a, Tuple):
            return Tuple([self.operand(f) for f in a.fields])
        if a not in self.param_of:
            p = Var(f"p{len(self.params)}", a.checked_type)
            self.param_of[a] = p
            self.params.append(p)
            self.args.append(self.new_of[a])
        return self.param_of[a]

    def call(self) -> Call:
        func = Function(self.params, self.body, None, None, {"Primitive": 1})
        infer(func)
        return Call(func, self.args)


def fuse_ops(func: Function, fuse_opt_level: int = 1, max_depth: int = 256) -> Function:
    infer(func)
    group_of = partition(func.body, fuse_opt_level, max_depth)
    new_of: dict = {}
    consumers = users(func.body)
    for node in post_order(func.body):
        group = group_of.get(node)
        if isinstance(node, Tuple) and node is not func.body and consumers[node] and all(
                group_of.get(c) is not None for c in consumers[node]):
            continue  # a tuple feeding only fused ops is rebuilt inside their functions
        if group is not None:
            if group.output is node:
                new_of[node] = _Builder(group, new_of).call()
            continue
        new_of[node] = _rebuild(node, new_of)
    out = Function(func.params, new_of[func.body], func.ret_type, func.type_params, func.attrs)
    return infer(out)


def _rebuild(node, new_of: dict):
    if isinstance(node, Tuple):
        return Tuple([new_of[f] for f in node.fields])
    if isinstance(node, TupleGetItem):
        return TupleGetItem(new_of[node.tuple_value], node.index)
    if isinstance(node, Call):
        op = new_of.get(node.op, node.op)
        return Call(op, [new_of[a] for a in node.args], node.attrs)
    if isinstance(node, Let):
        return Let(new_of[node.var], new_of[node.value], new_of[node.body])
    if isinstance(node, If):
        return If(new_of[node.cond], new_of[node.true_branch], new_of[node.false_branch])
    return node  # Var, Constant, Function, GlobalVar
