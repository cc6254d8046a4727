"""What a block reads and writes: index bounds over loop domains and buffer regions.

``bound(e, doms)`` gives the smallest and largest value of an index expression when the
variables in doms range over their Ranges (affine expressions, divisions and remainders by
constants, min/max); ``infer_regions(body)`` is the ``T.reads``/``T.writes`` of a block written
without them: one region per buffer, in order of first access, covering every access.
"""

from __future__ import annotations

from kiln.ir import expr as E
from kiln.ir.block import BlockRealize, BufferRegion
from kiln.ir.functor import Visitor, substitute, uses_var
from kiln.ir.stmt import BufferStore, For
from kiln.tir.simplify import simplify


class Unbounded(Exception):
    """An index whose range the analysis cannot tell (a load inside an index, a variable divisor)."""


def bound(e, doms: dict) -> tuple:
    """(lowest, highest) value of e, both inclusive, when Vars with id in doms range over their Range."""
    lo, hi = _bound(e, doms)
    return simplify(lo), simplify(hi)


def _bound(e, doms):
    if isinstance(e, E.Var):
        r = doms.get(id(e))
        return (e, e) if r is None else (r.min, r.min + r.extent - 1)
    if isinstance(e, (E.IntImm, E.FloatImm)) or not uses_var(e, lambda v: id(v) in doms):
        return e, e
    if isinstance(e, E.Add):
        (a0, a1), (b0, b1) = _bound(e.a, doms), _bound(e.b, doms)
        return a0 + b0, a1 + b1
    if isinstance(e, E.Sub):
        (a0, a1), (b0, b1) = _bound(e.a, doms), _bound(e.b, doms)
        return a0 - b1, a1 - b0
    if isinstance(e, E.Mul):
        c, x = (e.a, e.b) if isinstance(e.a, E.IntImm) else (e.b, e.a)
        if isinstance(c, E.IntImm):
            x0, x1 = _bound(x, doms)
            return (x0 * c, x1 * c) if c.value >= 0 else (x1 * c, x0 * c)
    if isinstance(e, E.FloorDiv) and isinstance(e.b, E.IntImm) and e.b.value > 0:
        a0, a1 = _bound(e.a, doms)
        return E.FloorDiv(a0, e.b, e.dtype), E.FloorDiv(a1, e.b, e.dtype)
    if isinstance(e, E.FloorMod) and isinstance(e.b, E.IntImm) and e.b.value > 0:
        a0, a1 = (simplify(x) for x in _bound(e.a, doms))
        span = simplify(a1 - a0)
        q0, q1 = simplify(E.FloorDiv(a0, e.b, e.dtype)), simplify(E.FloorDiv(a1, e.b, e.dtype))
        if isinstance(span, E.IntImm) and span.value < e.b.value and _equal(q0, q1):
            return E.FloorMod(a0, e.b, e.dtype), E.FloorMod(a1, e.b, e.dtype)
        return E.const(0, e.dtype), E.const(e.b.value - 1, e.dtype)
    if isinstance(e, (E.Min, E.Max)):
        (a0, a1), (b0, b1) = _bound(e.a, doms), _bound(e.b, doms)
        make = type(e)
        return make(a0, b0, e.dtype), make(a1, b1, e.dtype)
    if isinstance(e, E.Cast):
        a0, a1 = _bound(e.value, doms)
        return E.Cast(e.dtype, a0), E.Cast(e.dtype, a1)
    raise Unbounded(str(e))


def _equal(a, b) -> bool:
    from kiln.ir.structural import structural_equal

    return structural_equal(a, b)


def region_of(buffer, index_bounds: list) -> BufferRegion:
    return BufferRegion(buffer, tuple(E.Range(lo, simplify(hi - lo + 1)) for lo, hi in index_bounds))


def union_bounds(buffer, a: list, b: list) -> list:
    """Per dimension, the bounds covering both a and b (the whole dimension where they do not compare)."""
    out = []
    for dim, (lo1, hi1), (lo2, hi2) in zip(buffer.shape, a, b):
        dlo, dhi = simplify(lo2 - lo1), simplify(hi2 - hi1)
        if isinstance(dlo, E.IntImm) and isinstance(dhi, E.IntImm):
            out.append((lo1 if dlo.value >= 0 else lo2, hi1 if dhi.value <= 0 else hi2))
        else:
            out.append((E.const(0, dim.dtype), simplify(dim - 1)))
    return out


class _Accesses(Visitor):
    def __init__(self, skip: set):
        super().__init__()
        self.skip = skip
        self.doms: dict = {}
        self.reads: dict = {}
        self.writes: dict = {}

    def note(self, table: dict, buffer, bounds: list) -> None:
        if id(buffer.data) in self.skip:
            return
        old = table.get(id(buffer))
        table[id(buffer)] = (buffer, bounds if old is None else union_bounds(buffer, old[1], bounds))

    def point(self, buffer, indices) -> list:
        try:
            return [bound(i, self.doms) for i in indices]
        except Unbounded:
            return [(E.const(0, d.dtype), simplify(d - 1)) for d in buffer.shape]

    def visit_For(self, op: For) -> None:
        self.visit(op.min)
        self.visit(op.extent)
        self.doms[id(op.loop_var)] = E.Range(op.min, op.extent)
        self.visit(op.body)
        del self.doms[id(op.loop_var)]

    def visit_BufferLoad(self, op) -> None:
        self.generic_visit(op)
        self.note(self.reads, op.buffer, self.point(op.buffer, op.indices))

    def visit_BufferStore(self, op: BufferStore) -> None:
        self.visit(op.value)
        for i in op.indices:
            self.visit(i)
        self.note(self.writes, op.buffer, self.point(op.buffer, op.indices))

    def visit_BlockRealize(self, op: BlockRealize) -> None:
        blk = op.block
        binding = {iv.var: v for iv, v in zip(blk.iter_vars, op.iter_values)}
        for table, regions in ((self.reads, blk.reads), (self.writes, blk.writes)):
            for r in regions:
                lows = [substitute(x.min, binding) for x in r.region]
                highs = [substitute(x.min + x.extent - 1, binding) for x in r.region]
                try:
                    bounds = [(bound(lo, self.doms)[0], bound(hi, self.doms)[1]) for lo, hi in zip(lows, highs)]
                except Unbounded:
                    bounds = [(E.const(0, d.dtype), simplify(d - 1)) for d in r.buffer.shape]
                self.note(table, r.buffer, bounds)


def infer_regions(body, alloc_buffers=()) -> tuple:
    """(reads, writes) of a block body: tuples of BufferRegion, one per buffer, in order of first access."""
    acc = _Accesses({id(b.data) for b in alloc_buffers})
    acc.visit(body)
    return (tuple(region_of(b, bounds) for b, bounds in acc.reads.values()),
            tuple(region_of(b, bounds) for b, bounds in acc.writes.values()))
