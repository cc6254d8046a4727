"""Finding and replacing statements in a PrimFunc body, for the schedule primitives.

IR nodes are immutable, so a primitive rebuilds the path from the function body down to what
it changes; ``replace`` does that by identity. ``path_to`` gives the ancestors of a statement
(outermost first); loops and blocks are found by their loop variable and their name.
"""

from __future__ import annotations

import dataclasses

from kiln.errors import ScheduleError
from kiln.ir.block import Block, BlockRealize
from kiln.ir.functor import Mutator
from kiln.ir.stmt import For, SeqStmt, Stmt, seq


def children(s) -> list:
    """The statements directly inside s (a block's init first, then its body)."""
    if isinstance(s, SeqStmt):
        return list(s.seq)
    if isinstance(s, BlockRealize):
        return [s.block]
    if isinstance(s, Block):
        return [x for x in (s.init, s.body) if x is not None]
    out = []
    for f in dataclasses.fields(s):
        v = getattr(s, f.name)
        if isinstance(v, Stmt):
            out.append(v)
    return out


def walk(s, fn, path=()) -> None:
    """fn(stmt, ancestors) for every statement, outermost first."""
    stack = [(s, tuple(path))]
    while stack:
        node, anc = stack.pop()
        fn(node, anc)
        stack.extend((c, anc + (node,)) for c in reversed(children(node)))


def find_all(body, pred) -> list:
    out = []
    walk(body, lambda n, anc: out.append((n, anc)) if pred(n) else None)
    return out


def block_realize(body, name: str, func_name: str = "main") -> tuple:
    """(BlockRealize, ancestors) of the block called name."""
    hits = find_all(body, lambda n: isinstance(n, BlockRealize) and n.block.name_hint == name)
    if not hits:
        names = [n.block.name_hint for n, _ in find_all(body, lambda n: isinstance(n, BlockRealize))]
        raise ScheduleError(f"get_block: no block named {name!r} in function {func_name}; its blocks are {names}")
    if len(hits) > 1:
        raise ScheduleError(f"get_block: {len(hits)} blocks are named {name!r} in function {func_name}; "
                            "block names must be unique to be scheduled")
    return hits[0]


def loop(body, var, what: str = "loop") -> tuple:
    """(For, ancestors) of the loop over var."""
    hits = find_all(body, lambda n: isinstance(n, For) and n.loop_var is var)
    if not hits:
        raise ScheduleError(f"{what} {var.name} is no longer in the function (a split, fuse or tensorize replaced "
                            "it); use the loops that primitive returned")
    return hits[0]


def loops_of(ancestors) -> list:
    """The For statements among ancestors, below the innermost enclosing block."""
    out = []
    for a in ancestors:
        if isinstance(a, Block):
            out = []
        elif isinstance(a, For):
            out.append(a)
    return out


def replace(body, old, new):
    """body with the statement old (by identity) replaced by new (None removes it from its sequence)."""

    class _Replace(Mutator):
        def visit(self, node):
            if node is old:
                return new
            return super().visit(node)

        def visit_SeqStmt(self, op):
            items = [self.visit(s) for s in op.seq]
            if all(a is b for a, b in zip(items, op.seq)):
                return op
            return seq(*[s for s in items if s is not None])

    out = _Replace().visit(body)
    if out is body and old is not body:
        raise AssertionError("schedule: the statement to replace is not in the function")
    return out


def subtree_root(realize, ancestors) -> tuple:
    """The outermost statement that holds only this block: its loops up to the first loop that holds more."""
    root, k = realize, len(ancestors) - 1
    while k >= 0 and isinstance(ancestors[k], For) and ancestors[k].body is root:
        root, k = ancestors[k], k - 1
    return root, ancestors[:k + 1]


def scope_root(realize, ancestors):
    """The outermost loop around the block within its scope (the function or the enclosing block)."""
    root = realize
    for a in reversed(ancestors):
        if isinstance(a, Block):
            break
        if isinstance(a, For):
            root = a
    return root
