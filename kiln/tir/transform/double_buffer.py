"""Double-buffer (or P-stage pipeline) shared tiles fetched in a loop (``s[AS].double_buffer()``;
kiln's ``double_buffer(stages=P)`` keeps P copies).

te lowering marks the fetch of such a stage with ``AttrStmt(data, "double_buffer_scope", P)``.
A serial loop whose body allocates the stage and fetches it first::

    for k in [0, n): Allocate AS[S]: seq(fetch(k) -> AS, ..., use AS)

becomes, with AS P times as large and iteration k using slot ``k % P``::

    Allocate AS[P*S]:
      fetch(j) -> slot j, for j < P - 1                    (async, one group each)
      for k in [0, n):
        wait until at most P - 2 groups are in flight; barrier
        if k + P - 1 < n: fetch(k + P - 1) -> slot (k+P-1) % P   (async, one group, maybe empty)
        use slot k % P

The barrier at the top orders both hazards: tile k is complete before it is read, and the reads
of iteration k - 1 are done before its slot is overwritten.

A consumer that reads its tile asynchronously and is waited for one step late (Hopper's wgmma:
the products of tile k - 1 are complete only after those of tile k were issued) marks itself
with ``AttrStmt(_, "kiln.async_consumer_lag", L)``; the loop then fetches P - 1 - L tiles ahead
(waiting until at most P - 2 - L groups are in flight), so the slot overwritten in iteration k is
that of tile k - 1 - L, whose readers are complete in every thread once the barrier is passed.
The prefetches are marked
``kiln.async_fetch``: the CUDA printer issues their aligned copies as ``cp.async`` (sm_80 and
newer), so the loads run while the tensor cores work, and barrier insertion (thread_sync.py)
does not fence them again. Runs after flattening (one index per access).

Fetches that are bulk tensor copies (``tir.kiln_tma_load``, Hopper's copy engine: one thread
issues a whole tile) complete on an mbarrier per slot instead of cp.async groups: the slots'
barriers are initialized before the first fetch, each fetch arms its slot's barrier with the
bytes it brings (``tir.kiln_tma_arrive``) and passes it to its copies, and iteration k waits for
phase (k / P) % 2 of slot k % P's barrier (``tir.kiln_tma_wait``) before the block barrier.
"""

from __future__ import annotations

from dataclasses import replace

from kiln.ir import expr as E
from kiln.ir.dtype import BOOL_T
from kiln.ir.functor import Mutator, post_order_visit, substitute
from kiln.ir.stmt import (Allocate, AttrStmt, BufferStore, Evaluate, ForKind, IfThenElse, PrimFunc, SeqStmt,
                          decl_buffer, seq)

MARK = "double_buffer_scope"
LAG = "kiln.async_consumer_lag"
ASYNC = "kiln.async_fetch"
WAIT_OP = "kiln.async_wait"


def inject_double_buffer(func: PrimFunc) -> PrimFunc:
    body = _Inject().visit(func.body)
    return func if body is func.body else replace(func, body=body)


def async_wait(pending: int):
    """Wait until at most ``pending`` groups of async copies are in flight."""
    return Evaluate(E.Call(E.const(0).dtype, WAIT_OP, (E.const(pending),)))


class _Inject(Mutator):
    def visit_For(self, op):
        op = self.generic_visit(op)
        allocs, b = [], op.body
        while isinstance(b, Allocate):
            allocs.append(b)
            b = b.body
        if op.kind != ForKind.SERIAL or not isinstance(b, SeqStmt) or not isinstance(op.extent, E.IntImm):
            return op
        fetches = [s for s in b.seq if isinstance(s, AttrStmt) and s.attr_key == MARK]
        marked = {id(s.node) for s in fetches}
        doubled = [a for a in allocs if id(a.buffer.data) in marked]
        if not fetches or len(doubled) != len(marked) or op.extent.value < 2:
            return op
        rest = [s for s in b.seq if not (isinstance(s, AttrStmt) and s.attr_key == MARK)]
        k = op.loop_var
        sizes = {id(a.buffer.data): _size(a) for a in doubled}
        if any(n is None for n in sizes.values()):
            return op
        stages = max(2, min(op.extent.value, max(int(getattr(f.value, "value", 2)) for f in fetches)))
        lags = []
        post_order_visit(seq(*rest), lambda n: lags.append(int(n.value.value)) if isinstance(n, AttrStmt)
                         and n.attr_key == LAG else None)
        lag = max(lags, default=0)
        if stages - lag < 2:
            from kiln.errors import ScheduleError
            raise ScheduleError(f"a shared tile whose reader completes {lag} step(s) late needs at least {lag + 2} "
                                f"slots; this loop of {op.extent.value} steps has {stages}")

        def slot(stmt, which):
            return _Offset({key: E.Mul(which, E.const(n, which.dtype), which.dtype) for key, n in sizes.items()}).visit(stmt)

        def fetch(at, which):
            return seq(*[slot(substitute(f.body, {k: at}), which) for f in fetches])

        def mod(x):
            return E.FloorMod(x, E.const(stages, k.dtype), k.dtype)

        def marked(stmt):
            return AttrStmt(E.const(0), ASYNC, E.const(1), stmt)

        ahead = E.Add(k, E.const(stages - 1 - lag, k.dtype), k.dtype)
        from .thread_sync import barrier

        bulk = _bulk_bytes(fetches)
        if bulk:  # bulk tensor copies completing on one mbarrier per slot (module doc)
            bars = decl_buffer((stages,), "uint64", "kiln_tma_bar", scope="shared")
            plain_fetch = fetch

            def fetch(at, which):
                return seq(_call("tir.kiln_tma_arrive", bars.data, which, bulk),
                           _WithBarrier(bars.data, which).visit(plain_fetch(at, which)))

            ready = seq(_call("tir.kiln_tma_wait", bars.data, mod(k),
                              E.FloorMod(E.FloorDiv(k, E.const(stages, k.dtype), k.dtype), E.const(2, k.dtype),
                                         k.dtype)), barrier())
        else:
            ready = seq(async_wait(stages - 2 - lag), barrier())
        first = [marked(fetch(E.const(j, k.dtype), E.const(j, k.dtype))) for j in range(stages - 1 - lag)]
        loop_body = seq(ready, marked(IfThenElse(E.LT(ahead, op.extent, BOOL_T), fetch(ahead, mod(ahead)))),
                        slot(seq(*rest), mod(k)))
        inner = [a for a in allocs if a not in doubled]
        for a in reversed(inner):
            loop_body = replace(a, body=loop_body)
        # The barrier first: the tile's last readers (an enclosing loop's previous iteration) are done.
        if bulk:  # (re)initialized once the previous run's waits are done
            stmt = seq(barrier(), _call("tir.kiln_tma_init", bars.data, stages), barrier(), *first,
                       replace(op, body=loop_body))
        else:
            stmt = seq(barrier(), *first, replace(op, body=loop_body))
        for a in reversed(doubled):
            stmt = Allocate(a.buffer, (E.const(stages * sizes[id(a.buffer.data)], a.extents[0].dtype),), stmt,
                            a.condition)
        if bulk:
            stmt = Allocate(bars, (E.const(stages, "int32"),), stmt)
        return stmt


TMA_LOAD = "tir.kiln_tma_load"


def _call(op, *args):
    return Evaluate(E.Call(E.const(0).dtype, op, tuple(E.convert(a) for a in args)))


def _bulk_bytes(fetches) -> int:
    """Bytes the bulk tensor copies among ``fetches`` bring per slot (0: none, cp.async fetches).
    A copy's args: dst, src, x, y, width, height, row_bytes, box_w, box_h, elem_bytes, swizzle."""
    calls = []
    for f in fetches:
        post_order_visit(f.body, lambda n: calls.append(n) if isinstance(n, E.Call) and n.op == TMA_LOAD else None)
    return sum(c.args[7].value * c.args[8].value * c.args[9].value for c in calls)


class _WithBarrier(Mutator):
    """Bulk tensor copies completing on slot ``which`` of the barriers ``bars``."""

    def __init__(self, bars, which):
        super().__init__()
        self.extra = (bars, which)

    def visit_Call(self, e):
        e = self.generic_visit(e)
        return E.Call(e.dtype, e.op, e.args + self.extra) if e.op == TMA_LOAD else e


def _size(a: Allocate):
    n = 1
    for x in a.extents:
        if not isinstance(x, E.IntImm):
            return None
        n *= x.value
    return n


class _Offset(Mutator):
    """Accesses of the doubled buffers (by data Var id) shifted by their half's offset."""

    def __init__(self, offsets: dict):
        super().__init__()
        self.offsets = offsets

    def visit_BufferLoad(self, e):
        e = self.generic_visit(e)
        off = self.offsets.get(id(e.buffer.data))
        return e if off is None else E.BufferLoad(e.buffer, (_add(e.indices[0], off),), e.dtype)

    def visit_BufferStore(self, s):
        s = self.generic_visit(s)
        off = self.offsets.get(id(s.buffer.data))
        return s if off is None else BufferStore(s.buffer, s.value, (_add(s.indices[0], off),))

    def visit_Call(self, e):
        e = self.generic_visit(e)
        if e.op == "tir.tvm_access_ptr" and id(e.args[1]) in self.offsets:
            args = list(e.args)
            args[2] = E.Add(args[2], self.offsets[id(e.args[1])], args[2].dtype)
            return E.Call(e.dtype, e.op, tuple(args))
        return e


def _add(index, off):
    if isinstance(index, E.Ramp):
        return E.Ramp(E.Add(index.base, E.cast(off, index.base.dtype), index.base.dtype), index.stride, index.lanes,
                      index.dtype)
    return E.Add(index, E.cast(off, index.dtype), index.dtype)
