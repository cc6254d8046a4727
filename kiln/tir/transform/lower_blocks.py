"""Blocks to plain loops: the first pass of the TIR pipeline (``tir.LowerBlocks``).

Each ``BlockRealize`` becomes its body with the block's iteration variables replaced by their
bound values, under ``if predicate:`` when there is one, inside an ``Allocate`` per scratch
buffer. A block's init runs where the first reduction step of each spatial point would: it is
hoisted above the enclosing loops that the block sits in alone and whose variables feed only
reduction axes (where kiln's TE lowering puts a reduction's init), and it is guarded by
"every remaining reduction value is at its domain's minimum" when reduction loops stay outside
it (a reordered or split reduction), so it runs once per output element either way.
"""

from __future__ import annotations

from dataclasses import replace

from kiln.ir import expr as E
from kiln.ir.block import BlockRealize
from kiln.ir.functor import Mutator, post_order_visit, substitute
from kiln.ir.stmt import Allocate, For, IfThenElse, PrimFunc, seq
from kiln.tir.simplify import simplify


class _Pending:
    """A lowered block whose init may still move above the loops around it."""

    def __init__(self, init, guards: list, body, reduce_ids: set, spatial_ids: set):
        self.init, self.guards, self.body = init, guards, body
        self.reduce_ids, self.spatial_ids = reduce_ids, spatial_ids

    def resolve(self):
        conds = [c for c in (simplify(g) for g in self.guards) if not (isinstance(c, E.IntImm) and c.value)]
        init = self.init
        if conds:
            cond = conds[0]
            for c in conds[1:]:
                cond = E.And(cond, c, E.BOOL_T)
            init = IfThenElse(cond, init)
        return seq(init, self.body)


def _var_ids(exprs) -> set:
    out: set = set()
    for e in exprs:
        post_order_visit(e, lambda n: out.add(id(n)) if isinstance(n, E.Var) else None)
    return out


class _Lower(Mutator):
    def visit(self, node):
        out = super().visit(node)
        return out.resolve() if isinstance(out, _Pending) else out

    def visit_For(self, op: For):
        body = super().visit(op.body)
        if isinstance(body, _Pending):
            if id(op.loop_var) in body.reduce_ids and id(op.loop_var) not in body.spatial_ids:
                guards = [substitute(g, {op.loop_var: op.min}) for g in body.guards]
                return _Pending(body.init, guards, replace(op, body=body.body), body.reduce_ids, body.spatial_ids)
            body = body.resolve()
        return op if body is op.body else replace(op, body=body)

    def visit_BlockRealize(self, op: BlockRealize):
        blk = op.block
        binding = {iv.var: v for iv, v in zip(blk.iter_vars, op.iter_values)}
        body = substitute(self.visit(blk.body), binding)
        pred = op.predicate
        always = isinstance(pred, E.IntImm) and pred.value
        if not always:
            body = IfThenElse(pred, body)
        if blk.init is not None:
            init = substitute(self.visit(blk.init), binding)
            reduce = [(iv, v) for iv, v in zip(blk.iter_vars, op.iter_values) if iv.iter_type == E.IterType.COMM_REDUCE]
            guards = ([] if always else [pred]) + [E.EQ(v, iv.dom.min, E.BOOL_T) for iv, v in reduce]
            spatial = [v for iv, v in zip(blk.iter_vars, op.iter_values) if iv.iter_type != E.IterType.COMM_REDUCE]
            pending = _Pending(init, guards, body, _var_ids(v for _, v in reduce), _var_ids(spatial))
            if not blk.alloc_buffers:
                return pending
            body = pending.resolve()
        for b in reversed(blk.alloc_buffers):
            n = E.const(1, b.shape[0].dtype) if b.shape else E.const(1)
            for d in b.shape:
                n = n * d
            body = Allocate(b, (simplify(n),), body)
        return body


def lower_blocks(func: PrimFunc) -> PrimFunc:
    """The function with every block lowered to loops (a no-op for functions without blocks)."""
    body = _Lower().visit(func.body)
    return func if body is func.body else replace(func, body=body)
