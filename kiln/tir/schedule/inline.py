"""compute_inline: a producer block disappears into the blocks that read its buffer.

The block must be one store ``B[v0, v1, ...] = value`` over its own spatial variables (no init,
no predicate) into a buffer the function allocates (not a parameter). Every load ``B[e0, e1, ...]``
elsewhere becomes value with v_k replaced by e_k; the readers' ``T.reads`` take the producer's
reads in B's place, and B's allocation goes once nothing accesses B.
"""

from __future__ import annotations

from dataclasses import replace as _with

from kiln.errors import ScheduleError
from kiln.ir import expr as E
from kiln.ir.block import BlockRealize
from kiln.ir.functor import Mutator, substitute
from kiln.ir.stmt import Allocate, BufferStore, SeqStmt

from . import tree
from .access import infer_regions


class _Inline(Mutator):
    def __init__(self, buf, ivs, value):
        super().__init__()
        self.buf, self.ivs, self.value = buf, ivs, value

    def visit_BufferLoad(self, op):
        op = self.generic_visit(op)
        if op.buffer is not self.buf:
            return op
        return substitute(self.value, {iv.var: i for iv, i in zip(self.ivs, op.indices)})

    def visit_Block(self, op):
        new = self.generic_visit(op)
        if not any(r.buffer is self.buf for r in op.reads):
            return new
        inferred = infer_regions(new.body)[0]
        reads = []
        for r in op.reads:
            if r.buffer is not self.buf:
                reads.append(r)
                continue
            for extra in inferred:
                if not any(x.buffer is extra.buffer for x in reads) and not any(
                        x.buffer is extra.buffer for x in op.reads):
                    reads.append(extra)
        return _with(new, reads=tuple(reads))


def _store_of(blk, name: str):
    body = blk.body
    if blk.init is not None or not isinstance(body, BufferStore):
        raise ScheduleError(f"compute_inline: block {name!r} must be a single store without init to be inlined")
    ids = {id(iv.var): iv for iv in blk.iter_vars}
    ivs = []
    for i in body.indices:
        iv = ids.get(id(i)) if isinstance(i, E.Var) else None
        if iv is None or iv.iter_type != E.IterType.DATA_PAR or any(iv is x for x in ivs):
            raise ScheduleError(f"compute_inline: block {name!r} stores {body.buffer.name}[{', '.join(map(str, body.indices))}]; "
                                "each index must be a distinct spatial variable of the block")
        ivs.append(iv)
    if len(ivs) != len(blk.iter_vars):
        raise ScheduleError(f"compute_inline: block {name!r} has variables its store does not index")
    return body, ivs


def compute_inline(body, params: set, name: str):
    realize, anc = tree.block_realize(body, name)
    blk = realize.block
    store, ivs = _store_of(blk, name)
    buf = store.buffer
    if id(buf.data) in params:
        raise ScheduleError(f"compute_inline: block {name!r} writes {buf.name}, a parameter of the function; "
                            "only intermediate buffers can be inlined")
    if not (isinstance(realize.predicate, E.IntImm) and realize.predicate.value):
        raise ScheduleError(f"compute_inline: block {name!r} has a T.where predicate")
    root, parents = tree.subtree_root(realize, anc)
    if not parents or not isinstance(parents[-1], SeqStmt):
        raise ScheduleError(f"compute_inline: block {name!r} is the only statement of its scope; nothing reads it")
    writers = tree.find_all(body, lambda n: isinstance(n, BlockRealize) and n is not realize
                            and any(w.buffer is buf for w in n.block.writes))
    if writers:
        raise ScheduleError(f"compute_inline: {buf.name} is written by other blocks too "
                            f"({[n.block.name_hint for n, _ in writers]})")
    body = tree.replace(body, root, None)
    body = _Inline(buf, ivs, store.value).visit(body)
    allocs = tree.find_all(body, lambda n: isinstance(n, Allocate) and n.buffer is buf)
    for alloc, _ in allocs:
        body = tree.replace(body, alloc, alloc.body)
    return body

