"""``te.create_prim_func``: a compute DAG as a PrimFunc of blocks, ready for ``tvm.tir.Schedule``.

Each compute op becomes one loop nest (its axes, then its reduction axes) around one block named
after the op, whose iteration variables are bound to the loops, as TVM 0.13 builds it:
``tir.Schedule(te.create_prim_func([A, B, C]))`` schedules the same blocks a TVMScript module
would have. Ops outside the argument list get a buffer of their own. A reduction's block reads
the reduction's inputs and has an init storing the identity.
"""

from __future__ import annotations

from typing import Sequence

from kiln.ir import expr as E
from kiln.ir.block import Block, BlockRealize, BufferRegion
from kiln.ir.dtype import HANDLE_T
from kiln.ir.functor import Mutator
from kiln.ir.stmt import Allocate, Buffer, BufferStore, Evaluate, For, ForKind, PrimFunc, seq
from kiln.tir.simplify import simplify

from .lower import lower_to_primfunc
from .schedule import create_schedule
from .tensor import ComputeOp, PlaceholderOp, Tensor


def create_prim_func(ops: Sequence[Tensor]):
    """The schedule-free path: a PrimFunc computing the given tensors, one T.block per compute op
    (kiln/te/prim_func.py), for ``tvm.tir.Schedule``; ops the block form does not cover get the
    default loop nests."""
    tensors = list(ops)
    if supports(tensors):
        return block_prim_func(tensors)
    outputs = [t.op for t in tensors if not isinstance(t.op, PlaceholderOp)]
    return lower_to_primfunc(create_schedule(outputs), tensors, "main")


def supports(tensors) -> bool:
    """Whether every op is one the block form covers (tensor arguments only; single-output
    reductions without conditions)."""
    if not all(isinstance(t, (Tensor, E.Var)) for t in tensors):
        return False
    for op in _ops([t for t in tensors if isinstance(t, Tensor)]):
        if not isinstance(op, ComputeOp):
            return False
        red = op.body[0]
        if isinstance(red, E.Reduce):
            cond = red.condition
            if len(op.body) != 1 or not (isinstance(cond, E.IntImm) and cond.value):
                return False
    return True


def _ops(tensors) -> list:
    """Compute ops reachable from the tensors, producers first."""
    order, seen = [], set()

    def visit(op):
        if id(op) in seen or isinstance(op, PlaceholderOp):
            return
        seen.add(id(op))
        for t in getattr(op, "input_tensors", []):
            visit(t.op)
        order.append(op)

    for t in tensors:
        visit(t.op)
    return order


class _ToBuffers(Mutator):
    def __init__(self, buffers: dict, axis_map: dict):
        super().__init__()
        self.buffers, self.axis_map = buffers, axis_map

    def visit_Var(self, v):
        return self.axis_map.get(id(v), v)

    def visit_ProducerLoad(self, load):
        indices = tuple(self.visit(i) for i in load.indices)
        return E.BufferLoad(self.buffers[id(load.producer)], indices, load.dtype)


def block_prim_func(tensors, name: str = "main") -> PrimFunc:
    from kiln.tir.schedule.access import infer_regions

    tensors = list(tensors)
    params, buffer_map, buffers = [], {}, {}
    for t in tensors:
        if isinstance(t, E.Var):  # a scalar parameter (a symbolic size)
            params.append(t)
            continue
        handle = E.Var(t.name, HANDLE_T)
        buf = Buffer(t.name, E.Var(t.name, HANDLE_T), t.dtype, tuple(t.shape))
        params.append(handle)
        buffer_map[handle] = buf
        buffers[id(t)] = buf
    scratch = []
    nests = []
    for op in _ops([t for t in tensors if not isinstance(t, E.Var)]):
        for t in op.outputs:
            if id(t) not in buffers:
                buffers[id(t)] = Buffer(t.name, E.Var(t.name, HANDLE_T), t.dtype, tuple(t.shape))
                scratch.append(buffers[id(t)])
        nests.append(_nest(op, buffers, infer_regions))
    body = seq(*nests)
    for b in reversed(scratch):
        n = E.const(1)
        for d in b.shape:
            n = n * d
        body = Allocate(b, (simplify(n),), body)
    return PrimFunc(tuple(params), body, None, buffer_map, {"global_symbol": name})


def _nest(op: ComputeOp, buffers: dict, infer_regions):
    axes = list(op.axis) + list(op.reduce_axis)
    loops = [E.Var(iv.var.name, iv.var.dtype) for iv in axes]
    ivs = [E.IterVar(E.Range(iv.dom.min, iv.dom.extent), E.Var("v_" + iv.var.name, iv.var.dtype),
                     E.IterType.COMM_REDUCE if k >= len(op.axis) else E.IterType.DATA_PAR)
           for k, iv in enumerate(axes)]
    conv = _ToBuffers(buffers, {id(iv.var): b.var for iv, b in zip(axes, ivs)})
    idx = tuple(b.var for b in ivs[:len(op.axis)])
    outs = [buffers[id(t)] for t in op.outputs]
    init = None
    red = op.body[0]
    if isinstance(red, E.Reduce):
        out = outs[0]
        src = [conv.visit(s) for s in red.source]
        ident = [conv.visit(x) for x in red.init] if red.init else red.combiner.identity([out.dtype])
        init = BufferStore(out, E.cast(ident[0], out.dtype), idx)
        combined = red.combiner.combine([E.BufferLoad(out, idx, out.dtype)], src)[0]
        body = BufferStore(out, E.cast(combined, out.dtype), idx)
        reads = infer_regions(seq(*[Evaluate(s) for s in src]))[0]
    else:
        body = seq(*[BufferStore(b, E.cast(conv.visit(v), b.dtype), idx) for b, v in zip(outs, op.body)])
        reads = infer_regions(body)[0]
    writes = tuple(BufferRegion(b, tuple(E.Range(i, E.const(1, i.dtype)) for i in idx)) for b in outs)
    block = Block(op.name, tuple(ivs), reads, writes, body, init)
    stmt = BlockRealize(tuple(loops), E.const(True, E.BOOL_T), block)
    for var, iv in reversed(list(zip(loops, axes))):
        stmt = For(var, iv.dom.min, iv.dom.extent, ForKind.SERIAL, stmt)
    return stmt

