"""cache_read and cache_write: stage a buffer through a new one in another storage scope.

cache_read adds a block ``<buffer>_<scope>`` copying the buffer into the cache (after the block
that produces it, or first in the function for an argument) and makes the consumers read the
cache; cache_write makes the block write the cache and adds a block ``<buffer>_<scope>`` right
after it copying the cache back. Both copy the whole buffer; ``compute_at`` /
``reverse_compute_at`` then shrink the copy to what one loop iteration needs.
"""

from __future__ import annotations

from dataclasses import replace as _with

from kiln.errors import ScheduleError
from kiln.ir import expr as E
from kiln.ir.block import Block, BlockRealize, BufferRegion
from kiln.ir.functor import Mutator
from kiln.ir.stmt import Allocate, Buffer, BufferStore, For, ForKind, seq
from kiln.tir.simplify import simplify

from . import tree


class _Rename(Mutator):
    """Accesses of old become accesses of new (loads, stores and the read/write regions)."""

    def __init__(self, old: Buffer, new: Buffer, loads_only: bool = False):
        super().__init__()
        self.old, self.new, self.loads_only = old, new, loads_only

    def visit_Block(self, op):
        if not self.loads_only:
            return self.generic_visit(op)
        return _with(op, reads=tuple(self.visit(r) for r in op.reads), body=self.visit(op.body),
                     init=self.visit(op.init) if op.init is not None else None)

    def visit_BufferLoad(self, op):
        op = self.generic_visit(op)
        return _with(op, buffer=self.new) if op.buffer is self.old else op

    def visit_BufferStore(self, op):
        op = self.generic_visit(op)
        return _with(op, buffer=self.new) if op.buffer is self.old and not self.loads_only else op

    def visit_BufferRegion(self, op):
        op = self.generic_visit(op)
        return _with(op, buffer=self.new) if op.buffer is self.old else op


def cache_buffer(buf: Buffer, scope: str) -> Buffer:
    name = f"{buf.name}_{scope.replace('.', '_')}"
    return Buffer(name, E.Var(name, buf.data.dtype), buf.dtype, buf.shape, scope=scope)


def copy_nest(src: Buffer, dst: Buffer, name: str):
    """Loops over the whole buffer around a block copying src into dst."""
    loops = [E.Var(f"ax{k}", d.dtype) for k, d in enumerate(src.shape)]
    ivs = [E.IterVar(E.Range(E.const(0, d.dtype), d), E.Var(f"v{k}", d.dtype), E.IterType.DATA_PAR)
           for k, d in enumerate(src.shape)]
    idx = tuple(iv.var for iv in ivs)
    point = tuple(E.Range(i, E.const(1, i.dtype)) for i in idx)
    body = BufferStore(dst, E.BufferLoad(src, idx, src.dtype), idx)
    blk = Block(name, tuple(ivs), (BufferRegion(src, point),), (BufferRegion(dst, point),), body)
    stmt = BlockRealize(tuple(loops), E.const(True, E.BOOL_T), blk)
    for v, d in reversed(list(zip(loops, src.shape))):
        stmt = For(v, E.const(0, v.dtype), d, ForKind.SERIAL, stmt)
    return stmt


def _allocate(body, buf: Buffer):
    """body with buf allocated for the whole function, inside the function's own allocations."""
    n = E.const(1, buf.shape[0].dtype) if buf.shape else E.const(1)
    for d in buf.shape:
        n = n * d
    if isinstance(body, Allocate):
        return _with(body, body=_allocate(body.body, buf))
    return Allocate(buf, (simplify(n),), body)


def _prepend(body, stmt):
    if isinstance(body, Allocate):
        return _with(body, body=_prepend(body.body, stmt))
    return seq(stmt, body)


def _index_check(what: str, blk, regions, index: int, kind: str):
    if not isinstance(index, int) or not 0 <= index < len(regions):
        raise ScheduleError(f"{what}: block {blk.name_hint!r} {kind} {len(regions)} buffers "
                            f"({[r.buffer.name for r in regions]}); index {index} is out of range")
    return regions[index].buffer


def cache_read(body, name: str, index: int, scope: str, consumer_blocks=None) -> tuple:
    realize, _ = tree.block_realize(body, name)
    buf = _index_check("cache_read", realize.block, realize.block.reads, index, "reads")
    cache = cache_buffer(buf, scope)
    names = None if consumer_blocks is None else set(consumer_blocks) | {name}
    readers = [n for n, _ in tree.find_all(body, lambda n: isinstance(n, BlockRealize)
                                           and any(r.buffer is buf for r in n.block.reads)
                                           and (names is None or n.block.name_hint in names))]
    for r in readers:
        if any(w.buffer is buf for w in r.block.writes):
            raise ScheduleError(f"cache_read: block {r.block.name_hint!r} both reads and writes {buf.name}; "
                                "stage it with cache_write instead")
        body = tree.replace(body, r, _Rename(buf, cache, loads_only=True).visit(r))
    nest = copy_nest(buf, cache, cache.name)
    producers = tree.find_all(body, lambda n: isinstance(n, BlockRealize) and any(w.buffer is buf for w in n.block.writes))
    if producers:
        root = tree.scope_root(*producers[-1])
        body = tree.replace(body, root, seq(root, nest))
    else:
        body = _prepend(body, nest)
    return _allocate(body, cache), cache.name


def cache_write(body, name: str, index: int, scope: str) -> tuple:
    realize, anc = tree.block_realize(body, name)
    buf = _index_check("cache_write", realize.block, realize.block.writes, index, "writes")
    cache = cache_buffer(buf, scope)
    root = tree.scope_root(realize, anc)
    new_root = tree.replace(root, realize, _with(realize, block=_Rename(buf, cache).visit(realize.block)))
    body = tree.replace(body, root, seq(new_root, copy_nest(cache, buf, cache.name)))
    return _allocate(body, cache), cache.name
